"""Spark benchmarks: reading a queue's backlog and writing DataFrames into a queue.

On one local[2] SparkSession and one backlog of small JSON messages in a
local directory, in the same run:

* rows/s of ``spark.read.format("vsqs")`` (every body read) against
  ``spark.read.json`` with an explicit schema and a file-name filter (the
  queue's message files only) and ``spark.read.format("binaryFile")`` on the
  same directory; each is run ``--repeat`` times and the best is kept;
* rows/s of ``df.write.format("vsqs")`` against ``Queue.send_batch`` of the
  same bodies in this process (non-durable both, so the figures compare the
  code, not the disk's flushes).

    python benchmarks/bench_spark.py                  # 100 000 messages, a few minutes
    python benchmarks/bench_spark.py --messages 10000 # quick
    python benchmarks/bench_spark.py --json figures.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vsqs


def best_rate(rows: int, repeat: int, run: Callable[[], int]) -> float:
    """The best rows/s of ``repeat`` runs; ``run`` returns the rows it saw."""
    best = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        seen = run()
        elapsed = time.perf_counter() - start
        assert seen == rows, f"read {seen} rows, expected {rows}"
        best = max(best, rows / elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    root = Path(tempfile.mkdtemp(prefix="vsqs-bench-spark-"))
    subprocess.run(["chattr", "+T", str(root)], capture_output=True, check=False)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, Any] = {"messages": args.messages}
    try:
        n = args.messages
        bodies = [json.dumps({"n": i, "payload": "x" * 64}).encode() for i in range(n)]
        with vsqs.Queue(root / "backlog", durable=False) as q:
            for i in range(0, n, 10_000):
                q.send_batch(bodies[i : i + 10_000])
        path = str(root / "backlog")
        spark.read.format("vsqs").load(path).count()  # warm the Python workers

        def count_vsqs() -> int:
            df = spark.read.format("vsqs").load(path)
            row = df.agg(F.count("*"), F.sum(F.length("body"))).collect()[0]
            return int(row[0])

        def count_json() -> int:
            df = spark.read.schema("n long, payload string").json(path, pathGlobFilter="[0-9]*")
            row = df.agg(F.count("*"), F.sum(F.length("payload"))).collect()[0]
            return int(row[0])

        def count_binary() -> int:
            df = spark.read.format("binaryFile").option("pathGlobFilter", "[0-9]*").load(path)
            row = df.agg(F.count("*"), F.sum(F.length("content"))).collect()[0]
            return int(row[0])

        read = {
            "vsqs": best_rate(n, args.repeat, count_vsqs),
            "json": best_rate(n, args.repeat, count_json),
            "binaryFile": best_rate(n, args.repeat, count_binary),
        }
        figures["read_rows_per_s"] = read
        figures["vsqs_over_json"] = read["vsqs"] / read["json"]
        figures["vsqs_over_binaryFile"] = read["vsqs"] / read["binaryFile"]

        frame = spark.createDataFrame([(b,) for b in bodies], "body binary").repartition(2).cache()
        frame.count()
        writes = []
        for attempt in range(args.repeat):
            target = str(root / f"written{attempt}")
            start = time.perf_counter()
            frame.write.format("vsqs").option("durable", "false").mode("append").save(target)
            writes.append(n / (time.perf_counter() - start))
            shutil.rmtree(target)
        sends = []
        for attempt in range(args.repeat):
            target = root / f"sent{attempt}"
            start = time.perf_counter()
            with vsqs.Queue(target, durable=False) as q:
                for i in range(0, n, 10_000):
                    q.send_batch(bodies[i : i + 10_000])
            sends.append(n / (time.perf_counter() - start))
            shutil.rmtree(target)
        figures["write_rows_per_s"] = max(writes)
        figures["send_batch_rows_per_s"] = max(sends)
        figures["write_over_send_batch"] = max(writes) / max(sends)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
