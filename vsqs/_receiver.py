"""The receive engine: the candidate cache, claims, listing and the long poll.

A :class:`Receiver` serves one client of one queue. Between listings it keeps
:class:`Candidates`, its view of the queue, and claims the oldest of them by
renaming (docs/format.md). It works on any :class:`~vsqs.stores._base.Store` and
needs no :class:`vsqs.Queue`.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import NamedTuple

from . import _forks
from . import _names as names
from ._errors import QueueClosed, VsqsError, storage_errors
from ._fanout import fan_out
from ._inspect import collect_stale_new, stale_new_before
from .stores._base import Outcomes, OutcomeUnknown, Store, TooLarge

log = logging.getLogger("vsqs")

#: A cached listing is refreshed at least this often (seconds), so messages
#: whose visibility expired (or that other clients released) come back in FIFO
#: position within this delay, or within 20 listing times on huge backlogs.
STALE_AFTER = 1.0
#: Listings of more than THROTTLE_ABOVE names may take at most
#: 1/LISTING_BUDGET of a receiver's time; smaller ones are never throttled.
LISTING_BUDGET = 20
THROTTLE_ABOVE = 1000
#: A ready name issued less than this before a listing started becomes a
#: candidate only once a second listing has seen it: a listing racing with a
#: producer may show the producer's newer message but not its older one
#: (docs/format.md, "FIFO"). It covers clock skew between hosts sharing a disk.
YOUNG_MS = 50
#: A receiver that lost every race of a receive sleeps up to this (seconds)
#: before looking again; one woken by changes that brought it nothing, at
#: most this long before waiting again. (Not a retry delay of ``consume``,
#: nor the pass-over of an unreadable message.)
CONTENTION_PAUSE = 0.001
#: On stores whose renames cost requests (object stores), the first lost claim
#: already skips fewer than 2**COSTLY_SPREAD candidates ahead (then twice as far
#: per loss in a row, up to 64): measured on moto with 4 consumers, lost claims
#: fell from 1.2 to 0.2 per message.
COSTLY_SPREAD = 5
#: On polled stores (object stores: no change feed, every look is a LIST
#: request), a waiting receiver lists every POLL_INTERVAL seconds; once it
#: has received nothing for IDLE_AFTER seconds, every max_poll_interval
#: (default DEFAULT_MAX_POLL_INTERVAL), back to POLL_INTERVAL as soon as it
#: receives something. An idle consumer then makes 1 800 LISTs an hour, not 18 000,
#: and wakes up to max_poll_interval late for the first message after a lull.
POLL_INTERVAL = 0.2
IDLE_AFTER = 10.0
#: A receiver passes over a message whose body it could not read for this
#: long (seconds), twice as long at each failure in a row, up to
#: UNREADABLE_MAX: one unreadable message never stops the others.
UNREADABLE_FIRST = 1.0
UNREADABLE_MAX = 60.0
#: Unreadable messages one receiver remembers (the oldest are forgotten).
UNREADABLE_REMEMBERED = 10_000
DEFAULT_MAX_POLL_INTERVAL = 2.0
#: A closing receiver wakes the long polls under way again this often (seconds)
#: until they have ended: one between its check and its wait misses a wake.
CLOSE_WAKES = 0.01
#: A receiver with an arrival feed reads it at least every FEED_EVERY claims.
FEED_EVERY = 64
#: On stores that list in order (object stores), a listing stops once it has
#: found this many candidates (within the first page of 1 000 keys, if few are
#: in flight): a receive never lists the whole backlog.
HEAD_NAMES = 500


def skip_bound(losses: int, costly: bool) -> int:
    """A receiver that lost ``losses`` claims in a row skips fewer than this many candidates."""
    return min(1 << (losses - 1 + (COSTLY_SPREAD if costly else 0)), 64)


@dataclass(frozen=True)
class Listing:
    """What one listing found, sorted out for :meth:`Candidates.refresh`."""

    visible: list[str]  # ascending
    young: list[str]
    pending: dict[str, int]
    stale_new: list[str]
    count: int
    #: Ids with origin records (dead letters; docs/format.md): their names.
    origins: dict[str, names.Records]


class Candidates:
    """The receiver's view of the queue between listings; only its own methods
    change it.

    ``names[pos:]`` are candidate names, ascending (FIFO); ``pending`` maps the
    invisible names this client knows of (from the listing, or its own claims,
    extends, releases and delayed sends) to their expiry, with ``heap`` in
    expiry order, so that they become candidates in FIFO position the moment
    they are due, without a listing. ``fed``: the store's arrival feed has
    reported every name that appeared since the last listing, so the
    candidates are the whole queue without listing again. ``origins``: ids
    the last listing showed origin records of, with their names.
    """

    __slots__ = (
        "fed",
        "gone",
        "heap",
        "listed_at",
        "listed_count",
        "listing_seconds",
        "losses",
        "names",
        "oldest_young",
        "origins",
        "pending",
        "pos",
        "since_feed",
        "skipped",
        "token",
        "young",
    )

    def __init__(self) -> None:
        self.names: list[str] = []
        self.pos = 0
        self.pending: dict[str, int] = {}
        self.heap: list[tuple[int, str]] = []
        self.token: Hashable = None
        self.listed_at = -math.inf
        self.listing_seconds = 0.0
        self.listed_count = 0
        self.young: set[str] = set()
        self.oldest_young: str | None = None
        self.losses = 0  # consecutive renames lost to other consumers
        self.fed = False
        self.skipped: list[str] = []  # fed: names skipped after lost races, to retry
        self.gone: set[str] = set()  # fed: ready names the feed saw leave
        self.since_feed = 0  # claims since the feed was last read
        self.origins: dict[str, names.Records] = {}

    @property
    def listed(self) -> bool:
        """Whether a listing was taken (a client that never received keeps nothing)."""
        return self.token is not None

    # ------------------------------------------------------------- updates
    def add_invisible(self, name: str, expiry_ms: int) -> None:
        self.pending[name] = expiry_ms
        heapq.heappush(self.heap, (expiry_ms, name))

    def add_ready(self, name: str) -> None:
        """This client published ``name`` (ready): a candidate in FIFO position,
        unless the feed reports it anyway."""
        if not self.fed:
            bisect.insort(self.names, name, lo=self.pos)

    def forget(self, name: str) -> None:
        """This client renamed or deleted ``name``: it is no candidate any more."""
        if self.pending.pop(name, None) is None:  # not invisible: maybe a candidate
            i = bisect.bisect_left(self.names, name, lo=self.pos)
            if i < len(self.names) and self.names[i] == name:
                del self.names[i]
        if len(self.heap) > 2 * len(self.pending) + 1024:  # drop forgotten entries
            self.heap = [(expiry, name) for name, expiry in self.pending.items()]
            heapq.heapify(self.heap)

    def add_changes(self, changes: list[tuple[str, bool]]) -> None:
        """Apply what the store's feed reported of ready names: arrivals become
        candidates, departures (taken by someone) are passed over unclaimed.

        Invisible names (claims, extends, releases, delayed sends) are left to
        the next listing, as expiries are: this client's own are pending
        already, and a feed read late would report names long renamed again.
        """
        for name, appeared in changes:
            if not appeared:
                # Only a name still ahead (or skipped) can be tried again; this
                # client's own claims are behind it.
                i = bisect.bisect_left(self.names, name, lo=self.pos)
                if self.skipped or (i < len(self.names) and self.names[i] == name):
                    self.gone.add(name)
            elif names.is_id(name):
                self.gone.discard(name)
                i = bisect.bisect_left(self.names, name, lo=self.pos)
                if i == len(self.names) or self.names[i] != name:
                    self.names.insert(i, name)

    def feed_lost(self) -> None:
        """The feed lost events: list before the next claim."""
        self.fed, self.listed_at = False, -math.inf

    def promote_due(self, now_ms: int) -> bool:
        """Move known invisible names whose expiry has passed into the candidates.

        Returns whether any moved.
        """
        heap, pending = self.heap, self.pending
        promoted = False
        while heap and heap[0][0] <= now_ms:
            expiry, name = heapq.heappop(heap)
            if pending.get(name) == expiry:
                del pending[name]
                bisect.insort(self.names, name, lo=self.pos)
                promoted = True
        return promoted

    def take(self) -> str | None:
        """The next candidate, passed over for good (``None`` when they ran out)."""
        if self.pos >= len(self.names):
            return None
        name = self.names[self.pos]
        self.pos += 1
        return name

    def won(self) -> None:
        self.losses = 0

    def lost(self, costly: bool) -> int:
        """A claim was lost to another consumer: after the second loss in a row
        (on stores where losses are costly, the first), skip ahead a random,
        growing distance, so that consumers sharing one view do not all fight
        for the same head message. A lone consumer (whose only losses are its
        own stale names) stays FIFO; skipped names come back when the others
        ran out (with a feed) or at the next listing, if nobody took them.
        Returns how many were skipped."""
        self.losses += 1
        count = random.randrange(skip_bound(self.losses, costly))
        end = min(len(self.names), self.pos + count)
        if self.fed:
            self.skipped.extend(self.names[self.pos : end])
        self.pos = end
        return count

    def retry_skipped(self) -> None:
        """Make the skipped names candidates again once the others ran out (fed only)."""
        if self.pos >= len(self.names) and self.skipped:
            gone = self.gone
            self.names[self.pos :] = [n for n in self.skipped if n not in gone]  # ascending
            self.skipped = []

    def refresh(
        self,
        listing: Listing,
        token: Hashable,
        during: list[tuple[str, bool]] | None,
        started: float,
        ended: float,
    ) -> None:
        """Replace the view by one listing (taken after ``token``, from
        ``started`` to ``ended``). ``during``: the feed's changes while it
        listed; ``None`` when there is no feed (or it lost events)."""
        self.pending = listing.pending
        self.heap = [(expiry, name) for name, expiry in listing.pending.items()]
        heapq.heapify(self.heap)
        self.gone = set()
        visible = listing.visible
        if during is not None:  # names that changed while listing: some are listed too
            self.names, self.pos = visible, 0
            self.add_changes(during)
        # A consumer that has been losing races starts at a random offset, so
        # consumers sharing a queue spread over its head; one that has not
        # (a lone consumer) starts at the oldest name: strict FIFO.
        spread = min(len(visible), 1 << min(self.losses, 6))
        start = random.randrange(spread) if self.losses and visible else 0
        self.names, self.pos, self.token = visible, start, token
        self.young, self.fed = set(listing.young), during is not None
        self.skipped = []
        self.oldest_young = min(listing.young) if listing.young else None
        self.losses = self.losses // 2
        self.listed_at, self.listing_seconds = ended, ended - started
        self.listed_count = listing.count
        self.origins = listing.origins

    # ------------------------------------------------------------- queries
    def feed_due(self, promoted: bool) -> bool:
        """Whether to read the feed before the next claim.

        New ready names are newer than the candidates, bar a slow producer's
        or a skewed clock's: read when the candidates run out, when older
        names were promoted (own sends must not be overtaken), and every
        ``FEED_EVERY`` claims, which also keeps the kernel's event queue short
        (this client's own claims are events too).
        """
        self.since_feed += 1
        if (
            promoted
            or self.losses  # contended: others' claims tell which names are gone
            or self.since_feed >= FEED_EVERY
            or self.pos >= len(self.names)
        ):
            self.since_feed = 0
            return True
        return False

    def next_expiry_ms(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def due(self, store: Store, now: float) -> bool:
        """Whether to list again before the next claim (possibly to find nothing).

        ``now``: the receiver's monotonic time, as ``listed_at`` was taken.
        """
        exhausted = self.pos >= len(self.names)
        oldest_young = self.oldest_young
        if oldest_young is not None and (exhausted or oldest_young < self.names[self.pos]):
            return True  # a second look makes fresh names candidates, in FIFO order
        age = now - self.listed_at
        if self.listed_count > THROTTLE_ABOVE and age < LISTING_BUDGET * self.listing_seconds:
            return False
        if age >= STALE_AFTER:
            return True
        if self.fed:
            return False  # the feed told of every new name
        return exhausted and (self.token is None or store.changed_since(self.token))


#: ``exhausted(held, body)``: a claimed message past ``max_receives`` (its held name and body).
Exhausted = Callable[[str, bytes], None]


class Claim(NamedTuple):
    """A message this client now holds: its id, held name, receive count and
    body, and the origin records the last listing showed of it."""

    id: str
    name: str
    receive_count: int
    expiry_ms: int
    body: bytes
    origin: names.Records = ()


class Plan(NamedTuple):
    """A claim to try: rename ``candidate`` to ``held``."""

    candidate: str
    id: str
    held: str
    receive_count: int
    expiry_ms: int


class Receiver:
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
        self._store = store
        self._clock = clock
        self._new_grace_ms = new_grace_ms
        self._max_poll_interval = max_poll_interval
        self._lock = _forks.lock()
        self._candidates = Candidates()
        self._closed = _forks.event()
        #: Guards ``_receiving``, the receives under way; notified as one ends.
        self._calls = _forks.condition()
        self._receiving = 0
        _forks.after_fork(self)
        self._received_at = clock.elapsed()  # when a receive last got something
        #: Ids of messages this receiver passes over for good: too large to
        #: read, or with no name left to claim them under (docs/format.md).
        self._passed_over: set[str] = set()
        self._unreadable = Unreadable()

    @property
    def candidates(self) -> Candidates:
        """The current view (read it; only the receiver changes it)."""
        return self._candidates

    # ---------------------------------------------- what this client did
    def sent(self, name: str, visible_at: int | None) -> None:
        """Let this client's receives see its own send in FIFO order at once."""
        c = self._candidates
        if not c.listed:
            return
        with self._lock:
            if visible_at is None:
                c.add_ready(name)
            else:
                c.add_invisible(name, visible_at)

    def moved(self, old: str, new: str, expiry_ms: int) -> None:
        """This client renamed a message it holds (extend, release)."""
        with self._lock:
            self._candidates.forget(old)
            self._candidates.add_invisible(new, expiry_ms)

    def deleted(self, name: str) -> None:
        with self._lock:
            self._candidates.forget(name)

    def reset(self) -> None:
        """Forget everything (the queue is being purged)."""
        with self._lock:
            self._candidates = Candidates()

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
    ) -> list[Claim]:
        """Claim up to ``max_messages`` visible messages, oldest first, waiting
        up to ``wait`` seconds for one (a long poll).

        A message received more than ``max_receives`` times is handed to
        ``exhausted`` (its held name and body) instead. A message of more than
        ``max_size`` bytes is not read: it stays held until its visibility
        timeout runs out, is logged once, and this receiver passes over it
        from then on; so does one whose name leaves no version for a claim
        and its release (:func:`~vsqs._names.can_hold`). Gives up, claiming
        nothing more, at the next wake-up (within :data:`STALE_AFTER`) after
        ``stop`` is set.

        An error after some messages were read returns them (logged); it is
        raised only when none was. A claim whose body could not be read is
        given back at once, uncounted (:meth:`_give_back`). Raises
        :class:`QueueClosed` once :meth:`close` was called (at once, from a wait).
        """
        deadline = time.monotonic() + wait
        idle_wakes = 0
        with self._calls:  # a receive under way, for close()
            self._receiving += 1
        try:
            with storage_errors(lambda: f"receiving from {self._store.url}"):
                while True:
                    if self._closed.is_set():
                        raise QueueClosed(f"{self._store.url}: the queue is closed")
                    if stop is not None and stop.is_set():
                        return []
                    got = self._claim_available(
                        max_messages, vt_ms, max_receives, exhausted, max_size
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
        finally:
            with self._calls:
                self._receiving -= 1
                if self._closed.is_set():  # close() waits for the last to end
                    self._calls.notify_all()

    def after_fork(self) -> None:
        """In a forked child: forget the view (a thread of the parent may have
        been changing it) and the parent's receives under way; list again."""
        self._candidates = Candidates()
        self._receiving = 0

    def close(self) -> None:
        """Make every receive raise :class:`QueueClosed`; return once those
        under way have ended (a long poll is woken at once)."""
        self._closed.set()
        with self._calls:
            while self._receiving:
                # A receive between its check and its wait misses one wake: wake again.
                self._store.wake()
                self._calls.wait(CLOSE_WAKES)

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
        timeout = max(0.0, min(remaining, self.poll_interval() if polled else STALE_AFTER))
        next_expiry = c.next_expiry_ms()
        if next_expiry is not None:
            timeout = min(timeout, max(0.0, (next_expiry - self._clock.now_ms()) / 1000))
        if polled:
            self._store.pause(timeout)  # only a listing can tell what changed
        else:
            self._store.wait_for_change(c.token, timeout)

    def _next_candidate(self, relists: int, may_list: bool) -> tuple[str | None, int, int]:
        """The next name to try, the listings taken so far and the time in ms;
        ``None`` when there is none, or when a listing is due and not
        ``may_list`` (a listing taken before the planned claims are made
        would show their candidates again). The caller holds the lock."""
        store, c = self._store, self._candidates
        while True:
            now = self._clock.now_ms()
            promoted = c.promote_due(now)
            if c.fed and c.feed_due(promoted):
                changes = store.changes(names.ID_LEN)
                if changes is None:
                    c.feed_lost()
                else:
                    c.add_changes(changes)
                c.retry_skipped()
            if c.due(store, self._clock.elapsed()):
                # A second look is for young names; on a polled store (always
                # "changed"), a listing that found nothing is not retried at once.
                if relists == 2 or not may_list or self._found_nothing(relists):
                    return None, relists, now
                self._relist(now)
                relists += 1
                continue
            name = c.take()
            if name is None or name not in c.gone:  # gone: the feed saw another take it
                return name, relists, now

    def _found_nothing(self, relists: int) -> bool:
        """Whether this call's listing of a polled store found no candidate and
        no young name: looking again at once would cost a request for nothing."""
        c = self._candidates
        return relists == 1 and self._store.polled and not c.names and c.oldest_young is None

    def _claim_available(
        self,
        max_messages: int,
        vt_ms: int,
        max_receives: int | None,
        exhausted: Exhausted | None,
        max_size: int | None,
    ) -> list[Claim]:
        """Claim and read up to ``max_messages`` candidates: one at a time, or,
        where renames cost requests, as many at once as are still wanted."""
        out: list[Claim] = []
        # Names this call made invisible join the expiry heap only when it
        # ends, so a short visibility timeout cannot bring a message back into
        # the same batch.
        claimed_ids: set[str] = set()
        later: list[tuple[str, int]] = []
        relists = 0
        wide = self._store.renames_cost_requests
        failure: Exception | None = None
        try:
            while len(out) < max_messages and failure is None:
                with self._lock:
                    wanted = max_messages - len(out) if wide else 1
                    plans, relists = self._plan(wanted, vt_ms, claimed_ids, later, relists)
                    if not plans:
                        break
                    won = self._rename(plans)
                claimed_ids.update(plan.id for plan in won)
                failure = self._read(won, max_receives, exhausted, max_size, out, later)
        except OSError as exc:  # a later listing or claim of the batch
            failure = exc
        finally:
            with self._lock:
                for name, expiry in later:
                    self._candidates.add_invisible(name, expiry)
        if failure is not None:
            if not out:
                raise failure
            # What was read is returned; the error shows again at the next call.
            log.warning(
                "%s: a receive failed after %d messages were read: %s",
                self._store.url,
                len(out),
                failure,
            )
        return self._unexpired(out) if vt_ms else out

    def _plan(
        self,
        wanted: int,
        vt_ms: int,
        claimed_ids: set[str],
        later: list[tuple[str, int]],
        relists: int,
    ) -> tuple[list[Plan], int]:
        """The next ``wanted`` claims to try, of distinct messages not claimed
        in this batch yet, and the listings taken so far (caller holds the lock)."""
        plans: list[Plan] = []
        ids = set(claimed_ids) if wanted > 1 else claimed_ids
        while len(plans) < wanted:
            name, relists, now = self._next_candidate(relists, may_list=not plans)
            if name is None:
                break
            parsed = names.parse(name)
            if parsed is None or parsed.state == names.NEW or not names.is_visible(parsed, now):
                continue  # foreign, or not visible (any more)
            if self._passes_over(parsed.id) or not self._can_claim(parsed, name):
                continue  # back with the next listing, never due by itself: no spin
            if parsed.id in ids:  # not again in this batch
                if parsed.expiry_ms is not None:
                    later.append((name, parsed.expiry_ms))
                continue
            if wanted > 1:
                ids.add(parsed.id)
            count = min(parsed.receive_count + 1, names.MAX_COUNT)  # as the name spells it
            expiry = self._clock.expiry_ms(vt_ms)
            plans.append(
                Plan(name, parsed.id, names.next_name(parsed, expiry, count), count, expiry)
            )
        return plans, relists

    def _passes_over(self, message_id: str) -> bool:
        """Whether this receiver passes over the message now (for good, or
        until the pass-over after a read that failed ends)."""
        return message_id in self._passed_over or self._unreadable.waiting(
            message_id, self._clock.elapsed
        )

    def _can_claim(self, parsed: names.Name, name: str) -> bool:
        """Whether a claim of ``name`` leaves its holder a name to let go of
        it to (:func:`~vsqs._names.can_hold`). A message whose does not is
        passed over for good, with one warning (caller holds the lock)."""
        if names.can_hold(parsed):
            return True
        self._passed_over.add(parsed.id)
        log.warning(
            "%s: message %s cannot be received: its name has the last versions of the "
            "format, none left for a claim and its release; it is left in the queue, "
            "this receiver passes over it from now on (docs/format.md, names)",
            self._store.url,
            name,
        )
        return False

    def _rename(self, plans: list[Plan]) -> list[Plan]:
        """Rename each planned candidate to held; the plans won, in order
        (caller holds the lock). A storage error is raised if nothing was won."""
        store = self._store
        if len(plans) == 1:  # the common receive(): no batch to set up
            error = self._rename_one(plans[0])
            if error is None:
                self._candidates.won()
                return plans
            errors: Outcomes = [error]
        else:
            errors = store.rename_batch([(plan.candidate, plan.held) for plan in plans])
        won: list[Plan] = []
        failure: OSError | None = None
        for plan, error in zip(plans, errors, strict=True):
            if error is None:
                self._candidates.won()
                won.append(plan)
            elif isinstance(error, OutcomeUnknown):
                # Slow enough that a lister may have finished it for us: not
                # ours to return; if it took effect, the message comes back at
                # the held name's expiry, as from a claimer that died.
                log.warning(
                    "%s: a claim of %s was too slow to tell its outcome", store.url, plan.candidate
                )
            elif isinstance(error, FileNotFoundError | FileExistsError):
                skipped = self._candidates.lost(store.renames_cost_requests)
                log.debug("%s: lost a claim race; skipping %d candidates", store.url, skipped)
            else:
                failure = failure or error
        if failure is not None and not won:
            raise failure
        if failure is not None:  # what was won is returned; the error shows at the next call
            log.warning("%s: a claim failed: %s", store.url, failure)
        return won

    def _rename_one(self, plan: Plan) -> OSError | None:
        try:
            self._store.rename(plan.candidate, plan.held)
        except OSError as exc:
            return exc
        return None

    def _read(
        self,
        won: list[Plan],
        max_receives: int | None,
        exhausted: Exhausted | None,
        max_size: int | None,
        out: list[Claim],
        later: list[tuple[str, int]],
    ) -> Exception | None:
        """Read the bodies of the claims ``won`` (side by side where renames
        cost requests) into ``out``; one past ``max_receives`` goes to
        ``exhausted`` instead, and one larger than ``max_size`` to nobody.
        The name each claim is left at, and its expiry, go to ``later``.

        A claim whose body could not be read is given back at once
        (:meth:`_give_back`) and passed over for a while (:class:`Unreadable`);
        the first error of a read or of ``exhausted`` is returned (a message
        ``exhausted`` failed on stays held).
        """
        store = self._store

        def read(name: str) -> bytes:
            return store.read(name) if max_size is None else store.read_limited(name, max_size)

        failure: Exception | None = None
        unread: list[Plan] = []
        first = len(out)  # claims of earlier rounds of the batch are in ``out`` already
        origins = self._candidates.origins
        bodies = fan_out(read, [plan.held for plan in won], store.batch_width)
        for plan, outcome in zip(won, bodies, strict=True):
            error = outcome.exception()
            if isinstance(error, FileNotFoundError):
                continue  # already expired and taken by another receiver
            if isinstance(error, OSError) and not isinstance(error, TooLarge):
                unread.append(plan)
                failure = failure or error
                continue
            later.append((plan.held, plan.expiry_ms))
            if isinstance(error, TooLarge):
                self._pass_over(plan, error)
                continue
            body = outcome.result()
            try:
                if self._exhausted(plan, body, max_receives, exhausted):
                    continue
            except (OSError, VsqsError) as exc:
                failure = failure or exc
                continue
            origin = origins.get(plan.id, ())
            out.append(Claim(plan.id, plan.held, plan.receive_count, plan.expiry_ms, body, origin))
        if unread:
            later.extend(self._give_back([(plan.held, _count_before(plan)) for plan in unread]))
        if unread or self._unreadable:
            with self._lock:
                self._unreadable.update(
                    [plan.id for plan in unread],
                    [claim.id for claim in out[first:]],
                    self._clock.elapsed(),
                )
        return failure

    def _give_back(self, unread: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Make claims that delivered nothing (``(held name, receive count
        before the claim)``) visible again at once, with that count (a claim
        that delivered nothing counts nothing; docs/format.md, "Transitions").
        The renames take the next version, as every rename does. Returns the
        name each is left at and its expiry: a claim whose give-back failed
        too stays held until its visibility timeout, counted."""
        store, now = self._store, self._clock.now_ms()
        moves: list[tuple[str, str]] = []
        expiries: list[int] = []
        for held_name, count in unread:
            held = names.parse(held_name)
            assert held is not None and held.expiry_ms is not None
            moves.append((held_name, names.next_name(held, now, count)))
            expiries.append(held.expiry_ms)
        left: list[tuple[str, int]] = []
        for (held_name, back), expiry, error in zip(
            moves, expiries, store.rename_batch(moves), strict=True
        ):
            if error is None:
                left.append((back, now))
            elif not isinstance(error, FileNotFoundError):  # else expired and taken by another
                log.warning("%s: could not give back %s: %s", store.url, held_name, error)
                left.append((held_name, expiry))
        return left

    def give_back(self, held: list[str]) -> None:
        """Make claims that reached no caller (a cancelled asyncio receive)
        visible again at once, uncounted, as :meth:`_give_back` does with
        claims whose body could not be read."""
        unread = []
        for name in held:
            parsed = names.parse(name)
            if parsed is not None and parsed.expiry_ms is not None:
                unread.append((name, max(parsed.receive_count - 1, 0)))
        left = self._give_back(unread)
        with self._lock:
            for name in held:
                self._candidates.forget(name)
            for name, expiry in left:
                self._candidates.add_invisible(name, expiry)

    def _pass_over(self, plan: Plan, error: TooLarge) -> None:
        """A message too large to read: held until its visibility timeout runs
        out (not released, so others do not take it at once), and never
        claimed by this receiver again."""
        with self._lock:
            self._passed_over.add(plan.id)
        log.warning(
            "%s: message %s is too large to receive (%s); it is left in the queue, "
            "this receiver passes over it from now on (docs/format.md, maximum size)",
            self._store.url,
            plan.held,
            error.strerror,
        )

    @staticmethod
    def _exhausted(
        plan: Plan, body: bytes, max_receives: int | None, exhausted: Exhausted | None
    ) -> bool:
        """Hand a claim past ``max_receives`` to ``exhausted``; whether it was."""
        if max_receives is None or exhausted is None or plan.receive_count <= max_receives:
            return False
        exhausted(plan.held, body)
        return True

    def _unexpired(self, claimed: list[Claim]) -> list[Claim]:
        """Drop claims whose visibility timeout ran out before the batch returns
        (slow storage, or slow later claims of the batch): others may hold the
        message already. It is visible again, with its receive count."""
        now = self._clock.now_ms()
        kept = []
        for claim in claimed:
            if claim.expiry_ms <= now:
                log.warning(
                    "%s: the claim of %s outlasted its visibility timeout",
                    self._store.url,
                    claim.name,
                )
                continue
            kept.append(claim)
        return kept

    # ----------------------------------------------------------- listing
    def _relist(self, now_ms: int) -> None:
        """Refresh the candidates from one listing (caller holds the lock)."""
        c, store = self._candidates, self._store
        started = self._clock.elapsed()
        # Drain (or start) the arrival feed first: with one, every name that
        # appears during or after this listing is reported, so no name needs
        # a second look. The first listing goes without: a client that drains
        # a backlog need not pay for events (its own claims are events too)
        # until it runs out.
        fed = c.listed and store.changes(names.ID_LEN) is not None
        token = store.change_token()
        listing = self._list(now_ms, fed, c.young)
        during = store.changes(names.ID_LEN) if fed else None
        if fed and during is None:
            # The feed lost events while it listed (an overflow): the names the
            # listing missed are lost with them, so it is trusted no more than
            # a listing without a feed (docs/format.md, "FIFO").
            listing = _without_feed(listing, now_ms, c.young)
        c.refresh(listing, token, during, started, self._clock.elapsed())
        if listing.stale_new:
            collect_stale_new(store, listing.stale_new, store.url)

    def _list(self, now_ms: int, fed: bool, seen_young: set[str]) -> Listing:
        """One listing, sorted out: candidates (ascending), names too young to
        trust yet, invisible names and their expiry, and stale ``.new`` leftovers."""
        store = self._store
        # "~" sorts after every id: with a feed, no name is young.
        young_before = "~" if fed else _young_from(now_ms)
        stale_before = stale_new_before(now_ms, self._new_grace_ms)
        visible: list[str] = []
        young: list[str] = []
        stale_new: list[str] = []
        pending: dict[str, int] = {}
        origins: dict[str, names.Records] = {}
        listed = passed = 0
        head = HEAD_NAMES if store.lists_in_order else math.inf
        for name in store.list():
            listed += 1
            if len(name) == names.ID_LEN:
                (visible if _settled(name, young_before, seen_young) else young).append(name)
            elif name.endswith(names.NEW_SUFFIX):
                if name < stale_before:
                    stale_new.append(name)
                continue
            elif (parsed := names.parse(name)) is not None and parsed.expiry_ms is not None:
                if parsed.expiry_ms > now_ms:
                    pending[name] = parsed.expiry_ms
                    continue
                visible.append(name)
            else:
                names.note_origin(origins, name)
                continue
            if self._passes_over(name[: names.ID_LEN]):
                passed += 1  # the head is what this receiver may claim
            elif len(visible) + len(young) - passed >= head:
                break  # in key order: the rest of the backlog is newer
        visible.sort()
        return Listing(visible, young, pending, stale_new, listed, origins)


def _count_before(plan: Plan) -> int:
    """The receive count of the message before this claim (its candidate's)."""
    had = names.parse(plan.candidate)
    assert had is not None
    return had.receive_count


def _young_from(now_ms: int) -> str:
    """Ready names from this one on were issued less than ``YOUNG_MS`` before ``now_ms``."""
    return f"{now_ms - YOUNG_MS:013d}"


def _settled(name: str, young_before: str, seen_young: set[str]) -> bool:
    """Whether a listed ready name may be claimed: issued before ``young_before``,
    or seen young by an earlier listing."""
    return name < young_before or name in seen_young


def _without_feed(listing: Listing, now_ms: int, seen_young: set[str]) -> Listing:
    """``listing``, taken at ``now_ms`` trusting a feed that then lost events,
    sorted as a listing without a feed: its young ready names wait for a
    second look."""
    young_before = _young_from(now_ms)
    visible: list[str] = []
    young = list(listing.young)
    for name in listing.visible:
        settled = len(name) != names.ID_LEN or _settled(name, young_before, seen_young)
        (visible if settled else young).append(name)
    return dataclasses.replace(listing, visible=visible, young=young)


class Unreadable:
    """Messages whose body one receiver could not read (a permanent ``EIO``
    or ``EACCES``, a store that fails one object): each is passed over for
    :data:`UNREADABLE_FIRST` seconds after its first failure, a pass-over
    doubled at each failure in a row up to :data:`UNREADABLE_MAX`, so that
    the next receive takes the messages behind it. Its claim was given back
    uncounted; other receivers pass it over on their own failures only."""

    def __init__(self) -> None:
        self._until: dict[str, tuple[float, float]] = {}  # id -> (until, pass-over)

    def __bool__(self) -> bool:
        """Whether any message is remembered as unreadable."""
        return bool(self._until)

    def waiting(self, message_id: str, now: Callable[[], float]) -> bool:
        """Whether ``message_id`` is passed over now (``now()``: elapsed seconds,
        read only if it failed before)."""
        found = self._until.get(message_id) if self._until else None
        return found is not None and now() < found[0]

    def update(self, failed: list[str], read: list[str], now: float) -> None:
        """Bodies of ``failed`` could not be read at ``now``; those of ``read``
        were. Forgets a message whose pass-over ended over UNREADABLE_MAX ago
        (another receiver read it, or it is gone): its failures are no longer
        in a row."""
        if self._until:
            for message_id in read:
                self._until.pop(message_id, None)
            for message_id in [
                i for i, (until, _) in self._until.items() if until < now - UNREADABLE_MAX
            ]:
                del self._until[message_id]
        for message_id in failed:
            _, pass_over = self._until.pop(message_id, (now, UNREADABLE_FIRST / 2))
            pass_over = min(2 * pass_over, UNREADABLE_MAX)
            self._until[message_id] = (now + pass_over, pass_over)
        while len(self._until) > UNREADABLE_REMEMBERED:
            del self._until[next(iter(self._until))]
