"""Racing producer and consumer processes on one queue (bodies in
``tests/support/workers.py``), and the check of what they logged: every
message acked exactly once, none held by two consumers at once."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from vsqs import _names as names

from . import workers

ctx = get_context("spawn")


# ---------------------------------------------------------------- helpers
@contextmanager
def running(*procs: Any) -> Iterator[list[Any]]:
    """Start processes; whatever happens, none outlives the block."""
    started: list[Any] = []
    try:
        for proc in procs:
            proc.start()
            started.append(proc)
        yield started
    finally:
        for proc in started:
            if proc.is_alive():
                proc.kill()
        for proc in started:
            proc.join(10)


def join_while_logging(proc: Any, log: Path, what: str) -> None:
    """Wait for ``proc`` for as long as its ``log`` grows: a slow machine is
    waited for, a process whose log stands still for longer than a worker's
    own stall bound fails the test."""
    size, still_since = -1, time.monotonic()
    while proc.is_alive():
        proc.join(1)
        now_size = log.stat().st_size if log.exists() else 0
        if now_size != size:
            size, still_since = now_size, time.monotonic()
        assert time.monotonic() - still_since < workers.STALL_DEADLINE + 10, (
            f"{what} logged nothing for {workers.STALL_DEADLINE + 10:.0f} s"
        )


def read_sent(paths: list[Path]) -> dict[str, str]:
    """Producer logs: message id -> body."""
    sent: dict[str, str] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            message_id, body = line.split(" ")
            assert message_id not in sent, f"id {message_id} issued twice"
            sent[message_id] = body
    return sent


def queue_files(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


# ------------------------------------------------- 1. racing consumers
def run_race(
    tmp_path: Path,
    *,
    producers: list[tuple[int, str, bool]],
    consumers: int,
    vt: float,
    max_batch: int,
    p_release: float,
    p_slow: float = 0.0,
    slow: tuple[float, float] = (0.0, 0.0),
    target: list[Any] | None = None,
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Run producers ``(count, mode, durable)`` and consumers on one queue until it drains.

    The queue is a directory under ``tmp_path``, or ``target`` (``[url,
    storage_options]``). Returns what was sent (id -> body) and every
    consumer's claims.
    """
    qdir = tmp_path / "jobs"
    url: str | list[Any] = str(qdir) if target is None else target
    workers.open_queue(url).close()
    done = ctx.Event()
    sent_logs = [tmp_path / f"producer-{i}.log" for i in range(len(producers))]
    claim_logs = [tmp_path / f"consumer-{i}.jsonl" for i in range(consumers)]
    producer_procs = [
        ctx.Process(target=workers.produce, args=(url, str(log), i, count, mode, durable, 1000 + i))
        for i, ((count, mode, durable), log) in enumerate(zip(producers, sent_logs, strict=True))
    ]
    consumer_procs = [
        ctx.Process(
            target=workers.race_consume,
            args=(url, str(log), done, vt, i, max_batch, p_release, p_slow, *slow),
        )
        for i, log in enumerate(claim_logs)
    ]
    with running(*consumer_procs, *producer_procs):
        for proc, log in zip(producer_procs, sent_logs, strict=True):
            join_while_logging(proc, log, "a producer")
            assert proc.exitcode == 0, "a producer failed"
        done.set()
        for proc, log in zip(consumer_procs, claim_logs, strict=True):
            join_while_logging(proc, log, "a consumer")
            assert proc.exitcode == 0, f"a consumer failed (exit code {proc.exitcode})"
    sent = read_sent(sent_logs)
    assert len(sent) == sum(count for count, _, _ in producers)
    claims = [json.loads(line) for log in claim_logs for line in log.read_text().splitlines()]
    with workers.open_queue(url) as q:
        left = set(q.store.list())
    assert left == {names.CONFIG_NAME}, "the drained queue left messages behind"
    if target is None:
        assert queue_files(qdir) == {names.CONFIG_NAME}
    return sent, claims


def check_race(sent: dict[str, str], claims: list[dict[str, Any]], vt: float) -> None:
    """Every message acked exactly once, none lost, none held by two consumers at once."""
    vt_ns = int(vt * 1e9)
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in claims:
        assert c["id"] in sent, f"received {c['id']}, which nobody sent"
        assert c["body"] == sent[c["id"]], f"{c['id']} arrived with another body"
        held, _, place = c["receipt"].partition("#")  # a bundled one names its part
        parsed = names.parse_receipt(held)
        assert (parsed.id if not place else c["id"], parsed.receive_count) == (c["id"], c["count"])
        by_id[c["id"]].append(c)

    acks = Counter(c["id"] for c in claims if c["action"] == "delete" and c["ok"])
    lost = set(sent) - set(acks)
    assert not lost, f"{len(lost)} messages never acked, e.g. {sorted(lost)[:3]}"
    twice = sorted(i for i, n in acks.items() if n != 1)
    assert not twice, f"{len(twice)} messages acked more than once, e.g. {twice[:3]}"

    for message_id, holds in by_id.items():
        counts = [h["count"] for h in holds]
        assert len(set(counts)) == len(counts), (
            f"{message_id}: two claims with one receive count {sorted(counts)}: "
            "two renames of the same name both succeeded"
        )
        holds.sort(key=lambda h: h["count"])
        last = holds[-1]
        assert last["action"] == "delete" and last["ok"], (
            f"{message_id} was claimed again after it was deleted"
        )

        # The surely-held intervals never overlap.
        intervals = sorted(
            (h["got"], min(h["settle_start"], h["asked"] + vt_ns), h["pid"]) for h in holds
        )
        held_until, holder = -1, None
        for start, end, pid in intervals:
            assert start >= held_until, (
                f"{message_id} held by pids {holder} and {pid} at once "
                f"({(held_until - start) / 1e6:.3f} ms overlap)"
            )
            if end > held_until:
                held_until, holder = end, pid

        # A receipt that failed was stale: someone else had claimed the message
        # again (later count) before the failed call returned.
        for h in holds:
            if not h["ok"]:
                assert any(
                    o["count"] > h["count"] and o["asked"] <= h["settle_end"] for o in holds
                ), f"{message_id}: {h['action']} of {h['receipt']} failed, yet no one else held it"

        # Consecutive claims: the next came after a release, or after the expiry.
        for prev, nxt in itertools.pairwise(holds):
            if nxt["count"] != prev["count"] + 1:
                continue  # a claim whose body read lost a race is not logged
            if prev["action"] == "release" and prev["ok"]:
                assert nxt["got"] >= prev["settle_start"], f"{message_id} taken before release"
            else:
                expiry_ms = names.parse(prev["receipt"].partition("#")[0]).expiry_ms  # type: ignore[union-attr]
                # 1 ms: float rounding of time.time() at the claimer's "now".
                assert nxt["got_wall"] + 1_000_000 >= expiry_ms * 1_000_000, (
                    f"{message_id} re-claimed {(expiry_ms * 1e6 - nxt['got_wall']) / 1e6:.1f} ms "
                    f"before the expiry of {prev['receipt']}"
                )
