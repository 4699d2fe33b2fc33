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
  objects are left.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from vsqs import _names as names

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
class Drained:
    queue: str
    id: str
    body: bytes
    count: int


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.violations

    def add(self, what: str) -> None:
        self.violations.append(what)


def _expiry(receipt: str, skew: float) -> float:
    """A name's expiry on the bucket's clock (it was computed on a clock ``skew`` ahead)."""
    parsed = names.parse(receipt)
    assert parsed is not None and parsed.expiry_ms is not None, receipt
    return parsed.expiry_ms / 1000 - skew


def judge(
    events: list[Event],
    drained: list[Drained],
    leftovers: list[str],
    errors: list[str],
    tolerance: float,
    moved: set[str] = frozenset(),  # type: ignore[assignment]
    aliases: dict[str, str] | None = None,
) -> Verdict:
    """Check a finished run; ``tolerance``: the largest clock difference between
    clients; ``moved``: ids of messages that entered another queue;
    ``aliases``: the sibling ids of second copies, mapped to the sent id."""
    verdict = Verdict()
    if aliases:
        events = [replace(e, ids=[aliases.get(i, i) for i in e.ids]) for e in events]
        drained = [replace(d, id=aliases.get(d.id, d.id)) for d in drained]
    for error in errors:
        verdict.add(f"errors: {error}")
    holds: dict[str, Hold] = {}  # receipt -> the hold it belongs to
    by_id: dict[tuple[str, str], list[Hold]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.end):
        if event.op == "receive" and event.ok:
            for message_id, receipt, count in zip(
                event.ids, event.receipts, event.counts, strict=True
            ):
                expiry = _expiry(receipt, event.skew)
                hold = Hold(event, event.queue, message_id, receipt, count, event.end, expiry,
                            claimed=expiry - event.visibility)  # fmt: skip
                holds[receipt] = hold
                by_id[event.queue, message_id].append(hold)
    excused = set(moved)
    _check_receipts(events, holds, verdict)
    _check_holders(by_id, tolerance, excused, verdict)
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
    for name in leftovers:
        verdict.add(f"leftover: {name}")
    return verdict


def _check_receipts(events: list[Event], holds: dict[str, Hold], verdict: Verdict) -> None:
    """At most one successful settle per receipt; follow extends to their new receipts."""
    won: dict[str, Event] = {}
    for event in sorted(events, key=lambda e: e.end):
        if event.op not in ("delete", "extend", "release") or event.receipt is None:
            continue
        hold = holds.get(event.receipt)
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
                hold.end = _expiry(receipt, event.skew)
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
    for event in events:
        if event.op not in ("send", "send_batch") or not event.ok:
            continue
        for message_id in event.ids:
            if message_id in acked or message_id in found or message_id in maybe_deleted:
                continue
            if any(event.start < p.end for p in purges):
                continue  # sent before a purge ended: it may have been purged
            if message_id in refused:
                verdict.add(f"lost: {message_id}, deleted by an ack that raised ReceiptExpired")
            else:
                verdict.add(f"lost: {message_id} (sent by {event.actor} at {event.end:.3f})")
