"""The asyncio facade under a real event loop: concurrency, a free loop, cancellation."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import vsqs
import vsqs.aio
from vsqs import _candidates as candidates
from vsqs import _receiver as receiver
from vsqs.stores._registry import open_store
from vsqs.testing import FakeClock

from .support.waiting import WaitingStore


def test_concurrent_producers_and_consumers_deliver_each_message_once(tmp_path: Path) -> None:
    async def main() -> Counter[bytes]:
        got: Counter[bytes] = Counter()
        async with vsqs.aio.Queue(tmp_path / "q", visibility_timeout=30) as q:

            async def produce(p: int) -> None:
                for i in range(0, 60, 6):
                    await q.send_batch([f"{p}-{j}" for j in range(i, i + 6)])

            async def consume() -> None:
                while True:
                    batch = await q.receive_batch(5, wait=1.0)
                    if not batch:
                        return
                    for message in batch:
                        got[message.body] += 1
                        await message.delete()

            await asyncio.gather(*(produce(p) for p in range(3)), *(consume() for _ in range(4)))
            assert (await q.stats()).ready == 0
        return got

    got = asyncio.run(main())
    assert got == Counter({f"{p}-{j}".encode(): 1 for p in range(3) for j in range(60)})


def test_a_long_poll_does_not_block_the_event_loop(tmp_path: Path) -> None:
    """Eight long polls wait in threads: the loop keeps ticking while all of
    them wait, and the one message sent meanwhile goes to exactly one."""

    async def main() -> None:
        async with vsqs.aio.Queue(tmp_path / "q") as q:
            ticked = asyncio.Event()

            async def ticker() -> None:
                for _ in range(20):
                    await asyncio.sleep(0.01)
                ticked.set()

            waiting = [asyncio.create_task(q.receive(wait=60.0)) for _ in range(8)]
            await asyncio.gather(ticker(), asyncio.sleep(0))
            assert ticked.is_set() and not any(w.done() for w in waiting), (
                "the loop ticked only once the long polls had ended: something blocked it"
            )
            await q.send(b"late")
            done, pending = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            got = [t.result() for t in done]
            for task in pending:
                task.cancel()
            after = await asyncio.gather(*pending, return_exceptions=True)
            assert [m.body for m in got if m is not None] == [b"late"]
            assert not [m for m in after if isinstance(m, vsqs.Message)], "two got the message"

    asyncio.run(main())


class HeldRead(vsqs.LocalStore):
    """A local store whose first read of a claimed message waits until told:
    a receive is held between its claim and its return."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.claimed = threading.Event()
        self.go_on = threading.Event()

    def read_limited(self, name: str, limit: int) -> bytes:
        if "." in name and not self.claimed.is_set():
            self.claimed.set()
            assert self.go_on.wait(30)
        return super().read_limited(name, limit)


def test_a_cancelled_receive_gives_back_its_claim_uncounted(tmp_path: Path) -> None:
    """The receive's thread claims a message, then its caller is cancelled:
    the claim is visible again at once with the receive count it had."""
    store = HeldRead(str(tmp_path / "q"))

    async def main() -> None:
        with vsqs.Queue(store, visibility_timeout=600) as sync:
            sync.send(b"claimed while cancelling")
            async with vsqs.aio.Queue(sync) as q:
                receiving = asyncio.create_task(q.receive(wait=30))
                assert await asyncio.to_thread(store.claimed.wait, 30)
                receiving.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await receiving  # at once: the thread is still held in its read
                store.go_on.set()
                again = await q.receive(wait=30)  # given back: no visibility timeout to wait out
                assert again is not None and again.body == b"claimed while cancelling"
                assert again.receive_count == 1, "the cancelled receive delivered nothing"
                await again.delete()

    asyncio.run(main())


def test_cancelling_an_idle_long_poll_leaves_no_thread_busy(tmp_path: Path) -> None:
    async def main() -> None:
        async with vsqs.aio.Queue(tmp_path / "q", max_threads=1) as q:
            for _ in range(3):
                receiving = asyncio.create_task(q.receive(wait=60))
                await asyncio.sleep(0.1)
                receiving.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await receiving
            # One thread: this runs only once the cancelled polls have let go.
            await asyncio.wait_for(q.send(b"x"), timeout=10)

    asyncio.run(main())


def test_consume_deletes_on_success_releases_on_error_and_keeps_long_handlers_hidden(
    tmp_path: Path,
) -> None:
    async def main() -> tuple[int, list[tuple[bytes, int]]]:
        seen: list[tuple[bytes, int]] = []
        async with vsqs.aio.Queue(tmp_path / "q", visibility_timeout=0.6) as q:
            await q.send_batch([b"slow", b"flaky", b"fine"])
            other = vsqs.Queue(tmp_path / "q")

            async def handler(message: vsqs.aio.Message) -> None:
                seen.append((message.body, message.receive_count))
                if message.body == b"slow":
                    await asyncio.sleep(1.5)  # 2.5 visibility timeouts: the heartbeat holds it
                    visible = await asyncio.to_thread(other.peek, 10)
                    assert b"slow" not in [m.body for m in visible]
                if message.body == b"flaky" and message.receive_count == 1:
                    raise RuntimeError("first attempt fails")

            # Four receives: three messages and the retry (no idle timeout to race).
            done = await q.consume(handler, max_messages=4, retry_delay=0.01)
            assert (await q.stats()).ready == 0
        return done, seen

    done, seen = asyncio.run(main())
    assert done == 3
    # flaky's retry waits up to 0.01 s: fine may come before or after it.
    assert seen[:2] == [(b"slow", 1), (b"flaky", 1)]
    assert sorted(seen[2:]) == [(b"fine", 1), (b"flaky", 2)]


def test_consume_retries_a_failure_after_a_backoff_and_logs_it_once(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """As the sync consume: the delay doubles per receive ("equal jitter",
    here 3/4 of each step), a failure does not restart the idle time, and a
    message's traceback is logged once, later failures in one line."""

    async def main() -> list[int]:
        attempts: list[int] = []
        async with vsqs.aio.Queue(tmp_path / "q", clock=clock, retry_delay=2) as q:
            await q.send(b"bad")

            async def handler(message: vsqs.aio.Message) -> None:
                attempts.append(message.receive_count)
                if message.receive_count == 3:
                    clock.advance(10)  # past the idle timeout
                raise RuntimeError("bad")

            with caplog.at_level(logging.ERROR, logger="vsqs"):
                for delay in (1.5, 3.0):
                    assert await q.consume(handler, max_messages=1, jitter=lambda: 0.5) == 0
                    clock.advance(delay - 0.01)
                    assert await q.peek() == [], f"retried sooner than {delay} s"
                    clock.advance(0.02)
                done = await q.consume(handler, max_messages=3, idle_timeout=5, jitter=lambda: 0)
            assert done == 0
        return attempts

    assert asyncio.run(main()) == [1, 2, 3]
    failed = [r for r in caplog.records if "handler failed" in r.getMessage()]
    assert [r.exc_info is not None for r in failed] == [True, False, False]
    assert "(receive 3): RuntimeError('bad'); retrying in 4 s" in failed[2].getMessage()


def test_consume_runs_a_plain_handler_in_the_worker_threads(tmp_path: Path) -> None:
    """A handler that is not ``async`` runs off the event loop, once per message."""
    import threading

    async def main() -> tuple[int, list[bytes], set[bool]]:
        seen: list[bytes] = []
        on_loop: set[bool] = set()
        loop_thread = threading.get_ident()
        async with vsqs.aio.Queue(tmp_path / "q") as q:
            await q.send_batch([b"a", b"b"])

            def handler(message: vsqs.aio.Message) -> None:
                on_loop.add(threading.get_ident() == loop_thread)
                seen.append(message.body)

            done = await q.consume(handler, max_messages=2, idle_timeout=5)
            assert (await q.stats()).ready == 0
        return done, seen, on_loop

    done, seen, on_loop = asyncio.run(main())
    assert (done, seen, on_loop) == (2, [b"a", b"b"], {False})


def test_a_cancelled_handler_releases_its_message(tmp_path: Path) -> None:
    async def main() -> None:
        async with vsqs.aio.Queue(tmp_path / "q", visibility_timeout=600) as q:
            await q.send(b"job")
            started = asyncio.Event()

            async def handler(message: vsqs.aio.Message) -> None:
                started.set()
                await asyncio.sleep(60)

            consuming = asyncio.create_task(q.consume(handler))
            await started.wait()
            consuming.cancel()
            with pytest.raises(asyncio.CancelledError):
                await consuming
            again = await q.receive()
            assert again is not None and again.receive_count == 2

    asyncio.run(main())


def test_it_wraps_an_open_queue_and_takes_receipts(tmp_path: Path) -> None:
    sync = vsqs.Queue(tmp_path / "q")

    async def main() -> None:
        q = vsqs.aio.Queue(sync)
        await q.send(b"x")
        message = await q.receive()
        assert message is not None and message.receipt is not None
        extended = await q.extend(message.receipt, 60)
        assert extended.receipt != message.receipt
        with pytest.raises(vsqs.ReceiptExpired):
            await q.delete(message.receipt)
        assert extended.receipt is not None
        await q.release(extended.receipt)
        assert [m.body for m in await q.peek()] == [b"x"]
        assert await q.purge() == 1 and await q.gc() == []
        await q.close()

    asyncio.run(main())
    assert sync.stats().ready == 0  # still open: the facade did not own it
    sync.close()
    assert vsqs.aio is __import__("vsqs").aio


def test_construction_does_no_io_and_close_stops_pending_receives(tmp_path: Path) -> None:
    async def main() -> None:
        unopened = vsqs.aio.Queue(tmp_path / "never")
        await unopened.close()
        assert not (tmp_path / "never").exists()
        q = vsqs.aio.Queue(tmp_path / "q")
        waiting = asyncio.create_task(q.receive(wait=60))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await asyncio.wait_for(q.close(), timeout=10)
        assert await asyncio.wait_for(waiting, timeout=10) is None
        assert time.monotonic() - started < 5, "close waited for the long poll to time out"

    asyncio.run(main())


def test_redrive(tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter="dlq") as q:
        q.send(b"poison")
        assert q.receive(visibility_timeout=0) is not None
        assert q.receive() is None
    assert asyncio.run(vsqs.aio.redrive(tmp_path / "dlq", tmp_path / "q")) == 1


def test_a_dead_letter_says_where_it_came_from_and_redrive_takes_force(tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter="dlq") as q:
        q.send(b"poison")
        assert q.receive(visibility_timeout=0) is not None
        assert q.receive() is None
    vsqs.Queue(tmp_path / "other").close()

    async def main() -> None:
        async with vsqs.aio.Queue(tmp_path / "dlq") as dlq:
            [peeked] = await dlq.peek()
            got = await dlq.receive()
            assert got is not None
            for message in (peeked, got):
                origin = await message.dead_lettered()
                assert origin is not None and origin.receive_count == 1
                assert origin.source.endswith("/q")
            await got.release()
        with pytest.raises(vsqs.InvalidArgument):  # "other" names no dead-letter queue
            await vsqs.aio.redrive(tmp_path / "dlq", tmp_path / "other")
        assert await vsqs.aio.redrive(tmp_path / "dlq", tmp_path / "other", force=True) == 1

    asyncio.run(main())


async def close_under_a_long_poll(q: vsqs.aio.Queue, waiting: threading.Event) -> None:
    """Close ``q`` while a long poll of an hour waits (``waiting`` is set once
    it does): the poll ends at once, with nothing."""
    polling = asyncio.create_task(q.receive(wait=3600))
    assert await asyncio.to_thread(waiting.wait, 60)
    await asyncio.wait_for(q.close(), 60)
    assert await asyncio.wait_for(polling, 60) is None


def test_a_closed_queue_raises_queue_closed_and_ends_its_long_polls_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a wake, the poll below would look again only after an hour.
    monkeypatch.setattr(candidates, "STALE_AFTER", 3600.0)

    store = WaitingStore(str(tmp_path / "q"))

    async def main() -> None:
        q = vsqs.aio.Queue(store)
        sync = await q.open()
        await q.send(b"first")
        first = await q.receive(visibility_timeout=3600)  # the next look starts a feed
        assert first is not None
        await first.delete()
        store.waiting.clear()
        await close_under_a_long_poll(q, store.waiting)
        calls = {  # coroutines: each raises when awaited
            "send": q.send(b"x"),
            "send_batch": q.send_batch([b"x"]),
            "receive": q.receive(),
            "receive_batch": q.receive_batch(),
            "peek": q.peek(),
            "stats": q.stats(),
            "purge": q.purge(),
            "gc": q.gc(),
        }
        for call in calls.values():
            with pytest.raises(vsqs.QueueClosed, match="the queue is closed"):
                await call
        with pytest.raises(vsqs.QueueClosed):
            sync.send(b"x")  # the queue it opened is closed too

    asyncio.run(main())


def test_closing_the_facade_ends_a_long_poll_on_a_polled_store_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an object store a waiting receiver sleeps until its next listing;
    the facade's close() woke the store, which ended no such sleep, so the
    poll ran on to its next look (here an hour away; 2 s by default)."""
    monkeypatch.setattr(receiver, "POLL_INTERVAL", 3600.0)
    monkeypatch.setattr(candidates, "STALE_AFTER", 3600.0)
    store = open_store(f"memory://vsqs-aio-{time.monotonic_ns()}/q", None)
    waiting = threading.Event()
    real_pause = store.pause

    def pause(timeout: float) -> None:
        waiting.set()
        real_pause(timeout)

    async def main() -> None:
        q = vsqs.aio.Queue(store, max_poll_interval=3600)
        await q.open()
        store.pause = pause  # type: ignore[method-assign]
        await close_under_a_long_poll(q, waiting)

    asyncio.run(main())


def test_groups_dedup_ids_and_attributes_go_through_the_asyncio_facade(tmp_path: Path) -> None:
    """The arguments of issue 29, as the sync ``Queue`` takes them. (The
    receives wait: on a directory, a targeted receive with ``wait=0`` right
    after the sends was seen to find nothing now and then, in the sync
    ``Queue`` too.)"""

    async def main() -> None:
        async with vsqs.aio.Queue(
            tmp_path / "q", visibility_timeout=600, dedup_window=60, content_dedup=True
        ) as q:
            config = (await q.open()).config
            assert (config.dedup_window, config.content_dedup) == (60, True)
            first = await q.send(b"a", group="g", dedup_id="d1", attributes={"k": "v"})
            assert await q.send(b"other body", dedup_id="d1") == first  # a duplicate
            assert await q.send(b"a", group="g") != first  # another id: not the body's
            sent = await q.send_batch(
                iter([b"b", vsqs.Outgoing(b"c", group="h", attributes={"x": "y"})]),
                group="g",
                dedup_ids=iter(["d2", None]),
                attributes={"k": "w"},
            )
            assert await q.send_batch([b"b"], dedup_ids=["d2"]) == sent[:1]
            assert await q.send(b"c") == sent[1]  # content_dedup: the body's hash

            h = await q.receive(group="h", wait=30)  # targeted: the head of h, not of g
            assert h is not None and (h.id, h.group, h.attributes) == (sent[1], "h", {"x": "y"})
            got = await q.receive_batch(10, wait=30)
            assert [(m.body, m.group, m.attributes, m.dedup_id) for m in got] == [
                (b"a", "g", {"k": "v"}, "d1"),
                (b"a", "g", {}, hashlib.sha256(b"a").hexdigest()),  # content_dedup's
                (b"b", "g", {"k": "w"}, "d2"),
            ]
            assert await q.receive(group="g") is None  # g is in flight
            for message in [h, *got]:
                await message.delete()

    asyncio.run(main())


def test_consume_runs_up_to_concurrency_handlers_keeping_each_groups_order(
    tmp_path: Path,
) -> None:
    """Four receivers side by side: the first four handlers wait at a
    barrier of four (only four at once pass it); a group's messages never
    run side by side (a grouped handler stays a moment, to be seen if one
    did) and run in send order."""
    order: dict[str | None, list[bytes]] = {}
    overlaps: list[bytes] = []

    async def main() -> int:
        async with vsqs.aio.Queue(tmp_path / "q", visibility_timeout=600) as q:
            for i in range(3):
                for g in "ABCDE":
                    await q.send(f"{g}-{i}".encode(), group=g)
            barrier = asyncio.Barrier(4)
            running: set[str | None] = set()
            started = 0

            async def handler(message: vsqs.aio.Message) -> None:
                nonlocal started
                started += 1
                if started <= 4:
                    await asyncio.wait_for(barrier.wait(), 60)  # a hang guard
                if message.group in running:
                    overlaps.append(message.body)
                running.add(message.group)
                order.setdefault(message.group, []).append(message.body)
                await asyncio.sleep(0.05)  # decides nothing when the rule holds
                running.discard(message.group)

            done = await q.consume(handler, concurrency=4, max_messages=15)
            assert ((await q.stats()).ready, (await q.stats()).in_flight) == (0, 0)
        return done

    assert asyncio.run(main()) == 15
    assert overlaps == []
    assert order == {g: [f"{g}-{i}".encode() for i in range(3)] for g in "ABCDE"}


def test_a_cancelled_concurrent_consume_releases_every_message_in_hand(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with vsqs.aio.Queue(tmp_path / "q", visibility_timeout=600) as q:
            await q.send_batch([f"m{i}".encode() for i in range(6)])
            all_in = asyncio.Event()
            held: list[str] = []

            async def handler(message: vsqs.aio.Message) -> None:
                held.append(message.id)
                if len(held) == 4:
                    all_in.set()
                await asyncio.Event().wait()  # until cancelled

            consuming = asyncio.create_task(q.consume(handler, concurrency=4))
            await asyncio.wait_for(all_in.wait(), 60)
            consuming.cancel()
            with (
                caplog.at_level(logging.WARNING, logger="vsqs"),
                pytest.raises(asyncio.CancelledError),
            ):
                await consuming
            stats = await q.stats()
            assert (stats.ready, stats.in_flight) == (6, 0)
            again = await q.receive_batch(6)
            assert sorted((m.id, m.receive_count) for m in again if m.id in held) == sorted(
                (i, 2) for i in held
            )

    asyncio.run(main())
    assert any(
        r.getMessage().endswith(
            "consume stopped by CancelledError: handled 0 (0 succeeded), "
            "released 4 in hand (visible again now)"
        )
        for r in caplog.records
    )


def test_concurrent_receivers_take_no_more_than_max_messages(tmp_path: Path) -> None:
    """Each receiver counts its message before it receives: four side by side
    never take a seventh of ``max_messages=6``."""

    async def main() -> tuple[int, int]:
        async with vsqs.aio.Queue(tmp_path / "q", visibility_timeout=600) as q:
            await q.send_batch([f"m{i}".encode() for i in range(10)])
            done = await q.consume(lambda m: None, concurrency=4, max_messages=6)
            return done, (await q.stats()).ready

    assert asyncio.run(main()) == (6, 4)
