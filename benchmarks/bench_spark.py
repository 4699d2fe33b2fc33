"""Spark benchmarks: reading a queue's backlog and writing DataFrames into a queue.

On one SparkSession (local[2], or a standalone cluster with ``--master``) and
one backlog of small JSON messages in a local directory, in the same run:

* rows/s of ``spark.read.format("vsqs")`` (every body read) against
  ``spark.read.json`` with an explicit schema and a file-name filter (the
  queue's message files only) and ``spark.read.format("binaryFile")`` on the
  same directory; each is run ``--repeat`` times and the best is kept;
* rows/s of ``df.write.format("vsqs")`` against ``Queue.send_batch`` of the
  same bodies in this process (non-durable both, so the figures compare the
  code, not the disk's flushes).

With ``--s3``, the backlog is in S3 instead: a moto server behind the fault
proxy of ``benchmarks/bench_s3.py``'s latency mode, holding every response
``--rtt`` milliseconds. ``spark.read.json`` and ``binaryFile`` cannot reach
``s3://`` without the hadoop-aws jars, which the pip package lacks, so they
are skipped; the reference is the floor of that mode instead: one process
listing the prefix and reading every body through the same proxy, 32 GETs
side by side (bench_s3's ``Floor``), with no Spark and no queue logic.

``--master spark://HOST:PORT`` runs on a standalone cluster whose workers
share this machine's disk (the backlog is a local directory; with ``--s3``
they reach the proxy on 127.0.0.1): executors run this interpreter with
this checkout on ``PYTHONPATH``. ``--cluster`` starts one for the run (a
master and two workers of 1 core on 127.0.0.1, the test suite's
``tests/support/spark_cluster.py``) and stops it after.

    python benchmarks/bench_spark.py                  # 100 000 messages, a few minutes
    python benchmarks/bench_spark.py --quick          # 10 000 messages (S3: 1 000)
    python benchmarks/bench_spark.py --s3 --rtt 20    # S3 at 20 ms a request
    python benchmarks/bench_spark.py --master spark://127.0.0.1:7077
    python benchmarks/bench_spark.py --cluster --quick
    python benchmarks/bench_spark.py --json figures.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import vsqs
from vsqs import _names as names

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_s3 import Floor, fresh_url  # noqa: E402
from tests.support.fault_proxy import FaultProxy  # noqa: E402
from tests.support.moto_server import moto_s3  # noqa: E402
from tests.support.spark_cluster import spark_cluster_at  # noqa: E402

BATCH = 10_000


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


def session(master: str | None) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master or "local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if master:
        builder = builder.config("spark.executorEnv.PYTHONPATH", str(ROOT))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def fill(q: vsqs.Queue, bodies: list[bytes]) -> None:
    for i in range(0, len(bodies), BATCH):
        q.send_batch(bodies[i : i + BATCH])


def count_vsqs(spark: Any, url: str, options: dict[str, Any] | None = None) -> Callable[[], int]:
    """A read of every body of the queue at ``url``; returns the rows it saw."""
    from pyspark.sql import functions as F

    def run() -> int:
        reader = spark.read.format("vsqs")
        if options:
            reader = reader.option("storageOptions", json.dumps(options))
        row = reader.load(url).agg(F.count("*"), F.sum(F.length("body"))).collect()[0]
        return int(row[0])

    return run


def local_figures(spark: Any, root: Path, bodies: list[bytes], repeat: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    n = len(bodies)
    with vsqs.Queue(root / "backlog", durable=False) as q:
        fill(q, bodies)
    path = str(root / "backlog")
    count_vsqs(spark, path)()  # warm the Python workers

    def count_json() -> int:
        df = spark.read.schema("n long, payload string").json(path, pathGlobFilter="[0-9]*")
        row = df.agg(F.count("*"), F.sum(F.length("payload"))).collect()[0]
        return int(row[0])

    def count_binary() -> int:
        df = spark.read.format("binaryFile").option("pathGlobFilter", "[0-9]*").load(path)
        row = df.agg(F.count("*"), F.sum(F.length("content"))).collect()[0]
        return int(row[0])

    read = {
        "vsqs": best_rate(n, repeat, count_vsqs(spark, path)),
        "json": best_rate(n, repeat, count_json),
        "binaryFile": best_rate(n, repeat, count_binary),
    }
    figures: dict[str, Any] = {"read_rows_per_s": read}
    figures["vsqs_over_json"] = read["vsqs"] / read["json"]
    figures["vsqs_over_binaryFile"] = read["vsqs"] / read["binaryFile"]

    frame = spark.createDataFrame([(b,) for b in bodies], "body binary").repartition(2).cache()
    frame.count()
    writes = []
    for attempt in range(repeat):
        target = str(root / f"written{attempt}")
        start = time.perf_counter()
        frame.write.format("vsqs").option("durable", "false").mode("append").save(target)
        writes.append(n / (time.perf_counter() - start))
        shutil.rmtree(target)
    sends = []
    for attempt in range(repeat):
        target = root / f"sent{attempt}"
        start = time.perf_counter()
        with vsqs.Queue(target, durable=False) as q:
            fill(q, bodies)
        sends.append(n / (time.perf_counter() - start))
        shutil.rmtree(target)
    figures["write_rows_per_s"] = max(writes)
    figures["send_batch_rows_per_s"] = max(sends)
    figures["write_over_send_batch"] = max(writes) / max(sends)
    return figures


def s3_figures(spark: Any, bodies: list[bytes], repeat: int, rtt: float) -> dict[str, Any]:
    """Read rows/s of ``format("vsqs")`` on S3 at ``rtt`` seconds a request, and the floor."""
    n = len(bodies)
    with moto_s3("bench") as upstream:
        url = fresh_url()
        with vsqs.Queue(url, storage_options=upstream) as q:  # filled without the delay
            fill(q, bodies)
        endpoint = upstream["client_kwargs"]["endpoint_url"]
        with FaultProxy(endpoint) as proxy:
            options = copy.deepcopy(upstream)
            options["client_kwargs"]["endpoint_url"] = proxy.endpoint
            proxy.arm("slow", every=True, delay=rtt)
            vsqs_rate = best_rate(n, repeat, count_vsqs(spark, url, options))
            floor = Floor(options | {"skip_instance_cache": True})
            prefix = url.removeprefix("s3://")

            def raw() -> int:
                listed = floor.fs.ls(prefix, detail=False, refresh=True)
                paths = [p for p in listed if names.parse(p.rpartition("/")[2])]
                return len(list(floor.pool.map(floor.fs.cat_file, paths)))

            floor_rate = best_rate(n, repeat, raw)
    return {
        "rtt_ms": rtt * 1000,
        "read_rows_per_s": {"vsqs": vsqs_rate, "raw_get_32_wide": floor_rate},
        "vsqs_over_raw": vsqs_rate / floor_rate,
        "skipped": "spark.read.json and binaryFile: s3:// needs the hadoop-aws jars",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, help="default 100 000 (S3: 5 000)")
    parser.add_argument("--quick", action="store_true", help="10 000 messages (S3: 1 000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", help="a standalone cluster's spark:// URL (default local[2])")
    parser.add_argument("--cluster", action="store_true", help="start a cluster for the run")
    parser.add_argument("--s3", action="store_true", help="the backlog in S3 (moto) instead")
    parser.add_argument("--rtt", type=float, default=20, metavar="MS", help="with --s3 (20)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    default = (1_000 if args.quick else 5_000) if args.s3 else (10_000 if args.quick else 100_000)
    n = args.messages or default
    bodies = [json.dumps({"n": i, "payload": "x" * 64}).encode() for i in range(n)]
    root = Path(tempfile.mkdtemp(prefix="vsqs-bench-spark-"))
    subprocess.run(["chattr", "+T", str(root)], capture_output=True, check=False)
    master = args.master
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        if args.cluster:
            master = stack.enter_context(spark_cluster_at(root / "cluster")).url
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        spark = session(master)
        stack.callback(spark.stop)
        figures: dict[str, Any] = {"messages": n, "master": master or "local[2]"}
        if args.s3:
            figures |= s3_figures(spark, bodies, args.repeat, args.rtt / 1000)
        else:
            figures |= local_figures(spark, root, bodies, args.repeat)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
