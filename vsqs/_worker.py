"""The parts of the worker loop of :meth:`vsqs.Queue.consume` (which runs
in :mod:`vsqs._crew`): pacing, the heartbeat that keeps messages invisible
while their handlers run, settling (delete on success, release after the
retry policy's delay on failure), the logging of failures, and what an
interruption (Ctrl-C, SIGTERM) does. Pacing, failure
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from . import _forks
from ._config import QueueConfig
from ._errors import QueueNotFound, ReceiptExpired, VsqsError
from ._fanout import fan_out
from ._message import ExtendResult, Message
from ._names import CONFIG_NAME, MsClock
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
    url, clock and config, its store, receive and settle."""

    url: str

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def config(self) -> QueueConfig: ...

    @property
    def store(self) -> Store: ...

    def receive_batch(
        self, max_messages: int = 10, *, visibility_timeout: float | None = None, wait: float = 0
    ) -> list[Message]: ...

    def delete(self, message: Message, /) -> None: ...

    def release(self, message: Message, /, *, delay: float = 0) -> None: ...

    def extend_batch(
        self, messages: Iterable[Message], visibility_timeout: float, /
    ) -> ExtendResult: ...


class FailureLog:
    """Logs handler failures at ERROR: a message's first failure seen by this
    client with its traceback, each later one as one line with its receive
    count (one log per open queue: see :func:`failure_log`).

    Remembers the ids of the last :data:`REMEMBERED_FAILURES` failing
    messages (a success forgets one), so its memory is bounded.
    """

    def __init__(self, queue: WorkerQueue) -> None:
        self._url = queue.url
        # The queue's settings at each failure (they may change: vsqs config);
        # weakly, since the log lives as long as the queue does.
        self._queue = weakref.ref(queue)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = _forks.lock()

    def failed(self, message: Message, exc: BaseException, delay: float) -> None:
        """Log that ``message``'s handler raised ``exc`` and it is visible
        again after ``delay``: retried, or, after the last receive the
        queue's ``max_receives`` allows, dead-lettered at its next receive."""
        with self._lock:
            again = message.id in self._seen
            self._seen[message.id] = None
            self._seen.move_to_end(message.id)
            if len(self._seen) > REMEMBERED_FAILURES:
                self._seen.popitem(last=False)
        then = f"retrying in {delay:.3g} s"
        queue = self._queue()
        limit = None if queue is None else queue.config.max_receives
        if limit is not None and message.receive_count >= limit:
            then = (
                f"not retried: that was its last receive (max_receives {limit}), "
                f"it is dead-lettered when next received, in {delay:.3g} s"
            )
        if again:
            log.error(
                "%s: handler failed again on %s (receive %d): %s; %s",
                self._url,
                message.id,
                message.receive_count,
                repr(exc),
                then,
            )
        else:
            log.error(
                "%s: handler failed on %s (receive %d); %s",
                self._url,
                message.id,
                message.receive_count,
                then,
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
            found = _failure_logs[queue] = FailureLog(queue)
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

    def room(self, most: int) -> int:
        """How many of ``most`` messages the next receive may take."""
        return most if self._left is None else min(most, self._left)

    def received(self, count: int = 1) -> None:
        """``count`` messages were received (negative: given back unhandled)."""
        if self._left is not None:
            self._left -= count

    def succeeded(self) -> None:
        """A handler succeeded: the idle clock starts again."""
        self._idle_since = self._now()


def settle(queue: WorkerQueue, message: Message, *, failed: bool, delay: float = 0) -> bool:
    """Delete a handled message, or release it (visible again after ``delay``)
    if its handler ``failed``; return whether it counts as a success. A
    message the handler settled itself is left alone; one whose receipt
    expired meanwhile is redelivered. If the receipt is gone because the
    queue is (its directory or prefix was removed), raise
    :class:`QueueNotFound`: nothing will be redelivered."""
    if message.settled:
        return not failed
    try:
        if failed:
            queue.release(message, delay=delay)
        else:
            queue.delete(message)
        return not failed
    except ReceiptExpired:
        if queue_gone(queue.store):
            raise QueueNotFound(
                f"{queue.url} is gone: it was removed while {message.id} was being handled "
                "(nothing is redelivered)"
            ) from None
        log.warning(
            "%s: %s became visible again before its handler finished; it will be redelivered",
            queue.url,
            message.id,
        )
        return False


def queue_gone(store: Store) -> bool:
    """Whether the queue of ``store`` is gone: its config is (its directory
    or prefix was removed). A look that fails otherwise says it is there."""
    try:
        store.read(CONFIG_NAME)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


class Heartbeat:
    """One background thread that keeps the messages being handled (of one
    queue) invisible: every third of the visibility timeout, one
    :meth:`vsqs.Queue.extend_batch` of them all (side by side on object
    stores). A message whose receipt turned out stale (received by someone
    else meanwhile, or settled by this client) is dropped, with a warning if
    it was not settled; one whose extend failed on storage
    (:class:`StorageError`) is kept and tried again at the next round, with a
    warning. If the queue refuses the whole batch (closed), all are dropped."""

    def __init__(self, queue: WorkerQueue, visibility_timeout: float) -> None:
        self._queue, self._vt = queue, visibility_timeout
        self._changed = _forks.condition()
        self._messages: list[Message] = []
        self._extended_at = 0.0
        self._extending = False  # a round of extends is under way (outside the lock)
        self._watchers = 0  # calls waiting for that round: the next one waits
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
        """Keep ``messages`` invisible from now on, instead of those before
        (none: stop). Returns once no extend of the previous ones is under
        way: after the round in progress, however slow the store (no new
        round starts meanwhile)."""
        self._after_round(lambda _: list(messages), restart=True)

    def add(self, *messages: Message) -> None:
        """Keep ``messages`` invisible too (extended with the others: within a
        third of the visibility timeout from now). Never waits for a round."""
        with self._changed:
            if not self._messages:
                self._extended_at = time.monotonic()
            self._messages = [*self._messages, *messages]
            self._changed.notify_all()

    def drop(self, *messages: Message) -> None:
        """Stop keeping ``messages`` invisible. Returns as :meth:`watch` does."""
        self._after_round(lambda held: without(held, messages), restart=False)

    def forget(self, *messages: Message) -> None:
        """Stop keeping ``messages`` invisible, at once: unlike :meth:`drop`,
        without waiting for a round under way. For messages this client has
        settled (or tried to): a round's extend of one either ran before the
        settle (which then takes the new receipt) or finds it stale, so a
        deleted or released message never comes back hidden."""
        with self._changed:
            self._messages = without(self._messages, messages)

    def _after_round(self, change: Callable[[list[Message]], list[Message]], restart: bool) -> None:
        with self._changed:
            self._watchers += 1
            try:
                self._changed.wait_for(lambda: not self._extending)
            finally:
                self._watchers -= 1
            self._messages = change(self._messages)
            if restart:
                self._extended_at = time.monotonic()
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
                watched = [m for m in self._messages if not m.settled]
                self._extended_at, self._extending = time.monotonic(), True
            lost = self._extend(watched)
            with self._changed:  # only add() and forget() changed them meanwhile
                self._extending = False
                self._messages = [m for m in without(self._messages, lost) if not m.settled]
                self._changed.notify_all()

    def _extend(self, watched: list[Message]) -> list[Message]:
        """Extend ``watched`` in one batch; return those to drop (logged)."""
        if not watched:
            return []
        receipts = [m.receipt for m in watched]  # before: the batch updates them in place
        try:
            result = self._queue.extend_batch(watched, self._vt)
        except VsqsError as exc:  # the queue refused them all (it was closed)
            url = self._queue.url
            log.warning("%s: heartbeat stopped for %d messages: %s", url, len(watched), exc)
            return watched
        lost: list[Message] = []
        stale = set(result.stale)
        for message, receipt in zip(watched, receipts, strict=True):
            failed = result.failed.get(receipt or "")
            if failed is not None:
                log.warning(
                    "%s: extending %s failed (tried again in %.3g s): %s",
                    self._queue.url,
                    message.id,
                    self._vt / 3,
                    failed,
                )
            elif receipt in stale:
                lost.append(message)
                if not message.settled:
                    log.warning(
                        "%s: heartbeat for %s stopped: its receipt is stale",
                        self._queue.url,
                        message.id,
                    )
        return lost


def without(messages: Sequence[Message], gone: Sequence[Message]) -> list[Message]:
    """``messages`` but those of ``gone`` (the same objects)."""
    ids = {id(message) for message in gone}
    return [message for message in messages if id(message) not in ids]


def attempt(
    queue: WorkerQueue, call: Callable[[Message], object], messages: list[Message], failure: str
) -> list[Message]:
    """Call ``call`` on each of ``messages``, side by side on object stores;
    log ``failure`` (a format taking the id) with the error of each that
    raised a :class:`VsqsError`, and return those."""
    outcomes = fan_out(call, messages, queue.store.batch_width)
    failed: list[Message] = []
    for message, outcome in zip(messages, outcomes, strict=True):
        try:
            outcome.result()
        except VsqsError as exc:
            log.warning("%s: " + failure + ": %s", queue.url, message.id, exc)
            failed.append(message)
    return failed


class Run:
    """What one ``consume`` call did, and the messages it holds (thread-safe)."""

    def __init__(self) -> None:
        self.handled = self.succeeded = 0
        self.sigterm = False
        self._held: list[Message] = []
        self._lock = _forks.lock()

    def hold(self, *messages: Message) -> None:
        with self._lock:
            self._held.extend(messages)

    def drop(self, *messages: Message) -> None:
        """``messages`` are no longer in hand (settled or given back)."""
        with self._lock:
            self._held = without(self._held, messages)

    def settled(self, message: Message, ok: bool) -> None:
        """``message`` was handled (and settled): it counts, as a success if ``ok``."""
        with self._lock:
            self._held = without(self._held, [message])
            self.handled += 1
            self.succeeded += ok

    def release_held(self, queue: WorkerQueue, exc: BaseException | None = None) -> int:
        """Release the messages in hand at once; return how many were released.
        None where ``exc`` says the queue is gone: they went with it."""
        with self._lock:
            held, self._held = [m for m in self._held if not m.settled], []
        if isinstance(exc, QueueNotFound) and queue_gone(queue.store):
            return 0
        # one that fails comes back at its expiry anyway
        return len(held) - len(attempt(queue, queue.release, held, "could not release %s"))

    def stopped(self, queue: WorkerQueue, exc: BaseException, released: int) -> None:
        """Log the one line of a ``consume`` that ``exc`` (no ``Exception``:
        Ctrl-C, SIGTERM, ``SystemExit``, a cancellation) stopped."""
        log.warning(
            "%s: consume stopped by %s: handled %d (%d succeeded), %s",
            queue.url,
            "SIGTERM" if self.sigterm else type(exc).__name__,
            self.handled,
            self.succeeded,
            f"released {released} in hand (visible again now)" if released else "released nothing",
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
    """On any exception out of the loop, release the messages in hand at once
    (none if the queue is gone: they went with it) and re-raise; on an
    interruption (not an ``Exception``: Ctrl-C, SIGTERM, ``SystemExit``),
    also log one line at WARNING saying what was done."""
    with sigterm_exits(run):
        try:
            yield
        except BaseException as exc:
            released = run.release_held(queue, exc)
            if not isinstance(exc, Exception):
                run.stopped(queue, exc, released)
            raise
