"""The Django tasks backend on vsqs queues: ``QueueBackend`` (docs/django.md)."""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.crypto import get_random_string

from .. import _forks
from .._config import MAX_SECONDS, seconds
from .._errors import InvalidArgument, VsqsError
from .._names import validate_queue_name
from .._queue import Queue
from ._records import (
    READY,
    BadTaskRecord,
    InvalidTaskArguments,
    decode,
    encode,
    load_task,
    new_record,
    parse_time,
    to_result,
)
from ._storage import ResultStore, is_result_id, open_results
from ._tasks import (
    BaseTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)

log = logging.getLogger("vsqs.django")

#: How long a finished task's result is kept by default (seconds): 7 days.
DEFAULT_RESULT_RETENTION = 7 * 24 * 3600.0
_OPTIONS = frozenset({"url", "storage_options", "visibility_timeout", "result_retention"})


class QueueBackend(BaseTaskBackend):
    """Tasks as messages of vsqs queues: the Django queue Q is the vsqs
    queue ``<url>/Q``, and each task's result one object under
    ``<url>/_django_results``, readable from any process.

    ``OPTIONS``: ``url`` (the queue root, any vsqs location; required),
    ``storage_options`` (fsspec's, for object stores), ``visibility_timeout``
    (of a task in hand, extended while it runs; the queue's by default) and
    ``result_retention`` (seconds a finished result is kept; 7 days).
    ``run_after`` is a delay of the message; priorities are not supported.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]['OPTIONS']"
        unknown = set(self.options) - _OPTIONS
        if unknown:
            raise InvalidArgument(f"{where}: unknown option(s) {', '.join(sorted(unknown))}")
        url = self.options.get("url")
        if not isinstance(url, str) or not url.strip():
            raise InvalidArgument(f"{where}['url'] must be the queue root (a path or URL)")
        self.url = url.rstrip("/")
        self.storage_options: dict[str, Any] | None = self.options.get("storage_options")
        vt = self.options.get("visibility_timeout")
        self.visibility_timeout = None if vt is None else seconds(vt, "visibility_timeout")
        self.result_retention = seconds(
            self.options.get("result_retention", DEFAULT_RESULT_RETENTION), "result_retention"
        )
        for name in self.queues:
            validate_queue_name(name)
        self.results: ResultStore = open_results(self.url, self.storage_options)
        self._queues: dict[str, Queue] = {}
        self._lock = _forks.lock()

    def queue(self, name: str) -> Queue:
        """The vsqs queue of the Django queue ``name`` (created on first use)."""
        with self._lock:
            found = self._queues.get(name)
            if found is None:
                found = self._queues[name] = Queue(
                    f"{self.url}/{validate_queue_name(name)}",
                    storage_options=self.storage_options,
                )
            return found

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """Send the task to its queue, delayed until its ``run_after``;
        its READY result is written first. Arguments that are not JSON
        raise :class:`InvalidTaskArguments` before anything is written."""
        self.validate_task(task)
        try:
            result: TaskResult[Any] = TaskResult(
                task=task,
                id=get_random_string(32),
                status=TaskResultStatus(READY),
                enqueued_at=timezone.now(),
                started_at=None,
                last_attempted_at=None,
                finished_at=None,
                args=args,
                kwargs=kwargs,
                backend=self.alias,
                errors=[],
                worker_ids=[],
            )
        except (TypeError, ValueError) as exc:
            raise InvalidTaskArguments(f"task {task.module_path}: not JSON: {exc}") from None
        body = encode(new_record(result))
        queue = self.queue(task.queue_name)
        self.results.put(result.id, body)
        try:
            queue.send(body, delay=delay_until(task.run_after))
        except BaseException:
            with contextlib.suppress(VsqsError):  # the send's error is the one to see
                self.results.delete(result.id)
            raise
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The task's result as last written, from any process;
        ``TaskResultDoesNotExist`` for an id with none (or not an id)."""
        data = self.results.get(result_id) if is_result_id(result_id) else None
        if data is None:
            raise TaskResultDoesNotExist(result_id)
        record = decode(data, f"result {result_id}")
        return to_result(record, load_task(record))

    def collect_results(self, now: datetime | None = None) -> int:
        """Remove the results that finished more than ``result_retention``
        ago; return how many. Reads each result (one ``GET`` on an object
        store); one it cannot read is left alone."""
        cutoff = (now or timezone.now()) - timedelta(seconds=self.result_retention)
        removed = 0
        for result_id in self.results.ids():
            data = self.results.get(result_id)
            try:
                finished = parse_time(decode(data, result_id)["finished_at"]) if data else None
            except BadTaskRecord as exc:
                log.warning("%s: result left alone: %s", self.results.where, exc)
                continue
            if finished is not None and finished < cutoff:
                self.results.delete(result_id)
                removed += 1
        return removed


def delay_until(run_after: datetime | None, now: datetime | None = None) -> float:
    """Seconds from ``now`` to ``run_after`` (0 if it passed), at most
    vsqs's longest delay: a task due later is received then and sent back
    to wait again (docs/django.md)."""
    if run_after is None:
        return 0.0
    if now is None:  # an aware run_after on a project without USE_TZ too
        now = datetime.now(UTC) if timezone.is_aware(run_after) else timezone.now()
    wait = (run_after - now).total_seconds()
    return min(max(wait, 0.0), MAX_SECONDS)
