"""The kombu transport ``vsqs`` in one process: kombu connections on real
directories (docs/celery.md). Celery workers: tests/test_kombu_celery.py."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from hypothesis import given
from hypothesis import strategies as st
from kombu import Connection, Exchange, Queue

import vsqs
from vsqs._config import MAX_SECONDS
from vsqs.kombu import Transport, Unsupported, celery_name, vsqs_name
from vsqs.kombu._held import Held
from vsqs.testing import FakeClock

from .support.waiting import wait_until

PIDBOX = "celery@host.example.com.celery.pidbox"


# ------------------------------------------------------------------ names
@pytest.mark.parametrize(
    ("celery", "escaped"),
    [
        ("celery", "celery"),
        ("tasks.high-1", "tasks.high-1"),
        ("x_y", "x_x_5fy"),
        ("a..b", "x_a_2e_2eb"),
        ("_private", "x__5fprivate"),
        ("vsqs.json", "x_vsqs_2ejson"),
        (PIDBOX, "x_celery_40host_2eexample_2ecom_2ecelery_2epidbox"),
        ("é", "x__c3_a9"),
    ],
)
def test_a_celery_queue_name_maps_to_a_vsqs_name_by_the_documented_rule(
    celery: str, escaped: str
) -> None:
    assert vsqs_name(celery) == escaped
    assert celery_name(escaped) == celery


def escaped_length(name: str) -> int:
    kept = sum(1 for c in name if c.isascii() and (c.isalnum() or c == "-"))
    return 2 + kept + 3 * (len(name.encode()) - kept)


@given(st.text(max_size=60))
def test_the_name_rule_is_reversible_and_gives_names_vsqs_accepts(name: str) -> None:
    try:
        mapped = vsqs_name(name)
    except vsqs.InvalidQueueName as exc:  # only an escaped name can be too long
        assert "too long" in str(exc)
        assert escaped_length(name) > 128
        return
    assert vsqs._names.validate_queue_name(mapped) == mapped
    assert celery_name(mapped) == name


def test_a_name_too_long_once_escaped_is_refused_and_foreign_escapes_are_not_names() -> None:
    with pytest.raises(vsqs.InvalidQueueName, match="too long"):
        vsqs_name("@" * 50)
    assert vsqs_name("a" * 128) == "a" * 128
    for bad in ("x_abc", "x__zz", "x__ff"):  # not canonical, not hex, not UTF-8
        with pytest.raises(vsqs.InvalidQueueName):
            celery_name(bad)


# ------------------------------------------------------------ connections
def url(root: Path) -> str:
    return f"vsqs+file://{root}"


def vq(root: Path, name: str = "jobs") -> vsqs.Queue:
    return vsqs.Queue(f"{root}/{vsqs_name(name)}")


def drain_one(conn: Connection, name: str, **options: Any) -> Any:
    """One message of queue ``name`` through a kombu consumer (not acked)."""
    got: list[Any] = []
    with conn.Consumer(Queue(name), callbacks=[lambda body, m: got.append(m)], **options):
        conn.drain_events(timeout=10)
    assert len(got) == 1
    return got[0]


def test_publish_consume_ack_round_trip_on_a_directory(tmp_path: Path) -> None:
    with Connection(url(tmp_path)) as conn:
        conn.Producer().publish({"n": 1}, routing_key=PIDBOX, declare=[Queue(PIDBOX)])
        assert vq(tmp_path, PIDBOX).stats().ready == 1
        assert (tmp_path / vsqs_name(PIDBOX)).is_dir()
        message = drain_one(conn, PIDBOX)
        assert message.payload == {"n": 1}
        assert vq(tmp_path, PIDBOX).stats().in_flight == 1
        message.ack()
    stats = vq(tmp_path, PIDBOX).stats()
    assert (stats.ready, stats.in_flight, stats.delayed) == (0, 0, 0)


def test_reject_with_requeue_releases_and_without_deletes(tmp_path: Path) -> None:
    with Connection(url(tmp_path)) as conn:
        conn.Producer().publish("once", routing_key="jobs", declare=[Queue("jobs")])
        first = drain_one(conn, "jobs")
        first.reject(requeue=True)
        assert vq(tmp_path).stats().ready == 1  # visible again at once
        again = drain_one(conn, "jobs")
        assert again.payload == "once"
        assert again.delivery_tag != first.delivery_tag  # one tag per delivery
        again.reject(requeue=False)
    stats = vq(tmp_path).stats()
    assert (stats.ready, stats.in_flight) == (0, 0)


def test_closing_the_connection_releases_what_it_held_unacked(tmp_path: Path) -> None:
    with Connection(url(tmp_path)) as conn:
        conn.Producer().publish("held", routing_key="jobs", declare=[Queue("jobs")])
        drain_one(conn, "jobs")
        assert vq(tmp_path).stats().in_flight == 1
        assert any(t.name == "vsqs-heartbeat" for t in threading.enumerate())
    assert vq(tmp_path).stats().ready == 1
    assert not any(t.name == "vsqs-heartbeat" for t in threading.enumerate())


def test_the_transport_s_visibility_timeout_is_that_of_each_receive(tmp_path: Path) -> None:
    options = {"visibility_timeout": 120}
    with Connection(url(tmp_path), transport_options=options) as conn:
        conn.Producer().publish("x", routing_key="jobs", declare=[Queue("jobs")])
        drain_one(conn, "jobs")
        expires = vq(tmp_path).stats().in_flight_expires_in
        assert expires is not None and 100 < expires <= 121  # stats' clock reads in ms


def test_a_held_message_is_extended_before_it_expires(tmp_path: Path) -> None:
    """The holder's heartbeat (every third of a 0.3 s timeout, on a real
    thread) extends it on the queue's clock: each time it did, the clock
    moves on by two thirds of the timeout, three times in all, past two
    timeouts; nobody else receives it meanwhile."""
    clock = FakeClock()
    queue = vsqs.Queue(str(tmp_path / "jobs"), clock=clock)
    other = vsqs.Queue(str(tmp_path / "jobs"), clock=clock)
    queue.send(b"long task")
    held = Held(0.3)
    message = queue.receive(visibility_timeout=0.3)
    assert message is not None
    held.add("tag", queue, message)
    try:
        for _ in range(3):
            receipt = message.receipt
            wait_until(lambda old=receipt: message.receipt != old, 60, "the heartbeat's extend")
            clock.advance(0.2)
            assert other.receive() is None
    finally:
        held.close()
    assert queue.stats().ready == 1  # closing released it: visible at once
    clock.advance(1)  # another receiver's listing is renewed within a second
    again = other.receive()
    assert again is not None and again.receive_count == 2


def test_an_eta_becomes_a_delay_in_the_queue(tmp_path: Path) -> None:
    eta = (datetime.now(UTC) + timedelta(seconds=600)).isoformat()
    with Connection(url(tmp_path)) as conn:
        producer = conn.Producer()
        producer.publish("later", routing_key="jobs", declare=[Queue("jobs")], headers={"eta": eta})
        producer.publish("past", routing_key="jobs", headers={"eta": "2001-01-01T00:00:00"})
    stats = vq(tmp_path).stats()
    assert (stats.ready, stats.delayed) == (1, 1)
    assert stats.next_visible_in is not None and 500 < stats.next_visible_in <= 601


def test_an_eta_beyond_the_longest_delay_is_delayed_by_the_longest(tmp_path: Path) -> None:
    eta = (datetime.now(UTC) + timedelta(days=800)).isoformat()
    with Connection(url(tmp_path)) as conn:
        conn.Producer().publish(
            "far", routing_key="jobs", declare=[Queue("jobs")], headers={"eta": eta}
        )
    stats = vq(tmp_path).stats()
    assert stats.delayed == 1
    assert stats.next_visible_in is not None
    assert MAX_SECONDS - 3600 < stats.next_visible_in <= MAX_SECONDS + 1


def task_headers(task_id: str, retries: int, replaced: int = 0) -> dict[str, Any]:
    return {
        "id": task_id,
        "task": "proj.add",
        "retries": retries,
        "replaced_task_nesting": replaced,
    }


def test_a_task_id_and_its_retry_count_are_the_dedup_id(tmp_path: Path) -> None:
    with Connection(url(tmp_path)) as conn:
        producer = conn.Producer()
        for retries in (0, 0, 1, 1, 2):
            producer.publish(
                "t",
                routing_key="jobs",
                declare=[Queue("jobs")],
                headers=task_headers("T1", retries),
            )
        for replaced in (1, 1):  # Task.replace: the same id, one level deeper (before: dropped)
            producer.publish("r", routing_key="jobs", headers=task_headers("T1", 0, replaced))
        producer.publish("no task", routing_key="jobs")  # not a Celery task: no dedup
        producer.publish("no task", routing_key="jobs")
    assert vq(tmp_path).stats().ready == 6


def test_fanout_exchanges_and_remote_control_are_refused(tmp_path: Path) -> None:
    with Connection(url(tmp_path)) as conn:
        with pytest.raises(Unsupported, match="fanout"):
            conn.Producer().publish(
                "x",
                exchange=Exchange("bcast", type="fanout"),
                declare=[Exchange("bcast", "fanout")],
            )
        assert not conn.transport.implements.exchange_type & {"fanout", "topic"}
    app = Celery(broker=url(tmp_path))
    with pytest.raises(Unsupported, match="remote control"):
        app.control.inspect(timeout=0.1).ping()


def test_the_transport_without_the_alias_by_its_dotted_path(tmp_path: Path) -> None:
    with Connection(f"file://{tmp_path}", transport="vsqs.kombu:Transport") as conn:
        conn.Producer().publish("dotted", routing_key="jobs", declare=[Queue("jobs")])
        assert isinstance(conn.transport, Transport)
    assert vq(tmp_path).stats().ready == 1
    with pytest.raises(ValueError, match="Invalid transport scheme"):  # kombu refuses it in a URL
        Connection(f"vsqs.kombu:Transport+file://{tmp_path}")


def test_options_queue_settings_and_a_missing_root(tmp_path: Path) -> None:
    options = {"max_receives": 3, "dead_letter": str(tmp_path / "dead")}
    with Connection(url(tmp_path), transport_options=options) as conn:
        conn.Producer().publish("x", routing_key="jobs", declare=[Queue("jobs")])
    assert vq(tmp_path).config.max_receives == 3
    with pytest.raises(vsqs.InvalidArgument, match="queue root"):
        Connection("vsqs://").connect()
    with pytest.raises(vsqs.InvalidArgument, match="visibility_timeout"):
        Connection(url(tmp_path), transport_options={"visibility_timeout": -1}).connect()


def test_memory_roots_and_polling_without_wait() -> None:
    with Connection("vsqs+memory://kombu-test", transport_options={"wait": 0}) as conn:
        assert conn.transport.polling_interval == 1.0
        conn.Producer().publish("m", routing_key="jobs", declare=[Queue("jobs")])
        start = time.monotonic()
        drain_one(conn, "jobs").ack()
        assert conn.transport.queue("jobs").url.endswith("kombu-test/jobs")
        assert time.monotonic() - start < 60


def test_prefetch_is_what_qos_asks_and_a_full_channel_waits_for_an_ack(tmp_path: Path) -> None:
    with Connection(url(tmp_path)) as conn:
        producer = conn.Producer()
        for i in range(5):
            producer.publish(i, routing_key="jobs", declare=[Queue("jobs")])
        got: list[Any] = []
        with conn.Consumer(Queue("jobs"), callbacks=[lambda b, m: got.append(m)], prefetch_count=2):
            for _ in range(2):
                conn.drain_events(timeout=10)
            channel = conn.default_channel
            calls = []
            drain = channel.drain_events
            channel.drain_events = lambda **kw: calls.append(1) or drain(**kw)
            with pytest.raises(TimeoutError):  # socket.timeout: both slots are taken
                conn.drain_events(timeout=1.5)
            assert len(calls) <= 5  # it waited for an ack; it did not spin
            assert vq(tmp_path).stats().in_flight == 2
            threading.Timer(0.2, got[0].ack).start()  # an ack from another thread
            conn.drain_events(timeout=10)
            assert [m.payload for m in got] == [0, 1, 2]


def test_no_ack_consumers_delete_at_receipt_and_a_bad_eta_is_one_error(tmp_path: Path) -> None:
    with Connection(url(tmp_path)) as conn:
        producer = conn.Producer()
        for i in range(2):
            producer.publish(i, routing_key="jobs", declare=[Queue("jobs")])
        drain_one(conn, "jobs", no_ack=True)  # a consumer without acks
        assert conn.default_channel.basic_get("jobs", no_ack=True).payload == 1
        stats = vq(tmp_path).stats()
        assert (stats.ready, stats.in_flight) == (0, 0)
        with pytest.raises(vsqs.InvalidArgument, match="ISO 8601"):
            producer.publish("x", routing_key="jobs", headers={"eta": "tomorrow"})


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ``os.fsync`` of this process from now on (each still made)."""
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


def test_a_transient_message_is_sent_without_syncing_a_persistent_one_with(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    """kombu's ``delivery_mode`` (Celery's ``task_default_delivery_mode``):
    transient (1) is vsqs's ``durable=False``, persistent (2, the default) a
    durable send."""
    with Connection(url(tmp_path)) as conn:
        producer = conn.Producer()
        producer.publish("warm", routing_key="jobs", declare=[Queue("jobs")])
        sent = {}
        for mode in ("transient", "persistent"):
            fsyncs.clear()
            headers = task_headers(f"task-{mode}", 0)  # a Celery task: with its dedup id
            producer.publish(mode, routing_key="jobs", delivery_mode=mode, headers=headers)
            sent[mode] = len(fsyncs)
        # three creates (the dedup record, the message, its sent mark), each
        # file and the directory after it synced
        assert sent == {"transient": 0, "persistent": 6}
        got = [drain_one(conn, "jobs") for _ in range(3)]
        assert [m.payload for m in got] == ["warm", "transient", "persistent"]
        for message in got:
            message.ack()
    stats = vq(tmp_path).stats()
    assert (stats.ready, stats.in_flight) == (0, 0)


def test_a_consuming_channel_collects_the_dedup_records_of_old_windows(tmp_path: Path) -> None:
    """Each task leaves its dedup id's record and sent mark; a channel that
    polls a queue runs its gc() once per dedup window, in a thread, which
    removes those two windows old and keeps the others."""
    queue = vsqs.Queue(f"{tmp_path}/jobs")
    queue.send(b"t", dedup_id="T1:0:0")
    fresh = sorted(n for n in os.listdir(queue.url) if n.startswith("vsqs-dedup."))
    assert len(fresh) == 2
    old = [n.replace(n.split(".")[2], "1", 1) for n in fresh]  # slot 1: 1970
    for name in old:
        (tmp_path / "jobs" / name).write_bytes((tmp_path / "jobs" / fresh[0]).read_bytes())
    with Connection(url(tmp_path)) as conn:
        drain_one(conn, "jobs").ack()
        wait_until(
            lambda: not set(old) & set(os.listdir(queue.url)), 60, "the old records collected"
        )
        assert sorted(n for n in os.listdir(queue.url) if n.startswith("vsqs-dedup.")) == fresh
    assert not [t for t in threading.enumerate() if t.name == "vsqs-kombu-gc"]  # joined


def test_without_dedup_ids_a_task_id_published_twice_is_two_messages(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    """``dedup_ids=False``: one create (and, persistent, two syncs) a task,
    as on kombu's filesystem and SQS standard transports; a duplicate runs twice."""
    with Connection(url(tmp_path), transport_options={"dedup_ids": False}) as conn:
        producer = conn.Producer()
        producer.publish("warm", routing_key="jobs", declare=[Queue("jobs")])
        fsyncs.clear()
        for _ in range(2):
            producer.publish("t", routing_key="jobs", headers=task_headers("T1", 0))
        assert len(fsyncs) == 2 * 2  # each message and its directory
    assert vq(tmp_path).stats().ready == 3
    assert not [n for n in os.listdir(tmp_path / "jobs") if n.startswith("vsqs-dedup.")]
    with pytest.raises(vsqs.InvalidArgument, match="dedup_ids"):
        Connection(url(tmp_path), transport_options={"dedup_ids": "no"}).connect()
