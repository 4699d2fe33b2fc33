"""Listing on the driver and reading in the executors, shared by the batch
and streaming readers.

The driver lists once and cuts the sorted names into contiguous partitions;
executors read the files through the queue's store (fsspec for URLs), never
rename or delete anything. A task reads the bodies of its messages
``Store.batch_width`` at a time (one after another on a local disk; side by
side on object stores, where each read is a round trip). A message renamed
between listing and reading (received, extended, released) is read under its
new name; one deleted meanwhile is skipped. Without ``includeBody`` nothing is
read: the rows are the listing's names.

A message stored as an envelope (format 3: one with a group or attributes)
is unsealed: ``body`` is the body that was sent, ``group`` its group (null
without one) and ``attributes`` its attributes (an empty map without).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

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
    """Contiguous message names of one listing; states are judged at ``now_ms``."""

    def __init__(self, names: list[str], now_ms: int) -> None:
        super().__init__(None)
        self.names, self.now_ms = names, now_ms


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


def split(found: list[str], now_ms: int, wanted: int | None, size: int) -> list[NamesPartition]:
    """Cut sorted names into ``wanted`` contiguous partitions (default: of
    about ``size`` names each); none for no names."""
    if not found:
        return []
    count = wanted or min(MAX_DEFAULT_PARTITIONS, math.ceil(len(found) / size))
    count = min(count, len(found))
    step = math.ceil(len(found) / count)
    return [NamesPartition(found[i : i + step], now_ms) for i in range(0, len(found), step)]


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
    store = open_existing(options) if options.include_body else None
    try:
        found: Iterable[tuple[names.Name, bytes | None]]
        if store is None:
            found = ((_parse(name), None) for name in partition.names)
        else:
            found = _bodies(store, partition.names)
        rows: list[dict[str, Any]] = []
        size = 0
        for parsed, body in found:
            if keep is not None and not keep.accepts(parsed, partition.now_ms):
                continue  # moved since the listing to where a pushed filter excludes it
            row = values(parsed, partition.now_ms)
            if body is not None:
                row["body"], meta = unseal(parsed.id, body)
                row["group"], row["attributes"] = meta.group, list(meta.attributes.items())
                size += len(body)
            rows.append(row)
            if len(rows) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield batch(rows)
                rows, size = [], 0
        if rows:
            yield batch(rows)
    finally:
        if store is not None:
            store.close()


def _parse(name: str) -> names.Name:
    parsed = names.parse(name)
    assert parsed is not None, "the driver plans message names only"
    return parsed


def _bodies(store: Store, wanted: list[str]) -> Iterator[tuple[names.Name, bytes]]:
    """Read each (message) name, ``store.batch_width`` at a time. One that
    moved is looked up by id in a new listing, made once for the partition
    and again if it moved once more since; one no listing shows any more was
    deleted and is skipped."""
    current: dict[str, str] | None = None
    width = store.batch_width
    for start in range(0, len(wanted), width):
        chunk = wanted[start : start + width]
        read = fan_out(lambda name: _read(store, name), chunk, width)
        for name, outcome in zip(chunk, read, strict=True):
            parsed, body = _parse(name), outcome.result()
            for fresh in (False, True):
                if body is not None:
                    break
                if current is None or fresh:
                    current = _names_by_id(store)
                if (moved := current.get(parsed.id)) is None:
                    break  # deleted since the listing
                parsed, body = names.parse(moved) or parsed, _read(store, moved)
            if body is not None:
                yield parsed, body


def _read(store: Store, name: str) -> bytes | None:
    try:
        return store.read(name)
    except FileNotFoundError:
        return None


def _names_by_id(store: Store) -> dict[str, str]:
    return {e.parsed.id: e.name for e in entries(store, 0) if e.is_message}
