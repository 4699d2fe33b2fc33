"""The store-level conformance suite: the :class:`vsqs.Store` contract, without a queue.

Every name it uses is a name of the format (:mod:`vsqs._names`) or the config
object, issued fresh as the queue would: backends may rely on the grammar
(object stores key their move markers by it) and on no name recurring in a
queue, except where a test checks that a create or a rename onto it is refused.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import vsqs
from vsqs import QueueNotFound
from vsqs import _names as names

from ._store_splits import SplitTests
from ._store_support import (
    EXPIRY_MS,
    THREADS,
    fresh_id,
    fresh_queue,
    held,
    listed,
    ready,
    run_threads,
)
from ._suite import Suite


def read_while_writing(store: vsqs.Store, name: str, data: bytes, *, fsync: bool) -> bytes:
    """What a reader polling ``name`` first reads while ``data`` is written to it."""
    seen: list[bytes] = []
    done = threading.Event()

    def poll() -> None:
        while not seen:
            written = done.is_set()
            try:
                seen.append(store.read(name))
            except FileNotFoundError:
                if written:
                    return
                time.sleep(0.0005)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        store.write_new(name, data, fsync=fsync)
    finally:
        done.set()
        reader.join(timeout=60)
    assert seen, f"{name} was written but never read"
    return seen[0]


def race_renames(store: vsqs.Store, source: str, targets: list[str]) -> list[str]:
    """Rename ``source`` to each target in its own thread, all at once; the
    targets of the renames that won (the others must find the source gone)."""
    won: list[str] = []

    def claim(i: int) -> None:
        try:
            store.rename(source, targets[i])
        except FileNotFoundError:
            return
        won.append(targets[i])

    assert run_threads(len(targets), claim) == []
    return won


def list_until(store: vsqs.Store, done: threading.Event) -> None:
    """List ``store`` again and again until ``done``: every name it shows is whole."""
    while not done.is_set():
        for name in store.list():
            assert names.parse(name) is not None, name


class StoreTests(Suite, SplitTests):
    """The contract of :class:`vsqs.Store`, checked on the backend's ``store`` directly.

    Besides ``store``, a backend may override ``missing_store``: a store of
    this backend whose container does not exist, or ``None`` if every
    container exists (a prefix of ``memory://``). By default it is a sibling
    of ``store`` that nobody created.
    """

    @pytest.fixture
    def opened(self, store: vsqs.Store) -> vsqs.Store:
        """The ``store``, its container created (``ensure(True)``)."""
        assert store.ensure(True) is True
        return store

    @pytest.fixture
    def missing_store(self, store: vsqs.Store) -> Iterator[vsqs.Store | None]:
        missing = store.sibling(fresh_queue("missing"))
        yield missing
        missing.close()

    # ------------------------------------------------------------- container
    def test_ensure_without_create_reports_a_missing_container(
        self, missing_store: vsqs.Store | None
    ) -> None:
        if missing_store is None:
            pytest.skip("every container of this backend exists")
        for _ in range(2):  # and it did not create it
            try:
                assert missing_store.ensure(False) is False
            except QueueNotFound as exc:  # a container the store never creates (a bucket)
                assert str(exc), "the error says why"

    def test_ensure_creates_the_container_of_a_sibling(self, opened: vsqs.Store) -> None:
        sibling = opened.sibling(fresh_queue("new"))
        try:
            assert sibling.ensure(True) is True
            assert sibling.ensure(True) is True
            assert sibling.ensure(False) is True
            assert listed(sibling) == []
        finally:
            sibling.close()

    def test_a_sibling_is_a_distinct_empty_namespace(self, opened: vsqs.Store) -> None:
        name = ready()
        opened.write_new(name, b"here", fsync=False)
        other = fresh_queue("other")
        sibling, again = opened.sibling(other), opened.sibling(other)
        try:
            assert sibling.ensure(True)
            assert listed(sibling) == []
            with pytest.raises(FileNotFoundError):
                sibling.read(name)
            sibling.write_new(name, b"there", fsync=False)  # the same name, elsewhere
            moved = held(name)
            sibling.rename(name, moved)
            assert again.ensure(False) and listed(again) == [moved]  # the same sibling
            assert again.read(moved) == b"there"
            assert listed(opened) == [name] and opened.read(name) == b"here"
            sibling.delete(moved)
            sibling.flush()
            assert listed(again) == []
            assert opened.read(name) == b"here"
        finally:
            sibling.close()
            again.close()

    # ---------------------------------------------------------- write / read
    def test_write_new_creates_and_read_returns_the_exact_bytes(self, opened: vsqs.Store) -> None:
        bodies = [
            b"",
            b"\x00",
            bytes(range(256)),
            "h\u00e9llo \U0001f600".encode(),
            random.Random(1).randbytes(70_000),  # past a 64 KiB read chunk
        ]
        written: dict[str, bytes] = {}
        for i, body in enumerate(bodies):
            name = ready()
            opened.write_new(name, body, fsync=i % 2 == 1)
            written[name] = body
        config = b'{"format": 2}'
        opened.write_new(names.CONFIG_NAME, config, fsync=True)
        written[names.CONFIG_NAME] = config
        for name, body in written.items():
            data = opened.read(name)
            assert type(data) is bytes and data == body
        assert listed(opened) == sorted(written)

    @pytest.mark.parametrize("fsync", [False, True], ids=["no-fsync", "fsync"])
    def test_write_new_refuses_an_existing_name(self, opened: vsqs.Store, fsync: bool) -> None:
        name = ready()
        opened.write_new(name, b"first", fsync=fsync)
        with pytest.raises(FileExistsError):
            opened.write_new(name, b"second", fsync=fsync)
        assert opened.read(name) == b"first"
        assert listed(opened) == [name]

    def test_read_of_a_missing_name_raises_file_not_found(self, opened: vsqs.Store) -> None:
        for name in (ready(), names.new_name(fresh_id()), names.CONFIG_NAME):
            with pytest.raises(FileNotFoundError):
                opened.read(name)

    def test_creates_said_to_be_atomic_are_never_seen_in_part(self, opened: vsqs.Store) -> None:
        """Where ``creates_atomically(fsync)``, a reader polling the name sees
        nothing or the whole content, never a part of it."""
        modes = [fsync for fsync in (False, True) if opened.creates_atomically(fsync)]
        if not modes:
            pytest.skip("this store's creates are not atomic")
        data = random.Random(2).randbytes(4 << 20)
        for fsync in modes:
            assert read_while_writing(opened, ready(), data, fsync=fsync) == data

    # ---------------------------------------------------------------- rename
    def test_rename_moves_the_content(self, opened: vsqs.Store) -> None:
        message_id = fresh_id()
        staged, published = names.new_name(message_id), names.published_name(message_id, None)
        opened.write_new(staged, b"body", fsync=False)
        opened.rename(staged, published)  # a send through the format's .new stage
        first = held(published)
        opened.rename(published, first)  # a receive
        second = held(first, 2, later_ms=5)
        opened.rename(first, second)  # and another
        assert listed(opened) == [second]
        assert opened.read(second) == b"body"
        for gone in (staged, published, first):
            with pytest.raises(FileNotFoundError):
                opened.read(gone)

    def test_rename_refuses_an_existing_destination(self, opened: vsqs.Store) -> None:
        if opened.unique_names:
            pytest.skip("unique_names: the queue never renames onto an existing name")
        source = ready()
        target = held(source)
        opened.write_new(source, b"source", fsync=False)
        opened.write_new(target, b"target", fsync=False)
        with pytest.raises(FileExistsError):
            opened.rename(source, target)
        assert opened.read(target) == b"target"
        assert opened.read(source) == b"source"

    def test_rename_of_a_missing_source_raises_file_not_found(self, opened: vsqs.Store) -> None:
        source = ready()
        with pytest.raises(FileNotFoundError):
            opened.rename(source, held(source))
        opened.flush()
        assert listed(opened) == []

    def test_exactly_one_of_racing_renames_wins(self, opened: vsqs.Store) -> None:
        """Threads claim one name at once, each under a name of its own: one
        wins, every other gets ``FileNotFoundError``; the content moves once."""
        if not opened.exclusive_claims():
            pytest.skip(f"claims are not exclusive on this store ({opened.refusal})")
        for _ in range(3):
            source = ready()
            opened.write_new(source, b"claimed once", fsync=False)
            won = race_renames(opened, source, [held(source, later_ms=i) for i in range(THREADS)])
            assert len(won) == 1
            opened.flush()
            assert listed(opened, source[: names.ID_LEN]) == won
            assert opened.read(won[0]) == b"claimed once"

    # ---------------------------------------------------------------- delete
    def test_delete_removes_the_name(self, opened: vsqs.Store) -> None:
        message, kept = held(ready()), ready()
        for name in (message, kept, names.CONFIG_NAME):
            opened.write_new(name, b"x", fsync=False)
        opened.delete(message)
        opened.delete(names.CONFIG_NAME)
        assert listed(opened) == [kept]
        for known in (False, True):
            with pytest.raises(FileNotFoundError):
                opened.delete(message, known=known)
        with pytest.raises(FileNotFoundError):
            opened.delete(names.CONFIG_NAME)
        with pytest.raises(FileNotFoundError):
            opened.rename(message, held(message, 2))
        opened.flush()  # deletions held back for batching are carried out
        for gone in (message, names.CONFIG_NAME):
            with pytest.raises(FileNotFoundError):
                opened.read(gone)
        assert listed(opened) == [kept] and opened.read(kept) == b"x"

    def test_delete_of_a_known_name_that_is_gone_raises_file_not_found(
        self, opened: vsqs.Store
    ) -> None:
        """``known`` spares a request, not the answer: a message name the
        caller listed that is gone by now raises (the config object too, where
        deletes of it are not blind)."""
        for name in (ready(), *([] if opened.renames_cost_requests else [names.CONFIG_NAME])):
            opened.write_new(name, b"x", fsync=False)
            opened.delete(name, known=True)
            with pytest.raises(FileNotFoundError):
                opened.delete(name, known=True)

    def test_delete_of_a_missing_name_raises_file_not_found(self, opened: vsqs.Store) -> None:
        for known in (False, True):
            with pytest.raises(FileNotFoundError):
                opened.delete(ready(), known=known)
        with pytest.raises(FileNotFoundError):
            opened.delete(names.CONFIG_NAME)
        opened.flush()
        assert listed(opened) == []

    # ------------------------------------------------------------------ list
    def test_list_lists_exactly_the_names_with_a_prefix(self, opened: vsqs.Store) -> None:
        visible, staged_id, delayed_id = ready(), fresh_id(), fresh_id()
        staged = names.new_name(staged_id)
        delayed = names.published_name(delayed_id, EXPIRY_MS)
        received, deleted = ready(), ready()
        for name in (visible, staged, delayed, received, deleted, names.CONFIG_NAME):
            opened.write_new(name, b"x", fsync=False)
        taken = held(received)
        opened.rename(received, taken)
        opened.delete(deleted)
        everything = sorted([visible, staged, delayed, taken, names.CONFIG_NAME])
        assert listed(opened) == everything
        assert sorted(opened.list(settle=True)) == everything
        assert listed(opened, staged_id) == [staged]
        assert listed(opened, delayed_id) == [delayed]
        assert listed(opened, received) == [taken]
        assert listed(opened, deleted) == []
        assert listed(opened, names.CONFIG_NAME) == [names.CONFIG_NAME]
        assert listed(opened, "~") == []
        second = visible[:10]  # the ids of one second, give or take
        assert listed(opened, second) == [n for n in everything if n.startswith(second)]

    def test_an_ordered_listing_is_ascending(self, opened: vsqs.Store) -> None:
        if not opened.lists_in_order:
            pytest.skip("this store lists in no particular order")
        sent = [ready() for _ in range(12)] + [names.new_name(fresh_id()) for _ in range(3)]
        for name in random.Random(3).sample(sent, len(sent)):
            opened.write_new(name, b"x", fsync=False)
        opened.write_new(names.CONFIG_NAME, b"{}", fsync=False)
        assert list(opened.list()) == sorted([*sent, names.CONFIG_NAME])

    # --------------------------------------------------------------- changes
    def test_a_change_token_shows_every_change(self, opened: vsqs.Store) -> None:
        name = ready()
        changes: list[Callable[[], object]] = [
            lambda: opened.write_new(name, b"x", fsync=False),
            lambda: opened.rename(name, held(name)),
            lambda: opened.delete(held(name)),
        ]
        for change in changes:
            token = opened.change_token()
            change()
            assert opened.changed_since(token)
            started = time.monotonic()
            assert opened.wait_for_change(token, 10)
            assert time.monotonic() - started < 5

    def test_wait_for_change_wakes_on_a_write_by_another_thread(self, opened: vsqs.Store) -> None:
        token = opened.change_token()
        writer = threading.Timer(
            0.2, opened.write_new, args=(ready(), b"x"), kwargs={"fsync": False}
        )
        writer.start()
        try:
            started = time.monotonic()
            assert opened.wait_for_change(token, 10)
            assert time.monotonic() - started < 9
        finally:
            writer.join()
        assert opened.changed_since(token)

    def test_a_change_feed_reports_names_that_appear_and_leave(self, opened: vsqs.Store) -> None:
        if opened.changes(names.ID_LEN) is None:
            pytest.skip("this store has no change feed")
        message_id = fresh_id()
        opened.write_new(names.new_name(message_id), b"x", fsync=False)
        opened.rename(names.new_name(message_id), message_id)
        sent = ready()
        opened.write_new(sent, b"y", fsync=True)
        seen = opened.changes(names.ID_LEN)
        assert seen is not None
        assert [change for change in seen if change[1]] == [(message_id, True), (sent, True)]
        opened.rename(message_id, held(message_id))
        opened.delete(sent)
        seen = opened.changes(names.ID_LEN)
        assert seen is not None and (message_id, False) in seen
        assert not [change for change in seen if change[1]]

    # --------------------------------------------------------------- threads
    def test_threads_writing_renaming_listing_and_deleting_lose_nothing(
        self, opened: vsqs.Store
    ) -> None:
        per_thread = 12
        kept: list[str] = []
        writers = [THREADS - 1]
        lock = threading.Lock()
        done = threading.Event()

        def write(i: int) -> None:
            for j in range(per_thread):
                name = ready()
                opened.write_new(name, name.encode(), fsync=False)
                if j % 3 == 1:
                    opened.delete(name, known=True)
                elif j % 3 == 2:
                    opened.rename(name, held(name))
                    kept.append(held(name))
                else:
                    kept.append(name)

        def work(i: int) -> None:
            if i == 0:  # a lister, until the writers are done
                list_until(opened, done)
                return
            try:
                write(i)
            finally:
                with lock:
                    writers[0] -= 1
                    if writers[0] == 0:
                        done.set()

        assert run_threads(THREADS, work) == []
        opened.flush()
        assert len(kept) == (THREADS - 1) * per_thread * 2 // 3
        assert listed(opened) == sorted(kept)
        for name in kept:
            assert opened.read(name) == name[: names.ID_LEN].encode()

    # ------------------------------------------------------- syncs and flush
    def test_sync_files_and_sync_names_keep_what_was_written(self, opened: vsqs.Store) -> None:
        ids = [fresh_id() for _ in range(3)]
        for message_id in ids:
            opened.write_new(names.new_name(message_id), message_id.encode(), fsync=False)
        opened.sync_files(names.new_name(i) for i in ids)  # a generator, as the queue passes
        opened.sync_files([])
        for message_id in ids:
            opened.rename(names.new_name(message_id), message_id)
        opened.sync_names()
        assert listed(opened) == sorted(ids)
        for message_id in ids:
            assert opened.read(message_id) == message_id.encode()

    def test_flush_carries_out_held_back_work_and_nothing_else(self, opened: vsqs.Store) -> None:
        opened.flush()  # nothing held back: nothing happens
        written = [ready() for _ in range(4)]
        for name in written:
            opened.write_new(name, b"x", fsync=False)
        for name in written[:2]:
            opened.delete(name, known=True)
        opened.flush()
        opened.flush()
        for name in written[:2]:
            with pytest.raises(FileNotFoundError):
                opened.read(name)
        assert listed(opened) == written[2:]
        assert opened.take_repairs() == []  # nothing crashed: nothing to repair

    def test_close_is_idempotent(self, store: vsqs.Store) -> None:
        sibling = store.sibling(fresh_queue("closing"))
        store.close()  # before its container was even looked at
        store.close()
        assert sibling.ensure(True)
        name = ready()
        sibling.write_new(name, b"x", fsync=True)
        sibling.delete(name, known=True)
        sibling.close()
        sibling.close()
