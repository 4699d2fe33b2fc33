"""``consume(handler, concurrency=N)``: N handlers at once, a group's messages
one after another in send order, and everything a ``consume`` promises.

Real directories and real threads. Handlers block on events and barriers:
their timeouts only end a test that would otherwise hang. The one bounded
wait that is not a guard is :data:`LINGER`: a grouped handler stays that long
so that a second handler of its group, if one were started, would be seen
running beside it; it decides nothing when the rule holds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

import vsqs
import vsqs.aio
from vsqs import _names as names
from vsqs.testing import FakeClock

#: How long a test waits for what must come (a hang guard, never reached).
GUARD = 60.0
#: How long a grouped handler lingers (see the module docstring).
LINGER = 0.05


class Handlers:
    """A handler that records which messages run at once and in what order,
    and that the test can hold: each message whose body is in ``held`` blocks
    until :meth:`let_go`."""

    def __init__(self, queue_dir: Path, *, held: frozenset[bytes] = frozenset()) -> None:
        self._dir = queue_dir
        self._held = held
        self._changed = threading.Condition()
        self._go = threading.Event()
        self.running: dict[str, vsqs.Message] = {}  # by id
        self.peak = 0
        self.started: list[bytes] = []
        self.overlaps: list[tuple[bytes, bytes]] = []  # two messages of a group at once
        self.unsettled_before: list[bytes] = []  # started while the one before was in the queue
        self.by_group: dict[str | None, list[str]] = defaultdict(list)

    def __call__(self, message: vsqs.Message) -> None:
        with self._changed:
            self.overlaps.extend(
                (other.body, message.body)
                for other in self.running.values()
                if message.group is not None and other.group == message.group
            )
            group_ids = self.by_group[message.group]
            if message.group is not None and group_ids and self._in_queue(group_ids[-1]):
                self.unsettled_before.append(message.body)
            group_ids.append(message.id)
            self.running[message.id] = message
            self.started.append(message.body)
            self.peak = max(self.peak, len(self.running))
            self._changed.notify_all()
        try:
            if message.body in self._held:
                assert self._go.wait(GUARD), "never let go"
            if message.group is not None:
                threading.Event().wait(LINGER)
        finally:
            with self._changed:
                del self.running[message.id]
                self._changed.notify_all()

    def _in_queue(self, message_id: str) -> bool:
        return any(p.name.startswith(message_id) for p in self._dir.iterdir())

    def wait_running(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.running) >= count, GUARD)

    def wait_idle(self) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: not self.running, GUARD)

    def let_go(self) -> None:
        self._go.set()


def send_groups(queue: vsqs.Queue, groups: str, per_group: int) -> None:
    """``per_group`` messages in each of ``groups``, interleaved: body ``A-0``
    is group A's first."""
    for i in range(per_group):
        for g in groups:
            queue.send(f"{g}-{i}".encode(), group=g)


def bodies_of(group: str, count: int) -> list[bytes]:
    return [f"{group}-{i}".encode() for i in range(count)]


def consume_in_thread(run: Callable[[], int]) -> tuple[threading.Thread, list[int]]:
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(run()), daemon=True)
    worker.start()
    return worker, done


def test_four_handlers_run_at_once_and_each_groups_messages_in_order_one_at_a_time(
    tmp_path: Path,
) -> None:
    """Five groups of four, interleaved. The first receive takes one message
    of each of four groups: their handlers wait at a barrier of four, which
    only four handlers at once can pass. Later receives take several
    consecutive messages of a group: they run one after another."""
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=3600)
    send_groups(q, "ABCDE", 4)
    barrier = threading.Barrier(4, timeout=GUARD)
    firsts = {b"A-0", b"B-0", b"C-0", b"D-0"}
    record = Handlers(tmp_path / "q")

    def handler(message: vsqs.Message) -> None:
        if message.body in firsts:
            barrier.wait()
        record(message)

    assert q.consume(handler, concurrency=4, max_messages=20) == 20
    assert record.peak <= 4 and not barrier.broken  # the barrier saw four at once
    assert record.overlaps == [] and record.unsettled_before == []
    for g in "ABCDE":
        assert [b for b in record.started if b.startswith(g.encode())] == bodies_of(g, 4)
    assert (q.stats().ready, q.stats().in_flight) == (0, 0)


def test_a_batch_of_one_group_runs_in_order_and_never_side_by_side(tmp_path: Path) -> None:
    """One group only: every receive returns consecutive messages of it, and
    three of four threads stay idle; each message starts once the one
    before it was deleted."""
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=3600)
    send_groups(q, "G", 9)
    record = Handlers(tmp_path / "q")
    assert q.consume(record, concurrency=4, max_messages=9) == 9
    assert record.started == bodies_of("G", 9)
    assert (record.peak, record.overlaps, record.unsettled_before) == (1, [], [])


def test_a_failure_gives_back_the_rest_of_its_lane_behind_the_groups_head(tmp_path: Path) -> None:
    """G-0 G-1 G-2 come in one batch; G-0 fails once. G-1 and G-2 are given
    back unhandled (their receive count as before, and not counted against
    ``max_messages``), so G-0's retry still comes before them."""
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=3600)
    send_groups(q, "G", 3)
    seen: list[tuple[bytes, int]] = []

    def handler(message: vsqs.Message) -> None:
        seen.append((message.body, message.receive_count))
        if message.body == b"G-0" and message.receive_count == 1:
            raise RuntimeError("first attempt fails")

    done = q.consume(handler, concurrency=4, max_messages=4, retry_delay=0.01, jitter=lambda: 0)
    assert done == 3
    assert seen == [(b"G-0", 1), (b"G-0", 2), (b"G-1", 1), (b"G-2", 1)]
    assert (q.stats().ready, q.stats().in_flight) == (0, 0)


class CountsExtends(vsqs.MemoryStore):
    """A ``MemoryStore`` that counts the extends (moves of a held name to a
    later expiry) of each message, and says when one is done."""

    def __init__(self) -> None:
        super().__init__()
        self.extends: dict[str, int] = defaultdict(int)
        self.changed = threading.Condition()

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        held, later = names.parse(src), names.parse(dst)
        if held and later and held.expiry_ms is not None and later.expiry_ms is not None:
            with self.changed:
                self.extends[held.id] += 1
                self.changed.notify_all()


def test_the_heartbeat_keeps_a_message_waiting_behind_its_group_mate_hidden() -> None:
    """G-0 and G-1 come in one batch; G-0's handler returns only once G-1,
    which waits behind it, was extended twice: its visibility timeout (1.5 s)
    was renewed while it was not handled yet, so it is handled once, on its
    first receive."""
    store = CountsExtends()
    q = vsqs.Queue(store, visibility_timeout=1.5)
    send_groups(q, "G", 2)
    seen: list[tuple[bytes, int]] = []

    def handler(message: vsqs.Message) -> None:
        seen.append((message.body, message.receive_count))
        if message.body == b"G-0":
            assert q.peek(10) == []  # G-1 is held too
            with store.changed:
                assert store.changed.wait_for(
                    lambda: any(n >= 2 for i, n in store.extends.items() if i != message.id),
                    GUARD,
                ), dict(store.extends)

    assert q.consume(handler, concurrency=4, max_messages=2) == 2
    assert seen == [(b"G-0", 1), (b"G-1", 1)]


def test_a_concurrent_consume_of_failing_messages_ends_when_idle(clock: FakeClock) -> None:
    """A failure is not activity, with handlers side by side too (their
    retries wait longer than the clock ever moves here)."""
    q = vsqs.Queue(vsqs.MemoryStore(), clock=clock, visibility_timeout=3600)
    q.send_batch([b"bad", b"bad too"])

    def handler(message: vsqs.Message) -> None:
        clock.advance(10)  # past the idle timeout
        raise RuntimeError("bad")

    assert q.consume(handler, concurrency=4, idle_timeout=5, retry_delay=300) == 0
    assert q.peek(10) == []  # both released, to be retried after their delay
    clock.advance(301)
    assert sorted(m.receive_count for m in q.receive_batch(10)) == [2, 2]


def test_max_messages_bounds_what_concurrent_handlers_receive(tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=3600)
    q.send_batch([f"m{i}".encode() for i in range(10)])
    assert q.consume(lambda m: None, concurrency=4, max_messages=6) == 6
    assert (q.stats().ready, q.stats().in_flight) == (4, 0)


def test_stop_lets_the_handlers_under_way_finish_and_receives_nothing_more(
    tmp_path: Path,
) -> None:
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=3600)
    bodies = [f"m{i}".encode() for i in range(6)]
    q.send_batch(bodies)
    record = Handlers(tmp_path / "q", held=frozenset(bodies))
    stop = threading.Event()
    worker, done = consume_in_thread(lambda: q.consume(record, concurrency=4, stop=stop))
    record.wait_running(4)
    assert q.stats().in_flight == 4
    stop.set()
    record.let_go()
    worker.join(GUARD)
    assert done == [4] and sorted(record.started) == bodies[:4]
    assert (q.stats().ready, q.stats().in_flight) == (2, 0)


def test_an_interruption_in_a_handler_thread_releases_every_message_in_hand(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler raising ``SystemExit`` in its thread ends the ``consume`` in
    the calling thread: every message in hand is released at once (the one
    still blocked too), and the line of an interruption is logged."""
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=3600)
    q.send_batch([b"blocks", b"blocks too", b"exits"])
    record = Handlers(tmp_path / "q", held=frozenset({b"blocks", b"blocks too"}))

    def handler(message: vsqs.Message) -> None:
        if message.body == b"exits":
            record.wait_running(2)
            raise SystemExit(3)
        record(message)

    with caplog.at_level(logging.WARNING, logger="vsqs"), pytest.raises(SystemExit):
        q.consume(handler, concurrency=3)
    assert (q.stats().ready, q.stats().in_flight) == (3, 0)
    assert any(
        r.getMessage().endswith(
            "consume stopped by SystemExit: handled 0 (0 succeeded), "
            "released 3 in hand (visible again now)"
        )
        for r in caplog.records
    )
    record.let_go()  # their handlers return: their settles change nothing
    record.wait_idle()
    assert sorted(m.receive_count for m in q.receive_batch(3)) == [2, 2, 2]


@pytest.mark.parametrize("concurrency", [0, -1, True, 2.0, "4"])
def test_a_bad_concurrency_is_refused_before_anything_is_received(
    tmp_path: Path, concurrency: object
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    q.send(b"x")
    says = f"concurrency must be a positive int, not {concurrency!r}"
    with pytest.raises(vsqs.InvalidArgument, match="^" + says.replace(".", r"\.") + "$"):
        q.consume(lambda m: None, concurrency=concurrency)  # type: ignore[arg-type]

    async def in_asyncio() -> None:
        async with vsqs.aio.Queue(q) as aq:
            await aq.consume(lambda m: None, concurrency=concurrency)  # type: ignore[arg-type]

    with pytest.raises(vsqs.InvalidArgument, match="^" + says.replace(".", r"\.") + "$"):
        asyncio.run(in_asyncio())
    assert q.stats().ready == 1
