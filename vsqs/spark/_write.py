"""``df.write.format("vsqs").mode("append").save(url)``: one message per row.

Tasks stage each row as ``<id>.new`` (invisible to receivers) and report the
ids; the driver's commit renames every staged name to its final name once
all tasks succeeded, so a failed job publishes nothing. A failed task removes
what it staged; staged names a crash leaves behind are removed by the
queue's garbage collection after its grace period (one hour), like any
crashed sender's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from .. import _names as names
from .._errors import InvalidArgument, InvalidBody
from .._message import as_bytes
from .._publish import commit, stage, unstage
from .._queue import Queue
from ._options import Options
from ._read import open_existing


@dataclass
class Staged(WriterCommitMessage):
    """The ids one task staged as ``<id>.new``."""

    ids: list[str]


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
        # Make the queue (and its config) on the driver, before any task runs.
        Queue(
            options.url,
            storage_options=options.storage_options,
            unsafe_claims=options.unsafe_claims,
        ).close()

    def write(self, iterator: Iterator[Row]) -> Staged:
        store = open_existing(self.options)
        staged: list[str] = []
        clock = names.MsClock(time.time)
        try:
            for row in iterator:
                body = row[self.column]
                if body is None:
                    raise InvalidBody("a row's body is null: every message needs a body")
                staged.append(stage(store, as_bytes(body), clock.next_id))
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
        delay_ms = int(self.options.delay * 1000)
        visible_at = names.MsClock(time.time).expiry_ms(delay_ms) if delay_ms else None
        ids = sorted(i for m in messages if isinstance(m, Staged) for i in m.ids)
        try:
            # One rename batch: side by side where a rename is several requests.
            commit(store, ids, visible_at, durable=self.options.durable)
        finally:
            store.close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        store = open_existing(self.options)
        try:
            unstage(store, [i for m in messages if isinstance(m, Staged) for i in m.ids])
        finally:
            store.close()
