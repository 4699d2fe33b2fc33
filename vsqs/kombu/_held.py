"""The vsqs messages a kombu channel holds, by delivery tag, kept invisible.

A held message is one the channel received and has neither acknowledged,
rejected nor restored: prefetched, or running in a worker. A thread extends
every held message by the visibility timeout every third of it, so a task
that runs longer than the timeout is not delivered twice; it stops when the
channel closes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .. import _forks
from .._errors import ReceiptExpired, VsqsError
from .._message import Message
from .._queue import Queue

log = logging.getLogger("vsqs.kombu")

#: What to do with a held message when it is let go (delete or release).
Settle = Callable[[Queue, Message], None]


def delete(queue: Queue, message: Message) -> None:
    """Acknowledge: the message is gone for good."""
    queue.delete(message)


def release(queue: Queue, message: Message) -> None:
    """Give the message back: visible again at once, its receive count kept."""
    queue.release(message)


class Held:
    """Messages held by one channel; every method is thread-safe (kombu acks
    from the pool's result thread)."""

    def __init__(self, visibility_timeout: float) -> None:
        self.visibility_timeout = visibility_timeout
        self._lock = _forks.lock()
        self._messages: dict[str, tuple[Queue, Message]] = {}
        self._stop = _forks.event()
        self._thread: threading.Thread | None = None

    def add(self, tag: str, queue: Queue, message: Message) -> None:
        """Hold ``message`` under ``tag``; the first one held starts the thread
        that extends them (none once closed)."""
        with self._lock:
            self._messages[tag] = (queue, message)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="vsqs-kombu-extend", daemon=True
                )
                self._thread.start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)

    def settle(self, tag: str, how: Settle) -> bool:
        """Let go of the message held under ``tag`` (``how``: delete or release).

        False if none is held under it. A receipt that expired meanwhile (the
        message may run again elsewhere: at least once) is logged, not raised.
        """
        with self._lock:
            held = self._messages.pop(tag, None)
            if held is None:
                return False
            try:
                how(*held)
            except ReceiptExpired as exc:
                log.warning(
                    "vsqs.kombu: a held message was lost before its %s: %s", how.__name__, exc
                )
            return True

    def extend_all(self) -> None:
        """Extend every held message by the visibility timeout from now; forget
        those whose receipt expired (logged)."""
        with self._lock:
            for tag, (queue, message) in list(self._messages.items()):
                try:
                    queue.extend(message, self.visibility_timeout)
                except ReceiptExpired as exc:
                    log.warning("vsqs.kombu: a held message expired before its extension: %s", exc)
                    del self._messages[tag]
                except (VsqsError, OSError) as exc:  # kept: retried at the next round
                    log.warning("vsqs.kombu: extending a held message failed: %s", exc)

    def _run(self) -> None:
        while not self._stop.wait(self.visibility_timeout / 3):
            self.extend_all()

    def close(self) -> None:
        """Stop extending and release what is still held."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        for tag in list(self._messages):
            try:
                self.settle(tag, release)
            except (VsqsError, OSError) as exc:  # it comes back after its timeout
                log.warning("vsqs.kombu: releasing a held message failed: %s", exc)
