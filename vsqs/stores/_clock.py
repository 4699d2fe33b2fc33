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

Expiries and ids in names are written on the store's clock too, as each
client reads it: its own clock plus the offset :class:`StoreOffset` measured
(docs/protocol.md, "Whose clock decides expiry"). The listings also bound
how far the host's wall clock is from the store's: beyond
:data:`CLOCK_BOUND` seconds either way, :meth:`StoreClock.check` raises
:class:`ClockSkew`, and so does a re-measured offset that moved by more.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable

from .. import _forks
from .._errors import ClockSkew

log = logging.getLogger("vsqs")

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
#: Seconds after a failed re-measure of a clock's offset before the next try.
RETRY = 5.0
#: A change of a host's wall clock against its steady clock (seconds) taken
#: for a step of it: its offset is measured again before it is read.
STEP = 1.0

Clock = Callable[[], float]
#: ``measure(read)``: the least and the greatest the store's clock minus
#: ``read()``'s can be (seconds), from one request; ``None`` if the store
#: tells no time.
Measure = Callable[[Clock], "tuple[float, float] | None"]


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


class StoreOffset:
    """How far one host clock is from one store's clock: the milliseconds a
    client adds to its clock to read the time names are written in.

    A measure bounds the offset between two figures (a ``Date`` names a whole
    second, and the request took some time); the offset taken is the one of
    them nearest to none: 0 when the clock may agree with the store's (so
    hosts synchronised to each other stay so to the ms), else the nearer
    bound (a host off by more is corrected to within the bounds' distance).

    Measured at the first read, then again at the first read after
    :data:`WINDOW` seconds of ``steady`` time, or after ``clock`` stepped by
    more than :data:`STEP` against its steady clock (``time.monotonic`` for
    the host's ``time.time``; an injected clock is its own, so moving a test's
    clock by hand is time passing, never a step). A re-measure that finds the
    offset moved by more than :data:`CLOCK_BOUND` (the clock stepped with no
    steady clock to tell) raises :class:`ClockSkew` once, and the new offset
    is used from then on. Thread-safe.
    """

    def __init__(self, steady: Clock, elapsed: Clock | None = None) -> None:
        #: The steady clock a clock is checked against for steps (by default
        #: ``time.monotonic`` for ``time.time``, an injected clock itself).
        self._elapsed = elapsed
        self._steady = steady
        self._lock = _forks.lock()
        self._ms: int | None = None  # None: not measured, or the store tells no time
        self._measured_at = -math.inf
        self._drift = 0.0  # clock minus its steady clock, when measured
        self._measuring = False

    def ms(self, clock: Clock, measure: Measure) -> int:
        """The offset of ``clock`` in whole ms (0 if the store tells no time).

        The clock is not kept (the registry of offsets is weak on it). No
        lock is held across the measure's requests: until a first measure
        (or one after a step) returns, each caller measures for itself; a
        re-measure is made by one caller while the others read the offset it
        replaces, and one that fails keeps that offset (logged) and is tried
        again :data:`RETRY` seconds later. A measure that returns after a
        later one did changes nothing."""
        elapsed = self._elapsed or (time.monotonic if clock is time.time else clock)
        with self._lock:
            now, drift = self._steady(), clock() - elapsed()
            stepped = abs(drift - self._drift) > STEP
            known = self._measured_at > -math.inf and not stepped
            if known and (now - self._measured_at < WINDOW or self._measuring):
                return self._ms or 0
            self._measuring = True
        try:
            found = measure(clock)
        except OSError as exc:
            if not known:
                raise
            with self._lock:  # the offset in hand is still good: look again soon
                self._measured_at = max(self._measured_at, now - WINDOW + RETRY)
            log.warning("could not measure the store's clock again (%s); kept the offset", exc)
            return self._ms or 0
        finally:
            with self._lock:
                self._measuring = False
        with self._lock:
            if now < self._measured_at:  # a later measure already landed
                return self._ms or 0
            self._measured_at, self._drift = now, drift
            before, self._ms = self._ms, None if found is None else _nearest_to_none(*found)
            if known and before is not None and self._ms is not None:
                moved = abs(self._ms - before) / 1000
                if moved > CLOCK_BOUND:
                    raise ClockSkew(
                        f"this host's clock moved {moved:.0f} s against the store's since it "
                        f"was measured (the bound is {CLOCK_BOUND:.0f} s): names written "
                        "meanwhile were off by as much (docs/protocol.md)"
                    )
            return self._ms or 0


def _nearest_to_none(least: float, greatest: float) -> int:
    """The offset in ``[least, greatest]`` (seconds) nearest to 0, in whole ms."""
    return round(min(max(0.0, least), greatest) * 1000)


_OFFSETS: weakref.WeakKeyDictionary[Clock, dict[Hashable, StoreOffset]] = (
    weakref.WeakKeyDictionary()
)
_HOST_OFFSETS: dict[Hashable, StoreOffset] = {}  # time.time's (a builtin: no weak reference)
_OFFSETS_LOCK = _forks.lock()


def store_offset(clock: Clock, scope: Hashable, steady: Clock) -> StoreOffset | None:
    """The offset of ``clock`` to the store ``scope`` names, shared by every
    client of that clock (one host: clients that share a clock object agree
    on its offset, as they share its id generator); ``None`` if ``clock``
    cannot be weakly referenced (the caller keeps its own)."""
    with _OFFSETS_LOCK:
        if clock is time.time:
            found = _HOST_OFFSETS
        else:
            try:
                found = _OFFSETS.setdefault(clock, {})
            except TypeError:
                return None
        offset = found.get(scope)
        if offset is None:
            offset = found[scope] = StoreOffset(steady)
        return offset
