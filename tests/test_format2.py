"""Queues of the previous on-disk format (2): they open and work as they did,
refuse what needs format 3 (groups, deduplication ids, attributes) with a
clear error, and ``vsqs.move`` and ``vsqs move`` drain them into a new
queue of format 3. A config of any other format is refused in one line."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs import _config as config_module
from vsqs import _names as names
from vsqs.testing import FakeClock

from .support.backends import Backend, Place, params, select
from .support.cli import said
from .support.format2 import BODIES, FORMAT_2_CONFIG, HELD_MS, config_bytes, write_format_2


@pytest.fixture(params=params(select(variants=False)))
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    backend: Backend = request.param
    opened = backend.place(request, tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def old(place: Place, clock: FakeClock) -> tuple[vsqs.Store, list[str]]:
    """A format-2 queue on the backend, and its message ids."""
    store = place.store()
    return store, write_format_2(store, clock, FORMAT_2_CONFIG)


def test_a_format_2_queue_opens_and_works(
    old: tuple[vsqs.Store, list[str]], clock: FakeClock
) -> None:
    store, ids = old
    with vsqs.Queue(store, clock=clock) as q:
        assert q.config.format == 2
        stats = q.stats()
        assert (stats.ready, stats.in_flight, stats.groups_in_flight) == (11, 1, 0)
        got = q.receive_batch(5)
        assert [(m.id, m.body, m.receive_count) for m in got] == [
            (i, b, 1) for i, b in zip(ids[1:6], BODIES[1:6], strict=True)
        ]
        assert all((m.group, m.attributes, m.dedup_id) == (None, {}, None) for m in got)
        got[0].delete()
        got[1].extend(60)
        got[2].release()
        new = q.send(b"new")
        assert not names.is_enveloped(new)  # an id format-2 clients read
        assert q.receive(group="any") is None  # no message of a format-2 queue has a group
        clock.advance(HELD_MS / 1000)  # every hold is over: all back, in FIFO order
        rest = q.receive_batch(20)
        assert [m.id for m in rest] == [ids[0], *ids[2:], new]
        assert [m.receive_count for m in rest][:3] == [2, 2, 2]
    assert store.read(names.CONFIG_NAME) == config_bytes(FORMAT_2_CONFIG)  # left as it was


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(lambda q: q.send(b"x", group="g"), id="group"),
        pytest.param(lambda q: q.send(b"x", dedup_id="d"), id="dedup_id"),
        pytest.param(lambda q: q.send(b"x", attributes={"k": "v"}), id="attributes"),
        pytest.param(lambda q: q.send_batch([b"x", vsqs.Outgoing(b"y", group="g")]), id="batch"),
        pytest.param(lambda q: q.send_batch([b"x", b"y"], dedup_ids=[None, "d"]), id="batch-id"),
    ],
)
def test_what_needs_format_3_is_refused_on_a_format_2_queue(
    old: tuple[vsqs.Store, list[str]], clock: FakeClock, send: object
) -> None:
    store, _ = old
    before = sorted(store.list())
    with vsqs.Queue(store, clock=clock) as q:
        with pytest.raises(vsqs.QueueConfigError) as refused:
            send(q)  # type: ignore[operator]
        message = str(refused.value)
        assert "format 2" in message and "vsqs move" in message and "\n" not in message
        with pytest.raises(vsqs.QueueConfigError):  # settings a format-2 config cannot hold
            vsqs.Queue(store, clock=clock, content_dedup=True)
        with pytest.raises(vsqs.QueueConfigError):
            vsqs.Queue(store, clock=clock, dedup_window=10)
    assert sorted(store.list()) == before  # nothing written


@pytest.mark.parametrize("backend", params(select(in_process=True, variants=False)))
def test_move_drains_a_format_2_queue_into_a_new_queue_of_the_current_format(
    backend: Backend, request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> None:
    place = backend.place(request, tmp_path)
    try:
        src = place.store()
        ids = write_format_2(src, clock, FORMAT_2_CONFIG)
        dst = src.sibling("new")
        with vsqs.Queue(src, clock=clock) as old, vsqs.Queue(dst, clock=clock) as new:
            assert vsqs.move(old, new, batch_size=5) == len(ids) - 1  # not the one in flight
            assert new.config.format == vsqs.FORMAT_VERSION
            assert [m.body for m in new.peek(100)] == BODIES[1:]
            stats = old.stats()
            assert (stats.ready, stats.in_flight) == (0, 1)
            new.send(b"grouped", group="g", attributes={"k": "v"})  # format 3 takes them
            clock.advance(HELD_MS / 1000)
            assert vsqs.move(old, new) == 1
            got = new.receive_batch(100)
            assert [m.body for m in got] == [*BODIES[1:], b"grouped", BODIES[0]]
            assert (got[-2].group, got[-2].attributes) == ("g", {"k": "v"})
        assert json.loads(dst.read(names.CONFIG_NAME))["format"] == names.FORMAT_VERSION
    finally:
        place.close()


def test_the_cli_moves_a_format_2_queue_into_a_new_one(tmp_path: Path) -> None:
    src, dst = tmp_path / "old", tmp_path / "new"
    store = vsqs.LocalStore(str(src))
    try:  # on the real clock, as the command's: the held message is held for an hour
        write_format_2(store, FakeClock(time.time()), FORMAT_2_CONFIG)
    finally:
        store.close()
    expected = f"moved {len(BODIES) - 1} messages from {src} to {dst}\n"
    assert said("move", str(src), str(dst), "--batch", "4") == expected
    with vsqs.Queue(dst, create=False) as new, vsqs.Queue(src, create=False) as old:
        assert new.config.format == vsqs.FORMAT_VERSION and old.config.format == 2
        assert [m.body for m in new.peek(100)] == BODIES[1:]
        assert (old.stats().ready, old.stats().in_flight) == (0, 1)


@pytest.mark.parametrize("version", [1, 5, "3", None, 2.5])
def test_a_config_of_another_format_is_refused_in_one_line(
    tmp_path: Path, clock: FakeClock, version: object
) -> None:
    store = vsqs.LocalStore(str(tmp_path / "q"))
    try:
        write_format_2(store, clock, {**FORMAT_2_CONFIG, "format": version})
        before = {name: store.read(name) for name in store.list()}
        with pytest.raises(vsqs.QueueConfigError) as refused:
            vsqs.Queue(store, clock=clock)
        message = str(refused.value)
        assert f"queue format {version!r}" in message and "reads formats 2, 3, 4" in message
        assert "\n" not in message and store.url in message
        assert {name: store.read(name) for name in store.list()} == before
        with pytest.raises(vsqs.QueueConfigError):
            vsqs.move(store, tmp_path / "new")  # nor drained by this vsqs
        assert not (tmp_path / "new").exists()
    finally:
        store.close()


def test_a_reader_of_format_3_refuses_a_queue_of_bundles(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vsqs that writes format 3 (no bundles) meets a queue of format 4
    with a bundle in it: it refuses the queue in one line naming both
    formats, and touches nothing (it never takes a part for foreign)."""
    with vsqs.Queue(tmp_path / "q", clock=clock) as q:
        q.send_batch([b"a", b"b"])
    before = sorted(os.listdir(tmp_path / "q"))
    monkeypatch.setattr(config_module, "FORMAT_VERSION", 3)
    monkeypatch.setattr(config_module, "READABLE_FORMATS", (2, 3))
    with pytest.raises(vsqs.QueueConfigError) as refused:
        vsqs.Queue(tmp_path / "q", clock=clock)
    message = str(refused.value)
    assert "queue format 4" in message and "this vsqs writes format 3" in message
    assert "\n" not in message and sorted(os.listdir(tmp_path / "q")) == before
