"""What the metrics hooks cost: send + receive + delete of N messages on a
local directory with metrics off, with Prometheus on, and off again (after
``vsqs.metrics.disable()``), in one run.

Every figure is a ratio to the first variant, measured in the same run (the
machines are shared and noisy): each variant runs ``--repeat`` times,
interleaved, and the best (lowest) CPU time per message of each is compared
(the process's user + system time: what the hooks cost, without the waits
for a disk other processes share). A
process that enables no exporter pays one call of an empty method per event
(docs/monitoring.md); "off again" should read 1.00 within the noise. As
that noise can exceed the hooks' cost, the figures end with a bound that
none touches: the hook calls a message makes (counted) times the time of an
empty call (timed alone).

    python benchmarks/bench_metrics.py              # 2 000 messages, 5 rounds
    python benchmarks/bench_metrics.py --messages 500 --repeat 2
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vsqs
import vsqs.metrics
from vsqs import _meter as meter

BODY = b"x" * 100
#: The variants, in the order each round runs them: how each sets metrics up.
VARIANTS: dict[str, Callable[[], None]] = {
    "off": vsqs.metrics.disable,
    "prometheus": lambda: vsqs.metrics.enable_prometheus(_registry()),
    "off again": vsqs.metrics.disable,
}


def _registry() -> object:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


def lifecycle(path: Path, messages: int) -> float:
    """CPU seconds to send, receive and delete ``messages`` one by one on a
    fresh queue at ``path``; checks that every message came back once."""
    with vsqs.Queue(path, durable=False) as q:
        started = time.process_time()
        for _ in range(messages):
            q.send(BODY)
        got = 0
        while (msg := q.receive()) is not None:
            msg.delete()
            got += 1
        elapsed = time.process_time() - started
    if got != messages:
        raise AssertionError(f"received {got} of {messages} messages")
    return elapsed


def measure(messages: int, repeat: int, workdir: str | None = None) -> dict[str, float]:
    """The best CPU µs per message of each variant over ``repeat`` interleaved rounds."""
    root = Path(tempfile.mkdtemp(prefix="vsqs-bench-metrics-", dir=workdir))
    best = dict.fromkeys(VARIANTS, float("inf"))
    try:
        for round_ in range(repeat):
            for i, (name, setup) in enumerate(VARIANTS.items()):
                setup()
                seconds = lifecycle(root / f"q{round_}-{i}", messages)
                best[name] = min(best[name], seconds / messages * 1e6)
    finally:
        vsqs.metrics.disable()
        shutil.rmtree(root, ignore_errors=True)
    return best


class Counting(meter.Off):
    """An observer that does nothing but count the hook calls made to it."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name != "calls":
            self.calls += 1
        return super().__getattribute__(name)


def hook_bound(messages: int, workdir: str | None = None) -> tuple[float, float]:
    """Hook calls per message of a lifecycle, and ns per call of the empty observer."""
    counting = Counting()
    root = Path(tempfile.mkdtemp(prefix="vsqs-bench-metrics-", dir=workdir))
    meter.install(counting)
    try:
        lifecycle(root / "q", messages)
    finally:
        meter.install(meter.OFF)
        shutil.rmtree(root, ignore_errors=True)
    off = meter.OFF
    runs = 200_000
    seconds = min(timeit.repeat(lambda: off.sent("q", "send", 1, 0.0), number=runs, repeat=5))
    return counting.calls / messages, seconds / runs * 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=2000, help="messages per run")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (best of)")
    parser.add_argument("--workdir", help="parent of the work directory (default: system temp)")
    args = parser.parse_args(argv)
    best = measure(args.messages, max(1, args.repeat), args.workdir)
    base = best["off"]
    print(f"send+receive+delete of {args.messages:,} messages, best of {args.repeat}:")
    for name, us in best.items():
        print(f"  {name:<11} {us:8.1f} CPU µs/msg  ratio {us / base:5.2f}")
    calls, ns = hook_bound(args.messages, args.workdir)
    print(
        f"hooks while off: {calls:.1f} calls/msg x {ns:.0f} ns = {calls * ns / 1000:.2f} µs/msg, "
        f"{calls * ns / 1000 / base:.2%} of the off figure"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
