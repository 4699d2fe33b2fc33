"""The vsqs messages a kombu channel holds, by delivery tag, kept invisible.

A held message is one the channel received and has neither acknowledged,
rejected nor restored: prefetched, or running in a worker. Each queue's
held messages are kept invisible by a :class:`~vsqs._worker.Heartbeat` (the
one of ``consume``): one ``extend_batch`` of them all every third of the
visibility timeout, outside the lock that acks take, so a task that runs
longer than the timeout is not delivered twice and an ack never waits for a
round of extends. It stops when the channel closes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack

from .. import _forks
from .._errors import ReceiptExpired, VsqsError
from .._message import Message
from .._queue import Queue
from .._worker import Heartbeat

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
        self._heartbeats: dict[Queue, Heartbeat] = {}
        self._running = ExitStack()  # the heartbeats started, stopped by close()
        self._closed = False

    def add(self, tag: str, queue: Queue, message: Message) -> None:
        """Hold ``message`` under ``tag``; the first one held of a queue
        starts the heartbeat of that queue (none once closed)."""
        with self._lock:
            self._messages[tag] = (queue, message)
            heartbeat = self._heartbeats.get(queue)
            if heartbeat is None:
                heartbeat = self._heartbeats[queue] = Heartbeat(queue, self.visibility_timeout)
                if not self._closed:
                    self._running.enter_context(heartbeat)
            heartbeat.add(message)  # never waits for a round

    def settle(self, tag: str, how: Settle) -> bool:
        """Let go of the message held under ``tag`` (``how``: delete or release).

        False if none is held under it. A receipt that expired meanwhile (the
        message may run again elsewhere: at least once) is logged, not raised.
        Never waits for a round of extends, only for the extend of this
        message if one is under way (then it settles the new receipt).
        """
        with self._lock:
            held = self._messages.pop(tag, None)
            if held is None:
                return False
            heartbeat = self._heartbeats[held[0]]
        try:
            how(*held)
        except ReceiptExpired as exc:
            log.warning("vsqs.kombu: a held message was lost before its %s: %s", how.__name__, exc)
        finally:
            heartbeat.forget(held[1])
        return True

    def close(self) -> None:
        """Stop extending and release what is still held."""
        with self._lock:
            self._closed = True
        self._running.close()  # each waits for its round under way
        for tag in list(self._messages):
            try:
                self.settle(tag, release)
            except (VsqsError, OSError) as exc:  # it comes back after its timeout
                log.warning("vsqs.kombu: releasing a held message failed: %s", exc)
