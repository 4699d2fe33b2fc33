"""Driver programs the tests run on the standalone cluster (``tests/_spark_cluster.py``).

Run as ``python tests/_spark_jobs.py JOB ARGS...`` or through ``spark-submit``;
each prints its result as one JSON line. The master comes from
``VSQS_SPARK_MASTER``; ``VSQS_EXECUTOR_PYTHONPATH``, if set, becomes the
executors' ``PYTHONPATH`` (the checkout under test).

Standalone on purpose: with ``spark-submit --py-files`` the driver's
interpreter may not have vsqs, so nothing here imports it before a job does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def session() -> SparkSession:
    builder = (
        SparkSession.builder.master(os.environ["VSQS_SPARK_MASTER"])
        .appName("vsqs-cluster-tests")
        .config("spark.sql.session.timeZone", "UTC")
    )
    path = os.environ.get("VSQS_EXECUTOR_PYTHONPATH")
    if path:
        builder = builder.config("spark.executorEnv.PYTHONPATH", path)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def consume_rows(url: str, out: str) -> dict[str, Any]:
    """Consume ``url``: executors write the rows whose body does not start
    with ``bad`` to parquet at ``out`` and flag the others, which ``process``
    returns as failed."""
    import vsqs.spark

    spark = session()
    bad = F.udf(lambda body: bytes(body).startswith(b"bad"), "boolean")  # executors' Python

    def process(df: DataFrame, batch_id: int) -> DataFrame:
        flagged = df.withColumn("bad", bad("body"))
        flagged.filter(~F.col("bad")).select("id").write.mode("append").parquet(out)
        return flagged.filter(F.col("bad"))

    report = vsqs.spark.consume(spark, url, process, max_messages=1000, retry_delay=0.01)
    return dataclasses.asdict(report)


def read_with_py_files(url: str) -> dict[str, Any]:
    """Read ``url`` before and after ``vsqs.spark.register``, with vsqs only
    in ``--py-files``; say where the driver and the executors found vsqs."""
    spark = session()
    try:
        before = f"{spark.read.format('vsqs').load(url).count()} rows"
    except Exception as exc:
        before = str(exc)
    import vsqs.spark

    vsqs.spark.register(spark)
    rows = spark.read.format("vsqs").load(url).count()
    found = spark.sparkContext.parallelize(range(4), 4).map(lambda _: __import__("vsqs").__file__)
    return {
        "before": before,
        "rows": rows,
        "driver": vsqs.__file__,
        "executors": sorted(set(found.collect())),
    }


JOBS = {"consume_rows": consume_rows, "read_with_py_files": read_with_py_files}

if __name__ == "__main__":
    print(json.dumps(JOBS[sys.argv[1]](*sys.argv[2:])), flush=True)
