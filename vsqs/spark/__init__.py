"""vsqs for Spark: ``format("vsqs")`` reads, streams and writes queues.

Needs ``pip install 'vsqs[spark]'`` (PySpark >= 4.2 and pyarrow); importing
:mod:`vsqs` alone never imports either. Once installed, Spark finds the data
source by itself (the ``pyspark_vsqs`` module); :func:`register` does the
same explicitly. See ``docs/spark.md``.
"""

from __future__ import annotations

from ._consume import consume
from ._source import VsqsDataSource

__all__ = ["VsqsDataSource", "consume", "register"]


def register(spark: object) -> None:
    """Register ``format("vsqs")`` with a SparkSession."""
    spark.dataSource.register(VsqsDataSource)  # type: ignore[attr-defined]
