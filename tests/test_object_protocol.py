"""The object-store protocol on real servers: the capability probe against
servers that behave like other S3s, request counts, and each class of failure
that format 1 had (``docs/protocol.md``), forced by letting another client act
between two requests of one, as a slow, throttled or retried request does.

Each ``test_class_*`` test failed on format 1 and passes now; the deterministic
simulation (``tests/test_simulation.py``) finds the same classes by itself.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

import vsqs
from vsqs import _names as names
from vsqs._inspect import RESTAMP_AFTER
from vsqs._publish import commit, stage, unstage
from vsqs._teardown import is_config
from vsqs.stores import _moves, _object, _object_io, _probe
from vsqs.stores._moves import BATCH, MOVED_SUFFIX
from vsqs.stores._object import ObjectStore
from vsqs.stores._object_io import ObjectIO
from vsqs.stores._registry import open_store
from vsqs.testing import FakeClock

from .support.crashes import Crash
from .support.fault_proxy import FaultProxy, Quirk
from .support.faulty_io import FaultyIO, Interleave, die, on
from .support.object_stores import object_store, raw_names
from .support.servers import Server, proxied


def live_names(store: ObjectStore, message_id: str) -> list[str]:
    """The names of a message, as any client's listing shows them (markers and hidden names out)."""
    return [n for n in store.list() if n.startswith(message_id)]


# ------------------------------------------------------------------ probe
@pytest.mark.parametrize(
    ("server_fixture", "protocol"),
    [
        ("s3_server", "create-only"),
        ("ceph_server", "create-only"),
        ("gcs_server", "gcs-generation"),
        ("memory_server", "create-only"),
    ],
)
def test_the_probe_picks_the_protocol_and_leaves_nothing(
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
    with pytest.raises(vsqs.UnsupportedStore, match="unsafe_claims=True") as refused:
        vsqs.Queue(url)
    assert "--unsafe-claims" in str(refused.value) and "unsafeClaims" in str(refused.value)
    with vsqs.Queue(url, unsafe_claims=True) as q:
        assert isinstance(q.store, ObjectStore) and q.store.protocol == "none"
        q.send(b"x")
        msg = q.receive()
        assert msg is not None and msg.body == b"x"
        msg.delete()


def conditional_put(method: str, headers: dict[str, str]) -> bool:
    return method == "PUT" and "If-None-Match" in headers


def test_a_server_that_does_not_implement_exclusive_creates_is_refused_in_its_words(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """OpenStack Swift's s3api answers 501 to a PUT with ``If-None-Match``."""
    s3_proxy.quirk = Quirk(conditional_put, answer=(501, "NotImplemented", "Swift says no"))
    url = f"s3://vsqs-test/swift-{time.time_ns()}/q"
    with pytest.raises(vsqs.UnsupportedStore, match=r"Swift says no.*unsafe_claims=True"):
        vsqs.Queue(url, storage_options=proxied(s3_server, s3_proxy))


def test_a_server_that_overwrites_on_create_is_refused_unless_opted_in(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """s3rver ignores ``If-None-Match``: its creates replace what is there."""
    s3_proxy.quirk = Quirk(conditional_put, drop=frozenset({"if-none-match"}))
    url = f"s3://vsqs-test/s3rver-{time.time_ns()}/q"
    options = proxied(s3_server, s3_proxy)
    with pytest.raises(vsqs.UnsupportedStore, match="replaced an object"):
        vsqs.Queue(url, storage_options=options)
    dlq = url.replace("/q", "/dlq")
    with vsqs.Queue(url, storage_options=options, unsafe_claims=True) as q:
        assert q.protocol == "none"
        q.send(b"x")
    vsqs.Queue(dlq, storage_options=options, unsafe_claims=True).close()
    with pytest.raises(vsqs.UnsupportedStore, match="unsafe_claims=True"):
        vsqs.redrive(dlq, url, storage_options=options)
    # Not q's dead-letter queue (q has none): force, to reach the claims check.
    moved = vsqs.redrive(dlq, url, storage_options=options, unsafe_claims=True, force=True)
    assert moved == 0


def test_a_server_without_conditional_deletes_runs_the_whole_protocol(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """LocalStack (and S3 before September 2025) answers 501 to a ``DELETE`` with
    ``If-Match``; vsqs never sends one: every condition it sends is an
    exclusive create."""
    s3_proxy.quirk = Quirk(
        lambda method, headers: method == "DELETE" and "If-Match" in headers,
        answer=(501, "NotImplemented", "no conditional deletes here"),
    )
    url = f"s3://vsqs-test/localstack-{time.time_ns()}/q"
    with vsqs.Queue(url, storage_options=proxied(s3_server, s3_proxy)) as q:
        assert q.protocol == "create-only"
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        msg = msg.extend(60)
        msg.delete()
        assert q.purge() == 0
    conditions = {e.condition for e in s3_proxy.exchanges}
    assert conditions <= {"", "If-None-Match: *"}, conditions


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


@contextmanager
def warmed(store: ObjectStore) -> Iterator[vsqs.Queue]:
    """A queue on ``store`` whose first listing is taken, on a clock standing
    still (no listing falls due meanwhile), its request counts cleared."""
    clock = FakeClock(time.time())
    with vsqs.Queue(store, clock=clock) as q:
        q.send_batch([b"warm"] * 3, bundle=False)  # three objects: the counts are a message's
        clock.advance(1)  # no young names
        q.receive().delete()  # type: ignore[union-attr] - the first listing
        store.io.requests.clear()
        yield q


# ------------------------------------------------------------ request counts
@pytest.mark.parametrize("server_fixture", ["s3_server", "ceph_server"])
def test_a_message_lifecycle_takes_seven_requests_on_s3(
    request: pytest.FixtureRequest, server_fixture: str
) -> None:
    """Send: 1 ``PUT``. Receive: the marker ``PUT``, ``COPY``, one batched delete,
    the ``GET`` of the body. Ack: the marker ``PUT`` and a ``HEAD``; the object
    itself goes with the next batch (here, the next receive's)."""
    store = object_store(request.getfixturevalue(server_fixture))
    with warmed(store) as q:
        q.send(b"x")
        assert store.io.requests == Counter(put=1)
        store.io.requests.clear()
        msg = q.receive()
        assert msg is not None
        assert store.io.requests == Counter(put=1, copy=1, delete=1, get=1)
        store.io.requests.clear()
        msg.delete()
        assert store.io.requests == Counter(put=1, head=1)
        store.io.requests.clear()
        q.receive()  # its batched delete carries the ack's object and an earlier marker
        assert store.io.requests == Counter(put=1, copy=1, delete=1, get=1)


def test_a_message_lifecycle_takes_seven_requests_on_gcs_each_sent_once(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    """The same seven as on S3 (a batch request deletes), and each request
    counted is one HTTP request: an ack's ``HEAD`` is one ``GET`` of the
    object's metadata (gcsfs's ``info`` sent that and a ``LIST`` of the name
    as a directory, or answered from its listings cache)."""
    store = open_store(gcs_server.url(), proxied(gcs_server, gcs_proxy))
    assert isinstance(store, ObjectStore)

    def sent(expected: Counter[str]) -> None:
        assert store.io.requests == expected
        assert len(gcs_proxy.exchanges) == expected.total()
        store.io.requests.clear()
        gcs_proxy.arm(None)

    with warmed(store) as q:
        gcs_proxy.arm(None)
        q.send(b"x")
        sent(Counter(put=1))
        msg = q.receive()
        assert msg is not None
        sent(Counter(put=1, copy=1, delete=1, get=1))
        msg.delete()
        sent(Counter(put=1, head=1))
        q.receive()  # its batched delete carries the ack's object and an earlier marker
        sent(Counter(put=1, copy=1, delete=1, get=1))


def test_an_ack_costs_the_same_whatever_a_client_holds(memory_server: Server) -> None:
    """No cache of tags: the 300th message held is acked with the same two requests."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        q.send_batch([b"m"] * 300, bundle=False)
        held = []
        while batch := q.receive_batch(100, visibility_timeout=600):
            held += batch
        assert len(held) == 300
        store.io.requests.clear()
        held[0].delete()
        held[-1].delete()
        assert store.io.requests == Counter(put=2, head=2)


def test_receiving_from_a_large_backlog_lists_one_page(s3_server: Server) -> None:
    store = object_store(s3_server)
    with vsqs.Queue(store) as q:
        q.send_batch([b"m"] * 1200)  # more than one page
    with vsqs.Queue(store) as q:
        store.io.requests.clear()
        msg = q.receive()
        assert msg is not None and msg.body == b"m"
        assert store.io.requests["list"] == 1


def gcs_requests(proxy: FaultProxy, kind: str) -> int:
    """Requests of one kind that the proxy forwarded to fake-gcs-server:
    ``list`` (a page), ``delete`` (a batch)."""
    method, path_end = {"list": ("GET", "/o"), "delete": ("POST", "/batch/storage/v1")}[kind]
    return sum(
        e.method == method and e.path.partition("?")[0].endswith(path_end) for e in proxy.exchanges
    )


def test_a_receive_on_gcs_lists_one_page_of_its_own_queue(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    """A listing sends its prefix to the server and reads page by page, only as
    far as its reader reads: the head of a backlog of more than one page costs
    one ``LIST``, counted once (gcsfs's ``ls`` read every page, counted as one),
    and neither the queue ``q2`` beside it (``q`` prefixes its name) nor a key
    under it shows."""
    url = gcs_server.url("q")
    with vsqs.Queue(url, storage_options=gcs_server.storage_options) as q:
        q.send_batch([b"m"] * 1100, bundle=False)  # more than a page of 1 000
    with vsqs.Queue(url + "2", storage_options=gcs_server.storage_options) as beside:
        beside.send_batch([b"beside"] * 5, bundle=False)
    store = open_store(url, proxied(gcs_server, gcs_proxy))
    assert isinstance(store, ObjectStore)
    store.io.create("sub/1700000000000-0000-0123456789abcdef", b"nested")
    clock = FakeClock(time.time() + 1)  # no young names
    store.offset_ms(clock)  # its one-name listing of the store's clock, made once
    with vsqs.Queue(store, clock=clock) as q:
        gcs_proxy.arm(None)
        store.io.requests.clear()
        msg = q.receive()
        assert msg is not None and msg.body == b"m"
        assert store.io.requests["list"] == gcs_requests(gcs_proxy, "list") == 1
        gcs_proxy.arm(None)
        store.io.requests.clear()
        of_one_id = [name for name, _ in store.io.listing(msg.id)]
        assert of_one_id and all(name.startswith(msg.id) for name in of_one_id)
        assert store.io.requests["list"] == gcs_requests(gcs_proxy, "list") == 1
        gcs_proxy.arm(None)
        store.io.requests.clear()
        everything = raw_names(store)
        assert store.io.requests["list"] == gcs_requests(gcs_proxy, "list") == 2
    # The config, 1 099 messages, the one received and its source's spent marker.
    assert len(everything) == 1102 and everything == sorted(everything)
    assert not any("/" in name for name in everything)


def test_gcs_deletes_in_batches_and_a_claim_carries_no_held_back_deletions(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    """One batch request deletes up to 100 names (gcsfs sends one ``DELETE`` per
    name to any server but Google's). A claim's delete carries only the
    held-back deletions that fit in the requests its sources need anyway:
    after ``delete_batch(100)``, ``receive_batch(100)`` sends one delete where
    it sent 300, one by one (at 20 ms a request, longer than a visibility
    timeout of 3 s); the rest go with the next listing or flush."""
    url = gcs_server.url()
    with vsqs.Queue(url, storage_options=gcs_server.storage_options) as q:
        q.send_batch([b"m"] * 250, bundle=False)
    store = open_store(url, proxied(gcs_server, gcs_proxy))
    assert isinstance(store, ObjectStore)
    clock = FakeClock(time.time() + 1)  # standing still: no listing falls due
    with vsqs.Queue(store, clock=clock) as q:
        q.delete_batch(q.receive_batch(100))  # 100 objects and 100 markers held back
        gcs_proxy.arm(None)
        store.io.requests.clear()
        assert len(q.receive_batch(100)) == 100
        assert store.io.requests["delete"] == gcs_requests(gcs_proxy, "delete") == 1
        gcs_proxy.arm(None)
        store.io.requests.clear()
        store.flush()  # 100 objects and 200 markers, then the objects' 100 markers
        assert store.io.requests["delete"] == gcs_requests(gcs_proxy, "delete") == 4
        assert len(gcs_proxy.exchanges) == 4
        left = raw_names(store)
    assert len(left) == 151, "the config, 50 messages, 100 held"
    assert not any(name.endswith(MOVED_SUFFIX) for name in left)


def test_a_gcs_remove_reports_the_names_of_a_failed_batch_and_no_absent_name(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    url = gcs_server.url()
    with vsqs.Queue(url, storage_options=gcs_server.storage_options) as q:
        q.send_batch([b"m"] * 150, bundle=False)
    store = open_store(url, proxied(gcs_server, gcs_proxy))
    assert isinstance(store, ObjectStore)
    sent = [name for name in raw_names(store) if name != names.CONFIG_NAME]
    batches = itertools.count()
    gcs_proxy.quirk = Quirk(  # the first batch request is refused
        lambda method, headers: method == "POST" and next(batches) == 0,
        answer=(403, "AccessDenied", "not this one"),
    )
    gcs_proxy.arm(None)
    store.io.requests.clear()
    assert store.io.remove([*sent, "1700000000000-0000-0123456789abcdef"]) == sent[:100]
    assert store.io.requests["delete"] == gcs_requests(gcs_proxy, "delete") == 2
    assert raw_names(store) == sorted([names.CONFIG_NAME, *sent[:100]])


# ------------------------------------------------------------- the classes
def test_class_1_an_ack_and_an_extend_of_one_receipt_never_both_win(s3_server: Server) -> None:
    """One client, two threads: an extend of receipt R is between its copy and
    its delete when an ack of R arrives (a heartbeat racing the handler's ack).
    Exactly one of them wins, and the outcome holds: an acked message never
    comes back, an extended one comes back once, after the new expiry."""
    plain = object_store(s3_server)
    url = plain.url
    outcome: dict[str, bool] = {}

    def ack() -> None:
        try:
            q.delete(receipt)
            outcome["ack"] = True
        except vsqs.ReceiptExpired:
            outcome["ack"] = False

    hook = Interleave(plain.io, lambda what: False, ack, after=True)
    with vsqs.Queue(ObjectStore(hook)) as q:
        q.send(b"x")
        msg = q.receive(visibility_timeout=60)
        assert msg is not None and msg.receipt is not None
        receipt = msg.receipt
        hook.when = on("copy", receipt)  # the extend's copy, then the ack
        try:
            q.extend(receipt, 1)
            outcome["extend"] = True
        except vsqs.ReceiptExpired:
            outcome["extend"] = False
    assert sorted(outcome.values()) == [False, True], f"both or neither won: {outcome}"
    clock = FakeClock(time.time())
    with vsqs.Queue(url, storage_options=s3_server.storage_options, clock=clock) as other:
        again = other.receive()  # reads the store's clock: names are on it
        if again is None:
            clock.advance(2)  # past the extend's second
            again = other.receive()
        if outcome["ack"]:
            assert again is None, "an acknowledged message came back"
        else:
            assert again is not None and again.id == msg.id


def test_class_2_a_late_ack_cannot_land_inside_another_claim(s3_server: Server) -> None:
    """The holder acks while its receipt is far from expiry by its own clock, but
    its request is slow (throttled, retried) and lands only after the receipt
    expired, between another client's copy and delete of the message. The ack
    is refused and the claimer holds the message; had both won (format 1's
    one-request ack), an acknowledged message would be delivered again."""
    options = s3_server.storage_options
    holder_clock = FakeClock(time.time())
    claimer_clock = FakeClock(holder_clock.now)
    plain = object_store(s3_server)
    url = plain.url
    acked: list[bool] = []

    def late_ack() -> None:
        try:
            holder.delete(msg.receipt)  # type: ignore[arg-type]
            acked.append(True)
        except vsqs.ReceiptExpired:
            acked.append(False)

    claimer_store = ObjectStore(Interleave(plain.io, on("copy"), late_ack, after=True))
    with (
        vsqs.Queue(url, storage_options=options, clock=holder_clock) as holder,
        vsqs.Queue(claimer_store, clock=claimer_clock) as claimer,
    ):
        assert claimer.receive() is None  # reads the store's clock: names are on it
        holder.send(b"x")
        msg = holder.receive(visibility_timeout=30)
        assert msg is not None
        claimer_clock.advance(31)  # where the late request lands
        claimed = claimer.receive(visibility_timeout=60)
    assert acked == [False], "the late ack and the claim both won"
    assert claimed is not None and claimed.id == msg.id


def test_class_2_the_client_library_never_sends_an_ack_again(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """A 503 SlowDown on the ack's commit is not retried by botocore, s3fs or
    aiohttp (a retry could land seconds later, inside another client's claim):
    vsqs reads the marker back and commits again itself, while it still holds."""
    url = s3_server.url()
    with vsqs.Queue(url, storage_options=proxied(s3_server, s3_proxy)) as q:
        q.send(b"x")
        msg = q.receive(visibility_timeout=60)
        assert msg is not None
        marker = f"{msg.receipt}{MOVED_SUFFIX}"
        s3_proxy.arm("503", 1, where=lambda method, path: method == "PUT" and path.endswith(marker))
        msg.delete()
    puts = [e for e in s3_proxy.exchanges if e.method == "PUT"]
    assert [e.status for e in puts] == [503, 200]
    assert len({e.invocation for e in puts}) == 2, "the client library sent the create again"
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        assert q.receive() is None


def test_class_3_a_send_whose_response_was_lost_never_brings_a_message_back(
    memory_server: Server,
) -> None:
    """The create took effect, its response was lost, and before the sender
    could look, a consumer received and acked the message. The sender finds
    nothing, so it sends again under a new id: the message is delivered twice
    (a send whose outcome is unknown is at least once), but the acked id never
    comes back, and no name is created twice."""
    store = object_store(memory_server)
    vsqs.Queue(store).close()
    consumed: list[str] = []

    def consume() -> None:
        with vsqs.Queue(store) as consumer:
            msg = consumer.receive()
            assert msg is not None
            consumed.append(msg.id)
            msg.delete()

    lossy = FaultyIO(store.io, "lost", None)
    message_get = lambda what: what.startswith("get ") and not is_config(what[4:])  # noqa: E731
    with vsqs.Queue(ObjectStore(Interleave(lossy, message_get, consume))) as producer:
        lossy.calls[0], lossy.fault_at = 0, 1  # the send's create: effect, no response
        sent = producer.send(b"once")
    with vsqs.Queue(store) as q:
        again = q.receive()
        assert again is not None and again.id == sent != consumed[0] and again.body == b"once"
        again.delete()
        assert q.receive() is None
        assert not live_names(store, consumed[0]), "the acked id came back"


def test_class_4_a_redriven_message_is_delivered_whatever_its_last_stay_left(
    s3_server: Server,
) -> None:
    """Public API only: ``max_receives=1``, a dead-letter queue, two workers that
    stay open (their spent markers not yet collected). Worker 1 receives the
    message and never acks; worker 2 receives it again and it is dead-lettered.
    After a redrive, it is delivered: format 1 re-created ``<id>`` under the
    old markers, and listers deleted it."""
    url = s3_server.url("jobs")
    options = s3_server.storage_options
    clock = FakeClock(float(int(time.time())))  # whole ms expiries
    config = {"clock": clock, "visibility_timeout": 1, "max_receives": 1, "dead_letter": "jobs-dlq"}
    with (
        vsqs.Queue(url, storage_options=options, **config) as one,  # type: ignore[arg-type]
        vsqs.Queue(url, storage_options=options, **config) as two,  # type: ignore[arg-type]
    ):
        poison = one.send(b"poison")
        assert one.receive() is not None
        clock.advance(1)
        assert two.receive() is None  # dead-lettered
        assert vsqs.redrive(url.replace("/jobs", "/jobs-dlq"), url, storage_options=options) == 1
        clock.advance(_moves.FINISH_AFTER + 1)
        back = one.receive() or two.receive()
        assert back is not None and back.id == poison and back.receive_count == 1


def test_class_5_a_spent_marker_collected_late_never_frees_a_claim_in_progress(
    memory_server: Server,
) -> None:
    """Client A received a message (its spent marker waits for A's next batch);
    the message is dead-lettered and redriven. B's claim of it is between its
    marker and its copy when A sends its batch (closing). C must not claim the
    message meanwhile: format 1 deleted B's live marker by name."""
    store = object_store(memory_server, "jobs")
    dlq = store.sibling("jobs-dlq")
    clock = FakeClock(float(int(time.time())))  # whole ms expiries
    config = {"clock": clock, "visibility_timeout": 1, "max_receives": 1, "dead_letter": "jobs-dlq"}
    a = vsqs.Queue(ObjectStore(store.io, clock=clock), **config)  # type: ignore[arg-type]
    message_id = a.send(b"x")
    assert a.receive() is not None  # A's spent marker of <id>.moved is held back
    clock.advance(1)
    with vsqs.Queue(store, **config) as other:  # type: ignore[arg-type]
        assert other.receive() is None  # dead-lettered
    with vsqs.Queue(dlq, clock=clock) as dead, vsqs.Queue(store, clock=clock) as source:
        assert vsqs.redrive(dead, source) == 1
    seen: list[vsqs.Message | None] = []

    def a_closes_then_c_looks() -> None:
        a.close()
        with vsqs.Queue(store, clock=clock) as c:
            seen.append(c.receive())

    b_store = ObjectStore(Interleave(store.io, on("copy"), a_closes_then_c_looks), clock=clock)
    with vsqs.Queue(b_store, clock=clock) as b:
        got = b.receive(visibility_timeout=60)
    assert got is not None and got.id == message_id
    assert seen == [None], "two clients held the message at once"


def test_class_6_an_extend_back_to_an_earlier_expiry_keeps_the_message(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder extends R0 -> R1 -> R2, then to R1's expiry again, while a
    lister that finishes every move it sees lists between the extend's copy and
    its delete. The message lives on, once, and the extend's receipt is current
    (format 1 gave the same name twice, and the lister took R1's old marker
    for an abandoned move)."""
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)  # every marker is finished
    store = object_store(memory_server)
    clock = FakeClock(float(int(time.time())))  # whole seconds: expiries in exact ms

    def list_meanwhile() -> None:
        list(ObjectStore(store.io).list())

    with vsqs.Queue(ObjectStore(store.io, clock=clock), clock=clock) as q:
        q.send(b"x")
        msg = q.receive(visibility_timeout=10)
        assert msg is not None
        first = msg.extend(20)
        r1_expiry = names.parse(first.receipt).expiry_ms  # type: ignore[arg-type, union-attr]
        assert first.visible_at is not None
        back = first.visible_at.timestamp() - clock.now  # R1's expiry, on this client's clock
        msg.extend(30)
        lister = ObjectStore(Interleave(store.io, on("copy"), list_meanwhile, after=True))
        with vsqs.Queue(lister, clock=clock) as q2:
            again = q2.extend(msg.receipt, back)  # type: ignore[arg-type]
            assert names.parse(again.receipt).expiry_ms == r1_expiry  # type: ignore[arg-type, union-attr]
            assert live_names(store, msg.id) == [again.receipt]
            again.delete()  # while q2 is open: a closed queue's messages raise QueueClosed
        clock.advance(60)
        assert q.receive() is None


def test_class_7_no_message_is_hidden_for_ever(memory_server: Server) -> None:
    """A dead-lettering crashes after committing its delete marker at the source,
    before the source object is deleted, and the message is redriven. Every
    listing must show the redriven message (format 1 showed nothing of it while
    the crashed client's names were there), and after ``FINISH_AFTER`` the
    crashed leftovers are repaired."""
    clock = FakeClock(float(int(time.time())))  # whole ms expiries
    store = object_store(memory_server, "jobs", clock=clock)
    config = {"clock": clock, "max_receives": 1, "dead_letter": "jobs-dlq"}
    with vsqs.Queue(store, **config) as q:  # type: ignore[arg-type]
        message_id = q.send(b"x")
        assert q.receive(visibility_timeout=1) is not None
    clock.advance(1)
    dying = ObjectStore(Interleave(store.io, on("head"), die), clock=clock)
    # the dead-lettering published in the DLQ and made its delete marker at the source
    with pytest.raises(Crash):
        vsqs.Queue(dying, **config).receive()  # type: ignore[arg-type]
    assert any(n.endswith(MOVED_SUFFIX) for n in raw_names(store)), "no marker was left"
    dlq = store.sibling("jobs-dlq")
    with vsqs.Queue(dlq, clock=clock) as dead, vsqs.Queue(store, clock=clock) as source:
        assert vsqs.redrive(dead, source) == 1
        back = source.receive()
        assert back is not None and back.id == message_id
        back.delete()
        clock.advance(_moves.FINISH_AFTER + 1)
        source.gc()
    assert raw_names(store) == [names.CONFIG_NAME], raw_names(store)


def test_class_8_a_memory_url_queue_is_thread_safe(memory_server: Server) -> None:
    """fsspec's memory filesystem raises ``KeyError`` when a key goes while it
    lists or copies; eight threads sending, receiving, extending, acking and
    listing one ``memory://`` queue only ever see ``VsqsError`` outcomes."""
    url = memory_server.url()
    errors: list[BaseException] = []
    stop = time.monotonic() + 3

    def work(seed: int) -> None:
        rng = __import__("random").Random(seed)
        with vsqs.Queue(url, visibility_timeout=0.05) as q:
            while time.monotonic() < stop:
                try:
                    q.send_batch([b"m"] * rng.randint(1, 3))
                    for msg in q.receive_batch(rng.randint(1, 5)):
                        if rng.random() < 0.7:
                            msg.delete()
                        else:
                            msg.extend(0.01)
                    q.stats()
                except vsqs.VsqsError:
                    pass
                except BaseException as exc:
                    errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, f"{len(errors)} raw errors, the first: {errors[0]!r}"


@pytest.mark.parametrize(("server_fixture", "count"), [("memory_server", 1100), ("s3_server", 30)])
def test_class_9_purge_leaves_nothing_behind(
    request: pytest.FixtureRequest, server_fixture: str, count: int
) -> None:
    store = object_store(request.getfixturevalue(server_fixture))
    with vsqs.Queue(store) as q:
        q.send_batch([b"m"] * count)
        held = q.receive_batch(3, visibility_timeout=600)
        assert q.purge() == count
        assert raw_names(store) == [names.CONFIG_NAME], "purge left markers or messages"
        for msg in held:
            with pytest.raises(vsqs.ReceiptExpired):
                msg.delete()


def test_class_9_deletions_held_back_are_bounded(memory_server: Server) -> None:
    """Acks and spent markers wait for the next batch, but never more than
    ``BATCH`` of them, however long a client goes without listing or claiming."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        q.send_batch([b"m"] * (BATCH + 10))
        held = q.receive_batch(BATCH + 10, visibility_timeout=600)
        store.io.requests.clear()
        for msg in held:
            msg.delete()
        assert store.io.requests["delete"] >= BATCH, "the deletions were never sent"
        left = [n for n in raw_names(store) if n != names.CONFIG_NAME]
        assert len(left) <= 2 * BATCH


def test_class_9_stats_and_purge_see_a_message_whose_claimer_died_after_its_marker(
    memory_server: Server,
) -> None:
    clock = FakeClock(time.time())
    store = object_store(memory_server, clock=clock)
    with vsqs.Queue(store, clock=clock) as q:
        q.send_batch([b"a", b"b"])
        dying = ObjectStore(Interleave(store.io, on("copy"), die), clock=clock)
        with pytest.raises(Crash):  # dead after its marker, before its copy
            vsqs.Queue(dying, clock=clock).receive()
        stats = q.stats()
        assert stats.ready + stats.in_flight == 2, stats
        clock.advance(_moves.FINISH_AFTER + 1)  # the crashed move may now be finished
        assert q.purge() == 2
        assert raw_names(store) == [names.CONFIG_NAME]


def abandon_a_claim(store: ObjectStore, source: str, *, copied: bool) -> str:
    """What a claimer of ``source`` that died after its marker (or after its
    copy too) leaves; return the target it chose."""
    target = names.invisible_name(source, 4_000_000_000_000, 1, 1)
    store.io.create(source + MOVED_SUFFIX, f"{target}\ndead-client".encode())
    if copied:
        store.io.copy(source, target)
    return target


def counted(stats: vsqs.QueueStats) -> int:
    return stats.ready + stats.in_flight + stats.delayed


@pytest.mark.parametrize("copied", [False, True], ids=["marker", "marker-and-copy"])
def test_class_9_stats_counts_an_abandoned_move_once_and_changes_nothing(
    memory_server: Server, copied: bool
) -> None:
    """``stats()`` is a pure listing: a move abandoned after its marker (and
    its copy), old enough to be finished, counts once, in the queue and in its
    dead-letter queue, and stays as it was; ``gc()`` finishes it."""
    clock = FakeClock(time.time())  # the memory filesystem stamps objects by the real clock
    store = object_store(memory_server, clock=clock)
    dlq = store.sibling("dlq")
    with (
        vsqs.Queue(dlq, clock=clock) as dead,
        vsqs.Queue(store, clock=clock, max_receives=3, dead_letter="dlq") as q,
    ):
        targets = [
            abandon_a_claim(s, sender.send(b"x"), copied=copied)
            for s, sender in ((store, q), (dlq, dead))
        ]
        for seen in (store, dlq):  # memory:// tells no Date: ages count from a listing
            list(seen.list(settle=True))
        clock.advance(_moves.FINISH_AFTER + 1)  # the moves may be finished now
        before = raw_names(store), raw_names(dlq)
        stats = q.stats()
        assert (counted(stats), stats.dead_letter) == (1, 1), stats
        assert (raw_names(store), raw_names(dlq)) == before
        q.gc()
        dead.gc()
        assert raw_names(store) == [targets[0], names.CONFIG_NAME]
        assert raw_names(dlq) == [targets[1], names.CONFIG_NAME]
        stats = q.stats()
        assert (stats.in_flight, counted(stats), stats.dead_letter) == (1, 1, 1), stats


def test_stats_counts_once_a_move_that_finishes_while_it_lists(memory_server: Server) -> None:
    """The listing shows the source, its marker and its target; the move
    finishes (source deleted, marker collected) before the marker is read:
    the message counts once, under its target."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        source = q.send(b"x")
    marker = source + MOVED_SUFFIX
    target = abandon_a_claim(store, source, copied=True)

    def finish() -> None:
        assert store.io.remove([source]) == []
        assert store.io.remove([marker]) == []

    with vsqs.Queue(ObjectStore(Interleave(store.io, on("get", marker), finish))) as counter:
        stats = counter.stats()
    assert (stats.in_flight, counted(stats)) == (1, 1), stats
    assert raw_names(store) == [target, names.CONFIG_NAME]


class OneKeyPages(Interleave):
    """Lists one key per request, as an S3 listing pages (each page starts
    after the last key of the one before); runs ``meanwhile`` once, right
    after the page that showed the name ``after``."""

    def __init__(self, inner: ObjectIO, after: str, meanwhile: Callable[[], object]) -> None:
        super().__init__(inner, lambda what: False, meanwhile)
        self.after = after

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        last = ""
        while page := [(n, t) for n, t in self.inner.listing(prefix) if n > last][:1]:
            yield page[0]
            last = page[0][0]
            if last == self.after:
                self._interleave()


def test_stats_counts_once_a_move_that_finishes_between_two_pages_of_its_listing(
    memory_server: Server,
) -> None:
    """Issue 26, class 6 (simulation seed 12): a page of the listing shows a
    message; it is received (claimed, its source deleted, its marker
    collected) before the next page, which shows its target. Both names
    were counted: a message counts once, by its id, under the first name
    listed."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        source = q.send(b"x")

    def receive() -> None:
        with vsqs.Queue(store) as other:  # closing sends its spent marker's delete
            assert other.receive(visibility_timeout=60) is not None

    with vsqs.Queue(ObjectStore(OneKeyPages(store.io, source, receive))) as counter:
        stats = counter.stats()
    assert (stats.ready, counted(stats)) == (1, 1), stats


# ------------------------------------------------------------ restamped commits
ROWS = [b"row %d" % i for i in range(3)]


def commit_restamped(
    server: Server, mode: str, fault_at: int | None
) -> tuple[ObjectStore, FakeClock, list[str], FaultyIO, BaseException | None]:
    """Stage :data:`ROWS`, let :data:`RESTAMP_AFTER` pass and commit them (a
    Spark job's commit) through a client whose ``fault_at``-th request fails
    as ``mode`` says; its requests go one at a time, so the k-th is the same
    request in every run."""
    clock = FakeClock(time.time())  # the memory filesystem stamps objects by the real clock
    store = object_store(server, clock=clock)
    with vsqs.Queue(store, clock=clock):
        pass
    ms_clock = names.MsClock(clock)
    staged = [stage(store, row, ms_clock.next_id) for row in ROWS]
    clock.advance(RESTAMP_AFTER + 1)
    faulty = FaultyIO(store.io, mode, fault_at)
    faulty.in_flight = 1
    committer = ObjectStore(faulty, clock=clock)
    try:
        commit(committer, staged, None, durable=True, clock=ms_clock)
        committer.close()  # sends its deletions, as the Spark writer's commit does
    except (Crash, OSError) as exc:
        return store, clock, staged, faulty, exc
    return store, clock, staged, faulty, None


@pytest.mark.parametrize("mode", ["crash", "lost"])
def test_a_restamped_commit_cut_short_anywhere_publishes_each_row_once_or_never_and_leaves_nothing(
    memory_server: Server, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``.new`` staged more than RESTAMP_AFTER before its commit is published
    under a fresh id. Its commit dies (or loses a response) at each of its
    requests in turn; then the abort removes the staging (Spark calls it when
    a commit raises) and ``gc()`` repairs: each row is published once or not
    at all, nothing else is left, and listings warn about nothing (a move of
    a ``.new`` to another id was a marker no lister accepts: left for ever)."""
    caplog.set_level(logging.WARNING, logger="vsqs")
    *_, faulty, error = commit_restamped(memory_server, mode, None)
    assert error is None
    for fault_at in range(1, faulty.calls[0] + 1):
        store, clock, staged, _, error = commit_restamped(memory_server, mode, fault_at)
        assert error is not None or mode == "lost", f"request {fault_at} did not fail"
        unstage(store, staged)  # the abort
        list(store.list(settle=True))  # memory:// tells no Date: ages count from a listing
        clock.advance(_moves.FINISH_AFTER + 1)
        with vsqs.Queue(store, clock=clock) as q:
            q.gc()
        published = [n for n in store.list() if names.parse(n)]
        assert raw_names(store) == sorted([*published, names.CONFIG_NAME]), fault_at
        assert not [n for n in published if n.endswith(names.NEW_SUFFIX)], fault_at
        rows = Counter(store.read(n) for n in published)
        assert set(rows) <= set(ROWS) and max(rows.values(), default=1) == 1, (fault_at, rows)
        assert not any("not a marker" in r.getMessage() for r in caplog.records), fault_at
        caplog.clear()
        assert [n for n in store.list() if names.parse(n)] == published, fault_at
        assert not caplog.records, fault_at
    store, *_ = commit_restamped(memory_server, mode, None)
    published = [n for n in store.list() if names.parse(n)]
    assert [store.read(n) for n in published] == ROWS  # once each, in batch order
    assert raw_names(store) == sorted([*published, names.CONFIG_NAME])


# ------------------------------------------------------------ named windows
def test_a_late_claimer_wins_nothing_and_leaves_nothing(memory_server: Server) -> None:
    """Window "late claim": a client whose marker is created after another
    client's move finished (and its marker was collected) finds the source gone."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        q.send(b"x")
        (source,) = [n for n in store.list() if names.is_id(n)]
    parsed = names.parse(source)
    assert parsed is not None
    winner, late = ObjectStore(store.io), ObjectStore(store.io)
    winner.rename(source, names.next_name(parsed, 4_000_000_000_000, 1))
    winner.close()  # collects the spent marker
    with pytest.raises(FileNotFoundError):
        late.rename(source, names.next_name(parsed, 4_000_000_000_001, 1))
    late.close()
    assert not [n for n in raw_names(store) if n.endswith(MOVED_SUFFIX)]
    assert len([n for n in store.list() if names.parse(n)]) == 1


def test_a_young_marker_hides_its_message_until_the_move_finishes(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Window "crash after the marker": nothing of the message is shown, and
    nothing is repaired, until ``FINISH_AFTER`` has passed; a counting listing
    (``settle``) shows it under the name it leaves."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        sent = q.send(b"x")
    target = names.invisible_name(sent, 1_700_000_000_000, 1, 1)
    store.io.create(sent + MOVED_SUFFIX, f"{target}\nslow-client".encode())
    assert list(store.list()) == [names.CONFIG_NAME]
    assert sorted(store.list(settle=True)) == sorted([names.CONFIG_NAME, sent])
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
    assert sorted(store.list()) == sorted([names.CONFIG_NAME, target])  # it finishes the move
    store.close()  # deletes the spent marker
    assert raw_names(store) == sorted([names.CONFIG_NAME, target])


def test_a_slow_mover_whose_move_a_lister_finished_holds_nothing(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Window "stalled owner": a claimer stalls after its marker for longer than
    ``FINISH_AFTER``; a lister finishes its move. The claimer's copy finds the
    source gone: the outcome is unknown (the target's existence cannot tell
    it the move was its own: the target may have moved on since), so the
    receive returns nothing and says so; the message comes back at the
    target's expiry."""
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
    store = object_store(memory_server)
    clock = FakeClock(float(int(time.time())))  # whole ms expiries

    def lister() -> None:
        list(ObjectStore(store.io).list())

    slow = ObjectStore(Interleave(store.io, on("copy"), lister), clock=clock)
    with vsqs.Queue(store, clock=clock) as q, vsqs.Queue(slow, clock=clock) as claimer:
        sent = q.send(b"x")
        with caplog.at_level(logging.WARNING, logger="vsqs"):
            assert claimer.receive(visibility_timeout=5) is None
        assert "too slow to tell its outcome" in caplog.text
        assert q.receive() is None  # held under the name the slow claimer chose
        clock.advance(5)
        again = q.receive()
        assert again is not None and again.id == sent and again.receive_count == 2


def test_a_slow_extend_that_a_lister_finished_is_not_reported_stale(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the simulation (seed 200475): a holder's extend to a shorter
    visibility stalls after its marker; a lister finishes the move, so the
    message is visible again at the new expiry and another consumer takes it.
    The extend did take effect: it must not say ``ReceiptExpired`` (which
    tells the holder its receipt had been stale, i.e. that its old, longer
    hold was still what stood), but that its outcome is unknown."""
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
    store = object_store(memory_server)
    clock = FakeClock(float(int(time.time())))

    def lister() -> None:
        list(ObjectStore(store.io).list())

    with vsqs.Queue(store, clock=clock) as q:
        q.send(b"x")
        held = q.receive(visibility_timeout=30)
        assert held is not None
        slow = ObjectStore(Interleave(store.io, on("copy"), lister), clock=clock)
        with (
            vsqs.Queue(slow, clock=clock) as holder,
            pytest.raises(vsqs.StorageError, match="outcome of a slow move is unknown"),
        ):
            holder.extend(held.receipt, 1)
        clock.advance(1)
        again = q.receive()
        assert again is not None and again.id == held.id  # the extend took effect


def test_an_extend_by_receipt_that_took_effect_is_not_reported_stale(
    memory_server: Server,
) -> None:
    """Found by the simulation (seed 300821): a heartbeat thread extends a bare
    receipt to a short visibility; before the extend returns, the new expiry
    passes and another consumer takes the message. The rename decided the
    extend: it succeeded, whatever happened to the message after it (format
    1 read the body after the rename and said ``ReceiptExpired``)."""
    store = object_store(memory_server)
    clock = FakeClock(float(int(time.time())))
    with vsqs.Queue(store, clock=clock) as q:
        q.send(b"x")
        held = q.receive(visibility_timeout=30)
        assert held is not None
        taken: list[vsqs.Message | None] = []

        def expire_and_take() -> None:
            clock.advance(2)
            with vsqs.Queue(store, clock=clock) as other:
                taken.append(other.receive())

        slow = ObjectStore(
            Interleave(store.io, on("remove"), expire_and_take, after=True), clock=clock
        )
        with vsqs.Queue(slow, clock=clock) as heartbeat:
            extended = heartbeat.extend(held.receipt, 1)
        assert extended.body == b"x" and extended.receipt != held.receipt
        assert taken[0] is not None and taken[0].id == held.id


def test_a_split_listing_never_collects_a_live_marker(memory_server: Server) -> None:
    """Window "paged listing": a marker listed without its source may only mean
    the source's page was read before the source was created. It is collected
    only once a ``HEAD`` after the listing confirms the source is gone."""
    store = object_store(memory_server)
    vsqs.Queue(store).close()
    message_id = "1700000000000-0000-0123456789abcdef"
    target = names.invisible_name(message_id, 1_700_000_009_000, 1, 1)
    store.io.create(message_id, b"body")
    store.io.create(message_id + MOVED_SUFFIX, f"{target}\nother-client".encode())
    old = time.time() - 2 * _moves.FINISH_AFTER
    assert store._settle([(message_id + MOVED_SUFFIX, old)], False) == []
    store.close()
    assert message_id + MOVED_SUFFIX in raw_names(store), "a live marker was collected"


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


@pytest.mark.parametrize("fault", ["lost", "retried"])
def test_a_marker_whose_create_outcome_is_unknown_is_read_back(
    memory_server: Server, fault: str
) -> None:
    """Window "unknown outcome at the commit": the marker's create took effect
    but the client saw an error. It reads the marker back: the token is its
    own, so it won (without the token, the win would be taken for a loss)."""
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        sent = q.send(b"x")
    faulty = FaultyIO(store.io, fault, None)
    later = FakeClock(time.time())
    with vsqs.Queue(ObjectStore(faulty), clock=later) as q:
        q.store.offset_ms(later)  # the store's clock, read before the faults are counted
        later.advance(1)  # the message is no young name: one listing
        faulty.calls[0], faulty.fault_at = 0, 2  # 1: the listing, 2: the marker's create
        msg = q.receive()
    assert msg is not None and msg.id == sent


# ---------------------------------------------------------------- bad input
def test_foreign_objects_are_never_touched(s3_server: Server) -> None:
    store = object_store(s3_server)
    foreign = ["notes.moved", "notes", "1700000000000-0000-0123456789abcdef.nw.moved", "x.y"]
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


def test_a_marker_that_is_not_ours_never_finishes_anything(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A foreign object named like a marker (its content names no message of the
    id) hides its source but is never taken for a move to finish."""
    monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
    store = object_store(memory_server)
    with vsqs.Queue(store) as q:
        sent = q.send(b"x")
    store.io.create(sent + MOVED_SUFFIX, b"../../etc/passwd\nforged")
    assert [n for n in store.list() if names.parse(n)] == []
    assert sent in raw_names(store) and len(raw_names(store)) == 3


# -------------------------------------------------------------------- clocks
@pytest.mark.parametrize("server_fixture", ["s3_server", "gcs_server"])
def test_the_probe_measures_the_clock_offset_to_the_store(
    request: pytest.FixtureRequest, server_fixture: str
) -> None:
    """From the ``Date`` of one request (GCS measured nothing before: only the
    S3 adapter had the measure, although both tell ``store_date``)."""
    store = object_store(request.getfixturevalue(server_fixture))
    offset = store.capabilities.clock_offset
    assert offset is not None and abs(offset) < 1.5  # the server runs on this host's clock


def test_gcs_reads_the_stores_clock_from_requests_a_queue_may_make(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    """The clock's measure lists at most one name of the queue (a GET of the
    bucket's metadata needs a permission queues need not have), and a create
    tells its Date, as the probe's Date check assumes (it told none)."""
    store = open_store(gcs_server.url(), proxied(gcs_server, gcs_proxy))
    assert isinstance(store, ObjectStore)
    gcs_proxy.arm(None)
    assert store.io.store_date() is not None
    assert [(e.method, e.path.split("?")[0]) for e in gcs_proxy.exchanges] == [
        ("GET", "/storage/v1/b/vsqs-test/o")
    ]
    store.io.last_date = None
    store.io.create("a-name", b"x")
    assert store.io.last_date is not None


def test_a_host_clock_far_from_the_stores_is_warned_about(
    s3_server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class SkewedTime:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def time() -> float:
            return time.time() - 30  # this host runs 30 s behind the store

    monkeypatch.setattr(_object, "time", SkewedTime)
    monkeypatch.setattr(_object_io, "time", SkewedTime)
    found = _probe.probe(object_store(s3_server).io)  # the cached probe ran on the true clock
    assert found.clock_offset is not None and 29 < found.clock_offset < 31
    assert re.search(r"this host's clock is -(29|30)\.\d s off the store's", caplog.text)


# ---------------------------------------------------------------------- gc
@pytest.mark.parametrize("operation", ["receive", "delete", "extend"])
def test_gc_repairs_and_reports_what_a_crash_at_any_request_left(
    memory_server: Server, operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client dies at each request of a claim (an ack, an extend) in turn.
    ``gc()`` then finishes the half-done move, removes every marker and
    reports them, and leaves at most one name of the message; a second
    ``gc()`` finds nothing to do."""
    for crash_at in itertools.count(1):
        monkeypatch.setattr(_moves, "FINISH_AFTER", 10.0)
        store = object_store(memory_server)
        faulty = FaultyIO(store.io, "crash", None)
        with vsqs.Queue(store) as healthy, vsqs.Queue(ObjectStore(faulty)) as dying:
            sent = healthy.send(b"x")
            held = healthy.receive(visibility_timeout=60) if operation != "receive" else None
            faulty.fault_at, faulty.calls[0] = crash_at, 0
            try:
                if held is None:
                    assert dying.receive(visibility_timeout=600) is not None
                elif operation == "delete":
                    dying.delete(held.receipt)  # type: ignore[arg-type]
                else:
                    dying.extend(held.receipt, 600)  # type: ignore[arg-type]
                dying.store.flush()
            except Crash:
                pass
            else:
                break  # the whole operation ran before the crash point
            finally:
                faulty.fault_at = None
        markers = {n for n in raw_names(store) if n.endswith(MOVED_SUFFIX)}
        monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)  # as if long ago
        with vsqs.Queue(ObjectStore(store.io)) as fresh:
            repaired = fresh.gc()
            assert markers <= set(repaired), f"crash at {crash_at}: unreported {markers}"
            left = raw_names(store)
            assert not [n for n in left if n.endswith(MOVED_SUFFIX)], f"markers left: {left}"
            live = [n for n in left if n != names.CONFIG_NAME]
            assert len(live) <= 1 and all(n.startswith(sent) for n in live), left
            assert operation == "delete" or live, "a held message was lost"
            assert fresh.gc() == []
    assert crash_at > 2, "the operation made too few requests to test anything"


def test_gc_removes_the_probe_of_a_client_killed_mid_probe_once_old(
    memory_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe creates an object in the queue's prefix; a client killed
    between its create and its delete leaves it (found by the chaos run)."""
    store = object_store(memory_server)
    vsqs.Queue(store).close()
    leftover = f"{_probe.PROBE_PREFIX}0123456789abcdef"
    store.io.create(leftover, b"1")
    with vsqs.Queue(ObjectStore(store.io)) as q:
        assert q.gc() == [], "a probe that may be under way was removed"
        assert leftover in raw_names(store)
        monkeypatch.setattr(_moves, "FINISH_AFTER", -1.0)
        assert q.gc() == [leftover]
        assert raw_names(store) == [names.CONFIG_NAME]
