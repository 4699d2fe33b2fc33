"""``extend_batch`` and ``release_batch`` of the asyncio facade: the results
of the sync ones, receipt by receipt, on a directory, in memory and on S3
(moto), and the cancellation of every other ``vsqs.aio`` call: raised at
once, finished on its thread once begun, never made if not."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
import vsqs.aio
from vsqs.testing import FakeClock

from .support.backends import BY_ID, Place, params

#: A directory, the in-process memory store, and S3 (moto).
BACKENDS = [BY_ID["local"], BY_ID["memory"], BY_ID["s3"]]


@pytest.fixture(params=params(BACKENDS))
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    opened = request.param.place(request, tmp_path)
    yield opened
    opened.close()


async def four_held_one_deleted(q: vsqs.aio.Queue) -> list[vsqs.aio.Message]:
    """Four messages received for 1 s, in order; the first deleted since."""
    await q.send_batch([b"a", b"b", b"c", b"d"])
    got = await q.receive_batch(4, visibility_timeout=1)
    assert [m.body for m in got] == [b"a", b"b", b"c", b"d"]
    await got[0].delete()
    return got


def test_extend_batch_and_release_batch_say_what_they_did_receipt_by_receipt(
    place: Place, clock: FakeClock
) -> None:
    """As ``QueueTests``' sync test: stale receipts and extended messages
    (updated in place) sorted out, a released message visible at once."""

    async def main() -> None:
        async with vsqs.aio.Queue(place.queue(clock=clock)) as q:
            got = await four_held_one_deleted(q)
            old = [m.receipt or "" for m in got]
            result = await q.extend_batch([got[0], got[1], old[2]], visibility_timeout=60)
            assert isinstance(result, vsqs.ExtendResult)
            assert result.stale == [old[0]]
            assert [m.id for m in result.extended] == [got[1].id, got[2].id]
            assert result.extended[0] is got[1].sync and got[1].receipt != old[1]  # in place
            assert (result.failed, result.ok) == ({}, False)
            clock.advance(30)  # past the old timeout: b and c are extended, d is not
            other = await q.receive(visibility_timeout=600)
            assert other is not None and other.id == got[3].id
            extended_c = result.extended[1].receipt or ""
            released = await q.release_batch([got[1], extended_c, got[3]])
            assert isinstance(released, vsqs.ReleaseResult)
            assert released.released == [got[1].receipt, extended_c]
            assert released.stale == [old[3]] and not released.ok
            again = await q.receive_batch(10)  # visible at once, counted again
            assert sorted((m.body, m.receive_count) for m in again) == [(b"b", 2), (b"c", 2)]
            with pytest.raises(vsqs.InvalidReceipt):
                await q.release_batch([other, "../../etc/passwd"])  # checked before any
            assert (await q.extend_batch([other], 5)).ok
            assert await q.release_batch([]) == vsqs.ReleaseResult([], [], {})
            assert await q.extend_batch([], 5) == vsqs.ExtendResult([], [], {})

    asyncio.run(main())


def test_release_batch_with_a_delay_keeps_them_hidden_until_it_ends(
    place: Place, clock: FakeClock
) -> None:
    async def main() -> None:
        async with vsqs.aio.Queue(place.queue(clock=clock)) as q:
            await q.send_batch([b"a", b"b"])
            got = await q.receive_batch(2)
            assert (await q.release_batch(got, delay=10)).ok
            assert await q.receive() is None
            clock.advance(10)
            again = await q.receive_batch(2)
            assert [(m.body, m.receive_count) for m in again] == [(b"a", 2), (b"b", 2)]

    asyncio.run(main())


class GatedRenames(vsqs.LocalStore):
    """A directory whose renames of held messages fail for ``failing`` ids
    (``EIO``, as a disk under a client can), and wait for ``go_on`` once
    ``gate`` is set, saying so by ``waiting``."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.failing: set[str] = set()
        self.gate = False
        self.waiting, self.go_on = threading.Event(), threading.Event()

    def rename(self, old: str, new: str) -> None:
        if old.split(".")[0] in self.failing:
            raise OSError(errno.EIO, "injected: rename failed", old)
        if self.gate:
            self.waiting.set()
            assert self.go_on.wait(30)
        super().rename(old, new)


def test_a_storage_failure_is_one_failed_receipt_and_the_others_go_through(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = GatedRenames(str(tmp_path / "q"))

    async def main() -> None:
        async with vsqs.aio.Queue(store, clock=clock, visibility_timeout=5) as q:
            await q.send_batch([b"a", b"b"], bundle=False)  # a's renames fail alone
            a, b = await q.receive_batch(2)
            store.failing.add(a.id)
            extended = await q.extend_batch([a, b], 60)
            assert [m.id for m in extended.extended] == [b.id] and extended.stale == []
            assert list(extended.failed) == [a.receipt]
            assert isinstance(extended.failed[a.receipt or ""], vsqs.StorageError)
            released = await q.release_batch([a, b])
            assert released.released == [b.receipt] and list(released.failed) == [a.receipt]
            store.failing.clear()
            clock.advance(5)  # a's own timeout: it was neither extended nor released
            assert [m.id for m in await q.receive_batch(2)] == [a.id, b.id]  # send order

    asyncio.run(main())


def test_a_cancelled_extend_batch_raises_at_once_and_finishes_on_its_thread(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Cancelled while its thread renames: the caller gets ``CancelledError``
    at once, the thread goes on, and the messages are extended in place."""
    store = GatedRenames(str(tmp_path / "q"))

    async def main() -> None:
        async with vsqs.aio.Queue(store, clock=clock, visibility_timeout=5, max_threads=1) as q:
            await q.send_batch([b"a", b"b"])
            got = await q.receive_batch(2)
            before = [m.receipt for m in got]
            store.gate = True
            extending = asyncio.create_task(q.extend_batch(got, 600))
            assert await asyncio.to_thread(store.waiting.wait, 30)
            extending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await extending  # at once: the thread still waits in its rename
            assert [m.receipt for m in got] == before
            store.gate = False
            store.go_on.set()
            assert await q.peek() == []  # on the one thread: after the extend
            assert all(m.receipt != old for m, old in zip(got, before, strict=True))
            clock.advance(60)  # far past the 5 s they were received for
            assert await q.receive() is None
            assert (await q.release_batch(got)).ok  # by the receipts the extend gave

    asyncio.run(main())


def test_a_release_batch_cancelled_before_its_thread_took_it_is_never_made(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The one thread is busy (a rename held): a release queued behind it and
    cancelled is never made, and its messages stay hidden."""
    store = GatedRenames(str(tmp_path / "q"))

    async def main() -> None:
        async with vsqs.aio.Queue(store, clock=clock, visibility_timeout=60, max_threads=1) as q:
            await q.send_batch([b"a", b"b", b"c"], bundle=False)  # each extend one rename
            first, *rest = await q.receive_batch(3)
            store.gate = True
            busy = asyncio.create_task(q.extend(first, 60))
            assert await asyncio.to_thread(store.waiting.wait, 30)
            store.gate = False
            releasing = asyncio.create_task(q.release_batch(rest))
            await asyncio.sleep(0)  # it is queued for the thread
            releasing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await releasing
            store.go_on.set()
            await busy
            assert await q.receive_batch(3) == []  # none was released
            assert (await q.stats()).in_flight == 3

    asyncio.run(main())
