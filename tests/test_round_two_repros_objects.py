"""Issue 26's reproductions (``tests/test_round_two_repros.py``) on real
object-store servers: moto S3 (whole-second listing times, a ``Date`` on
every response) and fake-gcs-server (milliseconds), plus GCS's two classes
of cost (11, 12), counted on the wire through a logging proxy.

Public API only: ``vsqs.Queue``, ``vsqs.redrive``, an ``ObjectIO`` wrapped
from outside, ``ObjectStore`` with an injected ``clock``.
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit

import pytest

import vsqs
from vsqs.stores import ObjectStore

from .support.fault_proxy import Exchange, FaultProxy
from .support.servers import Server, proxied
from .test_round_two_repros import (
    SCENARIOS,
    SEND_BATCH_SENT,
    SKEWS,
    WITHIN,
    a_failed_send_batch_says_which_it_sent,
    beyond_the_clock_bound_is_clock_skew,
    fast_lister_leaves_a_live_batch_marker_alone,
    fast_lister_leaves_a_live_probe_alone,
    fast_lister_leaves_a_young_ack_alone,
    hosts_off_the_store_hold_and_take_on_its_clock,
    stalled_while_the_clock_steps_back,
)


@pytest.fixture(params=["s3_server", "gcs_server"])
def server(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_26_scenario_on_a_server(server: Server, scenario: str) -> None:
    SCENARIOS[scenario](server.url(), server.storage_options)


@pytest.mark.parametrize("offset", WITHIN)
def test_26_1_a_fast_lister_leaves_a_young_ack_alone(server: Server, offset: float) -> None:
    fast_lister_leaves_a_young_ack_alone(server.url(), server.storage_options, offset)


@pytest.mark.parametrize("offset", WITHIN)
def test_26_1_a_fast_lister_leaves_a_live_batch_marker_alone(server: Server, offset: float) -> None:
    fast_lister_leaves_a_live_batch_marker_alone(server.url(), server.storage_options, offset)


@pytest.mark.parametrize("offset", WITHIN)
def test_26_1_a_fast_lister_leaves_a_live_probe_alone(server: Server, offset: float) -> None:
    fast_lister_leaves_a_live_probe_alone(server.url(), server.storage_options, offset)


@pytest.mark.parametrize(("holder", "taker"), SKEWS)
def test_26_1_hosts_off_the_store_hold_and_take_on_its_clock(
    server: Server, holder: float, taker: float
) -> None:
    hosts_off_the_store_hold_and_take_on_its_clock(
        server.url(), server.storage_options, holder, taker
    )


@pytest.mark.parametrize("offset", [-60.0, 60.0])
def test_26_1_a_host_beyond_the_bound_gets_clock_skew(server: Server, offset: float) -> None:
    beyond_the_clock_bound_is_clock_skew(server.url(), server.storage_options, offset)


@pytest.mark.parametrize("call", ["delete", "extend", "release"])
def test_26_2_a_request_stalled_while_the_clock_steps_back_is_not_stale(
    server: Server, call: str
) -> None:
    stalled_while_the_clock_steps_back(server.url(), server.storage_options, call)


@pytest.mark.xfail(strict=True, reason=SEND_BATCH_SENT)
def test_27_also_a_failed_send_batch_says_which_it_sent(server: Server) -> None:
    a_failed_send_batch_says_which_it_sent(server.url(), server.storage_options)


# ------------------------------------------------ GCS on the wire (11, 12)
def is_listing(exchange: Exchange) -> bool:
    """A GCS objects listing: ``GET /storage/v1/b/<bucket>/o?...``."""
    return exchange.method == "GET" and urlsplit(exchange.path).path.endswith("/o")


def is_single_delete(exchange: Exchange) -> bool:
    return exchange.method == "DELETE"


def is_batch(exchange: Exchange) -> bool:
    return exchange.method == "POST" and "/batch/" in exchange.path


def fill(q: vsqs.Queue, count: int) -> None:
    for start in range(0, count, 256):
        q.send_batch([b"%d" % i for i in range(start, min(count, start + 256))])


def test_26_11_a_receive_on_gcs_lists_one_page_of_its_own_queue(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    """Class 11: reading the first name of a backlog paged through every
    object (25 LIST pages for 25 000 messages). Here 2 500 messages, and as
    many in a queue beside it: a receive reads one page, of its own prefix."""
    url = gcs_server.url()
    fill(vsqs.Queue(url, storage_options=gcs_server.storage_options), 2_500)
    beside = url.rsplit("/", 1)[0] + "/p"  # sorts before "q": read first by a prefix-less listing
    fill(vsqs.Queue(beside, storage_options=gcs_server.storage_options), 2_500)
    q = vsqs.Queue(url, storage_options=proxied(gcs_server, gcs_proxy))
    q.send(b"warm-up")  # the probe, the clock and the config are read
    gcs_proxy.arm(None)
    msg = q.receive()
    assert msg is not None and msg.body == b"0"
    listings = [e for e in gcs_proxy.exchanges if is_listing(e)]
    assert len(listings) <= 2, [e.path for e in listings]
    prefix = urlsplit(url).path.strip("/")
    assert all("prefix=" in e.path for e in listings), [e.path for e in listings]
    assert all(prefix.split("/")[0] in e.path for e in listings), [e.path for e in listings]


def test_26_12_gcs_deletes_in_batches_and_off_the_claims_path(
    gcs_server: Server, gcs_proxy: FaultProxy
) -> None:
    """Class 12: after ``delete_batch(100)``, every claim of the next
    ``receive_batch(100)`` first sent the held-back deletions one by one.
    Deletions go 100 to a batch request; the claims' own requests carry none."""
    url = gcs_server.url()
    q = vsqs.Queue(url, storage_options=proxied(gcs_server, gcs_proxy), visibility_timeout=60)
    fill(q, 200)
    first = q.receive_batch(100)
    while len(first) < 100:
        more = q.receive_batch(100 - len(first))
        assert more, "the messages sent are not all received"
        first += more
    gcs_proxy.arm(None)
    result = q.delete_batch(first)
    assert len(result.deleted) == 100, result
    second: list[vsqs.Message] = []
    while len(second) < 100:
        more = q.receive_batch(100 - len(second))
        assert more, "the messages sent are not all received"
        second += more
    deletes = [e for e in gcs_proxy.exchanges if is_single_delete(e)]
    batches = [e for e in gcs_proxy.exchanges if is_batch(e)]
    assert len(deletes) <= 5, f"{len(deletes)} single DELETEs"
    # 100 acked objects, then their markers; the second batch's 100 sources.
    assert len(batches) <= math.ceil(300 / 100) + 3, f"{len(batches)} batch requests"
    q.delete_batch(second)
    q.close()


# ------------------------------------------- class 7: restamped staged commits
RESTAMP_AFTER = 30.0  # docs/format.md, "Leftovers": a row staged longer ago is restamped


def test_26_7_a_restamped_commit_publishes_each_row_once_and_leaves_nothing(
    s3_server: Server,
) -> None:
    """Class 7: rows staged more than 30 s before their commit were published
    under fresh ids by a move across ids, which left ``<id>.new`` and its
    marker for ever. The Spark data source's writer, driven as Spark drives
    it (write on an executor, commit on the driver), without a JVM; the 30 s
    pass for real (a longer wait only makes the rows older)."""
    pytest.importorskip("pyspark")
    import json
    import time

    from pyspark.sql import Row
    from pyspark.sql.types import BinaryType, StructField, StructType

    from vsqs.spark import VsqsDataSource

    url = s3_server.url()
    options = {"path": url, "storageOptions": json.dumps(s3_server.storage_options)}
    schema = StructType([StructField("body", BinaryType())])
    writer = VsqsDataSource(options).writer(schema, False)
    staged = writer.write(iter([Row(body=b"r0"), Row(body=b"r1"), Row(body=b"r2")]))
    time.sleep(RESTAMP_AFTER + 1.5)
    writer.commit([staged])
    q = vsqs.Queue(url, storage_options=s3_server.storage_options)
    assert sorted(m.body for m in drained_all(q)) == [b"r0", b"r1", b"r2"]
    q.gc()
    store = q.store
    assert isinstance(store, ObjectStore)
    left = [n for n, _ in store.io.listing() if n != "vsqs.json" and not n.startswith("vsqs-")]
    assert not [n for n in left if n.endswith((".new", ".moved"))], left


def drained_all(q: vsqs.Queue) -> list[vsqs.Message]:
    got: list[vsqs.Message] = []
    while batch := q.receive_batch(10):
        got.extend(batch)
        q.delete_batch(batch)
    return got
