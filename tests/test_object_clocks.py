"""Clocks on object stores (issue 26, classes 1, 2 and 8; docs/protocol.md,
"Whose clock decides expiry").

Ages of objects are judged on the store's clock, from what listings show
(``vsqs.stores._clock.StoreClock``), never on a host's wall clock; durations
of requests on a steady clock. Each test puts a host's clock where the old
rule went wrong: a lister ahead of the store by more than ``FINISH_AFTER``,
a clock stepped back while a request stalls, a store that lists no times,
and hosts beyond the 30 s bound, which get :class:`vsqs.ClockSkew`.
Clocks are injected and moved by hand: no test sleeps.
"""

from __future__ import annotations

import gc
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores import _probe
from vsqs.stores._clock import CLOCK_BOUND, RETRY, WINDOW, StoreClock, StoreOffset, store_offset
from vsqs.stores._moves import FINISH_AFTER
from vsqs.stores._object import ObjectStore
from vsqs.stores._object_io import ObjectIO
from vsqs.stores._probe import probe
from vsqs.testing import FakeClock

from .support.backends import params, select
from .support.clocks import VT_MS, TrueTime
from .support.crashes import Crash
from .support.faulty_io import FaultyIO, Interleave, die, on
from .support.object_stores import object_store, raw_names
from .support.servers import Server

AHEAD = FINISH_AFTER + 2  # a lister this far ahead took every young marker for an old one


@pytest.fixture(params=params(select(object_store=True, sweeps=True)))
def server(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue(request.param.server)  # type: ignore[no-any-return]


def ahead(seconds: float) -> Callable[[], float]:
    """A host's wall clock, ``seconds`` ahead of this one's (and the store's)."""
    return lambda: time.time() + seconds


# ------------------------------------------------------------ class 1
def test_a_fast_lister_leaves_a_young_ack_alone(server: Server) -> None:
    """A lister 12 s ahead lists while another client's ack is between its
    marker and its ``HEAD``: the ack's marker is young on the store's clock,
    so the lister leaves it, and the ack reports the message deleted (it
    finished the delete, and the ack said the receipt was stale)."""
    plain = object_store(server, "fast-ack")
    fast = ObjectStore(plain.io, clock=ahead(AHEAD))
    with vsqs.Queue(plain) as q:
        q.send(b"m")
        msg = q.receive()
        assert msg is not None and msg.receipt is not None

        def fast_lister_lists() -> None:
            list(fast.list())
            fast.flush()

        acker = ObjectStore(Interleave(plain.io, on("head", msg.receipt), fast_lister_lists))
        with vsqs.Queue(acker) as q2:
            result = q2.delete_batch([msg.receipt])
        assert result.deleted == [msg.receipt], result
    assert not fast.take_repairs()


def test_a_fast_lister_leaves_a_live_batch_marker_alone(server: Server) -> None:
    """A ``send_batch`` under way: a lister 12 s ahead must keep hiding the
    batch's later names (it showed the batch in part: m1 before m0 exists)."""
    sender = object_store(server, "fast-batch")
    fast = ObjectStore(sender.io, clock=ahead(AHEAD))
    ids = names.MsClock(time.time)
    floor, later = ids.next_id(), ids.next_id()
    with sender.sending(floor):
        sender.write_new(later, b"m1", fsync=False)
        assert later not in list(fast.list())
        assert floor + ".sending" in raw_names(sender)
    assert later in list(fast.list())


def test_a_fast_lister_leaves_a_live_probe_alone(server: Server) -> None:
    """The capability probe between its two creates: a lister 12 s ahead
    deleted the probe, the second create succeeded, and a good store was
    refused (and the refusal cached for the process)."""
    plain = object_store(server, "fast-probe")
    fast = ObjectStore(plain.io, clock=ahead(AHEAD))

    def fast_lister_lists() -> None:
        list(fast.list())
        fast.flush()

    probing = ObjectStore(
        Interleave(plain.io, on("create", "vsqs-probe."), fast_lister_lists, after=True)
    )
    found = probe(probing.io)
    assert found.exclusive_create, found.refusal


# ------------------------------------------------------------ class 2
def test_an_ack_stalled_while_the_clock_steps_back_is_outcome_unknown(server: Server) -> None:
    """An ack's ``HEAD`` stalls for 11 s while this host's clock is stepped
    back 11 s (an NTP step, a VM resumed); meanwhile a lister finishes the
    delete. On the wall clock the ack took no time and said "stale" of a
    message it deleted; on the steady clock it was slow: outcome unknown."""
    plain = object_store(server, "step-back")
    steady = FakeClock(1000.0)  # both hosts' monotonic clocks
    lister_wall = FakeClock(time.time())
    lister = ObjectStore(plain.io, clock=lister_wall, monotonic=steady)
    name = names.MsClock(time.time).next_id()
    plain.write_new(name, b"m", fsync=False)

    def stall_and_step_back() -> None:
        list(lister.list())  # sees the ack's marker, young
        steady.advance(FINISH_AFTER + 1)
        lister_wall.advance(FINISH_AFTER + 1)
        list(lister.list())  # finishes the delete: it is old now
        lister.flush()
        # The acker's wall clock went on as far, and was stepped back as far:
        # it reads what it read when the ack began.

    acker = ObjectStore(
        Interleave(plain.io, on("head", name), stall_and_step_back),
        clock=FakeClock(time.time()),
        monotonic=steady,
    )
    with pytest.raises(vsqs.stores.OutcomeUnknown):
        acker.delete(name, known=True)
    assert name in lister.take_repairs()


# ------------------------------------------------------------ class 8
def abandoned_claim(server: Server, queue: str) -> tuple[ObjectStore, str]:
    """A queue whose one message's claimer died between its marker and its
    copy (visibility timeout 1 s); its store and the message's id."""
    plain = object_store(server, queue)
    with vsqs.Queue(plain) as producer:
        sent = producer.send(b"m")
    dying = ObjectStore(Interleave(plain.io, on("copy"), die))
    with pytest.raises(Crash), vsqs.Queue(dying) as claimer:
        claimer.receive(visibility_timeout=1)
    return plain, sent


class NoTimes(FaultyIO):
    """A store whose listing gives no modification times (``ObjectIO`` allows it)."""

    def __init__(self, inner: ObjectIO) -> None:
        super().__init__(inner, "crash", None)

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        return ((name, None) for name, _ in self.inner.listing(prefix))


def test_a_store_without_listing_times_finishes_an_abandoned_claim(server: Server) -> None:
    """A claimer dies between its marker and its copy. A store that lists no
    times left the message hidden for ever; now its age counts from the first
    listing that showed the marker, and it comes back after ``FINISH_AFTER``
    and the dead claim's visibility timeout."""
    plain, sent = abandoned_claim(server, "no-times")
    steady, wall = FakeClock(1000.0), FakeClock(time.time())
    with vsqs.Queue(ObjectStore(NoTimes(plain.io), clock=wall, monotonic=steady), clock=wall) as q:
        assert q.receive() is None  # hidden under a marker first seen now
        assert q.stats().ready == 1  # counted under the name its move leaves
        steady.advance(FINISH_AFTER + 1)
        wall.advance(FINISH_AFTER + 1)  # past the dead claim's expiry too
        back = q.receive()
        assert back is not None and back.id == sent and back.receive_count == 2


# ------------------------------------------------------- the 30 s bound
@pytest.mark.parametrize("offset", [-(CLOCK_BOUND + 10), CLOCK_BOUND + 10], ids=["behind", "ahead"])
def test_a_host_beyond_the_bound_gets_clock_skew(server: Server, offset: float) -> None:
    """Beyond 30 s either way a host's listings raise :class:`vsqs.ClockSkew`
    (it only warned): behind, from any recent object listed; ahead, from an
    object it made itself."""
    host = ahead(offset)
    store = object_store(server, f"skew{int(offset)}", clock=host)
    with vsqs.Queue(store, clock=host) as q:
        q.send(b"m")
        with pytest.raises(vsqs.ClockSkew, match="synchronise it") as raised:
            for _ in range(3):  # the first listing measures, a later one refuses
                q.receive()
        assert "\n" not in str(raised.value)


@pytest.mark.parametrize("offset", [-(CLOCK_BOUND - 10), CLOCK_BOUND - 10], ids=["behind", "ahead"])
def test_a_host_within_the_bound_works(server: Server, offset: float) -> None:
    host = ahead(offset)
    store = object_store(server, f"within{int(offset)}", clock=host)
    with vsqs.Queue(store, clock=host) as q:
        for i in range(3):
            q.send(b"%d" % i)
            msg = q.receive()
            assert msg is not None and msg.body == b"%d" % i
            msg.delete()


# ------------------------------------------------------------ key order
class Unordered(FaultyIO):
    """A store that lists keys in no order (S3 Express directory buckets)."""

    def __init__(self, inner: ObjectIO) -> None:
        super().__init__(inner, "crash", None)

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        return iter(sorted(self.inner.listing(prefix), reverse=True))


def test_a_store_that_lists_out_of_order_is_refused(server: Server) -> None:
    """FIFO and the grouping of a message's keys rest on key order: a store
    that breaks it is refused in one line, not served out of order."""
    plain = object_store(server, "unordered")
    with vsqs.Queue(plain) as q:
        q.send_batch([b"a", b"b"])
    with (
        vsqs.Queue(ObjectStore(Unordered(plain.io))) as q,
        pytest.raises(vsqs.UnsupportedStore, match="out of order") as raised,
    ):
        q.receive()
    assert "\n" not in str(raised.value)


# ------------------------------------------------------- Date headers
class Dated(FaultyIO):
    """A store whose listing responses tell its time (an HTTP ``Date``), read
    from ``store_clock``: here an hour after the objects were written."""

    def __init__(self, inner: ObjectIO, store_clock: Callable[[], float]) -> None:
        super().__init__(inner, "crash", None)
        self.store_clock = store_clock

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        entries = list(self.inner.listing(prefix))
        self.last_date = float(int(self.store_clock()))
        return iter(entries)


def test_a_one_shot_gc_finishes_an_old_abandoned_claim_at_its_first_listing(
    server: Server,
) -> None:
    """An hour after a claimer died between its marker and its copy, a new
    process runs ``gc()`` once. The newest listed time is the marker's own, so
    listed times alone bound the store's clock at the marker's age: nothing
    to finish. The listing response's ``Date`` tells the store's time: the
    move is an hour old and is finished at once."""
    plain, sent = abandoned_claim(server, "one-shot")
    an_hour_later = ahead(3600)  # the store's clock and the new process's host's
    once_store = ObjectStore(Dated(plain.io, an_hour_later), clock=an_hour_later)
    with vsqs.Queue(once_store, clock=an_hour_later) as once:
        repaired = once.gc()
    assert any(name.startswith(sent) for name in repaired), repaired


# ------------------------------------------------- after review: the bounds
class ForeignFuture(FaultyIO):
    """Lists a foreign file ``notes.txt`` as written an hour ahead (a file a
    fast host wrote on an sftp- or NFS-backed fsspec store, or ``touch -d``)."""

    def __init__(self, inner: ObjectIO) -> None:
        super().__init__(inner, "crash", None)

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        for name, modified in self.inner.listing(prefix):
            future = name == "notes.txt" and modified is not None
            yield name, modified + 3600 if future else modified


def test_a_foreign_object_with_a_future_time_ages_nothing(server: Server) -> None:
    """Only objects vsqs writes tell the store's time: a foreign file listed an
    hour ahead made a lister finish another client's young ack (which then
    said stale) and refused every client with ClockSkew."""
    plain = object_store(server, "foreign-future")
    lister = ObjectStore(ForeignFuture(plain.io))
    with vsqs.Queue(plain) as q:
        q.send(b"m")
        msg = q.receive()
        assert msg is not None and msg.receipt is not None

        def a_foreign_file_appears_and_a_client_lists() -> None:
            plain.io.create("notes.txt", b"not a message")
            list(lister.list())
            lister.flush()

        acker = ObjectStore(
            Interleave(plain.io, on("head", msg.receipt), a_foreign_file_appears_and_a_client_lists)
        )
        with vsqs.Queue(acker) as q2:
            q2.delete(msg.receipt)  # not ReceiptExpired: nobody finished it early
        assert q.receive() is None
        assert not [n for n in lister.list() if names.parse(n)]  # gone, and no ClockSkew


def test_a_create_that_found_its_name_taken_is_not_the_hosts(server: Server) -> None:
    """A create refused because the name exists (a move finding the copy an
    earlier move left) made no object here: its time says nothing of this
    host's clock (a correct host 40 s later was refused as 'ahead', for good)."""
    plain = object_store(server, "taken")
    name = names.MsClock(time.time).next_id()
    plain.write_new(name, b"m", fsync=False)
    later = FakeClock(time.time() + 40)  # a correct host, 40 s after the first create
    second = ObjectStore(plain.io, clock=later)
    with pytest.raises(FileExistsError):
        second.write_new(name, b"m", fsync=False)
    for _ in range(2):
        assert name in list(second.list())


def test_a_bound_of_the_stores_clock_expires_however_long_nothing_was_listed() -> None:
    """A bound older than two windows no longer counts: a steady clock that
    drifts 100 ppm would have carried a day-old bound 8.6 s ahead (and aged
    a young marker past FINISH_AFTER)."""
    steady = FakeClock(1000.0)
    store_clock = StoreClock(time.time, steady)
    store_clock.observed("1", 5000.0)
    assert store_clock.store_time() == 5000.0
    steady.advance(2 * WINDOW + 1)
    assert store_clock.store_time() == -math.inf
    store_clock.observed("2", 9000.0)  # a day later: only what is new counts
    assert store_clock.store_time() == 9000.0


def test_a_full_listing_forgets_the_sightings_of_names_gone() -> None:
    """First sightings are kept for names a full listing still shows; a
    long-running client does not fill its memory (and the cap that evicts)
    with markers long gone."""
    steady = FakeClock(1000.0)
    store_clock = StoreClock(time.time, steady)
    store_clock.observed("a.moved", None, aged=True)
    store_clock.observed("b.moved", None, aged=True)
    steady.advance(20)
    store_clock.keep_sightings({"b.moved"})
    assert store_clock.age("b.moved", None) == 20
    assert store_clock.age("a.moved", None) == 0  # gone: a later one is another


def test_a_host_refused_as_ahead_is_served_again_once_its_bound_expires() -> None:
    """A host that was 40 s ahead and was set right is refused no longer
    than two windows (docs/protocol.md: served again within 10 minutes)."""
    steady, wall = FakeClock(1000.0), FakeClock(5000.0 + 40)
    store_clock = StoreClock(wall, steady)
    store_clock.creating("1")
    store_clock.observed("1", 5000.0)  # the store stamped it 40 s before this host's clock
    with pytest.raises(vsqs.ClockSkew, match="ahead"):
        store_clock.check()
    steady.advance(2 * WINDOW + 1)
    wall.advance(2 * WINDOW + 1 - 40)  # set right
    store_clock.check()


# ------------------------------------------- expiries and ids on the store's clock
class StoreTimes(FaultyIO):
    """A store whose clock is ``store_clock``: it stamps what it creates by it
    (the memory filesystem stamps by this host's real clock)."""

    def __init__(self, inner: ObjectIO, store_clock: Callable[[], float]) -> None:
        super().__init__(inner, "crash", None)
        self.store_clock = store_clock
        self.stamps: dict[str, float] = {}

    def create(self, name: str, data: bytes) -> None:
        super().create(name, data)
        self.stamps[name] = self.store_clock()

    def copy(self, src: str, dst: str) -> None:
        super().copy(src, dst)
        self.stamps[dst] = self.store_clock()

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        return iter([(n, self.stamps.get(n, m)) for n, m in super().listing(prefix)])


OFF = 20_000  # ms a host is off the store's clock: within CLOCK_BOUND
START_MS = 1_750_000_000_123  # not a whole second: the stamps read as exact to the ms


@pytest.mark.parametrize(
    ("holder_skew_ms", "taker_skew_ms"),
    [(OFF, -OFF), (-OFF, OFF)],
    ids=["holder-ahead-taker-behind", "holder-behind-taker-ahead"],
)
def test_a_host_off_the_stores_clock_holds_and_takes_on_the_stores_clock(
    memory_server: Server, holder_skew_ms: int, taker_skew_ms: int
) -> None:
    """A holder and a taker 20 s off the store's clock either way: the hold
    is the visibility timeout on the store's clock, to the ms. Uncorrected, a
    holder behind was taken from at once (and its ack said stale), and a
    holder ahead hid the message 40 s longer. Ids are on the store's clock
    too, and each client shows its caller times on its own clock."""
    true = TrueTime(START_MS)
    io = StoreTimes(object_store(memory_server, f"off{holder_skew_ms}").io, lambda: true.ms / 1000)
    holder_clock, taker_clock = true.host(holder_skew_ms), true.host(taker_skew_ms)
    with (
        vsqs.Queue(
            ObjectStore(io, clock=holder_clock), clock=holder_clock, visibility_timeout=VT_MS / 1000
        ) as holder,
        vsqs.Queue(ObjectStore(io, clock=taker_clock), clock=taker_clock) as taker,
    ):
        sent = holder.send(b"m")
        assert names.id_ms(sent) == true.ms  # the store's clock
        msg = holder.receive()
        assert msg is not None and msg.receipt is not None
        assert names.parse_receipt(msg.receipt).expiry_ms == true.ms + VT_MS
        assert msg.visible_at is not None
        assert msg.visible_at.timestamp() * 1000 == holder_clock.ms + VT_MS  # its own clock
        assert taker.receive() is None
        true.advance(VT_MS - 1)
        assert taker.receive() is None
        true.advance(1)
        taken = taker.receive()
        assert taken is not None and taken.id == msg.id and taken.receive_count == 2
        assert taken.sent_at.timestamp() * 1000 == taker_clock.ms - VT_MS  # on the taker's clock
        with pytest.raises(vsqs.ReceiptExpired):
            msg.delete()


@pytest.mark.parametrize("skew", [OFF / 1000, -OFF / 1000], ids=["ahead", "behind"])
def test_a_host_off_the_stores_clock_writes_expiries_and_ids_on_the_stores(
    server: Server, skew: float
) -> None:
    """On a store that tells its time by ``Date`` (whole seconds), a host
    20 s off writes ids and expiries on the store's clock, to within the
    stated error (the second a ``Date`` names and the measuring request),
    and takes nothing early from a host 20 s off the other way."""
    host, other = ahead(skew), ahead(-skew)
    before = time.time()  # moto's clock is this host's
    with (
        vsqs.Queue(object_store(server, f"date{int(skew)}"), clock=host) as holder,
        vsqs.Queue(object_store(server, f"date{int(skew)}"), clock=other) as taker,
    ):
        sent = holder.send(b"m")
        msg = holder.receive(visibility_timeout=VT_MS / 1000)
        assert msg is not None and msg.receipt is not None
        assert taker.receive() is None
        after = time.time()
    error_ms = 1000 + (after - before) * 1000  # a second, and the requests' time at most
    assert before * 1000 - error_ms <= names.id_ms(sent) <= after * 1000 + error_ms
    expiry = names.parse_receipt(msg.receipt).expiry_ms
    assert before * 1000 + VT_MS - error_ms <= expiry <= after * 1000 + VT_MS + error_ms


def test_a_host_whose_clock_moves_beyond_the_bound_gets_clock_skew(memory_server: Server) -> None:
    """An injected clock that moves by hand is time passing; one found, at the
    next measure (after WINDOW of steady time), to have moved more than 30 s
    against the store's clock had written names that far off: ClockSkew,
    once; later names are on the store's clock again."""
    true, steady = TrueTime(START_MS), FakeClock(1000.0)
    io = StoreTimes(object_store(memory_server, "moves").io, lambda: true.ms / 1000)
    host = true.host(0)
    with vsqs.Queue(ObjectStore(io, clock=host, monotonic=steady), clock=host) as q:
        q.send(b"m")
        host.skew_ms = int((CLOCK_BOUND + 10) * 1000)  # a step no steady clock tells
        steady.advance(WINDOW)
        with pytest.raises(vsqs.ClockSkew, match="moved 40 s") as raised:
            q.send(b"m")
        assert "\n" not in str(raised.value)
        assert names.id_ms(q.send(b"m")) == true.ms


class DateAhead(FaultyIO):
    """A store whose ``Date`` headers run an hour ahead of the times it lists
    (a proxy on another clock than the nodes that stamp objects)."""

    def __init__(self, inner: ObjectIO) -> None:
        super().__init__(inner, "crash", None)

    def create(self, name: str, data: bytes) -> None:
        super().create(name, data)
        self.last_date = float(int(time.time())) + 3600


def test_a_store_whose_date_and_listed_times_disagree_is_refused(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vsqs reads the store's clock from ``Date`` headers and listed times as
    one clock: where they disagree by more than the bound for an object it
    created, the probe refuses the store in one line."""
    monkeypatch.setattr(_probe, "_PROBED", {})
    plain = object_store(memory_server, "dates")
    with pytest.raises(vsqs.UnsupportedStore, match="Date header") as raised:
        vsqs.Queue(ObjectStore(DateAhead(plain.io)))
    assert "\n" not in str(raised.value)
    assert not [n for n, _ in plain.io.listing() if n.startswith("vsqs-probe.")]


class AnHourLater(FaultyIO):
    """A store an hour after everything in it was written: objects created
    before lists an hour older than they are, those created through it as
    they are (a store that tells no ``Date``)."""

    def __init__(self, inner: ObjectIO) -> None:
        super().__init__(inner, "crash", None)
        self.created: set[str] = set()

    def create(self, name: str, data: bytes) -> None:
        super().create(name, data)
        self.created.add(name)

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        for name, modified in super().listing(prefix):
            old = modified is not None and name not in self.created
            yield name, modified - 3600 if old else modified


def test_a_one_shot_gc_on_a_store_without_dates_finishes_an_old_abandoned_claim(
    memory_server: Server,
) -> None:
    """An hour after a claimer died between its marker and its copy, a fresh
    client runs ``gc()`` once on a store that tells no ``Date``. Its listing's
    newest time was the marker's own, so nothing looked old; the measure of
    its clock (an object it creates and lists) tells the store's time: the
    move is an hour old and is finished at the first listing."""
    plain, sent = abandoned_claim(memory_server, "one-shot-no-date")
    clock = ahead(3600 + 1)  # a clock of its own: measured afresh
    with vsqs.Queue(ObjectStore(AnHourLater(plain.io)), clock=clock) as once:
        repaired = once.gc()
    assert any(name.startswith(sent) for name in repaired), repaired


def test_a_step_of_the_hosts_clock_is_measured_again_at_its_next_read() -> None:
    """The host's clock stepping 40 s against its steady clock (an NTP step,
    a resumed VM) is seen at the next read: the offset is measured again
    before a name is written with it, and the step is no ClockSkew. Within a
    window and without a step, the offset is read, not measured."""
    wall, steady = FakeClock(5000.0), FakeClock(1000.0)
    offset = StoreOffset(steady, elapsed=steady)
    measures: list[float] = []

    def measure(read: Callable[[], float]) -> tuple[float, float]:
        measures.append(read())
        return 10_000.0 - read(), 10_000.0 - read()  # the store reads 10 000 now

    assert offset.ms(wall, measure) == 5_000_000
    steady.advance(1)
    wall.advance(1)
    assert offset.ms(wall, measure) == 5_000_000 and len(measures) == 1  # no step: read
    wall.advance(CLOCK_BOUND + 10)  # stepped: the steady clock did not move
    assert offset.ms(wall, measure) == round((10_000.0 - wall()) * 1000)  # no ClockSkew
    assert len(measures) == 2


def test_a_failed_measure_again_keeps_the_offset_in_hand_and_tries_later() -> None:
    """The 5-minute measure again fails (the store is briefly unreachable):
    the offset measured before is still good, so names go on being written
    with it, and the measure is tried again RETRY seconds later, not at
    every read (nor does the failure reach the send or receive that read)."""
    wall, steady = FakeClock(5000.0), FakeClock(1000.0)
    offset = StoreOffset(steady, elapsed=steady)
    tries: list[str] = []

    def measure(read: Callable[[], float]) -> tuple[float, float]:
        tries.append("measure")
        if len(tries) == 2:
            raise ConnectionResetError("injected: the store is unreachable")
        store = 10_000.0 + steady() - 1000.0  # the store's clock runs with the steady one
        return store - read(), store - read()

    assert offset.ms(wall, measure) == 5_000_000
    steady.advance(WINDOW + 1)
    wall.advance(WINDOW + 1)
    assert offset.ms(wall, measure) == 5_000_000 and len(tries) == 2  # failed, kept
    assert offset.ms(wall, measure) == 5_000_000 and len(tries) == 2  # not again at once
    steady.advance(RETRY)
    wall.advance(RETRY)
    assert offset.ms(wall, measure) == 5_000_000
    assert len(tries) == 3


def test_a_first_measure_that_fails_raises() -> None:
    """With no offset in hand, a failed measure fails the read (no name may
    be written on a clock nobody measured)."""
    offset = StoreOffset(FakeClock(1000.0))

    def measure(read: Callable[[], float]) -> tuple[float, float]:
        raise ConnectionResetError("injected")

    with pytest.raises(ConnectionResetError):
        offset.ms(FakeClock(5000.0), measure)


def test_a_measure_that_returns_after_a_later_one_changes_nothing() -> None:
    """A measure under way when the host's clock steps returns after the
    measure the step caused: the older figure must not replace the newer
    (nor be compared with it for a ClockSkew)."""
    wall, steady = FakeClock(5000.0), FakeClock(1000.0)
    offset = StoreOffset(steady, elapsed=steady)
    offset.ms(wall, lambda read: (10_000.0 - read(), 10_000.0 - read()))
    steady.advance(WINDOW + 1)
    wall.advance(WINDOW + 1)
    started, release = threading.Event(), threading.Event()
    stale = 10_000.0 + WINDOW + 1 - wall()  # the figure before the step

    def slow(read: Callable[[], float]) -> tuple[float, float]:
        started.set()
        assert release.wait(30)
        return stale, stale

    first = threading.Thread(target=offset.ms, args=(wall, slow))
    first.start()
    assert started.wait(30)
    steady.advance(1)
    wall.advance(60)  # a step: measured again at once by this caller
    fresh = 10_000.0 + WINDOW + 2 - wall()
    assert offset.ms(wall, lambda read: (fresh, fresh)) == round(fresh * 1000)
    release.set()
    first.join(30)
    assert offset.ms(wall, lambda read: (0.0, 0.0)) == round(fresh * 1000)


def test_the_offsets_of_a_clock_are_freed_with_it() -> None:
    """The registry of offsets is weak on the clock: a test's clock, or a
    user's ``clock=`` lambda, is not kept alive by the offsets measured on
    it (each StoreOffset held its clock, the registry's own key)."""
    clock = FakeClock(5000.0)
    offset = store_offset(clock, ("scope", "of a test"), FakeClock(1000.0))
    assert offset is not None
    offset.ms(clock, lambda read: (1.0, 1.0))
    dead = weakref.ref(clock)
    del clock, offset
    gc.collect()
    assert dead() is None
