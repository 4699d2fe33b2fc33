"""The chaos harness: producers and consumers killed with SIGKILL at random, then checked.

:func:`run_chaos` runs ``producers`` and ``consumers`` (and a process that
runs ``gc()`` in a loop) as real processes on one queue, a local directory
or an object store. For ``seconds`` it kills a random one of them with
SIGKILL at random moments (exponentially spaced, ``kill_every`` apart on
average) and starts a replacement at once: a restarted producer is a new
stream, a restarted consumer a new log. Then producers stop, consumers drain
the queue, a last ``gc()`` removes what killed senders left, and
:func:`check` reads every log (``tests/chaos/workers.py``) and reports the
figures and every violation of these promises:

* **no loss**: every message whose send returned was received, and its last
  claim was a delete that succeeded or one cut short by a kill (which may
  have landed); the queue is empty at the end;
* **no double hold**: no two claims of one message overlap in time. A
  claim surely held the message over ``[got, min(settle start, asked + vt)]``
  (claimed before ``got``; the receipt's expiry is at least ``asked + vt``;
  not let go before the settle started; a kill after a settle started may
  have cut a release short after it landed). Each claim of a message has its own
  receive count; a message claimed again without a release was claimed at
  a wall time past the expiry its previous receipt names;
* **no resurrection**: no message is claimed after a delete of it succeeded;
* **nothing foreign**: every body received is one a producer sent, with the
  id its send returned (or one whose send was cut short by a kill);
* **FIFO** (one consumer): each stream's first deliveries follow send order.
  With several consumers, receivers spread over the head of the queue, so
  the count of out-of-order first deliveries is reported, not checked.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from vsqs import _names as names
from vsqs.stores import _moves
from vsqs.stores._object import ObjectStore

from ..support.workers import open_queue
from . import workers

#: Fork children from a server that imported everything once: a restart takes
#: milliseconds, so kills can come many times a second.
ctx = get_context("forkserver")
ctx.set_forkserver_preload(["vsqs", "tests.chaos.workers"])


@dataclass
class ChaosConfig:
    """One chaos run. ``target``: a directory, or ``[url, storage_options]``."""

    target: Any
    producers: int = 3
    consumers: int = 4
    seconds: float = 10.0
    rate: float = 200.0  # messages a second per producer
    max_padding: int = 64 << 10  # bodies of up to this many bytes (and a head)
    vt: float = 1.0
    kill_every: float = 0.3
    collector: bool = True
    gc_grace: float = 3.0
    p_release: float = 0.02
    p_slow: float = 0.005
    seed: int = 0
    drain_timeout: float = 90.0


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def violate(self, kind: str, detail: str) -> None:
        self.violations.append(f"{kind}: {detail}")


@dataclass
class _Slot:
    """One producer, consumer or collector position: its successive processes."""

    role: str
    index: int
    generation: int = -1
    proc: Any = None
    logs: list[Path] = field(default_factory=list)
    killed: set[Path] = field(default_factory=set)


class _Run:
    def __init__(self, config: ChaosConfig, workdir: Path) -> None:
        self.config, self.workdir = config, workdir
        self.rng = random.Random(config.seed)
        self.stop = workers.Flag(str(workdir / "stop"))
        self.drain = workers.Flag(str(workdir / "drain"))
        self.slots = (
            [_Slot("producer", i) for i in range(config.producers)]
            + [_Slot("consumer", i) for i in range(config.consumers)]
            + ([_Slot("collector", 0)] if config.collector else [])
        )
        self.kills: Counter[str] = Counter()
        self.started = 0
        self.aimed = 0

    def start(self, slot: _Slot) -> None:
        c = self.config
        slot.generation += 1
        log = self.workdir / f"{slot.role}-{slot.index}-{slot.generation}.log"
        slot.logs.append(log)
        seed = self.rng.randrange(1 << 30)
        if slot.role == "producer":
            stream = f"p{slot.index}.{slot.generation}"
            durable = self.rng.random() < 0.5
            args: tuple[Any, ...] = (
                c.target, str(log), stream, c.rate, c.max_padding, durable, seed, self.stop
            )  # fmt: skip
            target = workers.produce
        elif slot.role == "consumer":
            args = (
                c.target, str(log), c.vt, c.max_padding, seed, c.p_release, c.p_slow, self.drain
            )  # fmt: skip
            target = workers.consume
        else:
            args = (c.target, str(log), c.gc_grace, self.stop)
            target = workers.collect
        slot.proc = ctx.Process(target=target, args=args, daemon=True)
        slot.proc.start()
        self.started += 1

    def aim(self, slot: _Slot) -> bool:
        """Wait (up to 0.5 s) until ``slot`` is mid-operation; True if it got there.

        Random moments rarely fall inside a fast local send or between a
        claim and its ack (a consumer mostly waits in a long poll); half of
        the kills wait for one.
        """
        wanted = {"producer": ("s",), "consumer": ("C", "d")}.get(slot.role)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            if wanted and _last_tag(slot.logs[-1]) in wanted:
                return True
            time.sleep(0.0002)
        return False

    def kill(self, slot: _Slot, report: Report) -> None:
        proc = slot.proc
        if self.rng.random() < 0.5 and self.aim(slot):
            self.aimed += 1
        if not proc.is_alive():
            report.violate("crash", f"{slot.role} {slot.index} exited with {proc.exitcode}")
        else:
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(30)
            slot.killed.add(slot.logs[-1])
            self.kills[f"{slot.role} {_moment(slot.logs[-1])}"] += 1
        self.start(slot)

    def run(self, report: Report) -> float:
        c = self.config
        for slot in self.slots:
            self.start(slot)
        began = time.monotonic()
        try:
            end = began + c.seconds
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(self.rng.expovariate(1 / c.kill_every), left))
                if time.monotonic() < end:
                    self.kill(self.rng.choice(self.slots), report)
            self.stop.set()
            self.drain.set()
            deadline = time.monotonic() + c.drain_timeout
            for slot in self.slots:
                slot.proc.join(max(deadline - time.monotonic(), 1))
                if slot.proc.exitcode != 0:
                    report.violate(
                        "drain", f"{slot.role} {slot.index} ended with {slot.proc.exitcode}"
                    )
            return time.monotonic() - began
        finally:
            for slot in self.slots:
                if slot.proc is not None and slot.proc.is_alive():
                    slot.proc.kill()
                    slot.proc.join(10)


def _last_tag(log: Path) -> str:
    """The first word of the last whole line of ``log`` ("" if none)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - 4096, 0))
            tail = f.read()
    except FileNotFoundError:
        return ""
    lines = tail[: tail.rfind(b"\n")].rsplit(b"\n", 1)
    return lines[-1].split(b" ", 1)[0].decode()


def _moment(log: Path) -> str:
    """What a killed process was doing, from the last line of its log."""
    return {
        "s": "mid-send",
        "A": "mid-receive",
        "C": "holding",
        "d": "mid-ack",
        "D": "between messages",
        "S": "between sends",
        "F": "between sends",
        "G": "between collections",
    }.get(_last_tag(log), "starting")


def run_chaos(config: ChaosConfig, workdir: Path) -> Report:
    """Run the processes, kill them at random, drain the queue, check the logs."""
    workdir.mkdir(parents=True, exist_ok=True)
    open_queue(config.target).close()
    run = _Run(config, workdir)
    report = Report()
    elapsed = run.run(report)
    # Every client is dead: leftovers of any age may go, and half-done moves
    # may be finished at once.
    finish_after, _moves.FINISH_AFTER = _moves.FINISH_AFTER, -1.0
    try:
        with open_queue(config.target, new_grace=0) as q:
            collected = q.gc()
            # A move a killed claimer left half done was hidden from the
            # consumers' last look; finished now, its message is in flight
            # to a dead holder. A last consumer here takes what is left.
            last = _Slot("consumer", len(run.slots), logs=[workdir / "last-consumer.log"])
            run.slots.append(last)
            c = config
            workers.consume(c.target, str(last.logs[0]), c.vt, c.max_padding, 0, 0, 0, run.drain)
            store = q.store
            left = sorted(
                name
                for name in (
                    [n for n, _ in store.io.listing()]
                    if isinstance(store, ObjectStore)
                    else store.list()
                )
                if name != names.CONFIG_NAME
            )
    finally:
        _moves.FINISH_AFTER = finish_after
    if left:
        report.violate("not drained", f"{len(left)} names left, e.g. {left[:3]}")
    report.figures.update(
        seconds=round(elapsed, 1),
        processes_started=run.started,
        kills=sum(run.kills.values()),
        kills_aimed=run.aimed,
        kills_by_moment=dict(sorted(run.kills.items())),
        leftovers_collected_at_end=len(collected),
    )
    check(run.slots, config, report, still_queued={n[: names.ID_LEN] for n in left})
    return report


@dataclass
class _Claim:
    id: str
    count: int
    receipt: str
    asked: int
    got: int
    wall: int
    body: str
    consumer: str
    intent: str | None = None  # what it set out to do ("d" line)
    action: str | None = None  # what it did ("D" line)
    start: int = 0
    end: int = 0
    ok: bool = False


def _lines(log: Path, killed: bool, report: Report) -> list[list[str]]:
    if not log.exists():
        return []  # killed before it opened its log
    lines = [line.split(" ") for line in log.read_text().split("\n")]
    if lines and lines[-1] == [""]:
        lines.pop()  # the newline of the last line
    elif lines and killed:
        lines.pop()  # a line cut short by the kill (a torn write)
    elif lines:
        report.violate("log", f"{log.name} ends without a newline")
    return lines


def check(slots: list[Any], config: ChaosConfig, report: Report, still_queued: set[str]) -> None:
    """Read every log and report the figures and violations (see the module docstring).

    Messages ``still_queued`` (the queue did not drain: a violation of its
    own) are not counted as lost.
    """
    sent: dict[str, str] = {}  # id -> body, of every send that returned
    uncertain: set[str] = set()  # bodies of sends cut short by a kill or an error
    claims: list[_Claim] = []
    collected = 0
    for slot in slots:
        for log in slot.logs:
            killed = log in slot.killed
            lines = _lines(log, killed, report)
            if slot.role == "producer":
                stream = f"p{slot.index}.{slot.logs.index(log)}"
                pending: set[int] = set()
                for line in lines:
                    if line[0] == "s":
                        seq, n = int(line[1]), int(line[2])
                        pending = set(range(seq, seq + n))
                    elif line[0] == "S":
                        if line[1] in sent:
                            report.violate("id reused", line[1])
                        sent[line[1]] = f"{stream}:{line[2]}"
                        pending.discard(int(line[2]))
                    elif line[0] == "F":
                        seq, n = int(line[1]), int(line[2])
                        uncertain.update(f"{stream}:{s}" for s in range(seq, seq + n))
                        pending = set()
                uncertain.update(f"{stream}:{s}" for s in pending)
            elif slot.role == "consumer":
                claims += _read_claims(log, lines, report)
            else:
                collected += len(lines)

    by_id: dict[str, list[_Claim]] = defaultdict(list)
    for claim in claims:
        if claim.id in sent:
            if claim.body != sent[claim.id]:
                report.violate("foreign", f"{claim.id} came with body {claim.body!r}")
        elif claim.body not in uncertain:
            report.violate("foreign", f"{claim.id} ({claim.body!r}) was never sent")
        by_id[claim.id].append(claim)

    vt_ns = int(config.vt * 1e9)
    for message_id, holds in by_id.items():
        _check_message(message_id, holds, vt_ns, report, message_id in still_queued)
    for message_id in sent.keys() - by_id.keys() - still_queued:
        report.violate("lost", f"{message_id} ({sent[message_id]}) was never received")

    first = _first_deliveries(claims)
    disorder = sum(
        1
        for seqs in first.values()
        for before, after in itertools.pairwise(itertools.accumulate(seqs, max))
        if after == before
    )
    if config.consumers == 1:
        for stream, seqs in first.items():
            bad = [b for a, b in itertools.pairwise(seqs) if b < a]
            if bad:
                report.violate("fifo", f"stream {stream} first delivered {seqs[:20]}...")
    acked = sum(1 for c in claims if c.action == "delete" and c.ok)
    report.figures.update(
        messages_sent=len(sent),
        sends_cut_short=len(uncertain),
        claims=len(claims),
        acked=acked,
        claims_cut_short=sum(1 for c in claims if c.action is None),
        redeliveries=len(claims) - len(by_id),
        releases=sum(1 for c in claims if c.action == "release" and c.ok),
        stale_receipts=sum(1 for c in claims if c.action is not None and not c.ok),
        out_of_order_first_deliveries=disorder,
        leftovers_collected_live=collected,
        violations=len(report.violations),
    )


def _read_claims(log: Path, lines: list[list[str]], report: Report) -> list[_Claim]:
    claims: dict[tuple[str, int], _Claim] = {}
    asked = 0
    for line in lines:
        if line[0] == "A":
            asked = int(line[1])
        elif line[0] == "C":
            message_id, count, receipt, got, wall, body, whole = line[1:]
            if whole != "1":
                report.violate("torn", f"{message_id} ({body}) arrived with a body not as sent")
            claims[message_id, int(count)] = _Claim(
                message_id, int(count), receipt, asked, int(got), int(wall), body, log.name
            )
        elif line[0] == "d":
            claim = claims.get((line[1], int(line[2])))
            if claim is not None:
                claim.intent, claim.start = line[3], int(line[4])
        elif line[0] == "D":
            claim = claims.get((line[1], int(line[2])))
            if claim is None:
                report.violate("log", f"{log.name} settles {line[1]} it never claimed")
                continue
            claim.action, claim.start, claim.end = line[3], int(line[4]), int(line[5])
            claim.ok = line[6] == "1"
    return list(claims.values())


def _check_message(
    message_id: str, holds: list[_Claim], vt_ns: int, report: Report, queued: bool
) -> None:
    counts = Counter(h.count for h in holds)
    if any(n > 1 for n in counts.values()):
        report.violate("double claim", f"{message_id}: one receive count claimed twice {counts}")
    holds.sort(key=lambda h: h.count)
    for claim in holds:
        held, _, place = claim.receipt.partition("#")
        parsed = names.parse_receipt(held)
        # A bundled message's receipt names its part (and its place there).
        holder = parsed.id if not place else message_id
        if (holder, parsed.receive_count) != (message_id, claim.count):
            report.violate("receipt", f"{claim.receipt} is not {message_id} #{claim.count}")

    last = holds[-1]
    # A kill may cut an ack short after it landed; a release never ends a message.
    ended = (last.action == "delete" and last.ok) or (
        last.action is None and last.intent != "release"
    )
    if not ended and not queued:
        report.violate("lost", f"{message_id}: last claim ended in {last.action or last.intent}")
    for claim in holds[:-1]:
        if claim.action == "delete" and claim.ok:
            report.violate("resurrected", f"{message_id} claimed again after its delete")

    intervals = sorted((h.got, _held_until(h, vt_ns), h.consumer) for h in holds)
    held_until, holder = -1, ""
    for start, end, consumer in intervals:
        if start < held_until:
            report.violate(
                "double hold",
                f"{message_id} held by {holder} and {consumer} "
                f"({(held_until - start) / 1e6:.3f} ms overlap)",
            )
        if end > held_until:
            held_until, holder = end, consumer

    for prev, nxt in itertools.pairwise(holds):
        if nxt.count != prev.count + 1:
            continue  # a claim in between was not logged (its consumer was killed)
        if (prev.action == "release" and prev.ok) or (
            prev.action is None and prev.intent == "release"
        ):
            if nxt.got < prev.start:
                report.violate("early", f"{message_id} claimed again before its release")
            continue
        expiry_ms = names.parse_receipt(prev.receipt.partition("#")[0]).expiry_ms or 0
        # 1 ms: time.time()'s float rounding at the claimer's "now".
        if nxt.wall + 1_000_000 < expiry_ms * 1_000_000:
            report.violate(
                "early",
                f"{message_id} claimed {(expiry_ms * 1e6 - nxt.wall) / 1e6:.1f} ms "
                f"before {prev.receipt} expired",
            )


def _held_until(claim: _Claim, vt_ns: int) -> int:
    """Until when ``claim`` surely held its message (see the module docstring).

    A settle that started let go at its start at the earliest: a release
    cut short by a kill may have landed, a delete only ends the message.
    """
    expiry = claim.asked + vt_ns
    if claim.action is not None or claim.intent == "release":
        return min(claim.start, expiry)
    return expiry


def _first_deliveries(claims: list[_Claim]) -> dict[str, list[int]]:
    """Each stream's sequence numbers in the order of their first claims (count 1)."""
    first = sorted((c for c in claims if c.count == 1), key=lambda c: c.got)  # stable: log order
    streams: dict[str, list[int]] = defaultdict(list)
    for claim in first:
        stream, seq = claim.body.split(":")
        streams[stream].append(int(seq))
    return streams
