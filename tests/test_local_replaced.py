"""A queue directory removed, replaced or moved under live clients (issue 27, class 3).

A client works through a descriptor of the directory it opened, which
outlives the path: after ``rm -rf q && vsqs create q`` (or ``mv q q.old`` and
a new ``q``) a long poll listed the old directory for ever and returned
``None`` while a message was ready at the path. Now every client finds out,
within a bounded time, with :class:`vsqs.QueueNotFound` (docs/guarantees.md).
All on real directories, with real ``shutil.rmtree`` and ``os.rename``; no
sleep decides an outcome (the long polls wait an hour: they must end).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names

from .support.cli import DEADLINE, finish, ok, start, until
from .support.waiting import WaitingStore

HOWS = ["removed", "moved away"]


def replace(path: Path, how: str, *, recreate: bool = True) -> None:
    """Take the queue directory away from its path, and (``recreate``) create
    a queue there with one message in it."""
    if how == "removed":
        shutil.rmtree(path)
    else:
        os.rename(path, path.with_name(path.name + ".old"))
    if recreate:
        with vsqs.Queue(path) as new:
            new.send(b"in the new directory")


def told_gone(path: Path, how: str, error: str) -> bool:
    """Whether ``error`` is what a client of the old directory is told (it
    may have found out before the new queue was created)."""
    said = f"{path}: the queue directory was {how}%s while open: reopen it"
    return error in (said % "", said % " and replaced")


@pytest.mark.timeout(DEADLINE * 2)
@pytest.mark.parametrize("notifications", [True, False], ids=["inotify", "polling"])
@pytest.mark.parametrize("recreate", [True, False], ids=["replaced", "nothing-there"])
@pytest.mark.parametrize("how", HOWS)
def test_a_long_poll_finds_out_that_its_queue_directory_was_replaced(
    tmp_path: Path, notifications: bool, how: str, recreate: bool
) -> None:
    path = tmp_path / "q"
    store = WaitingStore(str(path), notifications=notifications)
    with vsqs.Queue(store) as consumer, vsqs.Queue(path) as producer:
        assert consumer.receive() is None  # a first listing, and a second one
        producer.send(b"wake")  # with the feed started, where there is one
        msg = consumer.receive(wait=DEADLINE)
        assert msg is not None and msg.body == b"wake"
        msg.delete()
        assert (store._feed is not None) == notifications  # type: ignore[attr-defined]
        producer.send(b"held")
        held = consumer.receive(wait=DEADLINE)
        assert held is not None and held.body == b"held"
        outcome: list[object] = []

        def poll() -> None:
            try:
                outcome.append(consumer.receive(wait=3600))
            except BaseException as exc:
                outcome.append(exc)

        store.waiting.clear()
        poller = threading.Thread(target=poll)
        poller.start()
        assert store.waiting.wait(DEADLINE), "the long poll never waited"
        replace(path, how, recreate=recreate)
        poller.join(DEADLINE)
        assert not poller.is_alive(), "the long poll never found out"
        [error] = outcome
        assert isinstance(error, vsqs.QueueNotFound) and told_gone(path, how, str(error))
        # From then on every call of this client that lists or sends says so.
        calls = (consumer.receive, consumer.peek, consumer.stats, consumer.purge, consumer.gc)
        for call in (*calls, lambda: consumer.send(b"x")):
            with pytest.raises(vsqs.QueueNotFound, match="reopen it"):
                call()
        # A message held settles where it was received from: gone with the
        # removed directory; in the moved one, still there to acknowledge.
        if how == "removed":
            with pytest.raises(vsqs.ReceiptExpired):
                held.delete()
        else:
            held.delete()
            assert os.listdir(tmp_path / "q.old") == [names.CONFIG_NAME]
    if not recreate:
        assert not path.exists()  # no call of the old client wrote there
        return
    with vsqs.Queue(path) as reopened:
        msg = reopened.receive()
        assert msg is not None and msg.body == b"in the new directory"


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "not-durable"])
@pytest.mark.parametrize("how", HOWS)
def test_a_sender_finds_out_that_its_queue_directory_was_replaced(
    tmp_path: Path, how: str, durable: bool
) -> None:
    """A sender never lists: a removed directory fails its next write, and
    it is told why at once; one moved away still takes writes, so a sender
    checks the path at most every ``CHECK_EVERY`` (1 s) and the sends that
    returned meanwhile are in the moved directory, none lost."""
    path = tmp_path / "q"
    with vsqs.Queue(path, durable=durable) as sender:
        sender.send(b"before")
        replace(path, how)
        sent: list[str] = []
        give_up = time.monotonic() + DEADLINE
        with pytest.raises(vsqs.QueueNotFound) as raised:
            while time.monotonic() < give_up:
                sent.append(sender.send(b"after"))
                time.sleep(0.01)
        assert told_gone(path, how, str(raised.value))
    if how == "removed":
        assert sent == []
    else:
        with vsqs.Queue(tmp_path / "q.old", create=False) as old:
            assert [m.id for m in old.peek(len(sent) + 10)][1:] == sent
    with vsqs.Queue(path) as new:
        assert [m.body for m in new.peek(10)] == [b"in the new directory"]


def has_open(pid: int, directory: str) -> bool:
    """Whether process ``pid`` has ``directory`` open."""
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(f"{fds}/{fd}") == directory:
                return True
        except FileNotFoundError:  # closed meanwhile
            continue
    return False


@pytest.mark.timeout(DEADLINE * 2)
@pytest.mark.parametrize("how", HOWS)
def test_a_consumer_process_finds_out_that_its_queue_directory_was_replaced(
    tmp_path: Path, how: str
) -> None:
    """``vsqs receive --wait 3600`` in a process of its own, the directory
    replaced by another process (``vsqs create``, ``vsqs send``): it exits
    with the error, and the new queue keeps its message."""
    q = str(tmp_path / "q")
    ok("create", q)
    proc = start("receive", q, "--wait", "3600", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    until(lambda: has_open(proc.pid, q), "the queue directory open", proc)
    if how == "removed":
        shutil.rmtree(q)
    else:
        os.rename(q, q + ".old")
    ok("create", q)
    ok("send", q, "fresh")
    status, out, err = finish(proc)
    assert (status, out) == (1, "")
    assert err.startswith("vsqs: error: ") and told_gone(Path(q), how, err[13:-1])
    assert ok("receive", q) == "fresh\n"


@pytest.mark.timeout(DEADLINE * 2)
def test_consume_ends_with_the_error_when_its_queue_directory_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "q"
    store = WaitingStore(str(path), notifications=True)
    with vsqs.Queue(store) as consumer:
        outcome: list[object] = []

        def run() -> None:
            try:
                outcome.append(consumer.consume(lambda message: None))
            except BaseException as exc:
                outcome.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        assert store.waiting.wait(DEADLINE), "consume never waited"
        replace(path, "removed")
        worker.join(DEADLINE)
        assert not worker.is_alive(), "consume never found out"
        [error] = outcome
        assert isinstance(error, vsqs.QueueNotFound) and told_gone(path, "removed", str(error))
