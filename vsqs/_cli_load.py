"""Load commands of the ``vsqs`` command line: ``pump``, ``sink`` and ``demo``.

``pump`` writes bodies ``pump <producer> <seq> <padding>``; ``sink`` drains a
queue, deletes what it receives and checks those bodies: no message it
deleted comes again (duplicates), and each producer's messages arrive in
``seq`` order (with one sink; several racing sinks see each other's gaps).
"""

from __future__ import annotations

import multiprocessing
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from ._cli_common import SECONDS, open_queue, progress_bar, queue_options
from ._message import Message
from ._queue import Queue

PUMP_PREFIX = b"pump "
#: Seconds a demo consumer waits for more before it stops.
DEMO_IDLE = 3.0


def pump_body(producer: str, seq: int, size: int) -> bytes:
    body = b"%s%s %012d " % (PUMP_PREFIX, producer.encode(), seq)
    return body + b"x" * max(0, size - len(body))


@click.command(short_help="Load generator: send numbered messages.")
@click.argument("url", metavar="QUEUE")
@click.option(
    "-n",
    "--messages",
    type=click.IntRange(0),
    metavar="N",
    default=10_000,
    show_default=True,
    help="Messages to send (0: until interrupted).",
)
@click.option(
    "--rate",
    type=click.FloatRange(0),
    metavar="NUMBER",
    default=0,
    help="Messages per second (0: as fast as possible).",
)
@click.option(
    "--size",
    type=click.IntRange(0, 1 << 30),
    metavar="N",
    default=0,
    help="Pad bodies to at least this many bytes.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    metavar="N",
    default=1,
    show_default=True,
    help="Messages per send_batch.",
)
@queue_options
def pump(url: str, messages: int, rate: float, size: int, batch: int) -> None:
    """Send numbered messages as a load generator, showing the live rate.

    Bodies are 'pump PRODUCER SEQ': `vsqs sink` checks them.
    """
    producer = secrets.token_hex(4)
    sent = 0
    started = time.monotonic()
    with open_queue(url, create=True) as queue, progress_bar("pumped", messages or None) as bar:
        try:
            while not messages or sent < messages:
                count = batch if not messages else min(batch, messages - sent)
                if rate:
                    ahead = started + sent / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                queue.send_batch([pump_body(producer, sent + i, size) for i in range(count)])
                sent += count
                bar.update(count)
        except KeyboardInterrupt:
            pass
    elapsed = time.monotonic() - started
    click.echo(
        f"pump: sent {sent:,} messages as producer {producer} in {elapsed:.2f} s "
        f"({sent / max(elapsed, 1e-9):,.0f} msg/s)"
    )


@dataclass
class SinkCheck:
    """What a sink saw, and what would be a violation."""

    received: int = 0
    redelivered: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    foreign: int = 0
    deleted: set[str] = field(default_factory=set)
    last_seq: dict[str, int] = field(default_factory=dict)
    seqs: dict[str, set[int]] = field(default_factory=dict)

    def see(self, message: Message) -> None:
        self.received += 1
        self.redelivered += message.receive_count > 1
        if message.id in self.deleted:
            self.duplicates += 1
        parts = message.body.split(b" ", 3)
        if len(parts) < 3 or parts[0] + b" " != PUMP_PREFIX or not parts[2].isdigit():
            self.foreign += 1
            return
        producer, seq = parts[1].decode(errors="replace"), int(parts[2])
        if message.receive_count == 1 and seq < self.last_seq.get(producer, -1):
            self.out_of_order += 1
        self.last_seq[producer] = max(seq, self.last_seq.get(producer, -1))
        self.seqs.setdefault(producer, set()).add(seq)

    def acked(self, message: Message) -> None:
        self.deleted.add(message.id)

    @property
    def gaps(self) -> int:
        """Sequence numbers below a producer's highest that never arrived here."""
        return sum(max(seqs) + 1 - len(seqs) for seqs in self.seqs.values())


@click.command(short_help="Drain a queue; check order and duplicates.")
@click.argument("url", metavar="QUEUE")
@click.option("-n", "--messages", type=click.IntRange(1), metavar="N", help="Stop after this many.")
@click.option(
    "--idle",
    type=SECONDS,
    metavar="SECONDS",
    default=5.0,
    show_default=True,
    help="Stop after this many seconds without a message.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 1000),
    metavar="N",
    default=10,
    show_default=True,
    help="Messages per receive_batch.",
)
@click.option("--visibility-timeout", type=SECONDS, metavar="SECONDS", help="Default: the queue's.")
@click.option(
    "--unordered", is_flag=True, help="Do not fail on order (several sinks share the queue)."
)
@queue_options
def sink(
    url: str,
    messages: int | None,
    idle: float,
    batch: int,
    visibility_timeout: float | None,
    unordered: bool,
) -> None:
    """Drain a queue (receive and delete), showing the live rate, and check
    `vsqs pump` messages for duplicates and order. Exits 1 on a violation."""
    check = SinkCheck()
    started = time.monotonic()
    last = started
    with open_queue(url) as queue, progress_bar("drained", messages) as bar:
        try:
            while messages is None or check.received < messages:
                room = batch if messages is None else min(batch, messages - check.received)
                got = queue.receive_batch(
                    room, visibility_timeout=visibility_timeout, wait=min(idle, 0.5)
                )
                if not got:
                    if time.monotonic() - last >= idle:
                        break
                    continue
                for message in got:
                    check.see(message)
                    message.delete()
                    check.acked(message)
                bar.update(len(got))
                last = time.monotonic()
        except KeyboardInterrupt:
            pass
    elapsed = max(last - started, 1e-9)
    click.echo(
        f"sink: {check.received:,} messages from {len(check.seqs)} producer(s) in "
        f"{elapsed:.2f} s ({check.received / elapsed:,.0f} msg/s); redeliveries "
        f"{check.redelivered}, duplicates {check.duplicates}, out of order "
        f"{check.out_of_order}, gaps {check.gaps}, foreign {check.foreign}"
    )
    if check.duplicates or (check.out_of_order and not unordered):
        raise click.ClickException("sink found duplicates or messages out of order")


# -------------------------------------------------------------------- demo
def _produce(url: str, count: int, batch: int) -> None:
    with Queue(url) as queue:
        for start in range(0, count, batch):
            queue.send_batch(f"job {i}".encode() for i in range(start, min(count, start + batch)))


def _consume(url: str, out: str, idle: float) -> None:
    with Queue(url) as queue, open(out, "w") as log:

        def handle(message: Message) -> None:
            log.write(f"{message.id} {message.receive_count}\n")

        queue.consume(handle, idle_timeout=idle)


@click.command(short_help="Run a producer and N consumers; check them.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Work directory (default: a fresh one under the system temp dir, removed after).",
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
@click.option(
    "--batch",
    type=click.IntRange(1),
    metavar="N",
    default=100,
    show_default=True,
    help="Producer send_batch size.",
)
def demo(directory: Path | None, messages: int, consumers: int, batch: int) -> None:
    """Run one producer and N consumer processes on a local queue and check the result."""
    keep = directory is not None
    work = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="vsqs-demo-"))
    url = str(work / "jobs")
    Queue(url).close()
    ctx = multiprocessing.get_context("spawn")
    outs = [str(work / f"consumer-{i}.log") for i in range(consumers)]
    started = time.monotonic()
    procs = [ctx.Process(target=_produce, args=(url, messages, batch))]
    procs += [ctx.Process(target=_consume, args=(url, out, DEMO_IDLE)) for out in outs]
    for proc in procs:
        proc.start()
    with progress_bar("acked", messages) as bar:
        while any(p.is_alive() for p in procs):
            bar.update(sum(_count_lines(out) for out in outs) - bar.n)
            time.sleep(0.2)
        bar.update(sum(_count_lines(out) for out in outs) - bar.n)
    elapsed = time.monotonic() - started - DEMO_IDLE  # consumers idle before they stop
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
