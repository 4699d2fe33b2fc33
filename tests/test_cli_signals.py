"""Ctrl-C and SIGTERM through the real console script: each command stops
with one line saying how far it got, exactly, no traceback, and exit status
130 or 143 (issue 16: ``send --file`` printed fewer ids than it sent,
``pump`` reported one batch fewer, ``demo`` printed five tracebacks and left
its directory behind)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import struct
import termios
import time
from pathlib import Path
from typing import IO

import pytest

import vsqs

from .support.cli import (
    DEADLINE,
    backlog,
    exit_status,
    finish,
    interrupted_midway,
    ready,
    start,
    until,
)

SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])


def ids_in(url: str) -> list[str]:
    with vsqs.Queue(url, create=False) as queue:
        return [m.id for m in queue.peek(1_000_000)]


def unread(pipe: IO[bytes] | None) -> int:
    """Bytes written into a pipe that its reader has not read yet."""
    assert pipe is not None
    return int(struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0" * 4))[0])


@SIGNALS
def test_send_from_an_open_pipe_sends_every_line_it_read_and_prints_each_id(
    tmp_path: Path, signum: int
) -> None:
    """It printed fewer ids than it sent; then it dropped the lines of a batch
    it had read and not sent (they cannot be read again from a pipe)."""
    q = str(tmp_path / "q")
    ids_file = tmp_path / "ids"
    with ids_file.open("wb") as ids:
        proc = start("send", q, "--file", "-", "--batch", "1000", stdin=-1, stdout=ids, stderr=-1)
        assert proc.stdin is not None
        proc.stdin.write(b"line\n" * 2_500 + b"half a li")  # the pipe stays open
        proc.stdin.flush()
        ready(proc)
        until(lambda: unread(proc.stdin) == 0, "the input read", proc)
        os.kill(proc.pid, signum)
        status, _, err = finish(proc)
    printed = ids_file.read_text().split()
    assert status == exit_status(signum)
    assert sorted(printed) == sorted(ids_in(q)) and len(printed) == 2_500
    name = signal.Signals(signum).name
    assert err == f"vsqs: interrupted by {name}: sent 2,500 messages to {q}\n"


def test_send_from_a_slow_pipe_sends_each_line_as_it_comes(tmp_path: Path) -> None:
    """``tail -f log | vsqs send q --file -`` sent nothing until 100 lines had come."""
    q = str(tmp_path / "q")
    proc = start("send", q, "--file", "-", stdin=-1, stdout=-1, stderr=-1)
    assert proc.stdin is not None and proc.stdout is not None
    printed = []
    for i in range(3):
        proc.stdin.write(f"line {i}\n".encode())
        proc.stdin.flush()
        until(lambda i=i: backlog(q) == i + 1, f"line {i} in the queue", proc)
        printed.append(proc.stdout.readline().decode().strip())  # its id, once sent
    proc.stdin.close()
    assert proc.stderr is not None
    assert (proc.wait(DEADLINE), proc.stdout.read(), proc.stderr.read()) == (0, b"", b"")
    with vsqs.Queue(q) as queue:
        assert [(m.id, m.body) for m in queue.peek()] == [
            (printed[i], f"line {i}".encode()) for i in range(3)
        ]


@SIGNALS
@pytest.mark.parametrize("as_json", [False, True])
def test_pump_reports_exactly_what_it_sent(tmp_path: Path, signum: int, as_json: bool) -> None:
    q = str(tmp_path / "q")
    proc = start(
        "pump", q, "-n", "0", "--batch", "100", *["--json"] * as_json, stdout=-1, stderr=-1
    )
    ready(proc)
    until(lambda: backlog(q) > 0, "a first message", proc)
    os.kill(proc.pid, signum)
    status, out, err = finish(proc)
    assert status == exit_status(signum)
    sent = len(ids_in(q))
    name = signal.Signals(signum).name
    (line,) = err.splitlines()
    assert line.startswith(f"vsqs: interrupted by {name}: pump: sent {sent:,} messages as ")
    if as_json:
        report = json.loads(out)
        assert report["sent"] == sent and report["interrupted"] == name
    else:
        assert out == ""


@SIGNALS
def test_an_interrupted_purge_says_how_many_it_deleted(tmp_path: Path, signum: int) -> None:
    q = str(tmp_path / "q")
    sent, done = interrupted_midway(signum, q, "purge", q, "--yes")
    assert done.returncode == exit_status(signum) and done.stdout == ""
    size = len(sent)
    purged = size - backlog(q)
    name = signal.Signals(signum).name
    line = f"vsqs: interrupted by {name}: purged {purged:,} of {size:,} messages from {q}\n"
    assert done.stderr == line


@SIGNALS
def test_an_interrupted_redrive_says_how_many_it_moved_and_holds_none(
    tmp_path: Path, signum: int
) -> None:
    q, dlq = str(tmp_path / "jobs"), str(tmp_path / "jobs-dlq")
    vsqs.Queue(q, max_receives=5, dead_letter="jobs-dlq").close()
    sent, done = interrupted_midway(signum, dlq, "redrive", dlq, q, empty=(q,))
    assert done.returncode == exit_status(signum) and done.stdout == ""
    with vsqs.Queue(dlq) as queue:
        left = queue.stats()
    assert left.in_flight == 0, "messages stayed held in the dead-letter queue"
    moved = len(sent) - left.ready
    assert moved == backlog(q)
    name = signal.Signals(signum).name
    assert (
        done.stderr == f"vsqs: interrupted by {name}: moved {moved:,} messages from {dlq} to {q}\n"
    )


@SIGNALS
def test_an_interrupted_long_poll_says_it_received_nothing(tmp_path: Path, signum: int) -> None:
    q = str(tmp_path / "q")
    vsqs.Queue(q).close()
    proc = start("receive", q, "--wait", "600", stdout=-1, stderr=-1)
    ready(proc)
    os.kill(proc.pid, signum)
    status, out, err = finish(proc)
    assert status == exit_status(signum) and out == ""
    name = signal.Signals(signum).name
    assert err == f"vsqs: interrupted by {name}: printed 0 messages from {q}\n"


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "whole_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-at-the-terminal", "sigterm-to-the-demo"],
)
def test_an_interrupted_demo_stops_its_processes_reports_and_removes_its_directory(
    tmp_path: Path, signum: int, whole_group: bool
) -> None:
    """A Ctrl-C at a terminal reaches the whole process group; ``kill``
    reaches the demo alone. Either way: one line, no traceback, no process
    left, no directory left."""
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = start(
        "demo",
        "-n",
        "10000000",
        "-c",
        "2",
        stdout=-1,
        stderr=-1,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    ready(proc)

    def sending() -> bool:  # (multiprocessing keeps files of its own in TMPDIR too)
        return any(backlog(str(d / "jobs")) for d in temp.glob("vsqs-demo-*"))

    until(sending, "messages", proc)
    (os.killpg if whole_group else os.kill)(proc.pid, signum)
    status, out, err = finish(proc)
    assert status == exit_status(signum) and out == "", err
    (line,) = err.splitlines()
    name = signal.Signals(signum).name
    assert line.startswith(f"vsqs: interrupted by {name}: queue {temp}/vsqs-demo-")
    assert "acked by 2 consumers" in line and "duplicates 0, lost 0" in line
    assert list(temp.iterdir()) == []
    give_up = time.monotonic() + DEADLINE
    while not group_gone(proc.pid):  # its processes (and multiprocessing's tracker)
        assert time.monotonic() < give_up, "a process of the demo was left running"
        time.sleep(0.05)


def test_a_signal_while_send_file_reads_keeps_every_line_read() -> None:
    """A signal that came just after a read was acted on before the lines
    read were kept: 50 lines read, 0 sent. Now only the wait for input is
    interruptible; the signal is acted on at the next wait."""
    from vsqs.cli._interrupt import Interrupted, handling
    from vsqs.cli._lines import LineBatches

    read, write = os.pipe()
    os.write(write, b"a\nb\nc")

    class SignalledAfterRead(io.BufferedReader):
        def read1(self, size: int = -1) -> bytes:
            data = super().read1(size)
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode
            return data

    with SignalledAfterRead(io.FileIO(read)) as stream, handling():
        lines = LineBatches(stream, 100)
        with pytest.raises(Interrupted):
            lines.next()
        assert lines.held == [b"a\n", b"b\n"]  # and "c" is not a whole line yet
    os.close(write)


def test_a_signal_a_command_got_is_not_the_next_commands() -> None:
    """One process runs several commands (tests; the simulation runs the move
    loop after CLI tests): a SIGTERM one got stayed pending after it ended,
    and the next one's first checkpoint raised ``Interrupted`` at once."""
    import os
    import signal

    from vsqs.cli import _interrupt as _cli_interrupt

    with _cli_interrupt.handling():
        os.kill(os.getpid(), signal.SIGTERM)
        assert _cli_interrupt.pending() == signal.SIGTERM
    assert _cli_interrupt.pending() is None
    assert not _cli_interrupt.STOP.is_set()
    _cli_interrupt.checkpoint()  # raises nothing
