"""``vsqs top ROOT``: a refreshing table of every queue under a root (docs/monitoring.md).

A scan lists each queue once (and each dead-letter queue that is not in the
table once): :class:`Top`. The rates come from two successive scans by
message id (:func:`rows`, a pure function): *in*, the messages listed now
that the previous scan did not list; *out*, those it listed that are gone
now; each per second between the two scans. They are estimates: a message
sent and deleted between two scans counts in neither.
"""

from __future__ import annotations

import json
import os
import select
import sys
import termios
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from .. import _inspect as inspect
from .. import _names as names
from .._errors import QueueNotFound, VsqsError, storage_errors
from .._queue import Queue
from ..stores._location import without_credentials
from ._common import one_line, open_queue, queue_options
from ._interrupt import interruptible
from ._metrics import resolve
from ._report import out_line

if TYPE_CHECKING:  # rich is imported when top draws, not by every command
    from rich.console import Console
    from rich.table import Table

#: The columns of a row, as ``--sort`` and ``--json`` name them.
COLUMNS = (
    "queue",
    "ready",
    "in_flight",
    "delayed",
    "oldest_age",
    "in_rate",
    "out_rate",
    "dead_letters",
)
#: The keys that quit the live view: q, Q and Ctrl-C (a key there, not a signal).
QUIT_KEYS = frozenset(b"qQ\x03")


@dataclass(frozen=True)
class Listing:
    """One listing of one queue: its counts by state, the age of its oldest
    ready message, and the ids of its messages (sends under way excluded)."""

    ready: int
    in_flight: int
    delayed: int
    oldest_age: float | None
    ids: frozenset[str]

    @property
    def depth(self) -> int:
        """Messages in every state."""
        return self.ready + self.in_flight + self.delayed


#: The listing of a dead-letter queue that does not exist yet.
NOTHING = Listing(0, 0, 0, None, frozenset())


def listing(queue: Queue) -> Listing:
    """One listing of ``queue`` (one LIST request per 1 000 names on an
    object store), at the queue's clock; nothing is repaired."""
    store = queue.store
    now_ms = store.ms_clock(queue.clock).now_ms()
    counts = inspect.Tally(now_ms)
    ids: set[str] = set()
    with storage_errors(f"listing {store.url}"):
        for entry in inspect.settled(store, now_ms):
            counts.add(entry)
            if entry.is_message:  # each message of a part, as its bundle's core and place
                message_id = entry.parsed.id
                lineage = names.lineage(message_id)
                ids.update(f"{lineage}#{p}" for p in names.members_of(message_id))
    return Listing(
        counts.ready,
        counts.in_flight,
        counts.delayed,
        counts.seconds_ago(counts.oldest_sent_ms),
        frozenset(ids),
    )


@dataclass(frozen=True)
class Scan:
    """The listings of one scan, by queue url (an error where one failed),
    taken at ``at`` (seconds of a monotonic clock)."""

    at: float
    listings: Mapping[str, Listing | VsqsError]


@dataclass(frozen=True)
class Row:
    """One queue's line of the table: its listing (``None`` with an
    ``error``: why it could not be read); ``rates``: messages in and out per
    second, ``None`` without a previous scan of the queue; ``dead_letters``:
    the depth of its dead-letter queue, ``None`` without one."""

    queue: str
    figures: Listing | None
    rates: tuple[float, float] | None = None
    dead_letters: int | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The row by the names of :data:`COLUMNS` (and ``error``, ``None``),
        the numbers only; or the queue and its error alone."""
        if self.figures is None:
            return {"queue": self.queue, "error": self.error}
        in_rate, out_rate = (None, None) if self.rates is None else self.rates
        found = self.figures
        return {
            "queue": self.queue,
            "ready": found.ready,
            "in_flight": found.in_flight,
            "delayed": found.delayed,
            "oldest_age": _rounded(found.oldest_age),
            "in_rate": _rounded(in_rate),
            "out_rate": _rounded(out_rate),
            "dead_letters": self.dead_letters,
            "error": None,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def rows(
    scan: Scan,
    previous: Scan | None,
    shown: Sequence[str],
    dead_letter_of: Mapping[str, str | None],
) -> list[Row]:
    """The rows of the ``shown`` queues of ``scan``: rates against
    ``previous`` (by message id, per second between the two scans), and each
    queue's dead-letter depth from the listing of ``dead_letter_of[url]``."""
    table = []
    for url in shown:
        found = scan.listings[url]
        if isinstance(found, VsqsError):
            table.append(Row(url, None, error=one_line(found)))
            continue
        rates = None
        before = None if previous is None else previous.listings.get(url)
        elapsed = 0.0 if previous is None else scan.at - previous.at
        if isinstance(before, Listing) and elapsed > 0:
            came, went = len(found.ids - before.ids), len(before.ids - found.ids)
            rates = (came / elapsed, went / elapsed)
        target = dead_letter_of.get(url)
        dead = None if target is None else scan.listings.get(target)
        table.append(Row(url, found, rates, dead.depth if isinstance(dead, Listing) else None))
    return table


def sort_rows(table: Sequence[Row], column: str) -> list[Row]:
    """``table`` by ``column``: by name, or a figure largest first (rows
    without it after those with it); rows with an error last; ties by name."""
    by_name = sorted(table, key=lambda r: r.queue)
    if column == "queue":
        return sorted(by_name, key=lambda r: r.error is not None)

    def key(row: Row) -> tuple[int, float]:
        value = row.as_dict().get(column)
        if row.error is not None:
            return (2, 0.0)
        return (1, 0.0) if value is None else (0, -float(value))

    return sorted(by_name, key=key)


class Top:
    """The queues at ``urls``, opened with ``opener`` and listed once each
    per :meth:`scan` (with each dead-letter queue that is not one of them);
    ``clock``: the monotonic seconds the rates are measured with."""

    def __init__(
        self,
        urls: Sequence[str],
        opener: Callable[[str], Queue],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.urls = list(urls)
        self._opener = opener
        self._clock = clock
        self._open: dict[str, Queue] = {}
        #: Each queue's dead-letter queue (settings are fixed), once it opened.
        self.dead_letter_of: dict[str, str | None] = {}
        self._previous: Scan | None = None

    def scan(self) -> list[Row]:
        """List every queue once; a queue that cannot be opened or listed
        gets an error row (and is tried again at the next scan), and the
        others go on."""
        listings: dict[str, Listing | VsqsError] = {}
        for url in self.urls:
            try:
                listings[url] = listing(self._queue(url))
            except VsqsError as exc:
                listings[url] = exc
        for target in set(self.dead_letter_of.values()) - {None, *self.urls}:
            assert target is not None
            try:
                listings[target] = listing(self._queue(target))
            except QueueNotFound:  # created at its first dead letter
                listings[target] = NOTHING
            except VsqsError as exc:
                listings[target] = exc
        scan = Scan(self._clock(), listings)
        table = rows(scan, self._previous, self.urls, self.dead_letter_of)
        self._previous = scan
        return table

    def _queue(self, url: str) -> Queue:
        """The queue at ``url``, opened at its first scan (once it opens)."""
        if url not in self._open:
            queue = self._open[url] = self._opener(url)
            if url in self.urls:
                self.dead_letter_of[url] = queue.dead_letter_url
        return self._open[url]

    def close(self) -> None:
        for queue in self._open.values():
            queue.close()
        self._open.clear()


# ------------------------------------------------------------------ showing
def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render(table: Sequence[Row], title: str, *, boxed: bool = True) -> Table:
    """The rows as a rich table: a queue by its name under the root, an error
    in place of its figures; ``boxed``: with borders (else plain columns, as
    for a file or a pipe)."""
    from rich.box import HEAVY_HEAD
    from rich.table import Table
    from rich.text import Text

    grid = Table(title=title, title_justify="left", box=HEAVY_HEAD if boxed else None)
    grid.add_column("QUEUE", overflow="fold")
    for header in ("READY", "IN FLIGHT", "DELAYED", "OLDEST", "IN/s", "OUT/s", "DEAD LETTERS"):
        grid.add_column(header, justify="right", no_wrap=True)
    for row in table:
        name = row.queue.rstrip("/").rpartition("/")[2]
        shown = row.as_dict()
        if row.error is not None:
            grid.add_row(Text(f"{name}\nerror: {row.error}", style="red"))
            continue
        age = "-" if shown["oldest_age"] is None else f"{shown['oldest_age']:,.1f} s"
        rates = [_per_second(shown[key]) for key in ("in_rate", "out_rate")]
        counts = [_count(shown[key]) for key in ("ready", "in_flight", "delayed")]
        grid.add_row(name, *counts, age, *rates, _count(row.dead_letters))
    return grid


def document(table: Sequence[Row], root: str) -> str:
    """One scan as one JSON object: the root and a row per queue."""
    return json.dumps({"root": root, "queues": [row.as_dict() for row in table]})


class Keys:
    """The keys typed on a terminal on stdin, read without echo or line
    editing and with signals off (Ctrl-C is a key); its settings come back
    when :meth:`reading` ends. Without a terminal on stdin, no key comes."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @classmethod
    @contextmanager
    def reading(cls) -> Iterator[Keys]:
        if not sys.stdin.isatty():
            yield cls(None)
            return
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
        mode = termios.tcgetattr(fd)
        mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG)
        mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
        termios.tcsetattr(fd, termios.TCSAFLUSH, mode)
        try:
            yield cls(fd)
        finally:
            termios.tcsetattr(fd, termios.TCSAFLUSH, saved)

    def quit_within(self, seconds: float) -> bool:
        """Wait ``seconds`` for a quit key (a signal ends the wait at once);
        whether one came (or the terminal hung up)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            with interruptible():
                if self.fd is None:
                    time.sleep(left)
                    return False
                ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                typed = os.read(self.fd, 64)
                if not typed or QUIT_KEYS.intersection(typed):
                    return True
        return False


def _console() -> Console:
    """rich's console on stdout."""
    from rich.console import Console

    return Console()


def _title(root: str, interval: float, sort: str) -> str:
    clock = datetime.now().astimezone().strftime("%H:%M:%S")
    return f"vsqs top {root}  {clock}  every {interval:g} s  sorted by {sort}  (q quits)"


def _view(show: Callable[[], Table], interval: float) -> None:
    """The live view: redrawn after each scan, on the terminal's alternate
    screen, until a quit key; the terminal is restored however it ends."""
    from rich.live import Live

    with (
        Keys.reading() as keys,
        Live(
            show(),
            console=_console(),
            screen=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live,
    ):
        while not keys.quit_within(interval):
            live.update(show(), refresh=True)


EVERY = "Seconds between two scans (default 2)."
SORT = "The column to sort by (default ready): a queue by name, a figure largest first."
AS_JSON = "One JSON object per scan, the numbers only (with --once: one, then exit)."


@click.command(short_help="A live table of the queues under a root.")
@click.argument("root")
@click.option("--interval", type=click.FloatRange(0.1), default=2.0, metavar="SECONDS", help=EVERY)
@click.option("--sort", type=click.Choice(COLUMNS), default="ready", help=SORT)
@click.option("--once", is_flag=True, help="Scan once, print the table (or --json) and exit.")
@click.option("--json", "as_json", is_flag=True, help=AS_JSON)
@queue_options
def top(root: str, interval: float, sort: str, once: bool, as_json: bool) -> None:
    """Show every queue under ROOT (a directory, bucket or prefix; or one
    queue) in a table redrawn every --interval seconds: ready, in flight,
    delayed, the age of the oldest ready message, the messages in and out
    per second since the previous scan (estimates, by message id), and the
    depth of each dead-letter queue.

    The queues are found at start. A queue that cannot be read has a row
    with its error and the others go on (with --once the exit status is
    then 1). q or Ctrl-C quits (exit 0) and restores the terminal. Without
    a terminal on stdout that can redraw (TERM=dumb cannot), give --once
    or --json.
    """
    if not (once or as_json or _console().is_interactive):
        raise click.UsageError(
            "stdout is not a terminal that can redraw (a file, a pipe, TERM=dumb): "
            "give --once, or --json for JSON lines"
        )
    shown = without_credentials(root)
    with ExitStack() as stack:
        scanner = Top(resolve([root]), open_queue)
        stack.callback(scanner.close)

        def scanned() -> list[Row]:
            return sort_rows(scanner.scan(), sort)

        if once:
            table = scanned()
            if as_json:
                out_line(document(table, shown))
            else:
                console = _console()
                title = f"vsqs top {shown}  sorted by {sort}"
                console.print(render(table, title, boxed=console.is_terminal))
            _fail_on_errors(table, shown)
        elif as_json:
            _stream(scanned, shown, interval)
        else:
            _view(lambda: render(scanned(), _title(shown, interval, sort)), interval)


def _stream(scanned: Callable[[], list[Row]], root: str, interval: float) -> None:
    """A JSON line per scan until a signal stops it."""
    while True:
        out_line(document(scanned(), root))
        with interruptible():
            time.sleep(interval)


def _fail_on_errors(table: Sequence[Row], root: str) -> None:
    failed = sum(row.error is not None for row in table)
    if failed:
        raise click.ClickException(
            f"{failed} of the {len(table)} queues under {root} could not be read (see their rows)"
        )


__all__ = ["top"]
