"""The ``vsqs`` command line: one subcommand per queue operation.

Exit codes: 0 ok, 1 an error (one line on stderr; ``-v`` adds the traceback),
2 bad usage. Progress bars go to stderr and only when stdout and stderr are
terminals. Nothing is read from a config file.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import click

from ._cli_common import (
    SECONDS,
    max_option,
    open_queue,
    progress_bar,
    progress_callback,
    queue_options,
    storage_options,
    unsafe_claims,
    verbose_option,
)
from ._cli_load import demo, pump, sink
from ._dead_letter import redrive
from ._errors import ReceiptExpired, VsqsError
from ._message import Message, QueueStats
from ._registry import list_queues

#: ``VSQS_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR, CRITICAL) sets the log
#: level when no -v is given.
LOG_LEVEL_ENV = "VSQS_LOG_LEVEL"


# ------------------------------------------------------------------ output
def _out(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def message_json(message: Message) -> str:
    doc: dict[str, Any] = {"id": message.id}
    if message.receipt is not None:
        doc["receipt"] = message.receipt
    doc["receive_count"] = message.receive_count
    doc["sent_at"] = message.sent_at.isoformat()
    try:
        doc["body"] = message.body.decode()
    except UnicodeDecodeError:
        doc["body_base64"] = base64.b64encode(message.body).decode()
    return json.dumps(doc, ensure_ascii=False)


def _emit(message: Message, as_json: bool) -> None:
    _out((message_json(message).encode() if as_json else message.body) + b"\n")


def _age(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} s"


def stats_table(url: str, stats: QueueStats) -> str:
    rows = [
        ("queue", url),
        ("ready", f"{stats.ready:,}"),
        ("in flight", f"{stats.in_flight:,}"),
        ("delayed", f"{stats.delayed:,}"),
        ("being written", f"{stats.writing:,}"),
        ("dead letter", "-" if stats.dead_letter is None else f"{stats.dead_letter:,}"),
        ("oldest ready age", _age(stats.oldest_ready_age)),
        ("next visible in", _age(stats.next_visible_in)),
        ("in-flight expires in", _age(stats.in_flight_expires_in)),
    ]
    return "\n".join(f"{k:<21}{v}" for k, v in rows)


def stats_json(url: str, stats: QueueStats) -> str:
    return json.dumps({"queue": url, **stats.as_dict()})


# ---------------------------------------------------------------- commands
@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="vsqs")
@verbose_option
def main() -> None:
    """vsqs: a broker-less message queue. A queue is a directory (or an S3/GCS
    prefix); a message is a file whose name is its state.

    QUEUE is a local path, file://, s3://bucket/name or gs://bucket/name.
    Credentials and endpoints come from each store's usual environment
    variables (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, STORAGE_EMULATOR_HOST)
    or from -o KEY=VALUE. Exit status: 0 ok, 1 error, 2 bad usage.
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
@queue_options
def create(
    url: str, visibility_timeout: float | None, max_receives: int | None, dead_letter: str | None
) -> None:
    """Create QUEUE with these defaults (or check an existing one agrees)."""
    with open_queue(
        url,
        create=True,
        visibility_timeout=visibility_timeout,
        max_receives=max_receives,
        dead_letter=dead_letter,
    ) as queue:
        config = queue.config
        click.echo(
            f"{queue.url}: visibility_timeout={config.visibility_timeout:g}s "
            f"max_receives={config.max_receives} dead_letter={config.dead_letter}"
        )


@main.command(short_help="Send messages: arguments, stdin or a file.")
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
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    metavar="N",
    default=100,
    show_default=True,
    help="Messages per send_batch with --file.",
)
@click.option(
    "--create/--no-create",
    default=True,
    show_default=True,
    help="Create QUEUE if it does not exist.",
)
@click.option("--raw", is_flag=True, help="Send stdin byte for byte (keep a final newline).")
@queue_options
def send(
    url: str,
    bodies: tuple[str, ...],
    lines_file: BinaryIO | None,
    delay: float,
    batch: int,
    create: bool,
    raw: bool,
) -> None:
    """Send each BODY, or stdin as one message, or one per line of --file.

    A body read from stdin loses one trailing newline unless --raw is given.
    Prints the id of each message sent.
    """
    if bodies and lines_file is not None:
        raise click.UsageError("give BODY arguments or --file, not both")
    if not bodies and lines_file is None and sys.stdin.isatty():
        raise click.UsageError("give a BODY, --file, or pipe the body into stdin")
    with open_queue(url, create=create) as queue:
        if bodies:
            _out_ids(queue.send_batch(list(bodies), delay=delay))
        elif lines_file is None:
            body = sys.stdin.buffer.read()
            _out_ids([queue.send(body if raw else _strip_eol(body), delay=delay)])
        else:
            with progress_bar("sent") as bar:
                for chunk in _chunks((_strip_eol(line) for line in lines_file), batch):
                    _out_ids(queue.send_batch(chunk, delay=delay))
                    bar.update(len(chunk))


def _out_ids(ids: list[str]) -> None:
    _out("".join(f"{i}\n" for i in ids).encode())


def _strip_eol(data: bytes) -> bytes:
    """``data`` without one final ``\\n`` or ``\\r\\n``."""
    if data.endswith(b"\r\n"):
        return data[:-2]
    return data[:-1] if data.endswith(b"\n") else data


def _chunks(items: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


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
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="JSON lines with id, receipt, receive_count, sent_at and body.",
)
@queue_options
def receive(
    url: str,
    max_messages: int,
    wait: float,
    visibility_timeout: float | None,
    delete: bool,
    as_json: bool,
) -> None:
    """Receive messages and print their bodies, one per line (or --json).

    Without --delete each message comes back after its visibility timeout
    unless you delete it by its receipt (see --json). Prints nothing if the
    queue has nothing visible within --wait.
    """
    with open_queue(url) as queue:
        got = 0
        while got < max_messages:
            batch = queue.receive_batch(
                min(100, max_messages - got),
                visibility_timeout=visibility_timeout,
                wait=wait if got == 0 else 0,
            )
            if not batch:
                break
            for message in batch:
                _emit(message, as_json)
                if delete:
                    message.delete()
            got += len(batch)


def _receipts(receipts: tuple[str, ...]) -> Iterator[str]:
    for receipt in receipts:
        if receipt == "-":
            yield from (line.strip() for line in sys.stdin if line.strip())
        else:
            yield receipt


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
    _report_stale([f"cannot delete: {r} is no longer current" for r in acked.stale])


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
        click.echo(queue.extend(receipt, visibility_timeout).receipt)


@main.command(short_help="Give received messages back.")
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
def release(url: str, receipts: tuple[str, ...], delay: float) -> None:
    """Give received messages back (negative acknowledge), keeping their place."""
    with open_queue(url) as queue:
        _each_receipt(receipts, lambda r: queue.release(r, delay=delay))


@main.command(short_help="Show the oldest messages, receiving none.")
@click.argument("url", metavar="QUEUE")
@max_option(10, "Show up to this many messages.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines with id, receive_count, body.")
@queue_options
def peek(url: str, max_messages: int, as_json: bool) -> None:
    """Print the oldest visible messages without receiving them."""
    with open_queue(url) as queue:
        for message in queue.peek(max_messages):
            _emit(message, as_json)


@main.command(short_help="Counts by state and ages; --watch.")
@click.argument("url", metavar="QUEUE")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (a line per refresh).")
@click.option("-w", "--watch", is_flag=True, help="Refresh until interrupted.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1),
    metavar="NUMBER",
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option(
    "--count", type=click.IntRange(1), metavar="N", help="With --watch: stop after this many."
)
@queue_options
def stats(url: str, as_json: bool, watch: bool, interval: float, count: int | None) -> None:
    """Show the queue's counts by state and the ages an operator graphs."""
    refresh = watch and not as_json and sys.stdout.isatty()  # redraw in place
    gap = watch and not as_json and not refresh  # a blank line between tables
    with open_queue(url) as queue:
        shown = 0
        try:
            while True:
                figures = queue.stats()
                if refresh:
                    click.clear()
                text = (stats_json if as_json else stats_table)(queue.url, figures)
                click.echo(text + "\n" * gap)
                shown += 1
                if not watch or (count is not None and shown >= count):
                    return
                time.sleep(interval)
        except KeyboardInterrupt:
            return


@main.command(short_help="Delete every message (asks first).")
@click.argument("url", metavar="QUEUE")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@queue_options
def purge(url: str, yes: bool) -> None:
    """Delete every message of QUEUE, in every state."""
    with open_queue(url) as queue:
        if not yes:
            figures = queue.stats()
            total = figures.ready + figures.in_flight + figures.delayed
            click.confirm(f"Delete all {total:,} messages of {queue.url}?", abort=True, err=True)
        with progress_callback("purged") as progress:
            removed = queue.purge(progress=progress)
        click.echo(f"purged {removed:,} messages from {queue.url}")


@main.command("redrive", short_help="Move dead letters back to their queue.")
@click.argument("dead_letter", metavar="DLQ")
@click.argument("source", metavar="SOURCE")
@max_option(None, "Move at most this many.")
@queue_options
def redrive_command(dead_letter: str, source: str, max_messages: int | None) -> None:
    """Move visible messages from the dead-letter queue DLQ back to SOURCE."""
    options = storage_options()
    with progress_callback("moved") as progress:
        moved = redrive(
            dead_letter,
            source,
            storage_options=options,
            max_messages=max_messages,
            progress=progress,
            unsafe_claims=unsafe_claims(),
        )
    click.echo(f"moved {moved:,} messages from {dead_letter} to {source}")


@main.command(short_help="Remove what crashed clients left behind.")
@click.argument("url", metavar="QUEUE")
@queue_options
def gc(url: str) -> None:
    """Remove what crashed clients left behind; print each name removed.

    Safe while producers and consumers run: a send under way is never removed.
    """
    with open_queue(url) as queue, progress_callback("checked") as progress:
        removed = queue.gc(progress=progress)
    for name in removed:
        click.echo(name)
    click.echo(f"removed {len(removed)} leftovers from {queue.url}", err=True)


@main.command(short_help="List the queues under a root with counts.")
@click.argument("root")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one per queue.")
@queue_options
def queues(root: str, as_json: bool) -> None:
    """List the queues directly under ROOT (a directory, bucket or prefix) with their counts."""
    options = storage_options()
    rows = []
    for url in list_queues(root, storage_options=options):
        with open_queue(url) as queue:
            figures = queue.stats()
        if as_json:
            click.echo(stats_json(url, figures))
        else:
            rows.append((url, figures))
    if as_json:
        return
    header = ("QUEUE", "READY", "IN FLIGHT", "DELAYED", "DEAD LETTER", "OLDEST READY")
    table = [header] + [
        (
            url,
            f"{s.ready:,}",
            f"{s.in_flight:,}",
            f"{s.delayed:,}",
            "-" if s.dead_letter is None else f"{s.dead_letter:,}",
            _age(s.oldest_ready_age),
        )
        for url, s in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        click.echo("  ".join(cells).rstrip())


for _command in (pump, sink, demo):
    main.add_command(_command)


def run(argv: list[str] | None = None) -> None:
    """The console script: click with one-line errors and conventional exit codes."""
    logging.basicConfig(format="vsqs: %(levelname)s: %(message)s", stream=sys.stderr)
    logging.getLogger("vsqs").setLevel(_env_level())
    ctx_meta: dict[str, Any] = {}
    try:
        with main.make_context("vsqs", list(sys.argv[1:] if argv is None else argv)) as ctx:
            ctx_meta = ctx.meta
            main.invoke(ctx)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except _NO_ARGS_IS_HELP as exc:  # bare `vsqs`: the help, as click shows it (click >= 8.2)
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "vsqs"
        click.echo(f"{where}: error: {exc.format_message()} (try '{where} --help')", err=True)
        sys.exit(2)
    except click.Abort:
        click.echo("vsqs: aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        click.echo(f"vsqs: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except (VsqsError, OSError) as exc:
        if ctx_meta.get("vsqs.traceback"):
            traceback.print_exc()
        click.echo(f"vsqs: error: {_one_line(exc)}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


#: click >= 8.2 raises this for a group run without a command (older click
#: prints the help and exits by itself).
_NO_ARGS_IS_HELP: type[click.UsageError] | tuple[()] = getattr(
    click.exceptions, "NoArgsIsHelpError", ()
)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, VsqsError) else f"{type(exc).__name__}: {text}"


def _env_level() -> str:
    level = os.environ.get(LOG_LEVEL_ENV, "WARNING").strip().upper() or "WARNING"
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise SystemExit(
            f"vsqs: error: {LOG_LEVEL_ENV}={level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL"
        )
    return level


__all__ = ["main", "run"]
