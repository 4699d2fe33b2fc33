"""vsqs.django in one process (docs/django.md): the backend's API on a local
directory and on ``memory://``, with the worker run in this process. The
real ``manage.py vsqs_worker`` processes are in tests/test_django_worker.py."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from importlib.util import find_spec
from pathlib import Path

import pytest

import vsqs
from vsqs.django import BadTaskRecord, InvalidTaskArguments, QueueBackend, Worker

from .support.django_setup import backend_on, configure

configure()

from tests.django_project import tasks  # noqa: E402  (Django must be configured first)
from vsqs._config import MAX_SECONDS  # noqa: E402
from vsqs.django import _tasks  # noqa: E402
from vsqs.django._backend import delay_until  # noqa: E402
from vsqs.django._runner import TaskRunner  # noqa: E402

#: The tasks framework in use, and its exceptions (the backport's InvalidTaskError
#: is Django 6's InvalidTask).
FRAMEWORK = importlib.import_module(_tasks.framework())
_exceptions = importlib.import_module(_tasks.framework() + ".exceptions")
InvalidTask = getattr(_exceptions, "InvalidTaskError", None) or _exceptions.InvalidTask
TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist


@pytest.fixture(params=["dir", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueBackend]:
    root = str(tmp_path / "root") if request.param == "dir" else f"memory://{tmp_path.name}"
    with backend_on(root) as b:
        yield b


@pytest.fixture(autouse=True)
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VSQS_DJANGO_OUT", str(tmp_path))
    return tmp_path


def runs(out: Path, key: str) -> list[str]:
    path = out / key
    return path.read_text().splitlines() if path.exists() else []


def run_tasks(backend: QueueBackend, count: int, *queues: str) -> int:
    return Worker(backend, queues or ["default"], max_tasks=count).run()


def test_the_framework_is_django_s_own_else_the_backport() -> None:
    # Python 3.11 here: Django 5.2 and the backport (Django 6 needs Python 3.12)
    expected = "django.tasks" if find_spec("django.tasks") else "django_tasks"
    assert _tasks.framework() == expected
    base = importlib.import_module(expected + ".backends.base").BaseTaskBackend
    assert issubclass(QueueBackend, base)
    assert _tasks.TaskResult is importlib.import_module(expected + ".base").TaskResult
    assert _tasks.task_backends is FRAMEWORK.task_backends


def test_enqueue_sends_the_task_and_writes_its_result_ready(backend: QueueBackend) -> None:
    result = tasks.record.enqueue("k")
    assert str(result.status) == "READY" and result.enqueued_at is not None
    queue = backend.queue("default")
    assert queue.stats().ready == 1
    body = json.loads(queue.peek()[0].body)
    assert (body["task"], body["args"], body["id"]) == (tasks.record.module_path, ["k"], result.id)
    again = backend.get_result(result.id)
    assert (again.id, str(again.status), again.args) == (result.id, "READY", ["k"])
    assert again.task.func is tasks.record.func


def test_a_task_runs_and_its_result_is_successful_with_the_return_value(
    backend: QueueBackend, out: Path
) -> None:
    result = tasks.add.enqueue(2, 3)
    assert run_tasks(backend, 1) == 1
    result.refresh()
    assert str(result.status) == "SUCCESSFUL"
    assert result.return_value == {"sum": 5, "parts": [2, 3]}  # JSON: the tuple is a list
    assert result.started_at and result.finished_at and result.finished_at >= result.started_at
    assert len(result.worker_ids) == 1 and result.attempts == 1
    assert backend.queue("default").stats().ready == 0


def test_a_failing_task_is_failed_with_its_exception_and_acknowledged(
    backend: QueueBackend, out: Path
) -> None:
    result = tasks.fail.enqueue("f")
    assert run_tasks(backend, 1) == 1
    result.refresh()
    assert str(result.status) == "FAILED"
    [error] = result.errors
    assert error.exception_class is ValueError
    assert "failed on purpose: f" in error.traceback and "Traceback" in error.traceback
    stats = backend.queue("default").stats()
    assert stats.ready + stats.in_flight + stats.delayed == 0  # not retried
    assert len(runs(out, "f")) == 1


def test_a_return_value_that_is_not_json_fails_the_task(backend: QueueBackend) -> None:
    result = tasks.unjsonable.enqueue()
    run_tasks(backend, 1)
    result.refresh()
    assert str(result.status) == "FAILED"
    assert result.errors[0].exception_class is TypeError


def test_context_and_async_tasks_run(backend: QueueBackend, out: Path) -> None:
    with_context = tasks.attempt.enqueue("c")
    coroutine = tasks.later.enqueue("a")
    assert run_tasks(backend, 2) == 2
    with_context.refresh()
    coroutine.refresh()
    assert (with_context.return_value, coroutine.return_value) == (1, "a")
    assert runs(out, "c")[0].split()[2] == "1"


def test_aenqueue_and_aget_result(backend: QueueBackend) -> None:
    async def both() -> tuple[str, str]:
        sent = await tasks.record.aenqueue("x")
        got = await backend.aget_result(sent.id)
        return sent.id, got.id

    sent, got = asyncio.run(both())
    assert sent == got and backend.queue("default").stats().ready == 1


def test_each_django_queue_is_a_vsqs_queue_under_the_root(tmp_path: Path) -> None:
    with backend_on(str(tmp_path / "root")) as backend:
        tasks.urgent.enqueue("u")
        tasks.record.enqueue("r")
        assert vsqs.list_queues(str(tmp_path / "root")) == [
            str(tmp_path / "root" / "default"),
            str(tmp_path / "root" / "urgent"),
        ]  # the results folder is no queue
        assert Worker(backend, ["urgent"], max_tasks=1).run() == 1
        left = [backend.queue(name).stats().ready for name in ("urgent", "default")]
        assert left == [0, 1]


def test_arguments_that_are_not_json_are_refused_before_anything_is_written(
    backend: QueueBackend,
) -> None:
    with pytest.raises(InvalidTaskArguments) as caught:
        tasks.record.enqueue(object())
    assert "\n" not in str(caught.value) and tasks.record.module_path in str(caught.value)
    assert isinstance(caught.value, vsqs.VsqsError) and isinstance(caught.value, TypeError)
    with pytest.raises(InvalidTaskArguments):
        tasks.record.enqueue(float("nan"))
    assert backend.queue("default").stats().ready == 0
    assert backend.results.ids() == []


def test_priorities_are_refused(backend: QueueBackend) -> None:
    assert not backend.supports_priority
    with pytest.raises(InvalidTask, match="priority"):
        tasks.record.using(priority=10)


def test_run_after_is_a_delay_of_the_message(backend: QueueBackend, out: Path) -> None:
    tasks.record.using(run_after=datetime.now(UTC) + timedelta(hours=1)).enqueue("later")
    stats = backend.queue("default").stats()
    assert (stats.ready, stats.delayed) == (0, 1)
    assert stats.next_visible_in is not None and 3590 < stats.next_visible_in <= 3600
    assert Worker(backend, ["default"], idle_timeout=0).run() == 0  # nothing to run yet


def test_a_run_after_beyond_the_longest_delay_waits_again_when_received(
    backend: QueueBackend, out: Path
) -> None:
    now = datetime.now(UTC)
    assert delay_until(now + timedelta(days=800), now) == MAX_SECONDS
    assert delay_until(now - timedelta(seconds=5), now) == 0
    assert delay_until(None, now) == 0
    due = tasks.record.using(run_after=now + timedelta(days=800)).enqueue("far")
    queue = backend.queue("default")
    record = json.loads(backend.results.get(due.id) or b"")
    queue.send(json.dumps(record))  # as if the longest delay had run out
    message = queue.receive()
    assert message is not None
    TaskRunner(backend, queue, "w")(message)  # released, delayed again: not run
    assert runs(out, "far") == []
    stats = queue.stats()  # a release with a delay is invisible until then, as in flight
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 1, 1)
    assert stats.in_flight_expires_in is not None and stats.in_flight_expires_in > 364 * 86400
    assert str(backend.get_result(due.id).status) == "READY"


def test_get_result_of_an_unknown_or_bad_id_does_not_exist(backend: QueueBackend) -> None:
    for bad in ["nosuchid", "../default/config", "", "x" * 65, "a/b"]:
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(bad)


def test_a_message_that_is_not_a_task_record_is_refused_in_one_line(backend: QueueBackend) -> None:
    queue = backend.queue("default")
    for body in [b"junk", b"[]", b'{"format": 1}', json.dumps({"format": 2}).encode()]:
        queue.send(body)
        message = queue.receive()
        assert message is not None
        with pytest.raises(BadTaskRecord) as caught:
            TaskRunner(backend, queue, "w")(message)
        assert "\n" not in str(caught.value)
        message.delete()


def test_a_record_naming_something_that_is_not_a_task_fails_it(backend: QueueBackend) -> None:
    result = tasks.record.enqueue("k")
    record = json.loads(backend.results.get(result.id) or b"")
    for path, why in [("os.getcwd", "is not a task"), ("no.such.module", "cannot be imported")]:
        backend.results.put(result.id, json.dumps({**record, "task": path}).encode())
        with pytest.raises(BadTaskRecord, match=why):
            backend.get_result(result.id)
    backend.queue("default").purge()
    backend.queue("default").send(json.dumps({**record, "task": "os.getcwd"}))
    assert run_tasks(backend, 1) == 1
    failed = json.loads(backend.results.get(result.id) or b"")
    assert (failed["status"], failed["task"]) == ("FAILED", "os.getcwd")
    assert failed["errors"][0]["exception_class_path"] == "vsqs.django._records.BadTaskRecord"
    assert "is not a task" in failed["errors"][0]["traceback"]


def test_a_task_run_again_keeps_its_earlier_attempts(backend: QueueBackend) -> None:
    """A worker died while the task ran (its result says RUNNING): the next
    run adds its attempt to the earlier one."""
    result = tasks.attempt.enqueue("again")
    record = json.loads(backend.results.get(result.id) or b"")
    record.update(status="RUNNING", worker_ids=["w1"], started_at=record["enqueued_at"])
    backend.results.put(result.id, json.dumps(record).encode())
    assert run_tasks(backend, 1) == 1
    result.refresh()
    assert result.worker_ids[0] == "w1" and len(result.worker_ids) == 2
    assert result.return_value == 2  # the task's context counts the attempts


def test_a_finished_task_whose_ack_was_lost_is_not_run_again(backend: QueueBackend) -> None:
    """Its message comes back (an ack lost, a release after its end), but
    its result says it finished: acknowledged without a run, and no task
    of a worker's budget is spent on it."""
    result = tasks.attempt.enqueue("once")
    queue = backend.queue("default")
    first = queue.receive()
    assert first is not None
    assert TaskRunner(backend, queue, "w1")(first)  # ran; its ack is lost
    queue.send(first.body)
    later = tasks.record.enqueue("after")
    assert run_tasks(backend, 1) == 1  # the budget of one went to the task that ran
    result.refresh()
    assert (result.worker_ids, result.return_value) == (["w1"], 1)
    assert backend.get_result(later.id).status == "SUCCESSFUL"
    assert queue.stats().ready == 0


def test_a_message_that_runs_no_task_spends_no_budget(backend: QueueBackend) -> None:
    """A message that is not a task (refused, retried later) neither counts as
    a task run nor uses up ``max_tasks``: the real task behind it runs."""
    backend.queue("default").send(b"junk")
    real = tasks.record.enqueue("real")
    assert run_tasks(backend, 1) == 1
    assert backend.get_result(real.id).status == "SUCCESSFUL"


def test_collect_results_removes_finished_results_past_the_retention(
    backend: QueueBackend,
) -> None:
    done, failed = tasks.record.enqueue("d"), tasks.fail.enqueue("e")
    run_tasks(backend, 2)
    waiting = tasks.record.enqueue("w")
    finished = backend.get_result(done.id).finished_at
    assert finished is not None
    retention = timedelta(seconds=backend.result_retention)
    assert backend.collect_results(now=finished + retention - timedelta(seconds=1)) == 0
    assert backend.collect_results(now=finished + retention + timedelta(minutes=1)) == 2
    assert sorted(backend.results.ids()) == [waiting.id]
    for gone in (done.id, failed.id):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(gone)


def test_a_worker_collects_the_results_past_their_retention(tmp_path: Path) -> None:
    with backend_on(str(tmp_path / "root"), result_retention=0) as backend:
        done = tasks.record.enqueue("d")
        run_tasks(backend, 1)
        waiting = tasks.record.enqueue("w")
        assert sorted(backend.results.ids()) == sorted([done.id, waiting.id])
        Worker(backend, ["urgent"], idle_timeout=0).run()  # collects when it starts
        assert backend.results.ids() == [waiting.id]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"concurrency": 0}, "concurrency must be a whole number above 0"),
        ({"max_tasks": 0}, "max_tasks must be a whole number above 0"),
        ({"idle_timeout": -1}, "idle_timeout must be"),
    ],
)
def test_bad_worker_options_are_one_line_errors(
    backend: QueueBackend, options: dict[str, int], error: str
) -> None:
    with pytest.raises(vsqs.InvalidArgument, match=error):
        Worker(backend, ["default"], **options)


def test_a_result_is_replaced_whole(backend: QueueBackend) -> None:
    versions = [json.dumps({"v": i, "pad": str(i) * 300_000}).encode() for i in range(2)]
    backend.results.put("r", versions[0])
    seen: set[bytes] = set()
    done = threading.Event()

    def write() -> None:
        for i in range(100):
            backend.results.put("r", versions[i % 2])
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not done.is_set():
        seen.add(backend.results.get("r") or b"")
    writer.join()
    assert seen <= set(versions)  # never a part of one, never nothing
    assert backend.results.ids() == ["r"]  # no temporary object left beside it


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({}, "['url'] must be the queue root"),
        ({"url": "/tmp/x", "colour": "red"}, "unknown option(s) colour"),
        ({"url": "/tmp/x", "visibility_timeout": -1}, "visibility_timeout must be"),
        ({"url": "/tmp/x", "storage_options": {"anon": True}}, "storage_options apply"),
    ],
)
def test_bad_options_are_one_line_errors(options: dict[str, object], error: str) -> None:
    with pytest.raises(vsqs.InvalidArgument) as caught:
        QueueBackend("default", {"OPTIONS": options})
    assert error in str(caught.value) and "\n" not in str(caught.value)


def test_a_queue_name_vsqs_refuses_is_refused(tmp_path: Path) -> None:
    with pytest.raises(vsqs.InvalidQueueName):
        QueueBackend("default", {"QUEUES": ["../etc"], "OPTIONS": {"url": str(tmp_path)}})
    assert os.listdir(tmp_path) == []
