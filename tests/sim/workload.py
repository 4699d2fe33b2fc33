"""What the simulated clients do, and the history they leave for the oracle.

Clients are producers, consumers and an operator, each with a random script
drawn from its own seeded generator. Consumers act on what they hold as real
users do: ack by ``Message`` or by bare receipt, extend (also back to an
expiry their message had before), release, forget it, or race their own
heartbeat (a second thread of the same ``Queue`` extends the receipt while the
first acks it, as ``consume()`` and a user's heartbeat thread do). The
operator runs ``gc``, ``stats``, ``peek``, ``purge``, ``redrive`` and
reopens its queues. Where a plan says so, consumers also ack several held
messages with one ``delete_batch`` (``Setup.batch_acks``) and consume the
dead-letter queue, and the operator moves batches with ``vsqs move``'s
loop (``Setup.moves``). With issue 29's features in the plan, producers
send messages in groups (``GROUPS``: single sends, delayed sends, batches of
one group or a group each) and send deduplication ids (``DEDUP_IDS``:
repeated, by a twin process at the same time, and again after a send that
raised), and consumers now and then receive from one group only; some
grouped messages are poison (``Setup.poison``): no consumer of the source
acknowledges them, so they are dead-lettered. With issue 32's bundles in
the plan (``Setup.bundles``), producers send bundled batches of up to
``BUNDLED`` messages, consumers receive fewer or more than a part holds
(a split while other clients list) and settle a few held messages a step,
so that parts are acked, extended and released in part and lapse in part. Every
call is logged with the bucket's time before and after it and its outcome.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import vsqs
from vsqs import _names as names
from vsqs._inspect import RESTAMP_AFTER, collect_stale_new
from vsqs._move import move_batch
from vsqs._publish import commit, stage, staged_by, unstage
from vsqs.cli._interrupt import take

from .scheduler import Scheduler

#: Visibility timeouts and delays the clients choose from (seconds).
TIMEOUTS = (1.0, 2.0, 3.0, 8.0, 30.0)
DELAYS = (0.0, 0.5, 2.0)
#: The message groups and deduplication ids producers choose from (few, so
#: that groups queue up and ids repeat); a deduplication id is sent in the
#: group at its place in ``GROUPS`` (the last in none).
GROUPS = ("red", "green", "blue")
DEDUP_IDS = ("job-0", "job-1", "job-2", "job-3")
#: The start of a poison message's body: its handler fails every time.
POISON = b"poison:"
#: With bundles in the plan: how many messages a bundled ``send_batch`` sends
#: (at most), and how many a receive asks for now and then (fewer and more
#: than a part holds: a receive of part of a part splits it).
BUNDLED = 40
RECEIVES = (2, 5, 10, 25, 50)
#: What a bundled ``send_batch`` says of bundles (``None``: the default, on).
BUNDLE_FLAGS = (None, None, True, False)

#: A message a consumer holds, and the receipt the oracle knows it by (what
#: its receive or last extend returned; ``Event.keys``).
Holding = tuple[vsqs.Message, str]


@dataclass
class Event:
    actor: str
    op: str
    start: float
    end: float = math.inf  # a call cut short by its process's death never ends
    ok: bool = False
    error: str = ""
    queue: str = ""
    ids: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    receipt: str | None = None  # the receipt an operation used
    #: Under which receipt the oracle knows each message a settle used (what
    #: its receive or last extend returned): a bundled message's receipt
    #: follows its holder's changes of its part's other messages.
    keys: list[str] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)  # receipts it returned
    counts: list[int] = field(default_factory=list)
    skew: float = 0.0
    #: How far its wall clock was off at its last measure of the bucket's clock.
    measured: float = 0.0
    #: Seconds of visibility a receive, an extend or a release asked for.
    visibility: float = 0.0
    #: A ``delete_batch``'s receipts, and what its ``DeleteResult`` said of
    #: each: "deleted", "stale" or "failed".
    acked: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    #: What a ``stats()`` counted, by queue: messages ready, in flight and
    #: delayed, and the dead-letter queue's depth.
    counted: dict[str, int] = field(default_factory=dict)
    #: The group a receive asked for (``group=``); each message's group, as
    #: sent or as received; a send's deduplication id and delay.
    group: str | None = None
    groups: list[str | None] = field(default_factory=list)
    #: Each message's attributes, as sent (single sends only) or as received.
    attributes: list[dict[str, str]] = field(default_factory=list)
    dedup: str | None = None
    delay: float = 0.0


@dataclass
class History:
    events: list[Event] = field(default_factory=list)

    def log(self, scheduler: Scheduler, actor: str, op: str, run: Callable[[Event], Any]) -> Any:
        """Run one operation, recording it; a ``VsqsError`` is an outcome, not a failure."""
        current = scheduler.current()
        skew = scheduler.offset(current) if current else 0.0
        event = Event(actor, op, scheduler.now, skew=skew)
        self.events.append(event)
        try:
            result = run(event)
        except vsqs.VsqsError as exc:
            event.end, event.error = scheduler.now, type(exc).__name__
            return None
        finally:  # a first measure is made by the operation itself
            event.measured = scheduler.measured_offset(current) if current else 0.0
        event.end, event.ok = scheduler.now, True
        return result


@dataclass
class Setup:
    """How to open the simulated queues: ``opener(name, clock)`` returns a ``Queue``."""

    scheduler: Scheduler
    opener: Callable[[str, Callable[[], float]], vsqs.Queue]
    history: History
    dead_letter: bool
    #: ``redrive(dlq, source)`` on two open queues.
    redrive: Callable[[vsqs.Queue, vsqs.Queue], int]
    bodies: int = 0
    #: How often a consumer holding several messages acks some with one
    #: ``delete_batch`` (0: never, and no random draw for it).
    batch_acks: float = 0.0
    #: How often a producer's ``send_batch`` has a twin: a second thread of
    #: the same ``Queue`` sends another batch at once (0: never, no draw).
    twin_batches: float = 0.0
    #: How often an operator's step is a batch of ``vsqs move src out`` (0:
    #: never, no draw).
    moves: float = 0.0
    #: How often an operator's step is a Spark write to ``src`` (0: never,
    #: no draw).
    spark_writes: float = 0.0
    #: How often a send (or batch) has a message group (``GROUPS``), and a
    #: receive asks for one group (0: never, no draw).
    groups: float = 0.0
    #: How often a producer's step is a send with a deduplication id
    #: (``DEDUP_IDS``), retried after an unknown outcome, sometimes with a
    #: twin process sending the same id at once (0: never, no draw).
    dedups: float = 0.0
    #: How often a single send with a group is poison (``POISON``): no
    #: consumer of the source acknowledges it, so it is dead-lettered (0:
    #: never, no draw).
    poison: float = 0.0
    #: How often a producer's step is a bundled ``send_batch`` of 2 to
    #: ``BUNDLED`` messages (of one group, none, or runs of a few groups;
    #: sometimes ``bundle=False``), a receive asks for ``RECEIVES``, and a
    #: consumer's step settles up to four messages one by one (0: never,
    #: no draw).
    bundles: float = 0.0

    def body(self, actor: str) -> bytes:
        self.bodies += 1
        return f"{actor}:{self.bodies}".encode()


def producer(setup: Setup, name: str, rng: random.Random, ops: int, skew: float) -> None:
    clock = setup.scheduler.clock(skew)
    log = setup.history.log
    with setup.opener("src", clock) as q:
        for _ in range(ops):
            if setup.dedups and rng.random() < setup.dedups:
                _dedup_send(setup, name, rng, q)
                continue
            if setup.bundles and rng.random() < setup.bundles:
                _bundled_batch(setup, name, rng, q)
                continue
            group = _group(setup, rng)
            kind = rng.random()
            if kind < 0.6:
                body = setup.body(name)
                if group is not None and setup.poison and rng.random() < setup.poison:
                    body = POISON + body

                def send(e: Event, b: bytes = body, g: str | None = group) -> None:
                    e.queue, e.bodies, e.groups = "src", [b], [g]
                    # With groups in the plan, a single send has attributes
                    # (an envelope, tagged ``_a`` without a group).
                    e.attributes = [{"sent-as": b.decode()} if setup.groups else {}]
                    e.ids = [q.send(b, group=g, attributes=e.attributes[0] or None)]

                log(setup.scheduler, name, "send", send)
            elif kind < 0.85:
                bodies = [setup.body(name) for _ in range(rng.randint(2, 3))]
                # Now and then each message of a batch has a group of its own
                # (a twin batch's messages have the batch's group).
                own = {b: _group(setup, rng) for b in bodies} if group is not None else {}

                def send_batch(
                    e: Event,
                    bs: list[bytes] = bodies,
                    g: str | None = group,
                    own: dict[bytes, str | None] = own,
                    bundle: bool | None = None,
                ) -> None:
                    e.queue, e.bodies = "src", bs
                    mixed = [own.get(b, g) for b in bs]
                    if len(set(mixed)) > 1:  # else the batch's group, for every message
                        e.groups = mixed
                        items = [vsqs.Outgoing(b, group=m) for b, m in zip(bs, mixed, strict=True)]
                        e.ids = q.send_batch(items, bundle=bundle)
                        return
                    e.groups = [g] * len(bs)
                    e.ids = q.send_batch(bs, group=g, bundle=bundle)

                if setup.twin_batches and rng.random() < setup.twin_batches:
                    # Another thread of this Queue sends a batch at the same time.
                    twin = [setup.body(name) for _ in range(rng.randint(2, 3))]
                    _twin_batch(setup, name, send_batch, bodies, twin)
                    continue
                log(setup.scheduler, name, "send_batch", send_batch)
            else:
                body, delay = setup.body(name), rng.choice(DELAYS[1:])

                def send_later(
                    e: Event, b: bytes = body, d: float = delay, g: str | None = group
                ) -> None:
                    e.queue, e.bodies, e.groups, e.delay = "src", [b], [g], d
                    e.ids = [q.send(b, delay=d, group=g)]

                log(setup.scheduler, name, "send", send_later)


def _bundled_batch(setup: Setup, name: str, rng: random.Random, q: vsqs.Queue) -> None:
    """A ``send_batch`` of 2 to ``BUNDLED`` messages: of one group (or none),
    or now and then in runs of a few groups (a bundle holds one group's
    messages: a run each), with a flag of ``BUNDLE_FLAGS``."""
    bodies = [setup.body(name) for _ in range(rng.randint(2, BUNDLED))]
    groups = [_group(setup, rng)] * len(bodies)
    if setup.groups and rng.random() < 0.3:
        cuts = sorted(rng.sample(range(1, len(bodies)), min(2, len(bodies) - 1)))
        for start, end in zip([0, *cuts], [*cuts, len(bodies)], strict=True):
            groups[start:end] = [_group(setup, rng)] * (end - start)
    flag = rng.choice(BUNDLE_FLAGS)

    def send_batch(e: Event) -> None:
        e.queue, e.bodies, e.groups = "src", bodies, groups
        items = [vsqs.Outgoing(b, group=g) for b, g in zip(bodies, groups, strict=True)]
        e.ids = q.send_batch(items, bundle=flag)

    setup.history.log(setup.scheduler, name, "send_batch", send_batch)


def _group(setup: Setup, rng: random.Random) -> str | None:
    """A group for a message, or none (no draw without groups in the plan)."""
    if setup.groups and rng.random() < setup.groups:
        return rng.choice(GROUPS)
    return None


def _dedup_send(setup: Setup, name: str, rng: random.Random, q: vsqs.Queue) -> None:
    """Send one of ``DEDUP_IDS`` (its body is the id's, as a retried job's
    is), again while the send raises (its outcome unknown), up to three
    times; sometimes a twin process sends the same id at the same time."""
    scheduler = setup.scheduler
    i = rng.randrange(len(DEDUP_IDS))
    # A retried job keeps its group: each id has one (or none), as GROUPS lists them.
    dedup_id, group = DEDUP_IDS[i], (*GROUPS, None)[i] if setup.groups else None
    body = f"dedup:{dedup_id}".encode()

    def send(e: Event, q: vsqs.Queue) -> str:
        e.queue, e.bodies, e.groups, e.dedup = "src", [body], [group], dedup_id
        e.ids = [q.send(body, group=group, dedup_id=dedup_id)]
        return e.ids[0]

    def attempts(actor: str, q: vsqs.Queue) -> None:
        for _ in range(3):
            if setup.history.log(scheduler, actor, "send", lambda e: send(e, q)) is not None:
                return

    if rng.random() < 0.3:
        me = scheduler.current()
        assert me is not None
        twin = f"{name}-dup{len(setup.history.events)}"

        def other() -> None:
            clock = scheduler.clock(me.skew)  # its process's own clock
            with contextlib.suppress(vsqs.VsqsError), setup.opener("src", clock) as mine:
                attempts(twin, mine)

        joined = scheduler.actor(twin, other, skew=me.skew)  # a process of its own
        attempts(name, q)
        scheduler.join(joined)
        return
    attempts(name, q)


def _twin_batch(
    setup: Setup,
    name: str,
    send_batch: Callable[..., None],
    bodies: list[bytes],
    twin_bodies: list[bytes],
) -> None:
    """``send_batch`` of ``bodies`` here and of ``twin_bodies`` in a second
    thread of this process (the same ``Queue``) at once; then wait for it.
    Each message in an object of its own (``bundle=False``): two batches of
    several objects each, which batch markers keep whole (a bundle is one
    object, shown whole by itself)."""
    scheduler, log = setup.scheduler, setup.history.log
    me = scheduler.current()
    assert me is not None
    twin = f"{name}-twin"
    other = scheduler.actor(
        twin,
        lambda: log(
            scheduler, twin, "send_batch", lambda e: send_batch(e, twin_bodies, bundle=False)
        ),
        skew=me.skew,
        process=me.process,
    )
    log(scheduler, name, "send_batch", lambda e: send_batch(e, bodies, bundle=False))
    scheduler.join(other)


def consumer(
    setup: Setup, name: str, rng: random.Random, ops: int, skew: float, queue: str = "src"
) -> None:
    scheduler, log = setup.scheduler, setup.history.log
    clock = scheduler.clock(skew)
    held: list[Holding] = []
    lineage: dict[str, list[int]] = {}  # message id -> expiries its receipts had
    with setup.opener(queue, clock) as q:
        for _ in range(ops):
            if held and rng.random() < 0.6:
                if setup.batch_acks and len(held) > 1 and rng.random() < setup.batch_acks:
                    _ack_batch(setup, name, rng, q, held, queue)
                    continue
                # With bundles, a step settles a few messages one by one.
                for _settled in range(rng.randint(1, 4) if setup.bundles else 1):
                    if held:
                        holding = held.pop(rng.randrange(len(held)))
                        kept = _settle(setup, name, rng, q, holding, lineage, queue)
                        held.extend([] if kept is None else [kept])
                continue
            vt = rng.choice(TIMEOUTS)

            n = rng.randint(1, 3)
            # With bundles, now and then more or fewer than a part holds.
            if setup.bundles and rng.random() < setup.bundles:
                n = rng.choice(RECEIVES)
            # Now and then a receive of one group only (no draw without groups).
            group = rng.choice(GROUPS) if setup.groups and rng.random() < 0.3 else None

            def receive(
                e: Event, n: int = n, vt: float = vt, group: str | None = group
            ) -> list[vsqs.Message]:
                e.group = group
                got = _received(
                    e, queue, vt, lambda: q.receive_batch(n, visibility_timeout=vt, group=group)
                )
                held.extend((m, m.receipt or "") for m in got)
                return got

            for message in log(scheduler, name, "receive", receive) or ():
                assert message.receipt is not None
                lineage.setdefault(message.id, []).append(_expiry(message.receipt))


def _received(
    e: Event, queue: str, vt: float, receive: Callable[[], list[vsqs.Message]]
) -> list[vsqs.Message]:
    """Log a receive of ``queue`` with visibility ``vt`` (before it runs: it
    may raise) and what it returned."""
    e.queue, e.visibility = queue, vt
    got = receive()
    e.ids = [m.id for m in got]
    e.bodies = [m.body for m in got]
    e.receipts = [m.receipt for m in got if m.receipt]
    e.counts = [m.receive_count for m in got]
    e.groups = [m.group for m in got]
    e.attributes = [m.attributes for m in got]
    return got


def _said(e: Event, result: vsqs.DeleteResult) -> None:
    """Log what a ``DeleteResult`` said of each receipt ``e`` acked."""
    said = {r: "deleted" for r in result.deleted} | {r: "stale" for r in result.stale}
    said |= {r: "failed" for r in result.failed}
    e.outcomes = [said[r] for r in e.acked]


def _ack_batch(
    setup: Setup, name: str, rng: random.Random, q: vsqs.Queue, held: list[Holding], queue: str
) -> None:
    """Ack two or more held messages with one ``delete_batch``, by message or
    by bare receipt, and log what its ``DeleteResult`` said of each."""
    chosen = [held.pop(rng.randrange(len(held))) for _ in range(rng.randint(2, len(held)))]
    items: list[vsqs.Message | str] = [
        m if rng.random() < 0.5 else m.receipt or "" for m, _ in chosen
    ]

    def delete_batch(e: Event) -> None:
        e.queue, e.ids = queue, [m.id for m, _ in chosen]
        e.acked = [m.receipt or "" for m, _ in chosen]
        e.keys = [key for _, key in chosen]
        _said(e, q.delete_batch(items))

    setup.history.log(setup.scheduler, name, "delete_batch", delete_batch)


def _expiry(receipt: str) -> int:
    """The expiry a receipt names (a bundled message's: its part's)."""
    expiry = names.parse(receipt.partition("#")[0])
    assert expiry is not None and expiry.expiry_ms is not None, receipt
    return expiry.expiry_ms


def _settle(
    setup: Setup,
    name: str,
    rng: random.Random,
    q: vsqs.Queue,
    holding: Holding,
    lineage: dict[str, list[int]],
    queue: str,
) -> Holding | None:
    """Act on one held message; return it (with its new receipt, the oracle's
    key of it) if still held."""
    scheduler, log = setup.scheduler, setup.history.log
    message, key = holding
    receipt = message.receipt
    assert receipt is not None
    me = scheduler.current()
    assert me is not None
    clock = scheduler.clock(me.skew)
    if queue == "src" and message.body.startswith(POISON):
        return None  # its handler failed: it comes back after its visibility timeout
    action = rng.random()

    def record(e: Event, op: Callable[[], Any], visibility: float = 0.0) -> Any:
        e.queue, e.ids, e.receipt, e.visibility = queue, [message.id], receipt, visibility
        e.keys = [key]
        out = op()
        if isinstance(out, vsqs.Message) and out.receipt:
            e.receipts = [out.receipt]
            lineage.setdefault(message.id, []).append(_expiry(out.receipt))
        return out

    def extend(vt: float, by_receipt: bool) -> Holding | None:
        target: vsqs.Message | str = receipt if by_receipt else message
        kept = log(scheduler, name, "extend", lambda e: record(e, lambda: q.extend(target, vt), vt))
        return (kept, kept.receipt or "") if isinstance(kept, vsqs.Message) else None

    if action < 0.25:
        log(scheduler, name, "delete", lambda e: record(e, lambda: q.delete(message)))
    elif action < 0.4:
        log(scheduler, name, "delete", lambda e: record(e, lambda: q.delete(receipt)))
    elif action < 0.52:
        return extend(rng.choice(TIMEOUTS), by_receipt=False)
    elif action < 0.58:
        return extend(rng.choice(TIMEOUTS), by_receipt=True)
    elif action < 0.65:
        delay = rng.choice(DELAYS)
        log(
            scheduler, name, "release", lambda e: record(e, lambda: q.release(message, delay=delay))
        )
    elif action < 0.77:
        # Back to an expiry this message's receipts had before (a caller that
        # computes visibility from a deadline can land on one).
        now_ms = int(clock() * 1000)  # the expiry is computed on the client's clock
        earlier = [x for x in lineage.get(message.id, []) if x > now_ms]
        if earlier:
            return extend((rng.choice(earlier) - now_ms) / 1000, by_receipt=True)
        return holding
    elif action < 0.9:
        # The heartbeat race: another thread of this client extends the same
        # receipt while this one acks it.
        twin, vt = f"{name}-heartbeat", rng.choice(TIMEOUTS)
        heartbeat = scheduler.actor(
            twin,
            lambda: log(
                scheduler, twin, "extend", lambda e: record(e, lambda: q.extend(receipt, vt))
            ),
            skew=me.skew,
            process=me.process,
        )
        log(scheduler, name, "delete", lambda e: record(e, lambda: q.delete(receipt)))
        scheduler.join(heartbeat)  # one thread of a Queue may not wait on another's lock
    # else: forget it; it comes back after its visibility timeout
    return None


def operator(setup: Setup, name: str, rng: random.Random, ops: int, skew: float) -> None:
    scheduler, log = setup.scheduler, setup.history.log
    clock = scheduler.clock(skew)
    queues = [setup.opener("src", clock)]  # the current one last: reopened now and then
    try:
        for _ in range(ops):
            if setup.moves and rng.random() < setup.moves:
                _move(setup, name, rng, queues[-1])
                continue
            if setup.spark_writes and rng.random() < setup.spark_writes:
                write = functools.partial(_spark_write, setup, rng, q=queues[-1])
                log(scheduler, name, "spark_write", write)
                continue
            q, kind = queues[-1], rng.random()
            if kind < 0.3:
                log(scheduler, name, "gc", lambda e, q=q: q.gc())
            elif kind < 0.5:
                log(scheduler, name, "stats", lambda e, q=q: _stats(e, q))
            elif kind < 0.65:
                log(scheduler, name, "peek", lambda e, q=q: q.peek(3))
            elif kind < 0.75:
                q.close()
                queues.append(setup.opener("src", clock))
            elif kind < 0.82:
                log(scheduler, name, "purge", lambda e, q=q: q.purge())
            elif setup.dead_letter:
                with setup.opener("dlq", clock) as dlq:

                    def redrive(e: Event, dlq: vsqs.Queue = dlq, q: vsqs.Queue = q) -> int:
                        e.queue = "dlq"
                        return setup.redrive(dlq, q)

                    log(scheduler, name, "redrive", redrive)
    finally:
        queues[-1].close()


def _stats(e: Event, q: vsqs.Queue) -> None:
    stats = q.stats()
    e.counted = {"src": stats.ready + stats.in_flight + stats.delayed}
    if stats.dead_letter is not None:
        e.counted["dlq"] = stats.dead_letter


def _move(setup: Setup, name: str, rng: random.Random, q: vsqs.Queue) -> None:
    """One batch of ``vsqs move src out``, as the command moves it: received
    at ``src`` (``take``), sent to ``out``, then deleted at ``src``
    (``move_batch``); logged as a receive and a "move" (an ack of each
    receipt, with what its ``DeleteResult`` said, and the bodies sent)."""
    scheduler, log = setup.scheduler, setup.history.log
    vt, n = rng.choice(TIMEOUTS), rng.randint(1, 3)
    with setup.opener("out", q.clock) as out:
        batch = log(
            scheduler,
            name,
            "receive",
            lambda e: _received(e, "src", vt, lambda: take(q, n, visibility_timeout=vt)),
        )
        if not batch:
            return

        def move(e: Event) -> None:
            e.queue, e.ids = "src", [m.id for m in batch]
            e.acked, e.bodies = [m.receipt or "" for m in batch], [m.body for m in batch]
            _said(e, move_batch(q, out, batch, lambda n: None))

        log(scheduler, name, "move", move)


def _spark_write(setup: Setup, rng: random.Random, e: Event, *, q: vsqs.Queue) -> None:
    """A Spark write of a few rows to ``q``, as ``vsqs.spark``'s writer makes
    it on the store: its tasks stage each row as ``<id>.new`` (ids ending in
    the job's nonce); then, often after ``RESTAMP_AFTER`` (its rows are
    published under fresh ids), the driver commits them and removes the
    job's leftovers, or aborts (as Spark does when the job or the commit
    failed): it unstages them and removes the leftovers. ``e.outcomes``:
    "committed", "aborted", or "commit failed" (it raised, or the removal of
    the leftovers after it did; then aborted)."""
    store, clock = q.store, names.MsClock(q.clock)
    job, task = f"{rng.getrandbits(48):012x}", f"{rng.getrandbits(16):04x}"
    e.queue, e.bodies = "src", [setup.body("spark") for _ in range(rng.randint(1, 3))]
    staged: list[str] = []

    def next_id() -> str:
        return clock.next_id()[: -len(job + task)] + job + task

    try:
        for body in e.bodies:
            staged.append(stage(store, body, next_id))
        if rng.random() < 0.5:
            setup.scheduler.sleep(RESTAMP_AFTER + rng.choice([1.0, 5.0]))
        if rng.random() < 0.75:
            e.outcomes = ["commit failed"]  # unless it returns
            commit(store, staged, None, durable=False, clock=clock)
            collect_stale_new(store, staged_by(store, job), store.url)
            e.outcomes = ["committed"]
            return
    except OSError:
        pass
    e.outcomes = e.outcomes or ["aborted"]
    unstage(store, staged)
    with contextlib.suppress(OSError):  # left for gc()
        collect_stale_new(store, staged_by(store, job), store.url)
