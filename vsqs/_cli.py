"""The ``vsqs`` command line."""

from __future__ import annotations

import multiprocessing
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import click
from tqdm import tqdm

from ._queue import Message, Queue


def _produce(url: str, count: int, batch: int) -> None:
    with Queue(url) as queue:
        for start in range(0, count, batch):
            queue.send_batch(f"job {i}".encode() for i in range(start, min(count, start + batch)))


def _consume(url: str, out: str, idle: float) -> None:
    with Queue(url) as queue, open(out, "w") as log:

        def handle(message: Message) -> None:
            log.write(f"{message.id} {message.receive_count}\n")

        queue.consume(handle, idle_timeout=idle)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vsqs")
def main() -> None:
    """vsqs: a broker-less message queue in a directory."""


@main.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Work directory (default: a fresh one under the system temp dir, removed after).",
)
@click.option("-n", "--messages", default=20_000, show_default=True, help="Messages to send.")
@click.option("-c", "--consumers", default=4, show_default=True, help="Consumer processes.")
@click.option("--batch", default=100, show_default=True, help="Producer send_batch size.")
def demo(directory: Path | None, messages: int, consumers: int, batch: int) -> None:
    """Run one producer and N consumer processes on a local queue and check the result."""
    if messages < 1 or consumers < 1 or batch < 1:
        raise click.UsageError("--messages, --consumers and --batch must be positive")
    keep = directory is not None
    work = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="vsqs-demo-"))
    url = str(work / "jobs")
    Queue(url).close()
    ctx = multiprocessing.get_context("spawn")
    outs = [str(work / f"consumer-{i}.log") for i in range(consumers)]
    started = time.monotonic()
    procs = [ctx.Process(target=_produce, args=(url, messages, batch))]
    procs += [ctx.Process(target=_consume, args=(url, out, 3.0)) for out in outs]
    for proc in procs:
        proc.start()
    with tqdm(total=messages, unit="msg", desc="acked", disable=None) as bar:
        while any(p.is_alive() for p in procs):
            acked = sum(_count_lines(out) for out in outs)
            bar.update(acked - bar.n)
            time.sleep(0.2)
        bar.update(sum(_count_lines(out) for out in outs) - bar.n)
    elapsed = time.monotonic() - started - 3.0  # consumers idle 3 s before they stop
    seen: Counter[str] = Counter()
    redelivered = 0
    for out in outs:
        for line in Path(out).read_text().splitlines():
            message_id, count = line.split()
            seen[message_id] += 1
            redelivered += int(count) > 1
    duplicates = sum(n - 1 for n in seen.values())
    failed = [p.exitcode for p in procs if p.exitcode]
    click.echo(
        f"queue {url}: {messages} sent, {len(seen)} acked by {consumers} consumers "
        f"in {elapsed:.2f} s ({len(seen) / max(elapsed, 1e-9):,.0f} msg/s); "
        f"redeliveries {redelivered}, duplicates {duplicates}, lost {messages - len(seen)}"
    )
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    if failed or duplicates or len(seen) != messages:
        click.echo(f"demo FAILED (process exit codes {failed})", err=True)
        sys.exit(1)


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 16), b""))
    except FileNotFoundError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["main"]
