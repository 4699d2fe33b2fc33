"""Part of :class:`~vsqs.testing.QueueTests`:
Sending and receiving: FIFO, visibility timeouts, delays and long polls.
"""

from __future__ import annotations

import pickle
import threading
import time
from datetime import UTC, datetime

import pytest

import vsqs
from vsqs import _names as names

from ._clock import FakeClock
from ._suite import counting, drop, failing, listing


class FlowTests:
    """Sending and receiving: FIFO, visibility timeouts, delays and long polls."""

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

    def test_a_failed_send_batch_says_which_messages_it_sent(
        self, q: vsqs.Queue, store: vsqs.Store
    ) -> None:
        writes: list[str] = []

        def third_message(name: str) -> bool:
            if names.parse(name) is None:
                return False  # not a message's name (a batch marker)
            writes.append(name)
            return len(writes) == 3

        bodies = [f"m{i}".encode() for i in range(5)]
        with (
            failing(store, "write_new", third_message) as failed,
            pytest.raises(vsqs.StorageError, match="injected") as raised,
        ):
            q.send_batch(bodies, bundle=False)  # bundles: BundleTests
        assert len(failed) == 1
        sent = raised.value.sent
        copy = pickle.loads(pickle.dumps(raised.value))
        assert copy.sent == sent and str(copy) == str(raised.value)
        # Exactly those were sent, in batch order; the failed one was not
        # (where staging failed, none was).
        got = q.receive_batch(10)
        assert [m.id for m in got] == sent
        left = iter(bodies)
        assert all(m.body in left for m in got), "received out of batch order"
        # Staged first, published after (none sent); one after another (the
        # first two); side by side (all but the failed one).
        assert len(sent) in (0, 2, 4)

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

    def test_a_claim_whose_body_cannot_be_read_is_given_back_uncounted(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with (
            vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q,
            vsqs.Queue(store, clock=clock) as other,
        ):
            first, second, third = q.send_batch([b"a", b"b", b"c"], bundle=False)
            with (
                failing(store, "read_limited", lambda name: name.startswith(first)) as failed,
                pytest.raises(vsqs.StorageError, match="injected"),
            ):
                q.receive()  # claimed, but nothing was read: the error is raised
            assert len(failed) == 1
            # Visible again at once, to every client, with the count it had
            # before, under a name it never had.
            assert [(m.id, m.receive_count) for m in other.peek(10)] == [
                (first, 0),
                (second, 0),
                (third, 0),
            ]
            given_back = [p for n in store.list() if (p := names.parse(n)) and p.id == first]
            assert [p.version for p in given_back] == [2]
            clock.advance(1)  # this receiver passes over it for a second
            with failing(store, "read_limited", lambda name: name.startswith(second)):
                got = q.receive_batch(10)
            # What was read is returned: claims made one at a time stop at the
            # failure, claims made side by side read the third too.
            assert [m.id for m in got] in ([first], [first, third])
            rest = other.receive_batch(10)
            assert second in [m.id for m in rest]
            received = sorted((m.id, m.receive_count) for m in got + rest)
            assert received == [(first, 1), (second, 1), (third, 1)]
            assert q.stats().dead_letter == 0  # nothing no caller received

    def test_one_unreadable_message_never_stops_the_others(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """A message whose body can never be read (a bad sector, a store that
        fails one object) is given back uncounted and passed over for a
        second, then two, four...: the messages behind it are received."""
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            bad, good, later = q.send_batch([b"a", b"b", b"c"], bundle=False)
            with failing(store, "read_limited", lambda name: name.startswith(bad)) as failed:
                with pytest.raises(vsqs.StorageError, match="injected"):
                    q.receive()
                assert [m.id for m in q.receive_batch(10)] == [good, later]
                assert q.receive() is None  # passed over, not tried again
                assert len(failed) == 1
                clock.advance(1)  # its first pass-over ends: tried again, and again unread
                with pytest.raises(vsqs.StorageError, match="injected"):
                    q.receive()
                clock.advance(1.5)
                assert q.receive() is None  # a second pass-over, of 2 s
                assert len(failed) == 2
            clock.advance(1)
            again = q.receive()
            assert again is not None
            assert (again.id, again.body, again.receive_count) == (bad, b"a", 1)
            assert q.stats().dead_letter == 0  # failed reads counted no receive

    # -------------------------------------------- names at the format's limits
    def test_a_name_at_the_limits_of_the_format_never_stops_the_queue(
        self, store: vsqs.Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Names dropped into a queue (by hand, another tool, a bug) at the
        limits of the grammar, ahead of two sent messages: one at the last
        version, one a claim would bring to the last (leaving its holder no
        name to release it to), one received 999 999 999 times, one invisible
        until the last ms the grammar spells. Every receive raised
        ``InvalidArgument`` at the first, planning its claim, so the messages
        behind it were never received. Now the first two are passed over,
        with one warning per receiver, the third is received (its count stays
        at the maximum) and the fourth waits for its expiry."""
        old_ms = int(clock() * 1000) - 10_000
        ids = names.IdGenerator()
        last, one_short, counted, forever = (ids.next_id(old_ms) for _ in range(4))
        with vsqs.Queue(store, clock=clock) as q, vsqs.Queue(store, clock=clock) as other:
            drop(
                store,
                names.invisible_name(last, old_ms, 1, names.MAX_VERSION),
                names.invisible_name(one_short, old_ms, 1, names.MAX_VERSION - 1),
                names.invisible_name(counted, old_ms, names.MAX_COUNT, 7),
                names.invisible_name(forever, names.MAX_EXPIRY_MS, 1, 1),
            )
            behind = q.send_batch([b"a", b"b"])
            got = [q.receive(visibility_timeout=5) for _ in range(4)]  # as consume receives
            assert [(m.id, m.receive_count) for m in got if m] == [
                (counted, names.MAX_COUNT),
                (behind[0], 1),
                (behind[1], 1),
            ]
            assert got[0] is not None and got[0].receipt is not None
            assert names.parse_receipt(got[0].receipt).receive_count == names.MAX_COUNT
            clock.advance(5)
            again = other.receive_batch(10)  # claims side by side where renames cost requests
            assert sorted(m.id for m in again) == sorted([counted, *behind])
            assert q.receive() is None and other.receive() is None
            warned = [r.getMessage() for r in caplog.records]
            warned = [m for m in warned if "cannot be received" in m]
            assert len(warned) == 4  # once per receiver and message:
            assert all(sum(i in m for m in warned) == 2 for i in (last, one_short))
            assert q.stats().ready == 2  # left in the queue, where an operator sees them
            clock.advance(30)
            with (
                failing(store, "read_limited", lambda name: name.startswith(counted)),
                pytest.raises(vsqs.StorageError, match="injected"),
            ):
                q.receive()  # given back with the count it had, the maximum
            assert [(m.id, m.receive_count) for m in q.peek(10)][2] == (counted, names.MAX_COUNT)

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
        held, vt = None, 0.3
        while held is None:  # a claim slower than its timeout is skipped: a busy machine
            assert vt < 60, "no claim finished within its visibility timeout"
            held = live.receive(visibility_timeout=vt)
            vt *= 2
        again = live.receive(wait=10 + 10 * vt)
        assert again is not None and again.id == held.id
        assert again.receive_count == held.receive_count + 1

    def test_a_stop_event_ends_a_long_poll_and_claims_nothing(self, live: vsqs.Queue) -> None:
        stop = threading.Event()
        stop.set()
        live.send(b"kept")
        assert live.receive_batch(5, wait=3600, stop=stop) == []  # set before: at once
        msg = live.receive()  # that poll claimed nothing
        assert msg is not None and msg.body == b"kept" and msg.receive_count == 1
        msg.delete()
        stop.clear()
        stopper = threading.Timer(0.2, stop.set)  # set while it waits: it ends within a second
        stopper.start()
        try:
            assert live.receive_batch(5, wait=3600, stop=stop) == []
        finally:
            stopper.cancel()

    def test_a_long_poll_past_messages_it_passes_over_does_not_spin(
        self, store: vsqs.Store
    ) -> None:
        """A message too large to read whose claim expired, and one that can
        never be claimed (its version is the last), both visible: a long poll
        passed over the first and woke at once for it again and again (its
        expired name stayed due), a look at the store every millisecond.
        Now a passed-over message comes back only with the next listing."""
        old_ms = int(time.time() * 1000) - 10_000
        ids = names.IdGenerator()
        huge, last = ids.next_id(old_ms), ids.next_id(old_ms)
        with vsqs.Queue(store, max_message_size=10) as q:
            last_name = names.invisible_name(last, old_ms, 1, names.MAX_VERSION)
            drop(store, huge, last_name, body=b"x" * 99)
            assert q.receive(visibility_timeout=0) is None  # claims the huge one, expired at once
            looks = ("list", "changes", "wait_for_change")
            with counting(store, *looks) as calls:
                assert q.receive(wait=0.5) is None
            # A look on arrival, one per poll interval (0.2 s) where the store is polled.
            assert len(calls) <= 12, calls

    def test_long_poll_times_out_empty(self, live: vsqs.Queue) -> None:
        started = time.monotonic()
        assert live.receive_batch(3, wait=0.3) == []
        assert time.monotonic() - started >= 0.3
