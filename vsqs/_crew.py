"""The loop of :meth:`vsqs.Queue.consume`: its handlers, one at a time or
side by side, each group's messages in order and never two at once
(:class:`Crew`), on the parts of :mod:`vsqs._worker`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from queue import SimpleQueue
from types import TracebackType

from . import _forks
from . import _meter as meter
from ._errors import VsqsError
from ._message import Message, give_back
from ._options import ConsumePlan
from ._worker import (
    POLL,
    ConsumePacing,
    Heartbeat,
    Run,
    WorkerQueue,
    failure_log,
    interruptible,
    settle,
)

log = logging.getLogger("vsqs")


def lanes(messages: list[Message]) -> list[list[Message]]:
    """``messages`` (one receive's) in lanes: a group's in order, one lane
    per group; a message without a group is a lane of its own."""
    out: list[list[Message]] = []
    by_group: dict[str, list[Message]] = {}
    for message in messages:
        if message.group is None:
            out.append([message])
        elif message.group in by_group:
            by_group[message.group].append(message)
        else:
            out.append(by_group.setdefault(message.group, [message]))
    return out


class Crew:
    """The handlers of one ``consume``: up to ``concurrency`` messages in
    hand at once, in the calling thread when it is 1, else in as many daemon
    threads (a handler that never returns cannot keep an interrupted process
    alive). Each receive takes at most the free slots, and what it returned
    runs in :func:`lanes`: a lane's messages one after another in order, the
    next once the previous one is settled. Once one is not settled as a
    success, the rest of its lane is given back (visible again at once, its
    receive count as before), behind its group's head. As the receiver gives
    nothing of a group while one of its messages is in flight, no two
    messages of a group are ever handled side by side.
    """

    def __init__(
        self,
        queue: WorkerQueue,
        handler: Callable[[Message], object],
        plan: ConsumePlan,
        heartbeat: Heartbeat,
        run: Run,
    ) -> None:
        self._queue, self._handler, self._plan = queue, handler, plan
        self._heartbeat, self._run = heartbeat, run
        self._pacing = ConsumePacing(queue, plan)
        self._failures = failure_log(queue)
        self._changed = _forks.condition()
        self._in_hand = 0
        self._error: BaseException | None = None  # out of a thread: ends the consume
        self._closed = False
        self._lanes: SimpleQueue[list[Message] | None] = SimpleQueue()
        size = plan.concurrency
        self._threads = [
            threading.Thread(target=self._work, name="vsqs-consume", daemon=True)
            for _ in range(size if size > 1 else 0)
        ]

    def __enter__(self) -> Crew:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: object, tb: TracebackType | None
    ) -> None:
        """Let no lane start another message; on an exception, leave the
        handlers under way (their messages are released) and return."""
        self._closed = True
        for _ in self._threads:
            self._lanes.put(None)
        if exc_type is None:
            for thread in self._threads:
                thread.join()

    def run(self) -> None:
        """Receive and hand out until pacing says stop, then wait for the
        messages in hand; an error out of a thread is raised here."""
        while (room := self._room()) is not None:
            wait, most = room
            got = self._queue.receive_batch(
                most, visibility_timeout=self._plan.visibility_timeout, wait=wait
            )
            if not got:
                continue
            self._run.hold(*got)
            with self._changed:
                self._in_hand += len(got)
                self._pacing.received(len(got))
            self._heartbeat.add(*got)
            for lane in lanes(got):
                if self._threads:
                    self._lanes.put(lane)
                else:
                    self._lane(lane)
        with self._changed:
            self._wait(lambda: not self._in_hand)

    def _room(self) -> tuple[float, int] | None:
        """Once a slot is free: how long the next receive may wait and how
        many it may take; ``None`` to stop."""
        with self._changed:
            size = self._plan.concurrency
            self._wait(lambda: self._in_hand < size)
            wait = self._pacing.next_wait()
            return None if wait is None else (wait, self._pacing.room(size - self._in_hand))

    def _wait(self, ready: Callable[[], bool]) -> None:
        """Wait (holding the lock) until ``ready()``; raise an error out of a
        thread. In steps of :data:`POLL`: a signal that the kernel handed to
        another thread runs its Python handler here, when this thread wakes."""
        while not self._changed.wait_for(lambda: ready() or self._error is not None, POLL):
            pass
        if self._error is not None:
            raise self._error

    def _work(self) -> None:
        while (lane := self._lanes.get()) is not None:
            try:
                self._lane(lane)
            except BaseException as exc:  # raised in the calling thread, which stops
                with self._changed:
                    self._error = self._error or exc
                    self._changed.notify_all()

    def _lane(self, lane: list[Message]) -> None:
        for at, message in enumerate(lane):
            if self._closed:  # interrupted: what is left is released
                return
            if not self._handle(message) and at + 1 < len(lane):
                self._give_back(lane[at + 1 :])
                return

    def _handle(self, message: Message) -> bool:
        """Run the handler on ``message`` and settle it; whether it succeeded."""
        delay = 0.0
        try:
            self._handler(message)
        except Exception as exc:
            delay = self._plan.retry.delay(message.receive_count)
            self._failures.failed(message, exc, delay)
            failed = True
        else:
            failed = False
        finally:
            self._heartbeat.drop(message)
        ok = settle(self._queue, message, failed=failed, delay=delay)
        self._run.settled(message, ok)
        if ok:
            self._failures.succeeded(message)
        self._free(1, succeeded=ok)
        return ok

    def _give_back(self, messages: list[Message]) -> None:
        """Give back the rest of a lane: they were not handled, so they do
        not count towards ``max_messages``."""
        self._heartbeat.drop(*messages)
        try:
            give_back(messages)
        except VsqsError as exc:  # they come back at their visibility timeout
            log.warning("%s: could not give back: %s", self._queue.url, exc)
        self._run.drop(*messages)
        with self._changed:
            self._pacing.received(-len(messages))
        self._free(len(messages), succeeded=False)

    def _free(self, count: int, *, succeeded: bool) -> None:
        with self._changed:
            self._in_hand -= count
            if succeeded:
                self._pacing.succeeded()
            self._changed.notify_all()


def consume(queue: WorkerQueue, handler: Callable[[Message], object], plan: ConsumePlan) -> int:
    """The loop of :meth:`vsqs.Queue.consume` (see there); returns how many succeeded."""
    run = Run()
    handler = meter.observer.handling(queue.url, handler)
    with (
        interruptible(queue, run),
        Heartbeat(queue, plan.visibility_timeout) as heartbeat,
        Crew(queue, handler, plan, heartbeat, run) as crew,
    ):
        crew.run()
    return run.succeeded
