"""``vsqs send``: bodies from arguments, stdin or the lines of a file, with
a group, a deduplication id and attributes (docs/cli.md, "Groups,
deduplication ids and attributes").

``--group`` and ``--attr`` apply to every message a command sends (the
lines of ``--file`` form one group, in order); ``--dedup-id`` names one
message, so it is refused with several (a queue created with
``--content-dedup`` deduplicates each line by its body instead).
"""

from __future__ import annotations

import sys
from typing import Any, BinaryIO

import click

from .._envelope import check_attributes
from .._queue import Queue
from ._common import (
    SECONDS,
    batch_option,
    create_option,
    key_option,
    open_queue,
    progress_bar,
    queue_options,
)
from ._interrupt import Interrupted, interruptible
from ._lines import LineBatches
from ._report import Report, out


def _parse_attributes(
    _ctx: click.Context, _param: click.Parameter, pairs: tuple[str, ...]
) -> dict[str, str]:
    """``--attr NAME=VALUE`` pairs as attributes (a value may hold ``=``);
    a pair without ``=``, a name given twice or more than the engine takes
    is a usage error."""
    attributes: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r:.80} is not NAME=VALUE")
        if name in attributes:
            raise click.BadParameter(f"attribute {name!r:.80} is given twice")
        attributes[name] = value
    try:
        return check_attributes(attributes)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command(short_help="Send messages: arguments, stdin or a file.")
@click.argument("url", metavar="QUEUE")
@click.argument("bodies", metavar="[BODY]...", nargs=-1)
@click.option(
    "-f",
    "--file",
    "lines_file",
    type=click.File("rb"),
    help="Send one message per line of this file ('-': stdin).",
)
@click.option(
    "--delay", type=SECONDS, metavar="SECONDS", default=0, help="Seconds before it is visible."
)
@key_option(
    "--group", "GROUP", "Send every message in this group: delivered in order, one at a time."
)
@key_option(
    "--dedup-id",
    "ID",
    "Deduplication id of the one message: a send of an id sent within the "
    "queue's dedup window creates nothing and prints the first message's id.",
)
@click.option(
    "--attr",
    "attributes",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_parse_attributes,
    help="An attribute of every message (repeatable; at most 10).",
)
@batch_option(100, 10_000, "Messages per send_batch with --file.")
@create_option("QUEUE")
@click.option("--raw", is_flag=True, help="Send stdin byte for byte (keep a final newline).")
@click.option(
    "--allow-empty",
    is_flag=True,
    help="Send an empty stdin as an empty message (without it, an empty stdin is refused).",
)
@queue_options
def send(
    url: str,
    bodies: tuple[str, ...],
    lines_file: BinaryIO | None,
    delay: float,
    group: str | None,
    dedup_id: str | None,
    attributes: dict[str, str],
    batch: int,
    create: bool,
    raw: bool,
    allow_empty: bool,
) -> None:
    """Send each BODY, or stdin as one message, or one per line of --file.

    A body read from stdin loses one trailing newline unless --raw is given.
    A stdin with no bytes at all (a cron job's, say) is refused (exit 2)
    unless --allow-empty is given: it sends nothing.
    --file sends --batch lines at a time, or what came before the input
    paused (0.1 s). Prints the id of each message sent, a batch as soon as it
    is sent: stopped by Ctrl-C or SIGTERM, it sends the whole lines it read,
    has printed the id of every message it sent, and says how many on stderr.

    --group and --attr apply to every message; --dedup-id only to one (one
    BODY, or stdin): for many, create the queue with --content-dedup.
    """
    if bodies and lines_file is not None:
        raise click.UsageError("give BODY arguments or --file, not both")
    if not bodies and lines_file is None and sys.stdin.isatty():
        raise click.UsageError("give a BODY, --file, or pipe the body into stdin")
    if dedup_id is not None and (len(bodies) > 1 or lines_file is not None):
        raise click.UsageError(
            "--dedup-id names one message: give one BODY or stdin "
            "(for many, create the queue with --content-dedup)"
        )
    meta: dict[str, Any] = {"delay": delay, "group": group, "attributes": attributes or None}
    piped = None if bodies or lines_file is not None else _stdin_body(raw, allow_empty)
    with open_queue(url, create=create) as queue:
        if bodies:
            dedup_ids = None if dedup_id is None else [dedup_id]
            _out_ids(queue.send_batch(list(bodies), dedup_ids=dedup_ids, **meta))
        elif lines_file is not None:
            _send_lines(queue, lines_file, batch, meta)
        else:
            assert piped is not None
            _out_ids([queue.send(piped, dedup_id=dedup_id, **meta)])


def _stdin_body(raw: bool, allow_empty: bool) -> bytes:
    """The whole of stdin as one body (without one final newline unless
    ``raw``); an empty stdin is bad usage unless ``allow_empty``."""
    with interruptible():
        body = sys.stdin.buffer.read()
    if not body and not allow_empty:
        raise click.UsageError(
            "stdin is empty: nothing sent (give a BODY, or --allow-empty to send an empty message)"
        )
    return body if raw else _strip_eol(body)


def _send_lines(queue: Queue, lines: BinaryIO, batch: int, meta: dict[str, Any]) -> None:
    """One message per line (each with ``meta``: delay, group, attributes),
    ``batch`` lines at a time or what came before the input paused: a signal
    stops it while it reads, after it has sent the whole lines it read (a
    line not ended yet is dropped), never between a send and the printing of
    its ids."""
    report = Report(_sent_text, sent=0, queue=queue.url)
    reader = LineBatches(lines, batch)

    def send(chunk: list[bytes]) -> None:
        ids = queue.send_batch([_strip_eol(line) for line in chunk], **meta)
        _out_ids(ids)
        report.add("sent", len(ids))
        bar.update(len(ids))

    with progress_bar("sent") as bar:
        while True:
            try:
                chunk = reader.next()
            except Interrupted:
                if reader.held:  # read from the input, which cannot give them again
                    send(reader.held)
                raise
            if not chunk:
                break
            send(chunk)
    report.done(say=False)


def _sent_text(f: dict[str, Any]) -> str:
    return f"sent {f['sent']:,} messages to {f['queue']}"


def _out_ids(ids: list[str]) -> None:
    out("".join(f"{i}\n" for i in ids).encode())


def _strip_eol(data: bytes) -> bytes:
    """``data`` without one final ``\\n`` or ``\\r\\n``."""
    if data.endswith(b"\r\n"):
        return data[:-2]
    return data[:-1] if data.endswith(b"\n") else data


__all__ = ["send"]
