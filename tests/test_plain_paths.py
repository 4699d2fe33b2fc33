"""Plain messages (no group, deduplication id, attributes or trace context)
take short paths; each gives what the general path gives, and metrics off
cost no call per file operation (docs/monitoring.md, "What it costs while off")."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import vsqs
import vsqs.metrics
from vsqs import _meter as meter
from vsqs._config import QueueConfig
from vsqs._envelope import NO_META
from vsqs._message import Body
from vsqs._outgoing import Outgoing, Prepared, prepare
from vsqs.stores._local import LocalStore

#: Every method of a directory that counts as a store request.
METERED = ("list", "read", "read_limited", "write_new", "rename", "delete")


class Observing(meter.Off):
    """An observer that is not :data:`meter.OFF` but adds nothing (no trace
    context): sends take the general path with it."""


@pytest.fixture
def observing() -> Iterator[None]:
    meter.install(Observing())
    try:
        yield
    finally:
        meter.install(meter.OFF)


def general(bodies: list[Body | Outgoing], config: QueueConfig) -> list[Prepared]:
    """What the general path prepares of ``bodies`` (an observer is installed)."""
    meter.install(Observing())
    try:
        return prepare(bodies, config)
    finally:
        meter.install(meter.OFF)


def test_a_plain_send_prepares_what_the_general_path_prepares() -> None:
    config = QueueConfig()
    bodies: list[Body | Outgoing] = [b"a", "\u00e9t\u00e9", bytearray(b"c"), memoryview(b"d"), b""]
    plain = prepare(bodies, config, dedup_ids=[None] * len(bodies))
    slow = general(bodies, config)
    assert plain == slow
    assert [p.data for p in plain] == [b"a", "\u00e9t\u00e9".encode(), b"c", b"d", b""]
    # Two paths, one outcome: the plain one builds no metadata of its own.
    assert all(p.meta is NO_META for p in plain)
    assert all(p.meta is not NO_META for p in slow)


def test_a_plain_send_refuses_what_the_general_path_refuses() -> None:
    config = QueueConfig(max_message_size=4)
    with pytest.raises(vsqs.MessageTooLarge) as plain:
        prepare([b"ok", b"too large"], config)
    with pytest.raises(vsqs.MessageTooLarge) as slow:
        general([b"ok", b"too large"], config)
    assert (
        str(plain.value)
        == str(slow.value)
        == ("message 1 of the batch is 9 bytes; this queue takes at most 4 (its max_message_size)")
    )
    with pytest.raises(vsqs.InvalidBody):
        prepare([b"ok", 7], config)  # type: ignore[list-item]


def test_content_dedup_and_a_message_of_its_own_take_the_general_path() -> None:
    hashed = prepare([b"body"], QueueConfig(content_dedup=True))
    assert hashed[0].meta.dedup_id == hashlib.sha256(b"body").hexdigest()
    mixed = prepare([b"plain", Outgoing(b"grouped", group="g")], QueueConfig())
    assert [p.meta.group for p in mixed] == [None, "g"]
    assert mixed[1].data.endswith(b"\ngrouped") and mixed[1].data != b"grouped"


def requests(registry: CollectorRegistry, url: str, operation: str) -> float:
    text = generate_latest(registry).decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vsqs_store_requests_total"
        and s.labels == {"queue": url, "operation": operation, "outcome": "ok"}
    )


def test_a_directory_counts_its_requests_only_while_metrics_are_on(tmp_path: Path) -> None:
    """Off, a directory's methods are the plain ones (no wrapper is called);
    enabling switches the methods of queues opened before, and disabling
    switches them back."""
    registry = CollectorRegistry()
    with vsqs.Queue(tmp_path / "q", durable=False) as q:
        q.send_batch([b"1", b"2", b"3"])
        assert not any(hasattr(getattr(LocalStore, m), "__wrapped__") for m in METERED)
        vsqs.metrics.enable_prometheus(registry)
        try:
            assert all(hasattr(getattr(LocalStore, m), "__wrapped__") for m in METERED)
            message = q.receive()
            assert message is not None
            message.delete()
        finally:
            vsqs.metrics.disable()
        assert not any(hasattr(getattr(LocalStore, m), "__wrapped__") for m in METERED)
        got = q.receive_batch(10)
        assert len(got) == 2
        q.delete_batch(got)
        assert requests(registry, q.url, "read") == 1
        assert requests(registry, q.url, "delete") == 1


def test_a_plain_lifecycle_reports_every_event_to_an_observer(
    tmp_path: Path, observing: None
) -> None:
    """With an observer installed the short paths still report: a send, a
    receive and an ack each report once (as the metrics tests count them)."""
    seen: list[str] = []

    class Recording(Observing):
        def sent(self, url: str, operation: str, count: int, started: float) -> None:
            seen.append(f"sent {operation} {count}")

        def received(self, url: str, count: int, started: float) -> None:
            seen.append(f"received {count}")

        def deleted(self, url: str, receipt: str, now_ms: meter.NowMs) -> None:
            seen.append("deleted")

        def operation(self, url: str, name: str, started: float) -> None:
            seen.append(name)

    meter.install(Recording())
    with vsqs.Queue(tmp_path / "q", durable=False) as q:
        q.send(b"x")
        message = q.receive()
        assert message is not None and message.body == b"x"
        message.delete()
    assert seen == ["sent send 1", "received 1", "deleted", "delete"]
