"""``df.write.format("vsqs").mode("append").save(url)``: one message per row.

Tasks stage each row as ``<id>.new`` (invisible to receivers) and report the
ids; the driver's commit renames every staged name to its final name once
all tasks succeeded, so a failed job publishes nothing. Every id a job's
tasks stage ends in the job's nonce (:func:`job_nonce`), so the driver finds
what the job staged in a listing, including what a lost executor's task
staged and never reported: the commit removes those leftovers after
publishing, and an abort removes everything the job staged. A failed task
removes what it staged itself; a row whose body is larger than the queue's
``max_message_size`` fails its task (:class:`~vsqs.MessageTooLarge`). What
a dead driver leaves is removed by the queue's garbage collection after its
grace period (one hour), like any crashed sender's, and holds a stream back
for at most a minute (``vsqs._inspect.STAGING_HOLD``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from .. import _names as names
from .._errors import InvalidArgument, InvalidBody
from .._inspect import collect_stale_new
from .._message import as_bytes
from .._publish import check_sizes, commit, stage, staged_by, unstage
from .._queue import Queue
from ..stores._base import Store
from ._options import Options
from ._read import open_existing

#: Hex digits of an id's nonce that name the job; the rest name the task.
JOB_NONCE_LEN = 12


@dataclass
class Staged(WriterCommitMessage):
    """The ids one task staged as ``<id>.new``."""

    ids: list[str]


def job_nonce() -> str:
    """A fresh job's nonce: the first :data:`JOB_NONCE_LEN` hex digits of the
    nonce of every id its tasks stage."""
    return secrets.token_hex(JOB_NONCE_LEN // 2)


def _task_ids(store: Store, job: str) -> Iterator[str]:
    """Fresh ids of one task of ``job`` on ``store``'s clock: in issue order,
    ending in the job's nonce and a nonce of the task (a collision is drawn
    again by ``stage``)."""
    clock = store.ms_clock(time.time)
    task = secrets.token_hex((names.NONCE_LEN - JOB_NONCE_LEN) // 2)
    while True:
        yield clock.next_id()[: -names.NONCE_LEN] + job + task


class QueueWriter(DataSourceWriter):
    """Appends rows to a queue; see the module docstring for what is atomic."""

    def __init__(self, options: Options, schema: StructType) -> None:
        field = next((f for f in schema.fields if f.name.lower() == "body"), None)
        if field is None or not isinstance(field.dataType, BinaryType | StringType):
            raise InvalidArgument(
                "writing to a vsqs queue needs a 'body' column of binary or string type"
            )
        self.options = options
        self.column = field.name
        self.job = job_nonce()
        # Make the queue (and its config) on the driver, before any task runs.
        with Queue(
            options.url,
            storage_options=options.storage_options,
            unsafe_claims=options.unsafe_claims,
        ) as queue:
            self.max_size = queue.config.max_message_size

    def write(self, iterator: Iterator[Row]) -> Staged:
        store = open_existing(self.options)
        staged: list[str] = []
        next_id = _task_ids(store, self.job).__next__
        try:
            for row in iterator:
                body = row[self.column]
                if body is None:
                    raise InvalidBody("a row's body is null: every message needs a body")
                data = as_bytes(body)
                check_sizes([data], self.max_size)  # receivers would pass it over
                staged.append(stage(store, data, next_id))
            if self.options.durable:
                store.sync_files(names.new_name(i) for i in staged)
            return Staged(staged)
        except BaseException:
            unstage(store, staged)
            raise
        finally:
            store.close()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        store = open_existing(self.options)
        clock = store.ms_clock(time.time)
        delay_ms = int(self.options.delay * 1000)
        visible_at = clock.expiry_ms(delay_ms) if delay_ms else None
        ids = sorted(i for m in messages if isinstance(m, Staged) for i in m.ids)
        try:
            # Renames side by side where a rename is several requests.
            commit(store, ids, visible_at, durable=self.options.durable, clock=clock)
            self._remove_leftovers(store)
        finally:
            store.close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        store = open_existing(self.options)
        try:
            unstage(store, [i for m in messages if isinstance(m, Staged) for i in m.ids])
            self._remove_leftovers(store)
        finally:
            store.close()

    def _remove_leftovers(self, store: Store) -> None:
        """Remove what this job's tasks staged and nobody published: the
        staging of task attempts that were lost or failed without cleaning up."""
        collect_stale_new(store, staged_by(store, self.job), f"spark write to {store.url}")
