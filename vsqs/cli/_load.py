"""Load commands of the ``vsqs`` command line: ``pump`` and ``sink``.

``pump`` writes bodies ``pump <producer> <seq> <padding>``; ``sink`` drains a
queue, deletes what it receives and checks those bodies: no message it
deleted comes again (duplicates), and each producer's messages arrive in
``seq`` order (with one sink; several racing sinks see each other's gaps).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import click

from .._message import Message
from ._common import SECONDS, batch_option, open_queue, progress_bar, queue_options
from ._interrupt import checkpoint, interruptible, take
from ._report import Report, json_option

PUMP_PREFIX = b"pump "


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
@batch_option(1, 10_000, "Messages per send_batch.")
@json_option
@queue_options
def pump(url: str, messages: int, rate: float, size: int, batch: int, as_json: bool) -> None:
    """Send numbered messages as a load generator, showing the live rate.

    Bodies are 'pump PRODUCER SEQ': `vsqs sink` checks them. Ctrl-C or
    SIGTERM stops it between two batches; the count it reports is exactly
    what it sent.
    """
    started = time.monotonic()
    with open_queue(url, create=True) as queue, progress_bar("pumped", messages or None) as bar:
        report = Report(
            _pumped_text,
            as_json=as_json,
            queue=queue.url,
            producer=secrets.token_hex(4),
            sent=0,
            seconds=0.0,
        )
        while not messages or report.fields["sent"] < messages:
            sent = report.fields["sent"]
            count = batch if not messages else min(batch, messages - sent)
            if rate and (ahead := started + sent / rate - time.monotonic()) > 0:
                with interruptible():
                    time.sleep(ahead)
            checkpoint()
            queue.send_batch(
                [pump_body(report.fields["producer"], sent + i, size) for i in range(count)]
            )
            report.add("sent", count)
            report.fields["seconds"] = round(time.monotonic() - started, 3)
            bar.update(count)
    report.done()


def _pumped_text(f: dict[str, Any]) -> str:
    return (
        f"pump: sent {f['sent']:,} messages as producer {f['producer']} in "
        f"{f['seconds']:.2f} s ({f['sent'] / max(f['seconds'], 1e-9):,.0f} msg/s)"
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

    def figures(self, seconds: float) -> dict[str, Any]:
        """What a sink reports after ``seconds`` of draining."""
        return {
            "received": self.received,
            "producers": len(self.seqs),
            "seconds": round(seconds, 3),
            "redelivered": self.redelivered,
            "duplicates": self.duplicates,
            "out_of_order": self.out_of_order,
            "gaps": self.gaps,
            "foreign": self.foreign,
        }


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
@batch_option(10, 1000, "Messages per receive_batch.")
@click.option("--visibility-timeout", type=SECONDS, metavar="SECONDS", help="Default: the queue's.")
@click.option(
    "--unordered", is_flag=True, help="Do not fail on order (several sinks share the queue)."
)
@json_option
@queue_options
def sink(
    url: str,
    messages: int | None,
    idle: float,
    batch: int,
    visibility_timeout: float | None,
    unordered: bool,
    as_json: bool,
) -> None:
    """Drain a queue (receive and delete), showing the live rate, and check
    `vsqs pump` messages for duplicates and order. Exits 1 on a violation."""
    check = SinkCheck()
    started = last = time.monotonic()
    with open_queue(url) as queue, progress_bar("drained", messages) as bar:
        report = Report(_sunk_text, as_json=as_json, queue=queue.url, **check.figures(0.0))
        while messages is None or check.received < messages:
            room = batch if messages is None else min(batch, messages - check.received)
            got = take(queue, room, visibility_timeout=visibility_timeout, wait=min(idle, 0.5))
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
            report.fields.update(check.figures(last - started))
    report.done()
    if check.duplicates or (check.out_of_order and not unordered):
        raise click.ClickException("sink found duplicates or messages out of order")


def _sunk_text(f: dict[str, Any]) -> str:
    return (
        f"sink: {f['received']:,} messages from {f['producers']} producer(s) in "
        f"{f['seconds']:.2f} s ({f['received'] / max(f['seconds'], 1e-9):,.0f} msg/s); "
        f"redeliveries {f['redelivered']}, duplicates {f['duplicates']}, out of order "
        f"{f['out_of_order']}, gaps {f['gaps']}, foreign {f['foreign']}"
    )


__all__ = ["PUMP_PREFIX", "SinkCheck", "pump", "pump_body", "sink"]
