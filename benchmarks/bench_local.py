"""Local-directory benchmarks: vsqs against a raw syscall loop and against dirq.

Every figure is a ratio measured in the same run on the same disk (these
machines are shared and noisy): vsqs's cost per message divided by a raw
``os.open/os.write/os.rename/os.unlink`` loop's (dir-fd relative, the fastest
honest loop), and vsqs against ``dirq.QueueSimple``, the fastest directory
queue for Python we know. Each timed workload runs ``--repeat`` times; the
median is reported.

    python benchmarks/bench_local.py            # default sizes, a few minutes
    python benchmarks/bench_local.py --quick    # small sizes, under a minute
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vsqs

BODY = b"x" * 100
ctx = multiprocessing.get_context("spawn")


# --------------------------------------------------------------------- helpers
class Workdir:
    """A fresh directory per measurement, with the ext4 TOPDIR flag set."""

    def __init__(self, root: str | None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="vsqs-bench-", dir=root))
        subprocess.run(["chattr", "+T", str(self.root)], capture_output=True, check=False)

    def fresh(self) -> Path:
        path = Path(tempfile.mkdtemp(dir=self.root))
        subprocess.run(["chattr", "+T", str(path)], capture_output=True, check=False)
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def median_us(run: Callable[[], float], repeat: int) -> float:
    """Median over ``repeat`` runs of a function returning µs per message."""
    return statistics.median(run() for _ in range(repeat))


def per_message_us(start: float, count: int) -> float:
    return (time.perf_counter() - start) / count * 1e6


# ----------------------------------------------------------------- raw loops
def raw_send(path: Path, count: int, durable: bool) -> float:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        start = time.perf_counter()
        for i in range(count):
            name = f"{i:013d}-0000-{i:016x}"
            f = os.open(name + ".new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=fd)
            os.write(f, BODY)
            if durable:
                os.fsync(f)
            os.close(f)
            os.rename(name + ".new", name, src_dir_fd=fd, dst_dir_fd=fd)
            if durable:
                os.fsync(fd)
        return per_message_us(start, count)
    finally:
        os.close(fd)


def raw_receive_delete(path: Path, count: int) -> float:
    raw_send(path, count, durable=False)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        start = time.perf_counter()
        for name in sorted(os.listdir(fd)):
            held = name + ".1795348682824.1"
            os.rename(name, held, src_dir_fd=fd, dst_dir_fd=fd)
            f = os.open(held, os.O_RDONLY, dir_fd=fd)
            os.read(f, 65536)
            os.close(f)
            os.unlink(held, dir_fd=fd)
        return per_message_us(start, count)
    finally:
        os.close(fd)


# ------------------------------------------------------------------- vsqs
def vsqs_send(path: Path, count: int, durable: bool) -> float:
    with vsqs.Queue(path / "q", durable=durable) as q:
        start = time.perf_counter()
        for _ in range(count):
            q.send(BODY)
        return per_message_us(start, count)


def vsqs_send_batch(path: Path, count: int, batch: int) -> float:
    with vsqs.Queue(path / "q") as q:
        start = time.perf_counter()
        for _ in range(0, count, batch):
            q.send_batch([BODY] * batch)
        return per_message_us(start, count)


def fill(queue: vsqs.Queue, count: int) -> None:
    for start in range(0, count, 1000):
        queue.send_batch([BODY] * min(1000, count - start))
    time.sleep(vsqs._queue.YOUNG_MS / 1000 + 0.05)  # fresh ids need a second listing


def vsqs_drain(path: Path, count: int) -> float:
    with vsqs.Queue(path / "q", durable=False) as q:
        fill(q, count)
        start = time.perf_counter()
        received = 0
        while (msg := q.receive()) is not None:
            msg.delete()
            received += 1
        assert received == count, (received, count)
        return per_message_us(start, count)


def vsqs_drain_peak_memory(path: Path, count: int) -> int:
    with vsqs.Queue(path / "q", durable=False) as q:
        fill(q, count)
        tracemalloc.start()
        while (msg := q.receive()) is not None:
            msg.delete()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return peak


# ------------------------------------------------------------------- dirq
def dirq_queue(path: Path) -> Any:
    from dirq.QueueSimple import QueueSimple

    return QueueSimple(str(path / "dirq"))


def dirq_send(path: Path, count: int) -> float:
    q = dirq_queue(path)
    start = time.perf_counter()
    for _ in range(count):
        q.add(BODY)
    return per_message_us(start, count)


def dirq_take_all(q: Any) -> int:
    taken = 0
    for name in q:
        if q.lock(name):
            q.get(name)
            q.remove(name)
            taken += 1
    return taken


def dirq_receive_delete(path: Path, count: int) -> float:
    q = dirq_queue(path)
    for _ in range(count):
        q.add(BODY)
    start = time.perf_counter()
    assert dirq_take_all(q) == count
    return per_message_us(start, count)


# ------------------------------------------- 1 producer + 4 consumer processes
def _produce(kind: str, path: str, count: int, go: Any) -> None:
    if kind == "vsqs":
        q = vsqs.Queue(path, durable=False)
        go.wait()
        for _ in range(count):
            q.send(BODY)
    else:
        from dirq.QueueSimple import QueueSimple

        dq = QueueSimple(path)
        go.wait()
        for _ in range(count):
            dq.add(BODY)


def _consume(kind: str, path: str, done: Any, go: Any, taken: Any) -> None:
    mine = 0
    if kind == "vsqs":
        q = vsqs.Queue(path, durable=False)
        go.wait()
        while True:
            msg = q.receive(wait=0.05)
            if msg is not None:
                msg.delete()
                mine += 1
            elif done.is_set() and q.stats().ready == 0:
                break
    else:
        from dirq.QueueSimple import QueueSimple

        dq = QueueSimple(path)
        go.wait()
        while True:
            got = dirq_take_all(dq)
            mine += got
            if not got:
                if done.is_set() and dq.count() == 0:
                    break
                time.sleep(0.001)
    with taken.get_lock():
        taken.value += mine


def four_consumers(kind: str, path: Path, count: int) -> float:
    """Wall time µs per message for 1 producer + 4 consumers, start to last ack."""
    target = str(path / kind)
    if kind == "vsqs":
        vsqs.Queue(target).close()
    go, done, taken = ctx.Barrier(6), ctx.Event(), ctx.Value("l", 0)
    producer = ctx.Process(target=_produce, args=(kind, target, count, go))
    consumers = [
        ctx.Process(target=_consume, args=(kind, target, done, go, taken)) for _ in range(4)
    ]
    for proc in [producer, *consumers]:
        proc.start()
    try:
        go.wait()
        start = time.perf_counter()
        producer.join()
        done.set()
        for proc in consumers:
            proc.join()
        elapsed = per_message_us(start, count)
    finally:
        for proc in [producer, *consumers]:
            if proc.is_alive():
                proc.kill()
    assert taken.value == count, (kind, taken.value, count)
    return elapsed


# ------------------------------------------------------- long-poll latency
def _waiter(path: str, samples: int, ready: Any, out: Any) -> None:
    q = vsqs.Queue(path, durable=False)
    latencies = []
    ready.set()
    while len(latencies) < samples:
        msg = q.receive(wait=5)
        if msg is None:
            continue
        latencies.append(time.monotonic_ns() - int(msg.body))
        msg.delete()
    out.put(latencies)


def long_poll_latency(path: Path, samples: int) -> list[float]:
    import random

    target = str(path / "poll")
    q = vsqs.Queue(target, durable=False)
    ready, out = ctx.Event(), ctx.Queue()
    waiter = ctx.Process(target=_waiter, args=(target, samples, ready, out))
    waiter.start()
    try:
        ready.wait(30)
        time.sleep(0.2)
        rng = random.Random(1)
        for _ in range(samples):
            time.sleep(rng.uniform(0.005, 0.03))
            q.send(str(time.monotonic_ns()))
        latencies = out.get(timeout=60)
    finally:
        waiter.join(10)
        if waiter.is_alive():
            waiter.kill()
    return sorted(ns / 1e6 for ns in latencies)


# ---------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (< 1 minute)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per workload (median)")
    parser.add_argument("--workdir", help="parent of the work directory (default: system temp)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    n = 3_000 if args.quick else 20_000
    n_durable = 200 if args.quick else 1_000
    big = 20_000 if args.quick else 100_000
    n_procs = 5_000 if args.quick else 20_000
    samples = 50 if args.quick else 200
    work = Workdir(args.workdir)
    rows: list[dict[str, Any]] = []

    def row(
        workload: str, vsqs_us: float, raw_us: float | None = None, dirq_us: float | None = None
    ) -> None:
        rows.append(
            {"workload": workload, "vsqs_us": vsqs_us, "raw_us": raw_us, "dirq_us": dirq_us}
        )
        print(f"  measured {workload}", file=sys.stderr)

    try:
        rep = args.repeat
        row(
            f"send, not durable (n={n})",
            median_us(lambda: vsqs_send(work.fresh(), n, durable=False), rep),
            median_us(lambda: raw_send(work.fresh(), n, durable=False), rep),
            median_us(lambda: dirq_send(work.fresh(), n), rep),
        )
        row(
            f"send, durable (n={n_durable})",
            median_us(lambda: vsqs_send(work.fresh(), n_durable, durable=True), rep),
            median_us(lambda: raw_send(work.fresh(), n_durable, durable=True), rep),
        )
        single_durable = rows[-1]["vsqs_us"]
        row(
            f"send_batch(100), durable (n={n_durable * 10})",
            median_us(lambda: vsqs_send_batch(work.fresh(), n_durable * 10, 100), rep),
        )
        batch_durable = rows[-1]["vsqs_us"]
        row(
            f"receive+delete (n={n})",
            median_us(lambda: vsqs_drain(work.fresh(), n), rep),
            median_us(lambda: raw_receive_delete(work.fresh(), n), rep),
            median_us(lambda: dirq_receive_delete(work.fresh(), n), rep),
        )
        drain_small = median_us(lambda: vsqs_drain(work.fresh(), 1_000), rep)
        drain_big = median_us(lambda: vsqs_drain(work.fresh(), big), max(1, rep - 1))
        row("drain, backlog 1 000", drain_small)
        row(f"drain, backlog {big:,}", drain_big)
        peak = vsqs_drain_peak_memory(work.fresh(), big)
        row(
            f"1 producer + 4 consumer processes (n={n_procs})",
            median_us(lambda: four_consumers("vsqs", work.fresh(), n_procs), rep),
            None,
            median_us(lambda: four_consumers("dirq", work.fresh(), n_procs), rep),
        )
        latencies = long_poll_latency(work.fresh(), samples)
    finally:
        work.cleanup()

    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    summary = {
        "rows": rows,
        "durable_batch_speedup": single_durable / batch_durable,
        "drain_100k_over_1k": drain_big / drain_small,
        "drain_peak_memory_bytes": peak,
        "drain_backlog": big,
        "long_poll_ms": {"p50": p50, "p99": p99, "samples": len(latencies)},
    }
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0

    def cell(value: float | None, fmt: str) -> str:
        return "" if value is None else format(value, fmt)

    print("| workload | vsqs µs/msg | raw µs/msg | vsqs/raw | dirq µs/msg | vsqs/dirq |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        v, raw, dq = r["vsqs_us"], r["raw_us"], r["dirq_us"]
        ratios = [None if base is None else v / base for base in (raw, dq)]
        print(
            f"| {r['workload']} | {v:.1f} | {cell(raw, '.1f')} | {cell(ratios[0], '.2f')} | "
            f"{cell(dq, '.1f')} | {cell(ratios[1], '.2f')} |"
        )
    print()
    speedup, drain_ratio = summary["durable_batch_speedup"], summary["drain_100k_over_1k"]
    print(f"durable send_batch(100) vs durable send, per message: {speedup:.1f}x faster")
    print(f"drain cost per message, backlog {big:,} vs 1 000: {drain_ratio:.2f}x")
    print(f"peak Python memory while draining {big:,}: {peak / 1e6:.1f} MB (tracemalloc)")
    print(
        f"long-poll wake-up latency, {len(latencies)} messages: p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
