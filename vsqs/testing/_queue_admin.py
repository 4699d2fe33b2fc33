"""Part of :class:`~vsqs.testing.QueueTests`:
Reading and keeping a queue: peek, stats, purge, dead letters, config and leftovers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from datetime import UTC, datetime

import pytest

import vsqs
from vsqs import _candidates as candidates
from vsqs import _names as names
from vsqs import _receiver as receiver
from vsqs._place import same_place

from ._clock import FakeClock
from ._suite import failing, listing


class AdminTests:
    """Reading and keeping a queue: peek, stats, purge, dead letters, config and leftovers."""

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
            q.send_batch([b"a", b"b"])  # one bundle: its messages count together
            q.send(b"c")
            calls: list[tuple[int, int | None]] = []
            assert q.purge(progress=lambda done, total: calls.append((done, total))) == 3
            assert len(calls) == 2 and calls[-1] == (3, 3)  # a bundle and a message alone
            stale = names.new_name(store.ms_clock(clock).next_id())
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
            at = datetime.fromtimestamp(int(clock() * 1000) / 1000, UTC)
            origin = vsqs.DeadLettered(q.url, 2, at)
            with vsqs.Queue(dlq_store, clock=clock) as dlq:
                dead = dlq.peek(10)
                assert [(m.id, m.body, m.receive_count) for m in dead] == [(poison, b"poison", 0)]
                assert dead[0].dead_lettered == origin  # where from, how often, when
                # Format-2 readers that predate the record take it for a foreign name.
                foreign = sorted(n for n in dlq_store.list() if names.parse(n) is None)
                assert [names.origin_id(n) for n in foreign] == [poison, None]
                assert foreign[0].endswith(names.ORIGIN_SUFFIX) and foreign[1] == names.CONFIG_NAME
                held = dlq.receive(visibility_timeout=0)
                assert held is not None and held.dead_lettered == origin
                assert vsqs.redrive(dlq, q) == 1  # on this test's clock
            assert [m for m in dlq_store.list() if m != names.CONFIG_NAME] == []  # record too
            back = q.receive()
            assert back is not None and back.id == poison and back.receive_count == 1
            assert back.dead_lettered is None

    def test_a_failed_delete_of_an_origin_record_fails_no_ack_and_no_redrive(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        def is_record(name: str) -> bool:
            return names.origin_id(name) is not None

        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            # one object per message: each ack deletes its own records
            ids = q.send_batch([b"a", b"b", b"c", b"d"], bundle=False)
            assert len(q.receive_batch(10, visibility_timeout=0)) == 4
            assert q.receive_batch(10) == []  # all four dead-lettered, with their records
            dlq_store = store.sibling("dlq")
            with vsqs.Queue(dlq_store, clock=clock) as dlq:
                one, two = dlq.receive_batch(2)
                assert one.dead_lettered is not None and two.dead_lettered is not None
                stray = dlq.send(b"sent to the dead-letter queue itself: no record")
                with failing(dlq_store, "delete", is_record) as failed:
                    one.delete()  # the message is gone: the ack succeeded
                    result = dlq.delete_batch([two])
                    assert (result.deleted, result.stale, result.failed) == ([two.receipt], [], {})
                    assert dlq.consume(lambda message: None, max_messages=1) == 1  # it goes on
                    assert vsqs.redrive(dlq, q) == 2  # the fourth, with its record, and the stray
                assert len(failed) == 4
                assert dlq.stats().ready == 0 and [m.id for m in q.peek(10)] == [ids[3], stray]
                clock.advance(2 * 3600)  # past the grace period
                assert len(dlq.gc()) == 4  # the records left behind
                assert not any(is_record(name) for name in dlq_store.list())

    def test_dead_letter_needs_both_settings(self, store: vsqs.Store) -> None:
        with pytest.raises(vsqs.InvalidArgument):
            vsqs.Queue(store, max_receives=3)
        with pytest.raises(vsqs.InvalidArgument):
            vsqs.Queue(store, dead_letter="dlq")

    def test_redrive_from_a_missing_dead_letter_queue_moves_nothing(
        self, store: vsqs.Store
    ) -> None:
        """Never created, so nothing was dead-lettered: 0, as ``stats()`` counts
        it. A missing queue that the source does not name is a misspelling:
        refused unless ``force``. Neither is created."""
        vsqs.Queue(store, max_receives=1, dead_letter="dlq").close()
        assert vsqs.redrive(store.sibling("dlq"), store) == 0
        with pytest.raises(vsqs.InvalidArgument, match=r"dead-letters to .*dlq, not .*dql"):
            vsqs.redrive(store.sibling("dql"), store)
        assert vsqs.redrive(store.sibling("dql"), store, force=True) == 0
        for missing in ("dlq", "dql"):
            with pytest.raises(vsqs.QueueNotFound):
                vsqs.Queue(store.sibling(missing), create=False)

    def test_redrive_into_a_missing_queue_or_into_itself_fails_clearly(
        self, store: vsqs.Store
    ) -> None:
        with vsqs.Queue(store) as q:
            q.send(b"x")
        with pytest.raises(vsqs.QueueNotFound):
            vsqs.redrive(store, store.sibling("nope"))
        with pytest.raises(vsqs.InvalidArgument, match="into itself"):
            vsqs.redrive(store, store)

    def test_a_queue_is_told_from_another_and_the_probe_leaves_nothing(
        self, store: vsqs.Store
    ) -> None:
        """The guard of moves between queues: two queues are two places, one
        is one; looking writes a ``.new`` probe that is gone afterwards."""
        with vsqs.Queue(store) as q, vsqs.Queue(store.sibling("other")) as other:
            fresh_id = store.ms_clock(q.clock).next_id
            assert not same_place(q.store, other.store, fresh_id)
            assert not same_place(other.store, q.store, fresh_id)
            for place in (store, other.store):
                assert [n for n in listing(place) if n.endswith(names.NEW_SUFFIX)] == []

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
            # A writer's id of now, on the clock names are written on here.
            leftover = names.new_name(store.ms_clock(clock).next_id())
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

    # --------------------------------------------------------------- closing
    def test_every_call_on_a_closed_queue_raises_queue_closed(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        q = vsqs.Queue(store, clock=clock, visibility_timeout=30)
        q.send(b"held")
        held = q.receive()
        assert held is not None and held.receipt is not None
        receipt = held.receipt
        q.close()
        calls: dict[str, Callable[[], object]] = {
            "send": lambda: q.send(b"x"),
            "send_batch": lambda: q.send_batch([b"x", b"y"]),
            "receive": lambda: q.receive(),
            "receive_batch": lambda: q.receive_batch(5, wait=1),
            "delete": held.delete,
            "delete a receipt": lambda: q.delete(receipt),
            "delete_batch": lambda: q.delete_batch([held]),
            "extend": lambda: held.extend(60),
            "release": held.release,
            "release a receipt": lambda: q.release(receipt),
            "peek": lambda: q.peek(),
            "stats": q.stats,
            "purge": q.purge,
            "gc": q.gc,
            "consume": lambda: q.consume(lambda m: None, max_messages=1, idle_timeout=0),
        }
        raised: dict[str, str] = {}
        for what, call in calls.items():
            try:
                call()
            except vsqs.QueueClosed as exc:
                raised[what] = "closed" if "the queue is closed" in str(exc) else str(exc)
            except Exception as exc:
                raised[what] = repr(exc)
            else:
                raised[what] = "nothing raised"
        assert raised == dict.fromkeys(calls, "closed")
        q.close()  # again: nothing happens
        with vsqs.Queue(store, clock=clock) as other:  # and nothing changed
            stats = other.stats()
            assert (stats.ready, stats.in_flight) == (0, 1)
            clock.advance(30)
            again = other.receive()
            assert again is not None and again.id == held.id and again.receive_count == 2

    def test_close_wakes_a_long_poll_under_way(
        self, store: vsqs.Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Without a wake, the poll below would look again only after an hour.
        monkeypatch.setattr(candidates, "STALE_AFTER", 3600.0)
        monkeypatch.setattr(receiver, "POLL_INTERVAL", 3600.0)
        q = vsqs.Queue(store, max_poll_interval=3600)
        q.send(b"first")
        # The next look starts a change feed, where the store has one; no
        # expiry within the hour wakes the poll (its own claim's neither).
        first = q.receive(visibility_timeout=3600)
        assert first is not None
        first.delete()
        waiting = threading.Event()
        real_wait = store.wait_for_change

        def wait_for_change(token: Hashable, timeout: float) -> bool:
            waiting.set()
            return real_wait(token, timeout)

        outcome: list[BaseException | None] = []
        ended = threading.Event()

        def poll() -> None:
            try:
                q.receive(wait=3600)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)
            finally:
                ended.set()

        store.wait_for_change = wait_for_change  # type: ignore[method-assign]
        try:
            thread = threading.Thread(target=poll, daemon=True)
            thread.start()
            # A polled store has no wait to enter: its receiver waits on its own.
            assert store.polled or waiting.wait(60), "the receive never waited"
            closing = threading.Thread(target=q.close, daemon=True)  # it waits for the poll
            closing.start()
            assert ended.wait(60), "close() did not wake the long poll"
            closing.join(60)
        finally:
            del store.wait_for_change
        assert len(outcome) == 1 and isinstance(outcome[0], vsqs.QueueClosed)
