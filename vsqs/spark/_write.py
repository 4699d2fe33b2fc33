"""``df.write.format("vsqs").mode("append").save(url)``: one message per row.

Tasks stage their rows as ``<id>.new`` (invisible to receivers): on queues
of format 4, in bundles of up to 128 consecutive rows of one group (or of
none) and 1 MiB, one staged object each (:func:`vsqs._bundle.bundle`; rows
with a deduplication id, and every row with the option ``bundle`` false,
one object each). They report the staged ids; the driver's commit renames
every staged name to its final name once all tasks succeeded, so a failed
job publishes nothing. Every id a job's tasks stage ends in the job's nonce
(:func:`job_nonce`), so the driver finds what the job staged in a listing,
including what a lost executor's task staged and never reported: the commit
removes those leftovers after publishing, and an abort removes everything
the job staged. A failed task
removes what it staged itself; a row whose body is larger than the queue's
``max_message_size`` fails its task (:class:`~vsqs.MessageTooLarge`). What
a dead driver leaves is removed by the queue's garbage collection after its
grace period (one hour), like any crashed sender's, and holds a stream back
for at most a minute (``vsqs._inspect.STAGING_HOLD``).

Optional ``group``, ``dedup_id`` and ``attributes`` columns (string, string,
map of strings; null: none) give each row's metadata, checked as
:meth:`vsqs.Queue.send` checks it; a row with a group or attributes is staged
as an envelope under an id with its tag. Deduplication ids are recorded by
the driver's commit, just before it publishes, in id order: a row whose id
was sent to the queue within its ``dedup_window`` (by this job or anyone) is
not published, so a job run again publishes only the rows it had not. A
failed task records nothing: its retry's rows are not taken for duplicates.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, DataType, MapType, StringType, StructType

from .. import _names as names
from .._bundle import bundle
from .._config import QueueConfig
from .._dedup import Claim, Deduplicator
from .._errors import InvalidArgument, InvalidBody
from .._fanout import fan_out
from .._inspect import collect_stale_new
from .._outgoing import Outgoing, Prepared, prepare
from .._publish import commit, publish_as, stage, staged_by, unstage
from .._queue import Queue
from ..stores._base import Store
from ._options import Options
from ._read import open_existing

#: Hex digits of an id's nonce that name the job; the rest name the task.
JOB_NONCE_LEN = 12
#: The optional metadata columns a writer takes, and the type each must have.
META_COLUMNS: dict[str, DataType] = {
    "group": StringType(),
    "dedup_id": StringType(),
    "attributes": MapType(StringType(), StringType()),
}


@dataclass
class Staged(WriterCommitMessage):
    """The ids one task staged as ``<id>.new``, and the deduplication id of
    each that has one."""

    ids: list[str]
    dedup_ids: dict[str, str] = field(default_factory=dict)


def job_nonce() -> str:
    """A fresh job's nonce: the first :data:`JOB_NONCE_LEN` hex digits of the
    nonce of every id its tasks stage."""
    return secrets.token_hex(JOB_NONCE_LEN // 2)


def _column(schema: StructType, name: str, allowed: tuple[DataType, ...]) -> str | None:
    """The schema's spelling of column ``name`` (any case), checked to have one
    of the ``allowed`` types (a map's values may be null or not); ``None``
    without one."""
    found = next((f for f in schema.fields if f.name.lower() == name), None)
    if found is None:
        return None
    kind = found.dataType
    if isinstance(kind, MapType):
        kind = MapType(kind.keyType, kind.valueType)
    if kind not in allowed:
        wanted = " or ".join(t.simpleString() for t in allowed)
        raise InvalidArgument(
            f"column {found.name!r} of a write to a vsqs queue must be {wanted}, "
            f"not {found.dataType.simpleString()}"
        )
    return found.name


def _task_ids(store: Store, job: str) -> Iterator[str]:
    """Fresh ids of one task of ``job`` on ``store``'s clock: in issue order,
    ending in the job's nonce and a nonce of the task (a collision is drawn
    again by ``stage``)."""
    clock = store.ms_clock(time.time)
    task = secrets.token_hex((names.NONCE_LEN - JOB_NONCE_LEN) // 2)
    while True:
        yield clock.next_id()[: -names.NONCE_LEN] + job + task


def _tagged(next_id: Callable[[], str], tag: str | None) -> str:
    """A fresh id of the task with a message's tag (its group, or envelope)."""
    return names.tagged(next_id(), tag)


class QueueWriter(DataSourceWriter):
    """Appends rows to a queue; see the module docstring for what is atomic."""

    def __init__(self, options: Options, schema: StructType) -> None:
        body = _column(schema, "body", (BinaryType(), StringType()))
        if body is None:
            raise InvalidArgument(
                "writing to a vsqs queue needs a 'body' column of binary or string type"
            )
        self.options = options
        self.column = body
        #: The schema's spelling of each metadata column it has.
        self.meta = {
            name: spelled
            for name, kind in META_COLUMNS.items()
            if (spelled := _column(schema, name, (kind,))) is not None
        }
        self.job = job_nonce()
        # Make the queue (and its config) on the driver, before any task runs.
        with Queue(
            options.url,
            storage_options=options.storage_options,
            unsafe_claims=options.unsafe_claims,
        ) as queue:
            self.config: QueueConfig = queue.config
        #: Whether tasks stage their rows in bundles.
        self.bundles = options.bundle and self.config.format >= names.BUNDLES_FORMAT

    def _outgoing(self, row: Row) -> Outgoing:
        """A row as a message; :class:`InvalidBody` for a null body."""
        body = row[self.column]
        if body is None:
            raise InvalidBody("a row's body is null: every message needs a body")
        given = {name: row[spelled] for name, spelled in self.meta.items()}
        return Outgoing(body, **given)

    def write(self, iterator: Iterator[Row]) -> Staged:
        """Stage every row (checked as a send checks it: receivers would pass
        over a body larger than ``max_message_size``), in bundles if
        :attr:`bundles`: the rows without a deduplication id are gathered
        until a bundle's worth (:data:`names.MAX_BUNDLE` rows or
        :data:`names.BUNDLE_BYTES`), or a row with one, and staged in order."""
        store = open_existing(self.options)
        staged: list[str] = []
        dedup_ids: dict[str, str] = {}
        next_id = _task_ids(store, self.job).__next__
        gathered: list[Prepared] = []

        def put(item: Prepared) -> None:
            staged.append(stage(store, item.data, partial(_tagged, next_id, item.tag)))

        def flush() -> None:
            for packed in bundle(gathered, partial(_tagged, next_id)):
                put(packed.item)
            gathered.clear()

        try:
            for row in iterator:
                (item,) = prepare([self._outgoing(row)], self.config)
                if self.bundles and item.meta.dedup_id is None:
                    gathered.append(item)
                    if len(gathered) == names.MAX_BUNDLE or (
                        sum(len(i.data) for i in gathered) >= names.BUNDLE_BYTES
                    ):
                        flush()
                    continue
                flush()
                put(item)
                if item.meta.dedup_id is not None:
                    dedup_ids[staged[-1]] = item.meta.dedup_id
            flush()
            if self.options.durable:
                store.sync_files(names.new_name(i) for i in staged)
            return Staged(staged, dedup_ids)
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
        reported = [m for m in messages if isinstance(m, Staged)]
        ids = sorted(i for m in reported for i in m.ids)
        dedup_ids = {i: d for m in reported for i, d in m.dedup_ids.items()}
        try:
            dedup = Deduplicator(store, clock, self.options.durable, lambda: self.config)
            claims: list[Claim] = []
            if dedup_ids:
                ids, claims = self._deduplicate(store, dedup, ids, dedup_ids, delay_ms)
            # Renames side by side where a rename is several requests.
            commit(store, ids, visible_at, durable=self.options.durable, clock=clock)
            for claim in claims:
                dedup.sent(claim)
            self._remove_leftovers(store)
        finally:
            store.close()

    def _deduplicate(
        self,
        store: Store,
        dedup: Deduplicator,
        ids: list[str],
        dedup_ids: dict[str, str],
        delay_ms: int,
    ) -> tuple[list[str], list[Claim]]:
        """The staged ``ids`` (in order) to publish, and the claims of their
        records: those without a deduplication id, and the first of each id
        that no message was sent with within the queue's window (each
        recorded now, with its staged bytes, side by side where a create is a
        round trip) while it may still be published (:meth:`Deduplicator.in_time`;
        else its record publishes it later). The others are unstaged."""
        firsts: dict[str, str] = {}  # deduplication id: the first staged id that has it
        for i in ids:
            if i in dedup_ids:
                firsts.setdefault(dedup_ids[i], i)
        durable, clock = self.options.durable, store.ms_clock(time.time)

        def publish(message_id: str, data: bytes, delay: int) -> bool:
            """A record whose sender died is published from it (a roll forward)."""
            at = clock.expiry_ms(delay) if delay else None
            return publish_as(store, durable, message_id, data, at)

        def record(item: tuple[str, str]) -> Claim:
            data = store.read(names.new_name(item[1]))
            return dedup.claim(*item, data, delay_ms, publish)

        recorded = fan_out(record, list(firsts.items()), store.batch_width)
        claims = [outcome.result() for outcome in recorded]
        new = {c.id for c in claims if c.sent_mark is not None and dedup.in_time(c)}
        keep = [i for i in ids if i not in dedup_ids or i in new]
        unstage(store, sorted(set(ids).difference(keep)))
        return keep, [c for c in claims if c.id in new]

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
