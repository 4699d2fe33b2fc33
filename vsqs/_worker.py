"""The worker loop of :meth:`vsqs.Queue.consume`: pacing, the heartbeat that
keeps a message invisible while its handler runs, settling (delete on
success, release after the retry policy's delay on failure), the logging of
failures, and what an interruption (Ctrl-C, SIGTERM) does. Pacing, failure
logging and settling are shared with :mod:`vsqs.aio` and :mod:`vsqs.spark`;
what every ``consume`` is given is resolved by :mod:`vsqs._options`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from . import _forks
from ._errors import ReceiptExpired, VsqsError
from ._fanout import fan_out
from ._message import Message
from ._names import MsClock
from ._options import ConsumePlan
from .stores._base import Store

log = logging.getLogger("vsqs")

#: The longest a ``consume`` loop waits in one receive before it checks
#: whether to stop (seconds).
POLL = 0.5

#: How many failing message ids a :class:`FailureLog` remembers.
REMEMBERED_FAILURES = 1024

#: The exit status of a worker stopped by SIGTERM (128 + 15, as shells report it).
SIGTERM_EXIT = 128 + signal.SIGTERM


class WorkerQueue(Protocol):
    """What the worker loop uses of a queue (:class:`vsqs.Queue` has it): its
    url and clock, its store's batch width, receive and settle."""

    url: str

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def store(self) -> Store: ...

    def receive(
        self, *, visibility_timeout: float | None = None, wait: float = 0
    ) -> Message | None: ...

    def delete(self, message: Message, /) -> None: ...

    def release(self, message: Message, /, *, delay: float = 0) -> None: ...

    def extend(self, message: Message, visibility_timeout: float, /) -> Message: ...


class FailureLog:
    """Logs handler failures at ERROR: a message's first failure seen by this
    client with its traceback, each later one as one line with its receive
    count (one log per open queue: see :func:`failure_log`).

    Remembers the ids of the last :data:`REMEMBERED_FAILURES` failing
    messages (a success forgets one), so its memory is bounded.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = _forks.lock()

    def failed(self, message: Message, exc: BaseException, delay: float) -> None:
        """Log that ``message``'s handler raised ``exc`` and it is retried after ``delay``."""
        with self._lock:
            again = message.id in self._seen
            self._seen[message.id] = None
            self._seen.move_to_end(message.id)
            if len(self._seen) > REMEMBERED_FAILURES:
                self._seen.popitem(last=False)
        if again:
            log.error(
                "%s: handler failed again on %s (receive %d): %s; retrying in %.3g s",
                self._url,
                message.id,
                message.receive_count,
                repr(exc),
                delay,
            )
        else:
            log.error(
                "%s: handler failed on %s (receive %d); retrying in %.3g s",
                self._url,
                message.id,
                message.receive_count,
                delay,
                exc_info=exc,
            )

    def succeeded(self, message: Message) -> None:
        with self._lock:
            self._seen.pop(message.id, None)


_failure_logs: weakref.WeakKeyDictionary[WorkerQueue, FailureLog] = weakref.WeakKeyDictionary()
_failure_logs_lock = _forks.lock()


def failure_log(queue: WorkerQueue) -> FailureLog:
    """The :class:`FailureLog` of ``queue``, shared by all its ``consume``
    calls (sync and asyncio), so that a worker calling ``consume`` again and
    again still logs each failing message's traceback once."""
    with _failure_logs_lock:
        found = _failure_logs.get(queue)
        if found is None:
            found = _failure_logs[queue] = FailureLog(queue.url)
        return found


class ConsumePacing:
    """When a ``consume`` loop stops, and how long each of its receives waits.

    The idle time is measured on the queue's clock from the start or the last
    success: received messages whose handler failed do not count as activity,
    so a queue holding only failing messages ends an idle ``consume`` too.
    """

    def __init__(self, queue: WorkerQueue, plan: ConsumePlan) -> None:
        self._left = plan.max_messages
        self._idle = plan.idle_timeout
        self._stop = plan.stop
        self._now = MsClock(queue.clock).elapsed
        self._idle_since = self._now()

    def next_wait(self) -> float | None:
        """Seconds the next receive may wait, or ``None`` to stop."""
        if self._left is not None and self._left <= 0:
            return None
        if self._stop is not None and self._stop.is_set():
            return None
        if self._idle is None:
            return POLL
        waited = self._now() - self._idle_since
        return None if waited >= self._idle else min(POLL, self._idle - waited)

    def received(self) -> None:
        if self._left is not None:
            self._left -= 1

    def succeeded(self) -> None:
        """A handler succeeded: the idle clock starts again."""
        self._idle_since = self._now()


def settle(queue: WorkerQueue, message: Message, *, failed: bool, delay: float = 0) -> bool:
    """Delete a handled message, or release it (visible again after ``delay``)
    if its handler ``failed``; return whether it counts as a success. A
    message the handler settled itself is left alone; one whose receipt
    expired meanwhile is redelivered."""
    if message.settled:
        return not failed
    try:
        if failed:
            queue.release(message, delay=delay)
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
    """One background thread per ``consume`` call that keeps the messages being
    handled invisible, extending them every third of the visibility timeout
    (side by side on object stores, as a batch's other requests). A message
    whose extend fails (someone else received it meanwhile) is dropped with a
    warning; the others are kept."""

    def __init__(self, queue: WorkerQueue, visibility_timeout: float) -> None:
        self._queue, self._vt = queue, visibility_timeout
        self._changed = _forks.condition()
        self._messages: list[Message] = []
        self._extended_at = 0.0
        self._extending = False  # a round of extends is under way (outside the lock)
        self._watchers = 0  # watch() calls waiting for that round: the next one waits
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="vsqs-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        if self._vt > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def watch(self, *messages: Message) -> None:
        """Keep ``messages`` invisible from now on (none: stop). Returns once
        no extend of the previous ones is under way: after the round in
        progress, however slow the store (no new round starts meanwhile)."""
        with self._changed:
            self._watchers += 1
            try:
                self._changed.wait_for(lambda: not self._extending)
            finally:
                self._watchers -= 1
            self._messages, self._extended_at = list(messages), time.monotonic()
            self._changed.notify_all()

    def _run(self) -> None:
        interval = self._vt / 3
        while True:
            with self._changed:
                while True:
                    if self._closed:
                        return
                    remaining = self._extended_at + interval - time.monotonic()
                    if self._messages and remaining <= 0 and not self._watchers:
                        break
                    self._changed.wait(remaining if self._messages and remaining > 0 else None)
                watched = self._messages
                self._extended_at, self._extending = time.monotonic(), True
            kept = self._extend([m for m in watched if not m.settled])
            with self._changed:  # watch() waited for this round: nothing replaced them
                self._extending, self._messages = False, kept
                self._changed.notify_all()

    def _extend(self, messages: list[Message]) -> list[Message]:
        """Extend ``messages``; return those still held."""
        outcomes = fan_out(
            lambda m: self._queue.extend(m, self._vt), messages, self._queue.store.batch_width
        )
        kept: list[Message] = []
        for message, outcome in zip(messages, outcomes, strict=True):
            try:
                outcome.result()
            except VsqsError as exc:
                log.warning("%s: heartbeat for %s stopped: %s", self._queue.url, message.id, exc)
            else:
                kept.append(message)
        return kept


class Run:
    """What one ``consume`` call did, and the message it holds."""

    def __init__(self) -> None:
        self.handled = self.succeeded = 0
        self.held: Message | None = None
        self.sigterm = False

    def release_held(self, queue: WorkerQueue) -> int:
        """Release the message in hand at once; return how many were released (0 or 1)."""
        message, self.held = self.held, None
        if message is None or message.settled:
            return 0
        try:
            queue.release(message)
        except VsqsError as exc:  # it comes back at its expiry anyway
            log.warning("%s: could not release %s: %s", queue.url, message.id, exc)
            return 0
        return 1

    def stopped(self, queue: WorkerQueue, exc: BaseException, released: int) -> None:
        """Log the one line of a ``consume`` that ``exc`` (no ``Exception``:
        Ctrl-C, SIGTERM, ``SystemExit``, a cancellation) stopped."""
        log.warning(
            "%s: consume stopped by %s: handled %d (%d succeeded), released %d "
            "in hand (visible again now)",
            queue.url,
            "SIGTERM" if self.sigterm else type(exc).__name__,
            self.handled,
            self.succeeded,
            released,
        )


@contextmanager
def sigterm_exits(run: Run) -> Iterator[None]:
    """While this runs in the main thread, and only if SIGTERM's handler is
    the default one, make SIGTERM raise ``SystemExit(143)`` (so that the
    interrupted ``consume`` cleans up); restore the default handler on the
    way out. A handler installed by the user is left alone."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def on_sigterm(signum: int, frame: object) -> None:
        run.sigterm = True
        raise SystemExit(SIGTERM_EXIT)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def interruptible(queue: WorkerQueue, run: Run) -> Iterator[None]:
    """On any exception out of the loop, release the message in hand at once
    and re-raise; on an interruption (not an ``Exception``: Ctrl-C, SIGTERM,
    ``SystemExit``), also log one line at WARNING saying what was done."""
    with sigterm_exits(run):
        try:
            yield
        except BaseException as exc:
            released = run.release_held(queue)
            if not isinstance(exc, Exception):
                run.stopped(queue, exc, released)
            raise


def consume(queue: WorkerQueue, handler: Callable[[Message], object], plan: ConsumePlan) -> int:
    """The loop of :meth:`vsqs.Queue.consume` (see there); returns how many succeeded."""
    vt = plan.visibility_timeout
    pacing = ConsumePacing(queue, plan)
    failures = failure_log(queue)
    run = Run()
    with interruptible(queue, run), Heartbeat(queue, vt) as heartbeat:
        while (poll := pacing.next_wait()) is not None:
            message = queue.receive(visibility_timeout=vt, wait=poll)
            if message is None:
                continue
            run.held = message
            pacing.received()
            heartbeat.watch(message)
            delay = 0.0
            try:
                handler(message)
            except Exception as exc:
                delay = plan.retry.delay(message.receive_count)
                failures.failed(message, exc, delay)
                failed = True
            else:
                failed = False
            finally:
                heartbeat.watch()
            ok = settle(queue, message, failed=failed, delay=delay)
            run.held = None
            run.handled += 1
            if ok:
                run.succeeded += 1
                failures.succeeded(message)
                pacing.succeeded()
    return run.succeeded
