"""The object-store protocol itself: capability probe, request counts, the
named windows of ``docs/protocol.md`` forced one at a time, and bad input."""

from __future__ import annotations

import itertools
import multiprocessing
import re
import subprocess
import sys
import time
from collections import Counter

import pytest

import vsqs
from vsqs import _names as names
from vsqs import _store_object, _store_s3
from vsqs._registry import open_store
from vsqs._store_object import MOVED_SUFFIX, ObjectStore

from .servers import Server
from .test_crashes import Crash
from .test_object_faults import FaultyIO


def object_store(server: Server, name: str = "q") -> ObjectStore:
    store = open_store(server.url(name), server.storage_options)
    assert isinstance(store, ObjectStore)
    return store


def object_store_at(server: Server, url: str) -> ObjectStore:
    store = open_store(url, server.storage_options)
    assert isinstance(store, ObjectStore)
    return store


def raw_names(store: ObjectStore) -> list[str]:
    return [name for name, _ in store.io.listing()]


# ------------------------------------------------------------------ probe
@pytest.mark.parametrize(
    ("server_fixture", "protocol"),
    [
        ("s3_server", "s3-conditional"),
        ("gcs_server", "gcs-generation"),
        ("memory_server", "create-only"),
    ],
)
def test_the_probe_picks_the_strongest_protocol(
    request: pytest.FixtureRequest, server_fixture: str, protocol: str
) -> None:
    server: Server = request.getfixturevalue(server_fixture)
    store = object_store(server)
    with vsqs.Queue(store):
        assert store.protocol == protocol
        assert raw_names(store) == [names.CONFIG_NAME], "the probe left an object behind"


def test_a_store_without_exclusive_create_is_refused_unless_opted_in() -> None:
    """fsspec's simplecache writes through on close: a create there overwrites."""
    url = f"simplecache::memory://vsqs-none-{time.time_ns()}/q"
    with pytest.raises(vsqs.UnsupportedStore, match="unsafe_claims=True"):
        vsqs.Queue(url)
    with vsqs.Queue(url, unsafe_claims=True) as q:
        assert isinstance(q._store, ObjectStore) and q._store.protocol == "none"
        q.send(b"x")
        msg = q.receive()
        assert msg is not None and msg.body == b"x"
        msg.delete()


def test_a_missing_bucket_is_reported(s3_server: Server) -> None:
    with pytest.raises(vsqs.QueueNotFound, match="bucket does not exist"):
        vsqs.Queue("s3://no-such-bucket/q", storage_options=s3_server.storage_options)


@pytest.mark.parametrize(("url", "extra"), [("s3://bucket/q", "s3"), ("gs://bucket/q", "gcs")])
def test_a_missing_package_names_the_extra_to_install(url: str, extra: str) -> None:
    package = {"s3": "s3fs", "gcs": "gcsfs"}[extra]
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "import vsqs\n"
        "try:\n"
        f"    vsqs.Queue({url!r})\n"
        "except vsqs.UnsupportedStore as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install 'vsqs[{extra}]'" in out.stdout


def test_a_protocol_without_its_package_says_which_one() -> None:
    """A protocol vsqs has no extra for: fsspec's own hint names the package."""
    with pytest.raises(vsqs.UnsupportedStore, match="Install adlfs"):
        vsqs.Queue("abfs://container/q")


@pytest.mark.parametrize(
    "url", ["s3://bucket", "s3://bucket/", "s3://bucket/../x", "gs://b/q/..", "nosuchscheme://b/q"]
)
def test_bad_object_store_urls_are_refused_before_any_request(url: str) -> None:
    with pytest.raises((vsqs.InvalidQueueName, vsqs.UnsupportedStore)):
        vsqs.Queue(url)


# ------------------------------------------------------------ request counts
def test_a_message_lifecycle_takes_six_requests_on_s3(s3_server: Server) -> None:
    store = object_store(s3_server)
    with vsqs.Queue(store) as q:
        q.send_batch([b"warm"] * 3)
        q.receive().delete()  # type: ignore[union-attr] - the first listing
        store.io.requests.clear()
        q.send(b"x")
        assert store.io.requests == Counter(put=1)
        store.io.requests.clear()
        msg = q.receive()
        assert msg is not None
        # marker, read, copy, delete of the source (and of earlier markers); no listing:
        # the candidates came from the first one.
        assert store.io.requests == Counter(put=1, get=1, copy=1, delete=1)
        store.io.requests.clear()
        msg.delete()
        assert store.io.requests == Counter(delete=1)


def test_receiving_from_a_large_backlog_lists_one_page(s3_server: Server) -> None:
    store = object_store(s3_server)
    with vsqs.Queue(store) as q:
        q.send_batch([b"m"] * 1200)  # more than one page
    with vsqs.Queue(store) as q:
        store.io.requests.clear()
        msg = q.receive()
        assert msg is not None and msg.body == b"m"
        assert store.io.requests["list"] == 1


# ------------------------------------------------------------ named windows
def test_a_marker_whose_create_response_was_lost_and_retried_still_wins(
    s3_server: Server,
) -> None:
    """Window "lost response + retry" at the commit: the retry meets our own marker."""
    store = object_store(s3_server)
    with vsqs.Queue(store) as q:
        sent = q.send(b"x")
    faulty = FaultyIO(store.io, "retried", None)
    with vsqs.Queue(ObjectStore(faulty)) as q:
        faulty.calls[0] = 0
        faulty.fault_at = 2  # 1: the listing, 2: the marker's create
        msg = q.receive()
    assert msg is not None and msg.id == sent


def test_two_attempts_writing_the_same_target_are_told_apart(memory_server: Server) -> None:
    """Window "same bytes twice": two clients moving one name to the same target
    name write different markers, so only one believes it won."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        q.send(b"x")
        (source,) = [n for n in store.list() if names.is_id(n)]
    target = names.invisible_name(source, 4_000_000_000_000, 1)
    one, two = ObjectStore(store.io), ObjectStore(store.io)
    one.rename(source, target)
    with pytest.raises(FileNotFoundError):
        two.rename(source, target)
    assert sorted(store.list()) == sorted([names.CONFIG_NAME, target])


def test_a_late_claimer_wins_nothing_and_leaves_nothing(memory_server: Server) -> None:
    """Window "late claim": a client whose marker is made after the move it lost
    finished (and the marker was collected) finds the source gone."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        q.send(b"x")
        (source,) = [n for n in store.list() if names.is_id(n)]
    winner, late = ObjectStore(store.io), ObjectStore(store.io)
    winner.rename(source, names.invisible_name(source, 4_000_000_000_000, 1))
    winner.close()  # collects the spent marker
    assert not [n for n in raw_names(store) if n.endswith(MOVED_SUFFIX)]
    with pytest.raises(FileNotFoundError):
        late.rename(source, names.invisible_name(source, 4_000_000_000_001, 1))
    late.close()
    assert not [n for n in raw_names(store) if n.endswith(MOVED_SUFFIX)]
    assert len([n for n in store.list() if names.parse(n)]) == 1


@pytest.mark.parametrize("server_fixture", ["s3_server", "memory_server"])
def test_a_stale_marker_over_a_recreated_source_moves_it_once(
    request: pytest.FixtureRequest, server_fixture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Window "stale marker": a marker left by a crashed mover hides a source
    that was created again with the same name and bytes (a redrive). The
    lister finishes the old move: the message lives on, once."""
    monkeypatch.setattr(_store_object, "FINISH_AFTER", -1.0)
    server: Server = request.getfixturevalue(server_fixture)
    store = object_store(server)
    vsqs.Queue(store).close()
    message_id = "1700000000000-0000-0123456789abcdef"
    old_target = names.invisible_name(message_id, 1_700_000_001_000, 3)
    store.io.create(message_id + MOVED_SUFFIX, f"{old_target}\nother-client".encode())
    store.io.create(message_id, b"body")
    assert list(store.list()) == [names.CONFIG_NAME]  # this listing finishes the move
    assert sorted(store.list()) == sorted([names.CONFIG_NAME, old_target])
    with vsqs.Queue(store) as q:
        msg = q.receive()
        assert msg is not None and (msg.id, msg.body, msg.receive_count) == (message_id, b"body", 4)
        msg.delete()
        assert q.receive() is None
    store.close()  # a Store passed in stays open after its queue; this collects markers
    assert raw_names(store) == [names.CONFIG_NAME]


def test_a_young_marker_hides_its_message_until_the_move_finishes(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A move in progress: nothing of the message is shown, and nothing is
    repaired, until ``FINISH_AFTER`` has passed."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        sent = q.send(b"x")
    target = names.invisible_name(sent, 1_700_000_000_000, 1)
    store.io.create(sent + MOVED_SUFFIX, f"{target}\nslow-client".encode())
    assert list(store.list()) == [names.CONFIG_NAME]
    assert sent in raw_names(store)
    monkeypatch.setattr(_store_object, "FINISH_AFTER", -1.0)
    assert list(store.list()) == [names.CONFIG_NAME]  # this listing finishes the move
    assert sorted(store.list()) == sorted([names.CONFIG_NAME, target])
    assert raw_names(store) == sorted([names.CONFIG_NAME, target, sent + MOVED_SUFFIX])
    store.close()  # deletes the spent marker
    assert raw_names(store) == sorted([names.CONFIG_NAME, target])


def test_forked_clients_write_different_markers(memory_server: Server) -> None:
    """Window "fork": a forked child inherits its parent's store, token and
    attempt counter; its markers must still differ from the parent's, or both
    would read the same marker back as their own."""
    store = object_store(memory_server)
    ctx = multiprocessing.get_context("fork")
    reader, writer = ctx.Pipe(duplex=False)
    child = ctx.Process(target=lambda: writer.send(store._claim("t")))
    child.start()
    from_child = reader.recv()
    child.join()
    assert from_child != store._claim("t")  # the same attempt number in both


def test_a_split_listing_never_drops_an_uncopied_source(memory_server: Server) -> None:
    """Window "paged listing": pages are taken at different times, so an id's
    group can show a marked source next to another live name while the
    marker's target is missing. The source must not be taken for copied."""
    old = time.time() - 2 * _store_object.FINISH_AFTER
    store = object_store(memory_server)
    vsqs.Queue(store).close()
    message_id = "1700000000000-0000-0123456789abcdef"
    target = names.invisible_name(message_id, 1_700_000_009_000, 2)
    other = names.invisible_name(message_id, 1_700_000_001_000, 1)
    store.io.create(message_id, b"body")
    store.io.create(message_id + MOVED_SUFFIX, f"{target}\nother-client".encode())
    group = [(message_id, None), (other, None), (message_id + MOVED_SUFFIX, old)]
    assert store._settle(group) == []  # in transition: nothing shown
    assert message_id in raw_names(store), "an uncopied source was deleted"


def test_a_young_marker_without_its_source_is_kept(memory_server: Server) -> None:
    """Window "paged listing": a marker listed without its source may only
    mean the source's page was taken before it was created. Collected young,
    the marker would stop hiding a source that is being moved."""
    store = object_store(memory_server)
    vsqs.Queue(store).close()
    message_id = "1700000000000-0000-0123456789abcdef"
    target = names.invisible_name(message_id, 1_700_000_009_000, 1)
    store.io.create(message_id + MOVED_SUFFIX, f"{target}\nother-client".encode())
    assert store._settle([(message_id + MOVED_SUFFIX, time.time())]) == []
    store.close()  # removes every marker collected as spent
    assert message_id + MOVED_SUFFIX in raw_names(store), "a young marker was collected"


def test_a_late_ack_loses_to_a_claim_in_progress(memory_server: Server) -> None:
    """Window "late ack": a receipt past its expiry is being claimed again
    (the claimer's marker is made, its copy not yet). The holder's ack must
    fail, or the new claimer would deliver an acknowledged message."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        q.send(b"x")
        msg = q.receive(visibility_timeout=0.1)
        assert msg is not None
        time.sleep(0.2)
        claimer = ObjectStore(store.io)
        claimed = names.invisible_name(msg.id, int(time.time() * 1000) + 60_000, 2)
        claimer._create_marker(msg.receipt + MOVED_SUFFIX, claimer._claim(claimed))
        with pytest.raises(vsqs.ReceiptExpired):
            msg.delete()
        claimer._move(msg.receipt, claimed, msg.receipt + MOVED_SUFFIX)
        again = q.receive()
        assert again is None or again.id != msg.id  # held by the claimer now
    assert claimed in store.list()


@pytest.mark.parametrize("lost", [2, 3, 4], ids=["read", "copy", "delete"])
def test_an_ack_after_a_failed_extend_is_refused(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch, lost: int
) -> None:
    """Window "failed extend": an extend that failed after its marker may be
    finished by any lister, under the new name. Acking the old receipt then
    must fail, or the new name would outlive the ack."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        q.send(b"x")
    faulty = FaultyIO(store.io, "lost", None)
    with vsqs.Queue(ObjectStore(faulty)) as q:
        msg = q.receive(visibility_timeout=60)
        assert msg is not None
        receipt = msg.receipt
        # requests of the extend: 1 marker, 2 read, 3 copy, 4 delete
        faulty.calls[0], faulty.fault_at = 0, lost
        with pytest.raises(vsqs.VsqsError):
            msg.extend(120)
        faulty.fault_at = None
        with pytest.raises(vsqs.ReceiptExpired):
            q.delete(receipt)
    monkeypatch.setattr(_store_object, "FINISH_AFTER", -1.0)
    list(store.list())  # finishes the move if need be
    live = [n for n in store.list() if n.startswith(msg.id)]
    assert len(live) == 1, f"the message was lost or has two names: {live}"


# ---------------------------------------------------------------- bad input
def test_foreign_objects_are_never_touched(s3_server: Server) -> None:
    store = object_store(s3_server)
    foreign = ["notes.moved", "notes", "1700000000000-0000-0123456789abcdef.new.moved", "x.y"]
    with vsqs.Queue(store) as q:
        for name in foreign:
            store.io.create(name, b"theirs")
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        msg.delete()
        q.purge()
        q.gc()
    store.close()
    assert sorted(raw_names(store)) == sorted([names.CONFIG_NAME, *foreign])
    assert all(store.io.get(name) == b"theirs" for name in foreign)


def test_other_prefixes_and_nested_keys_are_not_part_of_a_queue(s3_server: Server) -> None:
    store = object_store(s3_server)
    nested = store.io.sibling("q")  # the same queue, to write a nested key through
    with vsqs.Queue(store) as q:
        nested.create("sub/1700000000000-0000-0123456789abcdef", b"nested")
        assert q.receive() is None
        assert "sub/1700000000000-0000-0123456789abcdef" not in raw_names(store)


def test_a_foreign_name_sharing_an_id_does_not_complete_a_move(
    memory_server: Server,
) -> None:
    """A foreign object whose name starts with a message's id is no copy of it:
    a move in progress must not be taken for finished because of it."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        sent = q.send(b"x")
    target = names.invisible_name(sent, 1_700_000_000_000, 1)
    store.io.create(sent + MOVED_SUFFIX, f"{target}\nslow-client".encode())
    store.io.create(sent + ".notes", b"theirs")
    assert [n for n in store.list() if names.parse(n)] == []  # in transition
    assert sent in raw_names(store), "the source of a move in progress was deleted"


# -------------------------------------------------------------------- clocks
def test_the_probe_measures_the_clock_offset_to_the_store(s3_server: Server) -> None:
    store = object_store(s3_server)
    offset = store.capabilities.clock_offset
    assert offset is not None and abs(offset) < 1.5  # moto runs on this host's clock


def test_a_host_clock_far_from_the_stores_is_warned_about(
    s3_server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class SkewedTime:
        @staticmethod
        def time() -> float:
            return time.time() - 30  # this host runs 30 s behind the store

    monkeypatch.setattr(_store_s3, "time", SkewedTime)
    found = object_store(s3_server)._run_probe()  # the cached probe ran on the true clock
    assert found.clock_offset is not None and 29 < found.clock_offset < 31
    assert re.search(r"this host's clock is -(29|30)\.\d s off the store's", caplog.text)


@pytest.mark.parametrize("operation", ["receive", "delete"])
def test_gc_repairs_and_reports_what_a_crash_at_any_request_left(
    memory_server: Server, operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client dies at each request of a claim (or an ack) in turn. ``gc()``
    then finishes the half-done move, removes every marker and reports them,
    and leaves at most one name of the message; a second ``gc()`` finds
    nothing to do."""
    for crash_at in itertools.count(1):
        monkeypatch.setattr(_store_object, "FINISH_AFTER", 10.0)
        store = object_store(memory_server)
        faulty = FaultyIO(store.io, "crash", None)
        with vsqs.Queue(store) as healthy, vsqs.Queue(ObjectStore(faulty)) as dying:
            sent = healthy.send(b"x")
            # An ack near its expiry (ACK_MARGIN) takes the marker path.
            held = healthy.receive(visibility_timeout=2) if operation == "delete" else None
            faulty.fault_at, faulty.calls[0] = crash_at, 0
            try:
                if held is not None:
                    dying.delete(held.receipt)  # type: ignore[arg-type]
                else:
                    assert dying.receive(visibility_timeout=600) is not None
            except Crash:
                pass
            else:
                break  # the whole operation ran before the crash point
            finally:
                faulty.fault_at = None
        markers = {n for n in raw_names(store) if n.endswith(MOVED_SUFFIX)}
        monkeypatch.setattr(_store_object, "FINISH_AFTER", -1.0)  # as if long ago
        with vsqs.Queue(object_store_at(memory_server, store.url)) as fresh:
            repaired = fresh.gc()
            assert markers <= set(repaired), f"crash at {crash_at}: unreported {markers}"
            left = raw_names(store)
            assert not [n for n in left if n.endswith(MOVED_SUFFIX)], f"markers left: {left}"
            live = [n for n in left if n != names.CONFIG_NAME]
            assert len(live) <= 1 and all(n.startswith(sent) for n in live), left
            assert operation == "delete" or live, "a claimed message was lost"
            assert fresh.gc() == []
    assert crash_at > 2, "the operation made too few requests to test anything"


def test_gc_removes_the_probe_of_a_client_killed_mid_probe_once_old(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe creates an object in the queue's prefix; a client killed
    between its create and its delete leaves it (found by the chaos run)."""
    store = object_store(memory_server)
    vsqs.Queue(store).close()
    leftover = f"{_store_object.PROBE_PREFIX}0123456789abcdef"
    store.io.create(leftover, b"1")
    with vsqs.Queue(object_store_at(memory_server, store.url)) as q:
        assert q.gc() == [], "a probe that may be under way was removed"
        assert leftover in raw_names(store)
        monkeypatch.setattr(_store_object, "FINISH_AFTER", -1.0)
        assert q.gc() == [leftover]
        assert raw_names(store) == [names.CONFIG_NAME]
