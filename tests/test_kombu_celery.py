"""Real ``celery worker`` processes (prefork pool) on the vsqs transport
(docs/celery.md): every task run once, a killed worker's task run after the
visibility timeout, countdowns as delays in the queue, Celery's own retries,
one run for a task id published twice, results through Celery's file
backend, and the same on S3 (moto). Runs are counted by what the tasks write
(tests/support/celery_app.py)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from benchmarks import bench_celery
from vsqs.kombu import vsqs_name

from .support.fault_proxy import FaultProxy
from .support.servers import Server, proxied

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parent.parent
#: A bound on a stall, not a measure: a loaded machine that makes progress never reaches it.
DEADLINE = 120.0


class Celeries:
    """Starts ``celery worker`` processes on one broker and kills them all at the end."""

    def __init__(self, tmp_path: Path, root: str, vt: float, storage: Any = None) -> None:
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.tmp = tmp_path
        self.root = root
        self.storage = storage
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "VSQS_CELERY_ROOT": root,
            "VSQS_CELERY_OUT": str(self.out),
            "VSQS_CELERY_VT": str(vt),
            "VSQS_CELERY_STORAGE": json.dumps(storage),
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("VSQS_CELERY")})
        from .support import celery_app

        importlib.reload(celery_app)  # the client reads its configuration at import
        self.app = celery_app

    def start(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 (the worker's, for failures)
        args = ["-m", "celery", "-A", "tests.support.celery_app", "worker", "-P", "prefork"]
        args += ["-c", "2", "--without-mingle", "--without-gossip", "-l", "INFO", "-n", name]
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and its pool (its whole process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc)

    def queue(self) -> vsqs.Queue:
        return vsqs.Queue(self.root + "/" + vsqs_name("celery"), storage_options=self.storage)

    def runs(self, key: str) -> list[str]:
        path = self.out / key
        return path.read_text().splitlines() if path.exists() else []

    def until(self, condition: Callable[[], object], what: str) -> None:
        give_up = time.monotonic() + DEADLINE
        while not condition():
            if time.monotonic() > give_up:
                logs = "".join(p.read_text()[-3000:] for p in self.tmp.glob("*.log"))
                raise AssertionError(f"no {what} within {DEADLINE} s; worker logs:\n{logs}")
            time.sleep(0.05)

    def drained(self) -> bool:
        stats = self.queue().stats()
        return stats.ready + stats.in_flight + stats.delayed == 0


@contextlib.contextmanager
def workers_on_a_directory(tmp_path: Path, vt: float) -> Iterator[Celeries]:
    c = Celeries(tmp_path, f"file://{tmp_path / 'broker'}", vt=vt)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def celeries(tmp_path: Path) -> Iterator[Celeries]:
    """Workers whose visibility timeout (30 s) no stall of a busy machine
    outlasts: a test that counts runs sees no redelivery it did not ask for."""
    with workers_on_a_directory(tmp_path, 30.0) as c:
        yield c


@pytest.fixture
def short_celeries(tmp_path: Path) -> Iterator[Celeries]:
    """Workers with a visibility timeout of 4 s (extended every 1.3 s)."""
    with workers_on_a_directory(tmp_path, 4.0) as c:
        yield c


def test_every_task_runs_once_on_two_prefork_workers(celeries: Celeries) -> None:
    workers = {celeries.start("w1@test").pid, celeries.start("w2@test").pid}
    results = [celeries.app.record.delay(f"t{i}") for i in range(40)]
    assert results[0].get(timeout=DEADLINE) == "t0"  # through Celery's file result backend
    celeries.until(lambda: all(celeries.runs(f"t{i}") for i in range(40)), "40 runs")
    celeries.until(celeries.drained, "an empty queue")
    assert [len(celeries.runs(f"t{i}")) for i in range(40)] == [1] * 40
    pids = {int(celeries.runs(f"t{i}")[0].split()[0]) for i in range(40)}
    assert pids and not pids & workers  # prefork children ran them (how many: the load says)


def test_a_task_in_hand_of_a_killed_worker_runs_after_restart(tmp_path: Path) -> None:
    c = Celeries(tmp_path, f"file://{tmp_path / 'broker'}", vt=10.0)  # extended every 3.3 s
    try:
        first = c.start("w1@test")
        c.app.block.delay("k")
        c.until(lambda: c.runs("k.started"), "the task started")
        c.kill(first)  # the worker and its pool: nothing acks, nothing releases
        assert c.queue().stats().in_flight == 1
        assert c.runs("k") == []
        (c.out / "release").touch()
        c.start("w2@test")
        c.until(lambda: c.runs("k"), "the run after restart")
        c.until(c.drained, "an empty queue")
        assert (len(c.runs("k.started")), len(c.runs("k"))) == (2, 1)
    finally:
        c.close()


def test_a_task_whose_pool_process_died_is_released_at_once(tmp_path: Path) -> None:
    # a 30-minute visibility timeout: only task_reject_on_worker_lost's requeue
    # (a release) can bring the task back within the deadline
    c = Celeries(tmp_path, f"file://{tmp_path / 'broker'}", vt=1800.0)
    try:
        c.start("w1@test")
        c.app.block.delay("p")
        c.until(lambda: c.runs("p.started"), "the task started")
        child = int(c.runs("p.started")[0].split()[0])
        os.kill(child, signal.SIGKILL)  # the pool process only: the worker rejects, requeued
        (c.out / "release").touch()
        c.until(lambda: c.runs("p"), "the run in another pool process")
        c.until(c.drained, "an empty queue")
        started = [line.split()[0] for line in c.runs("p.started")]
        assert len(started) == 2 and started[0] != started[1]
        assert len(c.runs("p")) == 1
    finally:
        c.close()


def test_a_long_task_is_extended_not_delivered_twice(short_celeries: Celeries) -> None:
    celeries = short_celeries
    celeries.start("w1@test")
    celeries.start("w2@test")  # idle: it would take the task if its timeout ran out
    celeries.app.block.delay("long")
    celeries.until(lambda: celeries.runs("long.started"), "the task started")
    began = time.monotonic()
    # 3 visibility timeouts (4 s each) while it runs, in time the queue shows it
    celeries.until(lambda: time.monotonic() - began > 12, "three timeouts")
    expires = celeries.queue().stats().in_flight_expires_in
    assert expires is not None and expires > 0  # still in flight, extended
    (celeries.out / "release").touch()
    celeries.until(lambda: celeries.runs("long"), "the run")
    celeries.until(celeries.drained, "an empty queue")
    assert len(celeries.runs("long.started")) == 1


def test_a_countdown_waits_in_the_queue_as_a_delay(celeries: Celeries) -> None:
    sent = time.time()
    celeries.app.record.apply_async(("cd",), countdown=3)
    stats = celeries.queue().stats()
    assert (stats.ready, stats.delayed) == (0, 1)
    celeries.start("w1@test")
    celeries.until(lambda: celeries.runs("cd"), "the run")
    ran = float(celeries.runs("cd")[0].split()[1])
    assert ran >= sent + 3 - 0.01  # vsqs stamps expiries in ms


def test_celery_s_own_retries_each_run_and_the_result_comes_back(celeries: Celeries) -> None:
    celeries.start("w1@test")
    result = celeries.app.flaky.delay("f", 2)
    assert result.get(timeout=DEADLINE) == "f"
    celeries.until(celeries.drained, "an empty queue")
    attempts = [line.split()[2] for line in celeries.runs("f.attempts")]
    assert (attempts, len(celeries.runs("f"))) == (["0", "1", "2"], 1)


def test_a_task_id_published_twice_runs_once(celeries: Celeries) -> None:
    for _ in range(2):
        celeries.app.record.apply_async(("dup",), task_id="fixed-task-id")
    assert celeries.queue().stats().ready == 1
    celeries.app.record.delay("after")
    celeries.start("w1@test")
    celeries.until(lambda: celeries.runs("dup") and celeries.runs("after"), "the runs")
    celeries.until(celeries.drained, "an empty queue")
    assert len(celeries.runs("dup")) == 1


def test_workers_on_s3(tmp_path: Path, s3_server: Server) -> None:
    root = s3_server.url("celery")
    c = Celeries(tmp_path, root, vt=30.0, storage=s3_server.storage_options)
    try:
        c.start("w1@test")
        c.start("w2@test")
        for i in range(10):
            c.app.record.delay(f"s{i}")
        c.until(lambda: all(c.runs(f"s{i}") for i in range(10)), "10 runs")
        c.until(c.drained, "an empty queue")
        assert [len(c.runs(f"s{i}")) for i in range(10)] == [1] * 10
    finally:
        c.close()


def test_the_example_of_the_celery_guide_runs_as_written(tmp_path: Path) -> None:
    guide = (ROOT / "docs" / "celery.md").read_text()
    example = re.search(r"```python\n(.*?)```", guide, re.S)
    commands = re.search(r"```sh\n(.*?)```", guide, re.S)
    assert example and commands
    tasks = example.group(1).replace("/var/spool/celery", str(tmp_path / "spool"))
    assert "/var/spool" not in tasks and "broker_transport_options" in tasks
    (tmp_path / "tasks.py").write_text(tasks)
    shell = commands.group(1).replace("/var/spool/celery", str(tmp_path / "spool"))
    shell = shell.replace("timeout=10", f"timeout={DEADLINE}")
    mkdir, worker, client = (line.split("#")[0].strip() for line in shell.strip().splitlines())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(mkdir, shell=True, check=True, cwd=tmp_path)
    with open(tmp_path / "worker.log", "wb") as log:
        proc = subprocess.Popen(
            shlex.split(worker),
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        done = subprocess.run(
            client,
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE + 30,
        )
        # the worker ran with remote control left on: Celery turns it off by itself
        assert (done.returncode, done.stdout) == (0, "5\n"), done.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_celery_benchmark_runs_every_variant() -> None:
    rates, crashes = bench_celery.run(tasks=20, repeat=1)
    assert set(rates) == set(crashes) == {*bench_celery.OUR_VARIANTS, "filesystem"}
    assert len(bench_celery.OUR_VARIANTS) == 3
    assert all(crashes[v] == 0 for v in bench_celery.OUR_VARIANTS)
    assert all(len(rates[v]) == 1 and rates[v][0] > 0 for v in bench_celery.OUR_VARIANTS)
    assert [r > 0 for r in rates["filesystem"]] == [True] or crashes["filesystem"] == 3


def test_a_worker_rides_out_a_storage_outage(
    tmp_path: Path, s3_server: Server, s3_proxy: FaultProxy
) -> None:
    c = Celeries(tmp_path, s3_server.url("celery"), vt=30.0, storage=proxied(s3_server, s3_proxy))
    try:
        worker = c.start("w1@test")
        c.app.record.delay("before")
        c.until(lambda: c.runs("before"), "the run before the outage")
        s3_proxy.arm("500", every=True)  # every request fails: receives raise StorageError

        def told() -> bool:  # the worker saw the outage (after the client's own retries)
            log = (tmp_path / "w1@test.log").read_text()
            return "StorageError" in log or "Trying again" in log

        c.until(told, "the worker told of the outage")
        s3_proxy.disarm()
        c.app.record.delay("after")
        c.until(lambda: c.runs("after"), "the run after the outage")
        assert worker.poll() is None  # Celery reconnected: the worker did not stop
    finally:
        c.close()
