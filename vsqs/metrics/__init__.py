"""Metrics of every :class:`vsqs.Queue` of the process, for Prometheus and
OpenTelemetry (``pip install 'vsqs[metrics]'``; docs/monitoring.md).

    >>> import vsqs.metrics
    >>> vsqs.metrics.enable_prometheus()  # doctest: +SKIP

Both exporters may be on at once. Until one is enabled, a queue's only cost
is one call of an empty method per event (``benchmarks/bench_metrics.py``).
Importing this module needs neither library; enabling an exporter without
its library raises :class:`MetricsUnavailable`.
"""

from __future__ import annotations

import importlib
import weakref
from typing import Any

from .. import _forks
from .. import _meter as meter
from .._errors import VsqsError
from ._tee import Tee


class MetricsUnavailable(VsqsError):
    """An exporter's library is not installed (``pip install 'vsqs[metrics]'``)."""


_LOCK = _forks.lock()
#: The observers on, by exporter; and the Prometheus observer of each
#: registry it was enabled on (a registry takes its families once), kept no
#: longer than the registry.
_ON: dict[str, meter.Observer] = {}
_BY_REGISTRY: weakref.WeakKeyDictionary[Any, meter.Observer] = weakref.WeakKeyDictionary()


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MetricsUnavailable(
            f"{module} is not installed: pip install 'vsqs[metrics]'"
        ) from None


def _install() -> None:
    observers = list(_ON.values())
    if not observers:
        meter.install(meter.OFF)
    else:
        meter.install(observers[0] if len(observers) == 1 else Tee(observers))


def enable_prometheus(registry: Any = None) -> None:
    """From now on every queue of the process, those opened before too,
    counts into ``registry`` (prometheus-client's default ``REGISTRY`` when
    ``None``), with the label ``queue`` (:attr:`vsqs.Queue.url`).

    Families: ``vsqs_messages_sent_total``, ``vsqs_messages_received_total``,
    ``vsqs_messages_deleted_total``, ``vsqs_messages_dead_lettered_total``,
    ``vsqs_empty_receives_total``, ``vsqs_claim_conflicts_total``,
    ``vsqs_store_requests_total`` (labels ``operation``, ``outcome``), the
    histograms ``vsqs_operation_duration_seconds`` (label ``operation``) and
    ``vsqs_message_dwell_seconds`` (send to ack), and the gauge
    ``vsqs_groups_in_flight`` (set by :meth:`vsqs.Queue.stats`). Enabling
    again is harmless (on another registry: counting moves there); the
    families stay registered after :func:`disable`.
    """
    client = _require("prometheus_client")
    from ._prometheus import PrometheusObserver

    target = client.REGISTRY if registry is None else registry
    with _LOCK:
        known = _BY_REGISTRY.get(target)
        if known is None:
            known = _BY_REGISTRY[target] = PrometheusObserver(target)
        _ON["prometheus"] = known
        _install()


def enable_opentelemetry(meter_provider: Any = None, *, tracer_provider: Any = None) -> None:
    """From now on every queue of the process, those opened before too,
    records the OpenTelemetry messaging metrics with a meter of
    ``meter_provider`` (the global one when ``None``):
    ``messaging.client.operation.duration``, ``messaging.client.sent.messages``,
    ``messaging.client.consumed.messages`` and ``messaging.process.duration``
    (a handler's time in :meth:`vsqs.Queue.consume`), with the attributes
    ``messaging.system="vsqs"``, ``messaging.destination.name`` (the queue's
    url) and ``messaging.operation.name``.

    A send inside a span gives its message the span's W3C trace context as
    the attributes ``traceparent`` (and ``tracestate``), unless the caller
    set them, the message has no room left among its attributes, or the
    queue is of format 2; ``consume`` runs each handler in a consumer span
    of ``tracer_provider`` (the global one when ``None``) linked to it.
    Enabling again replaces the providers.
    """
    metrics = _require("opentelemetry.metrics")
    _require("opentelemetry.trace")
    from ._otel import OpenTelemetryObserver

    provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
    with _LOCK:
        _ON["opentelemetry"] = OpenTelemetryObserver(provider, tracer_provider)
        _install()


def disable() -> None:
    """Stop counting: every queue reports to nothing again (a registry keeps
    what it counted)."""
    with _LOCK:
        _ON.clear()
        _install()


__all__ = ["MetricsUnavailable", "disable", "enable_opentelemetry", "enable_prometheus"]
