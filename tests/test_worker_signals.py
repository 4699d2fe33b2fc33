"""A worker (sync or asyncio) stopped by SIGINT or SIGTERM: real processes, real signals.

Each child runs ``Queue.consume`` on a real directory whose visibility
timeout is an hour; its handler says on stdout (a pipe) which message it
holds and then blocks, and only then is the signal sent. A message visible
again at once after the child exits can only have been released by it.
"""

from __future__ import annotations

import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import vsqs

#: Where the ``vsqs`` under test lives, for child interpreters.
SOURCE = str(Path(vsqs.__file__).resolve().parents[1])

#: A worker as a user writes it. The first two lines undo what a test
#: runner may have left (SIGINT ignored in background jobs), as a terminal
#: would; ``own-handler`` installs a SIGTERM handler of its own.
WORKER = """
import signal, sys, time, vsqs
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
if sys.argv[2] == "own-handler":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))

def handle(message):
    if message.body == b"slow":
        print("holding", message.id, flush=True)
        time.sleep(3600)  # until the signal

vsqs.Queue(sys.argv[1], create=False).consume(handle)
"""

#: The same worker on asyncio, as a user writes it: ``asyncio.run`` turns
#: Ctrl-C into a cancellation of the main task (then ``KeyboardInterrupt``).
AIO_WORKER = """
import asyncio, signal, sys, vsqs.aio
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
if sys.argv[2] == "own-handler":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))

async def handle(message):
    if message.body == b"slow":
        print("holding", message.id, flush=True)
        await asyncio.sleep(3600)  # until the signal

async def main():
    async with vsqs.aio.Queue(sys.argv[1], create=False) as q:
        await q.consume(handle)

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("worker", "sent", "mode", "exit_status", "stopped_by"),
    [
        # Python ends on an uncaught KeyboardInterrupt by SIGINT itself: the
        # shell's exit status 130.
        (WORKER, signal.SIGINT, "default", -signal.SIGINT, "KeyboardInterrupt"),
        (WORKER, signal.SIGTERM, "default", 143, "SIGTERM"),
        (WORKER, signal.SIGTERM, "own-handler", 7, "SystemExit"),  # the user's handler is kept
        (AIO_WORKER, signal.SIGINT, "default", -signal.SIGINT, "CancelledError"),
        (AIO_WORKER, signal.SIGTERM, "default", 143, "SIGTERM"),
        # The user's handler runs between two bytecodes: its SystemExit comes
        # out of the event loop (then asyncio.run cancels the consume), or, if
        # the consume's own code was running, out of the consume.
        (AIO_WORKER, signal.SIGTERM, "own-handler", 7, "CancelledError|SystemExit"),
    ],
    ids=["sync-SIGINT", "sync-SIGTERM", "sync-own", "aio-SIGINT", "aio-SIGTERM", "aio-own"],
)
def test_a_stopped_worker_releases_what_it_holds_and_says_so_once(
    tmp_path: Path,
    worker: str,
    sent: signal.Signals,
    mode: str,
    exit_status: int,
    stopped_by: str,
) -> None:
    q = vsqs.Queue(tmp_path / "jobs", visibility_timeout=3600)
    q.send_batch([b"quick", b"quick", b"slow"])
    (held,), status, err = stopped_while_holding(worker, [q.url, mode], 1, sent)
    assert status == exit_status, err
    (line,) = [line for line in err.splitlines() if "consume stopped" in line] or [err]
    assert re.fullmatch(
        f"{re.escape(q.url)}: consume stopped by ({stopped_by}): handled 2 \\(2 succeeded\\), "
        "released 1 in hand \\(visible again now\\)",
        line,
    ), err
    again = q.receive(wait=0)  # an hour before its visibility timeout
    assert again is not None and (again.id, again.receive_count) == (held, 2)
    assert q.stats().ready == 0


def concurrent(worker: str) -> str:
    """``worker`` with ``concurrency=4`` (its threads each say what they hold in one write)."""
    return worker.replace("consume(handle)", "consume(handle, concurrency=4)").replace(
        'print("holding", message.id, flush=True)',
        'sys.stdout.write(f"holding {message.id}\\n"); sys.stdout.flush()',
    )


@pytest.mark.processes
@pytest.mark.parametrize(
    ("worker", "sent", "exit_status", "stopped_by"),
    [
        (WORKER, signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt"),
        (WORKER, signal.SIGTERM, 143, "SIGTERM"),
        (AIO_WORKER, signal.SIGINT, -signal.SIGINT, "CancelledError"),
        (AIO_WORKER, signal.SIGTERM, 143, "SIGTERM"),
    ],
    ids=["sync-SIGINT", "sync-SIGTERM", "aio-SIGINT", "aio-SIGTERM"],
)
def test_a_stopped_concurrent_worker_releases_every_message_in_hand(
    tmp_path: Path, worker: str, sent: signal.Signals, exit_status: int, stopped_by: str
) -> None:
    """Four handlers hold the four slow messages (the quick ones, received
    before them, are done: at most four are in hand); the signal releases
    all four at once."""
    q = vsqs.Queue(tmp_path / "jobs", visibility_timeout=3600)
    q.send_batch([b"quick", b"quick", b"slow", b"slow", b"slow", b"slow"])
    held, status, err = stopped_while_holding(concurrent(worker), [q.url, "default"], 4, sent)
    assert status == exit_status, err
    (line,) = [line for line in err.splitlines() if "consume stopped" in line] or [err]
    assert line == (
        f"{q.url}: consume stopped by {stopped_by}: handled 2 (2 succeeded), "
        "released 4 in hand (visible again now)"
    ), err
    again = q.receive_batch(10)  # an hour before their visibility timeout
    assert sorted((m.id, m.receive_count) for m in again) == sorted((i, 2) for i in held)


def stopped_while_holding(
    worker: str, argv: list[str], holding: int, signum: int
) -> tuple[list[str], int, str]:
    """Run ``worker``; once it says it holds ``holding`` messages, send it
    ``signum``; the ids it held, its exit status and its stderr."""
    child = subprocess.Popen(
        [sys.executable, "-c", worker, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # no read-ahead: what select() says is what readline() finds
        env={**os.environ, "PYTHONPATH": SOURCE},
    )
    try:
        assert child.stdout is not None
        held = []
        with selectors.DefaultSelector() as waiting:  # (select() fails on descriptors > 1023)
            waiting.register(child.stdout, selectors.EVENT_READ)
            while len(held) < holding:
                assert waiting.select(120), "the worker never reached its handler"
                said = child.stdout.readline().decode().split()
                assert said[:1] == ["holding"], said
                held.append(said[1])
        child.send_signal(signum)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return held, child.returncode, err.decode()


#: Two consumes side by side on one loop, each holding a message.
AIO_SIDE_BY_SIDE = """
import asyncio, signal, sys, vsqs.aio
signal.signal(signal.SIGTERM, signal.SIG_DFL)

async def handle(message):
    print("holding", message.id, flush=True)
    await asyncio.sleep(3600)

async def main():
    async with vsqs.aio.Queue(sys.argv[1]) as a, vsqs.aio.Queue(sys.argv[2]) as b:
        await asyncio.gather(a.consume(handle), b.consume(handle))

asyncio.run(main())
"""


def test_sigterm_stops_every_aio_consume_of_a_loop_and_each_releases(tmp_path: Path) -> None:
    """The first consume to be done raised SystemExit in its task: the other's
    release was cancelled in one run of ten (its message hidden for an hour),
    and asyncio logged 'Task exception was never retrieved'."""
    queues = [vsqs.Queue(tmp_path / name, visibility_timeout=3600) for name in "ab"]
    sent = {q.send(q.url.encode()): q for q in queues}
    held, status, err = stopped_while_holding(
        AIO_SIDE_BY_SIDE, [q.url for q in queues], 2, signal.SIGTERM
    )
    assert status == 143, err
    assert sorted(line for line in err.splitlines() if "consume stopped" in line) == [
        f"{q.url}: consume stopped by SIGTERM: handled 0 (0 succeeded), "
        "released 1 in hand (visible again now)"
        for q in queues
    ], err
    assert "Traceback" not in err and "never retrieved" not in err, err
    assert sorted(held) == sorted(sent)
    for message_id, q in sent.items():
        again = q.receive(wait=0)  # an hour before its visibility timeout
        assert again is not None and (again.id, again.receive_count) == (message_id, 2)


def test_consume_turns_sigterm_into_an_exit_only_while_it_runs_and_only_if_default(
    tmp_path: Path,
) -> None:
    """Installed in the main thread while SIGTERM has its default handler, and
    restored after; a handler of the user's and other threads are left alone."""
    q = vsqs.Queue(tmp_path / "jobs")

    def during_consume() -> object:
        seen: list[object] = []
        q.send(b"x")
        q.consume(lambda m: seen.append(signal.getsignal(signal.SIGTERM)), max_messages=1)
        return seen[0]

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        installed = during_consume()
        assert callable(installed), installed
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

        own: Callable[[int, object], None] = lambda signum, frame: None  # noqa: E731
        signal.signal(signal.SIGTERM, own)
        assert during_consume() is own and signal.getsignal(signal.SIGTERM) is own

        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        in_thread: list[object] = []
        worker = threading.Thread(target=lambda: in_thread.append(during_consume()))
        worker.start()
        worker.join()
        assert in_thread == [signal.SIG_DFL]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_aio_consume_takes_sigterm_only_while_one_runs_and_only_if_default(
    tmp_path: Path,
) -> None:
    """Two consumes side by side on one loop: SIGTERM is theirs until the last
    ends, then the default again; a handler of the user's is left alone."""
    import asyncio

    import vsqs.aio

    async def side_by_side() -> list[object]:
        seen: list[object] = []
        async with vsqs.aio.Queue(tmp_path / "a") as a, vsqs.aio.Queue(tmp_path / "b") as b:
            await a.send(b"x")
            await b.send_batch([b"y", b"z"])
            first_done = asyncio.Event()

            async def note(message: vsqs.aio.Message) -> None:
                seen.append(signal.getsignal(signal.SIGTERM))

            async def first() -> None:
                await a.consume(note, max_messages=1)
                first_done.set()

            async def second(message: vsqs.aio.Message) -> None:
                if message.body == b"z":
                    await first_done.wait()  # the other consume has ended
                await note(message)

            await asyncio.gather(first(), b.consume(second, max_messages=2))
        return seen

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        seen = asyncio.run(side_by_side())
        assert len(seen) == 3 and all(h not in (signal.SIG_DFL, None) for h in seen), seen
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

        own: Callable[[int, object], None] = lambda signum, frame: None  # noqa: E731
        signal.signal(signal.SIGTERM, own)
        assert asyncio.run(side_by_side()) == [own] * 3
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_aio_consume_cancelled_while_it_deletes_lets_the_delete_finish(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cancel while a handled message was being deleted released it too, in
    another thread: it came back and was handled twice."""
    import asyncio

    import vsqs.aio

    sync = vsqs.Queue(tmp_path / "q", visibility_timeout=3600)
    sync.send(b"job")
    deleting, go_on = threading.Event(), threading.Event()
    delete = sync.delete

    def slow_delete(message: vsqs.Message | str) -> None:
        deleting.set()
        assert go_on.wait(120)
        delete(message)

    sync.delete = slow_delete  # type: ignore[method-assign]

    async def main() -> None:
        async with vsqs.aio.Queue(sync) as q:
            task = asyncio.create_task(q.consume(lambda message: None))
            assert await asyncio.to_thread(deleting.wait, 120)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            go_on.set()

    with caplog.at_level(logging.WARNING, logger="vsqs"):
        asyncio.run(main())
    stopped = [r.getMessage() for r in caplog.records if "consume stopped" in r.getMessage()]
    assert stopped == [
        f"{sync.url}: consume stopped by CancelledError: handled 0 (0 succeeded), released nothing"
    ]
    assert not [r for r in caplog.records if "visible again before" in r.getMessage()]
    assert sync.stats().ready + sync.stats().in_flight == 0


def test_a_sigterm_handler_installed_while_an_aio_consume_runs_is_kept(tmp_path: Path) -> None:
    """The consume's end put SIG_DFL back (or removed the loop's handler)
    over the one the user had installed meanwhile."""
    import asyncio

    import vsqs.aio

    own: Callable[[int, object], None] = lambda signum, frame: None  # noqa: E731

    async def install(message: vsqs.aio.Message) -> None:
        if message.body == b"signal":
            signal.signal(signal.SIGTERM, own)
        else:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: None)

    async def consume(body: bytes) -> object:
        async with vsqs.aio.Queue(tmp_path / "q") as q:
            await q.send(body)
            await q.consume(install, max_messages=1)
            after = signal.getsignal(signal.SIGTERM)
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
            return after

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert asyncio.run(consume(b"signal")) is own
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        kept = asyncio.run(consume(b"loop"))
        assert kept not in (signal.SIG_DFL, own) and callable(kept)  # the loop's own
    finally:
        signal.signal(signal.SIGTERM, previous)
