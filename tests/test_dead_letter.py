"""Dead letters an operator can act on, redrives that cannot go the wrong way,
and the maximum message size (issue 16).

* A dead letter keeps an origin record ``<id>.origin`` in the dead-letter
  queue (source, receive count, when): shown by ``peek`` and by
  ``Message.dead_lettered``; ``gc()``, ``purge()``, an ack that read it and a
  redrive remove it with its message (the crash windows are in
  ``tests/test_crashes.py`` and ``tests/test_object_faults.py``; every backend
  in the conformance suite's dead-letter test).
* ``redrive`` refuses, unless ``force``, a source whose config does not name
  the dead-letter queue: swapped arguments moved a live queue into its DLQ.
* ``max_message_size``: larger sends are refused before anything is written;
  a larger message in a queue is never read (``tests/test_hostile.py`` for a
  1 TiB file).
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import s3fs

import vsqs
from vsqs import _names as names
from vsqs._place import same_place
from vsqs._redrive import MOVE_HOLD
from vsqs.stores import _moves
from vsqs.stores._object import ObjectStore
from vsqs.stores._registry import open_store
from vsqs.testing import FakeClock

from .support.crashes import Crash
from .support.faulty_io import Interleave, die, on
from .support.servers import Server


def dead_letter_one(source: vsqs.Queue, clock: FakeClock) -> str:
    """Send a message to ``source`` (``max_receives=1``) and have it dead-lettered."""
    poison = source.send(b"poison")
    assert source.receive(visibility_timeout=1) is not None
    clock.advance(2)
    assert source.receive() is None  # exhausted: moved to the dead-letter queue
    return poison


def records(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if names.origin_id(n))


def now(clock: FakeClock) -> datetime:
    """The time a dead-lettering on ``clock`` records (whole ms)."""
    return datetime.fromtimestamp(int(clock() * 1000) / 1000, UTC)


def jobs_and_dlq(server: Server) -> tuple[ObjectStore, ObjectStore]:
    """A queue ``jobs`` on ``server`` and its dead-letter queue ``jobs-dlq``."""
    store = open_store(server.url("jobs"), server.storage_options)
    assert isinstance(store, ObjectStore)
    return store, store.sibling("jobs-dlq")


#: ``jobs``: every message is dead-lettered at its second receive.
JOBS = {"visibility_timeout": 1, "max_receives": 1, "dead_letter": "jobs-dlq"}


# ------------------------------------------------------------------ redrive
def test_a_redrive_with_swapped_arguments_is_refused_and_moves_nothing(
    tmp_path: Path, clock: FakeClock
) -> None:
    """``redrive jobs jobs-dlq`` moved the live queue into its dead-letter queue."""
    jobs, dlq = tmp_path / "jobs", tmp_path / "jobs-dlq"
    with vsqs.Queue(jobs, clock=clock, max_receives=1, dead_letter="jobs-dlq") as q:
        dead_letter_one(q, clock)
        live = q.send(b"live")
    with pytest.raises(vsqs.InvalidArgument) as refused:
        vsqs.redrive(jobs, dlq)
    message = str(refused.value)
    assert "\n" not in message and str(jobs) in message and str(dlq) in message
    assert (
        "has no dead-letter queue" in message
        and "force=True (vsqs redrive --force) redrives anyway" in message
    )
    with vsqs.Queue(jobs) as q, vsqs.Queue(dlq) as dead:
        assert [m.id for m in q.peek()] == [live] and dead.stats().ready == 1
    assert vsqs.redrive(dlq, jobs) == 1  # the right way round


def test_a_redrive_into_a_queue_that_dead_letters_elsewhere_needs_force(
    tmp_path: Path, clock: FakeClock
) -> None:
    with vsqs.Queue(tmp_path / "a", clock=clock, max_receives=1, dead_letter="a-dlq") as a:
        dead_letter_one(a, clock)
    vsqs.Queue(tmp_path / "b", max_receives=1, dead_letter="b-dlq").close()
    with pytest.raises(vsqs.InvalidArgument, match=r"dead-letters to .*b-dlq, not .*a-dlq"):
        vsqs.redrive(tmp_path / "a-dlq", tmp_path / "b")
    assert vsqs.redrive(tmp_path / "a-dlq", tmp_path / "b", force=True) == 1
    with vsqs.Queue(tmp_path / "b") as b:
        assert [m.body for m in b.peek()] == [b"poison"]


def test_a_redrive_into_itself_under_another_name_is_refused_even_with_force(
    tmp_path: Path,
) -> None:
    """Through a symlink the queue fed itself for ever (``--force``, or a
    config naming the link); a probe name tells, not the spelling."""
    (tmp_path / "alias").symlink_to(tmp_path / "q")
    vsqs.Queue(tmp_path / "q").send(b"x")
    for force in (False, True):
        with pytest.raises(vsqs.InvalidArgument, match=r"into itself .* is the same queue"):
            vsqs.redrive(tmp_path / "alias", tmp_path / "q", force=force)
    assert [n for n in os.listdir(tmp_path / "q") if names.parse(n)] != []
    assert not [n for n in os.listdir(tmp_path / "q") if n.endswith(names.NEW_SUFFIX)]


def test_a_redrive_into_itself_on_an_object_store_under_another_scheme_is_refused(
    s3_server: Server,
) -> None:
    """``s3a://`` and ``s3://`` name one bucket."""
    url = s3_server.url("q")
    alias = "s3a://" + url.removeprefix("s3://")
    options = s3_server.storage_options
    with vsqs.Queue(url, storage_options=options) as q:
        q.send(b"x")
    with pytest.raises(vsqs.InvalidArgument, match=r"into itself .* is the same queue"):
        vsqs.redrive(alias, url, storage_options=options, force=True)
    with (
        vsqs.Queue(url, storage_options=options) as q,
        vsqs.Queue(alias, storage_options=options) as same,
    ):
        assert [m.body for m in q.peek()] == [b"x"]
        assert same_place(q.store, same.store, names.MsClock(q.clock).next_id)
        # While both are open (as through a whole ``vsqs move``), nothing of
        # the probe is left, not even a marked name that listings hide: a
        # deletion held back for a batch reads as a crashed client's to others.
        keys = s3fs.S3FileSystem(**options).ls(url.removeprefix("s3://"), refresh=True)
        message, config = sorted(key.rpartition("/")[2] for key in keys)
        assert names.is_id(message) and config == names.CONFIG_NAME


@pytest.mark.parametrize("form", ["sibling", "path", "file-url", "via-symlink"])
def test_a_dead_letter_queue_is_recognised_however_the_config_names_it(
    tmp_path: Path, clock: FakeClock, form: str
) -> None:
    """A queue name is the sibling queue; a path or URL the location it resolves to."""
    dlq = tmp_path / "dlq"
    (tmp_path / "link").symlink_to(tmp_path)
    named = {
        "sibling": "dlq",
        "path": str(dlq),
        "file-url": f"file://{dlq}",
        "via-symlink": str(tmp_path / "link" / "dlq"),
    }[form]
    with vsqs.Queue(tmp_path / "q", clock=clock, max_receives=1, dead_letter=named) as q:
        dead_letter_one(q, clock)
        assert q.dead_letter_url is not None
    assert vsqs.redrive(dlq, tmp_path / "q") == 1
    assert vsqs.redrive(f"file://{dlq}", tmp_path / "q") == 0


# ------------------------------------------------- dead-letter locations
@pytest.mark.parametrize(
    ("dead_letter", "error"),
    [
        ("http://127.0.0.1:1/q", r"http://127\.0\.0\.1:1/q: a web server cannot hold a queue"),
        ("HTTPS://example.com/q", "a web server cannot hold a queue"),
        ("nosuchscheme://host/q", "no vsqs backend for nosuchscheme:// URLs"),
        ("s3:/bucket/q", "looks like a mistyped URL: did you mean 's3://bucket/q'"),
        ("s3://bucket", r"name a queue inside the bucket \(s3://bucket/queue\)"),
        ("s3://bucket/../q", "empty, '.' or '..' path components are refused"),
        ("sub/dlq", "a relative path depends on the working directory"),
        ("q", "cannot be its own dead-letter queue"),
        ("{q}", "cannot be its own dead-letter queue"),
        ("{q}/", "cannot be its own dead-letter queue"),
        ("file://{q}", "cannot be its own dead-letter queue"),
        ("{alias}", "cannot be its own dead-letter queue"),
        ("file://localhost{q}", "cannot be its own dead-letter queue"),
        ("memory://{q}", "cannot be its own dead-letter queue"),
        ("MEMORY://{q}/", "cannot be its own dead-letter queue"),
    ],
)
def test_a_dead_letter_queue_that_could_never_be_used_is_refused_at_creation(
    tmp_path: Path, dead_letter: str, error: str
) -> None:
    """Such a location was written into the config (which cannot be changed)
    and failed only at the first dead-lettering; the queue itself reset the
    receive count for ever. Nothing is created, no request is sent."""
    (tmp_path / "alias").symlink_to(tmp_path / "q", target_is_directory=True)
    target = dead_letter.format(q=tmp_path / "q", alias=tmp_path / "alias")
    queue = f"memory://{tmp_path}/q" if "memory" in dead_letter.lower() else tmp_path / "q"
    with pytest.raises(vsqs.VsqsError, match=error) as refused:
        vsqs.Queue(queue, max_receives=1, dead_letter=target)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "q").exists()


def test_a_config_that_names_a_relative_path_is_refused_when_opened(tmp_path: Path) -> None:
    """Another client's config is checked as far as it can be without
    refusing a queue that only needs draining (a name of itself passes)."""
    from vsqs._config import QueueConfig

    for dead_letter, opens in (("sub/dlq", False), ("q", True)):
        q = tmp_path / dead_letter.replace("/", "-") / "q"
        q.mkdir(parents=True)
        config = QueueConfig(max_receives=1, dead_letter=dead_letter).to_json()
        (q / names.CONFIG_NAME).write_bytes(config)
        if opens:
            vsqs.Queue(q).close()
        else:
            with pytest.raises(vsqs.InvalidQueueName, match="relative path"):
                vsqs.Queue(q)


# --------------------------------------------------------- origin records
def test_origin_records_go_with_their_messages_by_ack_purge_and_gc(
    tmp_path: Path, clock: FakeClock
) -> None:
    config = {"clock": clock, "max_receives": 1, "dead_letter": "dlq", "visibility_timeout": 1}
    with vsqs.Queue(tmp_path / "q", **config) as q:  # type: ignore[arg-type]
        first, second, third = (dead_letter_one(q, clock) for _ in range(3))
    # Each was dead-lettered 2 s after the one before, by the clock of the queue.
    at = {
        i: datetime.fromtimestamp(clock() - 4 + 2 * n, UTC)
        for n, i in enumerate([first, second, third])
    }
    dlq_dir = tmp_path / "dlq"
    assert [names.origin_id(n) for n in records(dlq_dir)] == [first, second, third]
    third_record = records(dlq_dir)[2]
    # A record left by a crash, or written for a dead-lettering under way, as
    # code that predates record ids named it.
    orphan = f"{names.IdGenerator().next_id(int(clock() * 1000))}{names.ORIGIN_SUFFIX}"
    source = str(tmp_path / "q")
    (dlq_dir / orphan).write_bytes(vsqs.DeadLettered(source, 1, at[third]).to_json())
    with vsqs.Queue(dlq_dir, clock=clock) as dlq:
        msg = dlq.receive()
        assert msg is not None and msg.id == first
        assert msg.dead_lettered == vsqs.DeadLettered(source, 1, at[first])
        msg.delete()  # its record was read: it goes with it
        msg = dlq.receive()
        assert msg is not None and msg.id == second
        msg.delete()  # not read, but its receiver listed it: it goes too
        assert records(dlq_dir) == sorted([third_record, orphan])
        assert dlq.gc() == []  # the orphan is young: a dead-lettering may be under way
        clock.advance(3601)  # older than the grace period
        assert dlq.gc() == [orphan]  # third's message is still there
        assert dlq.purge() == 1
    assert records(dlq_dir) == []


def test_a_record_named_as_before_record_ids_is_read_ranked_oldest_and_removed(
    tmp_path: Path, clock: FakeClock
) -> None:
    """``<id>.origin``, as code before record ids wrote it, is still a record:
    shown, and acked with its message; a record with a record id is newer."""
    with vsqs.Queue(tmp_path / "dlq", clock=clock) as dlq:
        old, both = dlq.send_batch([b"old", b"both"], bundle=False)  # records by message id
        before = vsqs.DeadLettered("/q", 1, now(clock))
        for message_id in (old, both):
            legacy = f"{message_id}{names.ORIGIN_SUFFIX}"
            (tmp_path / "dlq" / legacy).write_bytes(before.to_json())
        clock.advance(1)
        after = vsqs.DeadLettered("/q", 2, now(clock))
        record_id = names.IdGenerator().next_id(int(clock() * 1000))
        newer = names.origin_name(both, record_id)
        (tmp_path / "dlq" / newer).write_bytes(after.to_json())
        assert [m.dead_lettered for m in dlq.peek()] == [before, after]
        got = dlq.receive_batch(2)
        assert [m.dead_lettered for m in got] == [before, after]
        assert dlq.delete_batch(got).ok
        assert records(tmp_path / "dlq") == []


def test_a_received_dead_letter_whose_listed_record_is_gone_looks_for_its_own(
    tmp_path: Path, clock: FakeClock
) -> None:
    """On a local directory a moved message is published under its ready name
    ``<id>`` every time: a receiver's listing may have shown an earlier copy
    of it with that copy's record, which a redrive removed before a later
    dead-lettering wrote a new one. The record read is the message's own."""
    dlq_dir = tmp_path / "dlq"
    with vsqs.Queue(dlq_dir, clock=clock) as dlq:
        first, poison = dlq.send_batch([b"first", b"poison"], bundle=False)  # records by message id
        earlier = dlq_dir / names.origin_name(poison, names.IdGenerator().next_id(0))
        earlier.write_bytes(vsqs.DeadLettered("/q", 1, now(clock)).to_json())
        got = dlq.receive()  # lists both messages and the record
        assert got is not None and got.id == first
        clock.advance(0.1)  # less than STALE_AFTER: the receiver does not list again
        earlier.unlink()  # redriven; dead-lettered again with a record of its own
        later = vsqs.DeadLettered("/q", 2, now(clock))
        record_id = names.IdGenerator().next_id(int(clock() * 1000))
        (dlq_dir / names.origin_name(poison, record_id)).write_bytes(later.to_json())
        held = dlq.receive()
        assert held is not None and held.id == poison and held.dead_lettered == later
        held.delete()
        assert records(dlq_dir) == []


def test_a_redrives_late_record_delete_never_removes_a_later_dead_letterings_record(
    memory_server: Server,
) -> None:
    """Issue 26, class 3: a redrive's DELETE of the record lands after the
    redriven message was dead-lettered again. It used to delete the record
    that dead-lettering wrote under the same name ``<id>.origin``, and the
    dead letter showed ``dead_lettered=None``; each record's name now never
    recurs."""
    clock = FakeClock(float(int(time.time())))
    store, dlq_store = jobs_and_dlq(memory_server)
    with vsqs.Queue(store, clock=clock, **JOBS) as jobs:  # type: ignore[arg-type]
        poison = dead_letter_one(jobs, clock)
        again: list[datetime] = []

        def dead_letter_again() -> None:
            back = jobs.receive()
            assert back is not None and back.id == poison
            clock.advance(2)
            assert jobs.receive() is None  # dead-lettered again, with a record of its own
            again.append(now(clock))

        late = ObjectStore(
            Interleave(dlq_store.io, on("remove", names.ORIGIN_SUFFIX), dead_letter_again)
        )
        with vsqs.Queue(late, clock=clock) as dlq:
            assert vsqs.redrive(dlq, jobs, max_messages=1) == 1
        assert again, "the redrive deleted no record"
    with vsqs.Queue(dlq_store, clock=clock) as dlq:
        [dead] = dlq.peek()
        # A sibling id: the record being deleted was still listed, and might
        # have been a move's under way (two moves at once never share an id).
        assert dead.id[:19] == poison[:19]
        assert dead.dead_lettered == vsqs.DeadLettered(store.url, 1, again[0])
        held = dlq.receive()
        assert held is not None and held.dead_lettered == dead.dead_lettered


def test_purge_keeps_the_record_of_a_dead_letter_whose_delete_lost_a_race(
    memory_server: Server,
) -> None:
    """Issue 26, class 3: a purge listed a held dead letter, whose holder
    extended it before the purge's delete: the message survives the purge,
    and so must its record (the purge deleted the records of every message
    it listed)."""
    clock = FakeClock(float(int(time.time())))
    store, dlq_store = jobs_and_dlq(memory_server)
    with vsqs.Queue(store, clock=clock, **JOBS) as jobs:  # type: ignore[arg-type]
        poison = dead_letter_one(jobs, clock)
        at = now(clock)
    with vsqs.Queue(dlq_store, clock=clock) as holder:
        held = holder.receive(visibility_timeout=60)
        assert held is not None and held.id == poison and held.receipt is not None
        racing = Interleave(dlq_store.io, on("create", held.receipt + "."), lambda: held.extend(60))
        with vsqs.Queue(ObjectStore(racing), clock=clock) as dlq:
            assert dlq.purge() == 0  # the message moved on under its holder
        assert held.dead_lettered == vsqs.DeadLettered(store.url, 1, at)
        held.delete()
        assert [n for n in dlq_store.list() if n != names.CONFIG_NAME] == []  # the record went too


def test_a_move_in_never_gives_a_second_copy_the_id_of_a_copy_being_moved(
    memory_server: Server,
) -> None:
    """Issue 26, class 4. A redrive cut short after its publish leaves the
    message in both queues; a consumer of the source holds the copy there.
    A second redrive moves the other copy in while the consumer's extend is
    between its marker and its copy. Its check for a copy already here
    listed the id's names settled, which hide a name being moved: it
    published a second copy under the same id, whose claim in the same ms as
    the extend chose the same name, copied over it, and two consumers held
    one receipt (one ack succeeded, the other was stale). A copy under way
    counts as here now: the second copy gets a sibling id."""
    clock = FakeClock(float(int(time.time())))
    store, dlq_store = jobs_and_dlq(memory_server)
    with (
        vsqs.Queue(store, clock=clock, **JOBS) as jobs,  # type: ignore[arg-type]
        vsqs.Queue(dlq_store, clock=clock) as dlq,
    ):
        poison = dlq.send(b"poison")
        cut = Interleave(dlq_store.io, on("create", ".1.1" + _moves.MOVED_SUFFIX), die)
        with vsqs.Queue(ObjectStore(cut), clock=clock) as dying, pytest.raises(Crash):
            vsqs.redrive(dying, jobs)  # dies at its ack in the dead-letter queue
        held = jobs.receive(visibility_timeout=600)
        assert held is not None and held.id == poison and held.receipt is not None
        clock.advance(MOVE_HOLD + 1)  # the dead redrive's hold runs out

        def redrive() -> None:
            assert vsqs.redrive(dlq, jobs) == 1

        heartbeat = ObjectStore(Interleave(store.io, on("copy", held.receipt), redrive))
        with vsqs.Queue(heartbeat, clock=clock) as consumer:
            extended = consumer.extend(held.receipt, 60)
        other = jobs.receive(visibility_timeout=60)  # the same ms, the same visibility
        assert other is not None and other.id[:19] == poison[:19] and other.body == b"poison"
        assert other.receipt != extended.receipt, "two consumers hold one receipt"
        assert jobs.delete_batch([extended.receipt, other.receipt]).ok  # each holds a copy


def test_two_dead_letterings_of_one_message_at_once_never_publish_two_copies_under_one_id(
    memory_server: Server,
) -> None:
    """Issue 26, class 4, two moves at once (simulation seed 24): a
    dead-lettering whose hold at its source ran out while it moved (here,
    right after it listed the dead-letter queue and found no copy there)
    crossed the dead-lettering of the consumer that claimed the message
    next. Both had listed no copy, and both published under the message's
    id: two copies under one id, as a redrive and a claim crossing made them
    in class 4. A move writes its record before it lists now, and the one
    that lists second sees the first's record: it publishes under a sibling
    id, and the two copies never share an id, nor a name."""
    clock = FakeClock(float(int(time.time())))
    store, dlq_store = jobs_and_dlq(memory_server)

    def dead_letter_next() -> None:
        clock.advance(61)  # the first mover's hold runs out
        with vsqs.Queue(store, clock=clock) as other:
            assert other.receive(visibility_timeout=60) is None  # dead-lettered

    racing = Interleave(dlq_store.io, lambda what: what == "list", dead_letter_next, after=True)
    mover_io = Interleave(store.io, lambda what: False, lambda: None)
    mover_io.sibling = lambda name: racing  # type: ignore[method-assign]
    with vsqs.Queue(store, clock=clock, **JOBS) as jobs:  # type: ignore[arg-type]
        poison = jobs.send(b"poison")
        assert jobs.receive(visibility_timeout=1) is not None
        clock.advance(2)
        with vsqs.Queue(ObjectStore(mover_io), clock=clock) as mover:
            assert mover.receive(visibility_timeout=60) is None  # dead-lettered
        assert racing.meanwhile is None, "the other dead-lettering ran"
    published = [n[: names.ID_LEN] for n in dlq_store.list() if names.parse(n)]
    assert len(published) == len(set(published)) == 2, f"two copies under one id: {published}"
    with vsqs.Queue(dlq_store, clock=clock) as dlq:
        copies = dlq.receive_batch(10)
        assert [m.body for m in copies] == [b"poison", b"poison"]  # at least once
        assert poison in {m.id for m in copies}
        assert all(m.id[:19] == poison[:19] for m in copies)  # one FIFO position
        assert all(m.dead_lettered is not None for m in copies)


def test_a_torn_or_foreign_origin_record_reads_as_none(tmp_path: Path, clock: FakeClock) -> None:
    with vsqs.Queue(tmp_path / "dlq", clock=clock) as dlq:
        sent = dlq.send_batch([b"a", b"b"])
        record_id = names.IdGenerator().next_id(int(clock() * 1000))
        torn = names.origin_name(sent[0], record_id)
        (tmp_path / "dlq" / torn).write_bytes(b'{"source": "q", "rec')
        with open(tmp_path / "dlq" / names.origin_name(sent[1], record_id), "wb") as f:
            f.truncate(1 << 30)  # not read whole
        assert [m.dead_lettered for m in dlq.peek()] == [None, None]
        got = dlq.receive_batch(2)
        assert [m.dead_lettered for m in got] == [None, None]


# ---------------------------------------------------------- maximum size
def test_a_body_over_the_maximum_size_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    with vsqs.Queue(tmp_path / "q", max_message_size=10) as q:
        assert q.config.max_message_size == 10
        before = sorted(os.listdir(tmp_path / "q"))
        with pytest.raises(vsqs.MessageTooLarge, match="11 bytes; this queue takes at most 10"):
            q.send(b"x" * 11)
        with pytest.raises(vsqs.MessageTooLarge, match="message 2 of the batch"):
            q.send_batch([b"ok", b"ok", b"x" * 11])
        assert sorted(os.listdir(tmp_path / "q")) == before
        q.send(b"x" * 10)
    with pytest.raises(vsqs.QueueConfigError, match="max_message_size=10"):
        vsqs.Queue(tmp_path / "q", max_message_size=20)


def test_the_maximum_size_defaults_to_256_mib_or_the_environment_at_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with vsqs.Queue(tmp_path / "a") as a:
        assert a.config.max_message_size == 256 * 1024 * 1024
    monkeypatch.setenv("VSQS_MAX_MESSAGE_SIZE", "4096")
    with vsqs.Queue(tmp_path / "b") as b, vsqs.Queue(tmp_path / "a") as a:
        assert b.config.max_message_size == 4096  # written into b's config
        assert a.config.max_message_size == 256 * 1024 * 1024  # a's config says otherwise
    monkeypatch.setenv("VSQS_MAX_MESSAGE_SIZE", "1e6")
    with pytest.raises(vsqs.InvalidArgument, match="VSQS_MAX_MESSAGE_SIZE='1e6'"):
        vsqs.Queue(tmp_path / "c")
    with pytest.raises(vsqs.InvalidArgument, match="max_message_size must be a positive int"):
        vsqs.Queue(tmp_path / "d", max_message_size=0)


def test_an_oversized_object_on_an_object_store_is_passed_over_once(
    caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    """Written by something else (vsqs refuses to send it): the receiver logs
    it once, leaves it, and takes the message behind it."""
    url = f"memory://vsqs-max-size-{os.getpid()}-{id(clock)}/q"
    with vsqs.Queue(url, clock=clock, max_message_size=100, visibility_timeout=1) as q:
        big = names.IdGenerator().next_id(int(clock() * 1000) - 1)
        q.store.write_new(big, b"x" * 101, fsync=False)
        small = q.send(b"small")
        with caplog.at_level(logging.WARNING, logger="vsqs"):
            got = q.receive_batch(10)
            assert [m.id for m in got] == [small]
            got[0].delete()
            clock.advance(2)
            assert q.receive() is None
        warned = [r for r in caplog.records if "too large to receive" in r.getMessage()]
        assert len(warned) == 1 and big in warned[0].getMessage()
        assert q.stats().ready == 1  # left in the queue, visible again
        q.purge()
