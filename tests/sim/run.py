"""One simulated schedule: set up, run, drain, judge. ``python -m tests.sim SEED`` replays one
(``--groups 0.6``, ``--dedups 0.4 --dedup-window 30``: with issue 29's features;
``--strict``: on a queue whose dead letters block their groups; ``--bundles 0.5
--batch-acks 0.3``: with issue 32's bundled batches, splits and partial acks).

A run is a pure function of its :class:`Plan` (seed, bucket flavour, faults
and client mix): every random choice (the schedule, the clients' scripts,
vsqs's own random skips, tokens and id nonces) comes from the seed, and every
clock is the simulated bucket's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import random
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import vsqs
from vsqs import _names as names
from vsqs._dead_letter import BLOCKER_CHECK
from vsqs.stores import _moves, _object, _probe
from vsqs.stores._object import ObjectStore

from . import fifo, parts, workload
from .bucket import Bucket
from .objects import SimObjects
from .oracle import Claim, Drained, Verdict, judge
from .scheduler import Faults, Scheduler
from .workload import Event

SKEW = 0.02  # clients' clocks are within ±SKEW s of the bucket's
#: How far a client's measure of the bucket's clock may be off: a Date names a second.
DATE_ERROR = 1.0
#: Rounds of the final drain of a strict queue (``Plan.strict_groups``), at
#: most: a group blocked behind a dead letter goes on in the round after its
#: ack, and the drain may dead-letter its next message (a chain of them takes
#: a round each); it stops at the first round that finds nothing.
STRICT_ROUNDS = 100


@dataclass
class Plan:
    seed: int
    flavour: str = "aws"
    faults: Faults = field(default_factory=Faults)
    producers: int = 2
    consumers: int = 3
    operators: int = 1
    ops: int = 10
    dead_letter: bool = True
    #: The client library re-sends an exclusive create whose response was lost
    #: (s3fs and gcsfs do, unless vsqs's adapters stop them).
    retry_creates: bool = False
    #: Requests the bucket applies in two steps (``SimObjects``): "create", "copy".
    torn: frozenset[str] = frozenset()
    page: int = 4
    #: Clients' clocks are within ±skew s of the bucket's (before any step).
    skew: float = SKEW
    #: What listings tell of modification times (``SimObjects``): ms, seconds, none.
    stamps: str = "ms"
    #: Consumers of the dead-letter queue (its acks delete origin records);
    #: each makes four times ``ops`` calls, as the queue fills late.
    dlq_consumers: int = 0
    #: How often a consumer acks several held messages with one ``delete_batch``.
    batch_acks: float = 0.0
    #: How often a producer's ``send_batch`` runs beside another of its Queue.
    twin_batches: float = 0.0
    #: How often an operator moves a batch with ``vsqs move src out``.
    moves: float = 0.0
    #: How often an operator writes rows to ``src`` as a Spark job does.
    spark_writes: float = 0.0
    #: How often a send has a message group, and a receive asks for one.
    groups: float = 0.0
    #: How often a producer sends with a deduplication id, and the queue's
    #: ``dedup_window`` (seconds).
    dedups: float = 0.0
    dedup_window: float = 300.0
    #: The source queue keeps a group blocked behind its dead letter
    #: (``dead_letter_blocks_group``); ``poison`` of grouped single sends are
    #: poison, never acknowledged at the source (so dead-lettered).
    strict_groups: bool = False
    poison: float = 0.0
    #: How often a producer sends a bundled batch of up to 40 messages, and a
    #: consumer receives more or fewer than a part holds (``Setup.bundles``).
    bundles: float = 0.0


def strict(plan: Plan) -> Plan:
    """``plan`` on a strict queue (``dead_letter_blocks_group``) with poison
    messages, two consumers of the dead-letter queue (unless it has some),
    and groups (0.6 of sends, unless it has a share)."""
    return dataclasses.replace(
        plan,
        strict_groups=True,
        poison=0.3,
        dead_letter=True,
        groups=plan.groups or 0.6,
        dlq_consumers=plan.dlq_consumers or 2,
    )


@dataclass
class Report:
    plan: Plan
    verdict: Verdict
    fingerprint: str
    steps: int
    requests: int
    trace: list[str] = field(repr=False, default_factory=list)

    def __str__(self) -> str:
        head = (
            f"seed {self.plan.seed} ({self.plan.flavour}): {self.steps} steps, "
            f"{self.requests} requests, schedule {self.fingerprint}"
        )
        if self.verdict:
            return f"{head}: ok"
        return "\n  ".join(
            [f"{head}: {len(self.verdict.violations)} violations", *self.verdict.violations[:20]]
        )


class _SeededSecrets:
    """``secrets.token_hex`` from the plan's seed: ids and marker tokens replay."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed ^ 0x5EC2E75)

    def token_hex(self, nbytes: int = 32) -> str:
        return self._rng.getrandbits(8 * nbytes).to_bytes(nbytes, "big").hex()


@contextlib.contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    state = random.getstate()
    saved = {module: module.secrets for module in (names, _moves, _object, _probe)}  # type: ignore[attr-defined]
    random.seed(seed)
    seeded = _SeededSecrets(seed)
    try:
        for module in saved:
            module.secrets = seeded  # type: ignore[attr-defined]
        yield
    finally:
        random.setstate(state)
        for module, original in saved.items():
            module.secrets = original  # type: ignore[attr-defined]


def run(plan: Plan) -> Report:
    with _deterministic(plan.seed):
        return _run(plan)


def _run(plan: Plan) -> Report:
    bucket = Bucket(plan.flavour)
    scheduler = Scheduler(plan.seed, bucket, plan.faults)
    scope = object()  # a probe of its own
    prefix = f"bucket/run-{plan.seed}"
    ios: list[SimObjects] = []

    def io(name: str) -> SimObjects:
        made = SimObjects(
            scheduler,
            f"{prefix}/{name}",
            scope=scope,
            retry_creates=plan.retry_creates,
            torn=plan.torn,
            page=plan.page,
            stamps=plan.stamps,
        )
        ios.append(made)
        return made

    steady = scheduler.steady()

    def store(name: str, clock: Callable[[], float]) -> ObjectStore:
        return ObjectStore(io(name), clock=clock, monotonic=steady)

    def opener(name: str, clock: Callable[[], float]) -> vsqs.Queue:
        return vsqs.Queue(store(name, clock), clock=clock, create=False)

    setup_clock = scheduler.clock()
    config: dict[str, Any] = {"visibility_timeout": 2.0}
    if plan.dead_letter:
        config |= {"max_receives": 1 + plan.seed % 2, "dead_letter": "dlq"}
        vsqs.Queue(store("dlq", setup_clock), clock=setup_clock).close()
    if plan.dedups:
        config["dedup_window"] = plan.dedup_window
    if plan.strict_groups:
        config["dead_letter_blocks_group"] = True
    vsqs.Queue(store("src", setup_clock), clock=setup_clock, **config).close()
    queues = ("src", "dlq") if plan.dead_letter else ("src",)
    if plan.moves:
        vsqs.Queue(store("out", setup_clock), clock=setup_clock).close()
        queues += ("out",)

    history = workload.History()
    setup = workload.Setup(
        scheduler,
        opener,
        history,
        plan.dead_letter,
        _redrive,
        batch_acks=plan.batch_acks,
        twin_batches=plan.twin_batches,
        moves=plan.moves,
        spark_writes=plan.spark_writes,
        groups=plan.groups,
        dedups=plan.dedups,
        poison=plan.poison,
        bundles=plan.bundles,
    )
    scripts = random.Random(plan.seed ^ 0xC11E)
    roles: list[tuple[str, Callable[..., None]]] = (
        [("p", workload.producer)] * plan.producers
        + [("c", workload.consumer)] * plan.consumers
        + [("o", workload.operator)] * plan.operators
        + [("d", functools.partial(workload.consumer, queue="dlq"))] * plan.dlq_consumers
    )
    for i, (role, script) in enumerate(roles):
        name = f"{role}{i}"
        rng = random.Random(scripts.getrandbits(64))
        skew = round(scripts.uniform(-plan.skew, plan.skew), 4)
        ops = plan.ops * (4 if role == "d" else 1)
        scheduler.actor(
            name,
            lambda s=script, n=name, r=rng, k=skew, o=ops: _exit_on_error(s, setup, n, r, o, k),
            skew,
        )
    scheduler.run()

    errors = [f"{a.name}: {type(a.error).__name__}: {a.error}" for a in scheduler.actors if a.error]
    drained = _drain(scheduler, opener, queues, errors, strict=plan.strict_groups)
    leftovers = sorted(key for key in bucket.objects if not key.endswith("/" + names.CONFIG_NAME))
    aliases = sibling_ids(bucket.written, history.events)
    src = f"{prefix}/src/"
    in_dlq, in_src = ({
        aliases.get(i, i) for k, data in bucket.written.items() if f"/{queue}/" in k
        for i in _ids_of(k.rpartition("/")[2], data)
    } for queue in ("dlq", "src"))  # fmt: skip
    store_clock = plan.stamps != "none"
    step = plan.faults.step_by if plan.faults.step else 0.0
    # Names on the bucket's clock where it tells its time (each client's
    # measure of it is off by at most the second a Date names), else on
    # the writers' clocks (off by their skew); steps come on top.
    claims = claims_of(bucket, src)
    tolerance = 2 * ((DATE_ERROR if store_clock else plan.skew) + step) + 0.002
    verdict = judge(
        history.events,
        drained,
        leftovers,
        errors,
        tolerance=tolerance,
        store_clock=store_clock,
        moved=in_dlq & in_src,
        aliases=aliases,
        max_receives=config.get("max_receives"),
        faulted=scheduler.faulted,
        claims=claims,
        born=first_keys(bucket, src),
        changes=bucket.changes,
        written=bucket.written,
    )
    fifo.judge(
        history.events,
        drained,
        verdict.add,
        tolerance=tolerance,
        moved=in_dlq & in_src,
        aliases=aliases,
        created=created_in(bucket, src),
        records=fifo.records_of(bucket.changes, bucket.written, src),
        window=plan.dedup_window,
        faulted=scheduler.faulted,
    )
    if plan.strict_groups:
        dlq = f"{prefix}/dlq/"
        fifo.check_strict(bucket.changes, src, dlq, claims, history.events, verdict.add)
    requests = sum(sum(i.requests.values()) for i in ios)
    return Report(
        plan, verdict, scheduler.fingerprint(), scheduler.steps, requests, scheduler.trace
    )


def _ids_of(name: str, data: bytes) -> list[str]:
    """The ids of the messages a key holds (a marker's, a record's: the id it starts with)."""
    parsed = names.parse(name)
    return [names.id_of(name)] if parsed is None else parts.ids_in(parsed, data)


def first_keys(bucket: Bucket, prefix: str) -> dict[str, float]:
    """When each message id first had a key under ``prefix`` (its staged
    ``.new`` aside: a staged message is not sent yet); a part of a bundle is
    a key of each message it holds."""
    first: dict[str, float] = {}
    for key, (at, _) in bucket.born.items():
        parsed = names.parse(key[len(prefix) :]) if key.startswith(prefix) else None
        if parsed is not None and parsed.state != names.NEW:
            for message_id in parts.ids_in(parsed, bucket.written[key]):
                first[message_id] = min(at, first.get(message_id, at))
    return first


def claims_of(bucket: Bucket, prefix: str) -> list[Claim]:
    """Each claim of a message under ``prefix``: a key whose receive count is
    one more than that of the message's key before it (in the order keys were
    first written), with what came after it, made by the client that created
    its move's marker. A message of a part of a bundle has the part's keys
    (its claim's name is the message's receipt, ``<held name>#<place>``, and
    its ``parsed`` the part's state under the message's own id)."""
    keys: dict[str, list[tuple[float, str, names.Name, str, int | None]]] = defaultdict(list)
    for key, (at, writer) in bucket.born.items():
        parsed = names.parse(key[len(prefix) :]) if key.startswith(prefix) else None
        if parsed is not None and parsed.state != names.NEW:
            for held in parts.held_in(parsed, bucket.written[key]):
                keys[held.id].append((at, writer, parsed, key[len(prefix) :], held.place))
    claims = []
    for message_id, versions in keys.items():
        versions.sort(key=lambda v: v[0])
        for (at, writer, name, _, place), before, after in zip(
            versions, [None, *versions], [*versions[1:], None], strict=False
        ):
            if before is not None and name.receive_count == before[2].receive_count + 1:
                following = after[2].receive_count if after is not None else None
                # The claimer created the move's marker; whoever copied (a
                # lister finishing an abandoned move) did not claim.
                marker = bucket.born.get(f"{prefix}{before[3]}{_moves.MOVED_SUFFIX}")
                at, writer = marker or (at, writer)
                receipt = parts.receipt_of(name, place)
                claims.append(Claim(receipt, name._replace(id=message_id), at, writer, following))
    return claims


def created_in(bucket: Bucket, prefix: str) -> list[tuple[float, str, bytes]]:
    """Each message name created under ``prefix`` (a send's, a publish's: not
    a copy, not a staged ``.new``), in order: (the bucket's time, its id,
    its body); a part of a bundle creates each message it holds."""
    out = []
    for at, kind, key, _ in bucket.changes:
        parsed = names.parse(key[len(prefix) :]) if key.startswith(prefix) else None
        if kind == "put" and parsed is not None and parsed.state != names.NEW:
            out += [(at, h.id, h.body) for h in parts.held_in(parsed, bucket.written[key])]
    return out


def sibling_ids(written: dict[str, bytes], events: list[Event]) -> dict[str, str]:
    """The sibling ids that moves gave second copies (same ms and seq, same
    body, another nonce: ``names.sibling_id``), each mapped to the sent id."""
    sent: dict[bytes, set[str]] = defaultdict(set)  # a body sent again (a dedup id's) has two
    for e in events:
        if e.op in ("send", "send_batch"):
            for message_id, body in zip(e.ids, e.bodies, strict=False):
                sent[body].add(message_id)
    aliases = {}
    for key, data in written.items():
        parsed = names.parse(key.rpartition("/")[2])
        for held in parts.held_in(parsed, data) if parsed is not None else ():
            for original in sent.get(held.body, ()):
                if held.id != original and held.id[:19] == original[:19]:
                    aliases[held.id] = original
    return aliases


def _exit_on_error(script: Callable[..., None], *args: Any) -> None:
    """A client whose queue cannot be opened (or closed) exits, as a process would."""
    with contextlib.suppress(vsqs.VsqsError):
        script(*args)


def _redrive(dlq: vsqs.Queue, source: vsqs.Queue) -> int:
    return vsqs.redrive(dlq, source)


def _drain(
    scheduler: Scheduler,
    opener: Callable[[str, Callable[[], float]], vsqs.Queue],
    names_: tuple[str, ...],
    errors: list[str],
    *,
    strict: bool = False,
) -> list[Drained]:
    """Long after the run, with no faults: repair, then receive and ack
    everything (an ack that raises there is one of the run's ``errors``).

    Each queue is listed once, ``FINISH_AFTER`` before the rest: where listings
    tell no times, that is when its leftovers start to age. ``strict``: the
    source keeps groups blocked behind their dead letters, which the
    dead-letter queue's drain acknowledges: the queues are drained again,
    ``BLOCKER_CHECK`` later each time, until a round finds nothing (liveness:
    every group goes on once its dead letters are gone)."""
    scheduler.bucket.now += 7200
    clock = scheduler.clock()
    drained: list[Drained] = []
    with contextlib.ExitStack() as opened:
        queues = {queue: opened.enter_context(opener(queue, clock)) for queue in names_}
        for q in queues.values():
            q.stats()
        scheduler.bucket.now += _moves.FINISH_AFTER + 1
        for again in range(STRICT_ROUNDS if strict else 1):
            scheduler.bucket.now += BLOCKER_CHECK + 1 if again else 0
            before = len(drained)
            for queue, q in queues.items():
                _drain_one(queue, q, drained, errors)
            if len(drained) == before:
                break
    return drained


def _drain_one(queue: str, q: vsqs.Queue, drained: list[Drained], errors: list[str]) -> None:
    q.gc()
    while batch := q.receive_batch(10, visibility_timeout=3600):
        for message in batch:
            # A dead letter shows its origin record (read before the ack removes it).
            record = message.dead_lettered is not None if queue == "dlq" else None
            drained.append(Drained(queue, message.id, message.body, message.receive_count, record))
            try:
                message.delete()
            except vsqs.VsqsError as exc:
                errors.append(f"the drain's ack of {message.id} in {queue}: {exc}")
    q.gc()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("seeds", type=int, nargs="+")
    parser.add_argument("--flavour", default="aws", choices=("aws", "ceph", "gcs"))
    parser.add_argument("--retry-creates", action="store_true")
    parser.add_argument(
        "--torn", action="append", default=[], choices=("create", "copy"),
        help="the bucket applies these requests in two steps (repeatable)",
    )  # fmt: skip
    parser.add_argument("--skew", type=float, default=SKEW, help="clients' clocks within ±SKEW s")
    parser.add_argument("--stamps", default="ms", choices=("ms", "seconds", "none"))
    parser.add_argument("--steps", type=float, default=0.0, help="clock steps per step")
    parser.add_argument(
        "--read-errors", type=float, default=0.0, help="failed body GETs per request"
    )
    parser.add_argument(
        "--record-errors", type=float, default=0.0, help="failed record deletes per request"
    )
    parser.add_argument("--dlq-consumers", type=int, default=0)
    parser.add_argument("--batch-acks", type=float, default=0.0, help="delete_batch share")
    parser.add_argument("--twin-batches", type=float, default=0.0, help="twin send_batch share")
    parser.add_argument("--moves", type=float, default=0.0, help="vsqs move share of operators")
    parser.add_argument("--spark-writes", type=float, default=0.0, help="Spark write share")
    parser.add_argument("--groups", type=float, default=0.0, help="grouped send share")
    parser.add_argument("--dedups", type=float, default=0.0, help="dedup-id send share")
    parser.add_argument("--bundles", type=float, default=0.0, help="bundled send_batch share")
    parser.add_argument("--dedup-window", type=float, default=300.0, help="seconds")
    parser.add_argument(
        "--strict", action="store_true",
        help="dead_letter_blocks_group, poison messages, consumers of the dead-letter queue",
    )  # fmt: skip
    parser.add_argument("--trace", action="store_true", help="print the schedule")
    args = parser.parse_args(argv)
    failed = 0
    for seed in args.seeds:
        plan = Plan(
            seed,
            args.flavour,
            Faults(step=args.steps, read_error=args.read_errors, record_error=args.record_errors),
            retry_creates=args.retry_creates,
            torn=frozenset(args.torn),
            skew=args.skew,
            stamps=args.stamps,
            dlq_consumers=args.dlq_consumers,
            batch_acks=args.batch_acks,
            twin_batches=args.twin_batches,
            moves=args.moves,
            spark_writes=args.spark_writes,
            groups=args.groups,
            dedups=args.dedups,
            dedup_window=args.dedup_window,
            bundles=args.bundles,
        )
        report = run(strict(plan) if args.strict else plan)
        if args.trace:
            print("\n".join(report.trace))
        print(report)
        failed += not report.verdict
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
