"""Spark helpers the Spark test modules share: a queue directory's names,
one ``availableNow`` stream run into parquet, what it wrote, and the
request that reads a message's body."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from vsqs import _names as names


def listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# ------------------------------------------------------------------ streaming
def run_stream(
    spark: SparkSession, queue: Path, out: Path, checkpoint: Path, **options: str
) -> list[Any]:
    """One availableNow run into parquet; returns the run's batch sizes."""
    stream = spark.readStream.format("vsqs").option("settleSeconds", "0")
    for key, value in options.items():
        stream = stream.option(key, value)
    query = (
        stream.load(str(queue))
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def streamed(spark: SparkSession, out: Path) -> list[str]:
    if not out.exists():
        return []
    return [r.id for r in spark.read.parquet(str(out)).collect()]


# ------------------------------------------------------- 5. S3 at latency
def body_get(method: str, path: str, headers: dict[str, str] | None = None) -> bool:
    """A GET of a message's object (a body read; not a listing or the config)."""
    return method == "GET" and names.parse(path.split("?", 1)[0].rpartition("/")[2]) is not None
