"""A receiver's view of its queue: listing, the head of the backlog, what may be claimed.

:class:`View` keeps one receiver's :class:`~vsqs._candidates.Candidates`
(under one lock), fills them from listings and the store's arrival feed,
tells them what this client did itself (sends, extends, releases, deletes),
and decides which messages this receiver passes over: too large, unreadable
for now, or with no name left to claim them under. The claims are
:class:`vsqs._claims.Claims`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import math

from . import _forks
from . import _names as names
from ._candidates import Candidates, Listing, Unreadable
from ._dead_letter import Unblock, blockers
from ._groups import token_of
from ._inspect import collect_stale_new, stale_new_before
from .stores._base import Store

log = logging.getLogger("vsqs")

#: A ready name issued less than this before a listing started becomes a
#: candidate only once a second listing has seen it: a listing racing with a
#: producer may show the producer's newer message but not its older one
#: (docs/format.md, "FIFO"). It covers clock skew between hosts sharing a disk.
YOUNG_MS = 50
#: On stores that list in order (object stores), a listing stops once it has
#: found this many candidates (within the first page of 1 000 keys, if few are
#: in flight): a receive never lists the whole backlog.
HEAD_NAMES = 500


class View:
    """One receiver's candidates and what it passes over; see the module docstring.

    ``_lock`` guards the candidates: every method that changes them either
    takes it or says that its caller holds it.
    """

    def __init__(self, store: Store, clock: names.MsClock, new_grace_ms: int) -> None:
        self._store = store
        self._clock = clock
        self._new_grace_ms = new_grace_ms
        self._lock = _forks.lock()
        self._candidates = Candidates()
        #: Ids of messages this receiver passes over for good: too large to
        #: read, or with no name left to claim them under (docs/format.md).
        self._passed_over: set[str] = set()
        self._unreadable = Unreadable()
        #: Set where the queue's dead letters block their groups: removes the
        #: blockers a listing shows whose dead letter is gone (vsqs._dead_letter).
        self.unblock: Unblock | None = None

    @property
    def candidates(self) -> Candidates:
        """The current view (read it; only the receiver changes it)."""
        return self._candidates

    # ---------------------------------------------- what this client did
    def sent(self, name: str, visible_at: int | None) -> None:
        """Let this client's receives see its own send in FIFO order at once."""
        c = self._candidates
        if c.token is None:  # not listed (Candidates.listed, without the call)
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

    def _next_candidate(
        self, relists: int, may_list: bool, target: str | None = None
    ) -> tuple[str | None, int, int]:
        """The next name to try, the listings taken so far and the time in ms;
        ``None`` when there is none, or when a listing is due and not
        ``may_list`` (a listing taken before the planned claims are made
        would show their candidates again). ``target``: only names of that
        group token. The caller holds the lock."""
        store, c = self._store, self._candidates
        while True:
            now = self._clock.now_ms()
            promoted = c.promote_due(now)
            # A receive from one group reads the feed each time: its
            # candidates do not run out while other groups' are there.
            if c.fed and (c.feed_due(promoted) or target is not None):
                changes = store.changes(names.MAX_ID_LEN)
                if changes is None:
                    c.feed_lost()
                else:
                    c.add_changes(changes)
                c.retry_skipped()
            if c.due(store, self._clock.elapsed()) or (relists == 0 and c.starts_feed(store)):
                # A second look is for young names; on a polled store (always
                # "changed"), a listing that found nothing is not retried at once.
                if relists == 2 or not may_list or self._found_nothing(relists):
                    return None, relists, now
                self._relist(now, target)
                relists += 1
                continue
            name = c.take() if target is None else c.take_group(target)
            if name is None and target is not None and may_list and self._look_for(target, relists):
                self._relist(now, target)
                relists += 1
                continue
            if name is None or name not in c.gone:  # gone: the feed saw another take it
                return name, relists, now

    def _look_for(self, target: str, relists: int) -> bool:
        """Whether a receive from group ``target`` that found none of its
        candidates lists (again): once per call (the others' candidates are
        not this group's), and a second time for a second look at its young
        names; not where the feed told of every ready name since the last
        listing and the group is open in this view (expiries are found by the
        listings due anyway, as for any receive). The caller holds the lock."""
        c = self._candidates
        if c.fed and c.groups.is_open(target):
            return False
        if relists == 0:
            return True
        return relists == 1 and any(token_of(name) == target for name in self._candidates.young)

    def _found_nothing(self, relists: int) -> bool:
        """Whether this call's listing of a polled store found no candidate and
        no young name: looking again at once would cost a request for nothing."""
        c = self._candidates
        return relists == 1 and self._store.polled and not c.names and c.oldest_young is None

    def _passes_over(self, message_id: str) -> bool:
        """Whether this receiver passes over the message now (for good, or
        until the pass-over after a read that failed ends)."""
        if message_id in self._passed_over:
            return True
        unreadable = self._unreadable
        return message_id in unreadable.until and unreadable.waiting(
            message_id, self._clock.elapsed
        )

    def _cannot_claim(self, parsed: names.Name, name: str) -> bool:
        """A claim of ``name`` would leave its holder no name to let go of it
        to (:func:`~vsqs._names.can_hold` said no): it is passed over for
        good, with one warning; ``True`` (caller holds the lock)."""
        self._passed_over.add(parsed.id)
        log.warning(
            "%s: message %s cannot be received: its name has the last versions of the "
            "format, none left for a claim and its release; it is left in the queue, "
            "this receiver passes over it from now on (docs/format.md, names)",
            self._store.url,
            name,
        )
        return True

    # ----------------------------------------------------------- listing
    def _relist(self, now_ms: int, target: str | None = None) -> None:
        """Refresh the candidates from one listing (caller holds the lock)."""
        c, store = self._candidates, self._store
        started = self._clock.elapsed()
        # Drain (or start) the arrival feed first: with one, every name that
        # appears during or after this listing is reported, so no name needs
        # a second look. The first listing goes without: a client that drains
        # a backlog need not pay for events (its own claims are events too)
        # until it runs out.
        fed = c.listed and store.changes(names.MAX_ID_LEN) is not None
        token = store.change_token()
        listing = self._list(now_ms, fed, c.young, target)
        during = store.changes(names.MAX_ID_LEN) if fed else None
        if fed and during is None:
            # The feed lost events while it listed (an overflow): the names the
            # listing missed are lost with them, so it is trusted no more than
            # a listing without a feed (docs/format.md, "FIFO").
            listing = _without_feed(listing, now_ms, c.young)
        c.refresh(listing, token, during, started, self._clock.elapsed())
        if self.unblock is not None and (found := blockers(listing.pending)):
            for name in self.unblock(found, self._clock.elapsed()):
                # Its group goes on from a listing that started after the
                # look: a redrive publishes the dead letter at its source
                # before it leaves, perhaps behind this listing's pages.
                c.groups.block(token_of(name) or "")
                c.forget(name)
        for message_id in store.moving:  # another client's move under way: in flight
            group = names.group_of(message_id)
            if group is not None:
                c.groups.block(group)
        if listing.stale_new:
            collect_stale_new(store, listing.stale_new, store.url)

    def _list(
        self, now_ms: int, fed: bool, seen_young: set[str], target: str | None = None
    ) -> Listing:
        """One listing, sorted out: candidates (ascending), names too young to
        trust yet, invisible names and their expiry, and stale ``.new`` leftovers.
        Where it may stop early, it stops once it has the head of the queue
        (of group ``target``'s names only, for a receive from that group)."""
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
        grouped: set[str] = set()  # groups with a head (or an in-flight message) so far
        for name in store.list():
            listed += 1
            if "." not in name:  # a ready name, or foreign (a claim parses it)
                (visible if _settled(name, young_before, seen_young) else young).append(name)
            elif name.endswith(names.NEW_SUFFIX):
                if name < stale_before:
                    stale_new.append(name)
                continue
            elif (parsed := names.parse(name)) is not None and parsed.expiry_ms is not None:
                if parsed.expiry_ms > now_ms:
                    pending[name] = parsed.expiry_ms
                    if parsed.receive_count and parsed.group is not None:
                        grouped.add(parsed.group)
                    continue
                visible.append(name)
            else:
                names.note_origin(origins, name)
                continue
            # The head is what this receiver may claim (a store that lists
            # in no order is listed whole: no head to look for).
            if head < math.inf and not self._heads(name, target, grouped):
                passed += 1
            if len(visible) + len(young) - passed >= head:
                break  # in key order: the rest of the backlog is newer
        visible.sort()
        return Listing(visible, young, pending, stale_new, listed, origins)

    def _heads(self, name: str, target: str | None, grouped: set[str]) -> bool:
        """Whether a listed candidate counts towards the head of the queue: one
        this receiver may claim, the first of its group (and of ``target``'s,
        for a receive from one group); ``grouped``: the groups seen so far."""
        message_id = names.id_of(name)
        token = names.group_of(message_id)
        if self._passes_over(message_id) or token in grouped:
            return False
        if token is not None:
            grouped.add(token)
        return target is None or token == target


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
        settled = "." in name or _settled(name, young_before, seen_young)
        (visible if settled else young).append(name)
    return dataclasses.replace(listing, visible=visible, young=young)
