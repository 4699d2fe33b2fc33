"""Part of :class:`~vsqs.testing.QueueTests`:
bundles (docs/format.md, "Format 4: bundles"): every promise of a message
alone, kept by each message of a bundle, whatever the others do.
"""

from __future__ import annotations

import pytest

import vsqs
from vsqs import _names as names

from ._clock import FakeClock
from ._suite import failing, listing

BODIES = [b"m%d" % i for i in range(100)]


def objects(store: vsqs.Store) -> list[str]:
    """The names of the queue's message objects (config and records left out)."""
    return [n for n in listing(store) if (p := names.parse(n)) and p.state != names.NEW]


def received(q: vsqs.Queue, n: int = 100, vt: float = 30) -> list[vsqs.Message]:
    got = q.receive_batch(n, visibility_timeout=vt)
    return got


class BundleTests:
    """Bundles: one object for a batch, and per-message promises under
    partial acks, releases, extends and expiries."""

    def test_a_batch_is_one_object_and_its_messages_come_in_order(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        ids = q.send_batch(BODIES)
        assert len(objects(store)) == 1
        assert q.stats().ready == 100
        got = received(q)
        assert [m.id for m in got] == ids and [m.body for m in got] == BODIES
        assert {m.receive_count for m in got} == {1}
        assert q.stats().in_flight == 100
        assert q.delete_batch(got).ok
        assert objects(store) == []

    def test_acks_of_some_leave_exactly_the_others_with_their_own_counts(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        ids = q.send_batch(BODIES)
        got = received(q, vt=10)
        kept = got[::10]  # 10 of them are neither acked nor released: they lapse
        assert q.delete_batch([m for m in got if m not in kept]).ok
        assert q.receive_batch(100) == []
        clock.advance(10)
        back = received(q)
        assert [m.id for m in back] == [m.id for m in kept] == ids[::10]
        assert {m.receive_count for m in back} == {2}
        assert q.delete_batch(back).ok
        clock.advance(60)
        assert q.receive_batch(100) == [] and q.stats().ready == 0

    def test_released_messages_come_back_at_once_and_acked_ones_never(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        q.send_batch(BODIES)
        got = received(q)
        released = q.release_batch(got[90:])
        assert released.ok and len(released.released) == 10
        assert q.delete_batch(got[:90]).ok
        back = received(q)
        assert [m.body for m in back] == BODIES[90:]
        assert {m.receive_count for m in back} == {2}
        for m in back:
            m.delete()
        clock.advance(3600)
        assert q.receive_batch(100) == []

    def test_one_by_one_acks_of_a_bundle_follow_its_renames(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        q.send_batch(BODIES[:5])
        got = received(q)
        for m in got:
            m.delete()  # each renames the part: the others' receipts follow
        assert all(m.settled for m in got) and objects(store) == []

    def test_a_receive_of_fewer_than_a_bundle_leaves_the_rest_to_others(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        ids = q.send_batch(BODIES)
        first = q.receive_batch(10)
        assert [m.id for m in first] == ids[:10]
        with vsqs.Queue(store, clock=clock) as other:
            rest = other.receive_batch(100)
            assert [m.id for m in rest] == ids[10:]
            assert other.delete_batch(rest).ok
        stats = q.stats()
        assert (stats.ready, stats.in_flight) == (0, 10)
        assert q.delete_batch(first).ok

    def test_an_extend_of_some_keeps_them_and_lets_the_others_lapse(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        q.send_batch(BODIES[:10])
        got = received(q, vt=10)
        extended = q.extend_batch(got[:3], 60)
        assert extended.ok and [m.body for m in extended.extended] == BODIES[:3]
        clock.advance(10)
        back = received(q)
        assert [m.body for m in back] == BODIES[3:10]
        assert q.delete_batch(extended.extended).ok  # their receipts followed the split
        assert q.delete_batch(back).ok

    def test_a_stale_message_of_a_bundle_changes_nothing(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        q.send_batch(BODIES[:4])
        stale = received(q, vt=1)
        clock.advance(1)
        holder = received(q)
        assert [m.body for m in holder] == BODIES[:4]
        before = objects(store)
        for attempt in (stale[1].delete, lambda: stale[2].extend(60), stale[3].release):
            with pytest.raises(vsqs.ReceiptExpired):
                attempt()
        assert q.delete_batch(stale).stale == [m.receipt for m in stale]
        assert objects(store) == before
        assert q.delete_batch(holder).ok

    def test_a_bare_receipt_of_a_bundled_message_deletes_it(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        q.send_batch(BODIES[:3])
        got = received(q)
        receipts = [m.receipt or "" for m in got]
        assert all("#" in r for r in receipts)
        assert q.delete_batch(receipts).ok  # bare receipts of one part: one change
        assert objects(store) == []
        with pytest.raises(vsqs.InvalidReceipt):
            q.delete(receipts[0].replace("#0", "#7"))  # a place its part lacks

    def test_bundled_messages_keep_their_attributes_and_groups(self, q: vsqs.Queue) -> None:
        outgoing = [
            vsqs.Outgoing(b"a", attributes={"k": "1"}),
            vsqs.Outgoing(b"b"),
            vsqs.Outgoing(b"c", attributes={"k": "3"}),
        ]
        q.send_batch(outgoing)
        q.send_batch([b"g0", b"g1", b"g2"], group="g")
        got = received(q)
        by_body = {m.body: m for m in got}
        assert by_body[b"a"].attributes == {"k": "1"} and by_body[b"b"].attributes == {}
        assert by_body[b"c"].attributes == {"k": "3"}
        assert [m.body for m in got if m.group == "g"] == [b"g0", b"g1", b"g2"]
        assert q.delete_batch(got).ok

    def test_a_bundle_of_a_group_is_delivered_in_order_one_held_part_at_a_time(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        q.send_batch([b"g%d" % i for i in range(6)], group="g")
        head = q.receive(group="g")
        assert head is not None and head.body == b"g0"
        with vsqs.Queue(store, clock=clock) as other:
            assert other.receive_batch(10) == []  # its group is in flight
            head.release()
            again = other.receive_batch(2)
            assert [m.body for m in again] == [b"g0", b"g1"]
            assert other.delete_batch(again).ok
            rest = other.receive_batch(10)
            assert [m.body for m in rest] == [b"g%d" % i for i in range(2, 6)]
            assert other.delete_batch(rest).ok

    def test_messages_of_a_bundle_are_dead_lettered_and_redriven_whole(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            ids = q.send_batch(BODIES[:20])
            first = q.receive_batch(20, visibility_timeout=1)
            assert q.delete_batch(first[:5]).ok
            clock.advance(1)
            assert q.receive_batch(20) == []  # the 15 others went to the dead-letter queue
            with vsqs.Queue(store.sibling("dlq"), clock=clock) as dlq:
                dead = dlq.peek(20)
                assert [m.id for m in dead] == ids[5:]
                assert dlq.stats().ready == 15
                assert vsqs.redrive(dlq, q) == 15
            back = q.receive_batch(20)
            assert [m.id for m in back] == ids[5:]
            assert q.delete_batch(back).ok

    def test_peek_purge_and_stats_count_messages_not_objects(self, q: vsqs.Queue) -> None:
        q.send_batch(BODIES[:30])
        q.send(b"alone")
        assert [m.body for m in q.peek(5)] == BODIES[:5]
        assert len(q.peek(100)) == 31
        held = q.receive_batch(7)
        assert (q.stats().ready, q.stats().in_flight) == (24, 7)
        assert held and q.purge() == 31

    def test_bundle_false_and_deduplication_ids_send_one_object_per_message(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        q.send_batch(BODIES[:5], bundle=False)
        assert len(objects(store)) == 5
        q.purge()
        q.send_batch(BODIES[:5], dedup_ids=[f"d{i}" for i in range(5)])
        assert len(objects(store)) == 5
        assert [m.body for m in received(q)] == BODIES[:5]

    def test_a_batch_larger_than_a_bundle_takes_several_in_order(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        bodies = [b"%d" % i for i in range(names.MAX_BUNDLE * 2 + 1)]
        ids = q.send_batch(bodies)
        assert len(objects(store)) == 3
        got: list[vsqs.Message] = []
        while batch := q.receive_batch(100):
            got += batch
        assert [m.id for m in got] == ids
        assert q.delete_batch(got).ok

    def test_a_failed_send_batch_of_bundles_says_which_messages_it_sent(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        writes: list[str] = []

        def second_bundle(name: str) -> bool:
            parsed = names.parse(name)
            if parsed is None or not names.is_bundle(parsed.id):
                return False
            writes.append(name)
            return len(writes) == 2

        bodies = [b"%d" % i for i in range(names.MAX_BUNDLE * 2 + 10)]
        with (
            failing(store, "write_new", second_bundle),
            pytest.raises(vsqs.StorageError, match="injected") as raised,
        ):
            q.send_batch(bodies)
        sent = raised.value.sent
        assert len(sent) == names.MAX_BUNDLE  # the first bundle's messages, in order
        got = received(q, 128) + received(q, 128)
        assert [m.id for m in got] == sent and [m.body for m in got] == bodies[: len(sent)]
