"""Real ``manage.py vsqs_worker`` processes of the test project
(tests/django_project) on a local directory and on S3 (moto), with tasks
enqueued by this process and results read by another (docs/django.md):
every task run once, run_after honoured as a delay in the queue, a killed
worker's task run after restart, a clean stop on SIGTERM, a second SIGTERM
releasing the task in hand. Runs are counted by what the tasks write."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs.django import QueueBackend

from .support.django_setup import backend_on, configure
from .support.servers import Server
from .support.waiting import wait_until

configure()

from tests.django_project import tasks  # noqa: E402  (Django must be configured first)

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parent.parent
#: A bound on a stall, not a measure: a loaded machine that makes progress never reaches it.
DEADLINE = 120.0


class Project:
    """Starts ``manage.py vsqs_worker`` processes of the test project on one
    queue root, and kills them all at the end."""

    def __init__(self, tmp_path: Path, root: str, vt: float = 30.0, storage: Any = None) -> None:
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.tmp, self.root, self.storage, self.vt = tmp_path, root, storage, vt
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.django_project.settings",
            "VSQS_DJANGO_ROOT": root,
            "VSQS_DJANGO_OUT": str(self.out),
            "VSQS_DJANGO_VT": str(vt),
            "VSQS_DJANGO_STORAGE": json.dumps(storage),
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    @contextlib.contextmanager
    def backend(self) -> Iterator[QueueBackend]:
        """The project's backend in this process (tasks enqueued here)."""
        with backend_on(self.root, self.storage, self.vt) as backend:
            yield backend

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``manage.py vsqs_worker ARGS``, its output in ``<name>.log``."""
        command = [sys.executable, "tests/django_project/manage.py", "vsqs_worker", *args]
        with open(self.tmp / f"{name}.log", "wb") as log:  # the child keeps its own copy
            self.procs.append(
                subprocess.Popen(
                    command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
                )
            )
        return self.procs[-1]

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker (it starts no process of its own)."""
        proc.kill()
        proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc)

    def results(self, *ids: str) -> list[dict[str, Any]]:
        """The results of ``ids``, read by ``get_result`` in another process."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.django_project.client", "result", *ids],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    def queue(self, name: str = "default") -> vsqs.Queue:
        return vsqs.Queue(f"{self.root}/{name}", storage_options=self.storage)

    def runs(self, key: str) -> list[list[str]]:
        """The runs a task noted under ``key``: [pid, time, what] each."""
        try:
            text = (self.out / key).read_text()
        except FileNotFoundError:
            return []
        return [line.split(" ") for line in text.splitlines()]

    def until(self, condition: Callable[[], object], what: str) -> None:
        """Wait for ``condition``; on a stall, fail with the workers' logs."""
        try:
            wait_until(lambda: bool(condition()), DEADLINE, what)
        except AssertionError as stalled:
            logs = "".join(log.read_text()[-3000:] for log in sorted(self.tmp.glob("*.log")))
            raise AssertionError(f"{stalled}; worker logs:\n{logs}") from None

    def drained(self, name: str = "default") -> bool:
        stats = self.queue(name).stats()
        return stats.ready == stats.in_flight == stats.delayed == 0


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    p = Project(tmp_path, f"file://{tmp_path / 'root'}")
    try:
        yield p
    finally:
        p.close()


def test_every_task_runs_once_on_two_workers(project: Project) -> None:
    with project.backend():
        ids = [tasks.record.enqueue(f"t{i}").id for i in range(30)]
        failed = tasks.fail.enqueue("bad").id
    project.start("w1", "--concurrency", "2")
    project.start("w2", "--concurrency", "2")
    project.until(lambda: all(project.runs(f"t{i}") for i in range(30)), "30 runs")
    project.until(project.drained, "an empty queue")
    assert [len(project.runs(f"t{i}")) for i in range(30)] == [1] * 30
    project.until(lambda: project.runs("bad"), "the failing run")
    results = project.results(*ids, failed)
    assert [(r["status"], r["return_value"]) for r in results[:-1]] == [
        ("SUCCESSFUL", f"t{i}") for i in range(30)
    ]
    assert results[-1]["status"] == "FAILED" and len(project.runs("bad")) == 1
    [(kind, trace)] = results[-1]["errors"]
    assert kind == "builtins.ValueError" and "failed on purpose: bad" in trace
    assert all(len(r["worker_ids"]) == 1 for r in results)


def test_workers_on_s3(tmp_path: Path, s3_server: Server) -> None:
    p = Project(tmp_path, s3_server.url("django"), storage=s3_server.storage_options)
    try:
        with p.backend():
            ids = [tasks.record.enqueue(f"s{i}").id for i in range(8)]
            ids.append(tasks.urgent.enqueue("u").id)
        p.start("w1", "--queue-name", "default", "--queue-name", "urgent", "--concurrency", "2")
        p.until(lambda: all(p.runs(f"s{i}") for i in range(8)) and p.runs("u"), "9 runs")
        p.until(lambda: p.drained() and p.drained("urgent"), "empty queues")
        assert [len(p.runs(f"s{i}")) for i in range(8)] + [len(p.runs("u"))] == [1] * 9
        assert {r["status"] for r in p.results(*ids)} == {"SUCCESSFUL"}
    finally:
        p.close()


def test_run_after_waits_in_the_queue_as_a_delay(project: Project) -> None:
    due = datetime.now(UTC) + timedelta(seconds=10)  # room for a slow open and enqueue
    with project.backend():
        result_id = tasks.record.using(run_after=due).enqueue("later").id
    stats = project.queue().stats()
    assert (stats.ready, stats.delayed) == (0, 1)  # waiting in the queue, not in a worker
    project.start("w1")
    project.until(lambda: project.runs("later"), "the run")
    ran = float(project.runs("later")[0][1])
    assert ran >= due.timestamp() - 0.01  # vsqs stamps delays in ms
    assert project.results(result_id)[0]["status"] == "SUCCESSFUL"


def test_a_task_in_hand_of_a_killed_worker_runs_after_restart(tmp_path: Path) -> None:
    p = Project(tmp_path, f"file://{tmp_path / 'root'}", vt=10.0)  # extended every 3.3 s
    try:
        with p.backend():
            result_id = tasks.block.enqueue("k").id
        first = p.start("w1")
        p.until(lambda: p.runs("k.started"), "the task started")
        p.until(lambda: p.results(result_id)[0]["status"] == "RUNNING", "a RUNNING result")
        p.kill(first)  # nothing acknowledges, nothing releases
        assert p.queue().stats().in_flight == 1 and p.runs("k") == []
        (p.out / "release").touch()
        p.start("w2")
        p.until(lambda: p.runs("k"), "the run after restart")
        p.until(p.drained, "an empty queue")
        assert (len(p.runs("k.started")), len(p.runs("k"))) == (2, 1)
        [result] = p.results(result_id)
        assert result["status"] == "SUCCESSFUL" and len(result["worker_ids"]) == 2
    finally:
        p.close()


def test_sigterm_stops_taking_tasks_and_waits_for_the_running_one(project: Project) -> None:
    with project.backend():
        running = tasks.block.enqueue("r").id
        tasks.record.enqueue("next")
    worker = project.start("w1")
    project.until(lambda: project.runs("r.started"), "the task started")
    worker.send_signal(signal.SIGTERM)
    project.until(lambda: "SIGTERM: no new tasks" in project.log("w1"), "the stop")
    assert worker.poll() is None  # waiting for the running task
    (project.out / "release").touch()
    assert worker.wait(timeout=DEADLINE) == 0
    assert project.results(running)[0]["status"] == "SUCCESSFUL"
    assert project.runs("next") == [] and project.queue().stats().ready == 1


def test_a_long_task_is_extended_not_delivered_twice(tmp_path: Path) -> None:
    p = Project(tmp_path, f"file://{tmp_path / 'root'}", vt=6.0)  # extended every 2 s
    try:
        with p.backend():
            result_id = tasks.block.enqueue("long").id
        p.start("w1")
        p.start("w2")  # idle: it would take the task if its timeout ran out
        p.until(lambda: p.runs("long.started"), "the task started")
        started = float(p.runs("long.started")[0][1])
        p.until(lambda: time.time() > started + 3 * p.vt, "three visibility timeouts")
        stats = p.queue().stats()
        assert (stats.in_flight, stats.ready) == (1, 0)  # still w1's: extended, not expired
        (p.out / "release").touch()
        p.until(lambda: p.runs("long"), "the run")
        p.until(p.drained, "an empty queue")
        assert len(p.runs("long.started")) == 1
        assert len(p.results(result_id)[0]["worker_ids"]) == 1
    finally:
        p.close()


def test_a_bad_queue_name_is_a_one_line_error(project: Project) -> None:
    worker = project.start("w1", "--queue-name", "../etc")
    assert worker.wait(timeout=DEADLINE) == 1
    log = project.log("w1").strip()
    assert log.startswith("CommandError: invalid queue name '../etc'") and "\n" not in log
    assert not (project.out.parent / "etc").exists()


def test_a_second_sigterm_releases_the_task_in_hand(project: Project) -> None:
    with project.backend():
        result_id = tasks.block.enqueue("h").id
    worker = project.start("w1")
    project.until(lambda: project.runs("h.started"), "the task started")
    worker.send_signal(signal.SIGINT)  # Ctrl-C: the same as SIGTERM
    project.until(lambda: "SIGINT: no new tasks" in project.log("w1"), "the stop")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=DEADLINE) == 0
    assert "released 1 task(s) in hand" in project.log("w1")
    stats = project.queue().stats()
    assert (stats.ready, stats.in_flight) == (1, 0)  # visible again at once
    (project.out / "release").touch()
    project.start("w2")
    project.until(lambda: project.runs("h"), "the run in the next worker")
    project.until(project.drained, "an empty queue")
    assert len(project.runs("h.started")) == 2 and len(project.runs("h")) == 1
    assert project.results(result_id)[0]["status"] == "SUCCESSFUL"


def test_concurrency_runs_tasks_side_by_side(project: Project) -> None:
    with project.backend():
        ids = [tasks.block.enqueue(key).id for key in ("a", "b")]
    project.start("w1", "--concurrency", "2")
    project.until(lambda: project.runs("a.started") and project.runs("b.started"), "both started")
    assert project.runs("a") == project.runs("b") == []  # both in hand at once
    (project.out / "release").touch()
    project.until(lambda: project.runs("a") and project.runs("b"), "both runs")
    assert [r["status"] for r in project.results(*ids)] == ["SUCCESSFUL"] * 2


def test_max_tasks_and_idle_timeout_end_the_worker(project: Project) -> None:
    with project.backend():
        for i in range(3):
            tasks.record.enqueue(f"m{i}")
    worker = project.start("w1", "--max-tasks", "2", "--concurrency", "2")
    assert worker.wait(timeout=DEADLINE) == 0
    assert sum(len(project.runs(f"m{i}")) for i in range(3)) == 2
    assert project.queue().stats().ready == 1
    last = project.start("w2", "--max-tasks", "1")
    assert last.wait(timeout=DEADLINE) == 0
    assert all(len(project.runs(f"m{i}")) == 1 for i in range(3))
    idle = project.start("w3", "--idle-timeout", "1")  # an empty queue: it ends
    assert idle.wait(timeout=DEADLINE) == 0


def test_the_example_of_the_django_guide_runs_as_written(tmp_path: Path) -> None:
    guide = (ROOT / "docs" / "django.md").read_text()
    spool = str(tmp_path / "spool")
    for code in re.findall(r"```python\n(.*?)```", guide, re.S):
        name = code.splitlines()[0].removeprefix("# ")  # settings.py, tasks.py
        if find_spec("django.tasks"):  # the lines the comments give for Django >= 6
            code = re.sub(r"^.*# Django >= 6: (.*)$", r"\1", code, flags=re.M)
        (tmp_path / name).write_text(code.replace("/var/spool/tasks", spool))
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["settings.py", "tasks.py"]
    [shell] = re.findall(r"```sh\n(.*?)```", guide, re.S)
    export, worker, enqueue, result = (line.split("   #")[0] for line in shell.splitlines())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for assignment in export.removeprefix("export ").split():
        key, _, value = assignment.partition("=")
        env[key] = str(tmp_path) if value == "." else value
    env["PYTHONPATH"] += os.pathsep + str(ROOT)  # vsqs from this checkout

    def run(command: str) -> str:
        argv = shlex.split(command)
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        # the last line: Django 5.2's shell first says how many objects it imported
        return done.stdout.strip().splitlines()[-1]

    argv = shlex.split(worker.removesuffix("&"))
    with open(tmp_path / "worker.log", "wb") as log:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        result_id = run(enqueue)
        seen: list[str] = []
        wait_until(
            lambda: seen.append(run(result.replace("ID", result_id))) or "5" in seen[-1],
            DEADLINE,
            "the result",
        )
        assert seen[-1] == "SUCCESSFUL 5"
    finally:
        proc.kill()
        proc.wait()
