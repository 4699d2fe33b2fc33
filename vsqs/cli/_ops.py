"""Operator commands of the ``vsqs`` command line: ``stats``, ``purge``,
``redrive``, ``gc`` and ``queues``."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click

from .._errors import QueueNotFound, VsqsError
from .._message import QueueStats
from .._names import CONFIG_NAME
from .._queue import Queue
from .._redrive import check_missing, check_redrive, move_back
from ..stores._location import without_credentials
from ..stores._registry import list_queues
from ._common import (
    max_option,
    one_line,
    open_queue,
    progress_bar,
    progress_callback,
    queue_options,
    storage_options,
)
from ._interrupt import checkpoint, interruptible
from ._metrics import only_queue, print_prometheus, prometheus_option
from ._report import Report, json_option, out_line

#: Messages ``vsqs redrive`` moves between two looks for a signal.
REDRIVE_STEP = 50


# -------------------------------------------------------------------- stats
def _age(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} s"


def stats_rows(url: str, stats: QueueStats) -> list[tuple[str, str]]:
    return [
        ("queue", url),
        ("ready", f"{stats.ready:,}"),
        ("in flight", f"{stats.in_flight:,}"),
        ("groups in flight", f"{stats.groups_in_flight:,}"),
        ("delayed", f"{stats.delayed:,}"),
        ("being written", f"{stats.writing:,}"),
        ("dead letter", "-" if stats.dead_letter is None else f"{stats.dead_letter:,}"),
        ("oldest ready age", _age(stats.oldest_ready_age)),
        ("next visible in", _age(stats.next_visible_in)),
        ("in-flight expires in", _age(stats.in_flight_expires_in)),
    ]


def table(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f"{k:<21}{v}" for k, v in rows)


def stats_json(url: str, stats: QueueStats, **extra: Any) -> str:
    return json.dumps({"queue": url, **stats.as_dict(), **extra})


@dataclass
class Refresh:
    """One refresh of ``stats --watch``: when, and how fast the backlog changed."""

    time: datetime
    backlog: int  # ready + in flight + delayed
    at: float  # monotonic seconds
    #: Messages per second by which the backlog grew since the previous
    #: refresh: sends minus deletes (and dead-letterings). Counts alone cannot
    #: tell sends and deletes apart. ``None`` at the first refresh.
    change: float | None

    @classmethod
    def after(cls, stats: QueueStats, previous: Refresh | None) -> Refresh:
        at = time.monotonic()
        backlog = stats.ready + stats.in_flight + stats.delayed
        change = None
        if previous is not None:
            change = (backlog - previous.backlog) / max(at - previous.at, 1e-9)
        return cls(datetime.now(UTC), backlog, at, change)

    def time_row(self) -> tuple[str, str]:
        return ("time", self.time.astimezone().isoformat(timespec="seconds"))

    def change_row(self) -> tuple[str, str]:
        change = "-" if self.change is None else f"{self.change:+,.1f} msg/s"
        return ("backlog change", f"{change} (sends - deletes)")

    def fields(self) -> dict[str, Any]:
        change = None if self.change is None else round(self.change, 3)
        return {"time": self.time.isoformat(timespec="milliseconds"), "backlog_change": change}


@click.command(short_help="Counts by state and ages; --watch, --prometheus.")
@click.argument("urls", metavar="QUEUE...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object (a line per refresh).")
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="Refresh until interrupted, with the time and the backlog's rate of change.",
)
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
@prometheus_option
@queue_options
def stats(
    urls: tuple[str, ...],
    as_json: bool,
    watch: bool,
    interval: float,
    count: int | None,
    prometheus: bool,
) -> None:
    """Show the queue's counts by state and the ages an operator graphs.

    With --watch, each refresh also shows the time and the backlog change:
    how many messages per second the queue gained (sends minus deletes)
    since the previous refresh. Fails (exit 1) if the queue is removed.
    With --prometheus, the Prometheus text format of every QUEUE.
    """
    if prometheus:
        print_prometheus(urls, other_format=as_json or watch)
        return
    url = only_queue(urls)
    with open_queue(url) as queue:
        if not watch:
            figures = queue.stats()
            out_line(
                stats_json(queue.url, figures) if as_json else table(stats_rows(queue.url, figures))
            )
            return
        _watch(queue, as_json, interval, count)


def _watch(queue: Queue, as_json: bool, interval: float, count: int | None) -> None:
    redraw = not as_json and sys.stdout.isatty()  # in place on a terminal
    refresh: Refresh | None = None
    shown = 0
    while count is None or shown < count:
        if shown:
            with interruptible():
                time.sleep(interval)
        figures = queue.stats()
        _check_still_there(queue)
        refresh = Refresh.after(figures, refresh)
        if as_json:
            out_line(stats_json(queue.url, figures, **refresh.fields()))
        else:
            text = table(
                [refresh.time_row(), *stats_rows(queue.url, figures), refresh.change_row()]
            )
            if redraw:
                click.clear()
            out_line(text if redraw else text + "\n")  # a blank line between tables
        shown += 1


def _check_still_there(queue: Queue) -> None:
    """Raise :class:`QueueNotFound` if the queue's config is gone (its
    directory or prefix was removed): its counts would read 0 for ever."""
    try:
        queue.store.read(CONFIG_NAME)
    except FileNotFoundError:
        raise QueueNotFound(f"{queue.url} is gone: it was removed while being watched") from None


# -------------------------------------------------------------------- purge
@click.command(short_help="Delete every message (asks first).")
@click.argument("url", metavar="QUEUE")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@queue_options
def purge(url: str, yes: bool, as_json: bool) -> None:
    """Delete every message of QUEUE, in every state.

    Ctrl-C or SIGTERM stops it between two deletions and says how many it
    deleted.
    """
    with open_queue(url) as queue:
        if not yes:
            figures = queue.stats()
            total = figures.ready + figures.in_flight + figures.delayed
            with interruptible():
                click.confirm(
                    f"Delete all {total:,} messages of {queue.url}?", abort=True, err=True
                )
        report = Report(_purged_text, as_json=as_json, purged=0, of=None, queue=queue.url)

        def step(done: int, total: int | None) -> None:
            report.fields.update(purged=done, of=total)
            checkpoint()

        with progress_callback("purged", step) as progress:
            removed = queue.purge(progress=progress)
        report.fields["purged"] = removed
        del report.fields["of"]  # all it found
        report.done()


def _purged_text(f: dict[str, Any]) -> str:
    of = "" if f.get("of") is None else f" of {f['of']:,}"
    return f"purged {f['purged']:,}{of} messages from {f['queue']}"


# ------------------------------------------------------------------ redrive
@click.command("redrive", short_help="Move dead letters back to their queue.")
@click.argument("dead_letter", metavar="DLQ")
@click.argument("source", metavar="SOURCE")
@max_option(None, "Move at most this many.")
@click.option(
    "--force",
    is_flag=True,
    help="Move even when SOURCE's config does not name DLQ as its dead-letter queue.",
)
@json_option
@queue_options
def redrive_command(
    dead_letter: str, source: str, max_messages: int | None, force: bool, as_json: bool
) -> None:
    """Move visible messages from the dead-letter queue DLQ back to SOURCE.

    Ctrl-C or SIGTERM stops it within a few messages and says how many moved.
    """
    report = Report(
        _redrive_text,
        as_json=as_json,
        moved=0,
        dead_letter=without_credentials(dead_letter),
        source=without_credentials(source),
    )
    try:
        dlq = open_queue(dead_letter, one_of_two=True)
    except QueueNotFound:
        with open_queue(source, one_of_two=True) as target:
            check_missing(dead_letter, target, force=force)
        report.done()
        return
    with (
        dlq,
        open_queue(source, one_of_two=True) as target,
        progress_bar("moved", max_messages) as bar,
    ):
        check_redrive(dlq, target, force)  # once: its probe costs requests
        while max_messages is None or report.fields["moved"] < max_messages:
            checkpoint()
            left = REDRIVE_STEP
            if max_messages is not None:
                left = min(left, max_messages - report.fields["moved"])
            moved = move_back(dlq, target, left)
            report.add("moved", moved)
            bar.update(moved)
            if not moved:
                break
    report.done()


def _redrive_text(f: dict[str, Any]) -> str:
    return f"moved {f['moved']:,} messages from {f['dead_letter']} to {f['source']}"


# ----------------------------------------------------------------------- gc
@click.command(short_help="Remove what crashed clients left behind.")
@click.argument("url", metavar="QUEUE")
@json_option
@queue_options
def gc(url: str, as_json: bool) -> None:
    """Remove what crashed clients left behind; print each name removed
    (--json: one object with the list).

    Safe while producers and consumers run: a send under way is never removed.
    """
    with open_queue(url) as queue, progress_callback("checked") as progress:
        removed = queue.gc(progress=progress)
    if not as_json:
        for name in removed:
            out_line(name)
    Report(
        lambda f: f"removed {len(f['removed'])} leftovers from {f['queue']}",
        as_json=as_json,
        queue=queue.url,
        removed=removed,
    ).done()


# ------------------------------------------------------------------- queues
#: A row of ``vsqs queues``: a queue's counts, or why they could not be read.
Row = tuple[str, QueueStats | VsqsError]


@click.command(short_help="List the queues under a root with counts.")
@click.argument("root")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one per queue.")
@queue_options
def queues(root: str, as_json: bool) -> None:
    """List the queues directly under ROOT (a directory, bucket or prefix) with their counts.

    A queue that cannot be read (a broken config, a format this vsqs does
    not read) has a row with its error ("error" in --json) and the others
    are listed; the exit status is then 1.
    """
    rows: list[Row] = []
    for url in list_queues(root, storage_options=storage_options()):
        row = _queue_row(url)
        rows.append(row)
        if as_json:
            figures = row[1]
            if isinstance(figures, VsqsError):
                out_line(json.dumps({"queue": url, "error": one_line(figures)}))
            else:
                out_line(stats_json(url, figures))
    if not as_json:
        _queues_table(rows)
    failed = sum(isinstance(figures, VsqsError) for _, figures in rows)
    if failed:
        raise click.ClickException(
            f"{failed} of the {len(rows)} queues under {without_credentials(root)} "
            "could not be read (see their rows)"
        )


def _queue_row(url: str) -> Row:
    try:
        with open_queue(url) as queue:
            return url, queue.stats()
    except VsqsError as exc:
        return url, exc


def _queues_table(rows: list[Row]) -> None:
    """The table of ``vsqs queues``: a row's error takes the place of its counts."""
    header = ("QUEUE", "READY", "IN FLIGHT", "DELAYED", "DEAD LETTER", "OLDEST READY")
    counted = [header] + [
        (
            url,
            f"{s.ready:,}",
            f"{s.in_flight:,}",
            f"{s.delayed:,}",
            "-" if s.dead_letter is None else f"{s.dead_letter:,}",
            _age(s.oldest_ready_age),
        )
        for url, s in rows
        if isinstance(s, QueueStats)
    ]
    widths = [max(len(row[i]) for row in counted) for i in range(len(header))]
    widths[0] = max(len(url) for url in [header[0], *(url for url, _ in rows)])
    for url, figures in [(header[0], None), *rows]:
        if isinstance(figures, VsqsError):
            cells = [f"error: {one_line(figures)}"]
        else:
            cells = [c.rjust(w) for c, w in zip(counted.pop(0)[1:], widths[1:], strict=True)]
        out_line("  ".join([url.ljust(widths[0]), *cells]).rstrip())


__all__ = ["gc", "purge", "queues", "redrive_command", "stats"]
