"""The ``vsqs`` Python data source: batch reads, streaming reads and writes."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from .._errors import InvalidArgument, VsqsError
from .._inspect import entries
from ._filters import NameFilter
from ._options import READ, STREAM, WRITE, Options
from ._read import (
    NamesPartition,
    columns,
    names_per_partition,
    open_existing,
    read_partition,
    split,
)
from ._stream import QueueStreamReader, RefusedStream
from ._write import QueueWriter

if TYPE_CHECKING:
    import pyarrow


class VsqsDataSource(DataSource):
    """``format("vsqs")``: a queue as a table of its messages (see ``docs/spark.md``)."""

    @classmethod
    def name(cls) -> str:
        return "vsqs"

    def schema(self) -> StructType:
        # Spark asks at load() of a read or a stream: every option is checked
        # here, before anything runs (writes never ask).
        return columns(Options.parse(self.options, READ, STREAM))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = Options.parse(self.options, READ)
        return FilteringReader(options) if options.filter_pushdown else SnapshotReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return QueueStreamReader(Options.parse(self.options, STREAM))
        except VsqsError as exc:  # an option of another use: refused at the stream's first call
            return RefusedStream(exc)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidArgument(
                "a vsqs queue is append-only: use mode('append'); to empty a queue, "
                "call vsqs.Queue(url).purge()"
            )
        return QueueWriter(Options.parse(self.options, WRITE), schema)


class SnapshotReader(DataSourceReader):
    """One sorted listing on the driver; executors read contiguous slices of it."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.keep = NameFilter()

    def partitions(self) -> list[InputPartition]:
        """The planned slices; one empty one when nothing matches (PySpark would
        otherwise plan a partition of its own, which :meth:`read` cannot read)."""
        now_ms = int(time.time() * 1000)
        store = open_existing(self.options)
        try:
            found = sorted(
                e.name
                for e in entries(store, now_ms)
                if e.state in self.options.states and self.keep.accepts(e.parsed, now_ms)
            )
            size = names_per_partition(store)
        finally:
            store.close()
        planned = split(found, now_ms, self.options.num_partitions, size)
        return list(planned) or [NamesPartition([], now_ms)]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, NamesPartition)
        return read_partition(self.options, partition, self.keep)


class FilteringReader(SnapshotReader):
    """A snapshot that takes the filters Spark pushes down (``filterPushdown``):
    those on columns a name gives select names on the driver."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return list(self.keep.push(filters))
