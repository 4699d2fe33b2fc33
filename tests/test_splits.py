"""Splits of a bundle's part into two (issue 32) where each backend builds
them from more than one step: a crash at every request on object stores, a
killed splitter's transitional name on directories (the conformance kit,
``vsqs.testing``, checks the contract on every backend)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores import _moves, _splits
from vsqs.stores._moves import MOVED_SUFFIX
from vsqs.stores._object import ObjectStore
from vsqs.testing._store_splits import FULL, GROUP, split_names

from .support.backends import params, select
from .support.crashes import Crash
from .support.faulty_io import FaultyIO
from .support.object_stores import object_store, raw_names
from .support.servers import Server

BODY = b"the whole bundle"


@pytest.fixture(params=params(select(object_store=True, sweeps=True)))
def server(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue(request.param.server)  # type: ignore[no-any-return]


def of_core(store: vsqs.Store, name: str, *, settle: bool = False) -> list[str]:
    """The names a listing shows of ``name``'s core."""
    return sorted(store.list(prefix=name[: names.ID_LEN], settle=settle))


# ------------------------------------------------------------ object stores
def split_with_fault(
    store: ObjectStore, mode: str, fault_at: int | None
) -> tuple[FaultyIO, tuple[str, str, str]]:
    """Split a fresh part through a client whose ``fault_at``-th request fails as ``mode`` says."""
    src, first, second = split_names(0b1011, 1, GROUP)
    store.write_new(src, BODY, fsync=False)
    faulty = FaultyIO(store.io, mode, fault_at)
    splitter = ObjectStore(faulty)
    try:
        splitter.split(src, first, second)
        splitter.flush()
    except (Crash, OSError):
        pass
    return faulty, (src, first, second)


@pytest.mark.parametrize("mode", ["crash", "retried", "lost"])
def test_a_fault_at_any_request_of_a_split_leaves_the_source_or_both_targets(
    server: Server, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a fresh client's listing (which finishes at once here), a split
    cut at any request left exactly its source or exactly both targets, each
    with the source's bytes: never both, never neither, never one target."""
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
    store = object_store(server)
    faulty, (src, first, second) = split_with_fault(store, mode, None)
    total = faulty.calls[0]
    assert total == 5  # marker, two copies, one batched delete; the spent marker's delete
    outcomes = set()
    for fault_at in range(1, total + 1):
        _, (src, first, second) = split_with_fault(store, mode, fault_at)
        fresh = ObjectStore(store.io)
        shown = of_core(fresh, src)
        fresh.flush()
        assert shown in ([src], sorted([first, second])), (fault_at, shown)
        assert of_core(fresh, src) == shown  # settled: another listing shows the same
        for name in shown:
            assert fresh.read(name) == BODY
        outcomes.add(len(shown))
        fresh.close()
    assert outcomes == {1, 2} if mode == "crash" else 2 in outcomes


def test_a_young_split_is_hidden_and_an_old_one_finished_by_another_client(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A splitter killed after its marker and one copy: a second client shows
    nothing of the part while the marker is young (a counting listing shows
    the source), and finishes the split once it is old."""
    store = object_store(memory_server)
    _, (src, first, second) = split_with_fault(store, "crash", 3)  # dies at the second copy
    raw = set(raw_names(store))
    assert {src, src + MOVED_SUFFIX} <= raw and len(raw & {first, second}) == 1
    other = ObjectStore(store.io)
    assert of_core(other, src) == []
    assert of_core(other, src, settle=True) == [src]
    assert other.take_repairs() == []
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
    assert of_core(other, src) == sorted([first, second])
    assert other.read(first) == other.read(second) == BODY
    assert src in other.take_repairs()
    other.close()
    assert sorted(raw_names(store)) == sorted([first, second])


@pytest.mark.parametrize(
    "foreign",
    [
        "{first} 1700000000000-0000-0123456789abcdef_b1.1750000000000.1.2",  # another core
        "{first} {second} {second}",  # three targets
        "{first}  {second}",  # an empty target
        "{first} not-a-name",
    ],
)
def test_a_marker_naming_other_targets_is_refused(
    memory_server: Server,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    foreign: str,
) -> None:
    """A marker whose targets are not one or two names of its source's core
    is not one of vsqs's: its source stays hidden and is never copied or deleted."""
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
    store = object_store(memory_server)
    src, first, second = split_names(0b11, 1)
    store.write_new(src, BODY, fsync=False)
    target_line = foreign.format(first=first, second=second)
    store.io.create(src + MOVED_SUFFIX, f"{target_line}\nsomeone".encode())
    with caplog.at_level(logging.WARNING, logger="vsqs"):
        assert of_core(store, src) == []
    assert "is not a marker of vsqs" in caplog.text
    store.close()
    assert sorted(raw_names(store)) == sorted([src, src + MOVED_SUFFIX])
    assert store.read(src) == BODY


def test_a_split_costs_a_marker_two_copies_and_one_batched_delete(
    memory_server: Server,
) -> None:
    """Four requests; its spent marker goes with the client's next batch."""
    store = object_store(memory_server)
    src, first, second = split_names()
    store.write_new(src, BODY, fsync=False)
    faulty = FaultyIO(store.io, "crash", None)
    splitter = ObjectStore(faulty)
    splitter.split(src, first, second)
    assert faulty.calls[0] == 4
    assert sorted(raw_names(store)) == sorted([first, second, src + MOVED_SUFFIX])
    splitter.flush()
    assert faulty.calls[0] == 5
    assert sorted(raw_names(store)) == sorted([first, second])


# ------------------------------------------------------------- directories
@pytest.fixture
def local(tmp_path: Path) -> vsqs.LocalStore:
    store = vsqs.LocalStore(str(tmp_path / "q"))
    assert store.ensure(True)
    return store


def killed_split(store: vsqs.LocalStore, *, linked: int) -> tuple[str, str, str, str]:
    """A split whose splitter was killed after its commit and ``linked`` links:
    its source renamed by hand to the transitional name."""
    src, first, second = split_names(0b110, 2, GROUP)
    store.write_new(src, BODY, fsync=False)
    middle = _splits.transitional(first, second)
    os.rename(src, middle, src_dir_fd=store.fd, dst_dir_fd=store.fd)
    for target in (first, second)[:linked]:
        os.link(middle, target, src_dir_fd=store.fd, dst_dir_fd=store.fd)
    return src, first, second, middle


@pytest.mark.parametrize("linked", [0, 1, 2])
def test_a_killed_splitters_split_is_hidden_then_finished(
    local: vsqs.LocalStore, linked: int
) -> None:
    _, first, second, middle = killed_split(local, linked=linked)
    assert local.list() == []  # young: the transitional name and its targets are hidden
    assert sorted(local.list(settle=True)) == sorted([first, second])  # counted once each
    assert sorted(local.names_of(names.id_of(first))) == [first]
    assert middle in os.listdir(local.fd) and local.take_repairs() == []
    local.clock = lambda: time.time() + _moves.FINISH_AFTER + 1  # ten seconds later
    assert sorted(local.list(settle=True)) == sorted([first, second])  # counting finishes nothing
    assert middle in os.listdir(local.fd)
    assert sorted(local.list()) == sorted([first, second])
    assert sorted(os.listdir(local.fd)) == sorted([first, second])
    assert local.read(first) == local.read(second) == BODY
    assert local.take_repairs() == [middle]


def test_a_young_split_is_finished_by_no_lister(local: vsqs.LocalStore) -> None:
    """``FINISH_AFTER`` counts from the transitional name's ctime (its last link)."""
    _, _, _, middle = killed_split(local, linked=1)
    changed = os.stat(middle, dir_fd=local.fd).st_ctime
    local.clock = lambda: changed + _moves.FINISH_AFTER  # not older than FINISH_AFTER yet
    assert local.list() == []
    assert middle in os.listdir(local.fd)


def test_a_foreign_split_name_is_never_touched(local: vsqs.LocalStore) -> None:
    _, first, second = split_names(0b11, 1)
    valid = _splits.transitional(first, second)
    foreign = [
        "notes.split",
        valid.replace(".split", ".splat"),
        valid.replace(names.id_of(first), names.id_of(first)[:-1] + "z"),  # not a name
        f"{first}.zz.1750000000000.1.split",  # a tag that is no tag
        f"{first}.b2.1750000000000.01.split",  # a count with a leading zero
        f"{names.id_of(first)}.b2.1750000000000.1.split",  # first is not held
        f"{first}.{names.tag_of(names.id_of(first))}.{first.split('.')[1]}.1.split",  # twice
    ]
    for name in foreign:
        assert _splits.split_targets(name) is None, name
        local.write_new(name, b"theirs", fsync=False)
    local.clock = lambda: time.time() + 3600
    assert sorted(local.list()) == sorted(foreign)  # foreign names list as they are
    assert sorted(os.listdir(local.fd)) == sorted(foreign)
    assert all(local.read(name) == b"theirs" for name in foreign)
    assert local.splits() == [] and local.take_repairs() == []


def test_the_transitional_name_fits_a_directory_entry() -> None:
    core = "9" * 13 + "-ffff-" + "f" * 16
    src = names.invisible_name(names.bundle_id(core, FULL, GROUP), 0, 0, names.MAX_VERSION - 1)
    first = names.invisible_name(
        names.bundle_id(core, 1 << 127, GROUP),
        names.MAX_EXPIRY_MS,
        names.MAX_COUNT,
        names.MAX_VERSION,
    )
    second = names.invisible_name(
        names.bundle_id(core, FULL >> 1, GROUP),
        names.MAX_EXPIRY_MS,
        names.MAX_COUNT,
        names.MAX_VERSION,
    )
    assert names.parse(src) and len(names.id_of(second)) == names.MAX_ID_LEN
    middle = _splits.transitional(first, second)
    assert len(middle) == _splits.MAX_LEN <= 255
    assert _splits.split_targets(middle) == (first, second)
    for bad in [(first, first), (first, src), (src, first)]:
        with pytest.raises(vsqs.InvalidArgument):
            _splits.transitional(*bad)


def test_delete_queue_counts_a_splits_targets_and_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with vsqs.Queue(path) as q:
        store = vsqs.LocalStore(str(path))
        assert store.ensure(False)
        killed_split(store, linked=1)
        with pytest.raises(vsqs.QueueNotEmpty, match="messages: 2"):
            q.delete_queue()
        deleted = q.delete_queue(force=True)
        store.close()
    assert deleted.kept == [] and not path.exists()
    assert deleted.removed >= 3  # a linked target, the transitional name, the config


def test_gc_finishes_a_killed_splitters_split(tmp_path: Path) -> None:
    path = tmp_path / "q"
    store = vsqs.LocalStore(str(path))
    with vsqs.Queue(store) as q:
        _, first, second, middle = killed_split(store, linked=0)
        store.clock = lambda: time.time() + _moves.FINISH_AFTER + 1
        assert middle in q.gc()
    assert sorted(n for n in os.listdir(path) if n != names.CONFIG_NAME) == sorted([first, second])


def test_a_target_present_fails_a_memory_split_and_changes_nothing() -> None:
    store = vsqs.MemoryStore()
    store.ensure(True)
    src, first, second = split_names()
    store.write_new(src, b"x", fsync=False)
    store.write_new(second, b"there", fsync=False)
    with pytest.raises(FileExistsError):
        store.split(src, first, second)
    assert sorted(store.list()) == sorted([src, second]) and store.read(second) == b"there"
