"""Ctrl-C and SIGTERM in the ``vsqs`` command: stop at a safe point, never mid-commit.

While :func:`handling` is in force, SIGINT and SIGTERM are *deferred*: the
handler notes the signal and sets :data:`STOP` (which long polls watch), and
the command stops at its next :func:`checkpoint`, between two commits, so
that what it reports is exactly what it did. Where a command waits on
something outside it (reading stdin, writing stdout, sleeping), it marks the
wait :func:`interruptible` and a signal stops it at once. A second signal
stops the command at once wherever it is (then the last batch may be
committed and not reported).

The command ends by raising :class:`Interrupted`, whose ``exit_code`` is
128 + the signal number (130 for SIGINT, 143 for SIGTERM), as shells report
a process killed by it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from .._message import Message
from .._move import release
from .._queue import Queue

SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: Set by the first signal: long polls (``receive_batch(stop=STOP)``) give up.
STOP = threading.Event()


class Interrupted(BaseException):
    """The command was stopped by a signal (a ``BaseException``, like
    ``KeyboardInterrupt``: no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    pending: int | None = None
    waiting = 0  # depth of interruptible() sections


_state = _State()


def _handler(signum: int, _frame: FrameType | None) -> None:
    again = _state.pending is not None
    if not again:
        _state.pending = signum
    STOP.set()
    if again or _state.waiting:
        raise Interrupted(signum)


@contextmanager
def handling() -> Iterator[None]:
    """Defer SIGINT and SIGTERM to checkpoints while this lasts (main thread only)."""
    _state.pending, _state.waiting = None, 0
    STOP.clear()
    previous = {signum: signal.signal(signum, _handler) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        # The command is over: a signal it got is not the next caller's (one
        # process runs several commands: tests, and the library's move loop).
        _state.pending, _state.waiting = None, 0
        STOP.clear()


def pending() -> int | None:
    """The signal that came and that the command has not acted on yet, if one did."""
    return _state.pending


def checkpoint() -> None:
    """A safe point: raise :class:`Interrupted` if a signal came."""
    if _state.pending is not None:
        raise Interrupted(_state.pending)


@contextmanager
def interruptible() -> Iterator[None]:
    """A wait on the outside world that a signal ends at once (and one that came before)."""
    checkpoint()
    _state.waiting += 1
    try:
        yield
    finally:
        _state.waiting -= 1


@contextmanager
def children_immune() -> Iterator[None]:
    """Processes started meanwhile ignore SIGINT and SIGTERM (a Ctrl-C at the
    terminal reaches the whole process group); this process stops them itself.
    A signal that comes meanwhile is kept and handled after (call with no
    other thread running: the kernel would hand it to a thread that takes it)."""
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in SIGNALS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def take(queue: Queue, count: int, **receive: Any) -> list[Message]:
    """``receive_batch`` that a signal ends (within a second, in a long poll):
    what it received then is released and :class:`Interrupted` raised."""
    batch = queue.receive_batch(count, stop=STOP, **receive)
    if pending() is not None:
        release(queue, batch)
        checkpoint()
    return batch


__all__ = [
    "STOP",
    "Interrupted",
    "checkpoint",
    "children_immune",
    "handling",
    "interruptible",
    "pending",
    "release",
    "take",
]
