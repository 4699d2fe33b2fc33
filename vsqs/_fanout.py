"""Bounded concurrency for the requests of one batch.

On object stores every storage call is one or more round trips, so a batch
(``send_batch``, ``receive_batch``, ``delete_batch``, a Spark commit) runs its
calls side by side: at most :data:`IN_FLIGHT` of one batch at once, on one
process-wide pool of threads. The threads only wait: s3fs and gcsfs send
every request on fsspec's own event loop, which serves them all at once.

Guarantees: :func:`fan_out` returns once every call has finished, with one
outcome per item in the items' order; a call never runs twice. A call made
from one of the pool's own threads runs its items one after another in that
thread, so nested batches cannot exhaust the pool. A forked child starts
with a pool of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Calls of one batch in flight at once: 100 sends at 20 ms a request take
#: about 4 round trips.
IN_FLIGHT = 32
#: Threads of the process-wide pool (two batches at full width).
POOL_THREADS = 2 * IN_FLIGHT

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_local = threading.local()


def _reset_after_fork() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()  # the parent's threads are not ours


os.register_at_fork(after_in_child=_reset_after_fork)


def _mark_worker() -> None:
    _local.worker = True


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                POOL_THREADS, thread_name_prefix="vsqs-batch", initializer=_mark_worker
            )
        return _pool


class Outcome(Generic[R]):
    """How one call ended: its value, or the exception it raised."""

    __slots__ = ("error", "value")

    def __init__(self, value: R | None = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error

    def exception(self) -> BaseException | None:
        return self.error

    def result(self) -> R:
        """The value; the call's exception is raised again."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def _call(fn: Callable[[T], R], item: T) -> Outcome[R]:
    try:
        return Outcome(fn(item))
    except BaseException as exc:  # handed to the caller, as a pool would
        return Outcome(error=exc)


def fan_out(fn: Callable[[T], R], items: Sequence[T], limit: int = IN_FLIGHT) -> list[Outcome[R]]:
    """Call ``fn`` on every item, up to ``limit`` at once; return how each call
    ended, in the items' order (``.result()`` re-raises a call's error)."""
    if len(items) <= 1 or limit <= 1 or getattr(_local, "worker", False):
        return [_call(fn, item) for item in items]
    pool = _shared_pool()
    futures: list[Future[Outcome[R]]] = []
    running: set[Future[Outcome[R]]] = set()
    for item in items:
        if len(running) >= limit:
            _, running = wait(running, return_when=FIRST_COMPLETED)
        future = pool.submit(_call, fn, item)
        futures.append(future)
        running.add(future)
    wait(running)
    return [future.result() for future in futures]
