"""Smoke tests of the issue-29 workloads of ``benchmarks/``, at tiny sizes.

They run the benchmark's own code (which checks what it receives) and the
request counts that docs/performance.md reports per kind of message: a
message group costs no request more per lifecycle on S3, a deduplication id
three (a read of the previous slot's record, its record's exclusive create,
its sent mark). Nothing here is timed.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import vsqs
from benchmarks import bench_consume, bench_local, bench_s3

from .support.servers import Server


@pytest.mark.parametrize(("kind", "lifecycle", "send"), [
    ("plain", 7, {"put": 1}),
    ("group", 7, {"put": 1}),
    ("dedup", 10, {"get": 1, "put": 3}),
])  # fmt: skip
def test_requests_per_lifecycle_by_kind(
    s3_server: Server, kind: str, lifecycle: int, send: dict[str, int]
) -> None:
    counted = bench_s3.count_requests(s3_server.root, s3_server.storage_options, 10, kind)
    assert counted["send"] == send
    assert counted["receive"] == {"put": 1, "copy": 1, "delete": 1, "get": 1}
    assert counted["delete"] == {"put": 1, "head": 1}
    assert counted["lifecycle"] == lifecycle


def test_deduplication_records_add_no_listing_page(s3_server: Server) -> None:
    """A receive lists one page whatever the backlog (docs/guarantees.md), also
    after 1 001 sends with deduplication ids whose records (named by the first
    32 hex of the id's SHA-256) sort before every message id: found by
    ``bench_s3.py``, where a queue that had seen 12 000 ids took 2 ``LIST``s."""
    every = (f"id-{i}" for i in itertools.count())
    early = (i for i in every if hashlib.sha256(i.encode()).hexdigest()[0] == "0")
    ids = list(itertools.islice(early, 1001))
    url = bench_s3.fresh_url(s3_server.root)
    options = s3_server.storage_options
    with vsqs.Queue(url, storage_options=options) as q, ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: q.send(b"m", dedup_id=i), ids))  # each: its record, its message
    with vsqs.Queue(url, storage_options=options) as q:
        counts = bench_s3.requests_of(q)
        counts.clear()
        msg = q.receive()
        assert msg is not None and msg.body == b"m"
        assert counts["list"] == 1


def test_group_backlog_variants_receive_only_group_b(tmp_path: Path) -> None:
    """Each variant drains exactly the ``B`` messages (``drain_group_b`` checks
    the count and each group), ``A``'s backlog untouched and its head back
    (received and released by each of the two runs that hold it)."""
    behind = bench_local.GroupBacklog(tmp_path / "behind", backlog=30, count=3)
    for run in (
        lambda: behind.alone(tmp_path / "alone-group", targeted=True),
        lambda: behind.behind(held=False, targeted=True),
        lambda: behind.behind(held=True, targeted=True),
        lambda: behind.alone(tmp_path / "alone-any", targeted=False),
        lambda: behind.behind(held=True, targeted=False),
    ):
        assert run() > 0
    with vsqs.Queue(tmp_path / "behind") as q:
        assert q.stats().ready == 30
        head = q.receive()
        assert head is not None and head.group == "A" and head.receive_count == 3


@pytest.mark.processes
def test_four_grouped_consumers_take_every_message(tmp_path: Path) -> None:
    """1 producer + 4 consumer processes, 100 groups: every message taken once
    (``four_consumers`` checks the count)."""
    assert bench_local.four_consumers("grouped", tmp_path / "q", 300) > 0
    assert bench_local.PROCESS_DETAIL["grouped"]


@pytest.mark.processes
def test_the_consume_benchmark_handles_and_deletes_every_message(tmp_path: Path) -> None:
    """``vsqs consume -c 4 -- true`` over 40 messages: ``consume_rate`` checks
    the summary says 40 succeeded and that the queue is empty (not timed)."""
    assert bench_consume.consume_rate(tmp_path, 40, 4) > 0


def test_the_baselines_are_priced_as_docs_performance_says() -> None:
    """SQS: 3 requests per message one at a time (1.20 USD per million
    messages), 0.3 with batches of 10 (0.12); pawn-queue: 6.2 requests,
    11.80 USD at S3's prices (its deletes are free)."""
    priced = bench_s3.baselines(bench_s3.S3_PRICES)
    assert priced == {
        "SQS one at a time": (3.0, pytest.approx(1.20)),
        "SQS, batches of 10": (0.3, pytest.approx(0.12)),
        "pawn-queue": (pytest.approx(6.2), pytest.approx(11.80)),
    }


@pytest.mark.parametrize("variant", sorted(bench_local.BATCH_DRAINS))
def test_batch_drains_take_every_message(tmp_path: Path, variant: str) -> None:
    """Each drain of bundles and of files alone receives and deletes every
    message (``vsqs_batch_drain`` checks the count and each deletion), and
    leaves the queue empty."""
    bundle, size = bench_local.BATCH_DRAINS[variant]
    assert bench_local.vsqs_batch_drain(tmp_path / "q", 250, bundle, size) > 0
    with vsqs.Queue(tmp_path / "q") as q:
        assert q.stats().ready == 0 and q.stats().in_flight == 0


def test_send_batch_in_bundles_writes_one_file_per_batch(tmp_path: Path) -> None:
    """The durable send_batch workload's two variants: bundles of 100 are one
    message file per batch, files alone one per message (stats count both)."""
    for bundle, files in ((True, 3), (False, 300)):
        path = tmp_path / str(bundle)
        assert bench_local.vsqs_send_batch(path, 300, 100, bundle) > 0
        with vsqs.Queue(path) as q:
            assert q.stats().ready == 300
        assert len([n for n in os.listdir(path) if n[0].isdigit()]) == files
