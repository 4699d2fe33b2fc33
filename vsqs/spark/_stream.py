"""``spark.readStream.format("vsqs")``: the messages of a queue as they become ready.

The stream does not receive or delete anything: it is a tail of the queue,
read alongside its consumers. Every message has a *ready key*
``(ready_ms, id, place)``: the ms at which it became visible (its send time,
or the end of its delay for a delayed send), the id of its object without
its tag (the object's *core*) and its place in it (0 for a message alone;
its place in its bundle for a bundled one). A split of a part keeps the
core and the places, so every message keeps its key whichever part holds
it. The offset is the last key delivered; each micro-batch yields the
messages whose keys follow it, so a micro-batch may end inside a part.

Keys must not land behind an offset already delivered, or their messages
would be skipped for good. Two rules keep late messages in:

* **settle window**: a key is offered only once its ``ready_ms`` is
  ``settleSeconds`` (default 5 s) in the past, which covers a send that took
  its id before a slow upload, and producer clocks behind the reader's by up
  to the window;
* **sends under way**: while a ``<id>.new`` name (a send or a Spark write being
  staged) younger than ``STAGING_HOLD`` (one minute) is listed, the offset
  stops before its id: the message may land with that id. Writers publish
  older staging under a fresh id (``vsqs._publish.commit``), so an older
  ``.new``, live or a dead writer's leftover, holds nothing back.

A message is offered only if it still exists when its key is offered: one
that a consumer deleted before then is never offered. Messages that keep an
old id when they arrive (dead-lettered, redriven) are not offered again: a
tail follows sends. To process a queue, consume it (``vsqs.spark.consume``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .. import _names as names
from .._inspect import entries, staging_hold_ms, stale_new_before
from ._options import Options
from ._read import (
    NAMES_PER_PARTITION,
    NamesPartition,
    names_per_partition,
    open_existing,
    read_partition,
    split,
)

if TYPE_CHECKING:
    import pyarrow

Key = tuple[int, str, int]
EARLIEST: Key = (-1, "", 0)


def ready_keys(parsed: names.Name) -> list[Key]:
    """The keys of the messages of an object (one, or those of a part), in
    order: when each became visible, its object's core and its place.

    A delayed send (never received, with an expiry) became visible at its
    expiry; every other message at its send time. A part that lacks the first
    message of its bundle was left by a receive of the ones before it (a
    split keeps the receive count 0), so it is no delayed send: its messages
    keep the key they had before the split (if its bundle was sent delayed,
    that key was its expiry, and they then count as received: see the docs)."""
    ready_ms = names.id_ms(parsed.id)
    places = names.members_of(parsed.id)
    if parsed.state == names.INVISIBLE and parsed.receive_count == 0 and places[0] == 0:
        assert parsed.expiry_ms is not None
        ready_ms = parsed.expiry_ms  # a delayed send
    core = parsed.id[: names.ID_LEN]
    return [(ready_ms, core, place) for place in places]


def _offset(key: Key) -> dict[str, Any]:
    return {"ready_ms": key[0], "id": key[1], "place": key[2]}


def _key(offset: dict[str, Any]) -> Key:
    """An offset's key; one written before bundles has no place, and its
    ``id`` may be tagged: it sorts right after the message's key."""
    return int(offset["ready_ms"]), str(offset["id"]), int(offset.get("place", 0))


class QueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side: listing and offsets; executors only read (see :mod:`._read`)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._target: Key | None = None  # Trigger.AvailableNow: never past this
        self._listed: list[tuple[Key, str]] = []  # the last listing, by key
        self._size = NAMES_PER_PARTITION  # default names per partition, for the queue's store
        self._end: Key = EARLIEST  # the end of the micro-batch last planned

    def _list(self) -> list[tuple[Key, str]]:
        """Keys and names of the messages that may be offered now, in key order
        (up to the ``Trigger.AvailableNow`` target, if any)."""
        now_ms = int(time.time() * 1000)
        horizon = now_ms - int(self.options.settle_seconds * 1000)
        held_from = stale_new_before(now_ms, staging_hold_ms())  # older staging holds nothing
        store = open_existing(self.options)
        try:
            found: list[tuple[Key, str]] = []
            pending: Key | None = None
            for entry in entries(store, now_ms):
                parsed = entry.parsed
                if not entry.is_message:  # a send under way holds back what is newer
                    key = (names.id_ms(parsed.id), parsed.id[: names.ID_LEN], 0)
                    if entry.name >= held_from and (pending is None or key < pending):
                        pending = key
                    continue
                keys = ready_keys(parsed)
                if keys[0][0] <= horizon:
                    found.extend((key, entry.name) for key in keys)
            self._size = names_per_partition(store)
        finally:
            store.close()
        found.sort()
        # A listing shows each message under one name; should one race a
        # split and show it twice, it is offered once (under either name).
        found = [entry for i, entry in enumerate(found) if i == 0 or entry[0] != found[i - 1][0]]
        if pending is not None:
            found = [entry for entry in found if entry[0] < pending]
        self._listed = found
        if self._target is not None:
            found = [entry for entry in found if entry[0] <= self._target]
        return found

    def initialOffset(self) -> dict[str, Any]:
        if self.options.starting_offsets == "latest":
            found = self._list()
            return _offset(found[-1][0] if found else EARLIEST)
        return _offset(EARLIEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_batch is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        found = self._list()
        self._target = found[-1][0] if found else EARLIEST

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        after = _key(start)
        new = [key for key, _ in self._list() if key > after]
        if isinstance(limit, ReadMaxRows):
            new = new[: limit.max_rows]
        self._end = new[-1] if new else after
        return _offset(self._end)

    def reportLatestOffset(self) -> dict[str, Any]:
        """The newest key the last listing could offer, and the backlog: how many
        messages it found after the micro-batch just planned (what
        ``maxMessagesPerBatch`` or a restart left for later batches)."""
        latest = self._listed[-1][0] if self._listed else self._end
        backlog = sum(1 for key, _ in self._listed if key > self._end)
        return _offset(latest) | {"backlog": backlog}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        low, high = _key(start), _key(end)
        if high <= low:
            return []
        listed = self._listed
        if not listed or listed[-1][0] < high:  # a restart re-plans a logged batch
            listed = self._list()
        wanted: dict[str, list[int]] = {}  # name: places, in key order
        for key, name in listed:
            if low < key <= high:
                wanted.setdefault(name, []).append(key[2])
        some = {  # the parts of which a micro-batch takes some messages only
            name: tuple(places)
            for name, places in wanted.items()
            if len(places) < names.message_count(names.id_of(name))
        }
        now_ms = int(time.time() * 1000)
        return list(split(list(wanted), now_ms, self.options.num_partitions, self._size, some))

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, NamesPartition)
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        high = _key(end)
        self._listed = [entry for entry in self._listed if entry[0] > high]


class RefusedStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream whose options were refused: it raises the refusal at its first
    call. PySpark reports an error raised while it makes a stream reader as an
    ``UnboundLocalError`` of its own; one raised by a call reaches the user."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def _refuse(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict[str, Any]:
        self._refuse()

    def getDefaultReadLimit(self) -> ReadLimit:
        self._refuse()

    def prepareForTriggerAvailableNow(self) -> None:
        self._refuse()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._refuse()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self._refuse()

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        self._refuse()
