"""The oracle of message groups and deduplication ids (issue 29).

What it checks, each on the bucket's clock with the oracle's ``tolerance``:

* **one group, one holder**: no two messages of one group are held at once
  by two receives (a batch may hold a group's consecutive messages). A
  message is held from the return of the receive that delivered it until
  the earliest moment its hold may have ended: the start of its ack or
  release (a release with a delay keeps the group blocked until it is due:
  the oracle ends the hold earlier, which only excuses more), of a purge
  that ended after the hold began, or its expiry. Two copies of one message
  are the business of the "two holders" check (``oracle``), not this one.
* **a group's order**: messages of one group sent by one producer one after
  another (one send returned before the next began, or in one batch in
  its order) are first delivered in that order: a first delivery is the
  earliest receive that returned the message in the source queue, by the
  time it returned and its place in its batch; the final drain delivers
  after every receive, in its order. Not judged, as the protocol allows
  them out of order: a pair whose earlier message was sent with a delay (it
  joins its group when due), or was moved between queues (dead-lettered,
  redriven: it comes back under its old id, older than messages in flight
  or delivered since), or that a purge may have cut (a purge ended after the
  earlier send began, and began before the later delivery), or of a batch
  during which a request of its sender raised (a create of unknown outcome
  is sent again under a fresh id after the rest of its chunk), or sent with
  a deduplication id (its id may be another send's, older).
* **targeted receives**: a receive of one group (``group=``) returns only
  messages of that group; **groups and attributes kept**: a message is
  received in the group it was sent in, with the attributes it was sent
  with (single sends have them where the plan has groups), in every queue
  (moves keep them).
* **one message per deduplication id in its window**: in the window that
  the id's first record opens (from the time it names, ``dedup_window``
  long), every send of the id that returned returns one id, and the source
  queue gets one message of the id's body (the copies a move published of
  it, under its id or a sibling id, are that message). Excused, a known
  limit (``vsqs._dedup``): a record of the next slot created by a send that
  began before the record of the slot before it landed (two sends racing
  across a slot boundary both create). Later windows are not judged.
* **strict dead letters** (a queue with ``dead_letter_blocks_group``,
  ``check_strict``): while a dead letter of a group is in the dead-letter
  queue, no other message of its group is claimed in the source; a
  redriven one is claimed there before any message of its group behind it.
  Its liveness is the oracle's "lost" and "leftover" checks after a final
  drain that goes on past ``BLOCKER_CHECK`` (``run._drain``).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from vsqs import _names as names
from vsqs._dedup import Record, parse_name
from vsqs._envelope import dedup_token, group_token

from .bucket import Change
from .workload import Event

#: A delivery's place in time: (when its receive returned, its index in the
#: batch); the final drain's are (inf, their index in the drain).
Place = tuple[float, int]


class Held(Protocol):
    """What this oracle reads of ``oracle.Hold``."""

    event: Event
    id: str
    start: float
    end: float
    count: int
    acked: Event | None
    claimed: float


class Found(Protocol):
    """What this oracle reads of ``oracle.Drained``."""

    queue: str
    id: str


class Slot(NamedTuple):
    """A deduplication record as the bucket got it: its token and slot, when
    its first create landed (the bucket's time) and by whom, and what it
    recorded (the message's id, and when its window opened: ``at_ms`` on its
    sender's measure of the bucket's clock)."""

    token: str
    slot: int
    created: float
    writer: str
    record: Record


def records_of(changes: list[Change], written: Mapping[str, bytes], prefix: str) -> list[Slot]:
    """Every deduplication record created under ``prefix``, in order."""
    out = []
    for at, kind, key, writer in changes:
        parsed = parse_name(key[len(prefix) :]) if key.startswith(prefix) else None
        if kind != "put" or parsed is None or not parsed[2]:
            continue
        record = Record.decode(written[key])
        if record is not None and all(r.token != parsed[0] or r.slot != parsed[1] for r in out):
            out.append(Slot(parsed[0], parsed[1], at, writer, record))
    return out


def check_exclusive(
    by_id: Mapping[tuple[str, str], Sequence[Held]],
    tolerance: float,
    add: Callable[[str], None],
    purges: Sequence[tuple[float, float]] = (),
) -> None:
    """One group, one holder (the module's docstring); ``by_id``: the holds
    of each message, after the oracle settled when each ended; ``purges``:
    when each purge ran (it may end any hold it overlaps, from its start:
    also one that ended after the claim but before the receive returned)."""
    by_group: dict[tuple[str, str], list[Held]] = defaultdict(list)
    for (queue, message_id), holds in by_id.items():
        token = names.group_of(message_id)
        if token is not None:
            by_group[queue, token].extend(holds)
    for (queue, token), holds in by_group.items():
        holds.sort(key=lambda h: h.start)
        for i, earlier in enumerate(holds):
            end = earlier.end if earlier.acked is None else min(earlier.end, earlier.acked.start)
            end = min([end, *(start for start, stop in purges if stop > earlier.claimed)])
            for later in holds[i + 1 :]:
                if later.start >= end - tolerance:
                    break  # sorted by start: the rest start later still
                if later.event is earlier.event or later.id == earlier.id:
                    continue
                add(
                    f"group held twice: {later.id} of group {token} in {queue} returned to "
                    f"{later.event.actor} at {later.start:.3f} while {earlier.id} of its group, "
                    f"returned to {earlier.event.actor} at {earlier.start:.3f}, was held "
                    f"until {end:.3f}"
                )


def judge(
    events: list[Event],
    drained: Iterable[Found],
    add: Callable[[str], None],
    *,
    tolerance: float,
    moved: set[str],
    aliases: Mapping[str, str],
    created: list[tuple[float, str, bytes]],
    records: list[Slot],
    window: float,
    faulted: list[tuple[str, float, str]],
) -> None:
    """Check a finished run's groups and deduplication ids (the module's
    docstring); ``add``: the oracle's verdict's, given each violation;
    ``moved``: ids of messages that entered another queue; ``aliases``: the
    sibling ids of second copies, mapped to the sent id; ``created``: each
    message name created in the source queue (the bucket's time, id, body);
    ``records``: every deduplication record created (``records_of``);
    ``window``: the source queue's ``dedup_window``; ``faulted``: the
    faults vsqs saw, by actor (``Scheduler.faulted``)."""
    sent: dict[str, str | None] = {}  # an id's group, as its first send gave it
    attributes: dict[str, dict[str, str]] = {}  # and its attributes, where logged
    for e in sorted(events, key=lambda e: e.start):
        if e.op in ("send", "send_batch") and e.ok:
            for message_id, group in zip(e.ids, e.groups, strict=True):
                sent.setdefault(message_id, group)
            for message_id, attrs in zip(e.ids, e.attributes, strict=False):
                attributes.setdefault(message_id, attrs)
    for e in events:
        if e.op != "receive" or not e.ok:
            continue
        for message_id, group, attrs in zip(e.ids, e.groups, e.attributes, strict=True):
            if e.group is not None and names.group_of(message_id) != group_token(e.group):
                add(f"targeted receive: {e.actor}'s receive of group {e.group} got {message_id}")
            original = aliases.get(message_id, message_id)
            was = sent.get(original, group)
            if group != was:
                add(
                    f"group changed: {message_id}, sent in group {was}, was received in "
                    f"{e.queue} by {e.actor} at {e.end:.3f} in group {group}"
                )
            if attrs != attributes.get(original, attrs):
                add(
                    f"attributes changed: {message_id}, sent with {attributes[original]}, was "
                    f"received in {e.queue} by {e.actor} at {e.end:.3f} with {attrs}"
                )
    _check_order(events, drained, moved, faulted, add)
    _check_dedup(events, created, records, window, tolerance, aliases, add)


def _first_deliveries(events: list[Event], drained: Iterable[Found]) -> dict[str, Place]:
    first: dict[str, Place] = {}
    for e in sorted(events, key=lambda e: e.end):
        if e.op == "receive" and e.ok and e.queue == "src":
            for k, message_id in enumerate(e.ids):
                first.setdefault(message_id, (e.end, k))
    for k, d in enumerate(drained):
        if d.queue == "src":
            first.setdefault(d.id, (math.inf, k))
    return first


def _check_order(
    events: list[Event],
    drained: Iterable[Found],
    moved: set[str],
    faulted: list[tuple[str, float, str]],
    add: Callable[[str], None],
) -> None:
    """A group's order (the module's docstring)."""
    first = _first_deliveries(events, drained)
    purges = [e for e in events if e.op == "purge"]
    faults = defaultdict(list)
    for actor, at, _ in faulted:
        faults[actor].append(at)
    # Each producer's messages of each group, in send order.
    sent: dict[tuple[str, str], list[tuple[Event, str]]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e.start):
        if e.op not in ("send", "send_batch") or not e.ok or e.dedup is not None:
            continue
        for message_id in e.ids:
            token = names.group_of(message_id)
            if token is not None:
                sent[e.actor, token].append((e, message_id))
    for (actor, token), messages in sent.items():
        for i, (a_sent, a) in enumerate(messages):
            if a_sent.delay or a in moved or a not in first:
                continue
            for b_sent, b in messages[i + 1 :]:
                if b in moved or b not in first or first[b] > first[a]:
                    continue
                if b_sent is a_sent and any(
                    a_sent.start <= at <= a_sent.end for at in faults[actor]
                ):
                    continue  # a create of unknown outcome went again, after the rest
                if any(p.end > a_sent.start and p.start < first[b][0] for p in purges):
                    continue
                add(
                    f"group order: {b} of group {token}, sent by {actor} after {a}, was first "
                    f"delivered at {_when(first[b])}, before {a} at {_when(first[a])}"
                )


def _when(place: Place) -> str:
    return "the drain" if place[0] == math.inf else f"{place[0]:.3f}"


def _check_dedup(
    events: list[Event],
    created: list[tuple[float, str, bytes]],
    records: list[Slot],
    window: float,
    tolerance: float,
    aliases: Mapping[str, str],
    add: Callable[[str], None],
) -> None:
    """One message per deduplication id in its first window (the module's docstring)."""
    sends: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.dedup is not None:
            sends[e.dedup].append(e)
    for dedup_id, tried in sends.items():
        slots = sorted((r for r in records if r.token == dedup_token(dedup_id)), key=_slot)
        if not slots:
            continue  # no send got as far as its record
        closes = slots[0].record.at_ms / 1000 + window - tolerance
        raced = _raced(slots, events)
        returned = sorted({e.ids[0] for e in tried if e.ok and e.end < closes} - raced)
        if len(returned) > 1:
            add(f"dedup id {dedup_id!r}: sends in its window returned {returned}")
        body = tried[0].bodies[0]
        made = {aliases.get(i, i) for at, i, b in created if b == body and at < closes}
        if len(made - raced) > 1:
            add(
                f"dedup id {dedup_id!r}: {len(made)} messages created in its window: {sorted(made)}"
            )


def _slot(record: Slot) -> int:
    return record.slot


def _raced(slots: list[Slot], events: list[Event]) -> set[str]:
    """The ids of records that a send created across a slot boundary, racing
    the send that created the slot before (the known limit in the module's
    docstring): its send began before that record landed, or is unknown."""
    out = set()
    for before, record in itertools.pairwise(slots):
        if record.slot != before.slot + 1:
            continue
        by = [
            e
            for e in events
            if e.actor == record.writer and e.dedup is not None and e.start <= record.created
        ]
        if not record.writer or any(e.start < before.created for e in by[-1:]):
            out.add(record.record.id)
    return out


class Claimed(Protocol):
    """What the strict rule reads of ``oracle.Claim``."""

    parsed: names.Name
    at: float
    writer: str


#: A message's FIFO position (``<ms>-<seq>-``, kept under any id a move
#: gives it) and group token.
Spot = tuple[str, str]


def _spot(message_id: str) -> Spot | None:
    token = names.group_of(message_id)
    return None if token is None else (message_id[: names.ID_LEN - names.NONCE_LEN], token)


def presence(
    changes: Iterable[Change], prefix: str, keep: Callable[[names.Name], bool]
) -> dict[Spot, list[tuple[float, float]]]:
    """When a message of each grouped spot was under ``prefix``: the spans
    during which at least one key of it that ``keep`` accepts existed there
    (``inf``: to the end)."""
    live: dict[Spot, set[str]] = defaultdict(set)
    spans: dict[Spot, list[tuple[float, float]]] = defaultdict(list)
    for at, kind, key, _ in changes:
        parsed = names.parse(key[len(prefix) :]) if key.startswith(prefix) else None
        spot = None if parsed is None or not keep(parsed) else _spot(parsed.id)
        if spot is None:
            continue
        keys = live[spot]
        if kind == "delete":
            if key in keys:
                keys.discard(key)
                if not keys:
                    spans[spot][-1] = (spans[spot][-1][0], at)
        elif key not in keys:
            if not keys:
                spans[spot].append((at, math.inf))
            keys.add(key)
    return spans


def _any_name(name: names.Name) -> bool:
    return True


def _not_a_blocker(name: names.Name) -> bool:
    return name.state != names.NEW and name.expiry_ms != names.MAX_EXPIRY_MS


def _a_blocker(name: names.Name) -> bool:
    return name.expiry_ms == names.MAX_EXPIRY_MS


def check_strict(
    changes: list[Change],
    src: str,
    dlq: str,
    claims: Iterable[Claimed],
    events: list[Event],
    add: Callable[[str], None],
) -> None:
    """The strict dead-letter rule (``dead_letter_blocks_group``), on the
    bucket's clock: while a dead letter of group g is in the dead-letter
    queue ``dlq`` (a name at its FIFO position and of its group: under its
    id or a sibling's, a move under way too), no other message of g is
    claimed in the source ``src``; and once a redrive published it back in
    ``src``, no message of g behind it is claimed there while it waits
    unclaimed. Judged: a message's first dead letter, and each later one
    whose dead-lettering left a blocker in ``src`` while it was there (not a
    second copy that a dead-lettering cut short published after the first
    had left: a move is at least once, and the rename to its blocker finds
    the message gone). ``claims``: every
    claim in ``src`` (the final drain's too); a claim after a purge that may
    have removed a blocker is excused."""
    purges = [(e.start, e.end) for e in events if e.op == "purge"]
    by_group: dict[str, list[Claimed]] = defaultdict(list)
    for claim in claims:
        if (spot := _spot(claim.parsed.id)) is not None:
            by_group[spot[1]].append(claim)
    in_src = presence(changes, src, _not_a_blocker)
    blocked = presence(changes, src, _a_blocker)
    for (position, token), spans in presence(changes, dlq, _any_name).items():
        for i, (start, end) in enumerate(spans):
            if i and not any(start <= at <= end for at, _ in blocked.get((position, token), [])):
                continue
            others = [c for c in by_group[token] if not c.parsed.id.startswith(position)]
            why = f"while the dead letter at {position} was in the dead-letter queue"
            why += f" ({start:.3f} to {end:.3f})"
            _passed("strict", others, (start, end), purges, why, add)
            _check_redriven(position, token, start, in_src, by_group[token], purges, add)


def _check_redriven(
    position: str,
    token: str,
    entered: float,
    in_src: Mapping[Spot, list[tuple[float, float]]],
    claims: list[Claimed],
    purges: list[tuple[float, float]],
    add: Callable[[str], None],
) -> None:
    """A dead letter at ``position`` (in the dead-letter queue from
    ``entered``) published back in the source is claimed before any message
    of its group behind it, while it is there (``check_strict``)."""
    back = [span for span in in_src.get((position, token), []) if span[0] > entered]
    if not back:
        return
    redriven, gone = back[0]
    mine = [c.at for c in claims if c.parsed.id.startswith(position) and c.at > redriven]
    until = min([gone, *mine])
    behind = [c for c in claims if c.parsed.id[: len(position)] > position]
    why = f"behind the dead letter at {position} published back at {redriven:.3f}, not yet claimed"
    _passed("redriven", behind, (redriven, until), purges, why, add)


def _passed(
    rule: str,
    claims: list[Claimed],
    span: tuple[float, float],
    purges: list[tuple[float, float]],
    why: str,
    add: Callable[[str], None],
) -> None:
    """Each of ``claims`` strictly inside ``span`` broke the ``rule`` (its
    ``why``), unless a purge that ended after the span began ran before it."""
    start, end = span
    for claim in claims:
        if not start < claim.at < end:
            continue
        if any(stop > start and began < claim.at for began, stop in purges):
            continue
        add(
            f"{rule} dead letter passed: {claim.parsed.id} of group "
            f"{names.group_of(claim.parsed.id)} was claimed in the source by "
            f"{claim.writer or 'an orphan'} at {claim.at:.3f}, {why}"
        )
