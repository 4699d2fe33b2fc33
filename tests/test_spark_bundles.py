"""The ``vsqs`` data source and bundles (format 4, issue 32): a read and a
stream give one row per message of a part, under the message's own id, in
the state of the part that holds it now; the writer stages each task's rows
in bundles.

On the session's real local SparkSession (``tests/support/spark_session.py``)
and on real queue directories; receives split parts for real.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names

pyspark = pytest.importorskip("pyspark", reason="the spark extra is part of .[test]")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import vsqs.spark  # noqa: E402
from vsqs.spark import _read  # noqa: E402
from vsqs.spark._options import Options  # noqa: E402
from vsqs.spark._read import NamesPartition, read_partition  # noqa: E402
from vsqs.spark._source import SnapshotReader  # noqa: E402
from vsqs.spark._stream import ready_keys  # noqa: E402

from .support.spark_streams import listing  # noqa: E402


def objects(queue: Path) -> list[str]:
    """The names of the queue's messages' objects (messages alone or parts)."""
    return [n for n in listing(queue) if names.parse(n) is not None]


def sent_bundles(queue: Path) -> tuple[vsqs.Queue, list[str], list[str]]:
    """A queue with 150 plain messages (two parts: 128 and 22) and three of
    group ``k`` with attributes (a third part); their ids in send order."""
    q = vsqs.Queue(queue)
    plain = q.send_batch([b"m%d" % i for i in range(150)])
    grouped = q.send_batch([b"k0", b"k1", b"k2"], group="k", attributes={"t": "x"})
    assert len(objects(queue)) == 3
    return q, plain, grouped


def test_a_read_of_bundles_is_one_row_per_message_under_its_own_id(
    spark: SparkSession, tmp_path: Path
) -> None:
    queue = tmp_path / "q"
    q, plain, grouped = sent_bundles(queue)
    rows = spark.read.format("vsqs").option("numPartitions", "3").load(str(queue)).collect()
    assert [r.id for r in rows] == plain + grouped  # FIFO: parts in order, messages in place order
    assert [bytes(r.body) for r in rows] == [b"m%d" % i for i in range(150)] + [b"k0", b"k1", b"k2"]
    assert {(r.group, tuple(r.attributes.items())) for r in rows[150:]} == {("k", (("t", "x"),))}
    assert {(r.group, len(r.attributes)) for r in rows[:150]} == {(None, 0)}
    assert rows[7].sent_at.timestamp() * 1000 == names.id_ms(plain[7])
    assert {(r.state, r.receive_count) for r in rows} == {("ready", 0)}
    ids_only = spark.read.format("vsqs").option("includeBody", "false").load(str(queue))
    assert [r.id for r in ids_only.collect()] == plain + grouped
    q.close()


def test_a_part_partly_received_shows_each_message_once_in_its_state(
    spark: SparkSession, tmp_path: Path
) -> None:
    queue = tmp_path / "q"
    q, plain, grouped = sent_bundles(queue)
    taken = q.receive_batch(10, visibility_timeout=600)  # splits the first part
    assert [m.id for m in taken] == plain[:10] and len(objects(queue)) == 4
    taken[0].delete()  # renames the held part: 9 held
    df = spark.read.format("vsqs").option("states", "all").load(str(queue))
    rows = {r.id: r for r in df.collect()}
    assert df.count() == len(rows) == 152
    held = {i for i, r in rows.items() if r.state == "in_flight"}
    assert held == set(plain[1:10]) and {rows[i].receive_count for i in held} == {1}
    assert {rows[i].state for i in plain[10:] + grouped} == {"ready"}
    [held_part] = [p for n in objects(queue) if (p := names.parse(n)) and p.receive_count]
    assert held_part.expiry_ms is not None
    assert rows[plain[3]].visible_at.timestamp() * 1000 == held_part.expiry_ms
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        pushed = (
            spark.read.format("vsqs").option("states", "all").option("filterPushdown", "true")
        ).load(str(queue))
        assert pushed.filter(F.col("state") == "in_flight").count() == 9
        assert [r.body for r in pushed.filter(F.col("id") == plain[40]).collect()] == [b"m40"]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    q.close()


def test_messages_of_a_part_split_or_acked_after_the_listing_are_read_once(
    tmp_path: Path,
) -> None:
    """The executor side on its own: a part listed on the driver that a
    receive split and an ack renamed before the task read it: each message
    left is read once, under the part that holds it now; the acked one is
    skipped."""
    queue = tmp_path / "q"
    q = vsqs.Queue(queue)
    sent = q.send_batch([b"a%d" % i for i in range(20)])
    planned = NamesPartition(objects(queue), int(time.time() * 1000))
    taken = q.receive_batch(5, visibility_timeout=600)
    taken[2].delete()
    for include_body in ("true", "false"):
        options = Options.parse({"path": str(queue), "includeBody": include_body})
        rows = [r for batch in read_partition(options, planned) for r in batch.to_pylist()]
        assert [r["id"] for r in rows] == sent[:2] + sent[3:]
        assert [r["state"] for r in rows] == ["in_flight"] * 4 + ["ready"] * 15
    assert rows[0].keys() == {"id", "sent_at", "state", "receive_count", "visible_at"}
    q.close()


def test_partitions_hold_about_as_many_messages_and_never_cut_a_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_read, "NAMES_PER_PARTITION", 100)
    queue = tmp_path / "q"
    with vsqs.Queue(queue) as q:
        for _ in range(3):
            q.send_batch([b"b"] * 100)
        q.send_batch([b"a"] * 50, bundle=False)
    planned = SnapshotReader(Options.parse({"path": str(queue)})).partitions()
    assert [type(p) for p in planned] == [NamesPartition] * 4  # ceil(350 / 100)
    counts = [
        sum(names.message_count(names.id_of(n)) for n in p.names)
        for p in planned
        if isinstance(p, NamesPartition)
    ]
    assert counts == [100, 100, 100, 50]


def test_a_stream_over_bundles_offers_each_message_once_across_splits(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Offsets are per message: a receive that splits the part a micro-batch
    ended inside leaves the rest under new names of the same bundle, which
    the next micro-batches offer from where the last one stopped; a split
    after everything was offered offers nothing again."""
    queue = tmp_path / "q"
    q = vsqs.Queue(queue)
    sent = q.send_batch([b"%d" % i for i in range(100)])
    batches: list[list[str]] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        batches.append([r.id for r in df.orderBy("id").collect()])
        if batch_id == 0:
            q.receive_batch(40, visibility_timeout=600)  # held 0-39, the rest 40-99
            assert len(objects(queue)) == 2

    def run() -> None:
        query = (
            spark.readStream.format("vsqs")
            .option("settleSeconds", "0")
            .option("maxMessagesPerBatch", "30")
            .load(str(queue))
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert batches == [sent[0:30], sent[30:60], sent[60:90], sent[90:100]]
    q.receive_batch(10, visibility_timeout=600)  # splits the rest, all of it offered
    later = q.send_batch([b"later %d" % i for i in range(3)])
    batches.clear()
    run()
    assert batches == [later]
    q.close()


def test_a_delayed_bundle_is_keyed_by_its_delay_until_a_receive_splits_it() -> None:
    """The stream's keys: a bundle sent with a delay became ready at its
    expiry; the part a receive leaves of it (receive count 0, without the
    bundle's first message) is keyed by the send time, as the received part
    is (docs/spark.md: such messages are not offered again if the stream
    passed that time)."""
    core = names.ids.next_id(int(time.time() * 1000))
    sent_ms, due_ms = names.id_ms(core), names.id_ms(core) + 60_000
    delayed = names.parse(names.invisible_name(names.bundle_id(core, 0b1111, None), due_ms, 0, 1))
    rest = names.parse(names.invisible_name(names.bundle_id(core, 0b1100, None), due_ms, 0, 2))
    assert delayed is not None and rest is not None
    assert ready_keys(delayed) == [(due_ms, core, p) for p in range(4)]
    assert ready_keys(rest) == [(sent_ms, core, 2), (sent_ms, core, 3)]


def test_a_write_stages_each_tasks_rows_in_bundles(spark: SparkSession, tmp_path: Path) -> None:
    rows = spark.range(300).select(F.format_string("row %d", F.col("id")).alias("body"))
    rows.repartition(2).write.format("vsqs").mode("append").save(str(tmp_path / "q"))
    parts = objects(tmp_path / "q")
    assert all(names.is_bundle(names.id_of(n)) for n in parts)
    assert len(parts) == 2 * math.ceil(150 / names.MAX_BUNDLE)  # ~150 rows a task
    with vsqs.Queue(tmp_path / "q") as q:
        got: list[bytes] = []
        while batch := q.receive_batch(100, visibility_timeout=600):
            got.extend(bytes(m.body) for m in batch)
            q.delete_batch(batch)
        assert sorted(got) == sorted(b"row %d" % i for i in range(300))
        assert q.stats().ready == q.stats().in_flight == 0
    assert not [n for n in listing(tmp_path / "q") if n.endswith(names.NEW_SUFFIX)]

    rows.coalesce(1).write.format("vsqs").option("bundle", "false").mode("append").save(
        str(tmp_path / "alone")
    )
    alone = objects(tmp_path / "alone")
    assert len(alone) == 300 and not any(names.is_bundle(names.id_of(n)) for n in alone)
    with vsqs.Queue(tmp_path / "alone") as q:
        assert [m.body for m in q.peek(300)] == [b"row %d" % i for i in range(300)]


def test_consume_hands_process_the_messages_of_bundles(spark: SparkSession, tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q")
    sent = q.send_batch([b"a", b"b", b"c"])
    seen: list[str] = []

    def process(df: DataFrame, batch_id: int) -> None:
        seen.extend(r.id for r in df.orderBy("id").collect())

    report = vsqs.spark.consume(spark, str(tmp_path / "q"), process, max_messages=10)
    assert seen == sent and report.messages == 3 and q.stats().ready == 0
    q.close()
