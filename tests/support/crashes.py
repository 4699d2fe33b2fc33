"""A client that crashes at its k-th storage call, the scenarios it crashes
in, and the recovery check that follows (tests/test_crashes.py sweeps every
call; tests/test_os_faults.py, tests/test_object_faults.py and
tests/test_s3_faults.py inject their faults into the same scenarios).

``CrashingStore`` wraps a real store: its ``crash_at``-th call and every
later one raise :class:`Crash` (a ``BaseException``, like a process death,
so no ``except Exception`` in the library can swallow it); a crash during
``write_new`` leaves a torn, half-written object."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores import _moves
from vsqs.testing import FakeClock


class Crash(BaseException):
    """The simulated death of the client process."""


class CrashingStore(vsqs.Store):
    """Delegates to ``inner``; the ``crash_at``-th counted call and all later ones crash."""

    def __init__(self, inner: vsqs.Store, crash_at: int | None) -> None:
        self.inner, self.crash_at, self.calls = inner, crash_at, 0
        self.url = inner.url
        self.atomic_rename = inner.atomic_rename  # type: ignore[misc]
        self.durable = inner.durable  # type: ignore[misc]

    def _step(self) -> bool:
        """Count a call; return True if this call is the one that crashes."""
        self.calls += 1
        if self.crash_at is not None and self.calls > self.crash_at:
            raise Crash(f"dead since call {self.crash_at}")
        return self.crash_at is not None and self.calls == self.crash_at

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._step():
            raise Crash(f"crashed before {method}{args!r:.60}")
        return getattr(self.inner, method)(*args, **kwargs)

    def ensure(self, create: bool) -> bool:
        return self.inner.ensure(create)

    def sibling(self, name: str) -> vsqs.Store:
        return CrashingStore(self.inner.sibling(name), None).share_fate(self)

    def share_fate(self, other: CrashingStore) -> CrashingStore:
        """Make this store count and crash together with ``other`` (one process)."""
        self._step = other._step  # type: ignore[method-assign]
        return self

    def list(self, *, prefix: str = "", settle: bool = False) -> Iterable[str]:
        return list(self._call("list", prefix=prefix, settle=settle))

    def read(self, name: str) -> bytes:
        return self._call("read", name)  # type: ignore[no-any-return]

    def creates_atomically(self, fsync: bool) -> bool:
        return self.inner.creates_atomically(fsync)

    def write_new(self, name: str, data: bytes, *, fsync: bool) -> None:
        if self._step():
            if not self.inner.creates_atomically(fsync):  # an atomic create leaves nothing
                self.inner.write_new(name, data[: len(data) // 2], fsync=False)  # torn write
            raise Crash(f"crashed while writing {name}")
        self.inner.write_new(name, data, fsync=fsync)

    def rename(self, src: str, dst: str) -> None:
        self._call("rename", src, dst)

    def split(self, src: str, first: str, second: str) -> None:
        self._call("split", src, first, second)

    def delete(self, name: str, *, known: bool = False) -> None:
        self._call("delete", name, known=known)

    def sync_files(self, names_: Iterable[str]) -> None:
        self._call("sync_files", list(names_))

    def sync_names(self) -> None:
        self._call("sync_names")

    def change_token(self) -> Hashable:
        return self.inner.change_token()

    def changes(self, name_length: int) -> list[tuple[str, bool]] | None:
        return self.inner.changes(name_length)

    def wait_for_change(self, token: Hashable, timeout: float) -> bool:
        return self.inner.wait_for_change(token, timeout)


#: What a sibling id keeps of the id it stands for: the ms and seq.
SIBLING_PREFIX = 19


BODY = b"payload-" + bytes(range(256)) * 4


def message_names(store: vsqs.Store) -> dict[str, list[str]]:
    """Names of each message id in a queue."""
    by_id: dict[str, list[str]] = {}
    for name in store.list():
        parsed = names.parse(name)
        if parsed is not None and parsed.state != names.NEW:
            by_id.setdefault(parsed.id, []).append(name)
    return by_id


class Expect:
    """What recovery must find: ids that must be delivered again, ids gone for good.

    A scenario records each fact as soon as it is certain (an operation that
    returned), so whatever the crash point, the sets hold.
    """

    def __init__(self) -> None:
        self.survive: set[str] = set()
        self.gone: set[str] = set()
        #: Ids that carry an origin record wherever they are in the dead-letter queue.
        self.dead_lettered: set[str] = set()

    def uncertain(self, message_id: str) -> None:
        self.survive.discard(message_id)

    def deleted(self, message_id: str) -> None:
        self.gone.add(message_id)


Scenario = Callable[[vsqs.Queue, vsqs.Queue, Expect], None]


def finish_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moves and splits a crash left half done are finished by the next
    listing (``FINISH_AFTER`` is -1): recovery need not wait for their age."""
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)


def send(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.add(healthy.send(BODY))
    expect.survive.add(crashing.send(BODY))


def send_batch(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.add(healthy.send(BODY))
    expect.survive.update(crashing.send_batch([BODY] * 3))


def delayed_send(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.add(healthy.send(BODY))
    expect.survive.add(crashing.send(BODY, delay=5))


def receive(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.update(healthy.send_batch([BODY] * 3))
    crashing.receive_batch(2)


def receive_and_delete(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.update(healthy.send_batch([BODY] * 2))
    for msg in crashing.receive_batch(2):
        expect.uncertain(msg.id)
        msg.delete()
        expect.deleted(msg.id)


def extend(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.update(healthy.send_batch([BODY] * 2))
    for msg in healthy.receive_batch(2):
        crashing.extend(msg.receipt, 60)  # type: ignore[arg-type]


def release(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.update(healthy.send_batch([BODY] * 2))
    for msg in healthy.receive_batch(2):
        crashing.release(msg.receipt, delay=3)  # type: ignore[arg-type]


def delete(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    expect.survive.update(healthy.send_batch([BODY] * 2))
    for msg in healthy.receive_batch(2):
        expect.uncertain(msg.id)
        crashing.delete(msg.receipt)  # type: ignore[arg-type]
        expect.deleted(msg.id)


def purge(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    healthy.send_batch([BODY] * 3)  # any subset may be purged; the rest must be intact
    crashing.purge()


def dead_letter(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    poison = healthy.send(BODY)
    expect.survive.add(poison)  # in the source or in the dead-letter queue
    expect.dead_lettered.add(poison)
    crashing.receive(visibility_timeout=0)
    crashing.receive(visibility_timeout=0)  # the second receive moves it


def redrive(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    dlq = healthy.store.sibling("dlq")
    with vsqs.Queue(dlq) as dead:
        expect.survive.update(dead.send_batch([BODY] * 2))
    # On the test's clock, so every run sends the same requests.
    with vsqs.Queue(crashing.store.sibling("dlq"), clock=crashing.clock) as source:
        vsqs.redrive(source, crashing)


def redrive_dead_letters(healthy: vsqs.Queue, crashing: vsqs.Queue, expect: Expect) -> None:
    """Dead letters with their origin records go back: the records go too."""
    poisons = healthy.send_batch([BODY] * 2)
    expect.survive.update(poisons)
    expect.dead_lettered.update(poisons)
    healthy.receive_batch(2, visibility_timeout=0)
    # Both dead-lettered, with their records. Where the healthy client's calls
    # fail too (tests/test_os_faults.py), a claim whose read failed was given
    # back uncounted: it is received here once more, never dead-lettered.
    assert all(m.receive_count == 1 for m in healthy.receive_batch(2))
    with vsqs.Queue(crashing.store.sibling("dlq"), clock=crashing.clock) as source:
        vsqs.redrive(source, crashing)


SCENARIOS: dict[str, Scenario] = {
    f.__name__: f
    for f in (
        send,
        send_batch,
        delayed_send,
        receive,
        receive_and_delete,
        extend,
        release,
        delete,
        purge,
        dead_letter,
        redrive,
        redrive_dead_letters,
    )
}


def open_pair(
    store: vsqs.Store, crashing: vsqs.Store, clock: FakeClock, durable: bool
) -> tuple[vsqs.Queue, vsqs.Queue]:
    config = {"clock": clock, "max_receives": 1, "dead_letter": "dlq", "durable": durable}
    vsqs.Queue(store.sibling("dlq")).close()  # exists before counting calls
    return vsqs.Queue(store, **config), vsqs.Queue(crashing, **config)  # type: ignore[arg-type]


def recover_and_check(store: vsqs.Store, clock: FakeClock, expect: Expect) -> None:
    clock.advance(3600 * 2)  # past every visibility timeout, delay and the leftover grace
    delivered: Counter[str] = Counter()
    dead_lettered = {i[:SIBLING_PREFIX] for i in expect.dead_lettered}
    for queue_store in (store, store.sibling("dlq")):
        with vsqs.Queue(queue_store, clock=clock) as fresh:
            fresh.gc()
            by_id = message_names(queue_store)
            assert all(len(n) == 1 for n in by_id.values()), f"two names of one message: {by_id}"
            leftovers = [n for n in queue_store.list() if n.endswith(names.NEW_SUFFIX)]
            assert not leftovers, "a .new leftover survived gc"
            records = {i for n in queue_store.list() if (i := names.origin_id(n))}
            assert records <= set(by_id), f"gc left origin records of messages gone: {records}"
            in_dlq = queue_store is not store
            while (msg := fresh.receive(visibility_timeout=600)) is not None:
                assert msg.body == BODY, "a partial message became visible"
                origin = msg.dead_lettered  # read: the ack removes it with the message
                if not in_dlq:
                    assert origin is None, "an origin record followed a redrive"
                elif msg.id[:SIBLING_PREFIX] in dead_lettered:
                    assert origin is not None, f"dead letter {msg.id} lost its origin record"
                    assert origin.source == store.url and origin.receive_count >= 1
                delivered[msg.id] += 1
                msg.delete()
    # A move whose create's outcome was unknown publishes under a sibling id
    # (same ms and seq, another nonce): the same message.
    expected = expect.survive | expect.gone
    known = {i[:SIBLING_PREFIX]: i for i in expected}
    delivered = Counter(
        {i if i in expected else known.get(i[:SIBLING_PREFIX], i): n for i, n in delivered.items()}
    )
    assert expect.survive <= set(delivered), f"lost {expect.survive - set(delivered)}"
    assert not expect.gone & set(delivered), "an acknowledged message came back"
