"""vsqs.spark on a Spark standalone cluster: what is about executors.

A master and two workers (``tests/support/spark_cluster.py``); each test runs a
driver program of ``tests/support/spark_jobs.py`` in a process of its own (a JVM
hosts one SparkContext, and the test process already has its local one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _names as names

pq = pytest.importorskip("pyarrow.parquet", reason="the spark extra is part of .[test]")

from .support.fault_proxy import FaultProxy, Gate  # noqa: E402
from .support.servers import Server, proxied  # noqa: E402
from .support.spark_cluster import (  # noqa: E402
    CHECKOUT,
    START_DEADLINE,
    SparkCluster,
    checkout_env,
    spark_class,
)
from .support.spark_streams import (  # noqa: E402
    body_get,
    listing,
)
from .support.waiting import wait_until  # noqa: E402

JOBS = Path(__file__).parent / "support" / "spark_jobs.py"


def result(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON line a driver program printed last."""
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_consume_on_a_cluster_deletes_the_good_rows_and_dead_letters_the_failed_ones(
    spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """Executors write 997 rows and flag 3, which ``process`` returns: only
    those 3 come again, and with ``max_receives=1`` they go to the dead-letter
    queue; the 997 are deleted."""
    dead = vsqs.Queue(tmp_path / "dead")
    q = vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter=str(tmp_path / "dead"))
    bad_rows = (10, 500, 999)
    ids = q.send_batch([b"bad %d" % i if i in bad_rows else b"job %d" % i for i in range(1000)])
    out = tmp_path / "out"
    done = spark_cluster.run(
        [sys.executable, str(JOBS), "consume_rows", str(tmp_path / "q"), str(out)],
        env=checkout_env(),
    )
    assert result(done) == {"batches": 1, "messages": 1000, "expired": 0, "failed": 3}
    written = pq.read_table(out).column("id").to_pylist()
    bad = {ids[i] for i in bad_rows}
    assert sorted(written) == sorted(set(ids) - bad)
    # Released after a backoff of at most 0.01 s; received again, they are dead-lettered.
    wait_until(lambda: q.receive() is None and dead.stats().ready == 3, 60, "the dead letters")
    assert {m.id for m in dead.peek(10)} == bad
    assert q.stats().ready == q.stats().in_flight == q.stats().delayed == 0


def executor_of(pid: int) -> int:
    """The executor JVM a Python worker runs under: its nearest ``java`` ancestor."""
    while pid > 1:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    raise AssertionError("no JVM above the Python worker")


def staged_bodies(queue: Path) -> list[bytes]:
    """The bodies of the ``.new`` files in ``queue`` (a file being written may
    be short; one being removed is skipped)."""
    found = []
    for name in listing(queue):
        if name.endswith(names.NEW_SUFFIX):
            with suppress(FileNotFoundError):
                found.append((queue / name).read_bytes())
    return found


def test_a_write_that_loses_an_executor_publishes_each_row_once_and_holds_no_stream_back(
    spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """Issue 17, item 2, on executors: the second task's first attempt has
    staged rows when its executor's JVM and Python worker are killed; Spark
    retries the task elsewhere and the job succeeds. Each row is then
    published once and nothing staged stays, so nothing holds a stream back:
    only a ``.new`` does. (The stream itself runs after a lost task's write on
    the local session, in ``test_spark_source``; a stream here, at load 15,
    failed PySpark's fixed 10 s for a new Python worker to connect back.)"""
    queue, victim = tmp_path / "q", tmp_path / "victim"
    vsqs.Queue(queue).close()
    job = [sys.executable, str(JOBS), "write_losing_an_executor", str(queue), str(victim)]
    driver = spark_cluster.start(job, env=checkout_env())
    try:
        wait_until(
            lambda: (
                driver.poll() is not None
                or (victim.exists() and any(b"doomed" in b for b in staged_bodies(queue)))
            ),
            START_DEADLINE,
            "the doomed task's staging",
        )
        assert driver.poll() is None, "the job ended before its executor was lost"
        worker = int(victim.read_text())
        os.kill(executor_of(worker), signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
    finally:
        done = spark_cluster.wait(driver)
    assert result(done) == {"rows": 2000}
    assert staged_bodies(queue) == [], "the lost task's staging outlived its job"
    with vsqs.Queue(queue) as q:
        sent = sorted(bytes(m.body).split(b" ")[:2] for m in q.peek(3000))
    assert sent == sorted(
        [b"row", b"%d" % i] if i < 1000 else [b"doomed", b"%d" % i] for i in range(2000)
    )


def test_an_executor_reads_s3_bodies_side_by_side(
    spark_cluster: SparkCluster, s3_server: Server
) -> None:
    """Issue 17, item 5, on executors: the proxy holds a task's first body GET
    until a second one is in flight, which never happens if the task reads
    them one at a time."""
    url = s3_server.url()
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        sent = q.send_batch([f"s3 {i}".encode() for i in range(40)], bundle=False)
    with FaultProxy(s3_server.storage_options["client_kwargs"]["endpoint_url"]) as proxy:
        gate = proxy.gate = Gate(body_get)
        options = json.dumps(proxied(s3_server, proxy))
        job = [sys.executable, str(JOBS), "read_one_partition", url, options]
        done = spark_cluster.run(job, env=checkout_env())
    assert gate.most_in_flight >= 2
    assert result(done) == {"ids": sent, "last": "s3 39"}


def python_without_vsqs(where: Path) -> Path:
    """A virtualenv's interpreter that imports pyspark and pyarrow (this one's
    site-packages, through a ``.pth`` line) but not vsqs: the editable install
    of vsqs is itself a ``.pth`` file there, which Python does not process in
    a directory that a ``.pth`` added."""
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", where],
        check=True,
    )
    (site,) = (where / "lib").glob("python*/site-packages")
    (site / "spark.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin" / "python"


def test_py_files_reach_executors_without_vsqs_once_the_source_is_registered(
    spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """docs/spark.md's second way to reach executors: ``--py-files vsqs.zip``
    and ``vsqs.spark.register(spark)``. Without ``register``, Spark does not
    find the source: it looks data sources up with ``PYSPARK_PYTHON``, which
    does not see ``--py-files``."""
    python = python_without_vsqs(tmp_path / "venv")
    ours = Path(sys.executable).parent  # no interpreter of this virtualenv to fall back on
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != ours)
    env = {"PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python), "PATH": path}
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    check = subprocess.run(
        [python, "-c", "import pyspark, pyarrow, vsqs"],
        env=plain,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "No module named 'vsqs'" in check.stderr
    archive = tmp_path / "vsqs.zip"  # as docs/spark.md says
    subprocess.run(
        [sys.executable, "-m", "zipfile", "-c", archive, "vsqs/"], cwd=CHECKOUT, check=True
    )
    q = vsqs.Queue(tmp_path / "q")
    q.send_batch([b"%d" % i for i in range(50)])
    submit = spark_class().with_name("spark-submit")
    options = {
        "--master": spark_cluster.url,
        "--py-files": str(archive),
        "--conf": f"spark.pyspark.python={python}",
    }
    argv = [str(submit), *(x for pair in options.items() for x in pair)]
    job = [str(JOBS), "read_with_py_files", str(tmp_path / "q")]
    done = spark_cluster.run([*argv, *job], env=env, cwd=tmp_path)
    found = result(done)
    assert "DATA_SOURCE_NOT_FOUND" in found["before"]
    assert found["rows"] == 50
    assert "vsqs.zip" in found["driver"]
    assert found["executors"] and all("vsqs.zip" in path for path in found["executors"])


def test_register_names_what_it_needs() -> None:
    import vsqs.spark

    with pytest.raises(vsqs.InvalidArgument, match=r"needs a SparkSession .* not SparkContext"):
        vsqs.spark.register(type("SparkContext", (), {})())
