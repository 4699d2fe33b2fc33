"""The candidate cache: what one receiver knows of its queue between listings.

:class:`Candidates` holds the names a receiver may claim next, oldest first,
the invisible names it knows of until they are due, and what the store's
arrival feed reported; :class:`Unreadable` the messages whose body it could
not read, passed over for a while. Neither sends a request: the listings
that fill them are :class:`vsqs._view.View`'s.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from . import _names as names
from ._groups import Groups, token_of
from .stores._base import Store

#: A cached listing is refreshed at least this often (seconds), so messages
#: whose visibility expired (or that other clients released) come back in FIFO
#: position within this delay, or within 20 listing times on huge backlogs.
STALE_AFTER = 1.0
#: Listings of more than THROTTLE_ABOVE names may take at most
#: 1/LISTING_BUDGET of a receiver's time; smaller ones are never throttled.
LISTING_BUDGET = 20
THROTTLE_ABOVE = 1000
#: On stores whose renames cost requests (object stores), the first lost claim
#: already skips fewer than 2**COSTLY_SPREAD candidates ahead (then twice as far
#: per loss in a row, up to 64): measured on moto with 4 consumers, lost claims
#: fell from 1.2 to 0.2 per message.
COSTLY_SPREAD = 5
#: A receiver passes over a message whose body it could not read for this
#: long (seconds), twice as long at each failure in a row, up to
#: UNREADABLE_MAX: one unreadable message never stops the others.
UNREADABLE_FIRST = 1.0
UNREADABLE_MAX = 60.0
#: Unreadable messages one receiver remembers (the oldest are forgotten).
UNREADABLE_REMEMBERED = 10_000
#: A receiver with an arrival feed reads it at least every FEED_EVERY claims.
FEED_EVERY = 64


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
    the last listing showed origin records of, with their names. ``groups``:
    what it knows of message groups (:class:`~vsqs._groups.Groups`).
    """

    __slots__ = (
        "by_group",
        "fed",
        "feed_tried",
        "gone",
        "groups",
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
        self.feed_tried = False  # a listing after the first: it started the feed if there is one
        self.skipped: list[str] = []  # fed: names skipped after lost races, to retry
        self.gone: set[str] = set()  # fed: ready names the feed saw leave
        self.since_feed = 0  # claims since the feed was last read
        self.origins: dict[str, names.Records] = {}
        self.groups = Groups()
        #: token -> the candidates of the group, ascending (some perhaps taken
        #: since): built by the first receive for that group after a listing
        self.by_group: dict[str, list[str]] = {}

    @property
    def listed(self) -> bool:
        """Whether a listing was taken (a client that never received keeps nothing)."""
        return self.token is not None

    # ------------------------------------------------------------- updates
    def add_invisible(self, name: str, expiry_ms: int) -> None:
        self.pending[name] = expiry_ms
        heapq.heappush(self.heap, (expiry_ms, name))
        if token_of(name) is not None:  # else it holds no group: no call more
            self.groups.hold(name)

    def _left(self, name: str) -> None:
        """An invisible name left the view: if its group opens, the names parked
        behind it are candidates again."""
        token = self.groups.drop(name)
        if token is not None:
            self.restore(self.groups.unpark(token))

    def admit(self, name: str, token: str, mine: set[str]) -> bool:
        """Whether a candidate of group ``token`` may be claimed: its group is
        open in this view, or held only by this very receive (``mine``: the
        names it claimed; a batch takes a group's consecutive messages).
        Else it is parked."""
        groups = self.groups
        held = groups.held.get(token)
        if (
            token not in groups.blocked
            and (held is None or held <= mine)
            and not any(y < name and token_of(y) == token for y in self.young)
        ):
            return True  # (an older name of the group waiting for a second look passes first)
        groups.park(token, name)
        return False

    def close_group(self, name: str) -> None:
        """This view passes over a candidate without claiming it: its group
        stays closed until the next listing (nothing behind it may pass it)."""
        token = token_of(name)
        if token is not None:
            self.groups.block(token)
            self.groups.park(token, name)

    def restore(self, restored: list[str]) -> None:
        """Candidates taken and not tried (a group's next message, deferred
        until its head's claim is decided) become candidates again."""
        for name in restored:
            self._insert(name)

    def _insert(self, name: str) -> None:
        """Make ``name`` a candidate in FIFO position (once)."""
        i = bisect.bisect_left(self.names, name, lo=self.pos)
        if i == len(self.names) or self.names[i] != name:
            self.names.insert(i, name)
            indexed = self.by_group.get(token_of(name) or "") if self.by_group else None
            if indexed is not None:
                bisect.insort(indexed, name)

    def add_ready(self, name: str) -> None:
        """This client published ``name`` (ready): a candidate in FIFO position,
        unless the feed reports it anyway."""
        if not self.fed:
            self._insert(name)

    def forget(self, name: str) -> None:
        """This client renamed or deleted ``name``: it is no candidate any more."""
        if self.pending.pop(name, None) is None:  # not invisible: maybe a candidate
            i = bisect.bisect_left(self.names, name, lo=self.pos)
            if i < len(self.names) and self.names[i] == name:
                del self.names[i]
        elif token_of(name) is not None:  # else it held no group
            self._left(name)
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
                # Another client took (or removed) a message of a group: the
                # feed does not follow its held name, so the group stays
                # closed here until the next listing shows it.
                token = token_of(name)
                if token is not None:
                    self.groups.left(name, token)
            elif names.is_id(name):
                self.gone.discard(name)
                self._insert(name)

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
                self._insert(name)
                self._left(name)
                promoted = True
        return promoted

    def take(self) -> str | None:
        """The next candidate, passed over for good (``None`` when they ran out)."""
        if self.pos >= len(self.names):
            return None
        name = self.names[self.pos]
        self.pos += 1
        return name

    def take_group(self, token: str) -> str | None:
        """The next candidate of group ``token`` (``None`` when there is none);
        the others stay candidates, in place. The first call for a group after
        a listing indexes its candidates (a search for its token in each
        name, at the speed of ``str``): later ones do not scan them."""
        wanted = self.by_group.get(token)
        if wanted is None:
            found = [name for name in self.names[self.pos :] if token in name]
            wanted = self.by_group[token] = [n for n in found if token_of(n) == token]
        while wanted:
            name = wanted.pop(0)
            i = bisect.bisect_left(self.names, name, lo=self.pos)
            if i < len(self.names) and self.names[i] == name:  # else taken since
                del self.names[i]
                return name
        return None

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
        self._close_groups(self.names[self.pos : end])
        self.pos = end
        return count

    def _close_groups(self, skipped: list[str]) -> None:
        """Skipped candidates close their groups in this view (nothing of a
        group may pass its head) until the next listing."""
        for name in skipped:
            token = token_of(name)
            if token is not None:
                self.groups.block(token)

    def retry_skipped(self) -> None:
        """Make the skipped names candidates again once the others ran out (fed only)."""
        if self.pos >= len(self.names) and self.skipped:
            gone = self.gone
            self.names[self.pos :] = [n for n in self.skipped if n not in gone]  # ascending
            self.by_group = {}
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
        self.feed_tried = self.listed
        self.pending = listing.pending
        self.heap = [(expiry, name) for name, expiry in listing.pending.items()]
        heapq.heapify(self.heap)
        self.groups.refresh(listing.pending)
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
        self.by_group = {}
        self._close_groups(visible[:start])
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

    def starts_feed(self, store: Store) -> bool:
        """Whether to list once more, whatever the listings cost, to start the
        store's arrival feed: the candidates ran out (a client draining a
        backlog pays for no events until then) and no listing tried it yet."""
        return self.pos >= len(self.names) and not self.feed_tried and not store.polled

    def next_expiry_ms(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def due(self, store: Store, now: float) -> bool:
        """Whether to list again before the next claim (possibly to find nothing).

        ``now``: the receiver's monotonic time, as ``listed_at`` was taken.
        """
        exhausted = self.pos >= len(self.names)
        if exhausted and self.fed and self.groups.waiting_on_news():
            return True  # a group closed on the feed's news may be open again: look
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


class Unreadable:
    """Messages whose body one receiver could not read (a permanent ``EIO``
    or ``EACCES``, a store that fails one object): each is passed over for
    :data:`UNREADABLE_FIRST` seconds after its first failure, a pass-over
    doubled at each failure in a row up to :data:`UNREADABLE_MAX`, so that
    the next receive takes the messages behind it. Its claim was given back
    uncounted; other receivers pass it over on their own failures only."""

    def __init__(self) -> None:
        #: id -> (until, pass-over); read it (``in``, truth) at no call's cost,
        #: change it through :meth:`update` only
        self.until: dict[str, tuple[float, float]] = {}

    def __bool__(self) -> bool:
        """Whether any message is remembered as unreadable."""
        return bool(self.until)

    def waiting(self, message_id: str, now: Callable[[], float]) -> bool:
        """Whether ``message_id`` is passed over now (``now()``: elapsed seconds,
        read only if it failed before)."""
        found = self.until.get(message_id) if self.until else None
        return found is not None and now() < found[0]

    def update(self, failed: list[str], read: list[str], now: float) -> None:
        """Bodies of ``failed`` could not be read at ``now``; those of ``read``
        were. Forgets a message whose pass-over ended over UNREADABLE_MAX ago
        (another receiver read it, or it is gone): its failures are no longer
        in a row."""
        if self.until:
            for message_id in read:
                self.until.pop(message_id, None)
            for message_id in [
                i for i, (until, _) in self.until.items() if until < now - UNREADABLE_MAX
            ]:
                del self.until[message_id]
        for message_id in failed:
            _, pass_over = self.until.pop(message_id, (now, UNREADABLE_FIRST / 2))
            pass_over = min(2 * pass_over, UNREADABLE_MAX)
            self.until[message_id] = (now + pass_over, pass_over)
        while len(self.until) > UNREADABLE_REMEMBERED:
            del self.until[next(iter(self.until))]
