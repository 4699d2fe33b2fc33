"""Worker functions for the multi-process tests (importable by 'spawn' children)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import time
from typing import Any

import vsqs


def produce(url: str, producer: int, count: int, batch: int) -> None:
    """Send ``count`` bodies ``"<producer>:<seq>"`` in send order."""
    with vsqs.Queue(url) as q:
        for start in range(0, count, batch):
            bodies = [f"{producer}:{seq}" for seq in range(start, min(count, start + batch))]
            if batch == 1:
                q.send(bodies[0])
            else:
                q.send_batch(bodies)


def consume(
    url: str, log_path: str, done: Any, vt: float, slow_every: int, slow_for: float
) -> None:
    """Receive and delete until the producers are done and the queue is empty.

    Logs one JSON line per receive: id, body, receive count, the monotonic
    times (ns, system-wide) before the receive call (a lower bound of the
    claim, so ``asked + vt`` is a lower bound of the expiry), right after it,
    and right before the settle; and whether the delete succeeded. About one
    message in ``slow_every`` is held ``slow_for`` seconds first (to outlive
    short visibility timeouts).
    """
    rng = random.Random(os.getpid())
    with vsqs.Queue(url) as q, open(log_path, "w") as log:
        handled = 0
        while True:
            asked = time.monotonic_ns()
            msg = q.receive(visibility_timeout=vt, wait=0.2)
            if msg is None:
                if done.is_set():
                    stats = q.stats()
                    if stats.ready + stats.in_flight + stats.delayed == 0:
                        return
                continue
            claimed = time.monotonic_ns()
            handled += 1
            if slow_every and rng.randrange(slow_every) == 0:
                time.sleep(slow_for)
            settled = time.monotonic_ns()
            try:
                msg.delete()
                deleted = True
            except vsqs.ReceiptExpired:
                deleted = False
            entry = {
                "id": msg.id,
                "body": msg.body.decode(),
                "count": msg.receive_count,
                "asked": asked,
                "claimed": claimed,
                "settled": settled,
                "deleted": deleted,
                "pid": os.getpid(),
            }
            log.write(json.dumps(entry) + "\n")
            log.flush()


def hold_and_hang(url: str, count: int, vt: float, ready_path: str) -> None:
    """Receive ``count`` messages, say so, then hang until killed."""
    with vsqs.Queue(url) as q:
        held = q.receive_batch(count, visibility_timeout=vt, wait=5)
        with open(ready_path, "w") as ready:
            ready.write("\n".join(m.id for m in held))
        time.sleep(3600)


HEADER = struct.Struct(">Q32s")


def framed(payload: bytes) -> bytes:
    return HEADER.pack(len(payload), hashlib.sha256(payload).digest()) + payload


def is_complete(body: bytes) -> bool:
    if len(body) < HEADER.size:
        return False
    length, digest = HEADER.unpack_from(body)
    payload = body[HEADER.size :]
    return len(payload) == length and hashlib.sha256(payload).digest() == digest


def produce_large(url: str, seed: int) -> None:
    """Send large framed bodies forever (until killed), durably."""
    rng = random.Random(seed)
    with vsqs.Queue(url) as q:
        while True:
            payload = rng.randbytes(rng.randrange(256 << 10, 2 << 20))
            q.send(framed(payload))
