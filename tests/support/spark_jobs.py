"""Driver programs the tests run on the standalone cluster (``tests/support/spark_cluster.py``).

Run as ``python tests/support/spark_jobs.py JOB ARGS...`` or through ``spark-submit``;
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
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
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


#: Rows of :func:`write_losing_an_executor`: two tasks of 1 000, 1 KiB each
#: (so that what the doomed task emits leaves the pipes' 64 KiB buffers).
ROWS, PAD = 2000, "." * 1024


def bodies(victim: Path) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function from ids to bodies, ``row <i>`` in the first
    task and ``doomed <i>`` in the second, whose first attempt emits 300 of
    them, writes its process id to ``victim`` and waits there, for the test to
    kill its executor."""

    def to_bodies(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        assert context is not None
        doomed = context.partitionId() == 1
        emitted = 0
        for batch in batches:
            for i in batch.column("id").to_pylist():
                if doomed and context.attemptNumber() == 0 and emitted == 300:
                    victim.with_suffix(".tmp").write_text(str(os.getpid()))
                    victim.with_suffix(".tmp").rename(victim)
                    time.sleep(3600)
                emitted += 1
                kind = "doomed" if doomed else "row"
                yield pa.record_batch([[f"{kind} {i} {PAD}"]], ["body"])

    return to_bodies


def write_losing_an_executor(url: str, victim: str) -> dict[str, Any]:
    """Write ROWS rows to ``url`` in two tasks; the second one's first attempt
    stops half-way (:func:`bodies`) until the test kills its executor, and
    Spark retries it elsewhere. The writer gets rows 10 at a time, so the
    doomed attempt has staged some by then."""
    spark = session()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    ids = spark.range(0, ROWS, 1, numPartitions=2)
    rows = ids.mapInArrow(bodies(Path(victim)), "body string")
    rows.write.format("vsqs").mode("append").save(url)
    return {"rows": spark.read.format("vsqs").load(url).count()}


def read_one_partition(url: str, storage_options: str) -> dict[str, Any]:
    """Read ``url`` (an object store, ``storage_options`` in JSON) in one task."""
    spark = session()
    reader = spark.read.format("vsqs").option("storageOptions", storage_options)
    rows = reader.option("numPartitions", "1").load(url).orderBy("id").collect()
    return {"ids": [r.id for r in rows], "last": bytes(rows[-1].body).decode()}


JOBS = {
    "read_one_partition": read_one_partition,
    "consume_rows": consume_rows,
    "read_with_py_files": read_with_py_files,
    "write_losing_an_executor": write_losing_an_executor,
}

if __name__ == "__main__":
    print(json.dumps(JOBS[sys.argv[1]](*sys.argv[2:])), flush=True)
