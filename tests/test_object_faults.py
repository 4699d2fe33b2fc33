"""Faults at every request of every operation on object stores (docs/protocol.md).

``FaultyIO`` wraps a real store's request adapter (moto S3 or ``memory://``).
Per run it injects one fault at the k-th request, for every k:

* **crash**: that request and every later one raise :class:`Crash` (the client
  process dies mid-operation);
* **lost response, retried**: the request runs, its response is lost, and the
  client's automatic retry sends it again; the retry's outcome is returned
  (except a create, which the adapters never let a client library re-send:
  its lost response is reported as in the next mode);
* **lost response**: the request runs and the client sees a connection error.

Then a fresh client recovers and the checks of ``test_crashes`` apply: no
message lost, none with two live names, none acknowledged coming back.
Moves left unfinished are finished at once here (``FINISH_AFTER = 0``), which
the protocol allows at any time: a harsher test than the default delay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress

import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores._object import ObjectStore
from vsqs.stores._object_io import ObjectIO
from vsqs.stores._registry import open_store
from vsqs.testing import FakeClock

from .support.backends import Backend, params, select, sweep_cases
from .support.crashes import (
    SCENARIOS,
    Crash,
    Expect,
    finish_at_once,
    open_pair,
    recover_and_check,
)
from .support.fault_proxy import FaultProxy, Quirk
from .support.faulty_io import FaultyIO
from .support.servers import Server, proxied


class FailingGets(FaultyIO):
    """Delegates every request; a ``GET`` of a name of an id in ``ids`` fails,
    as a connection reset after the claim."""

    def __init__(self, inner: ObjectIO) -> None:
        super().__init__(inner, "crash", None)
        self.ids: set[str] = set()

    def get(self, name: str) -> bytes:
        if name[: names.ID_LEN] in self.ids:
            raise ConnectionResetError(f"injected: GET {name} reset")
        return super().get(name)


@pytest.fixture(params=params(select(object_store=True, sweeps=True)))
def server(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue(request.param.server)  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _finished_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moves left half done are finished at the next listing."""
    finish_at_once(monkeypatch)


def run_with_fault(
    server: Server, scenario: Callable[..., None], mode: str, fault_at: int | None
) -> tuple[ObjectStore, FaultyIO, FakeClock, Expect, BaseException | None]:
    store = open_store(server.url(), server.storage_options)
    assert isinstance(store, ObjectStore)
    faulty = FaultyIO(store.io, mode, None)
    clock = FakeClock(time.time())
    healthy, crashing = open_pair(store, ObjectStore(faulty), clock, True)
    faulty.fault_at, faulty.calls[0] = fault_at, 0
    expect = Expect()
    try:
        scenario(healthy, crashing, expect)
        error = None
    except (Crash, vsqs.VsqsError) as exc:
        error = exc
    return store, faulty, clock, expect, error


@pytest.mark.sweep  # a run per request
@pytest.mark.parametrize(
    ("backend", "scenario", "mode"),
    sweep_cases(select(object_store=True, sweeps=True), SCENARIOS, ["crash", "retried", "lost"]),
)
def test_a_fault_at_any_request_loses_nothing(
    request: pytest.FixtureRequest, backend: Backend, scenario: str, mode: str
) -> None:
    server: Server = request.getfixturevalue(backend.server or "")
    run = SCENARIOS[scenario]
    store, faulty, clock, expect, error = run_with_fault(server, run, mode, None)
    assert error is None
    total = faulty.calls[0]
    assert total >= 1
    recover_and_check(store, clock, Expect())
    for fault_at in range(1, total + 1):
        store, faulty, clock, expect, error = run_with_fault(server, run, mode, fault_at)
        if mode == "crash":
            assert isinstance(error, Crash), f"request {fault_at} of {total} did not crash"
        recover_and_check(store, clock, expect)


def test_gcsfs_errors_are_storage_errors_and_a_claim_is_given_back(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    """gcsfs raises its own ``HttpError`` (not an ``OSError``) for a status it
    does not retry: it escaped as is, past ``StorageError`` and past the
    receiver's give-back of a claim whose body it could not read."""
    with vsqs.Queue(gcs_server.url(), storage_options=proxied(gcs_server, gcs_proxy)) as q:
        sent = q.send(b"x")
        body = Quirk(
            lambda method, headers: method == "GET",
            answer=(409, "Conflict", "injected"),
            where=lambda method, path: "alt=media" in path,
        )
        gcs_proxy.quirk = body
        with pytest.raises(vsqs.StorageError, match="injected"):
            q.receive()
        gcs_proxy.quirk = Quirk(
            lambda method, headers: method == "GET",
            answer=(409, "Conflict", "injected"),
            where=lambda method, path: "/o?" in path and "alt=media" not in path,
        )
        with pytest.raises(vsqs.StorageError, match="injected"):
            q.stats()  # a listing
        gcs_proxy.quirk = None
        with vsqs.Queue(q.url, storage_options=gcs_server.storage_options) as other:
            again = other.receive()  # visible at once, the failed claim not counted
        assert again is not None
        assert (again.id, again.receive_count) == (sent, 1)


class GetsThatRaceAClaimer(FailingGets):
    """A ``GET`` of a name of an id in ``ids`` fails after ``meanwhile`` ran:
    another client acts between the claim's read and its give-back."""

    def __init__(self, inner: ObjectIO, meanwhile: Callable[[], None]) -> None:
        super().__init__(inner)
        self.meanwhile = meanwhile

    def get(self, name: str) -> bytes:
        if name[: names.ID_LEN] in self.ids:
            self.ids.clear()  # the other client's GET succeeds
            self.meanwhile()
            raise ConnectionResetError(f"injected: GET {name} reset")
        return super().get(name)


def test_a_give_back_that_loses_to_another_claimer_leaves_the_message_its(
    server: Server,
) -> None:
    """Between a failed body ``GET`` and its give-back, the claim expires and
    another client claims the message: the give-back's rename loses, the
    failing receive raises, and the other client's claim stands (its ack
    deletes the only copy; nothing is given back over it)."""
    store = open_store(server.url(), server.storage_options)
    assert isinstance(store, ObjectStore)
    clock = FakeClock(time.time())
    other = vsqs.Queue(store, clock=clock)
    taken: list[vsqs.Message] = []

    def claim_it() -> None:
        clock.advance(31)  # past the failing claim's visibility timeout
        msg = other.receive(visibility_timeout=600)
        assert msg is not None
        taken.append(msg)

    racing = GetsThatRaceAClaimer(store.io, claim_it)
    with other, vsqs.Queue(ObjectStore(racing), clock=clock) as client:
        sent = other.send(b"x")
        racing.ids = {sent}
        with pytest.raises(vsqs.StorageError, match="injected"):
            client.receive(visibility_timeout=30)
        assert [(m.id, m.receive_count) for m in taken] == [(sent, 2)]
        assert client.receive() is None  # held by the other client, not given back
        taken[0].delete()  # the other client's claim stands
        clock.advance(3600)
        stats = other.stats()
        assert (stats.ready, stats.in_flight, stats.delayed) == (0, 0, 0)
        assert other.receive() is None


def test_unreadable_messages_at_the_head_never_hide_the_messages_behind(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ordered listing stops after HEAD_NAMES visible names (3 here, 500 in
    use): when every one of them is a message this receiver passes over (a
    producer whose objects the consumer may not read), the messages behind
    them were never listed, and never received."""
    from vsqs import _view

    monkeypatch.setattr(_view, "HEAD_NAMES", 3)
    store = open_store(server.url(), server.storage_options)
    assert isinstance(store, ObjectStore)
    failing = FailingGets(store.io)
    clock = FakeClock(time.time())
    with (
        vsqs.Queue(store, clock=clock) as healthy,
        vsqs.Queue(ObjectStore(failing), clock=clock) as q,
    ):
        *bad, good = healthy.send_batch([b"x", b"y", b"z", b"good"], bundle=False)
        failing.ids = set(bad)
        got = None
        for _ in range(len(bad) + 1):  # each failed read raises once, then is passed over
            with suppress(vsqs.StorageError):
                got = q.receive()
            if got is not None:
                break
        assert got is not None and got.id == good


def test_a_get_that_fails_after_a_claim_gives_the_claim_back(server: Server) -> None:
    """Issue 26: one failed body ``GET`` threw away the whole batch."""
    store = open_store(server.url(), server.storage_options)
    assert isinstance(store, ObjectStore)
    failing = FailingGets(store.io)
    clock = FakeClock(time.time())
    healthy, client = open_pair(store, ObjectStore(failing), clock, True)
    sent = healthy.send_batch([b"a", b"b", b"c"], bundle=False)
    failing.ids = {sent[1]}
    # Claimed side by side: the bodies read are returned, the other given back.
    assert [m.id for m in client.receive_batch(10)] == [sent[0], sent[2]]
    failing.ids = set(sent)
    clock.advance(1)  # past the second the client passes over what it could not read
    with pytest.raises(vsqs.StorageError, match="injected"):
        client.receive()  # nothing read: the error is raised
    again = healthy.receive_batch(10)  # visible at once, the failed claims not counted
    assert [(m.id, m.receive_count) for m in again] == [(sent[1], 1)]
    assert healthy.stats().dead_letter == 0  # max_receives=1: nothing nobody received
