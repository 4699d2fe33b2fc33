"""Local-directory benchmarks: vsqs against a raw syscall loop and against dirq.

Every figure is a ratio measured in the same run on the same disk (these
machines are shared and noisy): vsqs's cost per message divided by a raw
``os.open/os.write/os.rename/os.unlink`` loop's (dir-fd relative, the fastest
honest loop), and vsqs against ``dirq.QueueSimple``, the fastest directory
queue for Python we know. Each timed workload runs ``--repeat`` times, the
variants of one workload back to back; the best (lowest) µs/msg of each
variant and the ratio of the bests are reported (medians go to ``--json``).

    python benchmarks/bench_local.py            # default sizes, a few minutes
    python benchmarks/bench_local.py --quick    # small sizes, under a minute
    python benchmarks/bench_local.py --json figures.json   # also every sample as JSON
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import os
import random
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
from vsqs._candidates import STALE_AFTER
from vsqs._view import YOUNG_MS

BODY = b"x" * 100
ctx = multiprocessing.get_context("spawn")
log = functools.partial(print, file=sys.stderr, flush=True)


# --------------------------------------------------------------------- helpers
class Workdir:
    """A fresh directory per measurement; every variant writes into one.

    The root carries the ext4 TOPDIR flag (``chattr +T``), so each fresh
    directory is placed like a top-level one, spread over the disk rather than
    packed next to the block groups whose inodes the previous measurement just
    freed (file creation there is slow). The fresh directories themselves do
    not carry it, and every variant's messages go into the fresh directory
    itself (dirq's into its sub-directory, which lands next to it): a queue
    in a sub-directory of a TOPDIR directory was measured to be 2-7x slower
    to write into, whoever writes.
    """

    def __init__(self, root: str | None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="vsqs-bench-", dir=root))
        subprocess.run(["chattr", "+T", str(self.root)], capture_output=True, check=False)

    def fresh(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="q", dir=self.root))

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def compare(runs: dict[str, Callable[[], float]], repeat: int) -> dict[str, Any]:
    """Run the variants back to back ``repeat`` times (the disk's speed drifts).

    Each repetition starts with a different variant, so none is always first
    after the previous workload's churn. Returns the best (lowest) µs per
    message of each variant and, for each variant after the first, the ratio
    of the bests ``first/variant`` (key ``"<first>/<variant>"``). The best is
    reported because this disk's noise is one-sided and bimodal: a run either
    costs what it costs or is hit by a 3-5x stall. Medians (of the values and
    of the per-repetition ratios) and every sample go to the JSON output.
    """
    order = list(runs)
    samples: dict[str, list[float]] = {name: [] for name in order}
    for i in range(repeat):
        for name in order[i % len(order) :] + order[: i % len(order)]:
            samples[name].append(runs[name]())
    first = order[0]
    result: dict[str, Any] = {name: min(values) for name, values in samples.items()}
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name in order[1:]:
        result[f"{first}/{name}"] = result[first] / result[name]
        ratios = [a / b for a, b in zip(samples[first], samples[name], strict=True)]
        medians[f"{first}/{name}"] = statistics.median(ratios)
    result["median"] = medians
    result["samples"] = samples
    log(f"  {' '.join(f'{k}={[round(v, 1) for v in vs]}' for k, vs in samples.items())}")
    return result


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


def raw_send_batch(path: Path, count: int, batch: int) -> float:
    """The ceiling of a durable batch of files on this disk: the same syscalls
    as ``send_batch(bundle=False)`` (create + write each ``.new``, one ``syncfs``, rename each,
    one directory fsync) with no Python around them."""
    syncfs = vsqs.stores._local._syncfs
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        start = time.perf_counter()
        for first in range(0, count, batch):
            batch_names = [f"{i:013d}-0000-{i:016x}" for i in range(first, first + batch)]
            for name in batch_names:
                f = os.open(name + ".new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=fd)
                os.write(f, BODY)
                os.close(f)
            syncfs(fd)
            for name in batch_names:
                os.rename(name + ".new", name, src_dir_fd=fd, dst_dir_fd=fd)
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
    with vsqs.Queue(path, durable=durable) as q:
        start = time.perf_counter()
        for _ in range(count):
            q.send(BODY)
        return per_message_us(start, count)


def vsqs_send_batch(path: Path, count: int, batch: int, bundle: bool = True) -> float:
    """Durable ``send_batch(batch)``: in bundles (one file each), or each
    message a file of its own (``bundle=False``)."""
    with vsqs.Queue(path) as q:
        start = time.perf_counter()
        for _ in range(0, count, batch):
            q.send_batch([BODY] * batch, bundle=bundle)
        return per_message_us(start, count)


def fill(queues: list[vsqs.Queue], count: int, bundle: bool = False) -> None:
    """Fill queues (not timed), then wait until no id is young any more:
    each message a file of its own, or in bundles of 100 if ``bundle``.

    Ids issued less than ``YOUNG_MS`` before a listing need a second listing;
    waiting past ``STALE_AFTER`` too makes the timed drain start from a backlog
    that is entirely old, as a real backlog is.
    """
    size = 100 if bundle else 1000
    for queue in queues:
        for start in range(0, count, size):
            queue.send_batch([BODY] * min(size, count - start), bundle=bundle)
    time.sleep(max(YOUNG_MS / 1000, STALE_AFTER) + 0.1)


def vsqs_drain(paths: list[Path], count: int) -> float:
    """receive+delete until empty, over one queue of ``count`` messages per path.

    Several small queues average out the noise of one short drain.
    """
    clients = [vsqs.Queue(p, durable=False) for p in paths]
    try:
        fill(clients, count)
        elapsed = 0.0
        for q in clients:
            start = time.perf_counter()
            received = 0
            while (msg := q.receive()) is not None:
                msg.delete()
                received += 1
            elapsed += time.perf_counter() - start
            assert received == count, (received, count)
        return elapsed / (count * len(paths)) * 1e6
    finally:
        for q in clients:
            q.close()


def vsqs_batch_drain(path: Path, count: int, bundle: bool, size: int) -> float:
    """``receive_batch(size)`` + ``delete_batch`` until empty, µs per message,
    of ``count`` messages sent in bundles of 100 or each a file of its own
    (:func:`fill`)."""
    with vsqs.Queue(path, durable=False) as q:
        fill([q], count, bundle)
        start = time.perf_counter()
        received = 0
        while msgs := q.receive_batch(size):
            done = q.delete_batch(msgs)
            assert len(done.deleted) == len(msgs), done
            received += len(msgs)
        assert received == count, (received, count)
        return per_message_us(start, count)


#: The batch drains compared (variant: bundled, batch size): bundles of 100
#: against files alone, received 100, 10 and 1 at a time.
BATCH_DRAINS = {
    f"{'bundles' if bundle else 'alone'}_{size}": (bundle, size)
    for size in (100, 10, 1)
    for bundle in (True, False)
}


def batch_drains(work: Workdir, count: int, repeat: int) -> dict[str, Any]:
    """:func:`vsqs_batch_drain` of every :data:`BATCH_DRAINS` variant, and
    the ratio of files alone to bundles for each batch size."""

    def run(bundle: bool, size: int) -> Callable[[], float]:
        return lambda: vsqs_batch_drain(work.fresh(), count, bundle, size)

    result = compare({name: run(*variant) for name, variant in BATCH_DRAINS.items()}, repeat)
    for size in (100, 10, 1):
        result[f"alone_{size}/bundles_{size}"] = result[f"alone_{size}"] / result[f"bundles_{size}"]
    result["messages"] = count
    return result


def vsqs_drain_peak_memory(path: Path, count: int) -> int:
    with vsqs.Queue(path, durable=False) as q:
        fill([q], count)
        tracemalloc.start()
        while (msg := q.receive()) is not None:
            msg.delete()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return peak


# ------------------------------------------------------------------- dirq
def dirq_queue(path: Path) -> Any:
    from dirq.QueueSimple import QueueSimple

    return QueueSimple(str(path))


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
#: Per 4-consumer run and kind: when the producer finished, and the CPU time the
#: consumers used, in µs per message (diagnostics: is the run producer-bound?).
PROCESS_DETAIL: dict[str, list[dict[str, float]]] = {"vsqs": [], "grouped": [], "dirq": []}
#: Groups of the ``grouped`` 4-consumer run: message i goes to group ``g{i % GROUPS}``.
GROUPS = 100


def _produce(kind: str, path: str, count: int, go: Any) -> None:
    if kind != "dirq":
        q = vsqs.Queue(path, durable=False)
        go.wait()
        for i in range(count):
            q.send(BODY, group=f"g{i % GROUPS}" if kind == "grouped" else None)
    else:
        from dirq.QueueSimple import QueueSimple

        dq = QueueSimple(path)
        go.wait()
        for _ in range(count):
            dq.add(BODY)


def _consume(kind: str, path: str, done: Any, go: Any, taken: Any, cpu: Any) -> None:
    """Take messages until the producer is done and the queue is empty."""
    mine = 0
    if kind != "dirq":
        q = vsqs.Queue(path, durable=False)
        go.wait()
        started = time.process_time()
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
        started = time.process_time()
        while True:
            got = dirq_take_all(dq)
            mine += got
            if not got:
                if done.is_set() and dq.count() == 0:
                    break
                time.sleep(0.001)  # dirq has no long poll: poll every ms
    with taken.get_lock():
        taken.value += mine
        cpu.value += time.process_time() - started


def four_consumers(kind: str, path: Path, count: int) -> float:
    """Wall time µs per message for 1 producer + 4 consumers, start to last ack.

    ``kind``: ``"vsqs"``, ``"grouped"`` (vsqs, each message in one of
    :data:`GROUPS` groups, round robin) or ``"dirq"``."""
    target = str(path)
    if kind != "dirq":
        vsqs.Queue(target).close()
    go, done = ctx.Barrier(6), ctx.Event()
    taken, cpu = ctx.Value("l", 0), ctx.Value("d", 0.0)
    producer = ctx.Process(target=_produce, args=(kind, target, count, go))
    consumers = [
        ctx.Process(target=_consume, args=(kind, target, done, go, taken, cpu)) for _ in range(4)
    ]
    for proc in [producer, *consumers]:
        proc.start()
    try:
        go.wait()
        start = time.perf_counter()
        producer.join()
        produced = per_message_us(start, count)
        done.set()
        for proc in consumers:
            proc.join()
        elapsed = per_message_us(start, count)
    finally:
        for proc in [producer, *consumers]:
            if proc.is_alive():
                proc.kill()
    assert taken.value == count, (kind, taken.value, count)
    PROCESS_DETAIL[kind].append(
        {"producer_done_us": produced, "consumer_cpu_us": cpu.value / count * 1e6}
    )
    return elapsed


# ------------------------------------------------------- long-poll latency
def _waiter(path: str, samples: int, ready: Any, out: Any) -> None:
    """Block in ``receive(wait=5)``; report when each message id was returned."""
    q = vsqs.Queue(path, durable=False)
    q.receive()  # the first listing: from now on the client waits on changes
    returned: dict[str, int] = {}
    ready.set()
    while len(returned) < samples:
        msg = q.receive(wait=5)
        if msg is None:
            continue
        returned[msg.id] = time.monotonic_ns()  # system-wide clock on Linux
        msg.delete()
    out.put(returned)


def long_poll_latency(path: Path, samples: int) -> list[float]:
    """ms from ``send`` returning in one process to ``receive`` returning in another."""
    target = str(path)
    q = vsqs.Queue(target, durable=False)
    ready, out = ctx.Event(), ctx.Queue()
    waiter = ctx.Process(target=_waiter, args=(target, samples, ready, out))
    waiter.start()
    sent: dict[str, int] = {}
    try:
        if not ready.wait(60):
            raise RuntimeError("the long-poll waiter did not start")
        time.sleep(0.2)
        rng = random.Random(1)
        for i in range(samples):
            time.sleep(rng.uniform(0.005, 0.05))  # random gaps: the waiter is idle in between
            message_id = q.send(str(i))
            sent[message_id] = time.monotonic_ns()
        returned = out.get(timeout=60)
    finally:
        waiter.join(10)
        if waiter.is_alive():
            waiter.kill()
        q.close()
    return sorted((returned[i] - sent[i]) / 1e6 for i in sent)


# ------------------------------------------- a backlog in another group
#: Per backlog variant, best of the runs: the ms of a running consumer's first
#: receive (which lists the whole queue, and finds nothing of group ``B`` yet).
FIRST_RECEIVE_MS: dict[str, float] = {}


def start_consumer(q: vsqs.Queue, variant: str, targeted: bool) -> None:
    """A consumer's first receives, before group ``B`` has messages: the first
    lists the whole queue (timed: ``FIRST_RECEIVE_MS``), the second starts its
    arrival feed, as in any consumer that keeps running."""
    start = time.perf_counter()
    assert q.receive(group="B" if targeted else None) is None
    FIRST_RECEIVE_MS[variant] = min(
        FIRST_RECEIVE_MS.get(variant, math.inf), (time.perf_counter() - start) * 1e3
    )
    assert q.receive(group="B" if targeted else None) is None


def drain_group_b(q: vsqs.Queue, variant: str, targeted: bool, count: int) -> float:
    """µs per receive+delete of the ``count`` messages of group ``B`` by the
    running consumer ``q``, until it receives nothing (``receive(group="B")``
    if ``targeted``, else ``receive()``); checks that it received those and
    no other."""
    start = time.perf_counter()
    received = 0
    while (msg := q.receive(group="B" if targeted else None)) is not None:
        assert msg.group == "B", msg.group
        msg.delete()
        received += 1
    elapsed = time.perf_counter() - start
    assert received == count, (variant, received, count)
    return elapsed / received * 1e6


class GroupBacklog:
    """One queue holding ``backlog`` messages of group ``A`` (filled once),
    into which each run sends ``count`` messages of group ``B`` (after ``A``'s,
    so behind the whole backlog in FIFO order) while a consumer runs, and
    times their drain by that consumer."""

    def __init__(self, path: Path, backlog: int, count: int) -> None:
        self.path, self.count = path, count
        with vsqs.Queue(path, durable=False) as q:
            for start in range(0, backlog, 1000):
                q.send_batch([BODY] * min(1000, backlog - start), group="A", bundle=False)
        time.sleep(max(YOUNG_MS / 1000, STALE_AFTER) + 0.1)  # as fill(): an old backlog

    def alone(self, fresh: Path, targeted: bool) -> float:
        """The baseline: the same drain on a queue holding only the ``B`` messages."""
        variant = "alone_" + ("group" if targeted else "any")
        with vsqs.Queue(fresh, durable=False) as consumer:
            start_consumer(consumer, variant, targeted)
            fill_group_b(fresh, self.count)
            return drain_group_b(consumer, variant, targeted, self.count)

    def behind(self, held: bool, targeted: bool) -> float:
        """The drain behind the backlog, ``A``'s head in flight (received by
        another client, visibility 1 h) if ``held``, else every ``A`` ready."""
        variant = f"{'held' if held else 'free'}_{'group' if targeted else 'any'}"
        with (
            vsqs.Queue(self.path, durable=False) as holder,
            vsqs.Queue(self.path, durable=False) as consumer,
        ):
            head = holder.receive(group="A", visibility_timeout=3600) if held else None
            assert head is not None or not held
            try:
                start_consumer(consumer, variant, targeted)
                fill_group_b(self.path, self.count)
                return drain_group_b(consumer, variant, targeted, self.count)
            finally:
                if head is not None:
                    head.release()


def fill_group_b(path: Path, count: int) -> None:
    with vsqs.Queue(path, durable=False) as q:
        q.send_batch([BODY] * count, group="B", bundle=False)


#: Each variant behind the backlog, and its baseline (the same receive, alone).
BEHIND = {"free_group": "alone_group", "held_group": "alone_group", "held_any": "alone_any"}


def group_backlog(work: Workdir, backlog: int, count: int, repeat: int) -> dict[str, Any]:
    """Receive+delete of group B's messages alone and behind ``backlog`` messages
    of group A; with ``A`` free only a targeted receive can reach ``B``."""
    behind = GroupBacklog(work.fresh(), backlog, count)
    result = compare(
        {
            "alone_group": lambda: behind.alone(work.fresh(), targeted=True),
            "free_group": lambda: behind.behind(held=False, targeted=True),
            "held_group": lambda: behind.behind(held=True, targeted=True),
            "alone_any": lambda: behind.alone(work.fresh(), targeted=False),
            "held_any": lambda: behind.behind(held=True, targeted=False),
        },
        repeat,
    )
    for variant, base in BEHIND.items():
        result[f"{variant}/{base}"] = result[variant] / result[base]
    result["first_receive_ms"] = dict(FIRST_RECEIVE_MS)
    return result


# ---------------------------------------------------------------------- main
Check = tuple[str, float, str, float]


def goals(figures: dict[str, dict[str, Any]], extra: dict[str, float]) -> list[Check]:
    """The goals of the main workloads, each with its measured figure."""
    send, drain, procs = figures["send"], figures["receive_delete"], figures["four_consumers"]
    return [
        ("non-durable send within 1.5x of raw", send["vsqs/raw"], "<=", 1.5),
        ("receive+delete within 1.5x of raw", drain["vsqs/raw"], "<=", 1.5),
        ("send faster than dirq", send["vsqs/dirq"], "<", 1.0),
        ("receive+delete faster than dirq", drain["vsqs/dirq"], "<", 1.0),
        ("1 producer + 4 consumers faster than dirq", procs["vsqs/dirq"], "<", 1.0),
        ("drain at 100k within 1.5x of 1k per message", extra["drain_big/small"], "<=", 1.5),
        ("durable send_batch(100) >= 10x faster per message", extra["batch_speedup"], ">=", 10.0),
    ]


def group_goals(groups: dict[str, Any]) -> list[Check]:
    """Issue 29's goals: groups cost little, and a group's backlog slows no other."""
    procs, behind = groups["four_consumers"], groups["backlog"]
    return [
        ("4 consumers, 100 groups, within 1.5x of no groups", procs["grouped/vsqs"], "<=", 1.5),
        ("group B behind A's backlog, A free, receive(group=B): within 2x",
         behind["free_group/alone_group"], "<=", 2.0),
        ("group B behind A's backlog, A held, receive(group=B): within 2x",
         behind["held_group/alone_group"], "<=", 2.0),
        ("group B behind A's backlog, A held, receive(): within 2x",
         behind["held_any/alone_any"], "<=", 2.0),
    ]  # fmt: skip


def verdicts(checks: list[Check]) -> list[dict[str, Any]]:
    """Each goal with its measured figure and whether it is met."""
    ops: dict[str, Callable[[float, float], bool]] = {
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">=": lambda a, b: a >= b,
    }
    return [
        {"goal": goal, "figure": value, "target": f"{op} {bound:g}", "met": ops[op](value, bound)}
        for goal, value, op, bound in checks
    ]


def measure_groups(work: Workdir, quick: bool, rep: int) -> dict[str, Any]:
    """Issue 29's workloads: 4 consumers with and without groups, and a group
    drained alone and behind another group's backlog."""
    n_procs = 5_000 if quick else 20_000
    backlog = 20_000 if quick else 100_000
    count = 100 if quick else 200
    log(f"1 producer + 4 consumers, {GROUPS} groups and none ...")
    procs = compare(
        {
            "grouped": lambda: four_consumers("grouped", work.fresh(), n_procs),
            "vsqs": lambda: four_consumers("vsqs", work.fresh(), n_procs),
        },
        rep,
    )
    procs["messages"] = n_procs
    procs["grouped/vsqs"] = procs["grouped"] / procs["vsqs"]
    log(f"{count} messages of group B behind {backlog:,} of group A ...")
    behind = group_backlog(work, backlog, count, max(1, rep - 2))
    return {"four_consumers": procs, "backlog": {"A": backlog, "B": count, **behind}}


def print_groups(groups: dict[str, Any]) -> None:
    procs, behind = groups["four_consumers"], groups["backlog"]
    print(
        f"1 producer + 4 consumers (n={procs['messages']}): {GROUPS} groups {procs['grouped']:.1f}"
        f" µs/msg, no groups {procs['vsqs']:.1f} µs/msg: ratio {procs['grouped/vsqs']:.2f}"
    )
    print(f"receive+delete of {behind['B']} messages of group B by a running consumer, alone "
          f"and behind {behind['A']:,} of group A (µs/msg; and the consumer's first "
          f"receive, which lists the queue, in ms):")  # fmt: skip
    for variant, label in (
        ("alone_group", "alone, receive(group=B)"),
        ("free_group", "behind, A free, receive(group=B)"),
        ("held_group", "behind, A held, receive(group=B)"),
        ("alone_any", "alone, receive()"),
        ("held_any", "behind, A held, receive()"),
    ):
        base = BEHIND.get(variant)
        tail = f"; {behind[f'{variant}/{base}']:.2f}x alone" if base else ""
        first = behind["first_receive_ms"][variant]
        print(f"  {label:34} {behind[variant]:9.1f} µs/msg{tail}; first receive {first:7.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (< 1 minute)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per workload (best)")
    parser.add_argument("--workdir", help="parent of the work directory (default: system temp)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON to PATH")
    parser.add_argument("--groups", action="store_true", help="only the message-group workloads")
    args = parser.parse_args(argv)
    if args.groups:
        return groups_main(args)
    n = 3_000 if args.quick else 20_000
    n_durable = 200 if args.quick else 1_000
    big = 20_000 if args.quick else 100_000
    n_procs = 5_000 if args.quick else 20_000
    samples = 50 if args.quick else 200
    rep = max(1, args.repeat)
    labels = {
        "send": f"send, not durable (n={n})",
        "durable_send": f"send, durable (n={n_durable})",
        "receive_delete": f"receive+delete (n={n})",
        "four_consumers": f"1 producer + 4 consumer processes (n={n_procs})",
    }
    work = Workdir(args.workdir)
    try:
        figures: dict[str, dict[str, Any]] = {}
        log("send, not durable ...")
        figures["send"] = compare(
            {
                "vsqs": lambda: vsqs_send(work.fresh(), n, durable=False),
                "raw": lambda: raw_send(work.fresh(), n, durable=False),
                "dirq": lambda: dirq_send(work.fresh(), n),
            },
            rep,
        )
        log("send, durable ...")
        figures["durable_send"] = compare(
            {
                "vsqs": lambda: vsqs_send(work.fresh(), n_durable, durable=True),
                "raw": lambda: raw_send(work.fresh(), n_durable, durable=True),
            },
            rep,
        )
        log("receive+delete ...")
        figures["receive_delete"] = compare(
            {
                "vsqs": lambda: vsqs_drain([work.fresh()], n),
                "raw": lambda: raw_receive_delete(work.fresh(), n),
                "dirq": lambda: dirq_receive_delete(work.fresh(), n),
            },
            rep,
        )
        log("1 producer + 4 consumers ...")
        figures["four_consumers"] = compare(
            {
                "vsqs": lambda: four_consumers("vsqs", work.fresh(), n_procs),
                "dirq": lambda: four_consumers("dirq", work.fresh(), n_procs),
            },
            rep,
        )
        log("durable send_batch(100) ...")
        batching = compare(
            {
                "single": lambda: vsqs_send(work.fresh(), n_durable, durable=True),
                "batch": lambda: vsqs_send_batch(work.fresh(), n_durable * 10, 100),
                "batch_alone": lambda: vsqs_send_batch(work.fresh(), n_durable * 10, 100, False),
                "raw_single": lambda: raw_send(work.fresh(), n_durable, durable=True),
                "raw_batch": lambda: raw_send_batch(work.fresh(), n_durable * 10, 100),
            },
            rep,
        )
        log("receive_batch + delete_batch, bundles and files alone ...")
        drains = batch_drains(work, n, rep)
        log(f"drain at backlog {big:,} and 1 000 ...")
        draining = compare(
            {
                "big": lambda: vsqs_drain([work.fresh()], big),
                "small": lambda: vsqs_drain([work.fresh() for _ in range(5)], 1_000),
            },
            max(1, rep - 2),
        )
        log("peak memory ...")
        peak = vsqs_drain_peak_memory(work.fresh(), big)
        log("long-poll latency ...")
        latencies = long_poll_latency(work.fresh(), samples)
        groups = measure_groups(work, args.quick, rep)
    finally:
        work.cleanup()

    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    checks = goals(
        figures,
        {"drain_big/small": draining["big/small"], "batch_speedup": batching["single/batch"]},
    )
    met = verdicts(checks + group_goals(groups))
    summary = {
        "workloads": {labels[key]: f for key, f in figures.items()},
        "durable_send_batch_100": batching,
        "batch_drains": drains,
        "drain": {"backlog": big, **draining},
        "drain_peak_memory_bytes": peak,
        "long_poll_ms": {"p50": p50, "p99": p99, "max": latencies[-1], "samples": len(latencies)},
        "four_consumer_detail": {
            kind: {key: min(d[key] for d in runs) for key in runs[0]}
            for kind, runs in PROCESS_DETAIL.items()
            if runs
        },
        "groups": groups,
        "goals": met,
        "repeat": rep,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")

    def cell(figs: dict[str, Any], key: str, fmt: str) -> str:
        return format(figs[key], fmt) if key in figs else ""

    print(f"best of {rep} runs per variant (drain: best of {max(1, rep - 2)}); ratios of the bests")
    print("| workload | vsqs µs/msg | raw µs/msg | vsqs/raw | dirq µs/msg | vsqs/dirq |")
    print("|---|---:|---:|---:|---:|---:|")
    for key, f in figures.items():
        print(
            f"| {labels[key]} | {f['vsqs']:.1f} | {cell(f, 'raw', '.1f')} "
            f"| {cell(f, 'vsqs/raw', '.2f')} | {cell(f, 'dirq', '.1f')} "
            f"| {cell(f, 'vsqs/dirq', '.2f')} |"
        )
    print()
    print(
        f"durable send: {batching['single']:.1f} µs/msg; send_batch(100): {batching['batch']:.1f} "
        f"µs/msg; batch is {batching['single/batch']:.1f}x faster per message"
    )
    print(
        f"  each message a file of its own (bundle=False): {batching['batch_alone']:.1f} µs/msg, "
        f"{batching['single/batch_alone']:.1f}x faster than send; bundles are "
        f"{batching['batch_alone'] / batching['batch']:.1f}x faster than files alone"
    )
    print(
        f"  ceiling on this disk, raw syscall loops: durable single {batching['raw_single']:.1f}"
        f" µs/msg, batch of 100 {batching['raw_batch']:.1f} µs/msg: "
        f"{batching['raw_single'] / batching['raw_batch']:.1f}x"
    )
    print_batch_drains(drains)
    print(
        f"drain µs/msg: backlog {big:,}: {draining['big']:.1f}, backlog 1 000: "
        f"{draining['small']:.1f}; ratio {draining['big/small']:.2f}"
    )
    print(f"peak Python memory while draining {big:,}: {peak / 1e6:.1f} MB (tracemalloc)")
    print(
        f"long-poll wake-up latency, {len(latencies)} messages: p50 {p50:.2f} ms, "
        f"p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms"
    )
    for kind, detail in summary["four_consumer_detail"].items():
        print(
            f"4 consumers, {kind}: producer done after {detail['producer_done_us']:.1f} µs/msg; "
            f"consumers used {detail['consumer_cpu_us']:.1f} µs CPU/msg"
        )
    print_groups(groups)
    print_verdicts(met)
    return 0


def groups_main(args: argparse.Namespace) -> int:
    """``--groups``: only :func:`measure_groups`, its figures and goals."""
    rep = max(1, args.repeat)
    work = Workdir(args.workdir)
    try:
        groups = measure_groups(work, args.quick, rep)
    finally:
        work.cleanup()
    met = verdicts(group_goals(groups))
    if args.json:
        summary = {"groups": groups, "goals": met, "repeat": rep}
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"best of {rep} runs per variant (backlog drains: best of {max(1, rep - 2)})")
    print_groups(groups)
    print_verdicts(met)
    return 0


def print_batch_drains(drains: dict[str, Any]) -> None:
    print(f"receive_batch(R) + delete_batch until empty, {drains['messages']} messages sent in "
          "bundles of 100 or each a file of its own (µs/msg):")  # fmt: skip
    for size in (100, 10, 1):
        print(f"  R={size:<3} bundles {drains[f'bundles_{size}']:7.1f}, files alone "
              f"{drains[f'alone_{size}']:7.1f}: bundles "
              f"{drains[f'alone_{size}/bundles_{size}']:.2f}x faster")  # fmt: skip


def print_verdicts(met: list[dict[str, Any]]) -> None:
    print()
    for v in met:
        mark = "met   " if v["met"] else "MISSED"
        print(f"{mark} {v['goal']}: {v['figure']:.2f} (target {v['target']})")


if __name__ == "__main__":
    sys.exit(main())
