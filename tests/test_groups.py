"""The promises of docs/groups.md (message groups, deduplication ids and
attributes), on a local directory and in memory, with an injected clock: the
rules each client sees, the files they leave (docs/format.md), format-2
queues, and the guide's examples, run as written.

Racing processes and every other backend are tried elsewhere (the
conformance suite in ``vsqs.testing``, ``tests/test_processes.py``); these
tests pin what the guide states, one rule per test.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import vsqs
from vsqs._candidates import STALE_AFTER, THROTTLE_ABOVE
from vsqs.testing import FakeClock

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: ``open_queue(name, **settings)``: a new client of the queue ``name``
#: (every call is another client of the same queue), on the test's clock.
Opener = Callable[..., vsqs.Queue]


@pytest.fixture(params=["local", "memory"])
def open_queue(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Opener]:
    root = vsqs.MemoryStore("root")
    opened: list[vsqs.Queue] = []

    def opener(name: str = "q", **settings: object) -> vsqs.Queue:
        where: object = tmp_path / name if request.param == "local" else root.sibling(name)
        queue = vsqs.Queue(where, clock=clock, **settings)  # type: ignore[arg-type]
        opened.append(queue)
        return queue

    yield opener
    for queue in opened:
        queue.close()


def bodies(messages: list[vsqs.Message]) -> list[bytes]:
    return [m.body for m in messages]


def drain(q: vsqs.Queue) -> list[bytes]:
    """Receive and delete one message at a time until none is left."""
    got = []
    while (m := q.receive()) is not None:
        got.append(m.body)
        m.delete()
    return got


# ------------------------------------------------------------------ groups
def test_a_groups_messages_come_in_send_order_one_at_a_time_to_every_client(
    open_queue: Opener, clock: FakeClock
) -> None:
    producer, first, second = open_queue(), open_queue(), open_queue()
    for i in range(3):
        producer.send(f"a{i}", group="A")
    a0 = first.receive()
    assert a0 is not None and (a0.body, a0.group) == (b"a0", "A")
    assert second.receive() is None and first.receive() is None  # A is in flight: to no one
    a0.delete()
    clock.advance(STALE_AFTER)  # others see the group open at their next listing
    a1 = second.receive()
    assert a1 is not None and a1.body == b"a1"
    assert first.receive() is None
    a1.delete()
    clock.advance(STALE_AFTER)
    assert drain(first) == [b"a2"]


def test_messages_without_a_group_are_not_held_back_by_groups(open_queue: Opener) -> None:
    q = open_queue()
    q.send("a0", group="A")
    q.send("a1", group="A")
    q.send("plain")
    q.send("b0", group="B")
    other = open_queue()
    assert bodies(other.receive_batch(2)) == [b"a0", b"a1"]
    assert bodies(q.receive_batch(10)) == [b"plain", b"b0"]


def test_a_batch_takes_consecutive_messages_of_a_group_and_the_rest_from_others(
    open_queue: Opener,
) -> None:
    q = open_queue()
    for body, group in [("a0", "A"), ("b0", "B"), ("a1", "A"), ("a2", "A"), ("b1", "B")]:
        q.send(body, group=group)
    batch = q.receive_batch(10)
    assert bodies(batch) == [b"a0", b"b0", b"a1", b"a2", b"b1"]
    assert open_queue().receive_batch(10) == []  # both groups are held by the batch


def test_a_released_head_stays_at_the_head_of_its_group(open_queue: Opener) -> None:
    q = open_queue()
    for i in range(3):
        q.send(f"a{i}", group="A")
    head = q.receive()
    assert head is not None
    head.release()
    again = open_queue().receive()
    assert again is not None and (again.body, again.receive_count) == (b"a0", 2)


def test_a_delayed_release_or_an_extend_keeps_the_group_blocked(
    open_queue: Opener, clock: FakeClock
) -> None:
    q, other = open_queue(), open_queue()
    q.send("a0", group="A")
    q.send("a1", group="A")
    head = q.receive(visibility_timeout=5)
    assert head is not None
    head.release(delay=20)
    clock.advance(10)
    assert other.receive() is None  # released with a delay: still the head, still blocking
    clock.advance(11)
    head = other.receive(visibility_timeout=5)
    assert head is not None and head.body == b"a0"
    head = head.extend(60)
    clock.advance(30)  # past the first timeout, within the extension
    assert q.receive() is None and other.receive() is None
    head.delete()
    clock.advance(STALE_AFTER)
    assert drain(q) == [b"a1"]


def test_an_expired_head_is_delivered_again_before_the_rest_of_its_group(
    open_queue: Opener, clock: FakeClock
) -> None:
    q = open_queue()
    q.send("a0", group="A")
    q.send("a1", group="A")
    assert q.receive(visibility_timeout=5) is not None
    clock.advance(6)
    again = open_queue().receive()
    assert again is not None and (again.body, again.receive_count) == (b"a0", 2)


def test_strict_dead_letters_need_a_dead_letter_queue(tmp_path: Path) -> None:
    """The setting is stored like the others and refused where it means nothing."""
    with pytest.raises(vsqs.InvalidArgument, match="dead_letter_blocks_group needs a dead_letter"):
        vsqs.Queue(tmp_path / "bare", dead_letter_blocks_group=True)
    with pytest.raises(vsqs.InvalidArgument, match="must be True or False"):
        vsqs.Queue(tmp_path / "odd", max_receives=1, dead_letter="d", dead_letter_blocks_group=1)  # type: ignore[arg-type]
    with vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter="d", dead_letter_blocks_group=True):
        pass
    config = json.loads((tmp_path / "q" / "vsqs.json").read_text())
    assert config["dead_letter_blocks_group"] is True
    with pytest.raises(vsqs.QueueConfigError, match="dead_letter_blocks_group=True, not False"):
        vsqs.Queue(tmp_path / "q", dead_letter_blocks_group=False)


def test_a_dead_lettered_head_unblocks_its_group_and_keeps_group_and_attributes(
    open_queue: Opener, clock: FakeClock
) -> None:
    q = open_queue("jobs", max_receives=1, dead_letter="jobs-dlq")
    q.send("a0", group="A", attributes={"trace": "t0"})
    q.send("a1", group="A")
    assert q.receive(visibility_timeout=5) is not None
    clock.advance(6)
    after = q.receive()  # a0 is exhausted: dead-lettered, and A moves on
    assert after is not None and after.body == b"a1"
    dead = open_queue("jobs-dlq").receive()
    assert dead is not None
    assert (dead.body, dead.group, dead.attributes) == (b"a0", "A", {"trace": "t0"})


def test_a_targeted_receive_gives_only_that_groups_next_message(open_queue: Opener) -> None:
    q = open_queue()
    q.send("plain")
    q.send("a0", group="A")
    q.send("b0", group="B")
    q.send("b1", group="B")
    b0 = q.receive(group="B")
    assert b0 is not None and b0.body == b"b0"
    assert q.receive(group="B") is None  # b0 is in flight
    assert q.receive_batch(10, group="C") == []
    b0.delete()
    assert bodies(q.receive_batch(10, group="B")) == [b"b1"]
    assert bodies(q.receive_batch(10)) == [b"plain", b"a0"]


def test_a_delayed_send_joins_its_group_when_due(open_queue: Opener, clock: FakeClock) -> None:
    q = open_queue()
    q.send("a0", group="A", delay=30)  # waiting: it holds nothing
    q.send("a1", group="A")
    q.send("a2", group="A")
    held = q.receive_batch(10, visibility_timeout=60)
    assert bodies(held) == [b"a1", b"a2"]
    clock.advance(31)
    assert open_queue().receive() is None  # due, but its group is in flight
    q.delete_batch(held)
    assert drain(q) == [b"a0"]


def test_a_long_backlog_of_one_group_never_delays_another_groups_head(
    open_queue: Opener,
) -> None:
    q = open_queue()
    q.send_batch([f"a{i}" for i in range(3000)], group="A")
    q.send("b0", group="B")
    assert bodies(q.receive_batch(2)) == [b"a0", b"a1"]
    b0 = open_queue().receive()  # every message of A before b0 waits behind a0
    assert b0 is not None and b0.body == b"b0"


def test_receivers_are_offered_the_oldest_available_head(open_queue: Opener) -> None:
    q = open_queue()
    for body, group in [("a0", "A"), ("a1", "A"), ("b0", "B"), ("c0", "C"), ("b1", "B")]:
        q.send(body, group=group)
    first = [open_queue().receive() for _ in range(4)]
    assert [m.body if m else None for m in first] == [b"a0", b"b0", b"c0", None]


def test_stats_count_the_groups_in_flight(open_queue: Opener) -> None:
    q = open_queue()
    for body, group in [("a0", "A"), ("a1", "A"), ("b0", "B"), ("c0", "C")]:
        q.send(body, group=group)
    q.send("d0", group="D", delay=60)  # delayed: holds no group
    q.receive_batch(10)
    assert q.stats().groups_in_flight == 3


def test_groups_and_keys_are_checked_before_anything_is_written(open_queue: Opener) -> None:
    q = open_queue()
    for bad in ["", "has space", "é", "x" * 129]:
        with pytest.raises(vsqs.InvalidArgument):
            q.send("x", group=bad)
        with pytest.raises(vsqs.InvalidArgument):
            q.send("x", dedup_id=bad)
    q.send("x", group="~!" + "x" * 126)  # 128 printable ASCII characters
    assert q.stats().ready == 1


# ----------------------------------------------------------- deduplication
def test_a_duplicate_within_the_window_returns_the_first_id_also_after_deletion(
    open_queue: Opener, clock: FakeClock
) -> None:
    q, other = open_queue(), open_queue()
    first = q.send("order 7", dedup_id="order-7")
    assert other.send("order 7 again", dedup_id="order-7") == first
    m = q.receive()
    assert m is not None and m.id == first
    m.delete()
    clock.advance(299)
    assert other.send("order 7", dedup_id="order-7") == first  # deleted, still deduplicated
    assert q.receive() is None


def test_the_window_runs_from_the_first_send_and_duplicates_do_not_extend_it(
    open_queue: Opener, clock: FakeClock
) -> None:
    q = open_queue(dedup_window=60)
    first = q.send("x", dedup_id="k")
    clock.advance(50)
    assert q.send("x", dedup_id="k") == first  # within the window: does not extend it
    clock.advance(10)  # 60 s after the first send
    second = q.send("x", dedup_id="k")
    assert second != first
    assert bodies(q.receive_batch(10)) == [b"x", b"x"]
    clock.advance(59)
    assert q.send("x", dedup_id="k") == second  # the new window runs from the second


def test_content_dedup_takes_the_sha256_of_the_body(open_queue: Opener) -> None:
    q = open_queue(content_dedup=True)
    first = q.send(b"same")
    assert q.send("same") == first
    assert q.send(b"other") != first
    assert q.send(b"same", dedup_id="own") != first  # an explicit id wins
    plain = open_queue("plain")
    assert plain.send(b"same") != plain.send(b"same")
    assert plain.send(b"same", dedup_id=hashlib.sha256(b"same").hexdigest()) is not None


def test_a_batch_with_dedup_ids_returns_each_first_id(open_queue: Opener) -> None:
    q = open_queue()
    ids = q.send_batch(["a", "b", "a again"], dedup_ids=["a", "b", "a"])
    assert ids[2] == ids[0] and ids[1] != ids[0]
    assert bodies(q.receive_batch(10)) == [b"a", b"b"]


def test_sends_of_one_id_racing_from_many_clients_make_one_message(open_queue: Opener) -> None:
    clients = [open_queue() for _ in range(8)]
    start = threading.Barrier(len(clients))

    def send(q: vsqs.Queue) -> str:
        start.wait()
        return q.send(b"once", dedup_id="race")

    with ThreadPoolExecutor(len(clients)) as pool:
        returned = set(pool.map(send, clients))
    assert len(returned) == 1
    assert [m.id for m in clients[0].receive_batch(10)] == list(returned)


def test_purge_and_gc_within_the_window_leave_the_records(open_queue: Opener) -> None:
    q = open_queue()
    first = q.send(b"x", dedup_id="k")
    assert q.purge() == 1
    q.gc()
    assert q.send(b"x", dedup_id="k") == first
    assert q.stats().ready == 0


# -------------------------------------------------------------- attributes
def test_attributes_are_kept_through_receive_extend_and_release(open_queue: Opener) -> None:
    q = open_queue()
    attributes = {"content-type": "application/json", "trace.id": "é" * 3}
    q.send("{}", attributes=attributes)
    q.send("none")
    m = q.receive()
    assert m is not None and (m.attributes, m.group) == (attributes, None)
    assert m.extend(10).attributes == attributes
    m.release()
    peeked = q.peek(10)
    assert [p.attributes for p in peeked] == [attributes, {}]
    again = q.receive()
    assert again is not None and again.attributes == attributes


def test_attribute_limits_are_enforced_before_anything_is_written(open_queue: Opener) -> None:
    q = open_queue()
    eleven = {f"a{i}": "v" for i in range(11)}
    for bad in [eleven, {"": "v"}, {"sp ace": "v"}, {"x" * 257: "v"}, {"n": 1}, ["n"]]:
        with pytest.raises(vsqs.InvalidArgument):
            q.send("x", attributes=bad)  # type: ignore[arg-type]
    q.send("x", attributes={f"a{i}": "v" for i in range(9)} | {"x" * 256: ""})
    assert q.stats().ready == 1


def test_the_body_and_its_attributes_count_against_max_message_size(
    open_queue: Opener,
) -> None:
    q = open_queue(max_message_size=100)
    q.send(b"x" * 90, attributes={"name": "v" * 6})  # 90 + 4 + 6 = 100
    with pytest.raises(vsqs.MessageTooLarge):
        q.send(b"x" * 90, attributes={"name": "v" * 7})
    m = q.receive()
    assert m is not None and m.attributes == {"name": "v" * 6}


def test_outgoing_gives_one_message_of_a_batch_its_own_metadata(open_queue: Opener) -> None:
    q = open_queue()
    ids = q.send_batch(
        ["a0", vsqs.Outgoing("b0", group="B", attributes={"k": "b"}), "a1"],
        group="A",
        attributes={"k": "a"},
    )
    assert len(set(ids)) == 3
    got = q.receive_batch(10)
    assert [(m.body, m.group, m.attributes) for m in got] == [
        (b"a0", "A", {"k": "a"}),
        (b"b0", "B", {"k": "b"}),
        (b"a1", "A", {"k": "a"}),
    ]


def test_a_message_shows_its_dedup_id_when_it_has_a_group_or_attributes(
    open_queue: Opener,
) -> None:
    q = open_queue()
    q.send("plain", dedup_id="p")
    q.send("grouped", dedup_id="g", group="G")
    got = {m.body: m.dedup_id for m in q.receive_batch(10)}
    assert got == {b"plain": None, b"grouped": "g"}


def test_a_message_a_send_accepts_is_never_too_large_to_receive(open_queue: Opener) -> None:
    """Attributes count as stored: control characters are escaped (6 bytes
    each), so a send that would be too large to receive is refused."""
    q = open_queue(max_message_size=200_000)
    with pytest.raises(vsqs.MessageTooLarge, match="as stored"):
        q.send(b"x", attributes={"v": "\x01" * 150_000})
    assert q.stats().ready == 0
    q.send(b"x", attributes={"v": "\x01" * 10_000})  # 60 000 bytes escaped: fits
    m = q.receive()
    assert m is not None and m.attributes == {"v": "\x01" * 10_000}


def test_a_redriven_message_keeps_its_group_and_attributes(
    open_queue: Opener, clock: FakeClock
) -> None:
    q = open_queue("jobs", max_receives=1, dead_letter="jobs-dlq")
    q.send("a0", group="A", attributes={"k": "v"})
    assert q.receive(visibility_timeout=1) is not None
    clock.advance(2)
    assert q.receive() is None  # dead-lettered
    assert vsqs.redrive(open_queue("jobs-dlq").store, q.store) == 1
    m = open_queue("jobs").receive()
    assert m is not None and (m.body, m.group, m.attributes) == (b"a0", "A", {"k": "v"})


# ------------------------------------------------------------------ format
ID = r"\d{13}-[0-9a-f]{4}-[0-9a-f]{16}"


def test_the_files_of_format_3_are_as_the_format_document_shows(
    tmp_path: Path, clock: FakeClock
) -> None:
    q = vsqs.Queue(tmp_path / "q", clock=clock)
    grouped = q.send("body", group="orders-7", dedup_id="d-1")
    tagged = q.send("body", attributes={"k": "v"})
    plain = q.send("body")
    token = hashlib.sha256(b"orders-7").hexdigest()[:16]
    assert re.fullmatch(rf"{ID}_g{token}", grouped)
    assert re.fullmatch(rf"{ID}_a", tagged) and re.fullmatch(ID, plain)
    assert grouped[:35] < tagged[:35] < plain[:35]  # the tag is after the FIFO part
    assert (tmp_path / "q" / grouped).read_bytes() == (
        b'\x00vsqs-envelope 1\n{"dedup_id":"d-1","group":"orders-7"}\nbody'
    )
    assert (tmp_path / "q" / tagged).read_bytes() == (
        b'\x00vsqs-envelope 1\n{"attributes":{"k":"v"}}\nbody'
    )
    assert (tmp_path / "q" / plain).read_bytes() == b"body"
    at_ms = int(clock() * 1000)
    slot = at_ms // 300_000  # the first send's slot of the 300 s window
    record = tmp_path / "q" / f"vsqs-dedup.{hashlib.sha256(b'd-1').hexdigest()[:32]}.{slot}.dedup"
    header = json.dumps({"at_ms": at_ms, "delay_ms": 0, "id": grouped}, sort_keys=True)
    assert record.read_bytes() == (
        b"\x00vsqs-dedup 1\n" + header.encode() + b"\n" + (tmp_path / "q" / grouped).read_bytes()
    )
    assert record.with_suffix(".sent").read_bytes() == b""
    assert json.loads((tmp_path / "q" / "vsqs.json").read_bytes())["format"] == 4
    assert vsqs.FORMAT_VERSION == 4


def test_only_a_tagged_id_is_read_as_an_envelope(tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q")
    looks_like_one = b'\x00vsqs-envelope 1\n{"group":"A"}\nbody'
    q.send(looks_like_one)  # untagged: its body, never parsed
    foreign = "1750000000000-0000-0123456789abcdef_g0123456789abcdef"
    (tmp_path / "q" / foreign).write_bytes(b"not an envelope")  # tagged, not well formed
    got = [(m.body, m.group, m.attributes) for m in q.receive_batch(10)]
    assert got == [(b"not an envelope", None, {}), (looks_like_one, None, {})]


def test_a_file_under_a_records_name_that_is_not_one_is_left_and_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    """vsqs never removes what it did not write: a send of that id fails
    with one line, and sends of other ids go on."""
    q = vsqs.Queue(tmp_path / "q", clock=clock)
    slot = int(clock() * 1000) // 300_000
    record = tmp_path / "q" / f"vsqs-dedup.{hashlib.sha256(b'k').hexdigest()[:32]}.{slot}.dedup"
    record.write_bytes(b"torn")
    with pytest.raises(vsqs.StorageError, match="deduplication id 'k'"):
        q.send(b"x", dedup_id="k")
    assert record.read_bytes() == b"torn"
    first = q.send(b"y", dedup_id="other")
    assert q.send(b"y", dedup_id="other") == first and q.stats().ready == 1


def format_2_queue(path: Path) -> None:
    """A queue as a format-2 client created it, with one message in it."""
    path.mkdir()
    config = {"format": 2, "visibility_timeout": 30.0, "max_receives": None, "dead_letter": None}
    (path / "vsqs.json").write_text(json.dumps(config))
    (path / "1750000000000-0000-0123456789abcdef").write_bytes(b"old")


def test_a_format_2_queue_opens_without_the_new_features(tmp_path: Path) -> None:
    format_2_queue(tmp_path / "old")
    q = vsqs.Queue(tmp_path / "old")
    assert q.config.format == 2
    for features in [{"group": "A"}, {"dedup_id": "d"}, {"attributes": {"k": "v"}}]:
        with pytest.raises(vsqs.QueueConfigError, match="vsqs move"):
            q.send("x", **features)  # type: ignore[arg-type]
    with pytest.raises(vsqs.QueueConfigError):
        q.send_batch([vsqs.Outgoing("x", group="A")])
    q.send("new")
    assert drain(q) == [b"old", b"new"]
    assert sorted(os.listdir(tmp_path / "old")) == ["vsqs.json"]


def test_move_drains_a_format_2_queue_into_a_new_one(tmp_path: Path) -> None:
    format_2_queue(tmp_path / "old")
    assert vsqs.move(tmp_path / "old", tmp_path / "new") == 1
    new = vsqs.Queue(tmp_path / "new")
    assert new.config.format == vsqs.FORMAT_VERSION
    new.send("grouped", group="A")
    assert drain(new) == [b"old", b"grouped"]


def test_move_keeps_group_and_attributes(tmp_path: Path) -> None:
    src = vsqs.Queue(tmp_path / "src")
    src.send("a0", group="A", attributes={"k": "v"})
    vsqs.move(tmp_path / "src", tmp_path / "dst")
    m = vsqs.Queue(tmp_path / "dst").receive()
    assert m is not None and (m.group, m.attributes) == ("A", {"k": "v"})


# ----------------------------------------------------------------- the guide
def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


def test_the_examples_of_the_groups_guide_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``python`` block of docs/groups.md runs, in order, in one
    namespace, in a fresh directory; their ``assert`` lines are the checks."""
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks((DOCS / "groups.md").read_text())
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "docs/groups.md", "exec"), namespace)
    asserted = sum(block.count("assert ") for block in blocks)
    assert len(blocks) >= 4 and asserted >= 10, "is docs/groups.md still made of examples?"


# ------------------------------------------------------- stalls in a claim
class Stalling(vsqs.MemoryStore):
    """A memory store on which the clock jumps ``seconds`` while one chosen
    name is read or renamed (a request, or the process, stalled)."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds
        self.reading: str | None = None  # an id: a read of a name of it stalls
        self.renaming: str | None = None  # an id: a rename from a name of it stalls

    def read(self, name: str) -> bytes:
        if self.reading is not None and name.startswith(self.reading):
            self.clock.advance(self.seconds)
            self.reading = None  # once
        return super().read(name)

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        if self.renaming is not None and src.startswith(self.renaming):
            self.clock.advance(self.seconds)
            self.renaming = None  # once


def test_a_batch_whose_groups_head_lapsed_gives_back_the_rest_of_the_group(
    clock: FakeClock,
) -> None:
    """The head's claim ran out while the batch went on: the messages behind
    it are not delivered before it (simulation seed 197), nor claimed after."""
    store = Stalling(clock, 0.7)  # past the timeout, not long enough for a new listing
    q = vsqs.Queue(store, clock=clock)
    a1, a2 = q.send_batch([b"a1", b"a2"], group="a", bundle=False)  # a1's read stalls alone
    b1 = q.send(b"b1", group="b")
    clock.advance(1)  # no name young: one listing is enough
    store.reading = a1
    got = q.receive_batch(10, visibility_timeout=0.5)
    assert [m.id for m in got] == [b1]  # a1 lapsed in the batch; a2 not taken behind it
    clock.advance(STALE_AFTER)  # the group lapsed in the batch: open again at the next listing
    again = q.receive_batch(10, group="a")
    assert [(m.id, m.receive_count) for m in again] == [(a1, 2), (a2, 1)]


def test_a_claim_of_a_group_that_stalled_is_given_back(clock: FakeClock) -> None:
    """A claim whose rename ended long after it was decided may have met a
    change of its group it never saw (simulation seed 303): it is given back,
    uncounted, and taken again on a fresh listing."""
    store = Stalling(clock, 2.0)
    q = vsqs.Queue(store, clock=clock)
    a1 = q.send(b"a1", group="a")
    clock.advance(1)  # not young: one listing is enough
    store.renaming = a1
    got = q.receive()
    assert got is not None and (got.id, got.receive_count) == (a1, 1)
    versions = [n.rsplit(".", 1)[-1] for n in store.list() if n.startswith(a1)]
    assert versions == ["3"]  # claimed (1), given back (2), claimed again (3)


# ------------------------------------------ a running consumer of a big queue
def slow_listings(store: vsqs.LocalStore, clock: FakeClock) -> None:
    """Every listing of ``store`` takes one second by ``clock``."""
    plain = store.list

    def listing(*, prefix: str = "", settle: bool = False) -> list[str]:
        clock.advance(1)
        return list(plain(prefix=prefix, settle=settle))

    store.list = listing  # type: ignore[method-assign]


def test_a_consumer_whose_candidates_ran_out_sees_a_new_message_at_once(tmp_path: Path) -> None:
    """Before: a queue of more than THROTTLE_ABOVE names whose listing took
    long was not listed again for 20 listings' time, and without a feed (the
    first listing goes without) a new message waited that long."""
    clock = FakeClock()
    with vsqs.Queue(tmp_path / "q", clock=clock) as holder:
        holder.send_batch([b"held"] * (THROTTLE_ABOVE + 1))
        assert len(holder.receive_batch(THROTTLE_ABOVE + 1, visibility_timeout=3600)) > 0
        while holder.receive_batch(THROTTLE_ABOVE, visibility_timeout=3600):
            pass
    store = vsqs.LocalStore(str(tmp_path / "q"))
    slow_listings(store, clock)
    with vsqs.Queue(store, clock=clock) as consumer, vsqs.Queue(tmp_path / "q", clock=clock) as p:
        assert consumer.receive() is None
        new = p.send(b"new")
        got = consumer.receive()
        assert got is not None and got.id == new


def test_a_running_receive_for_one_group_gets_its_new_messages_from_the_feed(
    tmp_path: Path,
) -> None:
    """A consumer of group B with other groups' candidates in its view is fed
    its group's new messages, without listing again (listings cost 1 s here)."""
    clock = FakeClock()
    with vsqs.Queue(tmp_path / "q", clock=clock) as producer:
        producer.send_batch([b"a"] * 10, group="A")
        store = vsqs.LocalStore(str(tmp_path / "q"))
        with vsqs.Queue(store, clock=clock) as consumer:
            assert consumer.receive(group="B") is None
            assert consumer.receive(group="B") is None  # its feed runs from here
            slow_listings(store, clock)
            listed = clock()
            for i in range(3):
                sent = producer.send(f"b{i}", group="B")
                got = consumer.receive(group="B")
                assert got is not None and got.id == sent
                got.delete()
            assert clock() == listed, "it listed again"


def test_a_receiver_looks_for_each_blockers_dead_letter_at_most_every_check(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The strict mode's cost in the dead-letter queue: a receive whose
    listing shows ten blockers looks for the dead letters of at most
    ``BLOCKER_CHECKS`` of them (a listing of the dead-letter queue each,
    which finds it), and each blocker is looked for once per
    ``BLOCKER_CHECK`` seconds, however often its receiver lists (here at
    each receive: a plain message arrives before each)."""
    from prometheus_client import CollectorRegistry

    import vsqs.metrics
    from vsqs._dead_letter import BLOCKER_CHECK, BLOCKER_CHECKS

    strict = {"max_receives": 1, "dead_letter": "dlq", "dead_letter_blocks_group": True}
    polled = vsqs.LocalStore(str(tmp_path / "q"), notifications=False)  # each receive lists
    with vsqs.Queue(polled, clock=clock, **strict) as q:  # type: ignore[arg-type]
        for body in (b"poison", b"next"):
            for g in range(10):
                q.send(body, group=f"g{g}")
        assert len(q.receive_batch(10, visibility_timeout=1)) == 10  # the ten heads
        clock.advance(1)
        assert q.receive_batch(10) == []  # each head dead-lettered; its group blocked
        assert q.stats().dead_letter == 10
        dlq_url = vsqs.Queue(tmp_path / "dlq").url
        registry = CollectorRegistry()
        vsqs.metrics.enable_prometheus(registry)
        try:

            def lists(url: str) -> float:
                got = registry.get_sample_value(
                    "vsqs_store_requests_total",
                    {"queue": url, "operation": "list", "outcome": "ok"},
                )
                return got or 0.0

            for _ in range(3):
                clock.advance(BLOCKER_CHECK)
                looks = []
                for _ in range(4):
                    q.send(b"plain")  # the directory changes: the receive lists it
                    before, own = lists(dlq_url), lists(q.url)
                    got = q.receive()
                    looks.append(lists(dlq_url) - before)
                    assert looks[-1] <= BLOCKER_CHECKS * (lists(q.url) - own)
                    assert got is not None and got.body == b"plain"
                    got.delete()
                assert looks[0] and sum(looks) == 10  # each blocker once in BLOCKER_CHECK
        finally:
            vsqs.metrics.disable()
