"""The messages a kombu channel holds (``vsqs.kombu._held.Held``), kept
invisible by ``consume``'s heartbeat: one batch of extends per round, outside
the lock that acks take; a storage failure is tried again at the next
round; a stale receipt stops the extends of that message only; a message
acked while its extend is under way is not brought back.

The heartbeat runs on its real thread, every third of a 0.3 s timeout; the
queues' clock is a ``FakeClock``, so nothing expires unless a test moves it,
and the tests wait for what the thread does (a receipt changing, a rename
reached), never for a time."""

from __future__ import annotations

import errno
import logging
import threading
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs.kombu._held import Held, delete
from vsqs.testing import FakeClock

from .support.waiting import wait_until

VT = 0.3
#: A bound on a stall, not a measure.
DEADLINE = 60.0


class Renames(vsqs.LocalStore):
    """A directory whose renames of a held name to a later one with the same
    receive count (the extends) of message ``target`` fail with ``EIO`` ``failures`` times, then
    wait for ``go_on`` while ``gate`` is set (saying so by ``waiting``)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.target = ""
        self.failures = 0
        self.gate = False
        self.waiting, self.go_on = threading.Event(), threading.Event()

    def rename(self, old: str, new: str) -> None:
        before, after = names.parse(old), names.parse(new)
        if (
            before is not None
            and after is not None
            and before.id == self.target
            and before.receive_count == after.receive_count  # not a claim
            and (before.expiry_ms or 0) <= (after.expiry_ms or 0)  # nor a release
        ):
            if self.failures:
                self.failures -= 1
                raise OSError(errno.EIO, "injected: rename failed", old)
            if self.gate:
                self.waiting.set()
                assert self.go_on.wait(DEADLINE)
        super().rename(old, new)


@pytest.fixture
def store(tmp_path: Path) -> Renames:
    return Renames(str(tmp_path / "jobs"))


@pytest.fixture
def queue(store: Renames, clock: FakeClock) -> vsqs.Queue:
    return vsqs.Queue(store, clock=clock)


def hold(held: Held, queue: vsqs.Queue, *bodies: bytes) -> list[vsqs.Message]:
    """Send ``bodies``, receive them for VT and hold each under its body as tag."""
    queue.send_batch(list(bodies), bundle=False)
    got = queue.receive_batch(len(bodies), visibility_timeout=VT)
    assert [m.body for m in got] == list(bodies)
    for message in got:
        held.add(message.body.decode(), queue, message)
    return got


def extended(message: vsqs.Message, times: int = 1) -> None:
    """Wait until the heartbeat extended ``message`` ``times`` more times."""
    for _ in range(times):
        old = message.receipt
        wait_until(lambda old=old: message.receipt != old, DEADLINE, f"an extend of {message.id}")


def test_an_ack_does_not_wait_for_a_round_of_extends(store: Renames, queue: vsqs.Queue) -> None:
    """Before, the holder extended message by message holding the lock that
    acks take: an ack waited for every extend of the round."""
    held = Held(VT)
    try:
        slow, quick = hold(held, queue, b"slow", b"quick")
        store.target, store.gate = slow.id, True
        assert store.waiting.wait(DEADLINE)  # a round is stuck in the extend of "slow"
        acked = threading.Event()
        threading.Thread(target=lambda: held.settle("quick", delete) and acked.set()).start()
        assert acked.wait(DEADLINE), "the ack waited for the round of extends"
        assert quick.settled and slow.receipt is not None
    finally:
        store.go_on.set()
        held.close()
    assert [n for n in store.list() if n.startswith(quick.id)] == []


def test_a_message_acked_while_its_extend_is_under_way_is_not_brought_back(
    store: Renames, queue: vsqs.Queue, clock: FakeClock
) -> None:
    held = Held(VT)
    try:
        [message, other] = hold(held, queue, b"acked", b"kept")
        store.target, store.gate = message.id, True
        assert store.waiting.wait(DEADLINE)  # its extend is under way
        acking = threading.Thread(target=held.settle, args=("acked", delete))
        acking.start()  # waits for that one extend, then deletes what it renamed to
        store.go_on.set()
        acking.join(DEADLINE)
        assert not acking.is_alive() and message.settled
        assert [n for n in store.list() if n.startswith(message.id)] == []
        extended(other, 2)  # the rounds go on without it
        assert [n for n in store.list() if n.startswith(message.id)] == []
        clock.advance(VT + 1)  # past any extend either could have had: "kept" comes back
        assert [m.id for m in queue.receive_batch(10)] == [other.id], "the acked one came back"
    finally:
        held.close()


def test_an_extend_that_fails_on_storage_is_tried_again_at_the_next_round(
    store: Renames, queue: vsqs.Queue, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, consume's heartbeat stopped extending a message at its first
    failed extend; the kombu holder had its own loop to try again."""
    caplog.set_level(logging.WARNING, logger="vsqs")
    other = vsqs.Queue(store, clock=clock)
    held = Held(VT)
    try:
        [message] = hold(held, queue, b"long task")
        receipt = message.receipt
        store.target, store.failures = message.id, 2
        extended(message)  # at the third round
        failed = [r for r in caplog.records if "failed (tried again" in r.getMessage()]
        assert len(failed) == 2 and not [r for r in caplog.records if "stopped" in r.message]
        assert message.receipt != receipt
        clock.advance(VT * 2 / 3)  # past the first expiry, not the new one
        assert other.receive() is None
    finally:
        held.close()


def test_a_stale_receipt_stops_the_extends_of_that_message_only(
    store: Renames, queue: vsqs.Queue, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A message whose extends failed until it expired and someone else
    received it: the next extend finds it stale, drops it with one warning,
    and the other messages are extended as before; its new holder keeps it."""
    caplog.set_level(logging.WARNING, logger="vsqs")
    other = vsqs.Queue(store, clock=clock)
    held = Held(VT)
    try:
        lost, kept = hold(held, queue, b"lost", b"kept")
        store.target, store.failures = lost.id, 10**6
        extended(kept)
        clock.advance(VT)  # lost's receipt runs out (kept's was renewed above)
        taken = other.receive(visibility_timeout=600)
        assert taken is not None and taken.id == lost.id
        store.failures = 0
        extended(kept, 3)
        stopped = [r for r in caplog.records if f"heartbeat for {lost.id} stopped" in r.message]
        assert len(stopped) == 1, "the stale message was tried again"
        taken.delete()  # its new holder's receipt is current
    finally:
        held.close()
