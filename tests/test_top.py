"""``vsqs top``: the figures of each queue under a root (--once --json),
the rates between two scans (an injected clock), sorting, a queue that
cannot be read, the live view under a pseudo-terminal, and the LIST
requests of a scan on S3 (docs/monitoring.md, "vsqs top")."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import vsqs
import vsqs.metrics
from vsqs.cli._top import Listing, Row, Top, sort_rows
from vsqs.testing import FakeClock

from .support.cli import DEADLINE, exit_status, run, start
from .support.servers import Server


def doc_of(root: Path, *extra: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    done = run("top", str(root), "--once", "--json", *extra)
    return json.loads(done.stdout), done


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Under one root: ``jobs`` (two ready, one in flight, one dead letter
    in ``jobs-dlq``), ``orders`` (one delayed) and ``idle`` (empty)."""
    where = tmp_path / "root"
    with (
        vsqs.Queue(where / "jobs", max_receives=1, dead_letter="jobs-dlq") as jobs,
        vsqs.Queue(where / "orders") as orders,
        vsqs.Queue(where / "idle"),
    ):
        jobs.send(b"poison")
        assert jobs.receive(visibility_timeout=0) is not None  # visible again at once
        assert jobs.receive() is None  # dead-lettered
        jobs.send_batch([b"a", b"b", b"c"])
        assert jobs.receive(visibility_timeout=3600) is not None
        orders.send(b"later", delay=3600)
    return where


def test_once_json_gives_each_queues_numbers(root: Path) -> None:
    doc, done = doc_of(root, "--sort", "queue")
    assert done.returncode == 0, done.stderr
    assert doc["root"] == str(root)
    by_name = {Path(row["queue"]).name: row for row in doc["queues"]}
    assert [Path(row["queue"]).name for row in doc["queues"]] == sorted(by_name)
    ages = {name: by_name[name].pop("oldest_age") for name in by_name}
    nothing = {"in_rate": None, "out_rate": None, "error": None}  # one scan: no rates
    assert by_name == {
        "jobs": {"queue": str(root / "jobs"), "ready": 2, "in_flight": 1, "delayed": 0}
        | {"dead_letters": 1}
        | nothing,
        "jobs-dlq": {"queue": str(root / "jobs-dlq"), "ready": 1, "in_flight": 0, "delayed": 0}
        | {"dead_letters": None}
        | nothing,
        "orders": {"queue": str(root / "orders"), "ready": 0, "in_flight": 0, "delayed": 1}
        | {"dead_letters": None}
        | nothing,
        "idle": {"queue": str(root / "idle"), "ready": 0, "in_flight": 0, "delayed": 0}
        | {"dead_letters": None}
        | nothing,
    }
    assert ages["orders"] is None and ages["idle"] is None  # nothing ready
    assert ages["jobs"] >= 0 and ages["jobs-dlq"] >= 0
    alone, _ = doc_of(root / "jobs")  # a queue stands for itself
    assert [row["queue"] for row in alone["queues"]] == [str(root / "jobs")]


def test_a_queue_that_cannot_be_read_has_an_error_row(root: Path) -> None:
    (root / "broken").mkdir()
    (root / "broken" / "vsqs.json").write_text("{")
    doc, done = doc_of(root)
    assert done.returncode == 1
    assert done.stderr == (
        f"vsqs: error: 1 of the 5 queues under {root} could not be read (see their rows)\n"
    )
    [broken] = [row for row in doc["queues"] if row["queue"] == str(root / "broken")]
    assert broken.keys() == {"queue", "error"} and "unreadable queue config" in broken["error"]
    assert doc["queues"][-1] == broken  # errors last
    ready = [row["ready"] for row in doc["queues"][:-1]]  # the others, by ready (the default)
    assert ready == [2, 1, 0, 0]
    table = run("top", str(root), "--once", env={"COLUMNS": "200"})
    assert table.returncode == 1
    assert "error: " in table.stdout and "unreadable queue config" in table.stdout
    assert "jobs-dlq" in table.stdout and "DEAD LETTERS" in table.stdout


def test_without_a_terminal_it_needs_once_or_json(root: Path) -> None:
    done = run("top", str(root))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("vsqs top: error: stdout is not a terminal that can redraw")
    assert len(done.stderr.splitlines()) == 1


def test_a_root_without_queues_is_an_error(tmp_path: Path) -> None:
    done = run("top", str(tmp_path), "--once")
    assert done.returncode == 1 and done.stderr == f"vsqs: error: no queue at or under {tmp_path}\n"


# ----------------------------------------------------------- scans in process
@pytest.fixture
def fake() -> FakeClock:
    """One clock for the queues (unix seconds) and for the scans (their gaps)."""
    return FakeClock()


def scanned(top: Top) -> dict[str, dict[str, Any]]:
    """A scan's rows as ``--json`` gives them, by queue url."""
    return {row.queue: row.as_dict() for row in top.scan()}


def opener(clock: FakeClock) -> Callable[[str], vsqs.Queue]:
    return lambda url: vsqs.Queue(url, create=False, clock=clock)


@pytest.fixture
def watched(tmp_path: Path, fake: FakeClock) -> Iterator[tuple[Top, vsqs.Queue, vsqs.Queue]]:
    """A queue with a dead-letter queue (each in the table), both on ``fake``."""
    with ExitStack() as stack:
        jobs = stack.enter_context(
            vsqs.Queue(tmp_path / "jobs", clock=fake, max_receives=1, dead_letter="dlq")
        )
        dlq = stack.enter_context(vsqs.Queue(tmp_path / "dlq", clock=fake))
        top = Top([jobs.url, dlq.url], opener(fake), clock=fake)
        stack.callback(top.close)
        yield top, jobs, dlq


def test_rates_are_messages_in_and_out_per_second_between_two_scans(
    watched: tuple[Top, vsqs.Queue, vsqs.Queue], fake: FakeClock
) -> None:
    top, jobs, dlq = watched
    jobs.send_batch([b"old"] * 4)
    first = scanned(top)
    assert first[jobs.url]["ready"] == 4
    assert (first[jobs.url]["in_rate"], first[jobs.url]["out_rate"]) == (None, None)
    jobs.send_batch([b"new"] * 6)  # in: 6
    for message in jobs.receive_batch(2):  # out: 2 (deleted)
        jobs.delete(message)
    assert jobs.receive(visibility_timeout=0) is not None  # the third, visible again at once
    held = jobs.receive(visibility_timeout=60)  # dead-letters the third (out), holds the fourth
    assert held is not None and held.body == b"old"  # in flight: neither in nor out
    assert dlq.stats().ready == 1
    fake.advance(2.0)
    second = scanned(top)
    row = second[jobs.url]
    assert (row["ready"], row["in_flight"]) == (6, 1)
    assert (row["in_rate"], row["out_rate"]) == (6 / 2.0, 3 / 2.0)
    assert row["dead_letters"] == 1 == second[dlq.url]["ready"]
    assert (second[dlq.url]["in_rate"], second[dlq.url]["out_rate"]) == (1 / 2.0, 0)
    fake.advance(4.0)  # nothing moved
    third = scanned(top)
    assert (third[jobs.url]["in_rate"], third[jobs.url]["out_rate"]) == (0, 0)


def test_ages_and_delays_follow_the_queues_clock(tmp_path: Path, fake: FakeClock) -> None:
    with vsqs.Queue(tmp_path / "q", clock=fake) as queue:
        queue.send(b"first")
        queue.send(b"later", delay=30)
        fake.advance(12.5)
        top = Top([queue.url], opener(fake), clock=fake)
        try:
            [row] = scanned(top).values()
            assert (row["ready"], row["delayed"], row["oldest_age"]) == (1, 1, 12.5)
            fake.advance(30)  # the delay is over: ready, and the first still the oldest
            [row] = scanned(top).values()
            assert (row["ready"], row["delayed"], row["oldest_age"]) == (2, 0, 42.5)
            assert (row["in_rate"], row["out_rate"]) == (0, 0)  # the end of a delay moves none
            assert row["dead_letters"] is None  # no dead-letter queue
        finally:
            top.close()


def test_a_dead_letter_queue_outside_the_table_is_listed_for_its_depth(
    tmp_path: Path, fake: FakeClock
) -> None:
    """0 while it does not exist yet (it is created at its first dead letter)."""
    with vsqs.Queue(tmp_path / "jobs", clock=fake, max_receives=1, dead_letter="dlq") as jobs:
        top = Top([jobs.url], opener(fake), clock=fake)
        try:
            [row] = scanned(top).values()
            assert row["dead_letters"] == 0 and not (tmp_path / "dlq").exists()
            jobs.send(b"poison")
            assert jobs.receive(visibility_timeout=0) is not None
            assert jobs.receive() is None  # dead-lettered
            [row] = scanned(top).values()
            assert (row["ready"], row["dead_letters"]) == (0, 1)
        finally:
            top.close()


def test_a_queue_that_fails_its_scan_gets_an_error_row_and_the_others_go_on(
    tmp_path: Path, fake: FakeClock
) -> None:
    """A queue removed, or not there yet (opened again at each scan, and
    shown once it can be)."""
    later = str(tmp_path / "later")
    with vsqs.Queue(tmp_path / "doomed") as doomed, vsqs.Queue(tmp_path / "live") as live:
        top = Top([doomed.url, live.url, later], opener(fake), clock=fake)
        try:
            *_, missing = scanned(top).values()
            assert missing.keys() == {"queue", "error"}
            shutil.rmtree(tmp_path / "doomed")
            live.send(b"y")
            with vsqs.Queue(later, clock=fake) as arrived:
                arrived.send(b"z")
            fake.advance(1)
            gone, alive, opened = scanned(top).values()
        finally:
            top.close()
    assert gone.keys() == {"queue", "error"} and doomed.url in gone["error"]
    assert (alive["ready"], alive["in_rate"], alive["error"]) == (1, 1.0, None)
    assert (opened["ready"], opened["in_rate"], opened["error"]) == (1, None, None)


def listed(ready: int) -> Listing:
    return Listing(ready, 0, 0, None, frozenset())


def test_sorting_puts_the_largest_first_then_the_unknown_then_errors() -> None:
    table = [
        Row("b", listed(1)),
        Row("broken", None, error="bad"),
        Row("a", listed(1), (2.0, 0.0)),
        Row("c", listed(5), (0.5, 0.0)),
        Row("aa", None, error="worse"),
    ]

    def order(column: str) -> list[str]:
        return [row.queue for row in sort_rows(table, column)]

    assert order("ready") == ["c", "a", "b", "aa", "broken"]  # ties by name
    assert order("in_rate") == ["a", "c", "b", "aa", "broken"]
    assert order("queue") == ["a", "b", "c", "aa", "broken"]


# --------------------------------------------------------------- the live view
class Terminal:
    """A pseudo-terminal of 40 rows and 160 columns: what a command writes
    to it, read until something shows."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        self.seen = b""

    def start(self, *args: str, term: str, stdin: int | None = None) -> subprocess.Popen[bytes]:
        """``vsqs ARGS`` on this terminal (stdout and stderr; stdin too unless
        given), with ``TERM=term``."""
        tty = {"stdin": self.slave if stdin is None else stdin, "stdout": self.slave}
        # The size is the terminal's: COLUMNS and LINES (set under pytest-xdist) would win.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return start(*args, **tty, stderr=self.slave, env={**env, "TERM": term})

    def read_until(self, shown: Callable[[bytes], bool], proc: subprocess.Popen[bytes]) -> None:
        """Read until ``shown(all read so far)`` holds (a generous deadline)."""
        give_up = time.monotonic() + DEADLINE
        while not shown(self.seen):
            assert time.monotonic() < give_up, f"not shown within {DEADLINE} s: {self.seen!r}"
            assert proc.poll() is None, f"exited ({proc.returncode}): {self.seen!r}"
            if self._readable(0.1):
                self.seen += os.read(self.master, 65536)

    def drain(self) -> None:
        """What is left to read once the command has exited."""
        while self._readable(0):
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: no writer left
                return
            if not data:
                return
            self.seen += data

    def _readable(self, timeout: float) -> bool:
        """Whether the terminal has output to read within ``timeout`` seconds
        (``poll``: a worker of a long run may hold descriptors past
        ``select``'s limit of 1024)."""
        poller = select.poll()
        poller.register(self.master, select.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def term() -> Iterator[Terminal]:
    terminal = Terminal()
    yield terminal
    terminal.close()


@pytest.mark.parametrize(
    ("end", "status"),
    [(b"q", 0), (b"\x03", 0), (signal.SIGTERM, 143)],
    ids=["q", "ctrl-c", "sigterm"],
)
def test_the_live_view_draws_the_table_and_quits_on_a_key(
    root: Path, term: Terminal, end: bytes | signal.Signals, status: int
) -> None:
    """Under a terminal: the table on the alternate screen, redrawn; q or
    Ctrl-C (a key there) ends it with exit 0, SIGTERM with 143, and the
    terminal is as it was."""
    before = termios.tcgetattr(term.slave)
    proc = term.start("top", str(root), "--interval", "0.1", term="xterm-256color")
    term.read_until(lambda seen: b"jobs-dlq" in seen and b"DEAD LETTERS" in seen, proc)
    during = termios.tcgetattr(term.slave)
    assert not during[3] & (termios.ECHO | termios.ICANON | termios.ISIG)
    term.read_until(lambda seen: seen.count(b"sorted by ready") >= 2, proc)  # redrawn
    if isinstance(end, bytes):
        os.write(term.master, end)
    else:
        proc.send_signal(end)
    assert proc.wait(timeout=DEADLINE) == status
    term.drain()
    assert termios.tcgetattr(term.slave) == before
    leave = b"\x1b[?1049l"  # the alternate screen, left after it was entered
    entered, left = term.seen.rindex(b"\x1b[?1049h"), term.seen.rindex(leave)
    assert entered < left and term.seen[left + len(leave) :].strip() == b""
    assert b"Traceback" not in term.seen


def test_without_a_terminal_on_stdin_ctrl_c_is_a_signal(root: Path, term: Terminal) -> None:
    """No key can be read: the view runs until a signal, as every command."""
    proc = term.start("top", str(root), "--interval", "0.1", term="xterm", stdin=subprocess.DEVNULL)
    term.read_until(lambda seen: seen.count(b"sorted by ready") >= 2, proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=DEADLINE) == exit_status(signal.SIGINT)
    term.drain()
    assert term.seen.rstrip().endswith(b"\x1b[?1049l")  # the screen restored


def test_a_terminal_that_cannot_redraw_needs_once_or_json(root: Path, term: Terminal) -> None:
    """TERM=dumb: rich would draw nothing until the end; top says so."""
    proc = term.start("top", str(root), term="dumb")
    assert proc.wait(timeout=DEADLINE) == 2
    term.drain()
    said = term.seen.decode()
    assert said.startswith("vsqs top: error: stdout is not a terminal that can redraw")
    assert "TERM=dumb" in said and len(said.splitlines()) == 1


def test_json_lines_give_a_scan_a_line_until_a_signal(root: Path) -> None:
    proc = start("top", str(root), "--json", "--interval", "0.1", stdout=subprocess.PIPE)
    assert proc.stdout is not None
    first, second = (json.loads(proc.stdout.readline()) for _ in range(2))
    jobs = str(root / "jobs")
    [rates_first] = [(r["in_rate"], r["out_rate"]) for r in first["queues"] if r["queue"] == jobs]
    [rates_second] = [(r["in_rate"], r["out_rate"]) for r in second["queues"] if r["queue"] == jobs]
    assert rates_first == (None, None) and rates_second == (0, 0)  # nothing moved between
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=DEADLINE)
    assert proc.returncode == exit_status(signal.SIGINT)


# ----------------------------------------------------------------------- S3
@pytest.mark.parametrize("dlq_shown", [False, True])
def test_one_scan_lists_each_queue_once_on_s3(s3_server: Server, dlq_shown: bool) -> None:
    """One LIST request per queue per scan (a page holds 1 000 names),
    dead-letter queue included, whether it is in the table or not; the
    queues are opened at the first scan only."""
    root = f"{s3_server.root}/{uuid.uuid4().hex[:8]}"
    options = s3_server.storage_options
    with ExitStack() as stack:
        a = stack.enter_context(
            vsqs.Queue(f"{root}/a", storage_options=options, max_receives=3, dead_letter="a-dlq")
        )
        b = stack.enter_context(vsqs.Queue(f"{root}/b", storage_options=options))
        dlq = stack.enter_context(vsqs.Queue(f"{root}/a-dlq", storage_options=options))
        a.send_batch([b"x"] * 3)
        shown = [a.url, b.url, dlq.url] if dlq_shown else [a.url, b.url]
        top = Top(shown, lambda url: vsqs.Queue(url, storage_options=options, create=False))
        stack.callback(top.close)
        top.scan()  # opens each queue, once
        registry = CollectorRegistry()
        vsqs.metrics.enable_prometheus(registry)
        try:
            first = scanned(top)[a.url]
        finally:
            vsqs.metrics.disable()
    assert (first["ready"], first["dead_letters"]) == (3, 0)
    made: Counter[tuple[str, str]] = Counter()  # (queue, operation): requests
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == "vsqs_store_requests_total" and sample.value:
                made[sample.labels["queue"], sample.labels["operation"]] += int(sample.value)
    assert made == {(a.url, "list"): 1, (b.url, "list"): 1, (dlq.url, "list"): 1}


def test_the_other_commands_do_not_import_rich() -> None:
    """rich is imported when top draws: every other command starts without it."""
    probe = "import sys, vsqs.cli; print(sorted(m for m in sys.modules if m.startswith('rich')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_once_json_over_a_bucket_prefix_with_storage_options(s3_server: Server) -> None:
    """ROOT is a prefix of a bucket; -o gives the store its options."""
    root = f"{s3_server.root}/{uuid.uuid4().hex[:8]}"
    options = s3_server.storage_options
    with vsqs.Queue(f"{root}/jobs", storage_options=options) as jobs:
        jobs.send_batch([b"x", b"y"])
        url = jobs.url
    endpoint = options["client_kwargs"]["endpoint_url"]
    given = ["-o", f"key={options['key']}", "-o", f"secret={options['secret']}"]
    given += ["-o", f"client_kwargs.endpoint_url={endpoint}"]
    done = run("top", root, "--once", "--json", *given)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["queues"]
    assert (row["queue"], row["ready"], row["in_flight"]) == (url, 2, 0)
