"""SIGTERM for :meth:`vsqs.aio.Queue.consume`, asyncio's counterpart of
:func:`vsqs._worker.sigterm_exits`.

While a ``consume`` runs on the main thread's event loop, and only if
SIGTERM had its default handler when the first of them started, SIGTERM
cancels every ``consume`` of the loop. Each releases the message it holds
and logs its line; once the last is done, ``SystemExit(143)`` is raised in
the loop, outside every task, which ends it (``asyncio.run`` then cancels
what is left and exits with that status). The default handler is put
back when the last ``consume`` ends, unless another was installed
meanwhile (``signal.signal``, or the loop's ``add_signal_handler``): that
one is left alone.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ._worker import SIGTERM_EXIT, Run


class SigtermCancels:
    """The ``consume`` calls that SIGTERM cancels, on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.runs: dict[asyncio.Task[Any], Run] = {}
        self.fired = False
        self.handler = self._on_signal  # one object: what signal.getsignal returns

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        # Between two bytecodes of the loop's own thread: hand over to the loop.
        self.loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self.fired:  # the tasks are releasing already: let them
            return
        self.fired = True
        for task, run in self.runs.items():
            run.sigterm = True
            task.cancel()

    @staticmethod
    def exit() -> None:
        """A loop callback: out of the loop with SIGTERM's exit status."""
        raise SystemExit(SIGTERM_EXIT)


_current: SigtermCancels | None = None


@contextmanager
def sigterm_cancels(run: Run) -> Iterator[None]:
    """While this lasts, SIGTERM cancels the task running it and marks
    ``run`` (see the module docstring), except on another thread or where
    SIGTERM has a handler of the user's."""
    global _current
    task, loop = asyncio.current_task(), asyncio.get_running_loop()
    if _current is not None and _current.loop is not loop:  # its loop ended without them
        _forget(_current)
    if _current is None and task is not None and _default_sigterm():
        _current = SigtermCancels(loop)
        signal.signal(signal.SIGTERM, _current.handler)
    cancels = _current
    if cancels is None or task is None:
        yield
        return
    cancels.runs[task] = run
    try:
        yield
    finally:
        del cancels.runs[task]
        if not cancels.runs:
            _forget(cancels)
            if cancels.fired:  # before the tasks' own callbacks: ahead of asyncio.run's end
                cancels.loop.call_soon(cancels.exit)


def _forget(cancels: SigtermCancels) -> None:
    """Put the default handler back, unless another replaced ours meanwhile."""
    global _current
    _current = None
    if signal.getsignal(signal.SIGTERM) is cancels.handler:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _default_sigterm() -> bool:
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    )
