"""A small Spark standalone cluster on 127.0.0.1, from the pip-installed pyspark.

One master and two workers (1 core, 1 GB each), started with ``spark-class``
(the pip package has no ``start-master.sh``) on ports the JVMs choose
themselves (``--port 0``): the master's URL is read from its log. Each daemon
runs in a process group of its own, and stopping the cluster kills the groups,
so executors and their Python workers go with their worker.

A JVM hosts one SparkContext and the test session already has a local one, so
drivers on the cluster run in subprocesses (:meth:`SparkCluster.run`).

The daemons' environment has no ``PYTHONPATH``: what an executor's Python can
import is what its interpreter (``spark.pyspark.python``) and the driver's
``spark.executorEnv.PYTHONPATH`` or ``--py-files`` give it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The checkout the tests run from: executors import vsqs from here.
CHECKOUT = Path(__file__).resolve().parents[2]
#: Generous: a loaded machine starts JVMs slowly; a stuck daemon still fails.
START_DEADLINE = 180.0
#: How long one driver program may run.
DRIVER_DEADLINE = 600.0
#: Daemons listen on 127.0.0.1, on ports of the system's choice.
LOOPBACK = ("--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
#: What each worker offers.
WORKER = ("--cores", "1", "--memory", "1g")
#: JVMs that start fast and run short jobs: no optimising JIT compiler.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: ``spark-defaults.conf`` of the daemons and of the drivers :meth:`SparkCluster.run`
#: starts. The master's REST server would take the fixed port 6066.
SPARK_DEFAULTS = f"""\
spark.master.rest.enabled false
spark.driver.extraJavaOptions {QUICK_JVM}
spark.executor.extraJavaOptions {QUICK_JVM}
spark.executor.memory 512m
spark.ui.enabled false
spark.ui.showConsoleProgress false
"""


@dataclass(frozen=True)
class SparkCluster:
    """A running standalone cluster."""

    #: ``spark://127.0.0.1:<port>``
    url: str
    #: Where the daemons keep their logs and work directories.
    home: Path

    def start(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[str]:
        """Start a driver program (``argv``) in a process of its own, in this
        environment without ``PYTHONPATH``, updated with ``env``, with
        ``VSQS_SPARK_MASTER`` naming the cluster and the cluster's
        ``spark-defaults.conf``."""
        run_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        run_env.update(
            env or {},
            VSQS_SPARK_MASTER=self.url,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_CONF_DIR=str(self.home / "conf"),
        )
        return subprocess.Popen(
            list(argv),
            env=run_env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def wait(self, driver: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
        """Wait for a driver program :meth:`start` started (at most
        DRIVER_DEADLINE); fail the test with its output if it exits non-zero."""
        try:
            stdout, stderr = driver.communicate(timeout=DRIVER_DEADLINE)
        except subprocess.TimeoutExpired:
            stdout, stderr = self.stop(driver)
        except BaseException:  # the test was interrupted (pytest-timeout, Ctrl-C)
            self.stop(driver)
            raise
        if driver.returncode != 0:
            pytest.fail(
                f"{driver.args[0]} exited with {driver.returncode}:\n{stdout[-4000:]}\n"
                f"{stderr[-8000:]}"
            )
        return subprocess.CompletedProcess(driver.args, driver.returncode, stdout, stderr)

    @staticmethod
    def stop(driver: subprocess.Popen[str]) -> tuple[str, str]:
        """Kill a driver program and its JVM (its process group); its output."""
        with suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        return driver.communicate()

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """:meth:`start` a driver program and :meth:`wait` for it."""
        return self.wait(self.start(argv, env=env, cwd=cwd))


def spark_class() -> Path:
    """``bin/spark-class`` of the installed pyspark."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def daemon_env(home: Path) -> dict[str, str]:
    """The daemons' environment: local dirs under ``home``, no ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "spark-defaults.conf").write_text(SPARK_DEFAULTS)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(conf),
        SPARK_LOCAL_DIRS=str(home / "local"),
        SPARK_DAEMON_MEMORY="512m",
        SPARK_DAEMON_JAVA_OPTS=QUICK_JVM,
    )
    return env


@contextmanager
def daemon(name: str, args: Sequence[str], home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``spark-class <args>`` in a process group of its own, its output in
    ``home/<name>.log``; yield it; kill the group on the way out."""
    log = home / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(spark_class()), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=daemon_env(home),
            start_new_session=True,
        )
    try:
        yield process
    finally:
        _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the daemon and everything in its group (its executors); reap it.
    A test cluster has nothing to save, and a Python daemon of an executor
    leaves when its executor's pipe closes."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_for_log(
    log: Path, pattern: str, count: int, daemons: Sequence[subprocess.Popen[bytes]]
) -> re.Match[str]:
    """Poll ``log`` until ``pattern`` has matched ``count`` times; return the
    last match. Fails at once if one of ``daemons`` exits."""
    deadline = time.monotonic() + START_DEADLINE
    while True:
        text = log.read_text(errors="replace")
        found = list(re.finditer(pattern, text))
        if len(found) >= count:
            return found[-1]
        exited = [d.args for d in daemons if d.poll() is not None]
        if exited or time.monotonic() > deadline:
            what = f"{exited[0]} exited" if exited else "timed out"
            raise RuntimeError(f"{what} before {log.name} logged {pattern!r}:\n{text[-4000:]}")
        time.sleep(0.2)


@contextmanager
def spark_cluster_at(home: Path, workers: int = 2) -> Iterator[SparkCluster]:
    """Start a master and ``workers`` workers under ``home``; stop them all."""
    home.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        master = stack.enter_context(
            daemon("master", ["org.apache.spark.deploy.master.Master", *LOOPBACK], home)
        )
        log = home / "master.log"
        url = wait_for_log(
            log, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", 1, [master]
        )[1]
        started = [master]
        for i in range(workers):
            worker = ["org.apache.spark.deploy.worker.Worker", *LOOPBACK, *WORKER]
            started.append(
                stack.enter_context(
                    daemon(f"worker{i}", [*worker, "--work-dir", str(home / f"work{i}"), url], home)
                )
            )
        wait_for_log(log, r"Registering worker 127\.0\.0\.1:\d+", workers, started)
        yield SparkCluster(url, home)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone cluster shared by the session's cluster tests."""
    pytest.importorskip("pyspark", reason="the spark extra is part of .[test]")
    with spark_cluster_at(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


def checkout_env() -> dict[str, str]:
    """Environment for a driver program of ``tests/support/spark_jobs.py`` that runs
    this interpreter on the driver and the executors, both importing vsqs
    from the checkout under test."""
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": str(CHECKOUT),
        "VSQS_EXECUTOR_PYTHONPATH": str(CHECKOUT),
    }
