"""Groups, deduplication ids and attributes (issue 29) through the ``vsqs``
Spark source: reads and streams show them beside the body that was sent,
the writer takes them from columns, and ``consume`` settles a group's
messages in send order.

Few tests, on the session's one local SparkSession
(``tests/support/spark_session.py``); the writer's commit is also driven
directly, as the driver runs it, where that needs no JVM.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _envelope
from vsqs import _names as names

pytest.importorskip("pyspark", reason="the spark extra is part of .[test]")

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import (
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

import vsqs.spark
from vsqs.spark._options import WRITE, Options
from vsqs.spark._write import QueueWriter

from .support.spark_streams import listing, run_stream

#: What each row of these tests shows besides its id: body, group, attributes.
Seen = tuple[bytes, str | None, dict[str, str]]


def seen(rows: list[Any]) -> dict[str, Seen]:
    return {r.id: (bytes(r.body), r.group, dict(r.attributes)) for r in rows}


def writer(queue: Path, *columns: str) -> QueueWriter:
    """The driver's writer of one job whose rows have ``body`` and ``columns``."""
    types = {"body": StringType(), "group": StringType(), "dedup_id": StringType()}
    fields = [StructField(c, types[c]) for c in ("body", *columns)]
    return QueueWriter(Options.parse({"path": str(queue)}, WRITE), StructType(fields))


def test_reads_and_streams_show_the_sent_body_its_group_and_attributes(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Format 3 stores a message with a group or attributes as an envelope:
    the ``body`` column must be what was sent, never the envelope."""
    queue = tmp_path / "q"
    with vsqs.Queue(queue) as q:
        sent = [
            q.send(b"plain"),
            *q.send_batch(
                [
                    vsqs.Outgoing(b"k first", group="k", attributes={"trace": "t-1"}),
                    vsqs.Outgoing(b"k second", group="k"),
                    vsqs.Outgoing(b"tagged", attributes={"type": "json", "v": "2"}),
                ]
            ),
        ]
    expected: dict[str, Seen] = dict(
        zip(
            sent,
            [
                (b"plain", None, {}),
                (b"k first", "k", {"trace": "t-1"}),
                (b"k second", "k", {}),
                (b"tagged", None, {"type": "json", "v": "2"}),
            ],
            strict=True,
        )
    )
    assert names.group_of(sent[1]) == _envelope.group_token("k") != names.group_of(sent[0])

    df = spark.read.format("vsqs").load(str(queue))
    assert df.columns[-2:] == ["group", "attributes"]
    assert dict(df.dtypes)["attributes"] == "map<string,string>"
    assert seen(df.collect()) == expected
    assert df.filter(df.group == "k").count() == 2
    assert df.filter(df.attributes["type"] == "json").select("id").collect() == [Row(id=sent[3])]
    names_only = spark.read.format("vsqs").option("includeBody", "false").load(str(queue))
    assert "group" not in names_only.columns and "attributes" not in names_only.columns

    out = tmp_path / "out"
    run_stream(spark, queue, out, tmp_path / "checkpoint")
    assert seen(spark.read.parquet(str(out)).collect()) == expected


def test_a_dataframe_writes_groups_dedup_ids_and_attributes_from_its_columns(
    spark: SparkSession, tmp_path: Path
) -> None:
    queue = str(tmp_path / "q")
    schema = "body string, group string, dedup_id string, attributes map<string,string>"
    rows = [
        ("o1 created", "order-1", "evt-1", {"type": "created"}),
        ("o2 created", "order-2", None, None),
        ("o1 paid", "order-1", "evt-2", None),
        ("heartbeat", None, "evt-3", {}),
        ("heartbeat again", None, "evt-3", None),  # a duplicate within the job
        ("o1 shipped", "order-1", None, {"type": "shipped"}),
    ]
    df = spark.createDataFrame(rows, schema).coalesce(1)  # one task: its rows keep their order
    df.write.format("vsqs").mode("append").save(queue)

    with vsqs.Queue(queue) as q:
        peeked = q.peek(10)
        assert [(bytes(m.body), m.group, m.attributes) for m in peeked] == [
            (b"o1 created", "order-1", {"type": "created"}),
            (b"o2 created", "order-2", {}),
            (b"o1 paid", "order-1", {}),
            (b"heartbeat", None, {}),
            (b"o1 shipped", "order-1", {"type": "shipped"}),
        ]
        by_body = {bytes(m.body): m.id for m in peeked}
        # The ids carry the tags a listing tells groups and envelopes by.
        assert names.group_of(by_body[b"o1 paid"]) == _envelope.group_token("order-1")
        assert names.tag_of(by_body[b"heartbeat"]) is None
        # The group rule holds for what Spark wrote: one of order-1 at a time.
        head = q.receive(visibility_timeout=600)
        assert head is not None and head.id == by_body[b"o1 created"]
        assert q.receive(group="order-1") is None
        # A send of an id the job recorded creates nothing.
        q.send(b"again", dedup_id="evt-2")
        assert len(q.peek(10)) == 4
        # The same job run again publishes nothing with a recorded id.
        df.write.format("vsqs").mode("append").save(queue)
        assert sorted(bytes(m.body) for m in q.peek(10)) == [
            b"heartbeat",
            b"o1 paid",
            b"o1 shipped",
            b"o1 shipped",
            b"o2 created",
            b"o2 created",
        ]
    assert not [n for n in listing(tmp_path / "q") if n.endswith(names.NEW_SUFFIX)]

    with pytest.raises(PySparkException, match=r"group 'a b' must be 1-128 printable ASCII"):
        spark.createDataFrame([("x", "a b")], "body string, group string").write.format(
            "vsqs"
        ).mode("append").save(queue)


def test_a_retried_task_or_a_job_run_again_publishes_each_dedup_id_once(tmp_path: Path) -> None:
    """The commit records deduplication ids, not the tasks: an attempt whose
    report was lost records nothing, so its retry's rows are published;
    and a job run again after a commit (cut short or not) publishes only
    the rows whose ids were not sent within the window."""
    queue = tmp_path / "q"
    vsqs.Queue(queue).close()

    def rows(numbers: range) -> list[Row]:
        return [Row(body=f"row {i}", dedup_id=f"d{i}") for i in numbers]

    first = writer(queue, "dedup_id")
    first.write(iter(rows(range(5))))  # an attempt whose report never reached the driver
    first.commit([first.write(iter(rows(range(5))))])  # its retry
    again = writer(queue, "dedup_id")
    again.commit([again.write(iter(rows(range(3)))), again.write(iter(rows(range(3, 10))))])
    with vsqs.Queue(queue) as q:
        published = {bytes(m.body): m.id for m in q.peek(100)}
        assert sorted(published) == sorted(f"row {i}".encode() for i in range(10))
        # The records name the messages (staged less than 30 s before their commit).
        assert q.send(b"late", dedup_id="d7") == published[b"row 7"]
    assert not [n for n in listing(queue) if n.endswith(names.NEW_SUFFIX)]


def test_a_lost_tasks_staging_of_grouped_rows_is_removed_by_the_commit(tmp_path: Path) -> None:
    queue = tmp_path / "q"
    vsqs.Queue(queue).close()
    job = writer(queue, "group")
    job.write(iter([Row(body="lost", group="g")]))  # a lost attempt: never reported
    job.commit([job.write(iter([Row(body="kept", group="g")]))])
    assert not [n for n in listing(queue) if n.endswith(names.NEW_SUFFIX)]


def test_consume_releases_the_rows_behind_a_failed_one_of_its_group(
    spark: SparkSession, tmp_path: Path
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    k0, k1, k2 = q.send_batch(
        [b"k0", b"k1", b"k2"], group="k", attributes={"src": "test"}, bundle=False
    )
    j0 = q.send(b"j0", group="j")
    plain = q.send(b"plain")
    batches: list[dict[str, Seen]] = []

    def process(df: DataFrame, batch_id: int) -> list[str]:
        batches.append(seen(df.collect()))
        return [k1]

    start_ms = int(time.time() * 1000)
    report = vsqs.spark.consume(
        spark, str(tmp_path / "q"), process, retry_delay=100, jitter=lambda: 0.5, max_batches=1
    )
    end_ms = int(time.time() * 1000) + 1
    assert report == vsqs.spark.ConsumeReport(batches=1, messages=5, expired=0, failed=1)
    assert batches == [
        {
            k0: (b"k0", "k", {"src": "test"}),
            k1: (b"k1", "k", {"src": "test"}),
            k2: (b"k2", "k", {"src": "test"}),
            j0: (b"j0", "j", {}),
            plain: (b"plain", None, {}),
        }
    ]
    left = {p.id: p for p in map(names.parse, listing(tmp_path / "q")) if p is not None}
    assert sorted(left) == [k1, k2], "k2 was deleted before k1, which comes again first"
    expiry = left[k1].expiry_ms
    assert expiry is not None and start_ms + 75_000 <= expiry <= end_ms + 75_000
    assert left[k2].receive_count == 1 and (left[k2].expiry_ms or 0) <= end_ms
    assert q.receive(group="k") is None, "k2 overtook its group's failed head"
    q.close()


def test_the_writer_checks_its_columns_and_rows_against_the_queue(tmp_path: Path) -> None:
    """Without a JVM: the driver's checks of the schema, and a task's of its
    rows against the queue's settings (``content_dedup``, format 2)."""
    vsqs.Queue(tmp_path / "q").close()
    options = Options.parse({"path": str(tmp_path / "q")}, WRITE)
    fields = [StructField("body", StringType()), StructField("Dedup_Id", IntegerType())]
    with pytest.raises(vsqs.InvalidArgument, match=r"column 'Dedup_Id' .* must be string, not int"):
        QueueWriter(options, StructType(fields))
    with pytest.raises(vsqs.InvalidArgument, match=r"column 'body' .* binary or string, not int"):
        QueueWriter(options, StructType([StructField("body", IntegerType())]))
    loose = MapType(StringType(), StringType(), valueContainsNull=True)
    fields = [StructField("body", StringType()), StructField("attributes", loose)]
    assert QueueWriter(options, StructType(fields)).meta == {"attributes": "attributes"}

    vsqs.Queue(tmp_path / "by-content", content_dedup=True).close()
    job = writer(tmp_path / "by-content")
    job.commit([job.write(iter([Row(body="same"), Row(body="other"), Row(body="same")]))])
    with vsqs.Queue(tmp_path / "by-content") as q:
        assert [bytes(m.body) for m in q.peek(10)] == [b"same", b"other"]

    old = tmp_path / "format-2"
    vsqs.Queue(old).close()
    config = json.loads((old / names.CONFIG_NAME).read_text())
    (old / names.CONFIG_NAME).write_text(json.dumps(config | {"format": 2}))
    job = writer(old, "group")
    with pytest.raises(vsqs.QueueConfigError, match="this queue has format 2"):
        job.write(iter([Row(body="grouped", group="g")]))
    assert listing(old) == [names.CONFIG_NAME]
    job.commit([job.write(iter([Row(body="plain", group=None)]))])
    with vsqs.Queue(old) as q:
        assert [bytes(m.body) for m in q.peek(10)] == [b"plain"]
