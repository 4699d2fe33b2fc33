"""The oracle: what a queue on a local directory would have allowed.

Given the history of every call and what a final drain found, it reports each
violation of the promises vsqs makes on every store:

* **errors**: every call returns or raises a ``VsqsError``;
* **one success per receipt**: of the acks, extends and releases that use one
  receipt, at most one succeeds (an ack and an extend of one receipt cannot
  both win);
* **one holder**: a message is not returned to a receiver while another
  receiver's hold of it (up to the expiry of its last successful extend or
  release) still runs, clock skew between the two aside;
* **nothing acknowledged comes back**: after an ack returned, the message is
  never received or drained again;
* **nothing lost**: every message whose send returned is acknowledged,
  deleted by a purge it overlapped, or drained in the end (which also means it
  became visible again);
* **no duplicate**: a drain finds each message once;
* the one exception: a message moved to another queue (dead-lettered,
  redriven) is moved at least once (``docs/guarantees.md``): a move cut short
  between its publish and its removal at the source, or whose publish landed
  late, leaves a second copy. So duplicates, two holders at once (of the
  two copies) and redeliveries after an ack of the ``moved`` ids pass;
  losses do not;
* **no leftover**: after the drain and a ``gc()``, only the queues' config
  objects are left;
* **origin records**: every message drained from the dead-letter queue
  shows where it came from (``dead_lettered``): its record is written
  before it is published, and deleted only with it (issue 26, class 3);
* **one copy per id**: a queue never holds two copies of a message under
  one id: no message name is created (not copied: a move's target) while
  another name of its id lives in its queue. A second copy (a move cut
  short, two moves at once, a create that landed late) has a sibling id of
  its own (issue 26, class 4: two dead-letterings of one message at once);
* **truthful ``DeleteResult``**: a ``delete_batch`` is judged as the acks it
  made, each with the outcome it reported (``deleted``: returned; ``stale``:
  ``ReceiptExpired``; ``failed``: unknown), by the rules above: a receipt
  said deleted never comes back, one said stale was not deleted by it;
* **an ack fails only for a cause**: an ack (``delete`` or a receipt of
  ``delete_batch``) that failed with ``StorageError`` had a request raise
  after the client's retries (but a failed delete of an origin record,
  which fails no ack: issue 26, class 10), or took half ``FINISH_AFTER``;
* **``vsqs move`` loses nothing**: a batch it moved is judged at its
  source as a ``delete_batch`` (above), and each message of it, whatever
  the move's outcome (it may have died between its send and its delete),
  is drained from its destination (under an id of its own), or is still
  somewhere (drained from another queue), or was acknowledged by another
  receipt or purged since;
* **a Spark write publishes each row once or never**: a write aborted
  before its commit publishes none of its rows, one whose commit returned
  publishes each, and none is published twice unless a request of the
  commit raised (a create of unknown outcome is published again under a
  fresh id: at least once) (issue 26, class 7: restamped rows); what it
  staged is gone after the final ``gc()`` (no leftover, above);
* **``stats()`` reads and counts each message once**: a ``stats()`` call
  writes nothing (no create, no copy: it finishes no move; a probe that
  measures the store's clock is no message), and the
  messages it counts in a queue (ready, in flight, delayed; and the
  dead-letter queue's depth) are no more than the ids that had a message
  name there at some time while it ran (issue 26, class 6: a settled
  listing that finished an abandoned move counted it at its source and its
  target);
* **batches shown whole**: no message of a ``send_batch`` that returned is
  claimed before all of them exist, unless the send took half
  ``FINISH_AFTER`` or a request of it raised (a create of unknown outcome
  is sent again under a fresh id after the rest) (issue 26, class 5: two
  batches of one ``Queue`` at once);
* **truthful receive counts**: a claim in the source queue (a key whose
  receive count is one up, ``run.claims_of``) whose count shows again later
  (the message's next key counts as many or more: it was claimed again,
  extended, dead-lettered) was delivered by a receive, or its receive had a
  reason not to deliver it: its process died, a request of it raised after
  the client's retries (any error but a failed body read), or it took as
  long as its visibility timeout (or half ``FINISH_AFTER``: a claim too slow
  to tell its outcome). A claim made by another client's request (a lister
  finishing an abandoned move) or landing after its client gave up is
  excused too, and so is a claim past ``max_receives`` (dead-lettered). A
  failed body read alone gives the claim back, uncounted, and returns what
  the batch read (issue 26, class 9); what users see of it is a receive
  count above the deliveries, and a message dead-lettered unreceived;
* **per message, whatever the object** (issue 32): a part of a bundle is
  one object holding many messages; every check above judges messages
  (``Message.id``, what ``send_batch`` returned), reading each part's
  name as the messages its set names (``parts``); a bundled message's
  receipt is ``<its part's held name>#<place>``;
* **a stale receipt acks nothing**: an ack that began after a receive of
  its message with a higher receive count returned does not succeed;
* **receive counts never go back**: a receive of a message (or the final
  drain) that began after another in its queue returned counts more;
* **groups and deduplication ids** (issue 29): ``fifo``'s checks (one
  holder per group, a group's order, targeted receives, groups kept, one
  message per deduplication id in its window); a send of a deduplication id
  returns an id sent before it, which the loss check judges at its first
  send (a message whose sender died after its record is published by the
  next duplicate send or ``gc()``: the drain's finds it).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from vsqs import _names as names
from vsqs.stores._moves import MOVED_SUFFIX
from vsqs.stores._probe import PROBE_PREFIX

from . import fifo, parts
from .bucket import Change
from .workload import Event


@dataclass
class Hold:
    event: Event
    queue: str
    id: str
    receipt: str
    count: int
    start: float  # when the receive returned (the bucket's clock)
    end: float  # when the hold surely ended
    acked: Event | None = None
    #: When the claim was made (the bucket's clock): its expiry less its timeout.
    claimed: float = -math.inf


@dataclass
class Claim:
    """A claim of a message (a key whose receive count is one up), from the bucket."""

    name: str
    parsed: names.Name
    at: float  # when it was written (the bucket's clock)
    writer: str  # the actor whose request wrote it ("": an orphan)
    following: int | None  # the receive count of the message's next key, if any


@dataclass
class Drained:
    queue: str
    id: str
    body: bytes
    count: int
    #: Whether a dead letter showed its origin record (``dead_lettered``).
    record: bool | None = None


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.violations

    def add(self, what: str) -> None:
        self.violations.append(what)


def _expiry(receipt: str, event: Event, store_clock: bool) -> float:
    """A name's expiry on the bucket's clock. ``event`` wrote it on its
    writer's wall clock (off by ``event.skew``), or, on a store that tells its
    time (``store_clock``), on the bucket's clock as the writer measured it:
    off by the steps of its wall clock since."""
    parsed = parts.held_name(receipt)
    assert parsed.expiry_ms is not None, receipt
    off = event.skew - event.measured if store_clock else event.skew
    return parsed.expiry_ms / 1000 - off


def judge(
    events: list[Event],
    drained: list[Drained],
    leftovers: list[str],
    errors: list[str],
    tolerance: float,
    moved: set[str] = frozenset(),  # type: ignore[assignment]
    aliases: dict[str, str] | None = None,
    max_receives: int | None = None,
    faulted: list[tuple[str, float, str]] | None = None,
    claims: list[Claim] | None = None,
    born: dict[str, float] | None = None,
    changes: list[Change] | None = None,
    written: dict[str, bytes] | None = None,
    store_clock: bool = False,
) -> Verdict:
    """Check a finished run; ``tolerance``: the largest clock difference between
    clients; ``moved``: ids of messages that entered another queue;
    ``aliases``: the sibling ids of second copies, mapped to the sent id;
    ``max_receives``: the source queue's (None: no dead-letter queue);
    ``faulted``: the faults vsqs saw, by actor (``Scheduler.faulted``);
    ``claims``: every claim in the source queue (``run.claims_of``);
    ``born``: when each id (as sent) first had a key in the source queue;
    ``changes``: every write and delete of the bucket (``Bucket.changes``),
    ``written``: the bytes first written to each key (``Bucket.written``);
    ``store_clock``: names are written on the bucket's clock (as each client
    measured it: a store that tells its time), not on the writer's."""
    verdict = Verdict()
    moves = {r for e in events if e.op == "move" for r in e.acked}
    events = [one for event in events for one in _each_ack(event)]
    _check_failed_acks(events, faulted or [], verdict)
    # By the ids as received: each copy of a message has counts of its own.
    _check_counts(events, claims or [], max_receives, faulted or [], verdict)
    _check_batches(events, claims or [], born or {}, faulted or [], verdict)
    _check_one_copy_per_id(changes or [], written or {}, verdict)
    _check_stats(events, changes or [], written or {}, verdict)
    _check_spark_writes(events, written or {}, faulted or [], verdict)
    if aliases:
        events = [replace(e, ids=[aliases.get(i, i) for i in e.ids]) for e in events]
        drained = [replace(d, id=aliases.get(d.id, d.id)) for d in drained]
    _check_moves(events, moves, drained, verdict)
    for error in errors:
        verdict.add(f"errors: {error}")
    holds: dict[str, Hold] = {}  # receipt -> the hold it belongs to
    by_id: dict[tuple[str, str], list[Hold]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.end):
        if event.op == "receive" and event.ok:
            for message_id, receipt, count in zip(
                event.ids, event.receipts, event.counts, strict=True
            ):
                expiry = _expiry(receipt, event, store_clock)
                hold = Hold(event, event.queue, message_id, receipt, count, event.end, expiry,
                            claimed=expiry - event.visibility)  # fmt: skip
                holds[receipt] = hold
                by_id[event.queue, message_id].append(hold)
    excused = set(moved)
    _check_receipts(events, holds, store_clock, verdict)
    _check_holders(by_id, tolerance, excused, verdict)
    _check_stale_acks(by_id, excused, verdict)
    _check_counts_rise(by_id, drained, excused, verdict)
    purges = [(e.start, e.end) for e in events if e.op == "purge"]
    fifo.check_exclusive(by_id, tolerance, verdict.add, purges)
    acked = _check_acks(events, by_id, drained, excused, verdict)
    _check_loss(events, acked, drained, verdict)
    for (queue, message_id), n in Counter((d.queue, d.id) for d in drained).items():
        if n > 1 and message_id not in excused:
            verdict.add(f"duplicate: {message_id} drained {n} times from {queue}")
    seen_in = defaultdict(set)
    for d in drained:
        seen_in[d.id].add(d.queue)
    for message_id, queues in seen_in.items():
        if len(queues) > 1 and message_id not in excused:
            verdict.add(f"duplicate: {message_id} drained from {sorted(queues)}")
    for d in drained:
        if d.record is False:
            verdict.add(f"no origin record: {d.id} drained from {d.queue} without dead_lettered")
    for name in leftovers:
        verdict.add(f"leftover: {name}")
    return verdict


def _check_receipts(
    events: list[Event], holds: dict[str, Hold], store_clock: bool, verdict: Verdict
) -> None:
    """At most one successful settle per receipt; follow extends to their new
    receipts (``store_clock``: as in :func:`judge`)."""
    won: dict[str, Event] = {}
    for event in sorted(events, key=lambda e: e.end):
        if event.op not in ("delete", "extend", "release") or event.receipt is None:
            continue
        hold = holds.get(event.keys[0] if event.keys else event.receipt)
        if not event.ok:
            if hold is not None and event.error != "ReceiptExpired":
                # Cut short (its outcome unknown): it may have moved the
                # message to an earlier expiry, ending the hold then.
                hold.end = min(hold.end, event.start + event.visibility)
            continue
        if event.receipt in won:
            first = won[event.receipt]
            verdict.add(
                f"receipt used twice: {first.op} by {first.actor} and {event.op} by "
                f"{event.actor} both succeeded on {event.receipt}"
            )
        won[event.receipt] = event
        if hold is None:
            continue
        if event.op == "extend":
            for receipt in event.receipts:
                holds[receipt] = hold
                hold.end = _expiry(receipt, event, store_clock)
        elif event.op == "release":
            hold.end = event.start  # visible again after its delay; at the earliest now
        else:
            hold.acked = event
            hold.end = min(hold.end, event.end)


def _check_holders(
    by_id: dict[tuple[str, str], list[Hold]],
    tolerance: float,
    excused: set[str],
    verdict: Verdict,
) -> None:
    for (queue, message_id), holds in by_id.items():
        if message_id in excused:
            continue  # two copies of a message moved twice are two messages
        holds.sort(key=lambda h: h.start)
        for i, earlier in enumerate(holds):
            for later in holds[i + 1 :]:
                if later.start < earlier.end - tolerance:
                    verdict.add(
                        f"two holders: {message_id} in {queue} returned to "
                        f"{later.event.actor} at {later.start:.3f} (count {later.count}) while "
                        f"{earlier.event.actor}'s hold (count {earlier.count}) ran until "
                        f"{earlier.end:.3f}"
                    )


def _check_stale_acks(
    by_id: dict[tuple[str, str], list[Hold]], excused: set[str], verdict: Verdict
) -> None:
    """A stale receipt acks nothing: an ack that began after a receive of its
    message with a higher count returned (that claim landed first: the
    receipt it used named a state gone since) cannot succeed."""
    for (queue, message_id), holds in by_id.items():
        if message_id in excused:
            continue
        for hold in holds:
            ack = hold.acked
            newer = [h for h in holds if h.count > hold.count and ack and h.start < ack.start]
            if ack is not None and newer:
                verdict.add(
                    f"stale receipt acked: {message_id} in {queue}, received again by "
                    f"{newer[0].event.actor} at {newer[0].start:.3f} (count {newer[0].count}), "
                    f"acked at {ack.start:.3f} by {ack.actor} with {ack.receipt} "
                    f"(count {hold.count})"
                )


def _check_counts_rise(
    by_id: dict[tuple[str, str], list[Hold]],
    drained: list[Drained],
    excused: set[str],
    verdict: Verdict,
) -> None:
    """A message's receive count never goes back: a receive (or the final
    drain) that began after another of the message in its queue returned
    counts more (a message moved between queues starts again there)."""
    last: dict[tuple[str, str], Hold] = {}
    for (queue, message_id), holds in by_id.items():
        if message_id in excused:
            continue
        for earlier in holds:
            for later in holds:
                if later.event.start > earlier.event.end and later.count <= earlier.count:
                    verdict.add(
                        f"receive count went back: {message_id} in {queue}, count "
                        f"{earlier.count} to {earlier.event.actor} at {earlier.start:.3f}, then "
                        f"{later.count} to {later.event.actor} at {later.start:.3f}"
                    )
            if (queue, message_id) not in last or earlier.count > last[queue, message_id].count:
                last[queue, message_id] = earlier
    for d in drained:
        before = last.get((d.queue, d.id))
        if before is not None and d.count <= before.count:
            verdict.add(
                f"receive count went back: {d.id} drained from {d.queue} with count {d.count}, "
                f"received with count {before.count} by {before.event.actor} at "
                f"{before.start:.3f}"
            )


def _check_acks(
    events: list[Event],
    by_id: dict[tuple[str, str], list[Hold]],
    drained: list[Drained],
    excused: set[str],
    verdict: Verdict,
) -> set[str]:
    acked: dict[str, Event] = {}
    for event in events:
        if event.op == "delete" and event.ok and event.ids:
            acked.setdefault(event.ids[0], event)
    for message_id, ack in acked.items():
        if message_id in excused:
            continue
        for (_, other_id), others in by_id.items():
            if other_id != message_id:
                continue
            for hold in others:
                # A receive that returned after the ack but claimed before it
                # holds a stale receipt: two holders, judged with the skew.
                if hold.start > ack.end and not (
                    hold.event.start < ack.end and hold.claimed < ack.end
                ):
                    verdict.add(
                        f"acknowledged came back: {message_id} acked by {ack.actor} at "
                        f"{ack.end:.3f}, received by {hold.event.actor} at {hold.start:.3f}"
                    )
        for d in drained:
            if d.id == message_id:
                verdict.add(
                    f"acknowledged came back: {message_id} acked by {ack.actor}, "
                    f"drained from {d.queue}"
                )
    return set(acked)


def _check_loss(
    events: list[Event], acked: set[str], drained: list[Drained], verdict: Verdict
) -> None:
    found = {d.id for d in drained}
    maybe_deleted = {
        e.ids[0] for e in events if e.op == "delete" and e.ids and e.error != "ReceiptExpired"
    }
    purges = [e for e in events if e.op == "purge"]
    refused = {
        e.ids[0] for e in events if e.op == "delete" and e.ids and e.error == "ReceiptExpired"
    }
    judged: set[str] = set()
    for event in sorted(events, key=lambda e: e.start):
        if event.op not in ("send", "send_batch") or not event.ok:
            continue
        for message_id in event.ids:
            if message_id in acked or message_id in found or message_id in maybe_deleted:
                continue
            if message_id in judged:
                continue  # a send of a deduplication id returned it again: judged at its first
            judged.add(message_id)
            if any(event.start < p.end for p in purges):
                continue  # sent before a purge ended: it may have been purged
            if message_id in refused:
                verdict.add(f"lost: {message_id}, deleted by an ack that raised ReceiptExpired")
            else:
                verdict.add(f"lost: {message_id} (sent by {event.actor} at {event.end:.3f})")


def _check_counts(
    events: list[Event],
    claims: list[Claim],
    max_receives: int | None,
    faulted: list[tuple[str, float, str]],
    verdict: Verdict,
) -> None:
    """Truthful receive counts (the module's docstring)."""
    delivered = {r for e in events if e.op == "receive" and e.ok for r in e.receipts}
    receives = defaultdict(list)
    for event in events:
        if event.op == "receive":
            receives[event.actor].append(event)
    faults = defaultdict(list)
    for actor, at, kind in faulted:
        if kind != "read_error":
            faults[actor].append(at)
    for claim in claims:
        if claim.name in delivered or claim.following is None:
            continue  # delivered, or its count never showed again
        if claim.following < claim.parsed.receive_count:
            continue  # given back, uncounted
        if max_receives is not None and claim.parsed.receive_count > max_receives:
            continue  # dead-lettered
        by = [e for e in receives.get(claim.writer, []) if e.start <= claim.at <= e.end]
        if not by:
            continue  # finished by another client (a lister), or landed late
        event = by[0]
        if (
            event.end == math.inf
            or any(event.start <= at <= event.end for at in faults[event.actor])
            or event.end - event.start >= min(event.visibility, 4.9) - 0.01
        ):
            continue  # cut short, faulted, or too slow: it may have lost its claim
        verdict.add(
            f"receive count: {claim.name} was counted but not delivered by "
            f"{event.actor}'s receive ({event.error or 'ok'} at {event.end:.3f}), "
            f"which met no fault but failed body reads"
        )


def _each_ack(event: Event) -> list[Event]:
    """A ``delete_batch`` as the acks it made, one per receipt, each with the
    outcome its ``DeleteResult`` gave: "deleted" an ack that returned,
    "stale" one that raised ``ReceiptExpired``, "failed" one that raised
    ``StorageError`` (an outcome unknown); a call that raised or was cut
    short left each outcome unknown."""
    if event.op not in ("delete_batch", "move"):
        return [event]
    outcomes = event.outcomes if event.ok else ["unknown"] * len(event.acked)
    errors = {"deleted": "", "stale": "ReceiptExpired", "failed": "StorageError"}
    keys = event.keys or event.acked  # a move's receipts are as its receive returned them
    return [
        replace(
            event,
            op="delete",
            ids=[message_id],
            receipt=receipt,
            keys=[key],
            ok=outcome == "deleted",
            error=errors.get(outcome, event.error),
        )
        for message_id, receipt, key, outcome in zip(
            event.ids, event.acked, keys, outcomes, strict=True
        )
    ]


def _check_failed_acks(
    events: list[Event], faulted: list[tuple[str, float, str]], verdict: Verdict
) -> None:
    """An ack fails (``StorageError``) only for a cause: a request of its call
    raised after the client's retries (a failed delete of an origin record
    aside: the ack's outcome is the message's), its process died, or it was
    slow enough (half ``FINISH_AFTER``) that its outcome is unknown."""
    faults = defaultdict(list)
    for actor, at, kind in faulted:
        if kind != "record_error":
            faults[actor].append(at)
    for event in events:
        if event.op != "delete" or event.error != "StorageError":
            continue
        if event.end - event.start >= 4.9 or any(
            event.start <= at <= event.end for at in faults[event.actor]
        ):
            continue
        verdict.add(
            f"ack failed for nothing: {event.receipt} by {event.actor} at {event.end:.3f} "
            f"met no fault but failed origin-record deletes"
        )


def _check_batches(
    events: list[Event],
    claims: list[Claim],
    born: dict[str, float],
    faulted: list[tuple[str, float, str]],
    verdict: Verdict,
) -> None:
    """A batch is shown whole: none of its messages is claimed before every
    one of them exists, unless its send took so long (half ``FINISH_AFTER``)
    that listers took its marker for an abandoned one, or a request of it
    raised (a create whose outcome was unknown is sent again under a fresh
    id, after the rest of its chunk: ``docs/protocol.md``)."""
    faults = defaultdict(list)
    for actor, at, _ in faulted:
        faults[actor].append(at)
    first: dict[str, float] = {}
    for claim in claims:
        first[claim.parsed.id] = min(claim.at, first.get(claim.parsed.id, math.inf))
    for event in events:
        if event.op != "send_batch" or not event.ok or event.end - event.start >= 4.9:
            continue
        if any(event.start <= at <= event.end for at in faults[event.actor]):
            continue
        shown = min((first.get(i, math.inf) for i in event.ids), default=math.inf)
        late = [i for i in event.ids if born.get(i, math.inf) > shown]
        if late:
            verdict.add(
                f"batch shown in part: a message of {event.actor}'s batch was claimed at "
                f"{shown:.3f}, before {late[0]} existed"
            )


def _check_one_copy_per_id(
    changes: list[Change], written: dict[str, bytes], verdict: Verdict
) -> None:
    """One copy per id (the module's docstring): a message name created (a
    send, a move's publish: not a copy) while a name of its id lives in its
    queue, and no delete of that name was committed (a marker with an empty
    target: it is on its way out), is a second copy under one id. A part of
    a bundle is a name of each message it holds."""
    live: dict[tuple[str, str], set[str]] = defaultdict(set)
    for at, kind, key, _ in changes:
        queue, _, name = key.rpartition("/")
        if name.endswith(MOVED_SUFFIX) and kind == "put" and written[key].startswith(b"\n"):
            name = name[: -len(MOVED_SUFFIX)]  # a committed delete
            kind = "delete"
        parsed = names.parse(name)
        if parsed is None or parsed.state == names.NEW:
            continue
        for message_id in parts.ids_in(parsed, written[f"{queue}/{name}"]):
            copies = live[queue, message_id]
            if kind == "delete":
                copies.discard(name)
                continue
            if kind == "put" and copies - {name}:
                verdict.add(
                    f"two copies under one id: {message_id} created in "
                    f"{queue.rpartition('/')[2]} as {name} at {at:.3f} while "
                    f"{sorted(copies)[0]} lived"
                )
            copies.add(name)


def _check_stats(
    events: list[Event], changes: list[Change], written: dict[str, bytes], verdict: Verdict
) -> None:
    """``stats()`` reads and counts each message once (the module's docstring)."""
    lives: dict[tuple[str, str], list[list[float]]] = defaultdict(list)  # [born, gone]
    live: dict[str, list[float]] = {}
    for at, kind, key, writer in changes:
        queue, _, name = key.rpartition("/")
        for event in events:
            if (
                event.op == "stats"
                and writer == event.actor
                and kind != "delete"
                and not name.startswith(PROBE_PREFIX)  # a measure of the store's clock
                and event.start < at <= event.end
            ):
                verdict.add(f"stats changed something: {kind} {name} by {writer} at {at:.3f}")
        parsed = names.parse(name)
        if parsed is None or parsed.state == names.NEW:
            continue
        if kind == "delete":
            live.pop(key, [math.inf])[-1] = at
        elif key not in live:
            live[key] = [at, math.inf]
            for message_id in parts.ids_in(parsed, written[key]):
                lives[queue.rpartition("/")[2], message_id].append(live[key])
    for event in events:
        for queue, counted in event.counted.items():
            here = sum(
                any(born <= event.end and gone >= event.start for born, gone in spans)
                for (where, _), spans in lives.items()
                if where == queue
            )
            if counted > here:
                verdict.add(
                    f"stats counted twice: {event.actor}'s stats() counted {counted} messages "
                    f"in {queue}, of {here} ids there while it ran ({event.start:.3f}-"
                    f"{event.end:.3f})"
                )


def _check_moves(
    events: list[Event], moves: set[str], drained: list[Drained], verdict: Verdict
) -> None:
    """``vsqs move`` loses nothing (the module's docstring); ``events`` with
    each ack on its own (a move's too: ``moves``, its receipts)."""
    found = {d.body for d in drained}
    acked = {
        e.ids[0]
        for e in events
        if e.op == "delete" and e.ids and e.error != "ReceiptExpired" and e.receipt not in moves
    }
    purges = [e.end for e in events if e.op == "purge"]
    for event in events:
        if event.receipt not in moves or not event.bodies:
            continue
        message_id, body = event.ids[0], event.bodies[event.acked.index(event.receipt)]
        if body in found or message_id in acked or any(end > event.start for end in purges):
            continue
        verdict.add(
            f"lost by a move: {message_id} (moved by {event.actor} at {event.start:.3f}) is "
            f"neither in out nor anywhere else"
        )


def _check_spark_writes(
    events: list[Event],
    written: dict[str, bytes],
    faulted: list[tuple[str, float, str]],
    verdict: Verdict,
) -> None:
    """A Spark write publishes each row once or never (the module's docstring)."""
    # A row -> the ids it was published under, but for their nonces: a
    # copy that a move between queues published again (at least once) under
    # a sibling id is the same publish.
    published: dict[bytes, set[str]] = defaultdict(set)
    for key, data in written.items():
        queue, _, name = key.rpartition("/")
        parsed = names.parse(name)
        if queue.endswith("/src") and parsed is not None and parsed.state != names.NEW:
            published[data].add(parsed.id[: -names.NONCE_LEN])
    for event in events:
        if event.op != "spark_write":
            continue
        outcome = event.outcomes[0] if event.outcomes else "cut short"
        faults = any(a == event.actor and event.start <= at <= event.end for a, at, _ in faulted)
        for body in event.bodies:
            ids = published.get(body, set())
            if (outcome == "aborted" and ids) or (outcome == "committed" and not ids):
                verdict.add(
                    f"spark write: {event.actor}'s {outcome} write published {body!r} "
                    f"{len(ids)} times"
                )
            elif len(ids) > 1 and not faults:
                verdict.add(
                    f"spark write: {event.actor}'s write published {body!r} as {sorted(ids)}"
                )
