"""The OpenTelemetry observer: the messaging semantic conventions' metrics,
and a trace context that travels with each message (docs/monitoring.md)."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import _meter as meter
from .._envelope import MAX_ATTRIBUTES

SYSTEM = "vsqs"
#: The attributes that carry a W3C trace context (what the propagator writes).
TRACE_KEYS = ("traceparent", "tracestate")
#: Bucket boundaries of the duration histograms (seconds), as the
#: conventions advise.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
#: ``messaging.operation.type`` of each operation (``messaging.operation.name``).
OPERATION_TYPES = {
    "send": "send",
    "send_batch": "send",
    "receive": "receive",
    "delete": "settle",
    "delete_batch": "settle",
}

_PROPAGATOR = TraceContextTextMapPropagator()


def _attributes(url: str, operation: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": url,
        "messaging.operation.name": operation,
        "messaging.operation.type": OPERATION_TYPES.get(operation, operation),
    }


class OpenTelemetryObserver(meter.Off):
    """Records ``messaging.client.operation.duration``,
    ``messaging.client.sent.messages``, ``messaging.client.consumed.messages``
    and ``messaging.process.duration`` with one meter of ``provider``; sends
    carry the current span's context, and ``consume`` handles each message
    in a consumer span linked to it."""

    def __init__(
        self, provider: MeterProvider, tracer_provider: trace.TracerProvider | None = None
    ) -> None:
        self._tracer = trace.get_tracer("vsqs", tracer_provider=tracer_provider)
        otel_meter = provider.get_meter("vsqs")
        self._duration = otel_meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of a messaging operation of a producer or consumer client.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._sent = otel_meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        )
        self._consumed = otel_meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        self._process = otel_meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )

    def clock(self) -> float:
        return meter.now()

    def sent(self, url: str, operation: str, count: int, started: float) -> None:
        self._sent.add(count, _attributes(url, operation))
        self.operation(url, operation, started)

    def received(self, url: str, count: int, started: float) -> None:
        if count:
            self._consumed.add(count, _attributes(url, "receive"))
        self.operation(url, "receive", started)

    def operation(self, url: str, name: str, started: float) -> None:
        self._duration.record(meter.now() - started, _attributes(url, name))

    def traced(self, attributes: meter.Attributes) -> meter.Attributes:
        """``attributes`` with the current span's trace context (``traceparent``,
        and ``tracestate`` if any), unless the caller set one, there is no
        valid span, or the message has no room for it (``MAX_ATTRIBUTES``)."""
        given = attributes or {}
        if any(key in given for key in TRACE_KEYS):
            return attributes
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        room = MAX_ATTRIBUTES - len(given)
        if not carrier or room < 1:
            return attributes
        fitting = [key for key in TRACE_KEYS if key in carrier][:room]
        return {**given, **{key: carrier[key] for key in fitting}}

    def handling(
        self, url: str, handler: Callable[[meter.M], object]
    ) -> Callable[[meter.M], object]:
        tracer = self._tracer

        def traced_handler(message: meter.M) -> object:
            producer = trace.get_current_span(_PROPAGATOR.extract(dict(message.attributes)))
            context = producer.get_span_context()
            links = [trace.Link(context)] if context.is_valid else []
            attributes = _attributes(url, "process")
            started = meter.now()
            try:
                with tracer.start_as_current_span(
                    f"process {url}",
                    kind=trace.SpanKind.CONSUMER,
                    links=links,
                    attributes=attributes,
                ):
                    return handler(message)
            finally:
                self._process.record(meter.now() - started, attributes)

        return traced_handler
