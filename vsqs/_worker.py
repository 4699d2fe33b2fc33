"""The worker loop of :meth:`vsqs.Queue.consume`: pacing, the heartbeat that
keeps a message invisible while its handler runs, and settling (delete on
success, release on failure). The pacing and settling are shared with
:mod:`vsqs.aio`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._config import seconds
from ._errors import ReceiptExpired, VsqsError
from ._message import Message

if TYPE_CHECKING:
    import asyncio

    from ._queue import Queue

log = logging.getLogger("vsqs")

#: The longest a ``consume`` loop waits in one receive before it checks
#: whether to stop (seconds).
POLL = 0.5


def visibility_seconds(queue: Queue, visibility_timeout: float | None) -> float:
    """The visibility timeout a call uses: its own (validated), or the queue's default."""
    if visibility_timeout is None:
        return queue.config.visibility_timeout
    return seconds(visibility_timeout, "visibility_timeout")


class ConsumePacing:
    """When a ``consume`` loop stops, and how long each of its receives waits."""

    def __init__(
        self,
        max_messages: int | None,
        idle_timeout: float | None,
        stop: threading.Event | asyncio.Event | None,
    ) -> None:
        self._left = max_messages
        self._idle = None if idle_timeout is None else seconds(idle_timeout, "idle_timeout")
        self._stop = stop
        self._idle_since = time.monotonic()

    def next_wait(self) -> float | None:
        """Seconds the next receive may wait, or ``None`` to stop."""
        if self._left is not None and self._left <= 0:
            return None
        if self._stop is not None and self._stop.is_set():
            return None
        if self._idle is None:
            return POLL
        waited = time.monotonic() - self._idle_since
        return None if waited >= self._idle else min(POLL, self._idle - waited)

    def received(self) -> None:
        if self._left is not None:
            self._left -= 1

    def finished(self) -> None:
        """A message was handled: the idle clock starts again."""
        self._idle_since = time.monotonic()


def settle(queue: Queue, message: Message, *, failed: bool) -> bool:
    """Delete a handled message, or release it if its handler ``failed``;
    return whether it counts as a success. A message the handler settled
    itself is left alone; one whose receipt expired meanwhile is redelivered."""
    if message.settled:
        return not failed
    try:
        if failed:
            queue.release(message)
        else:
            queue.delete(message)
        return not failed
    except ReceiptExpired:
        log.warning(
            "%s: %s became visible again before its handler finished; it will be redelivered",
            queue.url,
            message.id,
        )
        return False


class Heartbeat:
    """One background thread per ``consume`` call that keeps the message being
    handled invisible, extending it every third of the visibility timeout."""

    def __init__(self, queue: Queue, visibility_timeout: float) -> None:
        self._queue, self._vt = queue, visibility_timeout
        self._changed = threading.Condition()
        self._message: Message | None = None
        self._extended_at = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="vsqs-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        if self._vt > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join()

    def watch(self, message: Message | None) -> None:
        """Keep ``message`` invisible from now on (``None``: stop)."""
        with self._changed:
            self._message, self._extended_at = message, time.monotonic()
            self._changed.notify()

    def _run(self) -> None:
        interval = self._vt / 3
        with self._changed:
            while not self._closed:
                message = self._message
                if message is None:
                    self._changed.wait()
                    continue
                remaining = self._extended_at + interval - time.monotonic()
                if remaining > 0:
                    self._changed.wait(remaining)
                    continue
                self._extended_at = time.monotonic()
                if message.settled:
                    continue
                try:
                    self._queue.extend(message, self._vt)
                except VsqsError as exc:
                    log.warning(
                        "%s: heartbeat for %s stopped: %s", self._queue.url, message.id, exc
                    )
                    self._message = None


def consume(
    queue: Queue,
    handler: Callable[[Message], object],
    *,
    visibility_timeout: float | None,
    max_messages: int | None,
    idle_timeout: float | None,
    stop: threading.Event | None,
) -> int:
    """The loop of :meth:`vsqs.Queue.consume` (see there); returns how many succeeded."""
    vt = visibility_seconds(queue, visibility_timeout)
    pacing = ConsumePacing(max_messages, idle_timeout, stop)
    succeeded = 0
    with Heartbeat(queue, vt) as heartbeat:
        while (poll := pacing.next_wait()) is not None:
            message = queue.receive(visibility_timeout=vt, wait=poll)
            if message is None:
                continue
            pacing.received()
            heartbeat.watch(message)
            try:
                handler(message)
            except Exception:
                log.exception("%s: handler failed on %s; releasing it", queue.url, message.id)
                failed = True
            else:
                failed = False
            finally:
                heartbeat.watch(None)
            succeeded += settle(queue, message, failed=failed)
            pacing.finished()
    return succeeded
