"""Part of :class:`~vsqs.testing.QueueTests`:
What a receipt does: delete, extend and release, and stale receipts.
"""

from __future__ import annotations

import pytest

import vsqs
from vsqs import _names as names

from ._clock import FakeClock
from ._suite import drop, listing


def four_held_one_deleted(q: vsqs.Queue) -> list[vsqs.Message]:
    """Four messages received for 1 s, in order; the first deleted since."""
    q.send_batch([b"a", b"b", b"c", b"d"])
    got = q.receive_batch(4, visibility_timeout=1)
    assert [m.body for m in got] == [b"a", b"b", b"c", b"d"]
    got[0].delete()
    return got


class ReceiptTests:
    """What a receipt does: delete, extend and release, and stale receipts."""

    # ---------------------------------------------------------------- delete
    def test_delete_removes_the_message(self, q: vsqs.Queue, store: vsqs.Store) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        settled_before = msg.settled
        msg.delete()
        assert (settled_before, msg.settled) == (False, True)
        assert listing(store) == [names.CONFIG_NAME]
        with pytest.raises(vsqs.ReceiptExpired):
            q.delete(msg.receipt)  # type: ignore[arg-type]

    def test_stale_receipt_cannot_touch_the_new_holders_message(
        self, q: vsqs.Queue, clock: FakeClock, store: vsqs.Store
    ) -> None:
        q.send(b"x")
        stale = q.receive(visibility_timeout=1)
        assert stale is not None
        clock.advance(1)
        holder = q.receive(visibility_timeout=30)
        assert holder is not None and holder.id == stale.id
        before = listing(store)
        for attempt in (stale.delete, lambda: stale.extend(60), stale.release):
            with pytest.raises(vsqs.ReceiptExpired):
                attempt()
        assert listing(store) == before
        holder.delete()

    def test_expired_but_not_rereceived_receipt_is_still_current(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        q.send(b"x")
        msg = q.receive(visibility_timeout=1)
        assert msg is not None
        clock.advance(5)
        msg.delete()
        assert q.receive() is None

    def test_delete_batch_says_what_it_deleted_and_what_was_stale(
        self, q: vsqs.Queue, clock: FakeClock, store: vsqs.Store
    ) -> None:
        got = four_held_one_deleted(q)
        clock.advance(1)
        again = q.receive(visibility_timeout=30)  # "b" is held by another now
        assert again is not None and again.id == got[1].id
        receipts = [m.receipt or "" for m in got]
        result = q.delete_batch([got[0], got[1], receipts[2], got[3], got[3]])
        assert result.deleted == [receipts[2], receipts[3]]
        assert result.stale == [receipts[0], receipts[1], receipts[3]]
        assert (result.failed, result.ok) == ({}, False)
        assert got[3].settled
        again.delete()
        assert q.receive() is None
        assert listing(store) == [names.CONFIG_NAME]

    def test_delete_batch_checks_every_receipt_before_deleting_any(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        q.send_batch([b"a", b"b"])
        got = q.receive_batch(2)
        before = listing(store)
        for bad in ("../../etc/passwd", "", f"{got[0].id}.new"):
            with pytest.raises(vsqs.InvalidReceipt):
                q.delete_batch([got[0], bad])
        assert listing(store) == before
        receipts = [m.receipt for m in got]
        result = q.delete_batch(got)
        assert result.deleted == receipts
        assert result.ok
        assert q.delete_batch([]) == vsqs.DeleteResult([], [], {})

    def test_extend_batch_and_release_batch_say_what_they_did_receipt_by_receipt(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        got = four_held_one_deleted(q)
        old = [m.receipt or "" for m in got]
        result = q.extend_batch([got[0], got[1], old[2]], visibility_timeout=60)
        assert result.stale == [old[0]]
        assert [m.id for m in result.extended] == [got[1].id, got[2].id]
        assert result.extended[0] is got[1] and got[1].receipt != old[1]  # updated in place
        assert (result.failed, result.ok) == ({}, False)
        clock.advance(30)  # past the old timeout: b and c are extended, d is not
        other = q.receive(visibility_timeout=600)
        assert other is not None and other.id == got[3].id
        released = q.release_batch([got[1], result.extended[1], got[3]])
        assert released.released == [got[1].receipt, result.extended[1].receipt]
        assert released.stale == [old[3]] and not released.ok
        assert sorted(m.body for m in q.receive_batch(10)) == [b"b", b"c"]  # visible at once
        with pytest.raises(vsqs.InvalidReceipt):
            q.release_batch([other, "../../etc/passwd"])
        assert other.receipt is not None and q.extend_batch([other], 5).ok
        assert q.release_batch([]) == vsqs.ReleaseResult([], [], {})

    def test_release_batch_with_a_delay_keeps_them_hidden_until_it_ends(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        q.send_batch([b"a", b"b"])
        got = q.receive_batch(2)
        assert q.release_batch(got, delay=10).ok
        assert q.receive() is None
        clock.advance(10)
        again = q.receive_batch(2)
        assert [(m.body, m.receive_count) for m in again] == [(b"a", 2), (b"b", 2)]

    # ---------------------------------------------------------------- extend
    def test_extend_gives_a_new_receipt_and_more_time(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        q.send(b"x")
        msg = q.receive(visibility_timeout=5)
        assert msg is not None
        old = msg.receipt
        clock.advance(4)
        same = q.extend(msg, 10)
        assert same is msg and msg.receipt != old
        with pytest.raises(vsqs.ReceiptExpired):
            q.delete(old)  # type: ignore[arg-type]
        clock.advance(9)
        assert q.receive() is None
        clock.advance(1)
        again = q.receive()
        assert again is not None and again.receive_count == 2

    def test_extend_by_receipt_string_returns_a_message(self, q: vsqs.Queue) -> None:
        q.send(b"body")
        msg = q.receive()
        assert msg is not None and msg.receipt is not None
        extended = q.extend(msg.receipt, 60)
        assert extended.body == b"body" and extended.id == msg.id
        assert extended.receipt != msg.receipt
        q.delete(extended.receipt)  # type: ignore[arg-type]

    def test_extend_to_zero_makes_the_message_visible(self, q: vsqs.Queue) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        msg.extend(0)
        again = q.receive()
        assert again is not None and again.id == msg.id

    # --------------------------------------------------------------- release
    def test_release_makes_it_visible_again_keeping_count_and_position(self, q: vsqs.Queue) -> None:
        a, _b = q.send_batch([b"a", b"b"])
        msg = q.receive()
        assert msg is not None and msg.id == a
        msg.release()
        again = q.receive()
        assert again is not None and again.id == a and again.receive_count == 2
        with pytest.raises(vsqs.ReceiptExpired):
            msg.release()

    def test_release_is_visible_at_once_between_clock_ticks(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        clock.advance(0.0004)  # mid-millisecond: rounding the expiry up would hide it
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        msg.release()
        assert q.stats().ready == 1
        again = q.receive()
        assert again is not None and again.id == msg.id

    def test_release_with_delay(self, q: vsqs.Queue, clock: FakeClock) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        msg.release(delay=7)
        assert q.receive() is None
        assert q.stats().in_flight == 1
        clock.advance(7)
        assert q.receive() is not None

    def test_a_held_message_keeps_a_name_to_be_released_to(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """A claim or an extend never takes a message's last version: it is
        kept for the release (or the give back) that makes the message
        visible again. Before, an extend took it and the release raised
        ``InvalidArgument``, which stopped ``consume`` (whose failed handler
        releases). A message whose claim would leave no such name is passed
        over by receivers."""
        old_ms = int(clock() * 1000) - 10_000
        message_id = names.IdGenerator().next_id(old_ms)
        drop(store, names.invisible_name(message_id, old_ms, 1, names.MAX_VERSION - 3))
        msg = q.receive()
        assert msg is not None and msg.id == message_id
        msg.extend(10)
        with pytest.raises(vsqs.InvalidArgument, match="no name left"):
            msg.extend(10)  # would leave no name to release it to: refused, nothing changed
        msg.release()
        [left] = [names.parse(n) for n in store.list() if n.startswith(message_id)]
        assert left is not None and left.version == names.MAX_VERSION
        assert q.receive() is None  # visible, and passed over
        assert q.stats().ready == 1
