"""Batches on object stores cost round trips, not requests: their requests run
side by side (a proxy holds the first until a second is in flight, which never
happens one at a time), a batch being sent is never received in part, and the
sources of a batch of claims go with one delete request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import fsspec
import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores import FsspecObjects, ObjectIO, ObjectStore
from vsqs.testing import FakeClock

from .support.fault_proxy import FaultProxy, Gate
from .support.faulty_io import FaultyIO
from .support.servers import Server, proxied

Match = Callable[[str, str, dict[str, str]], bool]

#: Ample for one proxied request on a busy machine; a test that waits this
#: long has failed.
PATIENCE = 60.0


def target(path: str) -> str:
    return path.split("?", 1)[0].rpartition("/")[2]


def message_create(method: str, path: str, headers: dict[str, str]) -> bool:
    """An exclusive create of a message name (a send)."""
    return method == "PUT" and "If-None-Match" in headers and names.parse(target(path)) is not None


def claim_copy(method: str, path: str, headers: dict[str, str]) -> bool:
    """The copy of a rename to a held name (a claim)."""
    copied = any(k.lower() == "x-amz-copy-source" for k in headers)
    return method == "PUT" and copied and names.parse(target(path)) is not None


def ack_marker(method: str, path: str, headers: dict[str, str]) -> bool:
    """The move marker that commits an ack."""
    return method == "PUT" and "If-None-Match" in headers and target(path).endswith(".moved")


class Hold(Gate):
    """Holds the first matching request until :attr:`release` is set."""

    def __init__(self, match: Match) -> None:
        super().__init__(match)
        self.held = threading.Event()
        self.release = threading.Event()
        self._taken = threading.Lock()

    def enter(self, path: str) -> None:
        if self._taken.acquire(blocking=False):
            self.held.set()
            self.release.wait(PATIENCE)

    def leave(self, path: str) -> None:
        pass


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.01)


# ------------------------------------------------------------------ S3
@pytest.mark.parametrize(
    ("match", "action"),
    [
        (message_create, "send"),
        (claim_copy, "receive"),
        (ack_marker, "delete"),
    ],
)
def test_a_batch_sends_its_requests_side_by_side(
    s3_server: Server, s3_proxy: FaultProxy, match: Match, action: str
) -> None:
    url = s3_server.url()
    bodies = [b"%d" % i for i in range(10)]
    with vsqs.Queue(url, storage_options=proxied(s3_server, s3_proxy)) as q:
        gate = Gate(match, timeout=PATIENCE)
        if action == "send":
            s3_proxy.gate = gate
        q.send_batch(bodies, bundle=False)
        if action == "receive":
            s3_proxy.gate = gate
        got = q.receive_batch(10)
        assert [m.body for m in got] == bodies
        s3_proxy.gate = gate
        result = q.delete_batch(got)
        assert result.deleted == [m.receipt for m in got]
    assert gate.most_in_flight >= 2


def test_a_batch_being_sent_is_not_received_in_part(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """The first create of a batch is held while the others land: a receiver
    sees none of the batch until it is whole, then all of it in order."""
    url = s3_server.url()
    bodies = [b"%d" % i for i in range(10)]
    hold = s3_proxy.gate = Hold(message_create)
    with (
        vsqs.Queue(url, storage_options=proxied(s3_server, s3_proxy)) as producer,
        vsqs.Queue(url, storage_options=s3_server.storage_options) as consumer,
    ):
        sent: list[str] = []
        sender = threading.Thread(
            target=lambda: sent.extend(producer.send_batch(bodies, bundle=False))
        )
        sender.start()
        try:
            assert hold.held.wait(PATIENCE)
            wait_until(
                lambda: len([n for n in consumer.store.list(settle=True) if names.is_id(n)]) == 9,
                "the other nine creates of the batch",
            )
            assert consumer.receive_batch(10) == []
        finally:
            hold.release.set()
            sender.join(PATIENCE)
        got = consumer.receive_batch(10)
        assert [m.id for m in got] == sent
        assert [m.body for m in got] == bodies


def test_send_batch_returns_each_bodys_id_when_a_create_is_sent_again(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """A create that failed is sent again under a fresh id after the rest of
    its chunk; the ids still come back in the bodies' order."""
    bodies = [b"%d" % i for i in range(6)]
    with vsqs.Queue(s3_server.url(), storage_options=proxied(s3_server, s3_proxy)) as q:
        s3_proxy.arm("500", at=3, where=lambda method, path: method == "PUT" and bool(
            names.parse(target(path))
        ))  # fmt: skip
        ids = q.send_batch(bodies, bundle=False)
        assert any(e.fault == "500" for e in s3_proxy.exchanges)
        s3_proxy.disarm()
        got = {m.id: m.body for m in q.receive_batch(10)}
    assert [got[i] for i in ids] == bodies


def test_the_claims_of_a_batch_delete_their_sources_with_one_request(
    s3_server: Server,
) -> None:
    with vsqs.Queue(s3_server.url(), storage_options=s3_server.storage_options) as q:
        q.send_batch([b"%d" % i for i in range(10)], bundle=False)
        q.receive()  # lists, and leaves nine candidates
        store = q.store
        assert isinstance(store, ObjectStore)
        before = store.io.requests.copy()
        got = q.receive_batch(9)
        spent = store.io.requests - before
        assert len(got) == 9
        assert spent["delete"] == 1
        assert (spent["put"], spent["copy"], spent["get"]) == (9, 9, 9)


# ---------------------------------------------------------- batch markers
def memory_queue(clock: FakeClock, root: str) -> vsqs.Queue:
    """A queue on fsspec's memory filesystem whose store ages markers by ``clock``."""
    io = FsspecObjects(fsspec.filesystem("memory"), root, f"memory://{root}", bucketed=False)
    return vsqs.Queue(ObjectStore(io, clock=clock), clock=clock)


def test_a_batch_marker_hides_its_senders_later_names_only() -> None:
    clock = FakeClock(time.time())  # near the memory filesystem's stamps (vsqs.ClockSkew)
    root = f"/vsqs-batches/{time.time_ns()}/q"
    other_clock = FakeClock(clock())  # another id generator: another sender
    with memory_queue(clock, root) as sender, memory_queue(other_clock, root) as other:
        store = sender.store
        before = sender.send(b"before")
        with store.sending(store.ms_clock(clock).next_id()):  # the sender's generator
            inside = sender.send(b"inside")
            others = other.send(b"other")
            assert [n for n in store.list() if names.is_id(n)] == sorted([before, others])
            assert inside in set(store.list(settle=True))
            assert [m.id for m in other.receive_batch(10)] == sorted([before, others])
        assert [n for n in store.list() if names.is_id(n)] == [inside]


def test_a_killed_senders_marker_stops_hiding_and_is_collected() -> None:
    clock = FakeClock(time.time())  # the memory filesystem stamps objects by the real clock
    with memory_queue(clock, f"/vsqs-batches/{time.time_ns()}/q") as q:
        store = q.store
        assert isinstance(store, ObjectStore)
        marker = store.ms_clock(clock).next_id() + ".sending"  # the sender's generator
        store.io.create(marker, b"")  # its sender died before removing it
        sent = q.send(b"x")
        assert q.receive() is None
        clock.advance(11)  # FINISH_AFTER
        msg = q.receive()
        assert msg is not None and msg.id == sent
        assert marker in store.take_repairs()


class HeldCreates(FaultyIO):
    """Holds every create of a message name until the test releases it by name."""

    def __init__(self, inner: ObjectIO) -> None:
        super().__init__(inner, "crash", None)
        self.arrived: dict[str, threading.Event] = {}  # name -> its release
        self.landed: dict[str, threading.Event] = {}
        self.changed = threading.Condition()

    def create(self, name: str, data: bytes) -> None:
        if names.parse(name) is None:  # a marker, the config, a probe
            return super().create(name, data)
        release, landed = threading.Event(), threading.Event()
        with self.changed:
            self.arrived[name], self.landed[name] = release, landed
            self.changed.notify_all()
        assert release.wait(PATIENCE)
        super().create(name, data)
        landed.set()

    def wait_for(self, count: int) -> list[str]:
        """The names of the first ``count`` creates, once they all arrived, sorted."""
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.arrived) >= count, PATIENCE)
            return sorted(self.arrived)[:count]


def test_two_batches_of_one_queue_at_once_are_each_shown_whole() -> None:
    """Two threads of one Queue send a batch each: while the first batch's
    first create is held and the rest of it landed, the second batch's marker
    (a higher floor of the same nonce) is listed too; no listing shows any of
    the first batch before its first message exists."""
    clock = FakeClock(time.time())  # the memory filesystem stamps objects by the real clock
    root = f"/vsqs-batches/{time.time_ns()}/q"
    inner = FsspecObjects(fsspec.filesystem("memory"), root, f"memory://{root}", bucketed=False)
    held = HeldCreates(inner)
    with (
        vsqs.Queue(ObjectStore(held, clock=clock), clock=clock) as producer,
        vsqs.Queue(ObjectStore(inner.sibling("q"), clock=clock), clock=clock) as consumer,
    ):
        first_ids: list[str] = []
        second_ids: list[str] = []
        first = threading.Thread(
            target=lambda: first_ids.extend(
                producer.send_batch([b"a%d" % i for i in range(5)], bundle=False)
            )
        )
        second = threading.Thread(
            target=lambda: second_ids.extend(
                producer.send_batch([b"b%d" % i for i in range(5)], bundle=False)
            )
        )
        first.start()
        try:
            batch = held.wait_for(5)
            for name in batch[1:]:  # all but the first land
                held.arrived[name].set()
                assert held.landed[name].wait(PATIENCE)
            second.start()  # its floor is above every id of the first batch
            held.wait_for(10)
            assert [n for n in consumer.store.list() if names.is_id(n)] == []
            assert consumer.receive_batch(10) == []
        finally:
            for release in list(held.arrived.values()):
                release.set()
            first.join(PATIENCE)
            second.join(PATIENCE)
        clock.advance(1)  # no name is young any more
        got = consumer.receive_batch(10)
        assert [m.id for m in got] == first_ids + second_ids
        bodies = [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)]
        assert [m.body for m in got] == bodies


# ---------------------------------------------------------------- fan_out
def test_fan_out_bounds_the_calls_in_flight_and_keeps_their_order() -> None:
    from vsqs._fanout import fan_out

    lock, full = threading.Lock(), threading.Event()
    active, most = 0, 0

    def call(i: int) -> int:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
            if active == 3:
                full.set()
        full.wait(PATIENCE)  # the first three meet; later calls find it set
        with lock:
            active -= 1
        if i % 2:
            raise ValueError(i)
        return i * 10

    outcomes = fan_out(call, list(range(20)), limit=3)
    assert most == 3
    assert [o.result() for o in outcomes[::2]] == [i * 10 for i in range(0, 20, 2)]
    assert [str(o.exception()) for o in outcomes[1::2]] == [str(i) for i in range(1, 20, 2)]


def test_a_batch_inside_a_batch_runs_in_its_callers_thread() -> None:
    from vsqs._fanout import fan_out

    def outer(_: int) -> set[str]:
        inner = fan_out(lambda _: threading.current_thread().name, [0, 1, 2])
        return {o.result() for o in inner} | {threading.current_thread().name}

    for outcome in fan_out(outer, [0, 1]):
        assert len(outcome.result()) == 1  # every inner call ran where its caller did
