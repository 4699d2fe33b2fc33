"""An OS error at every system call of every operation on a local directory.

``tests/test_crashes.py`` kills the client at each storage call; here the
client lives on. Each system call ``LocalStore`` makes (``open``, ``read``,
``write``, ``fsync``, ``link``, ``renameat2``, ``unlink``, ``scandir``,
``stat``, ``syncfs``, ...) fails in turn with ``ENOSPC``, ``EIO``, ``EACCES``
(root ignores permission bits, so it is injected) or ``ENOENT`` (the race of
a name taken away under the client). A failing ``write`` first writes half
of its buffer, as a filling disk does; a failing ``close`` closes the file.

Each operation must complete, or raise a :class:`vsqs.VsqsError` (never a
bare ``OSError``); the same client must then still work, and a fresh client
finds the queue consistent (the checks of ``tests/test_crashes.py``): no
message lost, none partial, none with two names, none deleted coming back.
None of these calls is retried: each is either a race vsqs resolves (a name
gone) or an error it reports.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs.stores import _local as _store_local
from vsqs.testing import FakeClock

from .support.crashes import (
    BODY,
    SCENARIOS,
    Expect,
    finish_at_once,
    open_pair,
    recover_and_check,
)

#: The ``os`` functions ``LocalStore`` may call on storage.
SYSCALLS = {
    "open", "read", "readv", "pread", "preadv", "write", "close", "fsync", "fdatasync",
    "link", "rename", "unlink", "scandir", "stat", "fstat", "lseek", "makedirs",
}  # fmt: skip


class Injector:
    """Counts the system calls made while armed; the ``fault_at``-th one fails with ``err``."""

    def __init__(self) -> None:
        self.armed = False
        self.calls = 0
        self.fault_at: int | None = None
        self.err = errno.EIO
        self.short_write_done = False
        self.hit: list[str] = []

    def fails(self, what: str) -> bool:
        if not self.armed:
            return False
        self.calls += 1
        if self.short_write_done:
            self.short_write_done = False
            self.hit.append(f"{what} after a short write")
            return True
        if self.calls == self.fault_at:
            self.hit.append(what)
            return True
        return False

    def error(self, what: str) -> OSError:
        return OSError(self.err, f"injected: {os.strerror(self.err)}", what)


class FaultyOS:
    """Stands in for the ``os`` module inside ``vsqs.stores._local``."""

    def __init__(self, injector: Injector) -> None:
        self._injector = injector

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in SYSCALLS:
            return real
        injector = self._injector

        def call(*args: Any, **kwargs: Any) -> Any:
            if not injector.fails(name):
                return real(*args, **kwargs)
            if name == "write" and injector.err == errno.ENOSPC and len(args[1]) > 1:
                injector.short_write_done = True  # the disk fills half way
                return real(args[0], args[1][: len(args[1]) // 2])
            if name == "close":
                real(*args)  # close frees the descriptor even when it fails
            raise injector.error(name)

        return call


def faulty_libc(injector: Injector, real: Any, name: str) -> Callable[..., int] | None:
    if real is None:
        return None

    def call(*args: Any) -> int:
        if injector.fails(name):
            ctypes.set_errno(injector.err)
            return -1
        return int(real(*args))

    return call


class FaultyLocalStore(vsqs.LocalStore):
    """A ``LocalStore`` whose system calls fail when its injector says so."""

    injector: Injector

    def sibling(self, name: str) -> FaultyLocalStore:
        twin = FaultyLocalStore(super().sibling(name).path)
        twin.injector = self.injector
        return twin

    def list(self, *, prefix: str = "", settle: bool = False) -> Iterable[str]:
        return list(super().list(prefix=prefix))  # list while armed, not when iterated


class OpenFailsAfterClaims(Injector):
    """Once ``claims`` renames were made, every ``open`` fails (as with
    ``EMFILE``, a process out of descriptors between a claim and its read)."""

    def __init__(self, claims: int) -> None:
        super().__init__()
        self.claims = claims

    def fails(self, what: str) -> bool:
        if not self.armed:
            return False
        if what in ("rename", "_renameat2"):
            self.claims -= 1
        if what == "open" and self.claims <= 0:
            self.hit.append(what)
            return True
        return False


def install(monkeypatch: pytest.MonkeyPatch, injector: Injector) -> Injector:
    """Make ``LocalStore``'s system calls go through ``injector``."""
    monkeypatch.setattr(_store_local, "os", FaultyOS(injector))
    for name in ("_renameat2", "_syncfs"):
        real = getattr(_store_local, name)
        monkeypatch.setattr(_store_local, name, faulty_libc(injector, real, name))
    return injector


@pytest.fixture
def injector(monkeypatch: pytest.MonkeyPatch) -> Injector:
    return install(monkeypatch, Injector())


def run_faulted(
    tmp_path: Path, injector: Injector, scenario: str, durable: bool, fault_at: int | None
) -> tuple[vsqs.Store, FakeClock, Expect]:
    """Run ``scenario`` with the ``fault_at``-th system call failing; then use the client again."""
    root = tmp_path / f"{scenario}-{fault_at}"
    store = vsqs.LocalStore(str(root / "q"))
    faulty = FaultyLocalStore(store.path)
    faulty.injector = injector
    clock = FakeClock(time.time())
    healthy, client = open_pair(store, faulty, clock, durable)
    injector.calls, injector.fault_at, injector.hit = 0, fault_at, []
    injector.armed = True
    expect = Expect()
    try:
        SCENARIOS[scenario](healthy, client, expect)
    except vsqs.VsqsError:
        assert injector.hit, "an error without an injected fault"
    except OSError as exc:
        pytest.fail(f"a bare {exc!r} escaped at call {fault_at} ({injector.hit})")
    else:
        flushes = {"fsync", "fdatasync"}  # (a failed syncfs falls back to fsync per file)
        assert not (injector.err != errno.ENOENT and flushes & set(injector.hit)), (
            f"a failed {injector.hit} was swallowed: a durable operation returned unflushed"
        )
    finally:
        injector.armed = False
    # The client that met the error still works.
    expect.survive.add(client.send(BODY))
    return store, clock, expect


@pytest.mark.sweep  # a run per system call: minutes in all
@pytest.mark.parametrize("err", ["ENOSPC", "EACCES", "ENOENT"])  # EIO: as ENOSPC, no short write
@pytest.mark.parametrize("durable", [True, False], ids=["durable", "not-durable"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_an_os_error_at_any_system_call_leaves_the_queue_consistent(
    tmp_path: Path,
    injector: Injector,
    scenario: str,
    durable: bool,
    err: str,
) -> None:
    injector.err = getattr(errno, err)
    store, clock, expect = run_faulted(tmp_path, injector, scenario, durable, None)
    total = injector.calls
    assert total >= 1 and not injector.hit
    recover_and_check(store, clock, expect)
    # Every call in turn, until a run ends before the call that would fail. How
    # many calls a run makes may depend on the machine's speed (a listing older
    # than STALE_AFTER is repeated; a directory's mtime is compared within a
    # clock tick), so the fault-free run's count guides the loop, it does not end it.
    fault_at = 0
    while True:
        fault_at += 1
        assert fault_at <= 4 * total, f"runs still reach call {fault_at}; {total} without a fault"
        store, clock, expect = run_faulted(tmp_path, injector, scenario, durable, fault_at)
        recover_and_check(store, clock, expect)
        if not injector.hit:
            break
    assert fault_at > total // 2, f"runs stopped at call {fault_at}; {total} without a fault"


def test_errors_name_the_cause_and_map_to_the_builtin_kinds(
    tmp_path: Path, injector: Injector
) -> None:
    with vsqs.Queue(FaultyLocalStore(str(tmp_path / "q"))) as q:
        q.store.injector = injector  # type: ignore[attr-defined]
        for err, kind in [
            (errno.ENOSPC, vsqs.StorageError),
            (errno.EIO, vsqs.StorageError),
            (errno.EACCES, vsqs.QueuePermissionError),
        ]:
            injector.err, injector.calls, injector.fault_at = err, 0, 1
            injector.armed = True
            with pytest.raises(kind, match=os.strerror(err)) as caught:
                q.send(b"x")
            injector.armed = False
            assert isinstance(caught.value, OSError)  # except OSError still catches it
        assert q.receive() is None, "a failed send left a message behind"
        assert sorted(os.listdir(tmp_path / "q")) == ["vsqs.json"]


@pytest.mark.parametrize("claims", [1, 2], ids=["receive", "receive_batch"])
def test_a_read_that_fails_after_the_claim_gives_the_claim_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claims: int
) -> None:
    """Issue 27: the rename succeeds, then ``open()`` fails with ``EMFILE``."""
    injector = install(monkeypatch, OpenFailsAfterClaims(claims))
    injector.err = errno.EMFILE
    clock = FakeClock(time.time())
    faulty = FaultyLocalStore(str(tmp_path / "q"))
    faulty.injector = injector
    config: dict[str, Any] = {"clock": clock, "max_receives": 1, "dead_letter": "dlq"}
    with vsqs.Queue(faulty, **config) as q, vsqs.Queue(tmp_path / "q", clock=clock) as other:
        sent = q.send_batch([b"a", b"b", b"c"], bundle=False)
        injector.armed = True
        if claims == 1:
            with pytest.raises(vsqs.StorageError, match=os.strerror(errno.EMFILE)):
                q.receive()
        else:  # the first was read and is returned; the second is given back
            assert [m.id for m in q.receive_batch(10)] == sent[:1]
        injector.armed = False
        assert injector.hit == ["open"]
        rest = other.receive_batch(10)
        assert [(m.id, m.receive_count) for m in rest] == [(i, 1) for i in sent[claims - 1 :]]
        assert q.stats().dead_letter == 0


@pytest.fixture(autouse=True)
def _finished_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splits and moves left half done by a crash are finished at the next listing."""
    finish_at_once(monkeypatch)
