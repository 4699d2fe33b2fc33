"""Part of :class:`~vsqs.testing.QueueTests`:
Message groups: order within a group, one message of a group in flight,
batches, releases, expiries, dead letters, targeted receives, backlogs and
fairness (docs/groups.md).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

import vsqs
from vsqs._candidates import STALE_AFTER
from vsqs._dead_letter import BLOCKER_CHECK
from vsqs._view import HEAD_NAMES

from ._clock import FakeClock
from ._suite import failing


def received(messages: Iterable[vsqs.Message]) -> list[tuple[str | None, bytes]]:
    """``(group, body)`` of each message, in the order received."""
    return [(m.group, m.body) for m in messages]


def drain(queue: vsqs.Queue) -> list[vsqs.Message]:
    """Receive and delete one message at a time until none is left."""
    got: list[vsqs.Message] = []
    while (msg := queue.receive()) is not None:
        got.append(msg)
        msg.delete()
    return got


class GroupTests:
    """Message groups: FIFO per group, one message of a group in flight, to anyone."""

    def test_a_group_is_delivered_in_send_order(self, q: vsqs.Queue) -> None:
        sent: dict[str | None, list[str]] = {"a": [], "b": [], None: []}
        for i in range(6):
            for group in ("a", "b", None):
                sent[group].append(q.send(f"{group}{i}", group=group))
        batch = q.send_batch(
            [vsqs.Outgoing(b"a6", group="a"), vsqs.Outgoing(b"b6", group="b"), b"n6"]
        )
        for group, message_id in zip(("a", "b", None), batch, strict=True):
            sent[group].append(message_id)
        got = drain(q)
        for group, ids in sent.items():
            assert [m.id for m in got if m.group == group] == ids
        assert [m.body for m in got if m.group == "a"] == [f"a{i}".encode() for i in range(7)]
        assert all(m.receive_count == 1 for m in got)

    def test_one_message_of_a_group_in_flight_for_every_client(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        q.send_batch([b"a1", b"a2", b"a3"], group="a")
        b1 = q.send(b"b1", group="b")
        plain = q.send(b"plain")
        held = q.receive()
        assert held is not None and held.body == b"a1"
        with vsqs.Queue(store, clock=clock) as other:
            got = other.receive_batch(10)
            assert sorted(m.id for m in got) == sorted([b1, plain])  # nothing of "a"
            assert other.receive(group="a") is None
            assert q.receive_batch(10) == []  # nor to its holder, in another receive
            held.delete()
            clock.advance(STALE_AFTER)  # a receiver sees others' acks at its next listing
            nxt = other.receive_batch(10)
            assert received(nxt) == [("a", b"a2"), ("a", b"a3")]

    def test_a_batch_takes_a_groups_consecutive_messages_up_to_the_first_unavailable(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """A batch takes a group's messages in order while they can be
        claimed and read; at one it cannot take (here: its read fails, and
        it is given back) the group stops: nothing behind it passes it, and
        the other groups are received."""
        # one object per message: a read of the third fails alone
        a = q.send_batch([b"a1", b"a2", b"a3", b"a4"], group="a", bundle=False)
        b = q.send_batch([b"b1", b"b2"], group="b", bundle=False)
        with failing(store, "read_limited", lambda name: name.startswith(a[2])) as failed:
            got = q.receive_batch(10)
            assert failed, "the third message of the group was never tried"
            ids = [m.id for m in got]
            assert [i for i in ids if i in a] == a[:2]
            taken = [i for i in ids if i in b]  # side by side, "b" may come in the same round
            assert taken == b[: len(taken)]
            more = q.receive_batch(10)  # "a" is held by the first two: only "b" is left
            assert [m.id for m in more] == b[len(taken) :]
        with vsqs.Queue(store, clock=clock) as other:
            assert other.receive_batch(10) == []
            for msg in got + more:
                msg.delete()
            clock.advance(STALE_AFTER)  # the next listing; and the pass-over of a3 is over
            rest = other.receive_batch(10)
            assert received(rest) == [("a", b"a3"), ("a", b"a4")]
            assert rest[0].receive_count == 1  # the failed read counted no receive

    def test_a_batch_limit_stops_a_group_in_order(self, q: vsqs.Queue) -> None:
        """A batch holds a group's first messages (as many as it takes, where
        claims go side by side one per group at a time); until they are
        settled the rest of the group waits, even for their holder."""
        a = q.send_batch([b"a1", b"a2", b"a3", b"a4"], group="a")
        b1 = q.send(b"b1", group="b")
        first = q.receive_batch(3)
        taken = [m.id for m in first if m.group == "a"]
        assert len(first) == 3 and taken == a[: len(taken)]
        second = q.receive_batch(3)
        assert sorted(m.id for m in first + second) == sorted([*taken, b1])
        for msg in first + second:
            msg.delete()
        assert [m.id for m in q.receive_batch(10)] == a[len(taken) :]

    def test_a_released_message_stays_at_the_head_of_its_group(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        a1, _a2 = q.send_batch([b"a1", b"a2"], group="a")
        msg = q.receive()
        assert msg is not None and msg.id == a1
        msg.release()
        with vsqs.Queue(store, clock=clock) as other:
            again = other.receive_batch(1)
            assert [(m.id, m.receive_count) for m in again] == [(a1, 2)]
            again[0].release()
        clock.advance(STALE_AFTER)  # a receiver sees others' releases at its next listing
        again = q.receive_batch(1)
        assert [(m.id, m.receive_count) for m in again] == [(a1, 3)]

    def test_a_release_with_delay_or_an_extend_keeps_the_group_blocked(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        a1, a2 = q.send_batch([b"a1", b"a2"], group="a")
        b1 = q.send(b"b1", group="b")
        with vsqs.Queue(store, clock=clock) as other:
            msg = q.receive(visibility_timeout=5)
            assert msg is not None and msg.id == a1
            msg.release(delay=10)
            clock.advance(9.9)
            got = other.receive_batch(10)
            assert [m.id for m in got] == [b1]  # a2 stays behind its delayed head
            got[0].delete()
            clock.advance(0.1)
            msg = other.receive(visibility_timeout=5)
            assert msg is not None and (msg.id, msg.receive_count) == (a1, 2)
            clock.advance(4)
            msg.extend(20)
            clock.advance(19.9)
            assert q.receive_batch(10) == [] and other.receive_batch(10) == []
            clock.advance(0.1)
            again = q.receive_batch(10)
            assert [(m.id, m.receive_count) for m in again] == [(a1, 3), (a2, 1)]

    def test_a_lapsed_hold_of_a_group_cannot_be_extended_back(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        """Once a message's timeout ran out its group was free, and another of
        its messages may be in flight (a delayed head due meanwhile): an
        extend would hold two at once. It raises; a delete still works."""
        late = q.send(b"late", group="a", delay=2)
        early = q.send(b"early", group="a")
        held = q.receive(visibility_timeout=1)
        assert held is not None and held.id == early
        clock.advance(2)
        head = q.receive(visibility_timeout=30)  # the delayed one, older, is due: it leads
        assert head is not None and head.id == late
        with pytest.raises(vsqs.ReceiptExpired, match="group may have moved on"):
            held.extend(30)
        held.delete()  # an ack after the timeout is no hold
        assert q.receive() is None  # the head is still held

    def test_an_expired_head_is_delivered_again_before_the_rest_of_its_group(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        a = q.send_batch([b"a1", b"a2", b"a3"], group="a")
        held = q.receive(visibility_timeout=5)
        assert held is not None and held.id == a[0]
        clock.advance(4.9)
        with vsqs.Queue(store, clock=clock) as other:
            assert other.receive_batch(10) == []
            clock.advance(0.1)
            again = other.receive_batch(10)
            assert [(m.id, m.receive_count) for m in again] == [(a[0], 2), (a[1], 1), (a[2], 1)]
        with pytest.raises(vsqs.ReceiptExpired):
            held.delete()

    def test_a_delayed_message_does_not_block_its_group(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        """A delayed send joins its group when it is due; until then the
        messages sent before and after it are delivered, one at a time."""
        a1 = q.send(b"a1", group="a")
        late = q.send(b"late", group="a", delay=10)
        a3 = q.send(b"a3", group="a")
        assert [m.id for m in drain(q)] == [a1, a3]
        assert q.stats().groups_in_flight == 0
        clock.advance(10)
        assert [m.id for m in drain(q)] == [late]

    def test_a_dead_lettered_head_unblocks_its_group_and_keeps_its_metadata(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            poison = q.send(b"a1", group="a", attributes={"k": "v"}, dedup_id="d1")
            a2 = q.send(b"a2", group="a")
            held = q.receive(visibility_timeout=1)
            assert held is not None and held.id == poison
            clock.advance(1)
            nxt = q.receive()
            assert nxt is not None and nxt.id == a2  # the head went to the dead-letter queue
            assert q.stats().dead_letter == 1
            with vsqs.Queue(store.sibling("dlq"), clock=clock) as dlq:
                [dead] = dlq.peek(10)
                assert (dead.id, dead.body, dead.group) == (poison, b"a1", "a")
                assert (dead.attributes, dead.dedup_id) == ({"k": "v"}, "d1")
                assert dead.dead_lettered is not None
                got = dlq.receive()
                assert got is not None and received([got]) == [("a", b"a1")]

    def test_a_strict_dead_letter_blocks_its_group_until_it_is_deleted(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        strict = {"max_receives": 1, "dead_letter": "dlq", "dead_letter_blocks_group": True}
        with vsqs.Queue(store, clock=clock, **strict) as q:  # type: ignore[arg-type]
            poison = q.send(b"a1", group="a")
            q.send(b"a2", group="a")
            b1 = q.send(b"b1", group="b")
            plain = q.send(b"plain")
            held = q.receive(visibility_timeout=1)
            assert held is not None and held.id == poison
            clock.advance(1)
            got = q.receive_batch(10)  # the head goes to the dead-letter queue; a2 waits
            assert sorted(m.id for m in got) == sorted([b1, plain])
            for m in got:
                m.delete()
            assert q.stats().dead_letter == 1 and q.stats().groups_in_flight == 1
            with vsqs.Queue(store, clock=clock) as other:
                for _ in range(2):
                    clock.advance(BLOCKER_CHECK)
                    assert other.receive(group="a") is None
                    assert q.receive() is None
                with vsqs.Queue(store.sibling("dlq"), clock=clock) as dlq:
                    dead = dlq.receive()
                    assert dead is not None and dead.id == poison
                    dead.delete()  # done once dlq is closed (held back for a batch)
                clock.advance(BLOCKER_CHECK)
                nxt = other.receive()
                assert nxt is not None and nxt.body == b"a2"

    def test_a_redriven_strict_dead_letter_is_its_groups_head_again(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        strict = {"max_receives": 1, "dead_letter": "dlq", "dead_letter_blocks_group": True}
        with vsqs.Queue(store, clock=clock, **strict) as q:  # type: ignore[arg-type]
            q.send(b"a1", group="a")
            q.send(b"a2", group="a")
            poison = q.send(b"plain poison")
            for body in (b"a1", b"plain poison"):
                held = q.receive(visibility_timeout=1)
                assert held is not None and held.body == body
            clock.advance(1)
            assert q.receive_batch(10) == []  # both dead-lettered; a2 waits behind its head
            with vsqs.Queue(store.sibling("dlq"), clock=clock) as dlq:
                assert vsqs.redrive(dlq, q) == 2
            clock.advance(BLOCKER_CHECK)
            got = q.receive_batch(10)
            assert [m.body for m in got if m.group == "a"] == [b"a1", b"a2"]  # its head first
            assert [m.id for m in got if m.group is None] == [poison]  # it left no blocker

    def test_a_receive_for_one_group_takes_only_its_next_message(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        a1 = q.send(b"a1", group="a")
        b = q.send_batch([b"b1", b"b2", b"b3"], group="b")
        plain = q.send(b"plain")
        first = q.receive(group="b")
        assert first is not None and first.id == b[0]
        with vsqs.Queue(store, clock=clock) as other:
            assert other.receive(group="b") is None  # held
            assert other.receive_batch(10, group="b") == []
            assert other.receive(group="nobody") is None
            first.delete()
            batch = other.receive_batch(10, group="b")
            assert [m.id for m in batch] == b[1:]
            assert {m.group for m in batch} == {"b"}
        rest = q.receive_batch(10)
        assert sorted(m.id for m in rest) == sorted([a1, plain])
        for bad in ("has space", "", "x" * 129):
            with pytest.raises(vsqs.InvalidArgument):
                q.receive(group=bad)

    def test_a_receive_for_one_group_takes_a_message_just_sent(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        """A name listed young waits for a second look (docs/format.md,
        "FIFO"): a receive for its group takes that look too, though other
        groups' candidates remain."""
        q.send_batch([b"a1", b"a2"], group="a")
        clock.advance(1)
        b1 = q.send(b"b1", group="b")
        got = q.receive(group="b")
        assert got is not None and got.id == b1

    def test_a_backlog_of_one_group_never_hides_another_groups_head(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """No scan window: more messages of one held group than a listing
        reads for the head of the queue (where it may stop early) are passed
        over, and the next group's head behind them is received."""
        with (
            vsqs.Queue(store, clock=clock, durable=False) as q,
            vsqs.Queue(store, clock=clock) as other,
        ):
            big = q.send_batch([b"big"] * (HEAD_NAMES + 20), group="big")
            small = q.send(b"small", group="small")
            plain = q.send(b"plain")
            held = q.receive()
            assert held is not None and held.id == big[0]
            got = other.receive_batch(10)
            assert sorted(m.id for m in got) == sorted([small, plain])
            for msg in got:
                msg.delete()
            late = q.send(b"late", group="small")
            assert [m.id for m in other.receive_batch(10, group="small")] == [late]

    def test_groups_are_served_oldest_available_head_first(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """Every receive takes the oldest head it may claim: a held group
        never stops the others, and no group is passed over for a younger one."""
        a = q.send_batch([b"a1", b"a2", b"a3"], group="a")
        b1, c1, b2 = q.send_batch(
            [vsqs.Outgoing(b"b1", group="b"), vsqs.Outgoing(b"c1", group="c"), b"b2"]
        )
        q.send(b"b3", group="b")
        with vsqs.Queue(store, clock=clock) as two, vsqs.Queue(store, clock=clock) as three:
            one = q.receive()
            assert one is not None and one.id == a[0]
            second = two.receive()
            assert second is not None and second.id == b1  # older than c1
            third = three.receive()
            assert third is not None and third.id == c1
            plain = three.receive()
            assert plain is not None and plain.id == b2  # no group: not blocked by "b"
            assert q.receive() is None and two.receive() is None
            second.delete()
            clock.advance(STALE_AFTER)  # a receiver sees others' acks at its next listing
            nxt = three.receive()
            assert nxt is not None and received([nxt]) == [("b", b"b3")]
            one.delete()
        with vsqs.Queue(store, clock=clock) as four:
            assert [m.id for m in four.receive_batch(10)] == a[1:]

    def test_stats_count_the_groups_in_flight(self, q: vsqs.Queue, clock: FakeClock) -> None:
        q.send_batch([b"a1", b"a2"], group="a")
        q.send(b"b1", group="b")
        q.send(b"c1", group="c", delay=5)  # delayed: holds nothing
        q.send(b"plain")
        assert q.stats().groups_in_flight == 0
        got = q.receive_batch(10, visibility_timeout=3)
        assert sorted(received(got), key=repr) == sorted(
            [("a", b"a1"), ("a", b"a2"), ("b", b"b1"), (None, b"plain")], key=repr
        )
        stats = q.stats()
        assert (stats.groups_in_flight, stats.in_flight, stats.delayed) == (2, 4, 1)
        for msg in got:
            if msg.group == "b" or msg.group is None:
                msg.delete()
        assert q.stats().groups_in_flight == 1
        clock.advance(3)  # an expired hold holds nothing
        assert q.stats().groups_in_flight == 0
