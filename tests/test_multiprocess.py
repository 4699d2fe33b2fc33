"""Real processes racing on a real directory, and kill -9 of producers and consumers."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _names as names

from . import _procs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ctx = multiprocessing.get_context("spawn")


@contextmanager
def processes(*procs: Any) -> Iterator[list[Any]]:
    """Start processes; whatever happens, none outlives the block."""
    started = []
    try:
        for proc in procs:
            proc.start()
            started.append(proc)
        yield started
    finally:
        for proc in started:
            if proc.is_alive():
                proc.kill()
            proc.join(10)


def read_logs(paths: list[Path]) -> list[dict[str, Any]]:
    entries = []
    for path in paths:
        entries += [json.loads(line) for line in path.read_text().splitlines()]
    return entries


def run_race(
    tmp_path: Path,
    *,
    producers: int,
    consumers: int,
    per_producer: int,
    vt: float,
    slow_every: int = 0,
    slow_for: float = 0.0,
    batch: int = 50,
) -> list[dict[str, Any]]:
    url = str(tmp_path / "jobs")
    vsqs.Queue(url).close()
    done = ctx.Event()
    logs = [tmp_path / f"consumer-{i}.jsonl" for i in range(consumers)]
    producer_procs = [
        ctx.Process(target=_procs.produce, args=(url, p, per_producer, batch))
        for p in range(producers)
    ]
    consumer_procs = [
        ctx.Process(target=_procs.consume, args=(url, str(log), done, vt, slow_every, slow_for))
        for log in logs
    ]
    with processes(*consumer_procs, *producer_procs):
        for proc in producer_procs:
            proc.join(60)
            assert proc.exitcode == 0
        done.set()
        for proc in consumer_procs:
            proc.join(60)
            assert proc.exitcode == 0
    return read_logs(logs)


def check_exactly_once_and_single_holder(
    entries: list[dict[str, Any]], expected_bodies: set[str], vt: float
) -> None:
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        by_id[entry["id"]].append(entry)
    acked = {e["body"] for e in entries if e["deleted"]}
    assert acked == expected_bodies, "lost or unexpected messages"
    for message_id, holds in by_id.items():
        assert sum(h["deleted"] for h in holds) == 1, f"{message_id} acked {len(holds)} times"
        holds.sort(key=lambda h: h["claimed"])
        for earlier, later in itertools.pairwise(holds):
            # What the earlier holder was surely still holding: until it settled,
            # and at least vt after it asked (the claim came later). The later
            # holder's claim came before its "claimed" time: so a later claim
            # time below this bound is a real double hold, never a timing artefact.
            surely_held_until = min(earlier["settled"], earlier["asked"] + int(vt * 1e9))
            assert later["claimed"] >= surely_held_until, f"{message_id} held twice at once"
        assert [h["count"] for h in holds] == sorted(h["count"] for h in holds)


def test_four_consumers_ack_every_message_exactly_once(tmp_path: Path) -> None:
    entries = run_race(tmp_path, producers=2, consumers=4, per_producer=1500, vt=30)
    expected = {f"{p}:{s}" for p in range(2) for s in range(1500)}
    check_exactly_once_and_single_holder(entries, expected, vt=30)
    assert len({e["pid"] for e in entries}) >= 2, "the consumers did not share the work"


def test_short_visibility_timeouts_redeliver_but_never_double_hold(tmp_path: Path) -> None:
    vt = 0.3
    entries = run_race(
        tmp_path, producers=1, consumers=4, per_producer=1200, vt=vt, slow_every=40, slow_for=0.5
    )
    check_exactly_once_and_single_holder(entries, {f"0:{s}" for s in range(1200)}, vt=vt)
    stale = [e for e in entries if not e["deleted"]]
    assert stale, "no consumer outlived its visibility timeout: the test exercised nothing"
    assert any(e["count"] > 1 for e in entries)


def first_delivery_order(entries: list[dict[str, Any]]) -> dict[int, list[int]]:
    firsts: dict[str, dict[str, Any]] = {}
    for entry in sorted(entries, key=lambda e: e["claimed"]):
        firsts.setdefault(entry["id"], entry)
    order: dict[int, list[int]] = defaultdict(list)
    for entry in firsts.values():  # insertion order = claim order
        producer, seq = map(int, entry["body"].split(":"))
        order[producer].append(seq)
    return order


@pytest.mark.parametrize("producers", [1, 3])
def test_each_producers_messages_are_first_delivered_in_send_order(
    tmp_path: Path, producers: int
) -> None:
    entries = run_race(tmp_path, producers=producers, consumers=1, per_producer=800, vt=30, batch=1)
    order = first_delivery_order(entries)
    assert sorted(order) == list(range(producers))
    for producer, seqs in order.items():
        assert seqs == list(range(800)), f"producer {producer} delivered out of order"


def test_killed_consumer_messages_come_back_after_the_visibility_timeout(tmp_path: Path) -> None:
    url = str(tmp_path / "jobs")
    with vsqs.Queue(url) as q:
        sent = q.send_batch([f"m{i}".encode() for i in range(5)])
        time.sleep(1.1)  # old enough to be claimable on the first listing
        ready = tmp_path / "ready"
        with processes(
            ctx.Process(target=_procs.hold_and_hang, args=(url, 3, 1.5, str(ready)))
        ) as [child]:
            deadline = time.monotonic() + 30
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            held = ready.read_text().split()
            assert held == sent[:3]
            os.kill(child.pid, signal.SIGKILL)
            child.join(10)
        untouched = q.receive_batch(10)
        assert [(m.id, m.receive_count) for m in untouched] == [(i, 1) for i in sent[3:]]
        back: list[vsqs.Message] = []
        while len(back) < 3:
            got = q.receive_batch(10, wait=10)
            assert got, "a killed consumer's messages never came back"
            back += got
        assert [(m.id, m.receive_count) for m in back] == [(i, 2) for i in sent[:3]]


def test_killed_producer_never_leaves_a_partial_visible_message(tmp_path: Path) -> None:
    url = str(tmp_path / "jobs")
    queue_dir = tmp_path / "jobs"
    vsqs.Queue(url).close()
    foreign = {"notes.txt": b"keep me", "1234": b"me too", "x" * names.ID_LEN: b"and me"}
    for name, data in foreign.items():
        (queue_dir / name).write_bytes(data)
    (queue_dir / "subdir").mkdir()
    rng = random.Random(7)
    for round_ in range(6):
        with processes(ctx.Process(target=_procs.produce_large, args=(url, round_))) as [child]:
            time.sleep(rng.uniform(0.6, 1.2))  # interpreter start-up, then a few sends
            os.kill(child.pid, signal.SIGKILL)
            child.join(10)
    time.sleep(0.3)
    with vsqs.Queue(url, new_grace=0.2) as q:
        received = 0
        while (msg := q.receive()) is not None:
            assert _procs.is_complete(msg.body), "a partial message became visible"
            msg.delete()
            received += 1
        assert received > 0, "the producer was killed before it sent anything"
        q.gc()
        left = {p.name for p in queue_dir.iterdir()}
        assert left == {names.CONFIG_NAME, "subdir", *foreign}
        for name, data in foreign.items():
            assert (queue_dir / name).read_bytes() == data
