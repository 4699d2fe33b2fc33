"""``vsqs demo``: one producer and N consumer processes on a queue of the
demo's own, checked at the end (the README's main job).

The demo makes its directory afresh (``mkdtemp``: never one that exists, so
never another's queue). Its processes ignore SIGINT and SIGTERM (a Ctrl-C at
the terminal reaches the whole process group): the demo stops them itself,
through a shared flag, so that what it reports is what they did.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from ctypes import c_byte, c_longlong
from pathlib import Path
from typing import Any

import click

from .._message import Message
from .._queue import Queue
from ..stores._registry import mistyped_url
from ._common import batch_option, progress_bar
from ._interrupt import children_immune, interruptible, pending
from ._report import Report, json_option

#: Seconds a demo consumer waits for more before it stops.
DEMO_IDLE = 3.0
#: Seconds between a consumer's looks at the stop flag.
STOP_POLL = 0.1


def _produce(url: str, count: int, batch: int, sent: c_longlong, stop: c_byte) -> None:
    """Send ``count`` messages, a batch at a time, counting them in ``sent``,
    until ``stop`` is set."""
    with Queue(url) as queue:
        for start in range(0, count, batch):
            if stop.value:
                return
            end = min(count, start + batch)
            queue.send_batch(f"job {i}".encode() for i in range(start, end))
            sent.value = end


def _consume(url: str, out: str, idle: float, stop: c_byte) -> None:
    """Consume until the queue stays empty for ``idle`` seconds or ``stop`` is
    set, writing one line for each message handled."""
    stopping = threading.Event()  # consume() takes a threading.Event

    def relay() -> None:
        while not stop.value:
            time.sleep(STOP_POLL)
        stopping.set()

    threading.Thread(target=relay, daemon=True).start()
    with Queue(url) as queue, open(out, "w") as log:

        def handle(message: Message) -> None:
            log.write(f"{message.id} {message.receive_count}\n")

        queue.consume(handle, idle_timeout=idle, stop=stopping)


def _local_directory(_ctx: click.Context, _param: click.Parameter, text: str | None) -> Path | None:
    """``--dir``: a local directory, never a URL (nor one missing a slash,
    which ``Path`` would have made of ``s3://demo``)."""
    if text is None:
        return None
    if "://" in text or mistyped_url(text) is not None:
        raise click.BadParameter(f"{text!r:.80} is a URL: the demo runs in a local directory")
    return Path(text)


@click.command(short_help="Run a producer and N consumers; check them.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    callback=_local_directory,
    help="Make the demo's own directory (with its queue) under this one and keep it "
    "(default: a fresh one under the system temp dir, removed after).",
)
@click.option(
    "-n",
    "--messages",
    type=click.IntRange(1),
    metavar="N",
    default=20_000,
    show_default=True,
    help="Messages to send.",
)
@click.option(
    "-c",
    "--consumers",
    type=click.IntRange(1),
    metavar="N",
    default=4,
    show_default=True,
    help="Consumer processes.",
)
@batch_option(100, None, "Producer send_batch size.")
@json_option
def demo(directory: Path | None, messages: int, consumers: int, batch: int, as_json: bool) -> None:
    """Run one producer and N consumer processes on a queue of the demo's own
    and check the result.

    The queue is made afresh in a new directory (never one that exists).
    Ctrl-C or SIGTERM stops the processes, says what they did and removes
    the directory the demo made under the system temp dir.
    """
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vsqs-demo-", dir=directory))
    report = Report(_demo_text, as_json=as_json, queue=str(work / "jobs"), consumers=consumers)
    try:
        failed = _run_demo(work, messages, consumers, batch, report)
    finally:
        if directory is None:
            shutil.rmtree(work, ignore_errors=True)
    report.done()
    f = report.fields
    if failed or f["duplicates"] or f["acked"] != messages:
        click.echo(f"demo FAILED (process exit codes {failed})", err=True)
        sys.exit(1)


def _run_demo(work: Path, messages: int, consumers: int, batch: int, report: Report) -> list[int]:
    """Run the processes until they are done (or a signal stops them); fill
    in ``report``; return the non-zero exit codes."""
    url = report.fields["queue"]
    Queue(url).close()
    ctx = multiprocessing.get_context("spawn")
    # Shared without a lock (one writer each): a process that ended holding
    # a lock would leave the others waiting for ever.
    stop, sent = ctx.RawValue(c_byte, 0), ctx.RawValue(c_longlong, 0)
    outs = [str(work / f"consumer-{i}.log") for i in range(consumers)]
    procs = [ctx.Process(target=_produce, args=(url, messages, batch, sent, stop))]
    procs += [ctx.Process(target=_consume, args=(url, out, DEMO_IDLE, stop)) for out in outs]
    started = time.monotonic()
    with children_immune():  # a Ctrl-C at the terminal reaches them too: this process stops them
        for proc in procs:
            proc.start()
    try:
        with progress_bar("acked", messages) as bar:
            while any(p.is_alive() for p in procs):
                bar.update(sum(_count_lines(out) for out in outs) - bar.n)
                with interruptible():
                    multiprocessing.connection.wait([p.sentinel for p in procs], timeout=0.2)
    finally:
        interrupted = pending() is not None
        stop.value = 1
        for proc in procs:
            proc.join()
        elapsed = time.monotonic() - started - (0 if interrupted else DEMO_IDLE)
        report.fields.update(_tally(url, outs, sent.value, elapsed))
    return [p.exitcode for p in procs if p.exitcode]


def _tally(url: str, outs: list[str], sent: int, elapsed: float) -> dict[str, Any]:
    """What the consumers' logs and the queue say."""
    seen: Counter[str] = Counter()
    redelivered = 0
    for out in outs:
        for line in Path(out).read_text().splitlines():
            message_id, count = line.split()
            seen[message_id] += 1
            redelivered += int(count) > 1
    with Queue(url) as queue:
        left = queue.stats()
    queued = left.ready + left.in_flight + left.delayed
    return {
        "sent": sent,
        "acked": len(seen),
        "seconds": round(max(elapsed, 1e-9), 3),
        "redeliveries": redelivered,
        "duplicates": sum(n - 1 for n in seen.values()),
        "lost": sent - len(seen) - queued,
        "queued": queued,
    }


def _demo_text(f: dict[str, Any]) -> str:
    if "sent" not in f:
        return f"queue {f['queue']}: the processes had not started"
    queued = f", {f['queued']:,} still queued" if f["queued"] else ""
    return (
        f"queue {f['queue']}: {f['sent']} sent, {f['acked']} acked by {f['consumers']} "
        f"consumers in {f['seconds']:.2f} s ({f['acked'] / f['seconds']:,.0f} msg/s); "
        f"redeliveries {f['redeliveries']}, duplicates {f['duplicates']}, lost {f['lost']}"
        f"{queued}"
    )


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 16), b""))
    except FileNotFoundError:
        return 0


__all__ = ["DEMO_IDLE", "demo"]
