"""The queue-level conformance suite: the whole :class:`vsqs.Queue` API on one store."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import vsqs
from vsqs import _names as names

from ._clock import FakeClock
from ._suite import Suite


def listing(store: vsqs.Store) -> list[str]:
    return sorted(store.list())


class QueueTests(Suite):
    """Every promise of :class:`vsqs.Queue`, on the backend's ``store``.

    Most tests run on a fake clock, with durable and with non-durable sends
    (stores may publish them differently); long polls and the worker helper
    run on the real clock and take a few seconds in all.
    """

    @pytest.fixture(params=[True, False], ids=["durable", "not-durable"])
    def q(
        self, store: vsqs.Store, clock: FakeClock, request: pytest.FixtureRequest
    ) -> Iterator[vsqs.Queue]:
        """A queue on a fake clock; sends durable or not (local stores publish differently)."""
        with vsqs.Queue(store, clock=clock, visibility_timeout=30, durable=request.param) as queue:
            yield queue

    @pytest.fixture
    def live(self, store: vsqs.Store) -> Iterator[vsqs.Queue]:
        """A queue on the real clock, for long polls and the worker helper."""
        with vsqs.Queue(store, visibility_timeout=30) as queue:
            yield queue

    # ---------------------------------------------------------- send/receive
    @pytest.mark.parametrize(
        "body",
        [b"bytes", "text \u00e9", bytearray(b"ba"), memoryview(b"mv"), b"", b"\x00\xff" * 100],
    )
    def test_round_trip_keeps_the_exact_bytes(
        self, q: vsqs.Queue, body: bytes | bytearray | memoryview | str
    ) -> None:
        message_id = q.send(body)
        msg = q.receive()
        assert msg is not None
        expected = body.encode() if isinstance(body, str) else bytes(body)
        assert msg.body == expected and isinstance(msg.body, bytes)
        assert msg.id == message_id and msg.receive_count == 1
        assert q.receive() is None

    def test_receive_is_fifo(self, q: vsqs.Queue) -> None:
        sent = [q.send(f"m{i}") for i in range(50)]
        assert sent == sorted(sent)
        got = [q.receive() for _ in range(50)]
        assert [m.id for m in got if m] == sent

    def test_receive_on_empty_queue_returns_none(self, q: vsqs.Queue) -> None:
        assert q.receive() is None
        assert q.receive_batch(5) == []

    def test_receive_batch_takes_up_to_n_oldest_first(self, q: vsqs.Queue) -> None:
        sent = q.send_batch([b"a", b"b", b"c", b"d", b"e"])
        first = q.receive_batch(3)
        assert [m.id for m in first] == sent[:3]
        rest = q.receive_batch(10)
        assert [m.id for m in rest] == sent[3:]

    def test_send_batch_returns_ids_in_order_and_empty_batch_is_a_no_op(
        self, q: vsqs.Queue
    ) -> None:
        assert q.send_batch([]) == []
        bodies: list[bytes | bytearray | str] = [b"1", "2", bytearray(b"3")]
        ids = q.send_batch(iter(bodies))
        assert ids == sorted(ids) and len(set(ids)) == 3
        assert [m.body for m in q.receive_batch(10)] == [b"1", b"2", b"3"]

    def test_message_metadata(self, q: vsqs.Queue, clock: FakeClock) -> None:
        q.send(b"x")
        msg = q.receive(visibility_timeout=12)
        assert msg is not None
        assert msg.sent_at == datetime.fromtimestamp(int(clock.now * 1000) / 1000, UTC)
        assert msg.visible_at == datetime.fromtimestamp(int(clock.now * 1000 + 12_000) / 1000, UTC)
        assert msg.receipt is not None and names.parse_receipt(msg.receipt).id == msg.id
        assert "receive_count=1" in repr(msg)

    # ------------------------------------------------------------ visibility
    def test_received_message_is_invisible_until_its_timeout(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        q.send(b"x")
        first = q.receive(visibility_timeout=10)
        assert first is not None
        clock.advance(9.9)
        assert q.receive() is None
        clock.advance(0.1)
        again = q.receive()
        assert again is not None and again.id == first.id and again.receive_count == 2

    def test_default_visibility_timeout_comes_from_config(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, visibility_timeout=5) as queue:
            queue.send(b"x")
            assert queue.receive() is not None
            clock.advance(5)
            assert queue.receive() is not None

    def test_expired_message_comes_back_in_fifo_position(
        self, q: vsqs.Queue, clock: FakeClock
    ) -> None:
        a, b, c = q.send_batch([b"a", b"b", b"c"])
        held = q.receive(visibility_timeout=5)
        assert held is not None and held.id == a
        clock.advance(6)
        assert [m.id for m in q.receive_batch(3)] == [a, b, c]

    def test_visibility_seen_by_a_second_client(self, store: vsqs.Store, clock: FakeClock) -> None:
        with vsqs.Queue(store, clock=clock) as one, vsqs.Queue(store, clock=clock) as two:
            one.send(b"x")
            msg = one.receive(visibility_timeout=3)
            assert msg is not None
            assert two.receive() is None
            clock.advance(3)
            other = two.receive()
            assert other is not None and other.id == msg.id
            with pytest.raises(vsqs.ReceiptExpired):
                msg.delete()
            other.delete()
            assert listing(store) == [names.CONFIG_NAME]

    # ---------------------------------------------------------------- delete
    def test_delete_removes_the_message(self, q: vsqs.Queue, store: vsqs.Store) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        msg.delete()
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

    # --------------------------------------------------------------- delayed
    def test_delayed_send(self, q: vsqs.Queue, clock: FakeClock) -> None:
        late = q.send(b"late", delay=10)
        now = q.send(b"now")
        assert q.stats().delayed == 1
        first = q.receive()
        assert first is not None and first.id == now
        assert q.receive() is None
        clock.advance(10)
        msg = q.receive()
        assert msg is not None and msg.id == late and msg.receive_count == 1

    def test_delayed_send_batch(self, q: vsqs.Queue, clock: FakeClock) -> None:
        q.send_batch([b"a", b"b"], delay=2)
        assert q.receive() is None
        clock.advance(2)
        assert [m.body for m in q.receive_batch(5)] == [b"a", b"b"]

    # ------------------------------------------------------------ inspection
    def test_peek_changes_nothing(self, q: vsqs.Queue, store: vsqs.Store) -> None:
        ids = q.send_batch([b"a", b"b", b"c"])
        held = q.receive()
        assert held is not None
        before = listing(store)
        peeked = q.peek(10)
        assert [m.id for m in peeked] == ids[1:]
        assert all(m.receipt is None for m in peeked)
        assert listing(store) == before
        with pytest.raises(vsqs.InvalidArgument):
            peeked[0].delete()
        assert [m.id for m in q.peek(1)] == ids[1:2]

    def test_stats(self, q: vsqs.Queue, clock: FakeClock) -> None:
        empty = q.stats()
        assert (empty.ready, empty.in_flight, empty.delayed, empty.writing) == (0, 0, 0, 0)
        assert empty.oldest_ready_age is None and empty.next_visible_in is None
        q.send_batch([b"a", b"b", b"c"])
        clock.advance(2)
        q.send(b"d", delay=30)
        q.receive(visibility_timeout=10)
        stats = q.stats()
        assert (stats.ready, stats.in_flight, stats.delayed) == (2, 1, 1)
        assert stats.oldest_ready_age == pytest.approx(2.0)
        assert stats.next_visible_in == pytest.approx(10.0)

    def test_stats_shows_in_flight_expiry_and_dead_letter_depth(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            stats = q.stats()
            assert stats.dead_letter == 0 and stats.in_flight_expires_in is None
            with pytest.raises(vsqs.QueueNotFound):  # stats did not create it
                vsqs.Queue(store.sibling("dlq"), create=False)
            q.send_batch([b"poison", b"held", b"late"])
            q.send(b"delayed", delay=5)
            assert q.receive(visibility_timeout=1) is not None
            clock.advance(1)
            held = q.receive(visibility_timeout=20)  # dead-letters the poison first
            assert held is not None and held.body == b"held"
            stats = q.stats()
            assert (stats.ready, stats.in_flight, stats.delayed) == (1, 1, 1)
            assert stats.dead_letter == 1
            assert stats.in_flight_expires_in == pytest.approx(20.0)
            assert stats.next_visible_in == pytest.approx(4.0)
            assert stats.as_dict()["dead_letter"] == 1

    def test_purge_and_gc_report_progress(self, store: vsqs.Store, clock: FakeClock) -> None:
        with vsqs.Queue(store, clock=clock, new_grace=60) as q:
            q.send_batch([b"a", b"b", b"c"])
            calls: list[tuple[int, int | None]] = []
            assert q.purge(progress=lambda done, total: calls.append((done, total))) == 3
            assert calls == [(1, 3), (2, 3), (3, 3)]
            stale = names.new_name(names.MsClock(clock).next_id())
            store.write_new(stale, b"half written", fsync=False)
            clock.advance(61)
            calls.clear()
            assert q.gc(progress=lambda done, total: calls.append((done, total))) == [stale]
            assert calls == [(1, 1)]

    def test_purge_removes_every_message_but_not_foreign_objects(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        store.write_new("notes.txt", b"mine", fsync=False)
        q.send_batch([b"a", b"b"])
        q.send(b"c", delay=100)
        held = q.receive()
        assert held is not None
        assert q.purge() == 3
        assert listing(store) == sorted([names.CONFIG_NAME, "notes.txt"])
        with pytest.raises(vsqs.ReceiptExpired):
            held.delete()
        assert q.receive() is None

    # ------------------------------------------------------------ dead letter
    def test_dead_letter_after_max_receives_and_redrive(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=2, dead_letter="dlq") as q:
            poison = q.send(b"poison")
            for attempt in (1, 2):
                msg = q.receive(visibility_timeout=1)
                assert msg is not None and (msg.id, msg.receive_count) == (poison, attempt)
                clock.advance(1)
            fresh = q.send(b"fresh")
            got = q.receive_batch(10)
            assert [m.id for m in got] == [fresh]  # poison went to the dead-letter queue
            got[0].delete()
            dlq_store = store.sibling("dlq")
            with vsqs.Queue(dlq_store, clock=clock) as dlq:
                dead = dlq.peek(10)
                assert [(m.id, m.body, m.receive_count) for m in dead] == [(poison, b"poison", 0)]
            assert vsqs.redrive(dlq_store, store) == 1
            assert [m for m in dlq_store.list() if names.parse(m)] == []
            back = q.receive()
            assert back is not None and back.id == poison and back.receive_count == 1

    def test_dead_letter_needs_both_settings(self, store: vsqs.Store) -> None:
        with pytest.raises(vsqs.InvalidArgument):
            vsqs.Queue(store, max_receives=3)
        with pytest.raises(vsqs.InvalidArgument):
            vsqs.Queue(store, dead_letter="dlq")

    def test_redrive_of_a_missing_queue_fails_clearly(self, store: vsqs.Store) -> None:
        vsqs.Queue(store).close()
        with pytest.raises(vsqs.QueueNotFound):
            vsqs.redrive(store.sibling("nope"), store)

    # ----------------------------------------------------------------- config
    def test_config_is_written_once_and_agreed_on(self, store: vsqs.Store) -> None:
        vsqs.Queue(store, visibility_timeout=12).close()
        with vsqs.Queue(store) as again:
            assert again.config.visibility_timeout == 12
        vsqs.Queue(store, visibility_timeout=12).close()
        with pytest.raises(vsqs.QueueConfigError):
            vsqs.Queue(store, visibility_timeout=13)

    def test_open_without_create(self, store: vsqs.Store) -> None:
        with pytest.raises(vsqs.QueueNotFound):
            vsqs.Queue(store, create=False)
        vsqs.Queue(store).close()
        vsqs.Queue(store, create=False).close()

    def test_unreadable_or_future_config_is_refused(self, store: vsqs.Store) -> None:
        store.ensure(True)
        store.write_new(names.CONFIG_NAME, b'{"format": 99}', fsync=False)
        with pytest.raises(vsqs.QueueConfigError, match="format 99"):
            vsqs.Queue(store)
        store.delete(names.CONFIG_NAME)
        store.write_new(names.CONFIG_NAME, b"not json", fsync=False)
        with pytest.raises(vsqs.QueueConfigError, match="unreadable"):
            vsqs.Queue(store)

    # ------------------------------------------------------------- leftovers
    def test_stale_new_leftovers_are_collected_foreign_names_never_touched(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, new_grace=60) as q:
            leftover = names.new_name(names.id_generator(clock).next_id(int(clock.now * 1000)))
            foreign = ["notes.txt", "1234", "x" * names.ID_LEN, leftover[:-4] + ".old", "a.new"]
            store.write_new(leftover, b"half a mess", fsync=False)
            for name in foreign:
                store.write_new(name, b"not ours", fsync=False)
            assert q.receive() is None
            assert q.stats().writing == 1
            assert q.gc() == []
            clock.advance(61)
            assert q.gc() == [leftover]
            assert listing(store) == sorted([names.CONFIG_NAME, *foreign])
            q.send(b"real")
            msg = q.receive()
            assert msg is not None and msg.body == b"real"
            msg.delete()
            assert q.purge() == 0
            assert listing(store) == sorted([names.CONFIG_NAME, *foreign])

    # ------------------------------------------------------------- long poll
    def test_long_poll_wakes_when_a_message_arrives(self, live: vsqs.Queue) -> None:
        sender = threading.Timer(0.2, live.send, args=(b"late",))
        sender.start()
        try:
            started = time.monotonic()
            msg = live.receive(wait=10)
            assert msg is not None and msg.body == b"late"
            assert time.monotonic() - started < 9  # woke on arrival, not at the deadline
        finally:
            sender.cancel()

    def test_threads_long_polling_one_queue_each_get_distinct_messages(
        self, live: vsqs.Queue
    ) -> None:
        got: list[bytes] = []
        errors: list[BaseException] = []

        def poll() -> None:
            try:
                while (msg := live.receive(wait=2)) is not None:
                    got.append(msg.body)
                    msg.delete()
            except BaseException as exc:
                errors.append(exc)

        pollers = [threading.Thread(target=poll) for _ in range(6)]
        for thread in pollers:
            thread.start()
        time.sleep(0.2)  # all of them waiting
        bodies = [f"m{i}".encode() for i in range(30)]
        for body in bodies:
            live.send(body)
        for thread in pollers:
            thread.join(timeout=60)
        assert errors == []
        assert sorted(got) == sorted(bodies)

    def test_long_poll_returns_an_expired_message_without_a_new_event(
        self, live: vsqs.Queue
    ) -> None:
        live.send(b"x")
        held = live.receive(visibility_timeout=0.3)
        assert held is not None
        again = live.receive(wait=10)
        assert again is not None and again.id == held.id and again.receive_count == 2

    def test_long_poll_times_out_empty(self, live: vsqs.Queue) -> None:
        started = time.monotonic()
        assert live.receive_batch(3, wait=0.3) == []
        assert time.monotonic() - started >= 0.3

    # ---------------------------------------------------------------- worker
    def test_consume_deletes_on_success_and_releases_on_error(self, live: vsqs.Queue) -> None:
        live.send_batch([b"ok", b"fail-once", b"ok2"])
        attempts: dict[bytes, int] = {}

        def handler(msg: vsqs.Message) -> None:
            attempts[msg.body] = attempts.get(msg.body, 0) + 1
            if msg.body == b"fail-once" and msg.receive_count == 1:
                raise RuntimeError("boom")

        assert live.consume(handler, idle_timeout=0.5) == 3
        assert attempts == {b"ok": 1, b"fail-once": 2, b"ok2": 1}
        stats = live.stats()
        assert (stats.ready, stats.in_flight) == (0, 0)

    def test_consume_heartbeat_keeps_a_slow_message_hidden(
        self, live: vsqs.Queue, store: vsqs.Store
    ) -> None:
        live.send(b"slow")
        stolen: list[vsqs.Message] = []

        def handler(msg: vsqs.Message) -> None:
            with vsqs.Queue(store) as other:
                deadline = time.monotonic() + 1.2  # four visibility timeouts
                while time.monotonic() < deadline:
                    got = other.receive(wait=0.1)
                    if got is not None:
                        stolen.append(got)

        assert live.consume(handler, visibility_timeout=0.3, max_messages=1) == 1
        assert stolen == []
        assert live.stats().in_flight == 0 and live.receive() is None

    def test_consume_stops_on_event(self, live: vsqs.Queue) -> None:
        stop = threading.Event()
        stop.set()
        live.send(b"x")
        assert live.consume(lambda m: None, stop=stop) == 0
        assert live.stats().ready == 1

    # -------------------------------------------------------------- bad input
    @pytest.mark.parametrize(
        "receipt",
        [
            "..",
            "../x",
            "/etc/passwd",
            "a/b",
            "",
            names.CONFIG_NAME,
            "1750000000000-0000-0123456789abcdef",  # a ready name is no receipt
            "1750000000000-0000-0123456789abcdef.new",
            "1750000000000-0000-0123456789abcdef.1750000000000.0",  # never received
            "1750000000000-0000-0123456789abcdef.1750000000000.1/../x",
            "1750000000000-0000-0123456789ABCDEF.1750000000000.1",
            123,
            None,
            b"1750000000000-0000-0123456789abcdef.1750000000000.1",
        ],
    )
    def test_invalid_receipts_are_refused_before_storage(
        self, q: vsqs.Queue, store: vsqs.Store, receipt: object
    ) -> None:
        q.send(b"x")
        before = listing(store)
        operations: list[Callable[[Any], object]] = [q.delete, lambda r: q.extend(r, 5), q.release]
        for operation in operations:
            with pytest.raises(vsqs.InvalidReceipt):
                operation(receipt)
        assert listing(store) == before

    @pytest.mark.parametrize("tampered", ["../x", "/etc/passwd", "vsqs.json", 7])
    def test_a_tampered_message_receipt_is_refused(
        self, q: vsqs.Queue, store: vsqs.Store, tampered: object
    ) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        before = listing(store)
        msg.receipt = tampered  # type: ignore[assignment]
        for operation in (msg.delete, lambda: msg.extend(5), msg.release):
            with pytest.raises(vsqs.InvalidReceipt):
                operation()
        assert listing(store) == before

    @pytest.mark.parametrize("body", [None, 1, 1.5, ["a"], {"a": 1}, object()])
    def test_non_bytes_bodies_are_refused(
        self, q: vsqs.Queue, store: vsqs.Store, body: object
    ) -> None:
        before = listing(store)
        with pytest.raises(vsqs.InvalidBody):
            q.send(body)  # type: ignore[arg-type]
        with pytest.raises(vsqs.InvalidBody):
            q.send_batch([b"fine", body])  # type: ignore[list-item]
        assert listing(store) == before

    @pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, "5", True, None, 10**12])
    def test_bad_durations_are_refused(
        self, q: vsqs.Queue, store: vsqs.Store, value: object
    ) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        before = listing(store)
        calls: list[Callable[[], object]] = [
            lambda: q.send(b"y", delay=value),  # type: ignore[arg-type]
            lambda: q.receive(visibility_timeout=value),  # type: ignore[arg-type]
            lambda: q.receive(wait=value),  # type: ignore[arg-type]
            lambda: msg.extend(value),  # type: ignore[arg-type]
            lambda: msg.release(delay=value),  # type: ignore[arg-type]
        ]
        for call in calls:
            if value is None and call is calls[1]:
                continue  # visibility_timeout=None means the queue default
            with pytest.raises(vsqs.InvalidArgument):
                call()
        assert listing(store) == before

    @pytest.mark.parametrize("count", [0, -1, True, 1.0, "3"])
    def test_bad_counts_are_refused(self, q: vsqs.Queue, count: object) -> None:
        with pytest.raises(vsqs.InvalidArgument):
            q.receive_batch(count)  # type: ignore[arg-type]
        with pytest.raises(vsqs.InvalidArgument):
            q.peek(count)  # type: ignore[arg-type]

    @pytest.mark.parametrize("name", ["..", "a/b", "/abs", "", ".hidden", "x" * 200, 5])
    def test_bad_dead_letter_names_are_refused(self, store: vsqs.Store, name: object) -> None:
        with pytest.raises(vsqs.InvalidQueueName):
            store.sibling(name)  # type: ignore[arg-type]

    def test_message_of_another_queue_is_refused(self, q: vsqs.Queue, store: vsqs.Store) -> None:
        with vsqs.Queue(store.sibling("other")) as other:
            other.send(b"x")
            msg = other.receive()
            assert msg is not None
            with pytest.raises(vsqs.InvalidArgument):
                q.delete(msg)
            msg.delete()
