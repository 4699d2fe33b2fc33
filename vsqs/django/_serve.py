"""A worker: the queues it serves, each consumed in a thread of its own
with up to ``concurrency`` tasks at once, a budget of tasks, an idle
timeout, and a stop in two steps (docs/django.md): the first stops taking
tasks and waits for those running, the second releases them at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from django.utils.crypto import get_random_string

from .. import _forks
from .._config import seconds
from .._errors import InvalidArgument, VsqsError
from .._message import Message
from .._queue import Queue
from ._backend import QueueBackend
from ._runner import TaskRunner

log = logging.getLogger("vsqs.django")

#: Seconds between two looks at the idle time and the consume threads.
TICK = 0.2
#: Seconds between two collections of old results by a running worker.
COLLECT_EVERY = 3600.0


class Worker:
    """Serves ``queue_names`` of ``backend`` until :meth:`stop`, ``max_tasks``
    tasks, or ``idle_timeout`` seconds without a task (all thread-safe).
    While it runs it removes the results past the backend's retention, when
    it starts and then every hour."""

    def __init__(
        self,
        backend: QueueBackend,
        queue_names: Iterable[str],
        *,
        concurrency: int = 1,
        max_tasks: int | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgument(
                f"concurrency must be a whole number above 0, not {concurrency!r}"
            )
        if max_tasks is not None and (not isinstance(max_tasks, int) or max_tasks < 1):
            raise InvalidArgument(f"max_tasks must be a whole number above 0, not {max_tasks!r}")
        if idle_timeout is not None:
            idle_timeout = seconds(idle_timeout, "idle_timeout")
        self.backend = backend
        self.queues = [backend.queue(name) for name in dict.fromkeys(queue_names)]
        self.concurrency, self.idle_timeout = concurrency, idle_timeout
        self.worker_id = get_random_string(32)
        self.ran = 0
        self._left = max_tasks
        self._stop, self._abandon = _forks.event(), _forks.event()
        # Reentrant: the command's signal handler takes it in the main thread,
        # which may hold it already (in _idle) when the signal lands.
        self._lock = _forks.rlock()
        self._in_hand: dict[int, tuple[Queue, Message]] = {}
        self._last_task = time.monotonic()
        self._error: BaseException | None = None

    def run(self) -> int:
        """Serve until stopped; return how many tasks ran. Raises what
        stopped a queue's consume (the others stop too)."""
        threads = [
            threading.Thread(target=self._consume, args=(q,), name="vsqs-django", daemon=True)
            for q in self.queues
        ]
        for thread in threads:
            thread.start()
        collected = None
        while any(t.is_alive() for t in threads) and not self._abandon.is_set():
            if collected is None or time.monotonic() - collected >= COLLECT_EVERY:
                collected = time.monotonic()
                self._collect()
            self._abandon.wait(TICK)
            if self._idle():
                self._stop.set()
        if self._error is not None:
            raise self._error
        return self.ran

    @property
    def running(self) -> int:
        """How many tasks are in hand now."""
        with self._lock:
            return len(self._in_hand)

    def stop(self) -> None:
        """Take no more tasks; :meth:`run` returns once those running end."""
        self._stop.set()

    def release(self) -> int:
        """Stop, release the tasks in hand (visible again at once) and make
        :meth:`run` return now; return how many were released."""
        self._stop.set()
        with self._lock:
            held = list(self._in_hand.values())
        released = 0
        for queue, message in held:
            try:
                queue.release(message)
                released += 1
            except VsqsError as exc:  # settled meanwhile, or it comes back at its expiry
                log.warning("%s: could not release %s: %s", queue.url, message.id, exc)
        self._abandon.set()
        return released

    def _collect(self) -> None:
        """Remove the results past their retention; a failure is logged, not fatal."""
        try:
            removed = self.backend.collect_results()
        except VsqsError as exc:
            log.warning("%s: results not collected: %s", self.backend.results.where, exc)
        else:
            if removed:
                log.info(
                    "%s: removed %d result(s) past retention", self.backend.results.where, removed
                )

    def _idle(self) -> bool:
        if self.idle_timeout is None:
            return False
        with self._lock:
            return not self._in_hand and time.monotonic() - self._last_task >= self.idle_timeout

    def _consume(self, queue: Queue) -> None:
        try:
            queue.consume(
                self._handler(queue, TaskRunner(self.backend, queue, self.worker_id)),
                concurrency=self.concurrency,
                stop=self._stop,
                visibility_timeout=self.backend.visibility_timeout,
            )
        except BaseException as exc:
            self._error = exc
            self._stop.set()

    def _handler(self, queue: Queue, runner: TaskRunner) -> Callable[[Message], None]:
        def handle(message: Message) -> None:
            with self._lock:
                taken = self._left is None or self._left > 0
                if taken:
                    self._left = None if self._left is None else self._left - 1
                    self._in_hand[id(message)] = (queue, message)
            if not taken:  # the budget is spent: for another worker
                self._stop.set()
                message.release()
                return
            ran = False
            try:
                ran = runner(message)
            finally:
                with self._lock:
                    del self._in_hand[id(message)]
                    if ran:
                        self.ran += 1
                        self._last_task = time.monotonic()
                    elif self._left is not None:  # no task ran: the budget is not spent
                        self._left += 1
                    if self._left == 0:
                        self._stop.set()

        return handle
