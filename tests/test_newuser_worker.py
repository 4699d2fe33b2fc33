"""What a new user of ``consume`` hits (issue 31): each test failed before its fix.

Real directories, a real ``shutil.rmtree``; events, not sleeps; the retry
delays on an injected clock.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
from pathlib import Path

import pytest

import vsqs
import vsqs.aio
from vsqs.testing import FakeClock

from .support.cli import DEADLINE


@pytest.mark.parametrize("fails", [False, True], ids=["succeeds", "fails"])
@pytest.mark.parametrize("concurrency", [1, 2])
def test_consume_stops_saying_the_queue_is_gone_when_its_directory_is_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, concurrency: int, fails: bool
) -> None:
    """The handler's message went with the directory: the settle finds its
    receipt gone, and the queue too, so ``consume`` ends with an error that
    says so, instead of promising a redelivery that cannot come."""
    path = tmp_path / "q"
    in_hand, removed = threading.Event(), threading.Event()
    handled: list[str] = []

    def handler(message: vsqs.Message) -> None:
        handled.append(message.id)
        in_hand.set()
        assert removed.wait(DEADLINE)
        if fails:
            raise RuntimeError("bad")

    outcome: list[object] = []

    def run(queue: vsqs.Queue) -> None:
        try:
            outcome.append(queue.consume(handler, concurrency=concurrency, retry_delay=0.01))
        except BaseException as exc:
            outcome.append(exc)

    with vsqs.Queue(path) as q, caplog.at_level(logging.WARNING, logger="vsqs"):
        q.send(b"x")
        worker = threading.Thread(target=run, args=(q,))
        worker.start()
        assert in_hand.wait(DEADLINE), "the handler never ran"
        shutil.rmtree(path)
        removed.set()
        worker.join(DEADLINE)
        assert not worker.is_alive(), "consume went on without its queue"
    [error] = outcome
    assert isinstance(error, vsqs.QueueNotFound)
    assert str(error) == (
        f"{path} is gone: it was removed while {handled[0]} was being handled "
        "(nothing is redelivered)"
    )
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert not [line for line in said if "redelivered" in line or "release" in line], said
    assert not path.exists()


def test_the_asyncio_consume_of_a_removed_queue_releases_nothing_either(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: ``vsqs.aio``'s consume ended with the same error but first
    tried to release each other message in hand, with a warning each."""
    path = tmp_path / "q"
    handled: list[str] = []

    async def main() -> BaseException | None:
        never = asyncio.Event()

        async def handler(message: vsqs.aio.Message) -> None:
            handled.append(message.id)
            if len(handled) < 3:  # the first two stay in hand until consume stops
                await asyncio.wait_for(never.wait(), DEADLINE)
            shutil.rmtree(path)  # the third's settle finds the queue gone

        async with vsqs.aio.Queue(path) as q:
            await q.send_batch([b"a", b"b", b"c"])
            try:
                await q.consume(handler, concurrency=3)
            except vsqs.QueueNotFound as exc:
                return exc
        return None

    with caplog.at_level(logging.WARNING, logger="vsqs"):
        error = asyncio.run(main())
    assert isinstance(error, vsqs.QueueNotFound) and (
        "is gone" in str(error) or "removed" in str(error)
    )
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert not [line for line in said if "release" in line], said


def test_the_last_failure_says_no_retry_and_the_dead_lettering_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    attempts: list[int] = []

    def fails(message: vsqs.Message) -> None:
        attempts.append(message.receive_count)
        raise RuntimeError("bad")

    half = lambda: 0.5  # noqa: E731 - the jitter: a delay of 3/4 of each step
    with (
        vsqs.Queue(
            tmp_path / "q", clock=clock, max_receives=2, dead_letter="dlq", retry_delay=2
        ) as q,
        caplog.at_level(logging.INFO, logger="vsqs"),
    ):
        sent = q.send(b"bad")
        for _ in range(2):
            assert q.consume(fails, max_messages=1, jitter=half) == 0
            clock.advance(100)  # past its delay: 1.5 s, then 3 s
        assert q.receive() is None, "a third receive handed it out"
    assert attempts == [1, 2]
    failed = [r.getMessage() for r in caplog.records if "handler failed" in r.getMessage()]
    assert len(failed) == 2 and failed[0].endswith("(receive 1); retrying in 1.5 s")
    assert "retrying" not in failed[1] and failed[1].endswith(
        "(receive 2): RuntimeError('bad'); not retried: that was its last receive "
        "(max_receives 2), it is dead-lettered when next received, in 3 s"
    )
    [moved] = [r for r in caplog.records if "dead-lettered after" in r.getMessage()]
    assert moved.levelno == logging.WARNING
    assert moved.getMessage() == (
        f"{tmp_path / 'q'}: message {sent} dead-lettered after 2 receives to {tmp_path / 'dlq'}"
    )
    with vsqs.Queue(tmp_path / "dlq", create=False) as dlq:
        [letter] = dlq.peek()
    assert letter.id == sent and letter.dead_lettered is not None
    assert letter.dead_lettered.receive_count == 2


def test_a_consume_stopped_with_nothing_in_hand_does_not_claim_a_release(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler settled its message itself, then Ctrl-C came: nothing
    was released, and the line says so instead of "released 0 ... (visible
    again now)"."""

    def handler(message: vsqs.Message) -> None:
        message.delete()
        raise KeyboardInterrupt

    with vsqs.Queue(tmp_path / "q") as q, caplog.at_level(logging.WARNING, logger="vsqs"):
        q.send(b"x")
        with pytest.raises(KeyboardInterrupt):
            q.consume(handler)
        assert q.stats().ready + q.stats().in_flight == 0
    stopped = [r.getMessage() for r in caplog.records if "consume stopped" in r.getMessage()]
    assert stopped == [
        f"{tmp_path / 'q'}: consume stopped by KeyboardInterrupt: handled 0 (0 succeeded), "
        "released nothing"
    ]
