"""``vsqs.metrics.enable_prometheus``: every queue of the process counts into
one registry, under the exact names of docs/monitoring.md, read back from
the text a scrape gets (``generate_latest``); ``disable`` stops it, and a
process that enables nothing reports to the no-op observer."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import vsqs
import vsqs.metrics
from benchmarks import bench_metrics
from vsqs import _meter as meter
from vsqs import _names as names
from vsqs.stores._object import ObjectStore
from vsqs.testing import FakeClock

from .support.servers import Server

#: The exposed sample names of the counters (prometheus-client adds ``_total``);
#: the dead letters' and the conflicts' have tests of their own.
COUNTERS = (
    "vsqs_messages_sent_total",
    "vsqs_messages_received_total",
    "vsqs_messages_deleted_total",
    "vsqs_messages_dead_lettered_total",
    "vsqs_empty_receives_total",
    "vsqs_claim_conflicts_total",
    "vsqs_store_requests_total",
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """A registry of its own that every queue counts into, for one test."""
    fresh = CollectorRegistry()
    vsqs.metrics.enable_prometheus(fresh)
    try:
        yield fresh
    finally:
        vsqs.metrics.disable()


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of the text exposition, by name and labels."""
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_a_queue_counts_its_lifecycle_under_the_exact_names(
    registry: CollectorRegistry, tmp_path: Path, clock: FakeClock
) -> None:
    with vsqs.Queue(tmp_path / "q", clock=clock) as q:
        q.send(b"one")
        q.send_batch([b"two", b"three"])
        clock.advance(5)
        first, second = q.receive_batch(2)
        q.delete(first)
        with pytest.raises(vsqs.ReceiptExpired):  # its unlink finds nothing: not_found
            q.delete(first.receipt or "")
        clock.advance(2)
        assert q.delete_batch([second]).deleted == [second.receipt]
        assert q.receive_batch(5)[0].body == b"three"
        assert q.receive() is None
        url = q.url
    got = scrape(registry)
    text = generate_latest(registry).decode()
    for name in COUNTERS[:3] + COUNTERS[4:5] + COUNTERS[6:]:  # the sample names a scrape reads
        assert f"\n{name}{{" in text, name
    assert value(got, "vsqs_messages_sent_total", queue=url) == 3
    assert value(got, "vsqs_messages_received_total", queue=url) == 3
    assert value(got, "vsqs_messages_deleted_total", queue=url) == 2
    assert value(got, "vsqs_empty_receives_total", queue=url) == 1
    # Sent at 0 and acked at 5 and 7 on the injected clock: the dwell, to the ms.
    assert value(got, "vsqs_message_dwell_seconds_count", queue=url) == 2
    assert value(got, "vsqs_message_dwell_seconds_sum", queue=url) == 12.0
    for operation, calls in [
        ("send", 1),
        ("send_batch", 1),
        ("receive", 3),
        ("delete", 1),
        ("delete_batch", 1),
    ]:
        count = "vsqs_operation_duration_seconds_count"
        assert value(got, count, queue=url, operation=operation) == calls, operation
    # A directory counts its file operations: a read per message received,
    # an unlink per ack.
    requests = "vsqs_store_requests_total"
    assert value(got, requests, queue=url, operation="read", outcome="ok") == 3
    assert value(got, requests, queue=url, operation="delete", outcome="ok") == 2
    assert value(got, requests, queue=url, operation="delete", outcome="not_found") == 1


def test_queues_opened_before_count_once_each_and_disable_stops_it(tmp_path: Path) -> None:
    """Several queues: one sample each in the same families. Enabling again
    (the same registry) neither raises nor counts twice; after ``disable``
    nothing counts, and the process's observer is the no-op one again."""
    fresh = CollectorRegistry()
    with vsqs.Queue(tmp_path / "a") as a, vsqs.Queue(tmp_path / "b") as b:
        a.send(b"before")  # not counted: nothing enabled yet
        try:
            vsqs.metrics.enable_prometheus(fresh)
            vsqs.metrics.enable_prometheus(fresh)
            a.send(b"x")
            b.send_batch([b"y", b"z"])
        finally:
            vsqs.metrics.disable()
        assert meter.observer is meter.OFF
        a.send(b"after")
        got = scrape(fresh)
        assert value(got, "vsqs_messages_sent_total", queue=a.url) == 1
        assert value(got, "vsqs_messages_sent_total", queue=b.url) == 2
        sent = [key for key in got if key[0] == "vsqs_messages_sent_total"]
        assert len(sent) == 2


def test_an_operation_under_way_when_metrics_are_enabled_is_not_timed_from_zero(
    tmp_path: Path,
) -> None:
    """Before: its start was read from the no-op observer (0.0) and its end
    reported to the new one, which recorded the machine's uptime as its
    duration. Metrics are enabled here from inside a receive's listing."""
    fresh = CollectorRegistry()
    store = vsqs.LocalStore(str(tmp_path / "q"))
    plain = store.list

    def enabling(*, prefix: str = "", settle: bool = False) -> list[str]:
        vsqs.metrics.enable_prometheus(fresh)
        return list(plain(prefix=prefix, settle=settle))

    store.list = enabling  # type: ignore[method-assign]
    try:
        with vsqs.Queue(store) as q:
            assert q.receive() is None
            q.send(b"timed")
    finally:
        vsqs.metrics.disable()
    got = scrape(fresh)
    timed = "vsqs_operation_duration_seconds"
    assert value(got, f"{timed}_count", queue=q.url, operation="receive") == 0  # begun before
    assert value(got, f"{timed}_count", queue=q.url, operation="send") == 1
    assert value(got, f"{timed}_sum", queue=q.url, operation="send") < 60


def test_enabling_on_another_registry_moves_the_counting_there(tmp_path: Path) -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    with vsqs.Queue(tmp_path / "q") as q:
        try:
            vsqs.metrics.enable_prometheus(first)
            q.send(b"1")
            vsqs.metrics.enable_prometheus(second)
            q.send_batch([b"2", b"3"])
        finally:
            vsqs.metrics.disable()
        assert value(scrape(first), "vsqs_messages_sent_total", queue=q.url) == 1
        assert value(scrape(second), "vsqs_messages_sent_total", queue=q.url) == 2


def test_a_dead_letter_queue_is_a_queue_like_the_others(
    registry: CollectorRegistry, tmp_path: Path, clock: FakeClock
) -> None:
    with vsqs.Queue(tmp_path / "src", clock=clock, max_receives=1, dead_letter="dlq") as q:
        q.send(b"poison")
        clock.advance(1)
        assert q.receive(visibility_timeout=1) is not None
        clock.advance(2)
        assert q.receive() is None  # its second receive dead-letters it
        dlq_url = q.dead_letter_url
        assert dlq_url is not None
        with vsqs.Queue(dlq_url, clock=clock) as dlq:
            msg = dlq.receive()
            assert msg is not None
            clock.advance(4)
            msg.delete()
        got = scrape(registry)
        # It keeps its id: its dwell counts from its first send, 7 s before.
        assert value(got, "vsqs_message_dwell_seconds_sum", queue=dlq_url) == 7.0
        assert value(got, "vsqs_messages_dead_lettered_total", queue=q.url) == 1
        assert value(got, "vsqs_messages_received_total", queue=q.url) == 1
        assert value(got, "vsqs_messages_received_total", queue=dlq_url) == 1
        assert value(got, "vsqs_messages_deleted_total", queue=dlq_url) == 1
        assert value(got, "vsqs_messages_dead_lettered_total", queue=dlq_url) == 0


def test_a_lost_claim_race_counts_a_conflict(registry: CollectorRegistry, clock: FakeClock) -> None:
    """Two clients of one store: the first's view still lists the message the
    second claimed, so its claim loses the race (a rename of a name gone)."""
    store = vsqs.MemoryStore()
    with vsqs.Queue(store, clock=clock) as first, vsqs.Queue(store, clock=clock) as second:
        first.send_batch([b"1", b"2"])
        clock.advance(1)
        assert [m.body for m in first.receive_batch(1)] == [b"1"]
        assert [m.body for m in second.receive_batch(1)] == [b"2"]
        assert first.receive() is None
        url = first.url
    got = scrape(registry)
    assert value(got, "vsqs_claim_conflicts_total", queue=url) == 1
    assert not [k for k in got if k[0] == "vsqs_store_requests_total"]  # a MemoryStore counts none


def test_groups_in_flight_is_what_stats_sees(
    registry: CollectorRegistry, tmp_path: Path, clock: FakeClock
) -> None:
    with vsqs.Queue(tmp_path / "q", clock=clock) as q:
        q.send_batch([b"a1", b"a2"], group="a")
        q.send(b"b1", group="b")
        clock.advance(1)
        assert len(q.receive_batch(10)) == 3  # a group's consecutive messages may come together
        assert q.stats().groups_in_flight == 2
        assert value(scrape(registry), "vsqs_groups_in_flight", queue=q.url) == 2


@pytest.mark.servers
def test_an_object_store_counts_each_request_with_its_outcome(
    registry: CollectorRegistry, s3_server: Server
) -> None:
    """``vsqs_store_requests_total`` is the adapter's own request count
    (:attr:`ObjectIO.requests`), split by outcome; a send under an id whose
    name is taken is an ``exists``."""
    url = f"{s3_server.root}/{uuid.uuid4().hex[:8]}/q"
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        store = q.store
        assert isinstance(store, ObjectStore)
        q.send(b"x")
        with pytest.raises(FileExistsError):  # an exclusive create of a name taken
            store.write_new(names.CONFIG_NAME, b"{}", fsync=True)
        msg = q.receive()
        assert msg is not None
        msg.delete()
        store.flush()  # sends the deletions held back
        got = scrape(registry)
        by_kind: dict[str, float] = {}
        for (name, labels), count in got.items():
            if name == "vsqs_store_requests_total" and ("queue", q.url) in labels:
                kind = dict(labels)["operation"]
                by_kind[kind] = by_kind.get(kind, 0) + count
        assert by_kind == dict(store.io.requests)
        assert value(
            got, "vsqs_store_requests_total", queue=q.url, operation="put", outcome="exists"
        )


def test_a_batch_delete_that_names_failed_keys_counts_as_an_error(
    registry: CollectorRegistry, s3_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``DeleteObjects`` whose response names keys it could not delete is a
    request with outcome ``error``, not ``ok`` (the names go back to be
    deleted again)."""
    url = f"{s3_server.root}/{uuid.uuid4().hex[:8]}/q"
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        store = q.store
        assert isinstance(store, ObjectStore)
        q.send_batch([b"a", b"b"])
        msgs = q.receive_batch(2)
        assert len(msgs) == 2
        fs = store.io.fs  # type: ignore[attr-defined]
        real = fs.call_s3
        partial: list[str] = []

        def call_s3(method: str, **kwargs: Any) -> Any:
            response = real(method, **kwargs)
            if method == "delete_objects":
                key = kwargs["Delete"]["Objects"][0]["Key"]
                partial.append(key)
                response = {**response, "Errors": [{"Key": key, "Code": "InternalError"}]}
            return response

        monkeypatch.setattr(fs, "call_s3", call_s3)
        assert q.delete_batch(msgs).ok
        store.flush()
        got = scrape(registry)
        assert partial
        assert value(
            got, "vsqs_store_requests_total", queue=q.url, operation="delete", outcome="error"
        ) == len(partial)


def test_enabling_without_the_library_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Importing ``vsqs.metrics`` needs neither library; enabling an exporter
    without its own raises one line naming the extra."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
    original = vsqs.metrics
    monkeypatch.setattr(vsqs, "metrics", original)  # the import below rebinds it
    monkeypatch.delitem(sys.modules, "vsqs.metrics")
    fresh = importlib.import_module("vsqs.metrics")
    assert fresh is not original  # imported anew, without either library
    for enable in (fresh.enable_prometheus, fresh.enable_opentelemetry):
        with pytest.raises(vsqs.VsqsError) as caught:
            enable()
        message = str(caught.value)
        assert "pip install 'vsqs[metrics]'" in message and "\n" not in message
    assert meter.observer is meter.OFF


def test_the_benchmark_runs_its_three_variants_and_leaves_metrics_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmarks/bench_metrics.py`` at a tiny size (its lifecycle checks
    that every message came back once); nothing here is timed."""
    assert (
        bench_metrics.main(["--messages", "20", "--repeat", "1", "--workdir", str(tmp_path)]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["off", "prometheus"]
    assert lines[3].split()[:2] == ["off", "again"]
    assert lines[4].startswith("hooks while off: ")
    calls, _ = bench_metrics.hook_bound(20, str(tmp_path))
    assert calls >= 6  # a send, a receive and an ack each report, and their store requests
    assert meter.observer is meter.OFF
    assert list(tmp_path.iterdir()) == []  # its queues are gone
