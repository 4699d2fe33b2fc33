"""The Prometheus observer: the counters of every queue of the process in
one ``CollectorRegistry`` (docs/monitoring.md)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from .. import _meter as meter
from .. import _names as names

#: Buckets of ``vsqs_message_dwell_seconds``: a message waits from
#: milliseconds to days between its send and its ack.
DWELL_BUCKETS = (0.01, 0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 4 * 86400)


class PrometheusObserver(meter.Off):
    """Counts the events of every queue into the families of one registry,
    with the label ``queue`` (:attr:`vsqs.Queue.url`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, ["queue", *labels], registry=registry)

        self._sent = counter("vsqs_messages_sent", "Messages sent.")
        self._received = counter("vsqs_messages_received", "Messages received.")
        self._deleted = counter("vsqs_messages_deleted", "Messages acknowledged (deleted).")
        self._dead_lettered = counter(
            "vsqs_messages_dead_lettered", "Messages moved to the dead-letter queue."
        )
        self._empty = counter("vsqs_empty_receives", "Receives that returned no message.")
        self._conflicts = counter(
            "vsqs_claim_conflicts", "Claims lost to another client's (a lost claim race)."
        )
        self._requests = counter(
            "vsqs_store_requests",
            "Requests to the store (object stores: HTTP requests; directories: file operations).",
            "operation",
            "outcome",
        )
        self._durations = Histogram(
            "vsqs_operation_duration_seconds",
            "Time of the queue's operations that returned.",
            ["queue", "operation"],
            registry=registry,
        )
        self._dwell = Histogram(
            "vsqs_message_dwell_seconds",
            "Time from a message's send to its ack.",
            ["queue"],
            buckets=DWELL_BUCKETS,
            registry=registry,
        )
        self._groups = Gauge(
            "vsqs_groups_in_flight",
            "Message groups with a message in flight, at the last stats() of the queue.",
            ["queue"],
            registry=registry,
        )

        #: The labelled children, by family and labels: prometheus-client's
        #: ``labels()`` checks and locks on every call.
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, family: MetricWrapperBase, *labels: str) -> Any:
        key = (family, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def clock(self) -> float:
        return meter.now()

    def sent(self, url: str, operation: str, count: int, started: float) -> None:
        self._child(self._sent, url).inc(count)
        self.operation(url, operation, started)

    def received(self, url: str, count: int, started: float) -> None:
        if count:
            self._child(self._received, url).inc(count)
        else:
            self._child(self._empty, url).inc()
        self.operation(url, "receive", started)

    def deleted(self, url: str, receipt: str, now_ms: meter.NowMs) -> None:
        self._child(self._deleted, url).inc()
        sent_ms = names.id_ms(names.id_of(receipt))
        self._child(self._dwell, url).observe(max(0, now_ms() - sent_ms) / 1000)

    def operation(self, url: str, name: str, started: float) -> None:
        self._child(self._durations, url, name).observe(meter.now() - started)

    def dead_lettered(self, url: str) -> None:
        self._child(self._dead_lettered, url).inc()

    def claim_conflict(self, url: str) -> None:
        self._child(self._conflicts, url).inc()

    def request(self, url: str, operation: str, outcome: str) -> None:
        self._child(self._requests, url, operation, outcome).inc()

    def groups_in_flight(self, url: str, count: int) -> None:
        self._child(self._groups, url).set(count)
