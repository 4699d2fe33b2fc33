"""Clock skew between clients sharing a queue.

Every expiry in a name is written by the clock of the client that writes the
name (the claimer, extender, releaser or delayed sender) and judged by the
clock of the client that reads it; ids carry the sender's clock; ``.new``
leftovers are aged by their id, on the collector's clock. On directories and
a ``MemoryStore`` vsqs corrects none of this. So every rule below moves by
exactly the skew δ between the two clocks involved, and these tests pin each
one at its edge. Object stores write and judge names on the store's clock,
as each client measures it (tests/test_object_clocks.py); here only what
they keep of the rules is pinned.

Each client gets its own injected clock: a shared true time (whole ms, moved
by hand) plus that host's fixed skew. Two (or three) ``vsqs.Queue`` clients
share one storage: a local directory (with and without an ``inotify`` feed),
a ``vsqs.MemoryStore`` and ``memory://`` (the object-store protocol). Every
edge is checked on both sides, the millisecond before and the millisecond it
moves, so a rule off by one ms (or one that silently corrected the skew)
fails. No test sleeps.

Two tests script a store's legal behaviour at a point where the protocol is
sensitive to skew: a listing that races a producer and misses its older
message (POSIX leaves entries created during ``readdir`` unspecified), and a
holder's ack landing between a skewed claimer's copy and its delete on an
object store (whose ack reads ``time.time()``, patched to the holder's clock).
The probe of the store's clock runs on moto with this host's ``time.time()``
patched 30 s back, as there is no other seam for it. A clock outside
the 13-digit ms range is refused rather than issuing a name no one reads.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores import _object, _object_io, _probe
from vsqs.stores._object import ObjectStore
from vsqs.stores._registry import open_store

from .support.backends import Place, params, select
from .support.clocks import START_MS, VT_MS, HostClock, TrueTime
from .support.faulty_io import Interleave
from .support.servers import Server

# The documented constant (format.md), pinned here so that a change of it
# fails the tests that state the bounds built on it.
YOUNG_MS = 50


class Shared:
    """One queue's storage; :meth:`client` opens one more client on it (a host)."""

    def __init__(self, place: Place) -> None:
        self.place = place

    def client(self, clock: HostClock, **options: Any) -> vsqs.Queue:
        return self.place.queue(clock=clock, visibility_timeout=VT_MS / 1000, **options)

    def names(self) -> list[str]:
        """The queue's message names now, from a fresh listing."""
        return [n for n in self.place.names() if n != names.CONFIG_NAME]


@pytest.fixture(params=params(select(in_process=True, object_store=False)))
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shared]:
    """A queue on every backend in this process whose names are on the hosts'
    clocks: a local directory (with and without an ``inotify`` feed) and a
    ``MemoryStore``."""
    place = request.param.place(request, tmp_path)
    try:
        yield Shared(place)
    finally:
        place.close()


def test_the_injected_clocks_are_exact_to_the_ms() -> None:
    """The edges below are exact only if ``clock() * 1000`` gives back the ms."""
    for ms in range(START_MS - 60_000, START_MS + 60_000):
        assert int(ms / 1000 * 1000) == ms == math.ceil(ms / 1000 * 1000)


# ------------------------------------------------------------------ holds
@pytest.mark.parametrize(
    ("holder_skew_ms", "reader_skew_ms", "free_after_ms"),
    [(0, 5000, 5000), (0, -5000, 15_000), (-2500, 2500, 5000), (0, 12_000, 0)],
    ids=["reader-ahead", "reader-behind", "both-off", "ahead-by-more-than-vt"],
)
def test_a_held_message_is_free_for_a_reader_vt_minus_its_skew_after_the_claim(
    shared: Shared, holder_skew_ms: int, reader_skew_ms: int, free_after_ms: int
) -> None:
    """A claim at true time t with visibility timeout vt is re-claimable by a
    reader whose clock runs δ ahead of the holder's from true time t + vt - δ
    on, and not a millisecond before: early by δ, late by |δ| for a reader
    behind, and at once when δ >= vt. Only the difference of the clocks counts."""
    true = TrueTime()
    holder_clock, reader_clock = true.host(holder_skew_ms), true.host(reader_skew_ms)
    holder, reader = shared.client(holder_clock), shared.client(reader_clock)
    holder.send(b"m")
    msg = holder.receive()
    assert msg is not None
    assert names.parse_receipt(msg.receipt).expiry_ms == holder_clock.ms + VT_MS  # its own clock
    if free_after_ms > 0:
        assert reader.receive() is None  # lists the hold: it becomes due by the reader's clock
        true.advance(free_after_ms - 1)
        assert reader.receive() is None
        assert shared.client(reader_clock).receive() is None  # a fresh listing agrees
        true.advance(1)
    again = reader.receive()
    assert again is not None and again.id == msg.id and again.receive_count == 2
    assert shared.names() == [again.receipt]
    with pytest.raises(vsqs.ReceiptExpired):
        msg.delete()
    assert shared.names() == [again.receipt]


def test_a_lagging_holder_keeps_its_message_vt_minus_skew_after_each_extend(
    shared: Shared,
) -> None:
    """A holder whose clock is 5 s behind a reader's is protected for vt - 5 s
    after every claim or extend. An extend the reader's clock finds too late
    still wins if nobody claimed in between, and protects it again."""
    true = TrueTime()
    holder, reader = shared.client(true.host(-5000)), shared.client(true.host(0))
    holder.send(b"m")
    msg = holder.receive()
    assert msg is not None
    true.advance(4000)  # true 4 s
    msg.extend(VT_MS / 1000)  # free for the reader from true 4 + 10 - 5 = 9 s
    true.advance(4999)
    assert reader.receive() is None
    assert shared.client(true.host(0)).receive() is None
    true.advance(501)  # true 9.5 s: the reader's clock says expired, the holder's 4.5 s left
    msg.extend(VT_MS / 1000)  # nobody claimed: the rename proves the receipt current
    assert shared.names() == [msg.receipt]
    true.advance(4999)  # true 14.499 s
    assert reader.receive() is None
    true.advance(1)
    taken = reader.receive()
    assert taken is not None and taken.id == msg.id and taken.receive_count == 2


def test_a_lagging_holders_stale_receipt_never_touches_the_new_holders_message(
    shared: Shared,
) -> None:
    """Taken by a reader 5 s ahead, the message is gone for its first holder,
    whose own clock still gives it 5 s: its extend, release and delete (by
    message or by receipt) raise ``ReceiptExpired`` and change nothing."""
    true = TrueTime()
    holder, reader = shared.client(true.host(-5000)), shared.client(true.host(0))
    holder.send(b"m")
    msg = holder.receive()
    assert msg is not None
    receipt = msg.receipt
    true.advance(VT_MS - 5000)
    taken = reader.receive()
    assert taken is not None and taken.id == msg.id
    for stale in (
        lambda: msg.extend(VT_MS / 1000),
        lambda: msg.release(),
        lambda: msg.release(delay=1),
        msg.delete,
        lambda: holder.delete(receipt),
        lambda: holder.extend(receipt, 60),
    ):
        with pytest.raises(vsqs.ReceiptExpired):
            stale()
        assert shared.names() == [taken.receipt]
    taken.delete()
    assert shared.names() == []


# ------------------------------------------------------- delays, releases
@pytest.mark.parametrize(
    ("sender_skew_ms", "reader_skew_ms", "visible_after_ms"),
    [(-5000, 0, 5000), (5000, 0, 15_000), (0, 5000, 5000), (-12_000, 0, 0)],
    ids=["sender-behind", "sender-ahead", "reader-ahead", "behind-by-more-than-the-delay"],
)
def test_a_delayed_send_becomes_visible_by_the_readers_clock(
    shared: Shared, sender_skew_ms: int, reader_skew_ms: int, visible_after_ms: int
) -> None:
    """``send(delay=d)`` at true time t is visible to a reader whose clock runs
    δ ahead of the sender's from true time t + d - δ on, and not a ms before."""
    true = TrueTime()
    sender, reader = (
        shared.client(true.host(sender_skew_ms)),
        shared.client(true.host(reader_skew_ms)),
    )
    message_id = sender.send(b"later", delay=10)
    if visible_after_ms > 0:
        assert reader.receive() is None
        true.advance(visible_after_ms - 1)
        assert reader.receive() is None
        true.advance(1)
    msg = reader.receive()
    assert msg is not None and msg.id == message_id and msg.receive_count == 1


@pytest.mark.parametrize(
    ("holder_skew_ms", "delay_ms", "visible_after_ms"),
    [(5000, 0, 5000), (5000, 3000, 8000), (-2000, 3000, 1000), (-5000, 0, 0)],
    ids=["ahead-at-once", "ahead-delayed", "behind-delayed", "behind-at-once"],
)
def test_a_release_becomes_visible_by_the_readers_clock(
    shared: Shared, holder_skew_ms: int, delay_ms: int, visible_after_ms: int
) -> None:
    """``release(delay=d)`` at true time t is visible to a reader whose clock
    runs δ ahead of the releaser's from t + d - δ on: a release "at once" by
    a releaser whose clock is ahead hides the message from others for δ."""
    true = TrueTime()
    holder, reader = shared.client(true.host(holder_skew_ms)), shared.client(true.host(0))
    holder.send(b"m")
    msg = holder.receive()
    assert msg is not None
    assert reader.receive() is None
    msg.release(delay=delay_ms / 1000)
    if visible_after_ms > 0:
        assert reader.receive() is None
        true.advance(visible_after_ms - 1)
        assert reader.receive() is None
        assert shared.client(true.host(0)).receive() is None
        true.advance(1)
    again = reader.receive()
    assert again is not None and again.id == msg.id and again.receive_count == 2


# ------------------------------------------------------------------- FIFO
def test_first_deliveries_follow_each_producers_clock(shared: Shared) -> None:
    """Ids carry the sender's clock, so across producers first deliveries
    follow the clocks, not true time: a producer 5 s behind overtakes one that
    sent earlier. Each producer's own order holds whatever the skew."""
    true = TrueTime()
    on_time, behind = shared.client(true.host(0)), shared.client(true.host(-5000))
    for i in range(3):  # interleaved in true time: on_time first each round
        on_time.send(f"on-time {i}")
        true.advance(1)
        behind.send(f"behind {i}")
        true.advance(1)
    true.advance(1000)
    consumer = shared.client(true.host(0))
    got = []
    while (msg := consumer.receive()) is not None:
        got.append(msg.body.decode())
        msg.delete()
    assert got == [f"behind {i}" for i in range(3)] + [f"on-time {i}" for i in range(3)]


def test_a_message_from_a_producer_ahead_is_received_at_once(shared: Shared) -> None:
    """A producer 5 s ahead writes ids that look 5 s young to the consumer.
    The young-name rule then costs one more listing within the same receive,
    never a wait for the id to age."""
    true = TrueTime()
    producer, consumer = shared.client(true.host(5000)), shared.client(true.host(0))
    for body in (b"first", b"second"):  # a fresh consumer, then one that listed before
        message_id = producer.send(body)
        msg = consumer.receive()
        assert msg is not None and msg.id == message_id and msg.body == body
        msg.delete()


class RacingListing(vsqs.MemoryStore):
    """A ``MemoryStore`` whose next listing races a producer as a directory
    listing may: ``during()`` publishes while the listing runs, and of what it
    published, the names it returns are missing from this listing."""

    during: Callable[[], list[str]] | None = None

    def list(self, *, prefix: str = "", settle: bool = False) -> list[str]:
        if self.during is None:
            return super().list(prefix=prefix)
        during, self.during = self.during, None
        before = set(super().list(prefix=prefix))
        missed = set(during())
        return [n for n in super().list(prefix=prefix) if n in before or n not in missed]


@pytest.mark.parametrize(
    ("producer_lag_ms", "in_order"),
    [(YOUNG_MS, True), (YOUNG_MS + 1, False), (-5000, True)],
    ids=["lags-50ms", "lags-51ms", "runs-ahead"],
)
def test_one_producers_order_survives_a_racing_listing_unless_it_lags_over_young_ms(
    producer_lag_ms: int, in_order: bool
) -> None:
    """A listing that shows a producer's newer message but missed its older
    one (both published while it ran) must not deliver the newer first. The
    50 ms young-name rule catches it as long as the producer's clock is at
    most ``YOUNG_MS`` behind the consumer's; a producer ahead is harmless.
    One ms further behind, the newer message is delivered first."""
    true = TrueTime()
    store = RacingListing()
    with (
        vsqs.Queue(store, clock=true.host(-producer_lag_ms)) as producer,
        vsqs.Queue(store, clock=true.host(0)) as consumer,
    ):

        def publish_both() -> list[str]:
            older = producer.send(b"older")
            producer.send(b"newer")
            return [older]  # this listing misses the older one

        store.during = publish_both
        got = []
        for _ in range(4):
            if (msg := consumer.receive()) is not None:
                got.append(msg.body)
                msg.delete()
        assert store.during is None  # the race happened
    assert got == ([b"older", b"newer"] if in_order else [b"newer", b"older"])


# -------------------------------------------------------------- leftovers
@pytest.mark.parametrize(
    ("writer_skew_ms", "collector_skew_ms", "kept_for_ms"),
    [(0, 5000, 5001), (0, -5000, 15_001), (-11_000, 0, 0)],
    ids=["collector-ahead", "collector-behind", "writer-behind-by-more-than-the-grace"],
)
def test_a_leftover_is_aged_by_its_id_on_the_collectors_clock_never_by_its_mtime(
    tmp_path: Path, writer_skew_ms: int, collector_skew_ms: int, kept_for_ms: int
) -> None:
    """A ``.new`` written at true time t is collected by a client whose clock
    runs δ ahead of the writer's once its id is older than the grace period
    by the collector's clock, from t + grace - δ + 1 ms on: δ early. The file's
    mtime plays no part. A writer behind by more than the grace has its sends
    under way collected at once (its ``send`` then fails). Local only: the
    other stores create atomically and never leave a ``.new``."""
    true, path = TrueTime(), tmp_path / "q"
    writer_clock, collector_clock = true.host(writer_skew_ms), true.host(collector_skew_ms)
    vsqs.Queue(str(path), clock=writer_clock).close()
    leftover = names.new_name(names.id_generator(writer_clock).next_id(writer_clock.ms))
    (path / leftover).write_bytes(b"half a mess")
    os.utime(path / leftover, (0, 0))  # an mtime of 1970 would be stale at once
    with vsqs.Queue(str(path), clock=collector_clock, new_grace=10) as collector:
        if kept_for_ms > 0:
            true.advance(kept_for_ms - 1)
            assert collector.receive() is None  # a listing collects stale leftovers too
            assert collector.gc() == []
            assert (path / leftover).exists()
            true.advance(1)
        assert collector.gc() == [leftover]
    assert not (path / leftover).exists()


# ------------------------------------------------------- absurd clocks
@pytest.mark.parametrize("seconds", [-1.0, 1e11], ids=["before-1970", "after-2286"])
def test_a_clock_outside_the_id_range_is_refused_instead_of_losing_the_send(
    seconds: float,
) -> None:
    """A send either returns and is delivered, or raises."""
    store = vsqs.MemoryStore()
    vsqs.Queue(store).close()  # created on a sane clock
    with vsqs.Queue(store, clock=lambda: seconds) as q, pytest.raises(vsqs.VsqsError):
        q.send(b"m")
    assert list(store.list()) == [names.CONFIG_NAME]


# ------------------------------------------------------- object stores
@pytest.mark.parametrize("skew_ms", [YOUNG_MS, 5_000, VT_MS - 1], ids=["50ms", "5s", "vt-1ms"])
def test_an_ack_racing_a_claim_from_a_host_ahead_is_refused_at_any_skew(
    memory_server: Server, skew_ms: int
) -> None:
    """A host ``skew_ms`` ahead claims a message its holder is acking: the ack
    lands between the claimer's copy and its delete. An ack commits with the
    exclusive create of the same marker a claim commits with, so whatever the
    skew exactly one of the two wins: the ack is refused and the claimer
    holds the message (format 1 acked with one plain ``DELETE`` far from the
    expiry, and lost this race beyond 5 s of skew)."""
    true = TrueTime()
    acked: list[bool] = []

    def ack() -> None:
        try:
            msg.delete()
        except vsqs.ReceiptExpired:
            acked.append(False)
        else:
            acked.append(True)

    url = memory_server.url()
    plain = open_store(url, None)
    assert isinstance(plain, ObjectStore)
    copy = lambda what: what.startswith("copy ")  # noqa: E731
    claimer_store = ObjectStore(Interleave(plain.io, copy, ack, after=True))
    with (
        vsqs.Queue(url, clock=true.host(0), visibility_timeout=VT_MS / 1000) as holder,
        vsqs.Queue(claimer_store, clock=true.host(skew_ms)) as claimer,
    ):
        holder.send(b"m")
        msg = holder.receive()
        assert msg is not None
        assert claimer.receive() is None  # held; the claimer has read the store's clock
        # Names are on the store's clock, which both read (to within the
        # milliseconds between their measures): past the expiry on it.
        true.advance(VT_MS + 1000)
        again = claimer.receive()
        assert acked == [False], "the ack and the claim both won"
        assert again is not None and again.id == msg.id
    claimer_store.close()
    plain.close()


def test_the_offset_to_the_stores_clock_is_warned_about_and_corrects_every_expiry(
    s3_server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A host 30 s behind the store is told so when it opens a queue, and its
    expiries are on the store's clock: the store's time (moto's is this
    host's real one) plus the timeout, to within the 1 s the ``Date`` header
    and the request leave, not its own clock plus the timeout."""
    host = TrueTime(int(time.time() * 1000) - 30_000).host(0)

    steady = time.monotonic

    class HostTime:  # the probe reads the host's time.time()
        time = staticmethod(host)
        monotonic = staticmethod(steady)

    monkeypatch.setattr(_object, "time", HostTime)
    monkeypatch.setattr(_object_io, "time", HostTime)
    monkeypatch.setattr(_probe, "_PROBED", {})  # probe again, on this host's clock
    url = s3_server.url()
    before = time.time()
    with (
        caplog.at_level(logging.WARNING, logger="vsqs"),
        vsqs.Queue(url, storage_options=s3_server.storage_options, clock=host) as q,
    ):
        assert isinstance(q.store, ObjectStore)
        offset = q.store.capabilities.clock_offset
        assert offset is not None and 29 < offset < 32
        assert re.search(r"this host's clock is -(29|30|31)\.\d s off the store's", caplog.text)
        q.send(b"m")
        msg = q.receive(visibility_timeout=10)
        assert msg is not None
        expiry = names.parse_receipt(msg.receipt).expiry_ms
        after = time.time()
        assert before * 1000 + 9_000 <= expiry <= after * 1000 + 11_000
        assert msg.visible_at is not None  # shown on the host's clock
        assert abs(msg.visible_at.timestamp() * 1000 - (host.ms + 10_000)) <= 1000
        msg.delete()
