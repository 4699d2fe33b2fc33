"""The ``vsqs`` Spark data source on a real local SparkSession (local[2]).

Nothing here registers the source by hand: ``format("vsqs")`` must be found
by Spark itself (the installed ``pyspark_vsqs`` module).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _names as names

pyspark = pytest.importorskip("pyspark", reason="the spark extra is part of .[test]")

from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import vsqs.spark  # noqa: E402
from vsqs.spark._options import Options  # noqa: E402
from vsqs.spark._read import NamesPartition, _messages, read_partition  # noqa: E402

from .support.fault_proxy import FaultProxy, Gate  # noqa: E402
from .support.servers import Server  # noqa: E402
from .support.spark_streams import listing, run_stream, streamed  # noqa: E402
from .support.waiting import wait_until  # noqa: E402


def bodies(df: DataFrame) -> list[bytes]:
    return [bytes(row.body) for row in df.orderBy("id").collect()]


# ------------------------------------------------------------------ batch read
def test_a_read_is_a_snapshot_of_the_ready_backlog_and_changes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        sent = q.send_batch([f"m{i}".encode() for i in range(20)])
        held = q.receive(visibility_timeout=600)
        q.send(b"later", delay=600)
    assert held is not None
    before = listing(tmp_path / "q")
    rows = spark.read.format("vsqs").load(str(tmp_path / "q")).orderBy("id").collect()
    assert [r.id for r in rows] == sent[1:]
    assert [bytes(r.body) for r in rows] == [f"m{i}".encode() for i in range(1, 20)]
    assert {r.state for r in rows} == {"ready"} and {r.receive_count for r in rows} == {0}
    assert rows[0].sent_at.timestamp() * 1000 == names.id_ms(sent[1])
    assert listing(tmp_path / "q") == before, "reading changed the queue"


def test_every_state_can_be_read(spark: SparkSession, tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        q.send_batch([b"a", b"b", b"c"])
        held = q.receive(visibility_timeout=600)
        delayed = q.send(b"d", delay=600)
    assert held is not None
    df = spark.read.format("vsqs").option("states", "all").load(str(tmp_path / "q"))
    rows = {r.id: r for r in df.collect()}
    assert sorted(r.state for r in rows.values()) == ["delayed", "in_flight", "ready", "ready"]
    assert rows[held.id].state == "in_flight" and rows[held.id].receive_count == 1
    assert rows[held.id].visible_at == held.visible_at.replace(tzinfo=None)
    assert rows[delayed].state == "delayed"
    only = spark.read.format("vsqs").option("states", "in_flight, delayed")
    assert sorted(r.state for r in only.load(str(tmp_path / "q")).collect()) == [
        "delayed",
        "in_flight",
    ]


def test_partitions_are_contiguous_slices_of_one_listing(
    spark: SparkSession, tmp_path: Path
) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        sent = q.send_batch([b"x"] * 100, bundle=False)
    df = spark.read.format("vsqs").option("numPartitions", "3").load(str(tmp_path / "q"))
    assert df.rdd.getNumPartitions() == 3
    parts = df.select("id", F.spark_partition_id().alias("p")).collect()
    by_partition: dict[int, list[str]] = {}
    for row in parts:
        by_partition.setdefault(row.p, []).append(row.id)
    slices = [sorted(ids) for _, ids in sorted(by_partition.items())]
    assert [i for s in slices for i in s] == sent  # in order, no overlap, nothing missing
    assert spark.read.format("vsqs").load(str(tmp_path / "q")).rdd.getNumPartitions() == 1


def test_a_message_that_moves_or_vanishes_after_the_listing(tmp_path: Path) -> None:
    """The executor side on its own: names listed on the driver that were
    received meanwhile are read under their new name; deleted ones are skipped."""
    with vsqs.Queue(tmp_path / "q") as q:
        sent = q.send_batch([b"a", b"b", b"c"], bundle=False)
        planned = NamesPartition(sorted(sent), int(time.time() * 1000))
        first = q.receive(visibility_timeout=600)
        second = q.receive(visibility_timeout=600)
        assert first is not None and second is not None
        second.delete()
    options = Options.parse({"path": str(tmp_path / "q")})
    rows = [r for batch in read_partition(options, planned) for r in batch.to_pylist()]
    assert [(r["id"], r["body"], r["receive_count"]) for r in rows] == [
        (sent[0], b"a", 1),
        (sent[2], b"c", 0),
    ]
    assert [r["state"] for r in rows] == ["in_flight", "ready"]


def test_a_message_that_moves_again_after_the_new_listing_is_still_read(tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        sent = q.send_batch([b"a", b"b"], bundle=False)
        store = vsqs.LocalStore(str(tmp_path / "q"))
        store.ensure(create=False)
        reading = _messages(store, NamesPartition(sorted(sent), 0), bodies=True)
        assert q.receive(visibility_timeout=600) is not None  # a moves: the read lists again
        found = next(reading)
        assert (found.id, found.data, found.name.receive_count) == (sent[0], b"a", 1)
        assert q.receive(visibility_timeout=600) is not None  # b moves after that listing
        found = next(reading)
        assert (found.id, found.data, found.name.receive_count) == (sent[1], b"b", 1)
        assert next(reading, None) is None


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("numPartitions", "0", "numPartitions must be a positive integer"),
        ("states", "done", "option states takes"),
        ("storageOptions", "[1]", "must be a JSON object"),
    ],
)
def test_bad_options_get_one_clear_error(
    spark: SparkSession, tmp_path: Path, option: str, value: str, message: str
) -> None:
    vsqs.Queue(tmp_path / "q").close()
    with pytest.raises(PySparkException, match=message):
        spark.read.format("vsqs").option(option, value).load(str(tmp_path / "q")).collect()


def test_a_missing_queue_and_a_memory_queue_are_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(PySparkException, match=r"no queue at"):
        spark.read.format("vsqs").load(str(tmp_path / "absent")).collect()
    assert not (tmp_path / "absent").exists()
    with pytest.raises(PySparkException, match="lives in one process"):
        spark.read.format("vsqs").load("memory://b/q").collect()


def test_executors_read_an_s3_queue_through_fsspec(spark: SparkSession, s3_server: Server) -> None:
    url = s3_server.url()
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        sent = q.send_batch([f"s3-{i}".encode() for i in range(30)])
    options: dict[str, Any] = dict(s3_server.storage_options)
    reader = (
        spark.read.format("vsqs")
        .option("fs.key", options.pop("key"))
        .option("fs.secret", options.pop("secret"))
        .option("storageOptions", json.dumps(options))
        .option("numPartitions", "2")
    )
    rows = reader.load(url).orderBy("id").collect()
    assert [r.id for r in rows] == sent
    assert [bytes(r.body) for r in rows] == [f"s3-{i}".encode() for i in range(30)]


def test_a_stream_restarts_from_its_checkpoint_without_gaps_or_repeats(
    spark: SparkSession, tmp_path: Path
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    first = q.send_batch([b"1", b"2", b"3", b"4", b"5"])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert run_stream(spark, tmp_path / "q", out, checkpoint, maxMessagesPerBatch="2") == [2, 2, 1]
    assert sorted(streamed(spark, out)) == first
    second = q.send_batch([b"6", b"7"])
    q.receive(visibility_timeout=600)  # a consumer's claim does not hide it from the tail
    run_stream(spark, tmp_path / "q", out, checkpoint)
    assert sorted(streamed(spark, out)) == first + second
    stats = q.stats()
    assert (stats.ready, stats.in_flight) == (6, 1), "the stream changed the queue"


def test_a_late_landing_message_is_not_skipped(spark: SparkSession, tmp_path: Path) -> None:
    """A slow producer took its id, then others sent; its ``.new`` holds the
    stream back until it lands, so the offset never passes it."""
    q = vsqs.Queue(tmp_path / "q")
    store = vsqs.LocalStore(str(tmp_path / "q"))
    store.ensure(create=False)
    slow_id = names.ids.next_id(int(time.time() * 1000))
    store.write_new(names.new_name(slow_id), b"slow", fsync=False)
    before = q.send(b"before-not")  # a newer id than the slow one
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_stream(spark, tmp_path / "q", out, checkpoint)
    assert streamed(spark, out) == [], "the offset passed a send under way"
    store.rename(names.new_name(slow_id), slow_id)
    run_stream(spark, tmp_path / "q", out, checkpoint)
    assert sorted(streamed(spark, out)) == sorted([slow_id, before])


def test_a_delayed_message_is_offered_when_its_delay_ends(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Whatever the machine's speed: a first run that ended before the delay did
    must leave the delayed message out; a slower one may take it."""
    delay = 3.0
    q = vsqs.Queue(tmp_path / "q")
    later = q.send(b"later", delay=delay)
    now = q.send(b"now")  # a newer id, offered first
    due = names.id_ms(later) / 1000 + delay
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_stream(spark, tmp_path / "q", out, checkpoint)
    first = streamed(spark, out)
    assert now in first and set(first) <= {now, later}
    if time.time() < due:  # the run, its listing included, ended before the delay did
        assert first == [now], "a delayed message was offered before its delay ended"
    time.sleep(max(0.0, due + 0.1 - time.time()))
    run_stream(spark, tmp_path / "q", out, checkpoint)
    assert sorted(streamed(spark, out)) == sorted([now, later])


def test_the_settle_window_holds_back_fresh_messages(spark: SparkSession, tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q")
    q.send(b"fresh")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_stream(spark, tmp_path / "q", out, checkpoint, settleSeconds="60")
    assert streamed(spark, out) == []


def test_starting_offsets_latest_skips_the_backlog(spark: SparkSession, tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q")
    q.send_batch([b"old"] * 3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_stream(spark, tmp_path / "q", out, checkpoint, startingOffsets="latest")
    new = q.send(b"new")
    run_stream(spark, tmp_path / "q", out, checkpoint, startingOffsets="latest")
    assert streamed(spark, out) == [new]


# -------------------------------------------------------------- consuming
def test_consume_deletes_only_after_the_sink_succeeded(spark: SparkSession, tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q")
    sent = q.send_batch([f"job {i}".encode() for i in range(25)])
    out = tmp_path / "out"

    def failing_sink(df: DataFrame, batch_id: int) -> None:
        df.write.mode("append").parquet(str(out / "failed"))
        raise RuntimeError("the sink failed after writing part of its output")

    with pytest.raises(RuntimeError, match="sink failed"):
        vsqs.spark.consume(
            spark, str(tmp_path / "q"), failing_sink, max_messages=10, retry_delay=0.01
        )
    # Released after a backoff of at most 0.01 s (not held for the visibility timeout).
    wait_until(lambda: q.stats().ready == 25, 60, "a failed batch to be released")

    seen: list[int] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        assert q.stats().in_flight == df.count()  # claimed, not yet deleted
        df.write.mode("append").parquet(str(out / "ok"))
        seen.append(batch_id)

    report = vsqs.spark.consume(spark, str(tmp_path / "q"), sink, max_messages=10)
    assert (report.batches, report.messages, report.expired) == (3, 25, 0) and seen == [0, 1, 2]
    assert sorted(streamed(spark, out / "ok")) == sent
    assert q.stats().ready == q.stats().in_flight == 0


def test_a_failed_batch_is_released_after_each_messages_backoff(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The delay of ``Queue.consume`` by receive count: 3/4 of 100 s doubled per receive."""
    q = vsqs.Queue(tmp_path / "q")
    once, fresh = q.send_batch([b"received once before", b"fresh"], bundle=False)
    before = q.receive()
    assert before is not None and before.id == once
    before.release()

    def failing_sink(df: DataFrame, batch_id: int) -> None:
        raise RuntimeError("the sink is down")

    start_ms = int(time.time() * 1000)
    with pytest.raises(RuntimeError, match="sink is down"):
        vsqs.spark.consume(
            spark,
            str(tmp_path / "q"),
            failing_sink,
            retry_delay=100,
            max_retry_delay=1000,
            jitter=lambda: 0.5,
        )
    end_ms = int(time.time() * 1000) + 1
    held = {p.id: p for p in map(names.parse, listing(tmp_path / "q")) if p is not None}
    assert {i: p.receive_count for i, p in held.items()} == {once: 2, fresh: 1}
    for message_id, delay_ms in [(once, 150_000), (fresh, 75_000)]:
        expiry = held[message_id].expiry_ms
        assert expiry is not None and start_ms + delay_ms <= expiry <= end_ms + delay_ms


def test_consume_counts_receipts_that_expired_during_a_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    q.send_batch([b"a", b"b", b"c"])

    taken: list[vsqs.Message] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        # A visibility timeout of 0 has run out already (and has no heartbeat):
        # another consumer takes them.
        taken.extend(q.receive_batch(10, visibility_timeout=600))

    report = vsqs.spark.consume(
        spark, str(tmp_path / "q"), sink, visibility_timeout=0, max_batches=1
    )
    assert (report.batches, report.messages, report.expired) == (1, 3, 3)
    assert len(taken) == 3 and q.stats().in_flight == 3, "the new holder's messages were deleted"


# ------------------------------------------------------------------ writing
def test_a_dataframe_is_written_as_one_message_per_row(spark: SparkSession, tmp_path: Path) -> None:
    texts = spark.range(500).select(F.concat(F.lit("row "), F.col("id")).alias("body"))
    texts.repartition(4).write.format("vsqs").mode("append").save(str(tmp_path / "q"))
    spark.createDataFrame([(b"\x00\xff",)], "body binary").write.format("vsqs").mode("append").save(
        str(tmp_path / "q")
    )
    with vsqs.Queue(tmp_path / "q") as q:
        got = sorted(m.body for m in q.peek(1000))
    assert got == sorted([f"row {i}".encode() for i in range(500)] + [b"\x00\xff"])
    assert not [n for n in listing(tmp_path / "q") if n.endswith(".new")]


def test_a_tasks_rows_keep_their_order_and_a_delay_applies(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = spark.range(50).select(F.concat(F.lit("n"), F.col("id")).alias("body")).coalesce(1)
    rows.write.format("vsqs").mode("append").save(str(tmp_path / "ordered"))
    with vsqs.Queue(tmp_path / "ordered") as q:
        assert [m.body for m in q.peek(100)] == [f"n{i}".encode() for i in range(50)]
    rows.write.format("vsqs").option("delay", "600").mode("append").save(str(tmp_path / "later"))
    with vsqs.Queue(tmp_path / "later") as q:
        stats = q.stats()
    assert (stats.ready, stats.delayed) == (0, 50)
    assert 590 < (stats.next_visible_in or 0) <= 600


def test_overwrite_and_a_missing_body_column_are_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(PySparkException, match="append-only"):
        df.write.format("vsqs").mode("overwrite").save(str(tmp_path / "q"))
    with pytest.raises(PySparkException, match="needs a 'body' column"):
        spark.range(3).write.format("vsqs").mode("append").save(str(tmp_path / "q"))


def test_a_dataframe_is_written_into_an_s3_queue(spark: SparkSession, s3_server: Server) -> None:
    url = s3_server.url()
    frame = spark.range(40).select(F.concat(F.lit("s3 row "), F.col("id")).alias("body"))
    frame.repartition(2).write.format("vsqs").mode("append").option(
        "storageOptions", json.dumps(s3_server.storage_options)
    ).save(url)
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        got = sorted(m.body for m in q.peek(100))
        store = q.store
        leftovers = [n for n in store.io.listing() if not names.parse(n[0])]  # type: ignore[attr-defined]
    assert got == sorted(f"s3 row {i}".encode() for i in range(40))
    assert [n for n, _ in leftovers] == [names.CONFIG_NAME], "staged names or markers were left"


def publishing(method: str, path: str, headers: dict[str, str]) -> bool:
    """The copy of a rename that publishes a staged ``<id>.new`` as a message."""
    source = {k.lower(): v for k, v in headers.items()}.get("x-amz-copy-source", "")
    target = path.split("?", 1)[0].rpartition("/")[2]
    return source.endswith(names.NEW_SUFFIX) and names.parse(target) is not None


def test_a_commit_to_s3_renames_concurrently(spark: SparkSession, s3_server: Server) -> None:
    """Each rename on an object store is several requests: the driver's
    commit runs them concurrently. The proxy holds the first copy until a
    second one is in flight, which never happens if they run one at a time."""
    url = s3_server.url()
    with FaultProxy(s3_server.storage_options["client_kwargs"]["endpoint_url"]) as proxy:
        gate = proxy.gate = Gate(publishing)
        options = copy.deepcopy(s3_server.storage_options)
        options["client_kwargs"]["endpoint_url"] = proxy.endpoint
        frame = spark.range(20).select(F.col("id").cast("string").alias("body"))
        frame.write.format("vsqs").mode("append").option(
            "storageOptions", json.dumps(options)
        ).save(url)
    assert gate.most_in_flight >= 2
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        assert sorted(m.body for m in q.peek(100)) == sorted(b"%d" % i for i in range(20))


# ------------------------------------------------------------- registration
def test_register_is_explicit_and_harmless(spark: SparkSession, tmp_path: Path) -> None:
    vsqs.spark.register(spark)
    with vsqs.Queue(tmp_path / "q") as q:
        q.send(b"x")
    assert spark.read.format("vsqs").load(str(tmp_path / "q")).count() == 1


@pytest.mark.parametrize("missing", ["pyspark", "pyarrow"])
def test_vsqs_spark_without_the_extra_names_what_to_install(missing: str) -> None:
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "try:\n    import vsqs.spark\nexcept ModuleNotFoundError as exc:\n"
        "    print(exc.name, '|', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    name, _, message = out.stdout.strip().partition(" | ")
    assert name == missing
    assert message.endswith("pip install 'vsqs[spark]'")


def test_importing_vsqs_does_not_import_spark() -> None:
    code = "import sys, vsqs; print('pyspark' in sys.modules or 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
