"""Listing on the driver and reading in the executors, shared by the batch
and streaming readers.

The driver lists once and cuts the sorted names into contiguous partitions;
executors read the files through the queue's store (fsspec for URLs), never
rename or delete anything. A message renamed between listing and reading
(received, extended, released) is read under its new name; one deleted
meanwhile is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .. import _names as names
from .._errors import QueueNotFound
from .._inspect import entries
from .._registry import open_store
from .._store import Store
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
    ]
)
#: Rows per Arrow batch, and the body bytes after which a batch is cut early.
BATCH_ROWS = 4096
BATCH_BYTES = 32 << 20
#: Names per partition when ``numPartitions`` is not given.
NAMES_PER_PARTITION = 25_000
MAX_DEFAULT_PARTITIONS = 256


class NamesPartition(InputPartition):
    """Contiguous message names of one listing; states are judged at ``now_ms``."""

    def __init__(self, names: list[str], now_ms: int) -> None:
        super().__init__(None)
        self.names, self.now_ms = names, now_ms


def open_existing(options: Options) -> Store:
    """The queue's store, checked to exist; nothing is created."""
    store = open_store(options.url, options.storage_options)
    if not store.ensure(create=False):
        raise QueueNotFound(f"no queue at {store.url}")
    return store


def split(found: list[str], now_ms: int, wanted: int | None) -> list[NamesPartition]:
    """Cut sorted names into ``wanted`` contiguous partitions (default: by size)."""
    if not found:
        return []
    count = wanted or min(MAX_DEFAULT_PARTITIONS, math.ceil(len(found) / NAMES_PER_PARTITION))
    count = min(count, len(found))
    size = math.ceil(len(found) / count)
    return [NamesPartition(found[i : i + size], now_ms) for i in range(0, len(found), size)]


def read_partition(options: Options, partition: NamesPartition) -> Iterator[pyarrow.RecordBatch]:
    """The rows of a partition's messages, as Arrow record batches."""
    import pyarrow as pa

    stamp = pa.timestamp("us", tz="UTC")
    schema = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("sent_at", stamp, nullable=False),
            pa.field("body", pa.binary(), nullable=False),
            pa.field("state", pa.string(), nullable=False),
            pa.field("receive_count", pa.int32(), nullable=False),
            pa.field("visible_at", stamp, nullable=False),
        ]
    )

    def batch(rows: list[tuple[Any, ...]]) -> pyarrow.RecordBatch:
        columns = zip(*rows, strict=True)
        return pa.RecordBatch.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
        )

    store = open_existing(options)
    try:
        rows: list[tuple[Any, ...]] = []
        size = 0
        for parsed, body in _bodies(store, partition.names):
            sent = names.id_ms(parsed.id)
            expiry = sent if parsed.expiry_ms is None else parsed.expiry_ms
            state = names.visibility(parsed, partition.now_ms)
            rows.append((parsed.id, sent * 1000, body, state, parsed.receive_count, expiry * 1000))
            size += len(body)
            if len(rows) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield batch(rows)
                rows, size = [], 0
        if rows:
            yield batch(rows)
    finally:
        store.close()


def _bodies(store: Store, wanted: Iterable[str]) -> Iterator[tuple[names.Name, bytes]]:
    """Read each (message) name. One that moved is looked up by id in a new
    listing, made once for the partition and again if it moved once more
    since; one no listing shows any more was deleted and is skipped."""
    current: dict[str, str] | None = None
    for name in wanted:
        parsed = names.parse(name)
        assert parsed is not None, "the driver plans message names only"
        body = _read(store, name)
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
