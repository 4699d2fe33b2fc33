"""The receive engine on its own: a :class:`Receiver` on a ``MemoryStore``, no ``Queue``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import pytest

import vsqs
from vsqs import _names as names
from vsqs import _receiver
from vsqs._candidates import STALE_AFTER, skip_bound
from vsqs._envelope import NO_META
from vsqs._outgoing import Prepared
from vsqs._publish import Publisher
from vsqs._receiver import IDLE_AFTER, POLL_INTERVAL, Receiver
from vsqs.testing import FakeClock

from .support.servers import Server

VT_MS = 30_000


class CountingStore(vsqs.MemoryStore):
    """A ``MemoryStore`` that counts its listings."""

    listings = 0

    def list(self, *, prefix: str = "", settle: bool = False) -> Iterable[str]:
        self.listings += 1
        return super().list(prefix=prefix, settle=settle)


def engine(store: vsqs.Store, clock: FakeClock) -> tuple[Receiver, Sends]:
    """A receiver and a publisher of one client, as a ``Queue`` wires them."""
    store.ensure(True)
    ms = names.MsClock(clock)
    receiver = Receiver(store, ms, new_grace_ms=3_600_000)
    return receiver, Sends(Publisher(store, ms, False, receiver.sent, _no_dedup, _format))


def _no_dedup(dedup_id: str, message_id: str, data: bytes, delay_ms: int, publish: object) -> str:
    raise AssertionError("these sends have no deduplication id")


def _format() -> int:
    return names.FORMAT_VERSION


class Sends:
    """A publisher's sends of plain bodies (what ``Queue.send`` prepares)."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher

    def send(self, datas: list[bytes], delay_ms: int) -> list[str]:
        return self._publisher.send([Prepared(d, NO_META) for d in datas], delay_ms)

    def send_batch(self, datas: list[bytes], delay_ms: int) -> list[str]:
        # one object per message: these tests count claims of objects
        return self._publisher.send_batch([Prepared(d, NO_META) for d in datas], delay_ms, False)


def test_claims_are_fifo_and_each_message_is_claimed_once(clock: FakeClock) -> None:
    store = vsqs.MemoryStore()
    receiver, publisher = engine(store, clock)
    sent = publisher.send_batch([b"%d" % i for i in range(20)], 0)
    other, _ = engine(store, clock)  # a second client on the same namespace
    got = receiver.receive(7, VT_MS, 0) + other.receive(100, VT_MS, 0)
    assert [c.id for c in got] == sent
    assert [c.body for c in got] == [b"%d" % i for i in range(20)]
    assert all(c.receive_count == 1 for c in got)
    assert receiver.receive(10, VT_MS, 0) == [] and other.receive(10, VT_MS, 0) == []


def test_a_claim_comes_back_after_its_visibility_timeout_with_its_count(clock: FakeClock) -> None:
    store = vsqs.MemoryStore()
    receiver, publisher = engine(store, clock)
    [sent] = publisher.send([b"x"], 0)
    [first] = receiver.receive(1, 1000, 0)
    assert receiver.receive(1, 1000, 0) == []
    clock.advance(1.0)
    [again] = receiver.receive(1, 1000, 0)  # promoted from the expiry heap, no listing needed
    assert (again.id, again.receive_count) == (sent, 2)
    assert again.name != first.name and not store.list(prefix=first.name)


def test_own_sends_are_candidates_without_another_listing(clock: FakeClock) -> None:
    store = CountingStore()
    receiver, publisher = engine(store, clock)
    publisher.send([b"a"], 0)
    clock.advance(1)  # past YOUNG_MS: the first listing trusts it
    assert len(receiver.receive(1, VT_MS, 0)) == 1
    listed = store.listings
    publisher.send([b"b"], 0)
    [claim] = receiver.receive(1, VT_MS, 0)
    assert claim.body == b"b" and store.listings == listed


def test_a_message_received_too_often_goes_to_the_exhausted_callback(clock: FakeClock) -> None:
    store = vsqs.MemoryStore()
    receiver, publisher = engine(store, clock)
    [sent] = publisher.send([b"poison"], 0)
    exhausted: list[tuple[str, bytes]] = []

    def take(held: str, body: bytes) -> None:
        exhausted.append((held, body))

    for _ in range(2):
        got = receiver.receive(1, 0, 0, max_receives=2, exhausted=take)
        assert [c.id for c in got] == [sent]
    assert receiver.receive(1, 0, 0, max_receives=2, exhausted=take) == []
    [(held, body)] = exhausted
    parsed = names.parse(held)
    assert parsed is not None and (parsed.id, parsed.receive_count) == (sent, 3)
    assert body == b"poison"


def test_moved_and_deleted_names_leave_the_view(clock: FakeClock) -> None:
    store = vsqs.MemoryStore()
    receiver, publisher = engine(store, clock)
    publisher.send_batch([b"a", b"b"], 0)
    clock.advance(1)
    first, second = receiver.receive(2, VT_MS, 0)
    store.delete(first.name)
    receiver.deleted(first.name)
    released = names.next_name(names.parse_receipt(second.name), names.MsClock(clock).now_ms(), 1)
    store.rename(second.name, released)
    receiver.moved(second.name, released, names.MsClock(clock).now_ms())
    assert first.name not in receiver.candidates.pending
    [again] = receiver.receive(1, VT_MS, 0)
    assert again.id == second.id and again.receive_count == 2


def test_the_view_stays_bounded_while_draining() -> None:
    """The expiry heap drops entries of deleted messages (it once kept them all)."""
    store, clock = vsqs.MemoryStore(), FakeClock(4e6)
    receiver, publisher = engine(store, clock)
    publisher.send_batch([b"x"] * 5000, 0)
    for _ in range(5000):
        [claim] = receiver.receive(1, VT_MS, 0)
        store.delete(claim.name)
        receiver.deleted(claim.name)
    assert len(receiver.candidates.pending) == 0
    assert len(receiver.candidates.heap) <= 1024


def test_a_set_stop_event_ends_a_long_poll_without_claiming(clock: FakeClock) -> None:
    store = vsqs.MemoryStore()
    receiver, publisher = engine(store, clock)
    publisher.send([b"x"], 0)
    stop = threading.Event()
    stop.set()
    assert receiver.receive(1, VT_MS, 3600, stop=stop) == []
    assert len(receiver.receive(1, VT_MS, 0)) == 1  # it was left for the next receive


def test_a_long_poll_wakes_for_a_send_of_another_thread() -> None:
    """On the real clock: the poll returns the message sent while it waited,
    well before its wait of an hour (bounded by the test's timeout, not a sleep)."""
    store = vsqs.MemoryStore()
    store.ensure(True)
    ms = names.MsClock(time.time)
    receiver = Receiver(store, ms, 3_600_000)
    publisher = Sends(Publisher(store, ms, False, lambda name, at: None, _no_dedup, _format))
    polling = threading.Event()

    def send_when_polling() -> None:
        polling.wait()
        publisher.send([b"late"], 0)

    sender = threading.Thread(target=send_when_polling, daemon=True)
    sender.start()
    try:
        assert receiver.receive(1, VT_MS, 0) == []  # the first listing is taken
    finally:
        polling.set()
    [claim] = receiver.receive(1, VT_MS, 3600)
    sender.join()
    assert claim.body == b"late"


def test_a_message_another_client_released_is_found_again(clock: FakeClock) -> None:
    """A message released by another client is found again, at the latest
    once the view is STALE_AFTER old."""
    store = CountingStore()
    receiver, publisher = engine(store, clock)
    other, _ = engine(store, clock)
    publisher.send([b"x"], 0)
    clock.advance(1)
    [claim] = other.receive(1, VT_MS, 0)
    assert receiver.receive(1, VT_MS, 0) == []
    store.rename(claim.name, names.next_name(names.parse_receipt(claim.name), 0, 1))
    clock.advance(STALE_AFTER)
    [again] = receiver.receive(1, VT_MS, 0)
    assert again.id == claim.id


@pytest.mark.parametrize(
    ("costly", "bounds"), [(False, [1, 2, 4, 64, 64]), (True, [32, 64, 64, 64, 64])]
)
def test_lost_claims_spread_receivers_as_documented(costly: bool, bounds: list[int]) -> None:
    """docs/format.md: from the second loss in a row (the first where a loss
    costs requests, skipping up to 31 names), twice as far per loss, up to 64."""
    assert [skip_bound(n, costly) for n in (1, 2, 3, 7, 8)] == bounds


# ------------------------------------------------------- idle polling
class PolledStore(vsqs.MemoryStore):
    """A ``MemoryStore`` that behaves as an object store does: no change token."""

    polled = True


def test_an_idle_receiver_of_a_polled_store_looks_less_often_and_wakes_on_a_message(
    clock: FakeClock,
) -> None:
    store = PolledStore()
    store.ensure(True)
    ms = names.MsClock(clock)
    receiver = Receiver(store, ms, 3_600_000, max_poll_interval=1.5)
    publisher = Sends(Publisher(store, ms, False, receiver.sent, _no_dedup, _format))
    assert receiver.poll_interval() == POLL_INTERVAL
    clock.advance(IDLE_AFTER - 0.001)
    assert receiver.poll_interval() == POLL_INTERVAL
    clock.advance(0.001)
    assert receiver.poll_interval() == 1.5
    publisher.send([b"x"], 0)
    clock.advance(1)
    assert len(receiver.receive(1, VT_MS, 0)) == 1
    assert receiver.poll_interval() == POLL_INTERVAL  # something came: fast again
    assert Receiver(store, ms, 0, max_poll_interval=0.05).poll_interval() == 0.05


class LateThread:
    """The receiver's ``time`` module for a thread a busy machine runs late:
    every sleep lasts half a second longer than asked, without real waiting; a
    negative length raises, as ``time.sleep`` does."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        self.now += seconds + 0.5


def test_a_long_poll_that_wakes_past_its_deadline_ends_empty(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the wait after an idle look was computed from a deadline that
    had passed, and ``time.sleep`` refused the negative length (a
    ``ValueError`` out of ``receive`` on a machine at load 9)."""
    store = PolledStore()
    receiver, _ = engine(store, clock)
    late = LateThread()
    monkeypatch.setattr(_receiver, "time", late)
    assert receiver.receive(1, VT_MS, POLL_INTERVAL + 0.6) == []
    assert late.now > POLL_INTERVAL + 0.6


def test_an_idle_receiver_lists_an_s3_queue_at_most_once_per_max_poll_interval(
    s3_server: Server, clock: FakeClock
) -> None:
    """Counted in requests, so a slow machine only makes fewer. A look that
    finds nothing is one LIST: at 0.2 s a 3-second wait lists about 15 times,
    at the maximum of 1 s about 4 (a look at 0, 1, 2 and 3 s), at most 5."""
    options = s3_server.storage_options
    url = s3_server.url()
    with (
        vsqs.Queue(url, storage_options=options, clock=clock, max_poll_interval=1.0) as idle,
        vsqs.Queue(url, storage_options=options) as producer,
    ):
        assert idle.receive() is None  # the first listing
        clock.advance(IDLE_AFTER)  # idle for 10 s by the queue's clock
        requests = idle.store.io.requests  # type: ignore[attr-defined]
        listed = requests["list"]
        assert idle.receive(wait=3.0) is None
        assert requests["list"] - listed <= 5, requests["list"] - listed
        sender = threading.Timer(0.5, producer.send, args=(b"late",))
        sender.start()
        try:
            msg = idle.receive(wait=60)  # found by the next listing after the send
        finally:
            sender.join()
        assert msg is not None and msg.body == b"late"


def test_the_maximum_poll_interval_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, s3_server: Server
) -> None:
    monkeypatch.setenv("VSQS_MAX_POLL_INTERVAL", "-1")
    with pytest.raises(vsqs.InvalidArgument, match="VSQS_MAX_POLL_INTERVAL"):
        vsqs.Queue(s3_server.url(), storage_options=s3_server.storage_options)
    with pytest.raises(vsqs.InvalidArgument, match="max_poll_interval"):
        vsqs.Queue(vsqs.MemoryStore(), max_poll_interval=float("nan"))


def test_an_unreadable_message_is_forgotten_once_its_failures_are_not_in_a_row() -> None:
    """A message another receiver read (or that is gone) stays in this
    receiver's memory of unreadable messages only until its backoff ended
    UNREADABLE_MAX ago; then every receive skips that bookkeeping again."""
    from vsqs._candidates import UNREADABLE_FIRST, UNREADABLE_MAX, Unreadable

    unreadable = Unreadable()
    unreadable.update(["m"], [], now=100.0)
    assert unreadable and unreadable.waiting("m", lambda: 100.0)
    unreadable.update([], ["other"], now=100.0 + UNREADABLE_FIRST + UNREADABLE_MAX - 0.1)
    assert unreadable  # not long enough
    unreadable.update([], ["other"], now=100.0 + UNREADABLE_FIRST + UNREADABLE_MAX + 0.1)
    assert not unreadable
