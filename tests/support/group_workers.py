"""Process bodies for ``tests/test_groups_processes.py``: consumers of a
queue of message groups, and senders of one deduplication id at once.

Spawned interpreters ("spawn" start method) import them from here. Each
logs what it did to its own file, one JSON line per event, flushed line by
line; times are ``time.monotonic_ns()``, one clock for every process on Linux.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import vsqs

#: A consumer that has received nothing for this long gives up (exit code 3),
#: so a queue that stopped delivering fails the test instead of hanging it.
STALL_DEADLINE = 60.0
EXIT_STALLED = 3


def body(group: int, seq: int) -> str:
    return f"{group}:{seq}"


def parse_body(data: bytes) -> tuple[int, int]:
    group, seq = data.decode().split(":")
    return int(group), int(seq)


def consume_groups(
    path: str,
    log_path: str,
    acked: Any,
    total: int,
    seed: int,
    p_release: float,
    feed: bool,
    start: Any,
) -> None:
    """Receive batches of 1-3 and handle their messages one at a time, in
    batch order, until ``acked`` (a shared counter) reaches ``total``.

    Per message it logs ``got`` (when its batch's receive returned),
    ``settle`` (just before its delete or release) and ``action``:
    ``delete``; ``release`` (its handler failed, with probability
    ``p_release``); ``return`` (a message of a group whose earlier message
    of the same batch was released: given back unhandled, as a consumer
    must, since it may not pass its group's head).
    """
    rng = random.Random(seed)
    last_work = time.monotonic()
    store = vsqs.LocalStore(path, notifications=feed)
    with vsqs.Queue(store) as q, open(log_path, "w", buffering=1) as log:
        batch_no = 0
        start.wait(timeout=STALL_DEADLINE)
        while acked.value < total:
            batch = q.receive_batch(rng.randint(1, 3), wait=0.2)
            got = time.monotonic_ns()
            if not batch:
                if time.monotonic() - last_work > STALL_DEADLINE:
                    raise SystemExit(EXIT_STALLED)
                continue
            last_work = time.monotonic()
            batch_no += 1
            failed: set[str | None] = set()
            for msg in batch:
                group, seq = parse_body(msg.body)
                assert msg.group == f"g{group}", (msg.group, group)
                if msg.group in failed:
                    action = "return"
                elif rng.random() < p_release:
                    action = "release"
                    failed.add(msg.group)
                else:
                    action = "delete"
                settle = time.monotonic_ns()
                if action == "delete":
                    msg.delete()  # a stale receipt raises: the test fails
                    with acked.get_lock():
                        acked.value += 1
                else:
                    msg.release()
                event = {
                    "batch": batch_no,
                    "group": group,
                    "seq": seq,
                    "id": msg.id,
                    "count": msg.receive_count,
                    "got": got,
                    "settle": settle,
                    "action": action,
                }
                log.write(json.dumps(event) + "\n")


def send_once(path: str, log_path: str, barrier: Any, rounds: int, index: int) -> None:
    """For each round, wait with the other senders at ``barrier``, then send
    a body of its own under the round's deduplication id; log the id it got."""
    with vsqs.Queue(path) as q, open(log_path, "w", buffering=1) as log:
        for r in range(rounds):
            barrier.wait(timeout=STALL_DEADLINE)
            message_id = q.send(f"round {r} from {index}", dedup_id=f"event-{r}", group="g")
            log.write(json.dumps({"round": r, "id": message_id}) + "\n")


def hold_and_hang(path: str, vt: float, holding: Any, release: Any) -> None:
    """Receive one message for ``vt`` seconds, say so through ``holding``,
    then wait for ``release``, which never comes: the test kills it."""
    with vsqs.Queue(path) as q:
        msg = q.receive(visibility_timeout=vt)
        assert msg is not None
        holding.set()
        release.wait()
