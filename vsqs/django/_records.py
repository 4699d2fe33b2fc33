"""A task's record: the JSON object that is both its message body (as
enqueued) and its result object (as it runs and ends), and the
framework's ``TaskResult`` made from it.

Records are untrusted when read back (anyone may send to a queue): every
field is checked before it is used, and a bad one is one
:class:`BadTaskRecord` line.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from .._errors import InvalidArgument, VsqsError
from ._storage import is_result_id
from ._tasks import Task, TaskError, TaskResult, TaskResultStatus

#: The version of the record format; a record of another version is refused.
FORMAT = 1

Record = dict[str, Any]

#: The statuses, as records hold them (the values of ``TaskResultStatus``).
READY, RUNNING, SUCCESSFUL, FAILED = "READY", "RUNNING", "SUCCESSFUL", "FAILED"

_TEXT = (str,)
_TIME = (str, type(None))
#: Each field of a record and the JSON types it may have.
_FIELDS: dict[str, tuple[type, ...]] = {
    "format": (int,),
    "id": _TEXT,
    "task": _TEXT,
    "queue_name": _TEXT,
    "priority": (int,),
    "run_after": _TIME,
    "backend": _TEXT,
    "args": (list,),
    "kwargs": (dict,),
    "status": _TEXT,
    "enqueued_at": _TIME,
    "started_at": _TIME,
    "finished_at": _TIME,
    "last_attempted_at": _TIME,
    "errors": (list,),
    "worker_ids": (list,),
}


class BadTaskRecord(VsqsError, ValueError):
    """A message or result object that is not a task record of this format,
    or names something that is not a task."""


class InvalidTaskArguments(InvalidArgument, TypeError):
    """A task's arguments that are not JSON (refused before anything is sent)."""


def new_record(result: TaskResult[Any]) -> Record:
    """The record of a task just enqueued (status READY)."""
    task = result.task
    return {
        "format": FORMAT,
        "id": result.id,
        "task": task.module_path,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": _time(task.run_after),
        "backend": result.backend,
        "args": result.args,
        "kwargs": result.kwargs,
        "status": str(result.status),
        "enqueued_at": _time(result.enqueued_at),
        "started_at": None,
        "finished_at": None,
        "last_attempted_at": None,
        "errors": [],
        "worker_ids": [],
        "return_value": None,
    }


def encode(record: Record) -> bytes:
    """The JSON of ``record``; :class:`InvalidTaskArguments` if a value of it is not JSON."""
    try:
        return json.dumps(record, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskArguments(f"task {record['task']}: not JSON: {exc}") from None


def decode(data: bytes, where: str) -> Record:
    """The record in ``data`` (read from ``where``), checked field by field."""
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise BadTaskRecord(f"{where}: not a task record (not JSON)") from None
    if not isinstance(record, dict):
        raise BadTaskRecord(f"{where}: not a task record (not a JSON object)")
    for name, types in _FIELDS.items():
        if not isinstance(record.get(name), types) or isinstance(record.get(name), bool):
            raise BadTaskRecord(f"{where}: not a task record (field {name!r})")
    if record["format"] != FORMAT or not is_result_id(record["id"]):
        raise BadTaskRecord(f"{where}: not a task record of format {FORMAT} with a valid id")
    if record["status"] not in TaskResultStatus.values:
        raise BadTaskRecord(f"{where}: unknown status {record['status']!r:.40}")
    for error in record["errors"]:
        if not isinstance(error, dict) or not all(
            isinstance(error.get(k), str) for k in ("exception_class_path", "traceback")
        ):
            raise BadTaskRecord(f"{where}: not a task record (field 'errors')")
    if not all(isinstance(w, str) for w in record["worker_ids"]):
        raise BadTaskRecord(f"{where}: not a task record (field 'worker_ids')")
    return record


def load_task(record: Record) -> Task[Any, Any]:
    """The task of ``record``, with its queue, priority and run_after."""
    try:
        task = import_string(record["task"])
    except ImportError as exc:
        raise BadTaskRecord(f"task {record['task']!r:.100} cannot be imported: {exc}") from None
    if not isinstance(task, Task):
        raise BadTaskRecord(f"{record['task']!r:.100} is not a task")
    return task.using(
        priority=record["priority"],
        queue_name=record["queue_name"],
        run_after=parse_time(record["run_after"]),
        backend=record["backend"],
    )


def to_result(record: Record, task: Task[Any, Any]) -> TaskResult[Any]:
    """The framework's result of ``record`` (of ``task``)."""
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=record["id"],
        status=TaskResultStatus(record["status"]),
        enqueued_at=parse_time(record["enqueued_at"]),
        started_at=parse_time(record["started_at"]),
        finished_at=parse_time(record["finished_at"]),
        last_attempted_at=parse_time(record["last_attempted_at"]),
        args=record["args"],
        kwargs=record["kwargs"],
        backend=record["backend"],
        errors=[
            TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
            for e in record["errors"]
        ],
        worker_ids=list(record["worker_ids"]),
    )
    object.__setattr__(result, "_return_value", record.get("return_value"))
    return result


def _time(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def parse_time(text: str | None) -> datetime | None:
    """A time of a record (ISO 8601); :class:`BadTaskRecord` if it is not one."""
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise BadTaskRecord(f"{text!r:.40} is not an ISO 8601 time") from None
