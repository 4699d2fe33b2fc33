"""The ``vsqs`` Python data source: batch reads, streaming reads and writes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from .._errors import InvalidArgument
from .._inspect import entries
from ._options import Options
from ._read import SCHEMA, NamesPartition, open_existing, read_partition, split
from ._stream import QueueStreamReader
from ._write import QueueWriter

if TYPE_CHECKING:
    import pyarrow


class VsqsDataSource(DataSource):
    """``format("vsqs")``: a queue as a table of its messages (see ``docs/spark.md``)."""

    @classmethod
    def name(cls) -> str:
        return "vsqs"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SnapshotReader(Options.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return QueueStreamReader(Options.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidArgument(
                "a vsqs queue is append-only: use mode('append'); to empty a queue, "
                "call vsqs.Queue(url).purge()"
            )
        return QueueWriter(Options.parse(self.options), schema)


class SnapshotReader(DataSourceReader):
    """One sorted listing on the driver; executors read contiguous slices of it."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        now_ms = int(time.time() * 1000)
        store = open_existing(self.options)
        try:
            found = sorted(e.name for e in entries(store, now_ms) if e.state in self.options.states)
        finally:
            store.close()
        return list(split(found, now_ms, self.options.num_partitions))

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, NamesPartition)
        return read_partition(self.options, partition)
