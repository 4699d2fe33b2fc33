"""The ``vsqs`` command line: one subcommand per queue operation (the
console script around it, its exit codes and one-line errors: :mod:`._script`).

Data goes to stdout, summaries to stderr (or, with ``--json``, to stdout as
one JSON object). Progress bars go to stderr whenever it is a terminal.
Nothing is read from a config file.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import click

from .._bundled import stale_receipt
from .._config import MAX_SECONDS
from .._errors import ReceiptExpired
from .._message import Message
from .._names import FORMAT_VERSION, READABLE_FORMATS
from .._queue import Queue
from ._admin import config, delete_queue
from ._common import (
    SECONDS,
    F,
    key_option,
    max_option,
    open_queue,
    queue_options,
    verbose_option,
)
from ._consume import consume
from ._demo import demo
from ._interrupt import interruptible, release, take
from ._load import pump, sink
from ._metrics import metrics
from ._move import move
from ._ops import gc, purge, queues, redrive_command, stats
from ._report import Report, json_option, out, out_line
from ._send import send
from ._top import top


# ------------------------------------------------------------------ output
def message_json(message: Message) -> str:
    doc: dict[str, Any] = {"id": message.id}
    if message.receipt is not None:
        doc["receipt"] = message.receipt
    doc["receive_count"] = message.receive_count
    doc["sent_at"] = message.sent_at.isoformat()
    if message.receipt is None:  # peeked: where a dead letter came from, from the listing
        origin = message.dead_lettered
        doc["dead_lettered"] = origin and {
            "source": origin.source,
            "receive_count": origin.receive_count,
            "at": origin.at.isoformat(timespec="milliseconds"),
        }
    doc["group"] = message.group
    doc["dedup_id"] = message.dedup_id
    doc["attributes"] = message.attributes
    try:
        doc["body"] = message.body.decode()
    except UnicodeDecodeError:
        doc["body_base64"] = base64.b64encode(message.body).decode()
    return json.dumps(doc, ensure_ascii=False)


def _emit(message: Message, as_json: bool, null: bool) -> None:
    """One message: a JSON line, or its body and a newline (``null``: a NUL
    byte, and no label); at a terminal, a body of a group after ``[group] ``
    (to a pipe or a file, the body alone: data)."""
    if as_json:
        out(message_json(message).encode() + b"\n")
        return
    if null:
        out(message.body + b"\0")
        return
    label = b""
    if message.group is not None and sys.stdout.isatty():
        label = f"[{message.group}] ".encode()
    out(label + message.body + b"\n")


def _null_option(fn: F) -> F:
    """``-0/--null``: each body followed by a NUL byte, not a newline."""
    return click.option(
        "-0",
        "--null",
        is_flag=True,
        help="End each body with a NUL byte, not a newline (for xargs -0). A body "
        "may hold newlines and NUL bytes itself: --json is the safe form.",
    )(fn)


def _check_form(as_json: bool, null: bool) -> None:
    if as_json and null:
        raise click.UsageError("give --json or -0/--null, not both")


# ---------------------------------------------------------------- commands
@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(
    package_name="vsqs",
    message=f"%(prog)s, version %(version)s (queue format {FORMAT_VERSION}; reads "
    f"{', '.join(map(str, READABLE_FORMATS))})",
)
@verbose_option
def main() -> None:
    """vsqs: a broker-less message queue. A queue is a directory (or an S3/GCS
    prefix); a message is a file whose name is its state.

    QUEUE is a local path, file://, s3://bucket/name or gs://bucket/name.
    Credentials and endpoints come from each store's usual environment
    variables (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, STORAGE_EMULATOR_HOST)
    or from -o KEY=VALUE. Data goes to stdout, summaries to stderr (--json:
    to stdout). Exit status: 0 ok, 1 error, 2 bad usage, 130/143 stopped by
    SIGINT/SIGTERM.
    """


@main.command(short_help="Create a queue with its defaults.")
@click.argument("url", metavar="QUEUE")
@click.option(
    "--visibility-timeout", type=SECONDS, metavar="SECONDS", help="Default seconds a receive hides."
)
@click.option(
    "--max-receives", type=click.IntRange(1), metavar="N", help="Receives before dead-lettering."
)
@click.option("--dead-letter", metavar="QUEUE", help="Dead-letter queue (name or URL).")
@click.option(
    "--retry-delay",
    type=SECONDS,
    metavar="SECONDS",
    help="consume: first delay before a failed message is retried (doubles per receive).",
)
@click.option(
    "--max-retry-delay", type=SECONDS, metavar="SECONDS", help="consume: the longest retry delay."
)
@click.option(
    "--max-message-size",
    type=click.IntRange(1),
    metavar="BYTES",
    help="Largest body sends take and receivers read.",
)
@click.option(
    "--dedup-window",
    type=click.FloatRange(0, MAX_SECONDS, min_open=True),
    metavar="SECONDS",
    help="How long a deduplication id is remembered (default 300).",
)
@click.option(
    "--content-dedup/--no-content-dedup",
    default=None,
    help="A send without --dedup-id uses the SHA-256 of its body (default: no).",
)
@click.option(
    "--dead-letter-blocks-group/--no-dead-letter-blocks-group",
    default=None,
    help="A dead-lettered message keeps its group blocked until it is redriven or deleted.",
)
@json_option
@queue_options
def create(url: str, as_json: bool, **defaults: Any) -> None:
    """Create QUEUE with these defaults (or check an existing one agrees).

    Unset ones come from the VSQS_* environment variables, else vsqs's own.
    """
    with open_queue(url, create=True, **defaults) as queue:
        config = queue.config
    Report(
        lambda f: (
            f"{f['queue']}: visibility_timeout={f['visibility_timeout']:g}s "
            f"max_receives={f['max_receives']} dead_letter={f['dead_letter']} "
            f"retry_delay={f['retry_delay']:g}s max_retry_delay={f['max_retry_delay']:g}s "
            f"max_message_size={f['max_message_size']} dedup_window={f['dedup_window']:g}s "
            f"content_dedup={f['content_dedup']} "
            f"dead_letter_blocks_group={f['dead_letter_blocks_group']} format={f['format']}"
        ),
        as_json=as_json,
        queue=queue.url,
        **asdict(config),
    ).done()


@main.command(short_help="Receive messages: bodies or JSON lines.")
@click.argument("url", metavar="QUEUE")
@max_option(1, "Receive up to this many messages.")
@click.option(
    "-w",
    "--wait",
    type=SECONDS,
    metavar="SECONDS",
    default=0,
    show_default=True,
    help="Long poll: seconds to wait for a first message.",
)
@click.option(
    "--visibility-timeout",
    type=SECONDS,
    metavar="SECONDS",
    help="Seconds the messages stay hidden (default: the queue's).",
)
@click.option("--delete", is_flag=True, help="Delete each message once it is printed.")
@key_option("--group", "GROUP", "Receive only this group's messages (its next ones, in order).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="JSON lines with id, receipt, receive_count, sent_at, group, dedup_id, "
    "attributes and body (the safe form for any body).",
)
@_null_option
@queue_options
def receive(
    url: str,
    max_messages: int,
    wait: float,
    visibility_timeout: float | None,
    delete: bool,
    group: str | None,
    as_json: bool,
    null: bool,
) -> None:
    """Receive messages and print their bodies, one per line (or --json, or -0).

    Without --delete each message comes back after its visibility timeout
    unless you delete it by its receipt (see --json). Prints nothing if the
    queue has nothing visible within --wait. A message received but not
    printed (stdout closed, Ctrl-C, SIGTERM) is released: visible again at once.
    At a terminal, the body of a message of a group follows "[GROUP] ".
    A body may hold newlines: --json (or -0, if bodies hold no NUL) keeps
    them apart.
    """
    _check_form(as_json, null)
    with open_queue(url) as queue:
        report = Report(_received_text, received=0, deleted=0 if delete else None, queue=queue.url)
        while (got := report.fields["received"]) < max_messages:
            batch = take(
                queue,
                min(100, max_messages - got),
                visibility_timeout=visibility_timeout,
                wait=wait if got == 0 else 0,
                group=group,
            )
            if not batch:
                break
            _hand_out(queue, batch, (as_json, null), delete=delete, report=report)
        report.done(say=False)


def _received_text(f: dict[str, Any]) -> str:
    deleted = "" if f["deleted"] is None else f" and deleted {f['deleted']:,}"
    return f"printed {f['received']:,} messages from {f['queue']}{deleted}"


def _hand_out(
    queue: Queue, batch: list[Message], form: tuple[bool, bool], *, delete: bool, report: Report
) -> None:
    """Print the messages (``form``: as JSON, with NULs); then release those
    not printed (the reader went away, or a signal came) and, with
    ``delete``, delete those printed."""
    printed = 0
    try:
        with interruptible():  # a write to a reader who waits
            for message in batch:
                _emit(message, *form)
                printed += 1
    finally:
        release(queue, batch[printed:])
        report.add("received", printed)
        if delete and printed:
            acked = queue.delete_batch(batch[:printed])
            report.add("deleted", len(acked.deleted))
            for error in acked.failed.values():
                raise error
            _report_stale([f"cannot delete: {stale_receipt(r, queue.url)}" for r in acked.stale])


def _receipts(receipts: tuple[str, ...]) -> Iterator[str]:
    for receipt in receipts:
        if receipt != "-":
            yield receipt
            continue
        while True:
            with interruptible():
                line = sys.stdin.readline()
            if not line:
                break
            if line.strip():
                yield line.strip()


def _each_receipt(receipts: tuple[str, ...], action: Callable[[str], object]) -> None:
    """Act on every receipt; then fail (exit 1) if any was stale, one line for each."""
    stale = []
    for receipt in _receipts(receipts):
        try:
            action(receipt)
        except ReceiptExpired as exc:
            stale.append(str(exc))
    _report_stale(stale)


def _report_stale(stale: list[str]) -> None:
    """One line for each stale receipt; exit 1 if there was any."""
    for line in stale[:-1]:
        click.echo(f"vsqs: error: {line}", err=True)
    if stale:
        raise click.ClickException(stale[-1])


@main.command(short_help="Acknowledge received messages by receipt.")
@click.argument("url", metavar="QUEUE")
@click.argument("receipts", metavar="RECEIPT...", nargs=-1, required=True)
@queue_options
def delete(url: str, receipts: tuple[str, ...]) -> None:
    """Delete (acknowledge) received messages by receipt ('-': one per line of stdin)."""
    with open_queue(url) as queue:
        acked = queue.delete_batch(_receipts(receipts))
    for error in acked.failed.values():
        raise error
    _report_stale([f"cannot delete: {stale_receipt(r, queue.url)}" for r in acked.stale])


@main.command(short_help="Keep a received message hidden longer.")
@click.argument("url", metavar="QUEUE")
@click.argument("receipt")
@click.option(
    "-t",
    "--visibility-timeout",
    type=SECONDS,
    metavar="SECONDS",
    required=True,
    help="Seconds from now the message stays hidden.",
)
@queue_options
def extend(url: str, receipt: str, visibility_timeout: float) -> None:
    """Keep a received message hidden longer; prints its new receipt."""
    with open_queue(url) as queue:
        receipt = queue.extend(receipt, visibility_timeout).receipt or ""
    out_line(receipt)


@main.command("release", short_help="Give received messages back.")
@click.argument("url", metavar="QUEUE")
@click.argument("receipts", metavar="RECEIPT...", nargs=-1, required=True)
@click.option(
    "--delay",
    type=SECONDS,
    metavar="SECONDS",
    default=0,
    help="Seconds before it is visible again.",
)
@queue_options
def release_command(url: str, receipts: tuple[str, ...], delay: float) -> None:
    """Give received messages back (negative acknowledge), keeping their place."""
    with open_queue(url) as queue:
        _each_receipt(receipts, lambda r: queue.release(r, delay=delay))


@main.command(short_help="Show the oldest messages, receiving none.")
@click.argument("url", metavar="QUEUE")
@max_option(10, "Show up to this many messages.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="JSON lines with id, receive_count, sent_at, dead_lettered, group, dedup_id, "
    "attributes and body (the safe form for any body).",
)
@_null_option
@queue_options
def peek(url: str, max_messages: int, as_json: bool, null: bool) -> None:
    """Print the oldest visible messages without receiving them, one body
    per line (or --json, or -0; at a terminal, the body of a message of a
    group follows "[GROUP] ")."""
    _check_form(as_json, null)
    with open_queue(url) as queue:
        for message in queue.peek(max_messages):
            _emit(message, as_json, null)


for _command in (
    send,
    stats,
    purge,
    redrive_command,
    move,
    gc,
    queues,
    pump,
    sink,
    demo,
    metrics,
    consume,
    top,
    config,
    delete_queue,
):
    main.add_command(_command)


__all__ = ["main", "message_json"]
