"""fork() while threads of the parent are inside vsqs: the child never waits
for a lock one of them held, and its queues work (docs/guarantees.md, "After fork")."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import vsqs
from vsqs import _forks

from .support.forks import BOUND, in_a_child

#: How long a child may take to do its work and exit (generous: a hung child never exits).


@contextmanager
def held_inside(store: vsqs.Store, method: str) -> Iterator[threading.Event]:
    """The first call of ``store.<method>`` waits (inside whatever locks its
    caller holds) until the block ends; yields an event set once it waits."""
    real = getattr(store, method)
    inside, go_on = threading.Event(), threading.Event()

    def call(*args: Any, **kwargs: Any) -> Any:
        if not inside.is_set():
            inside.set()
            assert go_on.wait(BOUND)
        return real(*args, **kwargs)

    setattr(store, method, call)
    try:
        yield inside
    finally:
        go_on.set()
        delattr(store, method)


def in_a_thread(work: Callable[[], object]) -> threading.Thread:
    """Run ``work`` in a daemon thread; whatever it raises is its own business."""

    def run() -> None:
        with suppress(vsqs.VsqsError):
            work()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def round_trip(q: vsqs.Queue) -> None:
    """Send a batch and a message, receive and delete them all (the child's work)."""
    q.send_batch([b"child 1", b"child 2"])
    q.send(b"child 3")
    got: list[bytes] = []
    while len(got) < 3:
        message = q.receive(wait=BOUND)
        assert message is not None
        got.append(message.body)
        message.delete()
    assert sorted(got) == [b"child 1", b"child 2", b"child 3"]


def test_a_child_forked_while_a_receive_lists_receives(tmp_path: Path) -> None:
    """The receiver's lock is held across a listing."""
    store = vsqs.LocalStore(str(tmp_path / "q"))
    with vsqs.Queue(store) as q:
        with held_inside(store, "list") as inside:
            thread = in_a_thread(q.receive)
            assert inside.wait(BOUND)
            in_a_child(lambda: round_trip(q))
        thread.join(BOUND)


def test_a_child_forked_while_a_message_is_extended_acks_it(tmp_path: Path) -> None:
    """A message's own lock is held across its extend."""
    store = vsqs.LocalStore(str(tmp_path / "q"))
    with vsqs.Queue(store) as q:
        q.send(b"held")
        message = q.receive()
        assert message is not None
        with held_inside(store, "rename") as inside:
            thread = in_a_thread(lambda: message.extend(60))
            assert inside.wait(BOUND)
            in_a_child(message.delete)  # the parent's rename has not happened yet
        thread.join(BOUND)


def test_a_child_forked_while_a_queue_closes_under_a_long_poll_closes_it(
    tmp_path: Path,
) -> None:
    """close() holds the receiver's count of receives while it wakes them;
    the child has none of the parent's receives to wait for."""
    store = vsqs.LocalStore(str(tmp_path / "q"))
    q = vsqs.Queue(store)
    with held_inside(store, "list") as listing:  # the receive is under way (and counted)
        polling = in_a_thread(lambda: q.receive(wait=3600))
        assert listing.wait(BOUND)
    with held_inside(store, "wake") as inside:
        closing = in_a_thread(q.close)
        assert inside.wait(BOUND)

        def child() -> None:
            q.close()
            with vsqs.Queue(tmp_path / "q") as again:
                round_trip(again)

        in_a_child(child)
    closing.join(BOUND)
    polling.join(BOUND)


def test_a_child_forked_during_a_send_batch_sends_and_receives(tmp_path: Path) -> None:
    store = vsqs.LocalStore(str(tmp_path / "q"))
    with vsqs.Queue(store) as q:
        with held_inside(store, "sync_files") as inside:  # a durable batch, staged
            thread = in_a_thread(lambda: q.send_batch([b"parent 1", b"parent 2"], bundle=False))
            assert inside.wait(BOUND)
            in_a_child(lambda: round_trip(q))
        thread.join(BOUND)
        assert sorted(m.body for m in q.receive_batch(10)) == [b"parent 1", b"parent 2"]


def test_a_child_forked_while_every_vsqs_lock_is_held_works(tmp_path: Path) -> None:
    """A thread of the parent holds every lock and condition vsqs made (of
    queues on a directory, in memory and on an object store, and their
    clients' shared ones) when the child forks; the child uses all three."""
    local = vsqs.Queue(tmp_path / "q")
    memory = vsqs.Queue(vsqs.MemoryStore())
    objects = vsqs.Queue(f"memory://{tmp_path.name}/fork/q")
    for q in (local, memory, objects):
        q.send(b"warm")  # every lock made
        warm = q.receive()
        assert warm is not None
        warm.delete()
    holding, release = threading.Event(), threading.Event()
    locks = [each for each in _forks.made() if hasattr(each, "acquire")]
    assert len(locks) >= 8

    def hold_them_all() -> None:
        for each in locks:
            each.acquire()
        holding.set()
        release.wait(BOUND)
        for each in locks:
            each.release()

    thread = threading.Thread(target=hold_them_all, daemon=True)
    thread.start()
    try:
        assert holding.wait(BOUND)

        def child() -> None:
            for q in (local, memory, objects):
                round_trip(q)

        in_a_child(child)
    finally:
        release.set()
        thread.join(BOUND)
        for q in (local, memory, objects):
            q.close()


#: Modules that make a lock of their own and re-create it in a forked child
#: themselves, and where a lock is only ever set (never waited on inside vsqs).
_OWN_RESET = {
    "_fanout.py": "re-creates its pool and lock after fork",
    "_names.py": "IdGenerator._reset re-creates its lock after fork",
    "_forks.py": "makes them",
    "aio.py": "a receive's stop event is only set and read",
    "cli/_interrupt.py": "the command line's stop event is only set and read",
    "cli/_demo.py": "the demo's stop event is only set and read",
}


def test_every_lock_vsqs_makes_is_free_in_a_forked_child() -> None:
    """A lock made with ``threading`` directly would stay held in a child."""
    package = Path(vsqs.__file__).parent
    made = re.compile(r"threading\.(Lock|RLock|Condition|Semaphore|BoundedSemaphore|Event)\(")
    found = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        # the suites' threads are the tests'
        if str(path.relative_to(package)) not in _OWN_RESET and path.parent.name != "testing"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if made.search(line)
    ]
    assert found == [], "make these with vsqs._forks"
