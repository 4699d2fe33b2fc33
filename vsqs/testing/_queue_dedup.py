"""Part of :class:`~vsqs.testing.QueueTests`:
Deduplication ids and message attributes: one message per id within the
queue's window, and attributes kept with their message wherever it goes
(docs/groups.md).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

import pytest

import vsqs
from vsqs import _names as names

from ._clock import FakeClock
from ._suite import listing

ATTRIBUTES = {"trace": "00-4bf92f-01", "content-type": "application/json", "v": "é 2"}


def messages_in(store: vsqs.Store) -> list[str]:
    """The names of the messages in ``store`` (every state), sorted."""
    return sorted(n for n in store.list() if names.parse(n) is not None)


class DedupTests:
    """A send of a deduplication id seen within the window creates nothing."""

    def test_a_duplicate_within_the_window_creates_nothing(
        self, q: vsqs.Queue, store: vsqs.Store, clock: FakeClock
    ) -> None:
        first = q.send(b"first", dedup_id="order-1")
        assert q.send(b"second", dedup_id="order-1") == first
        assert messages_in(store) == [first]
        batch = q.send_batch(
            [b"x", vsqs.Outgoing(b"y", dedup_id="order-1"), b"z"], dedup_ids=["order-1", None, "o2"]
        )
        assert batch[:2] == [first, first] and batch[2] != first
        msg = q.receive()
        assert msg is not None and (msg.id, msg.body) == (first, b"first")
        msg.delete()  # received and deleted: the id is still remembered
        clock.advance(q.config.dedup_window - 0.001)
        assert q.send(b"again", dedup_id="order-1") == first
        with vsqs.Queue(store, clock=clock) as other:  # by every client of the queue
            assert other.send(b"again", dedup_id="order-1") == first
        assert messages_in(store) == [batch[2]]

    def test_after_the_window_the_id_makes_a_new_message(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, dedup_window=10) as q:
            assert q.config.dedup_window == 10
            first = q.send(b"one", dedup_id="d")
            clock.advance(10)
            second = q.send(b"two", dedup_id="d")
            assert second != first
            assert q.send(b"three", dedup_id="d") == second
            assert [m.body for m in q.receive_batch(10)] == [b"one", b"two"]
        with vsqs.Queue(store, clock=clock, create=False) as again:
            assert again.config.dedup_window == 10  # a queue setting, stored at creation

    def test_duplicates_do_not_extend_the_window(self, store: vsqs.Store, clock: FakeClock) -> None:
        with vsqs.Queue(store, clock=clock, dedup_window=10) as q:
            first = q.send(b"one", dedup_id="d")
            for _ in range(3):
                clock.advance(3)
                assert q.send(b"dup", dedup_id="d") == first
            clock.advance(1)  # 10 s after the first send, 1 s after the last duplicate
            assert q.send(b"new", dedup_id="d") != first
            assert len(messages_in(store)) == 2

    def test_content_dedup_uses_the_sha256_of_the_body(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, content_dedup=True) as q:
            assert q.config.content_dedup is True
            first = q.send(b"same body")
            assert q.send(bytearray(b"same body")) == first
            assert q.send(b"other body") != first
            digest = hashlib.sha256(b"same body").hexdigest()
            assert q.send(b"not the same", dedup_id=digest) == first
            assert q.send(b"same body", dedup_id="explicit") != first  # an id wins over the body
            assert len(messages_in(store)) == 3
        with vsqs.Queue(store.sibling("plain"), clock=clock) as plain:
            ids = {plain.send(b"same body") for _ in range(2)}
            assert len(ids) == 2  # off by default

    def test_dedup_records_are_collected_after_their_window(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """``gc()`` keeps a record while its window runs and removes it within
        two windows of the first send (records go by slot: docs/format.md)."""
        with vsqs.Queue(store, clock=clock, dedup_window=10) as q:
            first = q.send(b"one", dedup_id="d")
            msg = q.receive()
            assert msg is not None
            msg.delete()
            clock.advance(9.999)
            q.gc()  # the window runs: kept
            assert q.send(b"dup", dedup_id="d") == first
            assert listing(store) != [names.CONFIG_NAME]
            clock.advance(10.001)
            q.gc()
            assert listing(store) == [names.CONFIG_NAME]

    def test_racing_sends_of_one_id_create_one_message(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        clients = [vsqs.Queue(store, clock=clock) for _ in range(6)]
        barrier = threading.Barrier(len(clients))
        ids: list[str] = []
        errors: list[BaseException] = []

        def send(queue: vsqs.Queue, i: int) -> None:
            try:
                barrier.wait(timeout=60)
                ids.append(queue.send(f"copy {i}", dedup_id="once", group="g"))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(c, i)) for i, c in enumerate(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        for client in clients:
            client.close()
        assert errors == []
        assert len(ids) == len(clients) and len(set(ids)) == 1
        assert messages_in(store) == ids[:1]

    def test_a_bad_dedup_id_or_group_is_refused_before_anything_is_written(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        before = listing(store)
        sends: list[Callable[[], object]] = [
            lambda: q.send(b"x", dedup_id="has space"),
            lambda: q.send(b"x", dedup_id="x" * 129),
            lambda: q.send(b"x", dedup_id=""),
            lambda: q.send(b"x", dedup_id=7),  # type: ignore[arg-type]
            lambda: q.send(b"x", group="caf\u00e9"),
            lambda: q.send(b"x", group=b"bytes"),  # type: ignore[arg-type]
            lambda: q.send_batch([b"ok", b"ok"], dedup_ids=["one"]),
            lambda: q.send_batch([b"ok", vsqs.Outgoing(b"bad", group="a b")]),
        ]
        for send in sends:
            with pytest.raises(vsqs.InvalidArgument):
                send()
        assert listing(store) == before
        longest = "~" * 128
        assert q.send(b"x", dedup_id=longest, group=longest) == q.send(b"y", dedup_id=longest)


class AttributeTests:
    """Attributes: str names and values, kept with the message wherever it goes."""

    def test_attributes_are_kept_through_receive_extend_and_release(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        with_attributes = q.send(b"body", attributes=ATTRIBUTES)
        without = q.send(b"plain")
        assert [m.attributes for m in q.peek(10)] == [ATTRIBUTES, {}]
        first, plain = q.receive_batch(2, visibility_timeout=5)
        assert (first.id, first.body, first.attributes) == (with_attributes, b"body", ATTRIBUTES)
        assert (plain.id, plain.attributes, plain.group, plain.dedup_id) == (
            without,
            {},
            None,
            None,
        )
        first.attributes["changed"] = "here only"  # a copy: the message is unchanged
        assert first.receipt is not None
        extended = q.extend(first.receipt, 10)
        assert (extended.body, extended.attributes) == (b"body", ATTRIBUTES)
        extended.release()
        again = q.receive()
        assert again is not None and again.receive_count == 2
        assert (again.body, again.attributes) == (b"body", ATTRIBUTES)

    def test_send_batch_gives_attributes_per_batch_and_per_message(self, q: vsqs.Queue) -> None:
        q.send_batch(
            [
                b"batch",
                vsqs.Outgoing(b"own", attributes={"own": "1"}, group="g", dedup_id="d"),
                vsqs.Outgoing(b"group only", group="g"),
            ],
            attributes={"batch": "yes"},
        )
        got = q.receive_batch(10)
        assert [(m.body, m.group, m.attributes, m.dedup_id) for m in got] == [
            (b"batch", None, {"batch": "yes"}, None),
            (b"own", "g", {"own": "1"}, "d"),
            (b"group only", "g", {"batch": "yes"}, None),
        ]

    def test_a_dead_letter_keeps_its_attributes(self, store: vsqs.Store, clock: FakeClock) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            poison = q.send(b"poison", attributes=ATTRIBUTES)
            assert q.receive(visibility_timeout=1) is not None
            clock.advance(1)
            assert q.receive() is None
            with vsqs.Queue(store.sibling("dlq"), clock=clock) as dlq:
                dead = dlq.receive()
                assert dead is not None and dead.dead_lettered is not None
                assert (dead.id, dead.body, dead.attributes) == (poison, b"poison", ATTRIBUTES)

    def test_redrive_keeps_group_and_attributes(self, store: vsqs.Store, clock: FakeClock) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            poison = q.send(b"poison", group="g", attributes=ATTRIBUTES)
            assert q.receive(visibility_timeout=1) is not None
            clock.advance(1)
            assert q.receive() is None
            with vsqs.Queue(store.sibling("dlq"), clock=clock) as dlq:
                assert vsqs.redrive(dlq, q) == 1
            with vsqs.Queue(
                store, clock=clock
            ) as other:  # a fresh view: see tests/test_groups_processes.py
                back = other.receive()
            assert back is not None and back.id == poison
            assert (back.body, back.group, back.attributes) == (b"poison", "g", ATTRIBUTES)

    def test_move_keeps_group_and_attributes(self, store: vsqs.Store, clock: FakeClock) -> None:
        with (
            vsqs.Queue(store, clock=clock) as src,
            vsqs.Queue(store.sibling("dst"), clock=clock) as dst,
        ):
            src.send(b"a1", group="g", attributes=ATTRIBUTES)
            src.send(b"plain", attributes={"k": "v"})
            src.send(b"a2", group="g")
            assert vsqs.move(src, dst) == 3
            got = [(m.body, m.group, m.attributes) for m in dst.receive_batch(10)]
            assert got == [(b"a1", "g", ATTRIBUTES), (b"plain", None, {"k": "v"}), (b"a2", "g", {})]

    def test_attribute_limits_are_refused_before_anything_is_written(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, max_message_size=1000) as q:
            before = listing(store)
            bad: list[object] = [
                {f"k{i}": "v" for i in range(11)},  # 10 at most
                {"": "v"},
                {"a b": "v"},
                {"x" * 257: "v"},
                {"k": 1},
                {1: "v"},
                {"k": "\ud800"},  # not encodable
                ["k", "v"],
            ]
            for attributes in bad:
                with pytest.raises(vsqs.InvalidArgument):
                    q.send(b"x", attributes=attributes)  # type: ignore[arg-type]
                outgoing = vsqs.Outgoing(b"x", attributes=attributes)  # type: ignore[arg-type]
                with pytest.raises(vsqs.InvalidArgument):
                    q.send_batch([b"ok", outgoing])
            with pytest.raises(vsqs.MessageTooLarge, match="with its attributes"):
                q.send(b"b" * 990, attributes={"name": "v" * 7})  # 990 + 4 + 7 > 1000
            assert listing(store) == before
            most = {f"k{i}": "v" for i in range(9)} | {"x" * 256: "é"}
            q.send(b"b" * (1000 - 27 - 256 - 2), attributes=most)  # 1000 bytes in all
            got = q.receive()
            assert got is not None and got.attributes == most

    def test_a_send_is_refused_if_its_stored_message_could_not_be_read(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """Attributes count by their characters against ``max_message_size``;
        stored, they are escaped (a quote takes 2 bytes, a control character
        6). A send whose stored message a receiver would not read is refused,
        nothing written; every send accepted is received, attributes exact."""
        with vsqs.Queue(store, clock=clock, max_message_size=100_000) as q:
            before = listing(store)
            with pytest.raises(vsqs.MessageTooLarge, match="escaped"):
                q.send(b"b" * 30_000, attributes={"quotes": '"' * 69_994})  # 100 000 in all
            assert listing(store) == before
            escaped = {"quotes": '"' * 20_000, "controls": "\x01" * 5_000}
            sent = q.send(b"b" * 70_000, attributes=escaped)  # 95 014 counted, 140 000 stored
            got = q.receive()
            assert got is not None and (got.id, got.attributes) == (sent, escaped)
