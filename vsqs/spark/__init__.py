"""vsqs for Spark: ``format("vsqs")`` reads, streams and writes queues.

Needs ``pip install 'vsqs[spark]'`` (PySpark >= 4.2 and pyarrow); importing
:mod:`vsqs` alone never imports either. Once installed, Spark finds the data
source by itself (the ``pyspark_vsqs`` module); :func:`register` does the
same explicitly. See ``docs/spark.md``.
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401 - the data source's batches need it
    import pyspark  # noqa: F401
except ImportError as exc:  # name the extra, as the s3 and gcs backends do
    raise ModuleNotFoundError(
        f"vsqs.spark needs PySpark and pyarrow ({exc.name} is missing): pip install 'vsqs[spark]'",
        name=exc.name,
    ) from None

from .._errors import InvalidArgument
from ._consume import ConsumeReport, consume
from ._source import VsqsDataSource

__all__ = ["ConsumeReport", "VsqsDataSource", "consume", "register"]


def register(spark: object) -> None:
    """Register ``format("vsqs")`` with a SparkSession (classic or Spark Connect).

    Needed when the interpreter that Spark looks data sources up with (the
    ``PYSPARK_PYTHON`` of the driver's environment) cannot import vsqs, e.g.
    when vsqs reaches the cluster with ``--py-files vsqs.zip``: without it,
    ``format("vsqs")`` fails with ``DATA_SOURCE_NOT_FOUND``. Harmless
    otherwise. Executors still need vsqs: installed, or in ``--py-files``
    (docs/spark.md, "Reaching the executors").
    """
    sources = getattr(spark, "dataSource", None)
    if sources is None:
        raise InvalidArgument(
            f"register needs a SparkSession of PySpark >= 4.2, not {type(spark).__name__}"
        )
    sources.register(VsqsDataSource)
