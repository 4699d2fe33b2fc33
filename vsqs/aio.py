"""An asyncio facade over :class:`vsqs.Queue` for code that lives in an event loop.

    >>> import vsqs.aio
    >>> async def main():  # doctest: +SKIP
    ...     async with vsqs.aio.Queue("/tmp/vsqs-doc/jobs") as q:
    ...         await q.send(b"hello")
    ...         msg = await q.receive(wait=20)
    ...         await msg.delete()

Every method is the synchronous one run on the queue's own thread pool
(``max_threads`` threads), so storage calls never block the event loop and
the guarantees are those of :class:`vsqs.Queue`. Constructing a queue does no
I/O: it is opened (and created) by the first call, or by ``async with``.

Cancelling a long-poll ``receive(wait=...)`` raises ``CancelledError`` in the
caller at once. The thread behind it stops at its next wake-up (within about
a second) without claiming more; a message it had claimed just before is
given back at once, with the receive count it had (it reached nobody), so a
cancelled receive never keeps a message hidden and never counts. Cancelling
any other call raises ``CancelledError`` at once too: a call that has begun
on its thread finishes there (a ``Message`` given is updated in place), and
one still waiting for a thread is never made.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypedDict, TypeVar, Unpack

from . import _message, _queue
from ._aio_sigterm import sigterm_cancels
from ._aio_threads import move, redrive
from ._config import positive_int
from ._errors import QueueClosed, VsqsError
from ._message import (
    Body,
    DeadLettered,
    DeleteResult,
    ExtendResult,
    Progress,
    QueueStats,
    ReleaseResult,
)
from ._options import ConsumeOptions, ConsumePlan
from ._outgoing import Outgoing
from ._receiver import CLOSE_WAKES
from ._worker import ConsumePacing, FailureLog, Run, failure_log, settle

log = logging.getLogger("vsqs")

#: A worker's handler: ``async def handler(message)``, or a plain function
#: (run in the queue's worker threads).
Handler = Callable[["Message"], object]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class SendOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`vsqs.Queue.send`, which gives their defaults."""

    delay: float
    group: str | None
    dedup_id: str | None
    attributes: Mapping[str, str] | None


class SendBatchOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`vsqs.Queue.send_batch`, which gives their defaults."""

    delay: float
    group: str | None
    dedup_ids: Iterable[str | None] | None
    attributes: Mapping[str, str] | None
    bundle: bool | None


class _Mirror(Generic[_T]):
    """A read-only attribute of a :class:`Message`: that of its :class:`vsqs.Message`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, message: Message, owner: type | None = None) -> _T:
        value: _T = getattr(message.sync, self._name)
        return value


class Message:
    """A received (or peeked) message; ``delete``, ``extend`` and ``release`` are awaitable."""

    def __init__(self, queue: Queue, message: _message.Message) -> None:
        self._queue, self.sync = queue, message

    id: _Mirror[str] = _Mirror()
    body: _Mirror[bytes] = _Mirror()
    receipt: _Mirror[str | None] = _Mirror()
    receive_count: _Mirror[int] = _Mirror()
    sent_at: _Mirror[datetime] = _Mirror()
    visible_at: _Mirror[datetime | None] = _Mirror()
    group: _Mirror[str | None] = _Mirror()
    attributes: _Mirror[dict[str, str]] = _Mirror()
    dedup_id: _Mirror[str | None] = _Mirror()

    async def dead_lettered(self) -> DeadLettered | None:
        """Where it came from if it was dead-lettered into this queue: see
        :attr:`vsqs.Message.dead_lettered` (a coroutine here: for a received
        message it reads the origin record, on the queue's threads)."""
        return await self._queue._call(lambda: self.sync.dead_lettered)

    async def delete(self) -> None:
        """Acknowledge: see :meth:`vsqs.Queue.delete`."""
        await self._queue.delete(self)

    async def extend(self, visibility_timeout: float) -> Message:
        """Keep it invisible longer: see :meth:`vsqs.Queue.extend`."""
        return await self._queue.extend(self, visibility_timeout)

    async def release(self, *, delay: float = 0) -> None:
        """Negative acknowledge: see :meth:`vsqs.Queue.release`."""
        await self._queue.release(self, delay=delay)

    def __repr__(self) -> str:
        return f"vsqs.aio.{self.sync!r}"


class Queue:
    """:class:`vsqs.Queue` with ``async`` methods; takes the same arguments.

    ``url`` may also be an open :class:`vsqs.Queue`, which is then used (and
    left open on :meth:`close`).
    """

    def __init__(self, url: object, *, max_threads: int = 16, **queue_args: Any) -> None:
        positive_int(max_threads, "max_threads")
        self._url, self._queue_args = url, queue_args
        self._sync: _queue.Queue | None = url if isinstance(url, _queue.Queue) else None
        self._owns_sync = self._sync is None
        self._executor = ThreadPoolExecutor(max_threads, thread_name_prefix="vsqs-aio")
        self._opening: asyncio.Lock | None = None
        self._receives: set[threading.Event] = set()
        self._closed = False

    async def _call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def open(self) -> _queue.Queue:
        """Open (and by default create) the queue; return the synchronous one behind it.

        Raises :class:`vsqs.QueueClosed` once :meth:`close` was called.
        """
        if self._closed:
            raise QueueClosed(f"{self.url}: the queue is closed")
        if self._sync is None:
            if self._opening is None:
                self._opening = asyncio.Lock()
            async with self._opening:
                if self._closed:  # while this call waited for another's open
                    raise QueueClosed(f"{self.url}: the queue is closed")
                if self._sync is None:
                    sync = await self._call(_queue.Queue, self._url, **self._queue_args)
                    if self._closed:  # close() came while it opened: not left open
                        await asyncio.to_thread(sync.close)
                        raise QueueClosed(f"{self.url}: the queue is closed")
                    self._sync = sync
        return self._sync

    async def close(self) -> None:
        """Stop pending receives and close the queue (if this facade opened it).

        Every later call raises :class:`vsqs.QueueClosed`; a long poll under
        way is woken and returns nothing, and other calls under way finish first.
        """
        self._closed = True
        for cancelled in list(self._receives):
            cancelled.set()
        sync = self._sync
        shutdown = asyncio.ensure_future(asyncio.to_thread(self._executor.shutdown, wait=True))
        while not shutdown.done():
            if sync is not None:  # the long polls under way wake, and see their stop set
                sync.store.wake()  # again and again: one may be between its check and its wait
            await asyncio.wait({shutdown}, timeout=CLOSE_WAKES)
        await shutdown
        if sync is not None and self._owns_sync:
            sync.close()

    async def __aenter__(self) -> Queue:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """The queue's URL (known once it is open)."""
        return self._sync.url if self._sync is not None else str(self._url)

    def __repr__(self) -> str:
        return f"vsqs.aio.Queue({self.url!r})"

    # -------------------------------------------------------------- methods
    async def send(self, body: Body, **options: Unpack[SendOptions]) -> str:
        """See :meth:`vsqs.Queue.send` (the same keyword arguments)."""
        queue = await self.open()
        return await self._call(queue.send, body, **options)

    async def send_batch(
        self, bodies: Iterable[Body | Outgoing], **options: Unpack[SendBatchOptions]
    ) -> list[str]:
        """See :meth:`vsqs.Queue.send_batch` (the same keyword arguments); the
        iterables are read here, in the caller's thread."""
        queue = await self.open()
        if (dedup_ids := options.get("dedup_ids")) is not None:
            options["dedup_ids"] = list(dedup_ids)
        return await self._call(queue.send_batch, list(bodies), **options)

    async def receive(
        self,
        *,
        visibility_timeout: float | None = None,
        wait: float = 0,
        group: str | None = None,
    ) -> Message | None:
        """See :meth:`vsqs.Queue.receive`; cancellable while it waits."""
        got = await self.receive_batch(
            1, visibility_timeout=visibility_timeout, wait=wait, group=group
        )
        return got[0] if got else None

    async def receive_batch(
        self,
        max_messages: int = 10,
        *,
        visibility_timeout: float | None = None,
        wait: float = 0,
        group: str | None = None,
    ) -> list[Message]:
        """See :meth:`vsqs.Queue.receive_batch`; cancellable while it waits."""
        queue = await self.open()
        cancelled = threading.Event()
        self._receives.add(cancelled)
        future = self._executor.submit(
            functools.partial(
                queue.receive_batch,
                max_messages,
                visibility_timeout=visibility_timeout,
                wait=wait,
                stop=cancelled,
                group=group,
            )
        )
        try:
            got = await asyncio.shield(asyncio.wrap_future(future))
        except asyncio.CancelledError:
            cancelled.set()
            future.add_done_callback(functools.partial(_give_back_unwanted, queue))
            raise
        finally:
            self._receives.discard(cancelled)
        return [Message(self, m) for m in got]

    async def delete(self, msg_or_receipt: Message | str) -> None:
        """See :meth:`vsqs.Queue.delete`."""
        queue = await self.open()
        await self._call(queue.delete, _unwrap(msg_or_receipt))

    async def delete_batch(self, msgs_or_receipts: Iterable[Message | str]) -> DeleteResult:
        """See :meth:`vsqs.Queue.delete_batch`."""
        queue = await self.open()
        return await self._call(queue.delete_batch, [_unwrap(m) for m in msgs_or_receipts])

    async def extend(self, msg_or_receipt: Message | str, visibility_timeout: float) -> Message:
        """See :meth:`vsqs.Queue.extend`."""
        queue = await self.open()
        extended = await self._call(queue.extend, _unwrap(msg_or_receipt), visibility_timeout)
        return msg_or_receipt if isinstance(msg_or_receipt, Message) else Message(self, extended)

    async def release(self, msg_or_receipt: Message | str, *, delay: float = 0) -> None:
        """See :meth:`vsqs.Queue.release`."""
        queue = await self.open()
        await self._call(queue.release, _unwrap(msg_or_receipt), delay=delay)

    async def extend_batch(
        self, msgs_or_receipts: Iterable[Message | str], visibility_timeout: float
    ) -> ExtendResult:
        """See :meth:`vsqs.Queue.extend_batch`: its ``extended`` are
        :class:`vsqs.Message` objects, those behind the ``Message`` given
        (``.sync``, updated in place) or new ones for receipts."""
        queue = await self.open()
        items = [_unwrap(m) for m in msgs_or_receipts]
        return await self._call(queue.extend_batch, items, visibility_timeout)

    async def release_batch(
        self, msgs_or_receipts: Iterable[Message | str], *, delay: float = 0
    ) -> ReleaseResult:
        """See :meth:`vsqs.Queue.release_batch`."""
        queue = await self.open()
        items = [_unwrap(m) for m in msgs_or_receipts]
        return await self._call(queue.release_batch, items, delay=delay)

    async def peek(self, max_messages: int = 10) -> list[Message]:
        """See :meth:`vsqs.Queue.peek`."""
        queue = await self.open()
        return [Message(self, m) for m in await self._call(queue.peek, max_messages)]

    async def stats(self) -> QueueStats:
        """See :meth:`vsqs.Queue.stats`."""
        queue = await self.open()
        return await self._call(queue.stats)

    async def purge(self, *, progress: Progress | None = None) -> int:
        """See :meth:`vsqs.Queue.purge` (``progress`` is called from a worker thread)."""
        queue = await self.open()
        return await self._call(queue.purge, progress=progress)

    async def gc(self, *, progress: Progress | None = None) -> list[str]:
        """See :meth:`vsqs.Queue.gc` (``progress`` is called from a worker thread)."""
        queue = await self.open()
        return await self._call(queue.gc, progress=progress)

    async def consume(
        self,
        handler: Handler,
        *,
        visibility_timeout: float | None = None,
        max_messages: int | None = None,
        idle_timeout: float | None = None,
        stop: asyncio.Event | None = None,
        retry_delay: float | None = None,
        max_retry_delay: float | None = None,
        jitter: Callable[[], float] | None = None,
        concurrency: int = 1,
    ) -> int:
        """Await ``handler`` on messages, up to ``concurrency`` at once (one
        receiver each: a group's messages in order, never side by side);
        return how many succeeded.

        A plain (not ``async``) handler runs in the queue's worker threads, so
        it never blocks the event loop; if it returns an awaitable, that is
        awaited too. The rest is :meth:`vsqs.Queue.consume`'s (heartbeat,
        retries, logging, stops), with a heartbeat task per message; a
        cancellation releases the messages in hand at once and propagates.
        """
        options = ConsumeOptions(
            visibility_timeout,
            max_messages,
            idle_timeout,
            stop,
            retry_delay,
            max_retry_delay,
            jitter,
            concurrency,
        )
        queue = await self.open()
        plan = options.resolve(queue.config)
        pacing = ConsumePacing(queue, plan)
        run = Run()
        with sigterm_cancels(run):
            try:
                await _side_by_side(
                    lambda: self._work(handler, plan, pacing, run),
                    plan.concurrency,
                )
            except BaseException as exc:  # a cancellation, Ctrl-C, SIGTERM, SystemExit, an error
                await self._release_held(queue, run, exc)
                raise
        return run.succeeded

    async def _work(
        self, handler: Handler, plan: ConsumePlan, pacing: ConsumePacing, run: Run
    ) -> None:
        """One receiver of a ``consume``: receive one message, handle it, again."""
        failures = failure_log(await self.open())
        while (poll := pacing.next_wait()) is not None:
            pacing.received()  # before the receive: side by side, none takes too many
            message = await self.receive(visibility_timeout=plan.visibility_timeout, wait=poll)
            if message is None:
                pacing.received(-1)
                continue
            run.hold(message.sync)
            ok = await self._handle(message, handler, plan, failures, run)
            run.settled(message.sync, ok)
            if ok:
                failures.succeeded(message.sync)
                pacing.succeeded()

    async def _release_held(self, queue: _queue.Queue, run: Run, exc: BaseException) -> None:
        """Release the message in hand (and log the line of an interruption)
        in the queue's threads: done even if this task is cancelled again, as
        ``asyncio.run`` cancels every task once its loop stops."""
        job = self._executor.submit(run.release_held, queue, exc)
        if not isinstance(exc, Exception):
            job.add_done_callback(
                lambda done: run.stopped(queue, exc, 0 if done.exception() else done.result())
            )
        await asyncio.shield(asyncio.wrap_future(job))

    async def _handle(
        self, message: Message, handler: Handler, plan: ConsumePlan, failures: FailureLog, run: Run
    ) -> bool:
        """Run the handler and settle the message. A cancellation while the
        handler runs leaves it held (in ``run``); once the handler is done,
        its settling goes on in the queue's threads whatever happens here."""
        vt = plan.visibility_timeout
        heartbeat = asyncio.create_task(self._heartbeat(message, vt)) if vt > 0 else None
        try:
            try:
                await self._run(handler, message)
            finally:
                if heartbeat is not None:
                    heartbeat.cancel()
        except Exception as exc:
            run.drop(message.sync)
            delay = plan.retry.delay(message.receive_count)
            failures.failed(message.sync, exc, delay)
            return await self._settle(message, failed=True, delay=delay)
        run.drop(message.sync)
        return await self._settle(message, failed=False)

    async def _run(self, handler: Handler, message: Message) -> None:
        """Await an async handler; run a plain one in the worker threads."""
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__  # an object whose __call__ is async
        ):
            await handler(message)  # type: ignore[misc]
            return
        result = await self._call(handler, message)
        if inspect.isawaitable(result):
            await result

    async def _heartbeat(self, message: Message, vt: float) -> None:
        while True:
            await asyncio.sleep(vt / 3)
            try:
                await message.extend(vt)
            except VsqsError as exc:
                log.warning("%s: heartbeat for %s stopped: %s", self.url, message.id, exc)
                return

    async def _settle(self, message: Message, *, failed: bool, delay: float = 0) -> bool:
        queue = await self.open()
        return await self._call(settle, queue, message.sync, failed=failed, delay=delay)


async def _side_by_side(work: Callable[[], Awaitable[None]], count: int) -> None:
    """Await ``count`` runs of ``work`` side by side (1: in this task); once
    one raises, or this is cancelled, cancel the others, wait for them, re-raise."""
    if count == 1:
        return await work()
    tasks = [asyncio.ensure_future(work()) for _ in range(count)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise


def _unwrap(msg_or_receipt: Message | str) -> _message.Message | str:
    return msg_or_receipt.sync if isinstance(msg_or_receipt, Message) else msg_or_receipt


def _give_back_unwanted(queue: _queue.Queue, future: Future[list[_message.Message]]) -> None:
    """Give back what a receive claimed after its caller was cancelled:
    visible again at once, its receive count as before (it reached nobody)."""
    if future.cancelled() or future.exception() is not None:
        return
    try:
        _message.give_back(future.result())
    except VsqsError as exc:  # it comes back at its visibility timeout anyway
        log.warning("%s: could not give back after a cancelled receive: %s", queue.url, exc)


__all__ = ["Message", "Queue", "move", "redrive"]
