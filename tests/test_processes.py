"""Real processes racing on a real directory; ``kill -9`` of consumers and producers.

No mocks: every queue is a directory under pytest's ``tmp_path`` and every
producer and consumer is a separate interpreter ("spawn"). Workers live in
``tests/workers.py`` and log what they did, line by line, so the checks
below run on the logs after the fact (even after a ``kill -9``).

How a double hold is detected. A consumer logs, per claim, ``asked`` (before
the receive call), ``got`` (after it returned) and ``settle_start`` (before
its delete or release), all ``time.monotonic_ns()``, a system-wide clock on
Linux. The message was surely held by that consumer over
``[got, min(settle_start, asked + vt)]``: the claim happened before ``got``,
the holder had not let go before ``settle_start``, and the receipt's expiry
is at least ``asked + vt``. Two such intervals of one message that overlap
are a real double hold, never a timing artefact. Stronger checks by name:
each claim of a message has its own receive count (a claim renames the name
of the previous one), and a re-claim after an expiry happens at a wall time
past the expiry written in the previous receipt.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _names as names
from vsqs._view import YOUNG_MS

from .support import workers
from .support.races import check_race, ctx, queue_files, read_sent, run_race, running
from .support.waiting import wait_until

pytestmark = pytest.mark.processes


def kill9(proc: Any) -> None:
    assert proc.is_alive(), "the child was gone before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL


def names_young_s() -> float:
    """Long enough for freshly sent messages to be claimable on a first listing."""
    return YOUNG_MS / 1000 * 2 + 0.05


@pytest.mark.timeout(90)
def test_racing_consumers_ack_every_message_exactly_once(tmp_path: Path) -> None:
    vt = 30.0
    sent, claims = run_race(
        tmp_path,
        producers=[(1500, "single", False), (1500, "batch", True)],
        consumers=4,
        vt=vt,
        max_batch=4,
        p_release=0.03,
    )
    check_race(sent, claims, vt)
    per_pid = Counter(c["pid"] for c in claims)
    assert len(per_pid) == 4, f"not every consumer got work: {per_pid}"
    # With a long visibility timeout, only releases bring a message back.
    released = sum(c["action"] == "release" and c["ok"] for c in claims)
    assert released > 0
    assert len(claims) == len(sent) + released
    assert all(c["ok"] for c in claims), "a receipt went stale within a 30 s timeout"


@pytest.mark.timeout(90)
def test_short_visibility_timeout_redelivers_and_stale_receipts_fail(tmp_path: Path) -> None:
    vt = 0.3
    sent, claims = run_race(
        tmp_path,
        producers=[(1000, "mixed", False), (1000, "single", False)],
        consumers=5,
        vt=vt,
        max_batch=3,
        p_release=0.02,
        p_slow=0.012,
        slow=(0.1, 0.9),
    )
    check_race(sent, claims, vt)
    stale = Counter(c["action"] for c in claims if not c["ok"])
    redelivered = {c["id"] for c in claims if c["count"] > 1}
    print(f"stale receipts: {dict(stale)}; redelivered messages: {len(redelivered)}")
    assert stale["delete"] > 0, "no delete met ReceiptExpired: the test exercised nothing"
    assert len(redelivered) >= stale["delete"]


# ------------------------------------------------------------------ 2. FIFO
def consume_in_parent(
    url: str, total: int, producers: list[Any], go: Path
) -> tuple[list[vsqs.Message], int]:
    """Receive (and delete) ``total`` messages as producers run; create ``go``
    (the producers' ``hold``) once something arrived while one was alive.

    Returns them in delivery order and how many arrived while a producer was
    alive. Fails if no message arrives for STALL_DEADLINE.
    """
    rng = random.Random(5)
    got: list[vsqs.Message] = []
    while_producing = 0
    deadline = time.monotonic() + workers.STALL_DEADLINE
    with vsqs.Queue(url) as q:
        while len(got) < total:
            assert time.monotonic() < deadline, f"only {len(got)} of {total} messages arrived"
            alive = any(p.is_alive() for p in producers)
            batch = q.receive_batch(rng.choice([1, 1, 3, 10]), wait=0.5)
            if batch:
                deadline = time.monotonic() + workers.STALL_DEADLINE
                if alive:
                    while_producing += len(batch)
                    go.touch()
            for msg in batch:
                msg.delete()
            got += batch
        assert q.receive() is None, "more messages than were sent"
    return got, while_producing


#: Foreign files slow every listing down to a few ms, so that listings overlap
#: with the producers' publishes: the race that ``YOUNG_MS`` exists for.
FIFO_FOREIGN = 10_000


def plant_many_foreign(qdir: Path, count: int) -> None:
    for i in range(count):
        os.close(os.open(qdir / f"foreign-{i:05d}", os.O_CREAT | os.O_WRONLY))


def assert_many_foreign_kept(qdir: Path, count: int) -> None:
    assert queue_files(qdir) == {names.CONFIG_NAME} | {f"foreign-{i:05d}" for i in range(count)}


def test_each_producers_messages_are_first_delivered_in_send_order(tmp_path: Path) -> None:
    qdir = tmp_path / "jobs"
    url = str(qdir)
    vsqs.Queue(url).close()
    plant_many_foreign(qdir, FIFO_FOREIGN)
    setups = [(600, "single", False), (600, "single", True), (600, "mixed", False)]
    go = tmp_path / "go"  # producers finish only once the consumer received
    logs = [tmp_path / f"producer-{i}.log" for i in range(len(setups))]
    procs = [
        ctx.Process(
            target=workers.produce,
            args=(url, str(log), i, count, mode, durable, 50 + i, 40, 0.03, str(go)),
        )
        for i, ((count, mode, durable), log) in enumerate(zip(setups, logs, strict=True))
    ]
    with running(*procs):
        got, while_producing = consume_in_parent(url, sum(c for c, _, _ in setups), procs, go)
        for proc in procs:
            proc.join(workers.STALL_DEADLINE)
            assert proc.exitcode == 0
    sent = read_sent(logs)
    assert while_producing > 0, "the consumer never ran alongside the producers"
    assert Counter(m.id for m in got) == Counter(sent.keys()), "lost or duplicated messages"
    assert all(m.receive_count == 1 for m in got)
    order: dict[int, list[int]] = defaultdict(list)
    for msg in got:
        assert msg.body.decode() == sent[msg.id]
        producer, seq = map(int, msg.body.decode().split(":"))
        order[producer].append(seq)
    for producer, (count, _, _) in enumerate(setups):
        assert order[producer] == list(range(count)), f"producer {producer} out of order"
    assert_many_foreign_kept(qdir, FIFO_FOREIGN)


def test_single_producer_and_consumer_concurrently_strict_order(tmp_path: Path) -> None:
    qdir = tmp_path / "jobs"
    url = str(qdir)
    vsqs.Queue(url).close()
    plant_many_foreign(qdir, FIFO_FOREIGN)
    count = 1000
    log = tmp_path / "producer.log"
    go = tmp_path / "go"
    proc = ctx.Process(
        target=workers.produce,
        args=(url, str(log), 0, count, "mixed", True, 9, 50, 0.02, str(go)),
    )
    with running(proc):
        got, while_producing = consume_in_parent(url, count, [proc], go)
        proc.join(workers.STALL_DEADLINE)
        assert proc.exitcode == 0
    sent = read_sent([log])
    assert while_producing > 0, "the consumer never ran alongside the producer"
    assert [m.id for m in got] == list(sent), "not delivered in send order"
    assert [m.body.decode() for m in got] == [f"0:{s}" for s in range(count)]
    assert all(m.receive_count == 1 for m in got)
    assert_many_foreign_kept(qdir, FIFO_FOREIGN)


# ------------------------------------------------------- 3. kill -9 consumers
@pytest.mark.timeout(60)
def test_killed_consumers_messages_come_back_after_the_visibility_timeout(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "jobs")
    vt, per_child, total = 2.0, 4, 20
    with vsqs.Queue(url) as q:
        sent = q.send_batch([f"m{i}" for i in range(total)])
        time.sleep(names_young_s())
        ready = [tmp_path / f"ready-{i}.json" for i in range(2)]
        children = [
            ctx.Process(target=workers.hold_and_hang, args=(url, per_child, vt, str(r)))
            for r in ready
        ]
        with running(*children):
            wait_until(lambda: all(r.exists() for r in ready), 30, "the consumers to hold")
            for child in children:
                kill9(child)
        held = [tuple(h) for r in ready for h in json.loads(r.read_text())]
        held_ids = {h[0] for h in held}
        assert len(held) == 2 * per_child and len(held_ids) == 2 * per_child
        assert held_ids <= set(sent) and all(count == 1 for _, _, count in held)
        expiry_ms = {h[0]: names.parse_receipt(h[1].partition("#")[0]).expiry_ms for h in held}

        # At once: everything else, in FIFO order, never received before.
        untouched = q.receive_batch(total)
        before_expiry = time.time_ns() < min(expiry_ms.values()) * 1_000_000
        assert [m.id for m in untouched if m.id not in held_ids] == [
            i for i in sent if i not in held_ids
        ]
        assert all(m.receive_count == 1 for m in untouched if m.id not in held_ids)
        if before_expiry:  # (a stalled machine may legitimately be past it)
            assert not {m.id for m in untouched} & held_ids, "held messages came back early"
        for m in untouched:
            m.delete()

        # After the visibility timeout: the held ones, received twice.
        back: list[vsqs.Message] = [m for m in untouched if m.id in held_ids]
        deadline = time.monotonic() + 15
        while len(back) < len(held):
            assert time.monotonic() < deadline, "a killed consumer's messages never came back"
            got = q.receive_batch(10, wait=1)
            now_ns = time.time_ns()
            for m in got:
                assert m.id in held_ids, f"unexpected {m.id}"
                assert now_ns + 1_000_000 >= expiry_ms[m.id] * 1_000_000, "back too early"
            back += got
        assert sorted(m.id for m in back) == sorted(held_ids)
        assert all(m.receive_count == 2 for m in back)
        assert [m.body for m in back] == [f"m{sent.index(m.id)}".encode() for m in back], (
            "bodies changed"
        )

        # The dead consumer's receipts are stale and change nothing.
        for _, receipt, _ in held:
            with pytest.raises(vsqs.ReceiptExpired):
                q.delete(receipt)
            with pytest.raises(vsqs.ReceiptExpired):
                q.release(receipt)
            with pytest.raises(vsqs.ReceiptExpired):
                q.extend(receipt, 5)
        for m in back:
            m.delete()
        assert q.receive() is None
        stats = q.stats()
        assert stats.ready + stats.in_flight + stats.delayed == 0


@pytest.mark.timeout(60)
def test_busy_consumers_killed_at_random_moments_lose_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "jobs")
    vt, batch, total, rounds = 1.0, 5, 3000, 3
    rng = random.Random(11)
    with vsqs.Queue(url, durable=False) as sender:
        sent = [
            i
            for start in range(0, total, 500)
            for i in sender.send_batch([f"b{s}" for s in range(start, start + 500)])
        ]
    time.sleep(names_young_s())
    logs = [tmp_path / f"busy-{r}.log" for r in range(rounds)]
    for r, log in enumerate(logs):
        child = ctx.Process(target=workers.busy_consume, args=(url, str(log), vt, batch, r))
        # Kill it after a random number of deletes: at a random point of its loop.
        after = rng.randrange(10, 500)
        with running(child):
            wait_until(
                lambda log=log, after=after: (
                    log.exists() and log.read_text().count("deleted") >= after
                ),
                30,
                "the consumer to delete messages",
            )
            kill9(child)

    recv: set[str] = set()
    deleting: set[str] = set()
    deleted: set[str] = set()
    unconfirmed: list[set[str]] = []
    for log in logs:
        events = [line.split() for line in log.read_text().splitlines()[1:]]
        mine_deleting = {e[1] for e in events if e[0] == "deleting"}
        mine_deleted = {e[1] for e in events if e[0] == "deleted"}
        assert not deleted & mine_deleted, "a message was deleted twice"
        recv |= {e[1] for e in events if e[0] == "recv"}
        deleting |= mine_deleting
        deleted |= mine_deleted
        unconfirmed.append(mine_deleting - mine_deleted)
        assert len(unconfirmed[-1]) <= 1
    assert deleted and len(deleted) < total, "the kills did not land mid-run"

    with vsqs.Queue(url) as q:
        rest: list[vsqs.Message] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = q.receive_batch(50, wait=0.2)
            rest += got
            for m in got:
                m.delete()
            if not got and sum(dataclasses.astuple(q.stats())[:3]) == 0:
                break  # nothing ready, in flight or delayed
    rest_ids = Counter(m.id for m in rest)
    assert all(n == 1 for n in rest_ids.values())
    assert not set(rest_ids) & deleted, "a deleted message came back"
    lost = set(sent) - set(rest_ids) - deleted
    assert lost <= set().union(*unconfirmed), f"lost messages: {sorted(lost)[:3]}"
    # Messages the killed consumers held and had not deleted came back, received again.
    held_at_kill = recv - deleting
    assert held_at_kill <= set(rest_ids)
    again = {m.id for m in rest if m.receive_count > 1}
    assert held_at_kill <= again
    # Only the (logged or not yet logged) batches in flight at a kill were redelivered.
    assert len(again - recv) <= rounds * batch
    assert not again & deleted
    assert all(m.body.decode() == f"b{sent.index(m.id)}" for m in rest)


# ------------------------------------------------------- 4. kill -9 producers
FOREIGN_FILES = {
    "notes.txt": b"keep me",
    "1234": b"me too",
    "1234.new": b"not ours",
    "0000000000001-0000-000000000000000G.new": b"bad hex",
    "0000000000001-0000-0000000000000000.tmp": b"unknown suffix",
    "0000000000001-0000-0000000000000000.new.bak": b"backup",
}


def plant_foreign(qdir: Path) -> None:
    for name, data in FOREIGN_FILES.items():
        (qdir / name).write_bytes(data)
    (qdir / "subdir").mkdir()
    (qdir / "subdir" / "0000000000001-0000-0000000000000000.new").write_bytes(b"nested")
    (qdir / "0000000000001-0000-0000000000000001").mkdir()  # a directory named like a message


def check_foreign(qdir: Path) -> None:
    for name, data in FOREIGN_FILES.items():
        assert (qdir / name).read_bytes() == data, f"foreign {name} was touched"
    assert (qdir / "subdir" / "0000000000001-0000-0000000000000000.new").read_bytes() == b"nested"
    assert (qdir / "0000000000001-0000-0000000000000001").is_dir()


def kill_producer(url: str, qdir: Path, log: Path, seed: int, at_new: bool) -> None:
    """Start a large-body producer, let it send some, and kill -9 it.

    ``at_new``: the moment a ``.new`` file shows (mid-write); else at a random time.
    """
    child = ctx.Process(target=workers.produce_large, args=(url, str(log), seed))
    with running(child):
        wait_until(lambda: log.exists() and log.read_text().count("\n") >= 2, 30, "sends")
        if at_new:  # (if none shows within 3 s, kill anyway: the checks will tell)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and not leftovers(qdir):
                time.sleep(0.001)
        else:
            time.sleep(random.Random(seed).uniform(0.0, 0.25))
        kill9(child)


def leftovers(qdir: Path) -> set[str]:
    return {n for n in os.listdir(qdir) if (p := names.parse(n)) and p.state == names.NEW}


def drain_complete(q: vsqs.Queue) -> list[str]:
    """Receive and delete everything visible; every body must be complete."""
    ids = []
    while (msg := q.receive()) is not None:
        complete = workers.is_complete(msg.body)
        assert complete, f"partial message {msg.id} ({len(msg.body)} bytes) became visible"
        ids.append(msg.id)
        msg.delete()
    return ids


@pytest.mark.timeout(60)
def test_killed_producers_never_publish_partial_messages(tmp_path: Path) -> None:
    qdir = tmp_path / "jobs"
    url = str(qdir)
    vsqs.Queue(url).close()
    plant_foreign(qdir)
    logs = [tmp_path / f"producer-{r}.log" for r in range(5)]
    for r, log in enumerate(logs):
        kill_producer(url, qdir, log, seed=r, at_new=r % 2 == 0)
    sent = [line for log in logs for line in log.read_text().splitlines()]
    left = leftovers(qdir)

    # Leftovers are invisible (within the grace period) and nothing sent is lost.
    with vsqs.Queue(url) as q:
        assert q.stats().writing == len(left)
        received = drain_complete(q)
        assert q.gc() == [], "leftovers collected inside the grace period"
    assert left, "no kill landed mid-write: the test exercised nothing"
    assert not {names.parse(n).id for n in left} & set(received)  # type: ignore[union-attr]
    assert set(sent) <= set(received), "a send that returned was lost"
    assert len(set(received) - set(sent)) <= len(logs), "more unlogged sends than kills"
    assert leftovers(qdir) == left
    check_foreign(qdir)

    # After the grace period, gc() removes exactly the leftovers, nothing foreign.
    time.sleep(0.15)
    with vsqs.Queue(url, new_grace=0.1) as q:
        assert sorted(q.gc()) == sorted(left)
    assert queue_files(qdir) == {
        names.CONFIG_NAME,
        "subdir",
        "0000000000001-0000-0000000000000001",
        *FOREIGN_FILES,
    }
    check_foreign(qdir)

    # Receiving collects them too.
    more_logs: list[Path] = []
    while not leftovers(qdir) and len(more_logs) < 3:
        more_logs.append(tmp_path / f"producer-more-{len(more_logs)}.log")
        kill_producer(url, qdir, more_logs[-1], seed=99 + len(more_logs), at_new=True)
    assert leftovers(qdir), "no kill landed mid-write: the test exercised nothing"
    time.sleep(0.15)
    with vsqs.Queue(url, new_grace=0.1) as q:
        received = drain_complete(q)
        assert leftovers(qdir) == set(), "receiving did not collect stale leftovers"
    assert {i for log in more_logs for i in log.read_text().split()} <= set(received)
    check_foreign(qdir)
