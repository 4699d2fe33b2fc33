"""How old an object is, on the store's clock, as one client can tell.

Object-store listings give each object's modification time by the *store's*
clock (``LastModified``, whole seconds on S3). A client that judged an age as
its own wall clock minus that time would, on a host whose clock runs ahead,
take a young marker for an abandoned one and finish another client's move.
:class:`StoreClock` judges ages on the store's clock instead, from what the
client's listings already show, and never on the host's wall clock:

* every listed time ``T`` read at steady time ``s`` (and every ``Date`` a
  response carried, :attr:`~vsqs.stores.ObjectIO.last_date`) says the
  store's clock read at least ``T`` at ``s``: the store's time now is at least
  ``steady() - s + T``, the largest such bound of the last
  :data:`WINDOW` seconds (older ones would let the steady clock's drift
  accumulate);
* an object first listed at steady time ``s`` is at least ``steady() - s``
  old, with or without a listed time (a store that lists none still ages
  objects, from the first time this client saw them).

An age is the larger of the two bounds: it is never more than the object's
true age plus the resolution of listed times (1 s on S3, whose times are
truncated), whatever the host's wall clock says or does (steps included), so
other clients' objects are never judged old early. It may be less: a client
that has listed nothing recent finishes an abandoned move up to the age
limit later than one that has.

The host's wall clock still writes expiries and ids into names, which other
hosts read (docs/protocol.md, "Whose clock decides expiry"). The same
listings bound how far it is from the store's: beyond :data:`CLOCK_BOUND`
seconds either way, :meth:`StoreClock.check` raises :class:`ClockSkew`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

from . import _forks
from ._errors import ClockSkew

#: Seconds a host's wall clock may be off the store's before its client gets
#: :class:`ClockSkew` (docs/protocol.md, "Whose clock decides expiry").
CLOCK_BOUND = 30.0
#: Seconds for which a listed time bounds the store's clock: a steady clock
#: that runs 100 ppm fast gains 30 ms in that time.
WINDOW = 300.0
#: Objects whose first sighting (or creation) one client remembers; a full
#: listing forgets the sightings of names it no longer shows.
REMEMBERED = 100_000
#: The resolution of listed times assumed when checking a host's lead (S3's).
RESOLUTION = 1.0


class _RecentMax:
    """The largest value offered in the last one or two :data:`WINDOW` (never
    one offered longer ago, however long nothing was offered)."""

    def __init__(self) -> None:
        self._start = -math.inf
        self._current = self._previous = -math.inf

    def offer(self, value: float, now: float) -> None:
        if now - self._start > WINDOW:
            recent = now - self._start <= 2 * WINDOW
            self._previous = self._current if recent else -math.inf
            self._start, self._current = now, -math.inf
        self._current = max(self._current, value)

    def value(self, now: float) -> float:
        age = now - self._start
        if age > 2 * WINDOW:
            return -math.inf
        if age > WINDOW:  # the previous window's offers are over two windows old
            return self._current
        return max(self._current, self._previous)


class StoreClock:
    """One client's view of the store's clock; thread-safe.

    ``wall``: the host's clock, as it writes names. ``steady``: a clock that
    never steps (``time.monotonic``), on which ages and durations are measured.
    """

    def __init__(self, wall: Callable[[], float], steady: Callable[[], float]) -> None:
        self._wall = wall
        self._steady = steady
        self._lock = _forks.lock()
        self._date: float | None = None  # the last Date offered
        self._offset = _RecentMax()  # store time minus steady time, at least
        self._lead = _RecentMax()  # how far the host's clock is ahead of the store's, at least
        self._first_seen: OrderedDict[str, float] = OrderedDict()
        self._created: OrderedDict[str, float] = OrderedDict()  # name -> wall time before

    # ------------------------------------------------------------ observing
    def observed(self, name: str, modified: float | None, *, aged: bool = False) -> None:
        """A listing showed ``name`` modified at ``modified`` (store time, if
        known); ``aged``: its age may be asked (its first sighting counts)."""
        now = self._steady()
        if aged:
            with self._lock:
                self._first_seen.setdefault(name, now)
                _trim(self._first_seen)
        if modified is None:
            return
        with self._lock:
            self._offset.offer(modified - now, now)
            created = self._created.pop(name, None)
            if created is not None:  # made here after ``created``, stamped <= modified + 1 s
                self._lead.offer(created - modified - RESOLUTION, now)

    def dated(self, date: float | None) -> None:
        """A response said the store's time was ``date`` (or later) just now."""
        if date is not None and date != self._date:  # a new response
            self._date = date
            now = self._steady()
            with self._lock:
                self._offset.offer(date - now, now)

    def creating(self, name: str) -> None:
        """This client is about to create ``name`` (its wall time now is remembered)."""
        wall = self._wall()
        with self._lock:
            self._created[name] = wall
            _trim(self._created)

    def not_created(self, name: str) -> None:
        """``name`` was not created by this client after all (it existed, or
        another client's move made it)."""
        with self._lock:
            self._created.pop(name, None)

    def keep_sightings(self, listed: set[str]) -> None:
        """A listing of the whole queue showed these aged names: the others are
        gone, and a later object of one of their names is another one."""
        with self._lock:
            for name in [n for n in self._first_seen if n not in listed]:
                del self._first_seen[name]

    # ------------------------------------------------------------- judging
    def store_time(self) -> float:
        """The store's time now, at least (``-inf`` before any listed time)."""
        now = self._steady()
        with self._lock:
            offset = self._offset.value(now)
        return now + offset

    def age(self, name: str, modified: float | None) -> float:
        """How old ``name`` is on the store's clock, at least (see the module docstring)."""
        now = self._steady()
        with self._lock:
            first = self._first_seen.setdefault(name, now)
            _trim(self._first_seen)
        seen = now - first
        if modified is None:
            return seen
        return max(seen, self.store_time() - modified)

    def older(self, name: str, modified: float | None, seconds: float) -> bool:
        """Whether ``name`` (listed as modified at ``modified``) is older than ``seconds``."""
        return self.age(name, modified) > seconds

    def check(self) -> None:
        """Raise :class:`ClockSkew` if the host's clock is known to be more
        than :data:`CLOCK_BOUND` seconds off the store's."""
        behind = self.store_time() - self._wall()
        if behind > CLOCK_BOUND:
            raise ClockSkew(
                f"this host's clock is at least {behind:.0f} s behind the store's "
                f"(the bound is {CLOCK_BOUND:.0f} s): synchronise it (docs/protocol.md)"
            )
        now = self._steady()
        with self._lock:
            ahead = self._lead.value(now)
        if ahead > CLOCK_BOUND:
            raise ClockSkew(
                f"this host's clock is at least {ahead:.0f} s ahead of the store's "
                f"(the bound is {CLOCK_BOUND:.0f} s): synchronise it (docs/protocol.md)"
            )


def _trim(remembered: OrderedDict[str, float]) -> None:
    """Forget the oldest entries beyond :data:`REMEMBERED` (an age then reads
    younger, never older)."""
    while len(remembered) > REMEMBERED:
        remembered.popitem(last=False)
