"""Part of :class:`~vsqs.testing.QueueTests`:
Administration: changing a queue's settings while clients run, and deleting it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import vsqs

from ..stores import ObjectStore
from ._clock import FakeClock
from ._suite import drop, listing

#: The bound every client sees a change within (seconds of its own clock).
BOUND = 10.0


def versions(store: vsqs.Store) -> list[str]:
    """The config objects in ``store``: ``vsqs.json`` and its versions."""
    return [n for n in listing(store) if n == "vsqs.json" or n.startswith("vsqs-config.")]


@contextmanager
def two_clients(
    store: vsqs.Store, clock: FakeClock, **first: Any
) -> Iterator[tuple[vsqs.Queue, vsqs.Queue]]:
    """Two clients of the queue in ``store``; ``first`` opens the first one."""
    with vsqs.Queue(store, clock=clock, **first) as one, vsqs.Queue(store, clock=clock) as two:
        yield one, two


def left(store: vsqs.Store) -> list[str]:
    """What a deleted queue left: its names (none if its directory went too)."""
    try:
        return listing(store)
    except vsqs.QueueNotFound:
        return []


class ConfigTests:
    """Administration: changing a queue's settings while clients run, and deleting it."""

    # --------------------------------------------------------------- configure
    def test_a_change_reaches_every_client_within_the_bound(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with two_clients(store, clock, visibility_timeout=30) as (admin, client):
            client.send(b"a")
            assert admin.configure(visibility_timeout=60).visibility_timeout == 60
            assert admin.config.visibility_timeout == 60  # its own client: at once
            clock.advance(BOUND)
            got = client.receive()
            assert got is not None and client.config.visibility_timeout == 60
            clock.advance(59)
            assert admin.receive() is None  # held for the new 60 s, not the old 30
            clock.advance(1.01)
            assert admin.receive() is not None

    def test_a_new_client_opens_with_the_newest_settings(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, visibility_timeout=30) as admin:
            admin.configure(visibility_timeout=45, retry_delay=2.0)
            admin.configure(max_message_size=1000)
        with vsqs.Queue(store, clock=clock, create=False) as later:
            assert (later.config.visibility_timeout, later.config.retry_delay) == (45, 2.0)
            assert later.config.max_message_size == 1000
            with pytest.raises(vsqs.MessageTooLarge):
                later.send(b"x" * 1001)
        with pytest.raises(vsqs.QueueConfigError, match="was changed to visibility_timeout=45"):
            vsqs.Queue(store, clock=clock, visibility_timeout=30)  # contradicts the newest
        with vsqs.Queue(store, clock=clock, visibility_timeout=45):
            pass

    def test_changes_racing_from_stale_clients_lose_no_update(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with two_clients(store, clock) as (one, two):
            one.configure(retry_delay=2.0)  # two still knows version 1: its create of 2 loses
            two.configure(max_retry_delay=100.0)
            one.configure(visibility_timeout=7.0)
            clock.advance(BOUND)
            for q in (one, two):
                q.stats()  # a call: it looks
                assert (q.config.retry_delay, q.config.max_retry_delay) == (2.0, 100.0)
                assert q.config.visibility_timeout == 7.0
        assert versions(store)[-1] == "vsqs.json" and len(versions(store)) == 4

    def test_settings_that_cannot_change_are_refused_and_nothing_is_written(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock) as q:
            before = listing(store)
            fixed = (("dedup_window", 5.0), ("format", 2), ("dead_letter_blocks_group", True))
            for key, value in fixed:
                with pytest.raises(vsqs.QueueConfigError, match=f"{key} cannot change"):
                    q.configure(**{key: value})
            with pytest.raises(vsqs.InvalidArgument, match="no setting 'visibilty_timeout'"):
                q.configure(visibilty_timeout=5)
            with pytest.raises(vsqs.InvalidArgument, match="go together"):
                q.configure(max_receives=3)
            with pytest.raises(vsqs.InvalidArgument):
                q.configure(visibility_timeout=-1)
            with pytest.raises(vsqs.InvalidQueueName):
                q.configure(max_receives=3, dead_letter="../elsewhere")
            assert listing(store) == before
            assert q.configure(visibility_timeout=q.config.visibility_timeout) == q.config
            assert listing(store) == before  # no change, no version

    def test_a_contradicted_explicit_setting_warns_once_and_goes_on(
        self, store: vsqs.Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        with two_clients(store, clock, visibility_timeout=30) as (client, admin):
            admin.configure(visibility_timeout=90)
            clock.advance(BOUND)
            with caplog.at_level(logging.WARNING, logger="vsqs"):
                client.send(b"a")
                admin.configure(visibility_timeout=91)
                clock.advance(BOUND)
                client.send(b"b")
            said = [r.getMessage() for r in caplog.records if "opened with" in r.getMessage()]
            assert len(said) == 1 and "visibility_timeout is now 90" in said[0], said
            assert client.config.visibility_timeout == 91

    def test_a_changed_dead_letter_queue_takes_the_next_dead_letters(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="first") as q:
            q.send(b"a")
            assert q.receive(visibility_timeout=1) is not None
            q.configure(dead_letter="second", max_receives=1)
            clock.advance(2)
            assert q.receive() is None  # exhausted: dead-lettered to the new one
            assert q.dead_letter_url is not None and q.dead_letter_url.endswith("second")
            assert q.stats().dead_letter == 1
            q.configure(dead_letter=None, max_receives=None)
            assert q.stats().dead_letter is None
        with vsqs.Queue(store.sibling("second"), create=False) as second:
            assert [m.body for m in second.peek()] == [b"a"]
        with pytest.raises(vsqs.QueueNotFound):
            vsqs.Queue(store.sibling("first"), create=False)

    def test_config_versions_are_no_messages_and_old_ones_are_collected(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock) as q, vsqs.Queue(store, clock=clock) as idle:
            for vt in (31, 32, 33, 34):
                q.configure(visibility_timeout=vt)
            assert len(versions(store)) == 5
            stats = q.stats()
            assert (stats.ready, stats.in_flight, stats.delayed, stats.writing) == (0, 0, 0, 0)
            assert q.peek() == [] and q.receive() is None and q.purge() == 0
            assert len(versions(store)) == 5 and not [n for n in q.gc() if "config" in n]
            clock.advance(3600)  # their successors are an hour old
            removed = sorted(n for n in q.gc() if "config" in n)
            assert removed == ["vsqs-config.3", "vsqs-config.4"]
            assert versions(store) == ["vsqs-config.2", "vsqs-config.5", "vsqs.json"]
            idle.stats()  # its last look was an hour ago: it lists, and finds the newest
            assert idle.config.visibility_timeout == 34
        with vsqs.Queue(store, clock=clock, create=False) as later:
            assert later.config.visibility_timeout == 34

    # ------------------------------------------------------------ delete_queue
    def test_delete_queue_refuses_a_queue_with_messages(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock) as q:
            q.send(b"a", delay=60)
            before = listing(store)
            with pytest.raises(vsqs.VsqsError, match="not empty"):
                q.delete_queue()
            assert listing(store) == before
            assert q.receive() is None  # still open, still the queue

    def test_delete_queue_removes_what_vsqs_wrote_and_keeps_foreign_names(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with vsqs.Queue(store, clock=clock, max_receives=1, dead_letter="dlq") as q:
            q.send_batch([b"a", b"b", b"c"])
            q.send(b"d", dedup_id="once")
            q.send(b"e", delay=30)
            assert q.receive(visibility_timeout=1) is not None
            clock.advance(2)
            q.receive()  # dead-letters "a"
            q.configure(visibility_timeout=40)
            drop(store, "notes.txt", "vsqs-config.x")  # foreign
            deleted = q.delete_queue(force=True)
            assert deleted.kept == ["notes.txt", "vsqs-config.x"]
            assert listing(store) == ["notes.txt", "vsqs-config.x"]
            if isinstance(store, ObjectStore):  # no marker or probe is left either
                assert sorted(key for key, _ in store.io.listing()) == deleted.kept
            with pytest.raises(vsqs.QueueNotFound):
                q.send(b"f")
        with pytest.raises(vsqs.QueueNotFound):
            vsqs.Queue(store, clock=clock, create=False)
        with vsqs.Queue(store.sibling("dlq"), create=False) as dlq:  # it stays
            assert [m.body for m in dlq.peek()] == [b"a"]

    def test_other_clients_of_a_deleted_queue_get_queue_not_found(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        with two_clients(store, clock) as (admin, client):
            admin.send(b"a")
            held = client.receive()
            assert held is not None
            admin.delete_queue(force=True)
            with pytest.raises((vsqs.ReceiptExpired, vsqs.QueueNotFound)):
                held.delete()  # its message is gone, whichever it says
            clock.advance(BOUND)
            with pytest.raises(vsqs.QueueNotFound):
                client.receive()
            with pytest.raises(vsqs.QueueNotFound):  # and for good
                client.send(b"b")
        assert left(store) == []
