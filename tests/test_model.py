"""A Hypothesis state machine that drives a queue and a plain model side by side.

Random sends (with delays), receives, batch receives, deletes, extends and
releases with receipts drawn from *every* receipt ever issued (so stale ones
too), peeks, stats, purges and clock jumps, on a local directory, a
``MemoryStore`` and every object store (``memory://``, moto S3,
fake-gcs-server). After every step the store's names must be exactly the
model's.

The model's only shared knowledge with the library is the specification:
time is whole ms, an expiry rounds the clock up (a zero wait rounds it down),
visibility rounds it down.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import vsqs
from vsqs import _names as names
from vsqs.stores._registry import open_store
from vsqs.testing import FakeClock

from .support.servers import Server

DURATIONS = st.sampled_from([0, 0.001, 0.25, 1, 2.5, 30])
JUMPS = st.sampled_from([0.0005, 0.001, 0.2, 1, 2.5, 31])
BODIES = st.binary(max_size=20)


@dataclass
class Model:
    """One message as the specification says it should be."""

    id: str
    body: bytes
    count: int = 0
    visible_at: int | None = None  # ms; None: ready since it was sent
    version: int = 0  # every rename gives the message a name with the next version

    @property
    def name(self) -> str:
        if self.visible_at is None:
            return self.id
        return names.invisible_name(self.id, self.visible_at, self.count, self.version)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(1_750_000_000.0)
        self.store = self.make_store()
        self.queue = vsqs.Queue(self.store, clock=self.clock, visibility_timeout=2.5)
        self.messages: dict[str, Model] = {}
        self.receipts: list[str] = []

    def make_store(self) -> vsqs.Store:
        raise NotImplementedError

    def teardown(self) -> None:
        self.queue.close()

    # -- the specification's arithmetic ---------------------------------------
    def offset(self) -> int:
        """The ms names are written after the clock (on object stores, the
        store's clock as this client measured it; 0 on the others)."""
        return -self.queue.store.ms_clock(self.clock).local_ms(0)

    def now(self) -> int:
        return int(self.clock() * 1000) + self.offset()

    def expiry(self, seconds: float) -> int:
        if int(seconds * 1000) == 0:
            return self.now()
        return math.ceil(self.clock() * 1000) + self.offset() + int(seconds * 1000)

    def visible(self) -> list[Model]:
        now = self.now()
        ready = [m for m in self.messages.values() if m.visible_at is None or m.visible_at <= now]
        return sorted(ready, key=lambda m: m.id)

    def by_receipt(self, receipt: str) -> Model | None:
        found = [m for m in self.messages.values() if m.name == receipt]
        return found[0] if found else None

    # -- rules ----------------------------------------------------------------
    @rule(body=BODIES, delay=DURATIONS)
    def send(self, body: bytes, delay: float) -> None:
        visible_at = None if delay == 0 else self.expiry(delay)
        message_id = self.queue.send(body, delay=delay)
        assert all(message_id > other for other in self.messages)
        self.messages[message_id] = Model(message_id, body, 0, visible_at, int(delay != 0))

    @rule(bodies=st.lists(BODIES, max_size=4))
    def send_batch(self, bodies: list[bytes]) -> None:
        ids = self.queue.send_batch(bodies, bundle=False)  # the model: an object per message
        assert len(ids) == len(bodies) and ids == sorted(ids)
        for message_id, body in zip(ids, bodies, strict=True):
            self.messages[message_id] = Model(message_id, body)

    def _received(self, got: list[vsqs.Message], expected: list[Model], vt: float) -> None:
        assert [(m.id, m.body) for m in got] == [(m.id, m.body) for m in expected]
        for msg, model in zip(got, expected, strict=True):
            model.count += 1
            model.version += 1
            model.visible_at = self.expiry(vt)
            assert msg.receive_count == model.count
            assert msg.receipt == model.name
            self.receipts.append(msg.receipt)

    @rule(vt=DURATIONS)
    def receive(self, vt: float) -> None:
        expected = self.visible()[:1]
        got = self.queue.receive(visibility_timeout=vt)
        self._received([] if got is None else [got], expected, vt)

    @rule(n=st.integers(1, 4), vt=DURATIONS)
    def receive_batch(self, n: int, vt: float) -> None:
        expected = self.visible()[:n]
        self._received(self.queue.receive_batch(n, visibility_timeout=vt), expected, vt)

    def _moved(self, model: Model | None, new_expiry: int) -> None:
        assert model is not None
        model.visible_at, model.version = new_expiry, model.version + 1

    @precondition(lambda self: self.receipts)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        receipt = data.draw(st.sampled_from(self.receipts))
        model = self.by_receipt(receipt)
        try:
            self.queue.delete(receipt)
        except vsqs.ReceiptExpired:
            assert model is None
        else:
            assert model is not None
            del self.messages[model.id]

    @precondition(lambda self: self.receipts)
    @rule(data=st.data(), vt=DURATIONS)
    def extend(self, data: st.DataObject, vt: float) -> None:
        receipt = data.draw(st.sampled_from(self.receipts))
        model = self.by_receipt(receipt)
        new_expiry = self.expiry(vt)
        try:
            msg = self.queue.extend(receipt, vt)
        except vsqs.ReceiptExpired:
            assert model is None
            return
        self._moved(model, new_expiry)
        assert model is not None and msg.receipt == model.name and msg.body == model.body
        self.receipts.append(msg.receipt)

    @precondition(lambda self: self.receipts)
    @rule(data=st.data(), delay=DURATIONS)
    def release(self, data: st.DataObject, delay: float) -> None:
        receipt = data.draw(st.sampled_from(self.receipts))
        model = self.by_receipt(receipt)
        new_expiry = self.expiry(delay)
        try:
            self.queue.release(receipt, delay=delay)
        except vsqs.ReceiptExpired:
            assert model is None
            return
        self._moved(model, new_expiry)

    @rule(seconds=JUMPS)
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(n=st.integers(1, 5))
    def peek(self, n: int) -> None:
        expected = self.visible()[:n]
        got = self.queue.peek(n)
        assert [(m.id, m.body, m.receive_count) for m in got] == [
            (m.id, m.body, m.count) for m in expected
        ]

    @rule()
    def stats(self) -> None:
        now = self.now()
        stats = self.queue.stats()
        hidden = [m for m in self.messages.values() if m not in self.visible()]
        assert stats.ready == len(self.visible())
        assert stats.in_flight == sum(1 for m in hidden if m.count > 0)
        assert stats.delayed == sum(1 for m in hidden if m.count == 0)
        assert stats.writing == 0
        if hidden:
            assert stats.next_visible_in is not None
            assert round(stats.next_visible_in * 1000) == min(m.visible_at for m in hidden) - now  # type: ignore[type-var, operator]

    @precondition(lambda self: len(self.messages) < 3)
    @rule()
    def purge(self) -> None:
        assert self.queue.purge() == len(self.messages)
        self.messages.clear()

    @invariant()
    def storage_matches_the_model(self) -> None:
        on_storage = sorted(n for n in self.store.list() if n != names.CONFIG_NAME)
        assert on_storage == sorted(m.name for m in self.messages.values())


class MemoryQueueMachine(QueueMachine):
    def make_store(self) -> vsqs.Store:
        return vsqs.MemoryStore("q")


class LocalQueueMachine(QueueMachine):
    def make_store(self) -> vsqs.Store:
        self.tmp = tempfile.mkdtemp(prefix="vsqs-model-")
        return vsqs.LocalStore(f"{self.tmp}/q")

    def teardown(self) -> None:
        super().teardown()
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


SETTINGS = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestMemoryQueue = MemoryQueueMachine.TestCase
TestMemoryQueue.settings = SETTINGS
TestLocalQueue = pytest.mark.slow(LocalQueueMachine.TestCase)  # 150 runs on real directories
TestLocalQueue.settings = SETTINGS


@pytest.mark.parametrize(
    ("server_fixture", "examples"),
    [
        pytest.param("memory_server", 150, marks=pytest.mark.slow),  # in process, 150 runs
        ("s3_server", 10),
        ("ceph_server", 10),
        ("gcs_server", 60),
    ],
)
def test_object_store_queue_matches_the_model(
    request: pytest.FixtureRequest, server_fixture: str, examples: int
) -> None:
    server: Server = request.getfixturevalue(server_fixture)

    class ObjectQueueMachine(QueueMachine):
        def make_store(self) -> vsqs.Store:
            return open_store(server.url(), server.storage_options)

    run_state_machine_as_test(
        ObjectQueueMachine,
        settings=settings(max_examples=examples, stateful_step_count=30, deadline=None),
    )
