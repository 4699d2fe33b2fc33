"""Process bodies for ``tests/test_processes.py``.

They live in an importable module so that ``multiprocessing``'s "spawn"
start method can run them in fresh interpreters. Every worker writes what it
did to its own log file, one line per event, flushed line by line, so the
parent can check the log even after a ``kill -9``.

Times are ``time.monotonic_ns()`` (one clock for every process on Linux) and,
where a receipt's expiry must be compared, ``time.time_ns()`` (the clock
vsqs stamps expiries with).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import sys
import time
from typing import Any

import vsqs

#: A consumer that has received nothing for this long since the producers
#: finished gives up (exit code 3), so a stuck queue fails the test instead of
#: hanging it. A bound on a stall, not on the run: a busy machine that is slow
#: but making progress never trips it.
STALL_DEADLINE = 60.0
EXIT_DEADLINE = 3


def open_queue(target: str | list[Any], **kwargs: Any) -> vsqs.Queue:
    """A queue from a path or URL, or from ``[url, storage_options]``."""
    if isinstance(target, list):
        url, options = target
        return vsqs.Queue(url, storage_options=options, **kwargs)
    return vsqs.Queue(target, **kwargs)


def _open_log(path: str) -> Any:
    return open(path, "w", buffering=1)  # line buffered: one write(2) per event


def produce(
    url: str,
    log_path: str,
    producer: int,
    count: int,
    mode: str,
    durable: bool,
    seed: int,
    pause_every: int = 0,
    pause: float = 0.0,
    hold: str = "",
) -> None:
    """Send bodies ``"<producer>:<seq>"`` for seq in ``range(count)``, in order.

    ``mode`` is ``"single"`` (``send``), ``"batch"`` (``send_batch`` of 1-20)
    or ``"mixed"``. Logs ``"<id> <body>"`` once each send returned. With
    ``hold`` (a path), the second half waits until that file exists (at most
    STALL_DEADLINE), so a consumer that creates it once it received runs
    alongside the producer however the machine schedules them.
    """
    rng = random.Random(seed)
    with open_queue(url, durable=durable) as q, _open_log(log_path) as log:
        seq = 0
        while seq < count:
            if hold and seq >= count // 2:
                give_up = time.monotonic() + STALL_DEADLINE
                while not os.path.exists(hold) and time.monotonic() < give_up:
                    time.sleep(0.01)
                hold = ""
            batch = mode == "batch" or (mode == "mixed" and rng.random() < 0.5)
            if batch:
                bodies = [
                    f"{producer}:{s}" for s in range(seq, min(count, seq + rng.randint(1, 20)))
                ]
                ids = q.send_batch(bodies)
            else:
                bodies = [f"{producer}:{seq}"]
                ids = [q.send(bodies[0])]
            assert len(ids) == len(bodies)
            log.write("".join(f"{i} {b}\n" for i, b in zip(ids, bodies, strict=True)))
            before = seq
            seq += len(ids)
            if pause_every and before // pause_every != seq // pause_every:
                time.sleep(pause)


def race_consume(
    url: str,
    log_path: str,
    done: Any,
    vt: float,
    seed: int,
    max_batch: int,
    p_release: float,
    p_slow: float,
    slow_min: float,
    slow_max: float,
) -> None:
    """Receive, then delete (or sometimes release) until ``done`` and the queue is empty.

    One JSON line per claim: id, receipt, receive count, body; ``asked`` (before
    the receive call: the claim and the receipt's expiry came later), ``got``
    and ``got_wall`` (after it returned: the claim came earlier), ``settle_start``
    and ``settle_end`` around the delete or release, the action and whether it
    succeeded (``False``: ``ReceiptExpired``). With probability ``p_slow`` the
    consumer sleeps ``slow_min..slow_max`` seconds before settling, to outlive
    short visibility timeouts.
    """
    rng = random.Random(seed)
    give_up = time.monotonic() + STALL_DEADLINE
    left_before = None
    pid = os.getpid()
    with open_queue(url) as q, _open_log(log_path) as log:
        while True:
            if time.monotonic() > give_up:
                sys.exit(EXIT_DEADLINE)
            asked = time.monotonic_ns()
            msgs = q.receive_batch(rng.randint(1, max_batch), visibility_timeout=vt, wait=0.2)
            got = time.monotonic_ns()
            got_wall = time.time_ns()
            if msgs or not done.is_set():
                give_up = time.monotonic() + STALL_DEADLINE
            if not msgs:
                if done.is_set():
                    stats = q.stats()
                    left = stats.ready + stats.in_flight + stats.delayed
                    if left == 0:
                        return
                    if left != left_before:  # others are draining it: no stall
                        left_before, give_up = left, time.monotonic() + STALL_DEADLINE
                continue
            claims = [(m, m.receipt, m.receive_count) for m in msgs]
            for msg, receipt, count in claims:
                if rng.random() < p_slow:
                    time.sleep(rng.uniform(slow_min, slow_max))
                action = "release" if rng.random() < p_release else "delete"
                settle_start = time.monotonic_ns()
                try:
                    if action == "release":
                        msg.release()
                    else:
                        msg.delete()
                    ok = True
                except vsqs.ReceiptExpired:
                    ok = False
                settle_end = time.monotonic_ns()
                entry = {
                    "id": msg.id,
                    "receipt": receipt,
                    "count": count,
                    "body": msg.body.decode(),
                    "asked": asked,
                    "got": got,
                    "got_wall": got_wall,
                    "settle_start": settle_start,
                    "settle_end": settle_end,
                    "action": action,
                    "ok": ok,
                    "pid": pid,
                }
                log.write(json.dumps(entry) + "\n")


def hold_and_hang(url: str, count: int, vt: float, ready_path: str) -> None:
    """Receive ``count`` messages, publish their receipts atomically, then hang.

    ``ready_path`` gets a JSON list of ``[id, receipt, receive_count]``.
    """
    with vsqs.Queue(url) as q:
        held: list[vsqs.Message] = []
        deadline = time.monotonic() + 20
        while len(held) < count and time.monotonic() < deadline:
            held += q.receive_batch(count - len(held), visibility_timeout=vt, wait=1)
        tmp = ready_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump([[m.id, m.receipt, m.receive_count] for m in held], f)
        os.rename(tmp, ready_path)
        time.sleep(3600)


def busy_consume(url: str, log_path: str, vt: float, batch: int, seed: int) -> None:
    """Receive batches, "work" up to 1 ms on each message, delete it; forever (until killed).

    Logs ``recv <id> <count>`` after each receive returned, ``deleting <id>``
    before each delete and ``deleted <id>`` after it returned.
    """
    rng = random.Random(seed)
    with vsqs.Queue(url) as q, _open_log(log_path) as log:
        log.write("started\n")
        while True:
            msgs = q.receive_batch(batch, visibility_timeout=vt, wait=1)
            log.write("".join(f"recv {m.id} {m.receive_count}\n" for m in msgs))
            for m in msgs:
                time.sleep(rng.uniform(0, 0.001))
                log.write(f"deleting {m.id}\n")
                m.delete()
                log.write(f"deleted {m.id}\n")


HEADER = struct.Struct(">Q32s")  # payload length, sha256 of the payload


def framed(payload: bytes) -> bytes:
    return HEADER.pack(len(payload), hashlib.sha256(payload).digest()) + payload


def is_complete(body: bytes) -> bool:
    if len(body) < HEADER.size:
        return False
    length, digest = HEADER.unpack_from(body)
    payload = body[HEADER.size :]
    return len(payload) == length and hashlib.sha256(payload).digest() == digest


def produce_large(url: str, log_path: str, seed: int) -> None:
    """Send framed bodies of 256 KiB-2 MiB durably, forever (until killed).

    Logs each id once its send returned.
    """
    rng = random.Random(seed)
    with vsqs.Queue(url) as q, _open_log(log_path) as log:
        while True:
            payload = rng.randbytes(rng.randrange(256 << 10, 2 << 20))
            log.write(q.send(framed(payload)) + "\n")
