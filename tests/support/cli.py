"""Helpers of the ``vsqs`` console script tests: run it for real in subprocesses.

Waits poll for an observable event (a queue's contents, the signal mask of
the process) with a deadline generous enough for a loaded machine; nothing
waits for a fixed time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vsqs

VSQS = shutil.which("vsqs", path=str(Path(sys.executable).parent)) or shutil.which("vsqs")
#: Seconds a poll waits for an event before the test fails.
DEADLINE = 120.0


def run(
    *args: str,
    input: bytes | str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    assert VSQS is not None, "the vsqs console script is not installed"
    data = input.encode() if isinstance(input, str) else input
    done = subprocess.run(
        [VSQS, *args],
        input=data if data is not None else b"",
        capture_output=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=DEADLINE,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode()
    )


def ok(*args: str, **kwargs: Any) -> str:
    """Run a command that must succeed; its stdout."""
    done = run(*args, **kwargs)
    assert done.returncode == 0, done.stderr
    return done.stdout


def said(*args: str, **kwargs: Any) -> str:
    """Run a command that must succeed and print nothing on stdout; its stderr."""
    done = run(*args, **kwargs)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", done.stdout
    return done.stderr


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


#: Commands :func:`start` started, for :func:`kill_leftovers`.
_started: list[subprocess.Popen[bytes]] = []


def start(*args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """Start the console script (in a session of its own, as a shell job is)."""
    assert VSQS is not None, "the vsqs console script is not installed"
    popen.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.Popen([VSQS, *args], start_new_session=True, **popen)
    _started.append(proc)
    return proc


def kill_leftovers() -> None:
    """SIGKILL whatever is left of every command :func:`start` started (its
    whole session: a ``demo`` and its workers, a ``pump -n 0``), so a test
    that failed half way leaves no process running."""
    while _started:
        proc = _started.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def until(condition: Callable[[], object], what: str, proc: subprocess.Popen[bytes]) -> None:
    """Poll ``condition`` until it holds; fail if ``proc`` exits first or the deadline passes."""
    give_up = time.monotonic() + DEADLINE
    while not condition():
        assert proc.poll() is None, f"the command exited ({proc.returncode}) before {what}"
        assert time.monotonic() < give_up, f"no {what} within {DEADLINE} s"
        time.sleep(0.005)


def handles_signals(pid: int) -> bool:
    """Whether the process catches SIGTERM (the console script does from its start)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:"))[7:], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def ready(proc: subprocess.Popen[bytes]) -> None:
    """Wait until the command has taken over SIGINT and SIGTERM."""
    until(lambda: handles_signals(proc.pid), "signal handlers", proc)


def backlog(url: str) -> int:
    """Messages in a queue, in every state (0 if it does not exist yet)."""
    try:
        with vsqs.Queue(url, create=False) as queue:
            s = queue.stats()
    except vsqs.QueueNotFound:
        return 0
    return s.ready + s.in_flight + s.delayed + s.writing


def stop_midway(
    proc: subprocess.Popen[bytes], began: Callable[[], bool], left: Callable[[], int]
) -> bool:
    """Freeze ``proc`` (SIGSTOP) once its work ``began``; whether it is frozen
    with work ``left`` (if not, it finished first: the caller tries more work)."""
    ready(proc)
    until(began, "progress", proc)
    os.kill(proc.pid, signal.SIGSTOP)
    if proc.poll() is None and left() > 0:
        return True
    os.kill(proc.pid, signal.SIGCONT)
    proc.wait(DEADLINE)
    return False


def interrupted_midway(
    signum: int, source: str, *argv: str, empty: tuple[str, ...] = ()
) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Fill ``source`` with messages ``job 0``, ``job 1``... (``empty`` emptied
    too), run the command ``argv`` that takes them away, and send it
    ``signum`` while it is caught half way (with more messages each time it
    finishes first). The bodies sent, and how the command ended."""
    for size in (2_000, 20_000, 200_000):
        sent = [f"job {i}" for i in range(size)]
        for url in (source, *empty):
            with vsqs.Queue(url) as queue:
                queue.purge()
        with vsqs.Queue(source) as queue:
            queue.send_batch(sent, bundle=False)  # an object each: a command takes a while
        proc = start(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if stop_midway(proc, lambda n=size: backlog(source) < n, lambda: backlog(source)):
            os.kill(proc.pid, signum)
            os.kill(proc.pid, signal.SIGCONT)
            status, out, err = finish(proc)
            return sent, subprocess.CompletedProcess(argv, status, out, err)
    raise AssertionError(f"every {argv[0]} finished before it could be stopped")


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    """Wait for ``proc``; its exit status, stdout and stderr (when piped)."""
    out, err = proc.communicate(timeout=DEADLINE)
    return proc.returncode, (out or b"").decode(), (err or b"").decode()


def exit_status(signum: int) -> int:
    """The exit status of a command stopped by ``signum``, as shells report it."""
    return 128 + signum


__all__ = [
    "DEADLINE",
    "kill_leftovers",
    "VSQS",
    "backlog",
    "exit_status",
    "finish",
    "handles_signals",
    "interrupted_midway",
    "json_lines",
    "ok",
    "ready",
    "run",
    "said",
    "start",
    "stop_midway",
    "until",
]
