"""Claims: renaming candidates to held names, reading their bodies, giving back.

:class:`Claims` claims the oldest candidates of its :class:`~vsqs._view.View`
by renaming (docs/format.md): one at a time, or, where renames cost requests,
a batch side by side; reads the bodies outside the lock, hands a message past
its receive limit to dead-lettering, and gives back at once (uncounted) a
claim that delivered nothing. The long poll around it is
:class:`vsqs._receiver.Receiver`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import _meter as meter
from . import _names as names
from ._candidates import STALE_AFTER, Candidates
from ._envelope import read_limit
from ._errors import VsqsError
from ._fanout import fan_out
from ._groups import token_of
from ._plans import Claim, Plan, plan_of
from ._view import View
from .stores._base import Outcomes, OutcomeUnknown, TooLarge

log = logging.getLogger("vsqs")


#: ``exhausted(held, body)``: a claimed message past ``max_receives`` (its held
#: name and body) is dead-lettered; returns the name it leaves in flight here
#: (a blocker of its group, ``vsqs._dead_letter``), if any.
Exhausted = Callable[[str, bytes], str | None]


class Claims(View):
    """Claims and reads messages for one client; the lock of its view is held
    across the renames of a claim (or of a batch made side by side), never
    across body reads or dead-lettering."""

    def _claim_available(
        self,
        max_messages: int,
        vt_ms: int,
        max_receives: int | None,
        exhausted: Exhausted | None,
        max_size: int | None,
        target: str | None = None,
    ) -> list[Claim]:
        """Claim and read up to ``max_messages`` candidates: one at a time, or,
        where renames cost requests, as many at once as are still wanted.
        ``target``: only messages of the group with that token."""
        out: list[Claim] = []
        # Names this call made invisible join the expiry heap only when it
        # ends, so a short visibility timeout cannot bring a message back into
        # the same batch.
        claimed_ids: set[str] = set()
        later: list[tuple[str, int]] = []
        # Grouped names this call claimed: they hold their groups at once, and
        # this call may take their groups' next messages.
        mine: set[str] = set()
        planned: set[str] = set()  # groups with a claim in the current round
        relists = 0
        wide = self._store.renames_cost_requests
        failure: Exception | None = None
        try:
            while (got := sum(names.message_count(c.id) for c in out)) < max_messages:
                if failure is not None:
                    break
                with self._lock:
                    wanted = (max_messages - got, max_messages - got if wide else 1)
                    deferred: list[str] = []
                    planned.clear()
                    plans, relists = self._plan(
                        wanted, vt_ms, claimed_ids, later, relists, mine, deferred, target, planned
                    )
                    if not plans:
                        self._candidates.restore(deferred)
                        break
                    if planned:  # claims of groups: those decided too long ago go back
                        decided = self._clock.elapsed()
                        won = self._fresh(self._rename(plans), decided, later)
                    else:
                        won = self._rename(plans)
                    if planned or deferred:  # else no group is involved: nothing to hold
                        self._hold_groups(won, mine, deferred)
                claimed_ids.update([plan.id for plan in won])
                failure = self._read(won, max_receives, exhausted, max_size, out, later)
                if mine:  # else no claim of this call holds a group
                    self._undelivered(won, out, later, mine)
        except OSError as exc:  # a later listing or claim of the batch
            failure = exc
        finally:
            self._leave(later, mine)
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

    def _leave(self, later: list[tuple[str, int]], mine: set[str]) -> None:
        """The names a receive leaves held join the expiry heap; the grouped
        names it claimed (``mine``) that it does not leave held hold their
        groups no more."""
        with self._lock:
            for name, expiry in later:
                self._candidates.add_invisible(name, expiry)
            if mine:
                left = {name for name, _ in later}
                for name in mine:  # given back, or gone: no longer held here
                    if name not in left:
                        self._candidates.groups.drop(name)

    def _fresh(self, won: list[Plan], decided: float, later: list[tuple[str, int]]) -> list[Plan]:
        """The claims won, but for those of a group whose rename ended more than
        :data:`STALE_AFTER` after they were decided (a request or the process
        stalled): another client may have taken the group since, unseen by
        the view they were decided on. They are given back at once,
        uncounted, and their group stays closed until the next listing
        (caller holds the lock)."""
        c = self._candidates
        if self._clock.elapsed() - decided <= STALE_AFTER:
            return won
        stale = [plan for plan in won if names.group_of(plan.id) is not None]
        if not stale:
            return won
        for plan in stale:
            c.close_group(plan.candidate)
        later.extend(self._give_back([(plan.held, _count_before(plan)) for plan in stale]))
        return [plan for plan in won if plan not in stale]

    def _undelivered(
        self, won: list[Plan], out: list[Claim], later: list[tuple[str, int]], mine: set[str]
    ) -> None:
        """Claims that reached no caller (a read failed, a dead letter, one
        taken since) or whose timeout already ran out let this call take no
        more of their groups: a group's next message is consecutive only to
        one delivered and still held. One whose held name is gone holds its
        group no more."""
        now = self._clock.now_ms()
        delivered = {claim.name for claim in out if claim.expiry_ms > now}
        kept = {name for name, _ in later}
        with self._lock:
            mine.intersection_update(delivered | {plan.held for plan in won})
            for plan in won:
                if plan.held in mine and plan.held not in delivered:
                    mine.discard(plan.held)
                    if plan.held not in kept:
                        self._candidates.groups.drop(plan.held)

    def _hold_groups(self, won: list[Plan], mine: set[str], deferred: list[str]) -> None:
        """Claims won hold their groups at once (for every receive of this
        client); a group's next messages deferred behind a claim of this round
        are candidates again if it was won (caller holds the lock)."""
        groups = self._candidates.groups
        for plan in won:
            token = names.group_of(plan.id)
            if token is not None:
                groups.hold(plan.held)
                if self._candidates.fed:
                    groups.taken.add(plan.candidate)  # the feed will report it left
                mine.add(plan.held)
        won_groups = {names.group_of(plan.id) for plan in won}
        for name in deferred:
            token = token_of(name)
            if token in won_groups:
                self._candidates.restore([name])
            elif token is not None:
                groups.block(token)
                groups.park(token, name)

    def _plan(
        self,
        wanted: tuple[int, int],
        vt_ms: int,
        claimed_ids: set[str],
        later: list[tuple[str, int]],
        relists: int,
        mine: set[str],
        deferred: list[str],
        target: str | None,
        planned: set[str],
    ) -> tuple[list[Plan], int]:
        """The next claims to try, of distinct messages not claimed in this
        batch yet, ``wanted``: (messages, claims) at most, and the listings
        taken so far (caller holds the lock). A part of a bundle with more
        messages than are still wanted is split (:func:`_part_plan`). At most
        one message of a group is planned at a time: the group's next ones go
        to ``deferred`` until its claim is decided. ``planned`` (empty) gets
        the groups of the claims planned."""
        plans: list[Plan] = []
        messages, width = wanted
        ids = set(claimed_ids) if width > 1 else claimed_ids
        c = self._candidates
        while len(plans) < width and messages > 0:
            name, relists, now = self._next_candidate(relists, not plans, target)
            if name is None:
                break
            parsed = names.parse(name)
            token = None if parsed is None else names.group_of(parsed.id)
            if token is not None and not _admit(c, name, token, planned, mine, deferred):
                continue
            if parsed is None or parsed.state == names.NEW or not names.is_visible(parsed, now):
                c.close_group(name)
                continue  # foreign, or not visible (any more)
            if self._passes_over(parsed.id) or (
                not names.can_hold(parsed) and self._cannot_claim(parsed, name)
            ):
                c.close_group(name)
                continue  # back with the next listing, never due by itself: no spin
            if parsed.id in ids:  # not again in this batch
                if parsed.expiry_ms is not None:
                    later.append((name, parsed.expiry_ms))
                c.close_group(name)
                continue
            if token is not None:
                planned.add(token)
            if width > 1:
                ids.add(parsed.id)
            count = min(parsed.receive_count + 1, names.MAX_COUNT)  # as the name spells it
            expiry = self._clock.expiry_ms(vt_ms)
            plans.append(plan_of(name, parsed, messages, count, expiry, now))
            messages -= min(names.message_count(parsed.id), messages)
        return plans, relists

    def _rename(self, plans: list[Plan]) -> list[Plan]:
        """Rename each planned candidate to held; the plans won, in order
        (caller holds the lock). A storage error is raised if nothing was won."""
        store = self._store
        if len(plans) == 1:  # the common receive(): no batch to set up
            error = self._rename_one(plans[0])
            if error is None:
                self._candidates.losses = 0  # won: no loss in a row
                self._rests(plans)
                return plans
            errors: Outcomes = [error]
        else:
            whole = [(p.candidate, p.held) for p in plans if p.rest is None]
            done = iter(store.rename_batch(whole) if whole else [])
            errors = [next(done) if p.rest is None else self._rename_one(p) for p in plans]
        won: list[Plan] = []
        failure: OSError | None = None
        for plan, error in zip(plans, errors, strict=True):
            if error is None:
                self._candidates.losses = 0
                won.append(plan)
                continue
            self._candidates.close_group(plan.candidate)  # its head is not ours: nothing passes it
            if isinstance(error, OutcomeUnknown):
                # Slow enough that a lister may have finished it for us: not
                # ours to return; if it took effect, the message comes back at
                # the held name's expiry, as from a claimer that died.
                log.warning(
                    "%s: a claim of %s was too slow to tell its outcome", store.url, plan.candidate
                )
            elif isinstance(error, FileNotFoundError | FileExistsError):
                skipped = self._candidates.lost(store.renames_cost_requests)
                meter.observer.claim_conflict(store.url)
                log.debug("%s: lost a claim race; skipping %d candidates", store.url, skipped)
            else:
                failure = failure or error
        if failure is not None and not won:
            raise failure
        if failure is not None:  # what was won is returned; the error shows at the next call
            log.warning("%s: a claim failed: %s", store.url, failure)
        self._rests(won)
        return won

    def _rests(self, won: list[Plan]) -> None:
        """The rests of the parts split by claims won are candidates at once
        (caller holds the lock)."""
        for plan in won:
            if plan.rest is not None:
                self._candidates.restore([plan.rest])

    def _rename_one(self, plan: Plan) -> OSError | None:
        try:
            if plan.rest is None:
                self._store.rename(plan.candidate, plan.held)
            else:
                self._store.split(plan.candidate, plan.held, plan.rest)
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

        def read(plan: Plan) -> bytes:
            limit = None if max_size is None else read_limit(plan.id, max_size)
            return store.read(plan.held) if limit is None else store.read_limited(plan.held, limit)

        failure: Exception | None = None
        unread: list[Plan] = []
        first = len(out)  # claims of earlier rounds of the batch are in ``out`` already
        origins = self._candidates.origins
        bodies = fan_out(read, won, store.batch_width)
        for plan, outcome in zip(won, bodies, strict=True):
            error = outcome.exception()
            if isinstance(error, FileNotFoundError):
                continue  # already expired and taken by another receiver
            if isinstance(error, OSError) and not isinstance(error, TooLarge):
                unread.append(plan)
                failure = failure or error
                continue
            if isinstance(error, TooLarge):
                later.append((plan.held, plan.expiry_ms))
                self._pass_over(plan, error)
                continue
            body = outcome.result()
            try:
                if _exhausted(plan, max_receives) and exhausted is not None:
                    self._dead_letter(plan, body, exhausted)
                    continue
            except (OSError, VsqsError) as exc:
                later.append((plan.held, plan.expiry_ms))
                failure = failure or exc
                continue
            later.append((plan.held, plan.expiry_ms))
            origin = origins.get(plan.id, ()) or _bundle_records(origins, plan.id)
            out.append(Claim(plan.id, plan.held, plan.receive_count, plan.expiry_ms, body, origin))
        if unread:
            later.extend(self._give_back([(plan.held, _count_before(plan)) for plan in unread]))
        if unread or self._unreadable.until:
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

    def _dead_letter(self, plan: Plan, body: bytes, exhausted: Exhausted) -> None:
        """Move a claim past ``max_receives`` to the dead-letter queue; the
        blocker it may leave holds its group from now on."""
        blocker = exhausted(plan.held, body)
        if blocker is not None:
            with self._lock:
                self._candidates.add_invisible(blocker, names.MAX_EXPIRY_MS)

    def _unexpired(self, claimed: list[Claim]) -> list[Claim]:
        """Drop claims whose visibility timeout ran out before the batch returns
        (slow storage, or slow later claims of the batch): others may hold the
        message already. It is visible again, with its receive count. The
        later claims of its group in the batch are given back (uncounted):
        none is delivered before its group's head."""
        now = self._clock.now_ms()
        kept: list[Claim] = []
        lapsed: set[str | None] = set()  # groups whose claim in the batch ran out
        behind: list[str] = []
        for claim in claimed:
            if claim.expiry_ms <= now:
                log.warning(
                    "%s: the claim of %s outlasted its visibility timeout",
                    self._store.url,
                    claim.name,
                )
                lapsed.add(names.group_of(claim.id))
            elif lapsed and (group := names.group_of(claim.id)) is not None and group in lapsed:
                behind.append(claim.name)
            else:
                kept.append(claim)
        if behind:
            self.give_back(behind)
        return kept


def _admit(
    c: Candidates,
    name: str,
    token: str,
    planned: set[str],
    mine: set[str],
    deferred: list[str],
) -> bool:
    """Whether a candidate of group ``token`` may be planned now: its group is
    open (:meth:`Candidates.admit`) and has no claim in this round yet (else
    it is ``deferred`` until that claim is decided)."""
    if token in planned:
        deferred.append(name)
        return False
    return c.admit(name, token, mine)


def _bundle_records(origins: dict[str, names.Records], part_id: str) -> names.Records:
    """The origin records of a part's bundle (written under the id of the part
    that was moved in, which may have been split since)."""
    if not names.is_bundle(part_id):
        return ()
    core = names.lineage(part_id)
    return tuple(r for of, records in origins.items() if names.lineage(of) == core for r in records)


def _count_before(plan: Plan) -> int:
    """The receive count of the message before this claim (its candidate's)."""
    had = names.parse(plan.candidate)
    assert had is not None
    return had.receive_count


def _exhausted(plan: Plan, max_receives: int | None) -> bool:
    """Whether a claim is past ``max_receives``: one receive more than a
    message may have (its dead-lettering)."""
    return max_receives is not None and plan.receive_count > max_receives
