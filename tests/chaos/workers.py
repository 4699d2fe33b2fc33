"""Process bodies of the chaos harness: producers, consumers and a collector.

Each runs in a process of its own and may be killed with SIGKILL at any
moment, so each writes what it does to its own log, one line per event, in
one ``write(2)`` per line (line buffered): a kill never tears a line. What a
line says happened, happened; what happened after the last line is unknown.

Bodies are ``<stream>:<seq>:<padding>``, the padding's length and bytes a
function of the rest (:func:`body`), so a consumer can tell a whole body
from a torn or foreign one.

Log lines (times: ``time.monotonic_ns()``, one clock for every process on
Linux; ``wall``: ``time.time_ns()``, the clock vsqs stamps expiries with):

* producer: ``s <seq> <n>`` before a send of ``n`` messages from ``seq`` on;
  ``S <id> <seq>`` once it returned; ``F <seq> <n> <error>`` if it raised.
  A restarted producer is a new stream.
* consumer: ``A <asked>`` before each receive; ``C <id> <count> <receipt>
  <got> <wall> <stream>:<seq> <whole>`` for each message it returned (one
  write per batch; ``whole`` 0: the body is not what :func:`body` makes);
  ``D <id> <count> <action> <start> <end> <ok>`` after a delete or release
  (``ok`` 0: ``ReceiptExpired``), announced by ``d <id> <count> <action>
  <start>`` before it starts (a kill may land after the store acted and
  before ``D`` is written).
* collector: ``G <name>`` for each name ``gc()`` removed.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
import zlib
from typing import IO, Any

import vsqs

from ..support.workers import open_queue

#: Producers send single messages or batches of up to this many.
MAX_SEND_BATCH = 8
#: Consumers receive batches of up to this many.
MAX_RECEIVE_BATCH = 4


class Flag:
    """A flag that survives SIGKILL of its waiters: a file that exists once set.

    (A ``multiprocessing.Event`` does not: a waiter killed inside ``wait()``
    leaves its condition counting a sleeper that never wakes, and ``set()``
    then blocks for ever.)
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def set(self) -> None:
        open(self.path, "w").close()

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; return early (True) once set."""
        deadline = time.monotonic() + timeout
        while not self.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.02))
        return True


def body(head: str, max_padding: int) -> bytes:
    """The body of message ``head`` (``<stream>:<seq>``): padded up to ``max_padding`` bytes."""
    digest = hashlib.sha256(head.encode()).digest()
    length = zlib.crc32(digest) % (max_padding + 1)
    return head.encode() + b":" + (digest * (length // 32 + 1))[:length]


def head_of(data: bytes, max_padding: int) -> tuple[str, bool]:
    """A received body's ``<stream>:<seq>`` and whether the body is whole."""
    head = data.split(b":", 2)
    text = b":".join(head[:2]).decode(errors="replace").replace(" ", "?")
    return text, body(text, max_padding) == data


def _log(path: str) -> IO[str]:
    return open(path, "w", buffering=1)


def produce(
    target: Any,
    log_path: str,
    stream: str,
    rate: float,
    max_padding: int,
    durable: bool,
    seed: int,
    stop: Flag,
) -> None:
    """Send ``<stream>:<seq>`` bodies in order, about ``rate`` a second, until ``stop``."""
    rng = random.Random(seed)
    with _log(log_path) as log, open_queue(target, durable=durable) as q:
        seq, due = 0, time.monotonic()
        while not stop.is_set():
            count = 1 if rng.random() < 0.5 else rng.randint(2, MAX_SEND_BATCH)
            bodies = [body(f"{stream}:{s}", max_padding) for s in range(seq, seq + count)]
            log.write(f"s {seq} {count}\n")
            try:
                ids = q.send_batch(bodies) if count > 1 else [q.send(bodies[0])]
            except vsqs.VsqsError as exc:
                log.write(f"F {seq} {count} {type(exc).__name__}\n")
            else:
                log.write("".join(f"S {i} {seq + k}\n" for k, i in enumerate(ids)))
            seq += count
            due = max(due + count / rate, time.monotonic() - 1.0)
            stop.wait(due - time.monotonic())


def consume(
    target: Any,
    log_path: str,
    vt: float,
    max_padding: int,
    seed: int,
    p_release: float,
    p_slow: float,
    drain: Flag,
) -> None:
    """Receive and delete (sometimes release, sometimes outlive ``vt`` first).

    Returns once ``drain`` is set and nothing is ready, in flight or delayed.
    """
    rng = random.Random(seed)
    with _log(log_path) as log, open_queue(target) as q:
        while True:
            asked = time.monotonic_ns()
            log.write(f"A {asked}\n")
            size = rng.randint(1, MAX_RECEIVE_BATCH)
            batch = q.receive_batch(size, visibility_timeout=vt, wait=0.2)
            got, wall = time.monotonic_ns(), time.time_ns()
            if not batch:
                if drain.is_set():
                    stats = q.stats()
                    if stats.ready + stats.in_flight + stats.delayed == 0:
                        return
                continue
            lines = []
            for m in batch:
                head, whole = head_of(m.body, max_padding)
                lines.append(
                    f"C {m.id} {m.receive_count} {m.receipt} {got} {wall} {head} {whole:d}\n"
                )
            log.write("".join(lines))
            for msg in batch:
                if rng.random() < p_slow:
                    time.sleep(rng.uniform(0.5, 1.5) * vt)  # may outlive its receipt
                action = "release" if rng.random() < p_release else "delete"
                start = time.monotonic_ns()
                log.write(f"d {msg.id} {msg.receive_count} {action} {start}\n")
                try:
                    msg.release() if action == "release" else msg.delete()
                    ok = 1
                except vsqs.ReceiptExpired:
                    ok = 0
                end = time.monotonic_ns()
                log.write(f"D {msg.id} {msg.receive_count} {action} {start} {end} {ok}\n")


def collect(target: Any, log_path: str, grace: float, stop: Flag) -> None:
    """Run ``gc()`` with leftovers older than ``grace`` seconds, every 0.2 s, until ``stop``."""
    with _log(log_path) as log, open_queue(target, new_grace=grace) as q:
        while not stop.wait(0.2):
            log.write("".join(f"G {name}\n" for name in q.gc()))
