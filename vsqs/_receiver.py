"""The receive engine: a long poll over the claims of one client.

A :class:`Receiver` serves one client of one queue. Between listings it keeps
:class:`~vsqs._candidates.Candidates`, its view of the queue
(:mod:`vsqs._view`), and claims the oldest of them by renaming
(:mod:`vsqs._claims`, docs/format.md); it waits for changes, expiries or the
next look at a polled store in between. It works on any
:class:`~vsqs.stores._base.Store` and needs no :class:`vsqs.Queue`.
"""

from __future__ import annotations

import random
import threading
import time

from . import _candidates as candidates
from . import _forks
from . import _meter as meter
from . import _names as names
from ._candidates import Candidates
from ._claims import Claims, Exhausted
from ._errors import QueueClosed, storage_errors
from ._plans import Claim
from .stores._base import Store

#: A receiver that lost every race of a receive sleeps up to this (seconds)
#: before looking again; one woken by changes that brought it nothing, at
#: most this long before waiting again. (Not a retry delay of ``consume``,
#: nor the pass-over of an unreadable message.)
CONTENTION_PAUSE = 0.001
#: On polled stores (object stores: no change feed, every look is a LIST
#: request), a waiting receiver lists every POLL_INTERVAL seconds; once it
#: has received nothing for IDLE_AFTER seconds, every max_poll_interval
#: (default DEFAULT_MAX_POLL_INTERVAL), back to POLL_INTERVAL as soon as it
#: receives something. An idle consumer then makes 1 800 LISTs an hour, not 18 000,
#: and wakes up to max_poll_interval late for the first message after a lull.
POLL_INTERVAL = 0.2
IDLE_AFTER = 10.0
DEFAULT_MAX_POLL_INTERVAL = 2.0
#: A closing receiver wakes the long polls under way again this often (seconds)
#: until they have ended: one between its check and its wait misses a wake.
CLOSE_WAKES = 0.01


class Receiver(Claims):
    """Claims messages of one queue for one client (every thread of it).

    One lock guards the candidates. It is held across a listing and across
    the renames of a claim (or, where renames cost requests, of a batch of
    claims made side by side), so that the threads of one client claim one
    batch at a time and never race each other for a name; body reads and
    dead-lettering happen outside it. Other clients are another matter: every
    claim is a rename that only one of them wins.
    """

    def __init__(
        self,
        store: Store,
        clock: names.MsClock,
        new_grace_ms: int,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
    ) -> None:
        super().__init__(store, clock, new_grace_ms)
        self._max_poll_interval = max_poll_interval
        self._closed = False  # set once by close(), never cleared: a flag, not an event
        #: Guards ``_receiving``, the receives under way (a plain lock: it is
        #: taken twice per receive); ``_ended`` is set as one ends once closed.
        self._calls = _forks.lock()
        self._receiving = 0
        self._ended = _forks.event()
        _forks.after_fork(self)
        self._received_at = clock.elapsed()  # when a receive last got something

    # ----------------------------------------------------------- receive
    def receive(
        self,
        max_messages: int,
        vt_ms: int,
        wait: float,
        *,
        stop: threading.Event | None = None,
        max_receives: int | None = None,
        exhausted: Exhausted | None = None,
        max_size: int | None = None,
        target: str | None = None,
    ) -> list[Claim]:
        """Claim up to ``max_messages`` visible messages, oldest first, waiting
        up to ``wait`` seconds for one (a long poll).

        A message received more than ``max_receives`` times is handed to
        ``exhausted`` (its held name and body) instead. A message of more than
        ``max_size`` bytes is not read: it stays held until its visibility
        timeout runs out, is logged once, and this receiver passes over it
        from then on; so does one whose name leaves no version for a claim
        and its release (:func:`~vsqs._names.can_hold`). ``target``: only
        messages of the group with that token (docs/groups.md). Gives up, claiming
        nothing more, at the next wake-up (within :data:`~vsqs._candidates.STALE_AFTER`) after
        ``stop`` is set.

        An error after some messages were read returns them (logged); it is
        raised only when none was. A claim whose body could not be read is
        given back at once, uncounted (:meth:`_give_back`). Raises
        :class:`QueueClosed` once :meth:`close` was called (at once, from a wait).
        """
        observer = meter.observer  # one for both calls: metrics may be enabled meanwhile
        if observer is meter.OFF:
            return self._poll(
                max_messages, vt_ms, wait, stop, max_receives, exhausted, max_size, target
            )
        started = observer.clock()
        got = self._poll(max_messages, vt_ms, wait, stop, max_receives, exhausted, max_size, target)
        observer.received(self._store.url, sum(names.message_count(c.id) for c in got), started)
        return got

    def _poll(
        self,
        max_messages: int,
        vt_ms: int,
        wait: float,
        stop: threading.Event | None,
        max_receives: int | None,
        exhausted: Exhausted | None,
        max_size: int | None,
        target: str | None,
    ) -> list[Claim]:
        """The long poll of :meth:`receive`."""
        deadline = time.monotonic() + wait
        idle_wakes = 0
        with self._calls:  # a receive under way, for close()
            self._receiving += 1
        try:
            while True:
                if self._closed:
                    raise QueueClosed(f"{self._store.url}: the queue is closed")
                if stop is not None and stop.is_set():
                    return []
                got = self._claim_available(
                    max_messages, vt_ms, max_receives, exhausted, max_size, target
                )
                if got:
                    self._received_at = self._clock.elapsed()
                    return got
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return got
                if self._candidates.losses:
                    # Lost every race: let the winners have this arrival and
                    # come back when more have arrived, instead of waking with
                    # every consumer at each one.
                    time.sleep(min(remaining, random.uniform(0, CONTENTION_PAUSE)))
                    continue
                if idle_wakes:
                    # Woken by changes that brought nothing (other consumers'
                    # claims): look less often, up to every CONTENTION_PAUSE s,
                    # or idle consumers starve the busy ones of CPU.
                    time.sleep(min(remaining, CONTENTION_PAUSE * min(idle_wakes, 8) / 8))
                self._wait(deadline - time.monotonic())
                idle_wakes += 1
        except OSError:
            with storage_errors(f"receiving from {self._store.url}"):  # only when one failed
                raise
        finally:
            with self._calls:
                self._receiving -= 1
            if self._closed:  # close() waits for the last to end
                self._ended.set()

    def after_fork(self) -> None:
        """In a forked child: forget the view (a thread of the parent may have
        been changing it) and the parent's receives under way; list again."""
        self._candidates = Candidates()
        self._receiving = 0

    def close(self) -> None:
        """Make every receive raise :class:`QueueClosed`; return once those
        under way have ended (a long poll is woken at once)."""
        self._closed = True
        while True:
            self._ended.clear()  # before the count: a receive that ends after it sets it
            with self._calls:
                if not self._receiving:
                    return
            # A receive between its check and its wait misses one wake: wake again.
            self._store.wake()
            self._ended.wait(CLOSE_WAKES)

    def poll_interval(self) -> float:
        """How long a waiting receiver sleeps between listings of a polled store now."""
        if self._clock.elapsed() - self._received_at < IDLE_AFTER:
            return min(POLL_INTERVAL, self._max_poll_interval)
        return self._max_poll_interval

    def _wait(self, remaining: float) -> None:
        """Wait for a change, an expiry this client knows of, or the next look
        at a polled store, whichever comes first (at most ``remaining``)."""
        c = self._candidates
        polled = self._store.polled
        # ``remaining`` is below zero when this thread ran late past the deadline.
        timeout = max(
            0.0, min(remaining, self.poll_interval() if polled else candidates.STALE_AFTER)
        )
        next_expiry = c.next_expiry_ms()
        if next_expiry is not None:
            timeout = min(timeout, max(0.0, (next_expiry - self._clock.now_ms()) / 1000))
        if polled:
            self._store.pause(timeout)  # only a listing can tell what changed
        else:
            self._store.wait_for_change(c.token, timeout)
