from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs import _candidates as candidates
from vsqs import _names as names
from vsqs._candidates import STALE_AFTER
from vsqs._view import YOUNG_MS
from vsqs.testing import FakeClock, QueueTests, StoreTests

from .support.backends import BY_ID, OnBackend

CHECKOUT = str(Path(__file__).resolve().parents[1])


class TestLocalStore(OnBackend, QueueTests, StoreTests):
    backend = BY_ID["local"]


def test_queue_by_path_and_file_url(tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "jobs") as by_path:
        by_path.send(b"x")
    with vsqs.Queue(f"file://{tmp_path}/jobs", create=False) as by_url:
        msg = by_url.receive()
        assert msg is not None and msg.body == b"x"
    assert (tmp_path / "jobs" / names.CONFIG_NAME).is_file()


def test_relative_path_resolves_against_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with vsqs.Queue("sub/../jobs") as q:
        assert q.url == str(tmp_path / "jobs")


@pytest.mark.parametrize(
    "location",
    ["", "   ", "a\x00b", "/", "nosuchscheme://bucket/q", b"/tmp/q", 42, None, "/tmp/.."],
)
def test_bad_queue_locations_are_refused(location: object) -> None:
    with pytest.raises((vsqs.InvalidQueueName, vsqs.UnsupportedStore)):
        vsqs.Queue(location)


def test_a_file_in_the_way_is_not_a_queue(tmp_path: Path) -> None:
    blocker = tmp_path / "jobs"
    blocker.write_bytes(b"i am a file")
    with pytest.raises(vsqs.NotAQueue):
        vsqs.Queue(blocker)
    assert blocker.read_bytes() == b"i am a file"


def test_a_foreign_directory_config_is_not_clobbered(tmp_path: Path) -> None:
    queue_dir = tmp_path / "jobs"
    queue_dir.mkdir()
    (queue_dir / names.CONFIG_NAME).write_text('{"format": 1, "visibility_timeout": -5}')
    with pytest.raises(vsqs.QueueConfigError):
        vsqs.Queue(queue_dir)
    assert (queue_dir / names.CONFIG_NAME).read_text().endswith("-5}")


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A directory nobody may create files in, even root (immutable flag)."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("chattr +i is not supported here")
        try:
            yield path
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)


def test_read_only_directory_gives_a_permission_error(read_only_dir: Path) -> None:
    with pytest.raises(vsqs.QueuePermissionError):
        vsqs.Queue(read_only_dir)
    assert list(read_only_dir.iterdir()) == []


def test_messages_are_not_readable_through_symlinks(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"do not leak")
    with vsqs.Queue(tmp_path / "jobs") as q:
        link = tmp_path / "jobs" / names.ids.next_id(1_000_000_000_000)
        link.symlink_to(secret)
        assert q.receive() is None
        assert q.peek() == [] and q.stats().ready == 0
        assert q.purge() == 0
        assert link.is_symlink() and secret.read_bytes() == b"do not leak"


def test_a_directory_named_like_a_message_is_ignored(tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "jobs") as q:
        fake = tmp_path / "jobs" / names.ids.next_id(1_000_000_000_000)
        fake.mkdir()
        assert q.receive() is None and q.purge() == 0
        assert fake.is_dir()


def test_message_files_do_not_widen_permissions(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        with vsqs.Queue(tmp_path / "jobs") as q:
            q.send(b"x")
            (name,) = [p for p in (tmp_path / "jobs").iterdir() if p.name != names.CONFIG_NAME]
            assert name.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


class TestLocalStoreWithoutNotifications(OnBackend, QueueTests, StoreTests):
    """The same contract where receivers must list to see arrivals (as on shared disks)."""

    backend = BY_ID["local-no-feed"]


class CountingStore(vsqs.LocalStore):
    """A real local store that counts its listings and can drop its feed's events."""

    def __init__(self, path: str, **kwargs: bool) -> None:
        super().__init__(path, **kwargs)
        self.listings = 0
        self.lose_events = False

    def list(self) -> Iterator[str]:
        self.listings += 1
        return super().list()

    def changes(self, name_length: int) -> list[tuple[str, bool]] | None:
        changed = super().changes(name_length)
        return None if self.lose_events and changed else changed


#: Seconds a receive that must be woken by a feed waits at most (a bound, not a pace).
WAIT = 30.0


def start_feed(consumer: vsqs.Queue, producer: vsqs.Queue) -> None:
    """A receiver starts its feed at its second listing (the first drains a backlog)."""
    assert consumer.receive() is None
    producer.send(b"wake")
    msg = consumer.receive(wait=5)
    assert msg is not None and msg.body == b"wake"
    msg.delete()
    assert consumer.store._feed is not None  # type: ignore[attr-defined]


def test_a_receiver_learns_new_messages_from_the_feed_without_listing(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path / "q"))
    with vsqs.Queue(store, durable=False) as consumer, vsqs.Queue(store.path) as producer:
        start_feed(consumer, producer)
        before, started = store.listings, time.monotonic()
        for i in range(100):
            producer.send(str(i))
            msg = consumer.receive()
            assert msg is not None and msg.body == str(i).encode()
            msg.delete()
        refreshes = 1 + int((time.monotonic() - started) / STALE_AFTER)  # a busy machine's too
        assert store.listings - before <= refreshes  # at most the once-a-second refresh


def test_the_first_listing_drains_a_backlog_without_a_feed(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path / "q"))
    clock = FakeClock(time.time())  # no young names whatever the machine's speed
    with (
        vsqs.Queue(store.path, clock=clock) as producer,
        vsqs.Queue(store, clock=clock) as consumer,
    ):
        sent = producer.send_batch([b"x"] * 10)
        clock.advance(YOUNG_MS / 1000 + 0.001)
        assert [m.id for m in consumer.receive_batch(10)] == sent
        assert store._feed is None


def test_without_notifications_a_receiver_lists_to_see_new_messages(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path / "q"), notifications=False)
    with vsqs.Queue(store) as consumer, vsqs.Queue(store.path) as producer:
        assert consumer.receive() is None
        before = store.listings
        producer.send(b"x")
        assert consumer.receive(wait=5) is not None
        assert store.listings > before


def test_lost_feed_events_make_the_receiver_list(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path / "q"))
    with vsqs.Queue(store) as consumer, vsqs.Queue(store.path) as producer:
        start_feed(consumer, producer)
        store.lose_events = True
        sent = producer.send_batch([b"a", b"b"])
        before = store.listings
        got = consumer.receive_batch(2, wait=5)
        assert [m.id for m in got] == sent and store.listings > before


def test_a_feed_overflow_loses_no_message_and_keeps_fifo(tmp_path: Path) -> None:
    """More arrivals than the kernel queues for a feed (``max_queued_events``)."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 50_000:
        pytest.skip(f"max_queued_events is {limit}: too slow to overflow here")
    with (
        vsqs.Queue(tmp_path / "q", durable=False) as consumer,
        vsqs.Queue(tmp_path / "q", durable=False) as producer,
    ):
        start_feed(consumer, producer)  # the feed is watching from here on
        sent = [producer.send(b"") for _ in range(limit + 100)]
        got = []
        while batch := consumer.receive_batch(1000):
            got.extend(m.id for m in batch)
            for m in batch:
                m.delete()
    assert got == sent


def test_a_forked_child_watches_with_its_own_feed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listings never age into a timed re-listing here, so a receive that
    waits for a young message is woken only by a feed, however long it
    waits: the child's must be its own."""
    monkeypatch.setattr(candidates, "STALE_AFTER", 3600.0)
    with vsqs.Queue(tmp_path / "q") as consumer, vsqs.Queue(tmp_path / "q") as producer:
        start_feed(consumer, producer)
        parent_feed = consumer.store._feed  # type: ignore[attr-defined]
        pid = os.fork()
        if pid == 0:  # the child: a message sent before its own watch existed
            ok = False
            try:
                producer.send(b"child")
                msg = consumer.receive(wait=WAIT)
                feed = consumer.store._feed  # type: ignore[attr-defined]
                ok = msg is not None and msg.body == b"child" and feed not in (None, parent_feed)
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        producer.send(b"parent")  # the parent's feed still reports arrivals
        msg = consumer.receive(wait=WAIT)
        assert msg is not None and msg.body == b"parent"
        assert consumer.store._feed is parent_feed  # type: ignore[attr-defined]


def test_dropped_feeds_free_their_inotify_instances(tmp_path: Path) -> None:
    """More feeds than the per-user limit, each dropped without ``close()``."""
    from vsqs.stores._inotify import open_feed

    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(limit + 10):
            assert open_feed(dir_fd) is not None
    finally:
        os.close(dir_fd)


def test_list_queues_skips_what_is_not_a_queue(tmp_path: Path) -> None:
    for name in ("orders", "jobs", "bad name"):
        (tmp_path / name).mkdir()
        (tmp_path / name / names.CONFIG_NAME).write_text("{}")
    (tmp_path / "plain-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "orders")
    assert vsqs.list_queues(tmp_path) == [str(tmp_path / "jobs"), str(tmp_path / "orders")]
    with pytest.raises(vsqs.QueueNotFound):
        vsqs.list_queues(tmp_path / "missing")


def test_environment_defaults_yield_to_arguments_and_the_queue_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VSQS_DURABLE", "0")
    monkeypatch.setenv("VSQS_VISIBILITY_TIMEOUT", "7")
    monkeypatch.setenv("VSQS_NEW_GRACE", "0")
    with vsqs.Queue(tmp_path / "q") as q:
        assert q.durable is False and q.config.visibility_timeout == 7
        stale = names.new_name(names.MsClock(time.time).next_id())
        (tmp_path / "q" / stale).write_bytes(b"just written")
        time.sleep(0.01)
        assert q.gc() == [stale]  # no grace at all
    with vsqs.Queue(tmp_path / "q", durable=True, new_grace=60) as q:
        assert q.durable is True
        fresh = names.new_name(names.MsClock(time.time).next_id())
        (tmp_path / "q" / fresh).write_bytes(b"being written")
        assert q.gc() == []
    monkeypatch.setenv("VSQS_VISIBILITY_TIMEOUT", "99")  # only for queues created now
    with vsqs.Queue(tmp_path / "q") as q:
        assert q.config.visibility_timeout == 7


_FILE_SIZE_LIMITED_BATCH = """
import pickle, resource, sys
import vsqs
q = vsqs.Queue(sys.argv[1], durable=sys.argv[2] == "durable")
# Files of this process may not grow past 4 KiB (Python ignores SIGXFSZ: EFBIG).
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    q.send_batch([b"a", b"b", b"c" * 8192, b"d"], bundle=False)  # one file each
except vsqs.VsqsError as exc:
    sys.stdout.buffer.write(pickle.dumps(exc))
"""


@pytest.mark.parametrize("durable", ["durable", "not-durable"])
def test_a_send_batch_that_fails_on_a_full_file_says_which_it_sent(
    tmp_path: Path, durable: str
) -> None:
    """A real failure mid-batch: the third file cannot grow (RLIMIT_FSIZE).
    The error, pickled across processes, names the messages sent: the first
    two when sends go one after another, none when the batch is staged first."""
    path = tmp_path / "q"
    done = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMITED_BATCH, str(path), durable],
        capture_output=True,
        check=True,
        timeout=120,
    )
    error = pickle.loads(done.stdout)
    assert isinstance(error, vsqs.StorageError) and "File too large" in str(error)
    with vsqs.Queue(path, create=False) as q:
        got = q.receive_batch(10)
        assert [m.id for m in got] == error.sent
        assert [m.body for m in got] == ([] if durable == "durable" else [b"a", b"b"])
    assert sorted(os.listdir(path)) == sorted([names.CONFIG_NAME, *(m.receipt for m in got)])


_NO_INOTIFY_LEFT = """
import os, resource, sys, threading
import vsqs
from tests.support.waiting import WaitingStore

class Crowded(WaitingStore):
    \"\"\"Every change feed it starts finds the process out of descriptors.\"\"\"

    tries = 0

    def changes(self, name_length):
        Crowded.tries += 1
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest = os.dup(0)  # the next descriptor's number: allow none beyond it
        os.close(lowest)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
        try:
            return super().changes(name_length)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def inotify_instances():
    return sum(
        os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )

store = Crowded(sys.argv[1])
with vsqs.Queue(store) as q:
    q.send(b"first")
    q.receive().delete()  # the next look starts a feed, or tries to
    sender = threading.Thread(target=lambda: store.waiting.wait(60) and q.send(b"late"))
    sender.start()
    got = q.receive(wait=60)
    sender.join()
    assert Crowded.tries >= 1, "no feed was tried"
    assert inotify_instances() == 0, "a feed was started after all"
    assert got is not None and got.body == b"late", got
    print("ok")
"""


def test_a_receiver_out_of_descriptors_for_inotify_polls_and_still_wakes(tmp_path: Path) -> None:
    """``inotify_init1`` fails for real (``EMFILE``: ``RLIMIT_NOFILE`` allows
    no new descriptor at that moment, in a subprocess): the receiver falls
    back to watching the directory, and a long poll wakes when a message
    arrives."""
    done = subprocess.run(
        [sys.executable, "-c", _NO_INOTIFY_LEFT, str(tmp_path / "q")],
        env={**os.environ, "PYTHONPATH": CHECKOUT},  # vsqs and tests.support
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"


def test_queues_dropped_without_close_free_their_descriptors(tmp_path: Path) -> None:
    """As a file object does: a program that opens queues and drops them
    (``vsqs.Queue(path).send(...)``) does not run out of descriptors."""

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    gc.collect()
    before = open_fds()
    for i in range(50):
        vsqs.Queue(tmp_path / f"q{i}").send(b"x")
    gc.collect()
    assert open_fds() - before < 5
