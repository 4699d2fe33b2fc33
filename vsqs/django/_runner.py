"""Running one task message (docs/django.md): its result says RUNNING
(this worker's id added), then SUCCESSFUL with the return value or FAILED
with the exception's class path and traceback. Either way the message is
acknowledged: Django tasks are not retried. A task due later than vsqs's
longest delay goes back to wait again.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from .._message import Message
from .._queue import Queue
from ._backend import QueueBackend, delay_until
from ._records import (
    FAILED,
    RUNNING,
    SUCCESSFUL,
    BadTaskRecord,
    Record,
    decode,
    encode,
    load_task,
    parse_time,
    to_result,
)
from ._tasks import Task, TaskContext, task_finished, task_started


class TaskRunner:
    """The ``consume`` handler of one queue of a worker."""

    def __init__(self, backend: QueueBackend, queue: Queue, worker_id: str) -> None:
        self.backend, self.queue, self.worker_id = backend, queue, worker_id

    def __call__(self, message: Message) -> bool:
        """Run the task of ``message``; whether it ran (not: it is due later
        and went back to wait, or its result says it finished already: an
        ack that was lost, or a release that came after its end)."""
        record = decode(message.body, f"{self.queue.url}: message {message.id}")
        wait = delay_until(parse_time(record["run_after"]))
        if wait > 0:  # due beyond the longest delay: wait again
            message.release(delay=wait)
            return False
        current = self._current(record)
        if current is None:
            return False
        record = current
        now = timezone.now().isoformat()
        record.update(
            status=RUNNING,
            started_at=record["started_at"] or now,
            last_attempted_at=now,
            worker_ids=[*record["worker_ids"], self.worker_id],
        )
        self.backend.results.put(record["id"], encode(record))
        close_old_connections()
        try:
            self._run(record)
        finally:
            close_old_connections()
        return True

    def _current(self, sent: Record) -> Record | None:
        """The record sent, with the attempts so far of its stored result;
        ``None`` if that result says the task finished."""
        stored = self.backend.results.get(sent["id"])
        try:
            history = decode(stored, f"result {sent['id']}") if stored else sent
        except BadTaskRecord:
            history = sent
        if history["status"] in (SUCCESSFUL, FAILED):
            return None
        return {**sent, **{k: history[k] for k in ("started_at", "worker_ids", "errors")}}

    def _run(self, record: Record) -> None:
        task: Task[Any, Any] | None = None
        try:
            task = load_task(record)
            task_started.send(type(self.backend), task_result=to_result(record, task))
            value = _json(call(task, record))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # as the framework's own backends: the task failed
            record.update(status=FAILED, errors=[*record["errors"], _error(exc)])
        else:
            record.update(status=SUCCESSFUL, return_value=value)
        record["finished_at"] = timezone.now().isoformat()
        self.backend.results.put(record["id"], encode(record))
        if task is not None:
            task_finished.send(type(self.backend), task_result=to_result(record, task))


def call(task: Task[Any, Any], record: Record) -> object:
    """Run ``task`` with the arguments of ``record`` (and its context if it takes one)."""
    if task.takes_context:
        context = TaskContext(task_result=to_result(record, task))
        return task.call(context, *record["args"], **record["kwargs"])
    return task.call(*record["args"], **record["kwargs"])


def _json(value: object) -> object:
    """``value`` as JSON gives it back (a tuple becomes a list); ``TypeError``
    or ``ValueError`` if it is not JSON."""
    return json.loads(json.dumps(value, allow_nan=False))


def _error(exc: BaseException) -> dict[str, str]:
    kind = type(exc)
    return {
        "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
        "traceback": "".join(traceback.format_exception(exc)),
    }
