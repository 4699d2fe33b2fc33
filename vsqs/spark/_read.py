"""Listing on the driver and reading in the executors, shared by the batch
and streaming readers.

The driver lists once and cuts the sorted names into contiguous partitions
of about as many messages each; executors read the files through the
queue's store (fsspec for URLs), never rename or delete anything. A task
reads its objects ``Store.batch_width`` at a time (one after another on a
local disk; side by side on object stores, where each read is a round trip).

A row is a message: a part of a bundle (format 4) gives one row per message
it holds, under that message's own id, in the state its part's name gives.
A message renamed between listing and reading (received, extended,
released; for a bundled one, its part renamed or split) is read under its
new name; one deleted meanwhile is skipped. Without ``includeBody`` only
parts of bundles are read (their bytes name their messages' ids): the rows
of messages alone are the listing's names.

A message stored as an envelope (format 3: one with a group or attributes)
is unsealed: ``body`` is the body that was sent, ``group`` its group (null
without one) and ``attributes`` its attributes (an empty map without).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .. import _names as names
from .._bundle import members as bundle_members
from .._envelope import unseal
from .._errors import QueueNotFound
from .._fanout import fan_out
from .._inspect import entries
from ..stores._base import Store
from ..stores._registry import open_store
from ._filters import NameFilter, values
from ._options import Options

if TYPE_CHECKING:
    import pyarrow

SCHEMA = StructType(
    [
        StructField("id", StringType(), False),
        StructField("sent_at", TimestampType(), False),
        StructField("body", BinaryType(), False),
        StructField("state", StringType(), False),
        StructField("receive_count", IntegerType(), False),
        StructField("visible_at", TimestampType(), False),
        StructField("group", StringType(), True),
        StructField("attributes", MapType(StringType(), StringType(), False), False),
    ]
)
#: The columns read from a message's object, left out without ``includeBody``.
READ_COLUMNS = ("body", "group", "attributes")
#: Rows per Arrow batch, and the body bytes after which a batch is cut early.
BATCH_ROWS = 4096
BATCH_BYTES = 32 << 20
#: Names per partition when ``numPartitions`` is not given: on a local disk a
#: read is a system call; on an object store a round trip, so a task of this
#: many reads takes about as long as a local one of the first.
NAMES_PER_PARTITION = 25_000
NAMES_PER_OBJECT_PARTITION = 4_096
MAX_DEFAULT_PARTITIONS = 256


def columns(options: Options) -> StructType:
    """The rows' schema: every column, or those of the name alone
    (:data:`READ_COLUMNS` left out) without ``includeBody``."""
    if options.include_body:
        return SCHEMA
    return StructType([f for f in SCHEMA.fields if f.name not in READ_COLUMNS])


class NamesPartition(InputPartition):
    """Contiguous names of one listing; states are judged at ``now_ms``.
    ``places`` names the messages wanted of a part of a bundle whose
    messages are not all wanted (a micro-batch that ends inside it); of the
    other names, every message is."""

    def __init__(
        self, names: list[str], now_ms: int, places: dict[str, tuple[int, ...]] | None = None
    ) -> None:
        super().__init__(None)
        self.names, self.now_ms = names, now_ms
        self.places = places or {}

    def wanted(self, name: str, parsed: names.Name) -> tuple[int, ...]:
        """The places of the messages wanted of the object listed as ``name``."""
        return self.places.get(name) or tuple(names.members_of(parsed.id))


def open_existing(options: Options) -> Store:
    """The queue's store, checked to be a queue (its config exists); nothing is
    created. :class:`QueueNotFound` otherwise, as for ``Queue(url, create=False)``."""
    store = open_store(options.url, options.storage_options)
    try:
        if not store.ensure(create=False):
            raise QueueNotFound(f"no queue at {store.url}")
        try:
            store.read(names.CONFIG_NAME)
        except FileNotFoundError:
            raise QueueNotFound(f"no queue at {store.url} (no vsqs config in it)") from None
    except BaseException:
        store.close()
        raise
    return store


def names_per_partition(store: Store) -> int:
    """Default partition size for this store's kind (see :data:`NAMES_PER_PARTITION`)."""
    return NAMES_PER_PARTITION if store.batch_width == 1 else NAMES_PER_OBJECT_PARTITION


def split(
    found: list[str],
    now_ms: int,
    wanted: int | None,
    size: int,
    places: dict[str, tuple[int, ...]] | None = None,
) -> list[NamesPartition]:
    """Cut sorted names into ``wanted`` contiguous partitions (default: of
    about ``size`` messages each), weighing each name by its messages (all
    of a part, or those ``places`` names); none for no names."""
    if not found:
        return []
    places = places or {}
    weights = [
        len(places[n]) if n in places else names.message_count(names.id_of(n)) for n in found
    ]
    total = sum(weights)
    count = min(wanted or min(MAX_DEFAULT_PARTITIONS, math.ceil(total / size)), len(found))
    step = math.ceil(total / count)
    out: list[NamesPartition] = []
    start = done = 0
    for end, weight in enumerate(weights, 1):
        done += weight
        if done >= step * (len(out) + 1) or end == len(found):
            chunk = found[start:end]
            out.append(NamesPartition(chunk, now_ms, {n: places[n] for n in chunk if n in places}))
            start = end
    return out


def read_partition(
    options: Options, partition: NamesPartition, keep: NameFilter | None = None
) -> Iterator[pyarrow.RecordBatch]:
    """The rows of a partition's messages that ``keep`` accepts, as Arrow record batches."""
    import pyarrow as pa

    stamp = pa.timestamp("us", tz="UTC")
    types = {
        "id": pa.string(),
        "sent_at": stamp,
        "body": pa.binary(),
        "state": pa.string(),
        "receive_count": pa.int32(),
        "visible_at": stamp,
        "group": pa.string(),
        "attributes": pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False)),
    }
    fields = columns(options).fields
    wanted = [f.name for f in fields]
    schema = pa.schema([pa.field(f.name, types[f.name], nullable=f.nullable) for f in fields])

    def batch(rows: list[dict[str, Any]]) -> pyarrow.RecordBatch:
        arrays = [pa.array([r[n] for r in rows], types[n]) for n in wanted]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    if not partition.names:
        return
    bundled = any(names.is_bundle(names.id_of(n)) for n in partition.names)
    store = open_existing(options) if options.include_body or bundled else None
    try:
        messages: Iterator[Found]
        if store is None:  # messages alone, without bodies: the listing's names
            messages = (Found(p, p.id, None) for p in map(_parse, partition.names))
        else:
            messages = _messages(store, partition, options.include_body)
        rows: list[dict[str, Any]] = []
        size = 0
        for found in messages:
            row = values(found.name, max(partition.now_ms, found.listed_ms), found.id)
            if keep is not None and not keep.passes(row):
                continue  # moved since the listing to where a pushed filter excludes it
            if options.include_body:
                assert found.data is not None
                row["body"], meta = unseal(found.id, found.data)
                row["group"], row["attributes"] = meta.group, list(meta.attributes.items())
                size += len(found.data)
            rows.append(row)
            if len(rows) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield batch(rows)
                rows, size = [], 0
        if rows:
            yield batch(rows)
    finally:
        if store is not None:
            store.close()


class Found(NamedTuple):
    """A message read: the name it is under (its own, or its part's), its own
    id, its object (``None`` when not read), and for a name found after the
    driver's listing, when that name was listed (its state is judged then
    at the earliest: a split's rest may be younger than the driver's listing)."""

    name: names.Name
    id: str
    data: bytes | None
    listed_ms: int = 0


def _parse(name: str) -> names.Name:
    parsed = names.parse(name)
    assert parsed is not None, "the driver plans message names only"
    return parsed


def _messages(store: Store, partition: NamesPartition, bodies: bool) -> Iterator[Found]:
    """The wanted messages of each name of ``partition``, in order. Objects
    are read ``store.batch_width`` at a time: every one with ``bodies``,
    else only parts of bundles (which name their messages' ids); a message
    alone unread is its listed name. An object that moved since the listing
    is looked up by its core (:class:`_Lookup`)."""
    lookup = _Lookup(store)
    width = store.batch_width
    for start in range(0, len(partition.names), width):
        chunk = partition.names[start : start + width]
        wanted = [n for n in chunk if bodies or names.is_bundle(names.id_of(n))]
        read = dict(zip(wanted, fan_out(lambda n: _read(store, n), wanted, width), strict=True))
        for name in chunk:
            parsed = _parse(name)
            places = partition.wanted(name, parsed)
            if name not in read:
                yield Found(parsed, parsed.id, None)
                continue
            data = read[name].result()
            if data is not None:
                yield from _members([parsed], data, places)
            else:
                yield from _members(*lookup.find(parsed.id, places), places, lookup.listed_ms)


def _members(
    holders: list[names.Name], data: bytes, places: tuple[int, ...], listed_ms: int = 0
) -> Iterator[Found]:
    """The messages at ``places`` of the objects ``holders`` (the names, as
    they are now, of one message, or of parts of one bundle, which all hold
    ``data``), in place order. Bytes that are not a bundle are one message:
    the object whole, under the part's id (once, for its first place)."""
    found: list[tuple[int, Found]] = []
    for holder in holders:
        members = bundle_members(holder.id, data) if names.is_bundle(holder.id) else None
        if members is None:
            first = names.members_of(holder.id)[0]
            if first in places:
                found.append((first, Found(holder, holder.id, data, listed_ms)))
            continue
        found.extend(
            (m.place, Found(holder, m.id, m.data, listed_ms)) for m in members if m.place in places
        )
    found.sort(key=lambda item: item[0])
    yield from (f for _, f in found)


class _Lookup:
    """Finds what became of an object that moved since the driver's listing:
    by its core (the first :data:`names.ID_LEN` characters of its id, which
    every name of a message, and every part of a bundle, keeps) in a listing
    made once for the partition, and again if a name found there moved once
    more since. A message or place no listing shows any more was deleted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.current: dict[str, list[str]] | None = None
        self.listed_ms = 0  # when the current listing was made

    def find(self, object_id: str, places: tuple[int, ...]) -> tuple[list[names.Name], bytes]:
        """The names that now hold the messages at ``places`` of ``object_id``,
        and their bytes (no names if none is left)."""
        core, wanted = object_id[: names.ID_LEN], set(places)
        holders: list[names.Name] = []
        data = b""
        for fresh in (False, True):
            if self.current is None or fresh:
                self.listed_ms = int(time.time() * 1000)
                self.current = _names_by_core(self.store)
            holders, data, moved = [], b"", False
            for name in self.current.get(core, []):
                parsed = _parse(name)
                if wanted.intersection(names.members_of(parsed.id)):
                    got = _read(self.store, name)
                    moved = moved or got is None  # since this listing: list once more
                    if got is not None:
                        holders.append(parsed)
                        data = got
            if not moved:
                break
        return holders, data


def _read(store: Store, name: str) -> bytes | None:
    try:
        return store.read(name)
    except FileNotFoundError:
        return None


def _names_by_core(store: Store) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for e in entries(store, 0):
        if e.is_message:
            found.setdefault(e.parsed.id[: names.ID_LEN], []).append(e.name)
    return found
