"""What bundles cost on S3, counted: issue 32's request goals on a moto server.

Each workload runs through a proxy in front of moto, so every request that
reaches the server is counted there (opening the queue included), besides
vsqs's own adapter count. Counts, not timings: they do not depend on the
machine. ``benchmarks/bench_s3.py --bundles`` reports the same workloads with
their prices (docs/performance.md, "What bundles cost").
"""

from __future__ import annotations

import time

import vsqs
from benchmarks import bench_s3
from tests.support.fault_proxy import FaultProxy
from vsqs.testing import FakeClock

from .support.servers import Server, proxied

MESSAGES = 1000


def per_message(
    server: Server, proxy: FaultProxy, send: int, receive: int
) -> tuple[dict[str, float], float]:
    """Requests per message of :func:`bench_s3.batch_workload` (bundles on),
    by kind as the adapter counts them, and in all at the server."""
    options = proxied(server, proxy)
    proxy.arm(None)
    counts = bench_s3.batch_workload(server.url(), options, MESSAGES, send, receive, bundle=True)
    return {kind: n / MESSAGES for kind, n in counts.items()}, proxy.count / MESSAGES


def test_batches_of_100_cost_at_most_a_tenth_of_a_request_per_message(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """1 000 messages, ``send_batch(100)``, then ``receive_batch(100)`` +
    ``delete_batch`` until empty: at most 0.1 requests per message at the
    server, and at most 0.30 USD per million at S3 Standard prices."""
    counted, at_server = per_message(s3_server, s3_proxy, 100, 100)
    assert sum(counted.values()) <= at_server <= 0.1
    assert bench_s3.usd_per_million(counted, bench_s3.S3_PRICES) <= 0.30


def test_receive_batch_of_10_from_bundles_of_100_costs_at_most_one_request_per_message(
    s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """A receiver that takes 10 at a time splits each bundle of 100 ten times,
    and still pays at most one request per message, at the server."""
    counted, at_server = per_message(s3_server, s3_proxy, 100, 10)
    assert sum(counted.values()) <= at_server <= 1.0


def one_at_a_time(server: Server, bundle: bool) -> int:
    """Requests, listings aside, of sending 100 messages with one
    ``send_batch``, then ``receive()`` + ``delete()`` one at a time until
    empty, held-back deletions flushed; every message checked, in order.

    Listings are left out: how many a receiver takes depends on timing (a
    listing that shows names younger than ``YOUNG_MS`` is taken again)."""
    bodies = bench_s3.numbered(100)
    clock = FakeClock(time.time())  # standing still: no listing falls due by time
    url, options = server.url(), server.storage_options
    with vsqs.Queue(url, storage_options=options, clock=clock) as q:
        counts = bench_s3.requests_of(q)
        counts.clear()
        ids = q.send_batch(bodies, bundle=bundle)
        clock.advance(1)  # no name young
        got = []
        while (msg := q.receive()) is not None:
            got.append((msg.id, msg.body))
            msg.delete()
        bench_s3.flush(q)
        assert got == list(zip(ids, bodies, strict=True))
        return sum(n for kind, n in counts.items() if kind != "list")


def test_one_at_a_time_costs_no_more_from_a_bundle_than_from_messages_alone(
    s3_server: Server,
) -> None:
    """Messages received and deleted one at a time cost no more requests sent
    in a bundle than each in an object of its own (``bundle=False``): a
    receive of one of a bundle's messages splits it, one copy more than a
    rename, where the bundle saved a create per message."""
    assert one_at_a_time(s3_server, bundle=True) <= one_at_a_time(s3_server, bundle=False)
