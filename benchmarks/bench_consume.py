"""``vsqs consume -- true``: the worker command's throughput on a local directory.

Sends ``--messages`` messages into a fresh queue, then times ``vsqs consume
QUEUE --concurrency N --max-messages M -- true`` as a real process, from its
start (interpreter and import included) to its exit, and checks that it
handled, and deleted, every message. Each run is repeated ``--repeat``
times; the best and the median messages per second are printed. The goal
(issue 30): at least 100 messages per second with ``--concurrency 4``.

    python benchmarks/bench_consume.py                  # 2 000 messages, 3 runs
    python benchmarks/bench_consume.py --messages 200 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import vsqs

#: The console script of this interpreter's environment (or the one on PATH).
VSQS = shutil.which("vsqs", path=str(Path(sys.executable).parent)) or shutil.which("vsqs")


def consume_rate(root: Path, messages: int, concurrency: int) -> float:
    """Messages per second of one ``vsqs consume -- true`` over ``messages``
    messages in a fresh queue under ``root``; raises if any was not handled."""
    assert VSQS is not None, "the vsqs console script is not installed"
    url = str(Path(tempfile.mkdtemp(prefix="consume-", dir=root)) / "q")
    with vsqs.Queue(url) as q:
        q.send_batch([b"x"] * messages)
    argv = [VSQS, "consume", url, "-c", str(concurrency), "-n", str(messages), "--json", "--"]
    began = time.perf_counter()
    done = subprocess.run([*argv, "true"], capture_output=True, check=True)
    took = time.perf_counter() - began
    summary = json.loads(done.stdout)
    if summary["succeeded"] != messages:
        raise AssertionError(f"handled {summary} of {messages}: {done.stderr.decode()}")
    with vsqs.Queue(url) as q:
        stats = q.stats()
    if stats.ready + stats.in_flight + stats.delayed:
        raise AssertionError(f"left in the queue: {stats}")
    return messages / took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", help="where the queues go (default: the temp dir)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="vsqs-bench-consume-", dir=args.dir))
    try:
        rates = [consume_rate(root, args.messages, args.concurrency) for _ in range(args.repeat)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"vsqs consume -c {args.concurrency} -- true: {args.messages:,} messages, "
        f"best {max(rates):,.0f} msg/s, median {statistics.median(rates):,.0f} msg/s "
        f"({args.repeat} runs)"
    )


if __name__ == "__main__":
    main()
