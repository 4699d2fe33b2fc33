"""``vsqs.metrics.enable_opentelemetry``: the messaging semantic conventions'
metrics, read back with the SDK's ``InMemoryMetricReader``, and a trace
context that travels with a message from the producer's span to the
consumer's, read back with ``InMemorySpanExporter`` (the real SDK)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from prometheus_client import CollectorRegistry

import vsqs
import vsqs.metrics
from vsqs._envelope import MAX_ATTRIBUTES
from vsqs.testing import FakeClock

from .support.format2 import FORMAT_2_CONFIG, write_format_2


@dataclass
class Otel:
    reader: InMemoryMetricReader
    spans: InMemorySpanExporter
    tracer: trace.Tracer

    def points(self, name: str) -> list[Any]:
        """The data points of the metric ``name`` collected now."""
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def otel() -> Iterator[Otel]:
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    vsqs.metrics.enable_opentelemetry(
        MeterProvider(metric_readers=[reader]), tracer_provider=tracing
    )
    try:
        yield Otel(reader, spans, tracing.get_tracer("test"))
    finally:
        vsqs.metrics.disable()


def by_operation(points: list[Any], url: str) -> dict[str, Any]:
    found = {}
    for point in points:
        attributes = dict(point.attributes)
        assert attributes["messaging.system"] == "vsqs"
        if attributes["messaging.destination.name"] == url:
            found[attributes["messaging.operation.name"]] = point
    return found


def test_the_messaging_metrics_with_their_attributes(otel: Otel, tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        q.send(b"a")
        q.send_batch([b"b", b"c"])
        got = q.receive_batch(3)
        q.delete_batch(got)
        assert q.receive() is None
        url = q.url
    sent = by_operation(otel.points("messaging.client.sent.messages"), url)
    assert {name: p.value for name, p in sent.items()} == {"send": 1, "send_batch": 2}
    consumed = by_operation(otel.points("messaging.client.consumed.messages"), url)
    assert consumed["receive"].value == 3
    durations = by_operation(otel.points("messaging.client.operation.duration"), url)
    assert {name: p.count for name, p in durations.items()} == {
        "send": 1,
        "send_batch": 1,
        "receive": 2,  # the empty receive is an operation too
        "delete_batch": 1,
    }
    assert dict(durations["receive"].attributes)["messaging.operation.type"] == "receive"


def test_consume_links_its_span_to_the_producers_and_times_the_handler(
    otel: Otel, tmp_path: Path
) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        with otel.tracer.start_as_current_span("produce") as producer:
            q.send(b"traced")
        q.send(b"untraced")  # no span current: no trace context
        seen: list[dict[str, str]] = []
        assert q.consume(lambda m: seen.append(m.attributes), max_messages=2) == 2
        url = q.url
    assert "traceparent" in seen[0] and "traceparent" not in seen[1]
    produced = producer.get_span_context()
    assert seen[0]["traceparent"].split("-")[1] == f"{produced.trace_id:032x}"
    consumers = [s for s in otel.spans.get_finished_spans() if s.kind == trace.SpanKind.CONSUMER]
    assert len(consumers) == 2
    linked, unlinked = consumers
    assert [link.context.span_id for link in linked.links] == [produced.span_id]
    assert list(unlinked.links) == []
    assert linked.attributes is not None
    assert linked.attributes["messaging.destination.name"] == url
    [process] = otel.points("messaging.process.duration")
    assert process.count == 2


def test_the_trace_context_is_one_attribute_among_the_callers(otel: Otel, tmp_path: Path) -> None:
    """The caller's ``traceparent`` is kept; ``tracestate`` goes along when
    there is room; a message with every attribute slot taken gets none."""
    state = TraceState([("vendor", "v1")])
    parent = SpanContext(
        0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(1), trace_state=state
    )
    full = {f"k{i}": "v" for i in range(MAX_ATTRIBUTES)}
    one_short = {f"k{i}": "v" for i in range(MAX_ATTRIBUTES - 1)}
    mine = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    with vsqs.Queue(tmp_path / "q") as q, trace.use_span(NonRecordingSpan(parent)):
        q.send(b"full", attributes=full)
        q.send(b"one short", attributes=one_short)
        q.send(b"mine", attributes=mine)
        q.send(b"plain")
        got = {m.body: m.attributes for m in q.receive_batch(4)}
    assert got[b"full"] == full
    assert set(got[b"one short"]) - set(one_short) == {"traceparent"}
    assert got[b"mine"] == mine
    assert got[b"plain"]["tracestate"] == "vendor=v1"
    assert got[b"plain"]["traceparent"] == f"00-{0xABC:032x}-{0xDEF:016x}-01"


def test_a_format_2_queue_sends_inside_a_span_without_the_context(
    otel: Otel, tmp_path: Path, clock: FakeClock
) -> None:
    store = vsqs.LocalStore(str(tmp_path / "old"))
    write_format_2(store, clock, FORMAT_2_CONFIG)
    with (
        vsqs.Queue(store, clock=clock) as q,
        otel.tracer.start_as_current_span("produce"),
    ):
        q.send(b"x")  # format 2 has no attributes: no context, and no error
    [point] = by_operation(otel.points("messaging.client.sent.messages"), q.url).values()
    assert point.value == 1


def test_a_message_with_no_room_for_the_context_goes_without_it(otel: Otel, tmp_path: Path) -> None:
    """The context counts towards ``max_message_size``: a message that fits
    only without it is sent without it; one too large anyway is refused."""
    with (
        vsqs.Queue(tmp_path / "q", max_message_size=1024) as q,
        otel.tracer.start_as_current_span("produce"),
    ):
        q.send(b"x" * 1000)
        q.send(b"x" * 1024)
        with pytest.raises(vsqs.MessageTooLarge):
            q.send(b"x" * 1025)
        q.send(b"small")
        got = {len(m.body): m.attributes for m in q.receive_batch(3)}
    assert got[1000] == {}  # 1 000 bytes and a traceparent of 66 make more than 1 024
    assert got[1024] == {}
    assert set(got[5]) == {"traceparent"}


def test_both_exporters_count_at_once_and_disable_stops_both(otel: Otel, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    vsqs.metrics.enable_prometheus(registry)
    with vsqs.Queue(tmp_path / "q") as q:
        q.send(b"both")
        vsqs.metrics.disable()
        q.send(b"neither")
        url = q.url
    assert registry.get_sample_value("vsqs_messages_sent_total", {"queue": url}) == 1
    [point] = by_operation(otel.points("messaging.client.sent.messages"), url).values()
    assert point.value == 1
