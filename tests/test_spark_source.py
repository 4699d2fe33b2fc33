"""The ``vsqs`` data source's read, stream and write paths as a data engineer
meets them (issue 17): empty reads, lost executors during a write, streams
beside consumers, S3 reads at latency, pushdown, option errors, backlog.

Every test runs on the session's real local SparkSession (``tests/support/spark_session.py``)
or on the source's own code on real stores; S3 is the moto server, seen
through a fault proxy that logs and gates requests.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _names as names
from vsqs import _publish
from vsqs.stores import _moves
from vsqs.stores._object import ObjectStore

pyspark = pytest.importorskip("pyspark", reason="the spark extra is part of .[test]")

from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import DataFrame, Row, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import StringType, StructField, StructType  # noqa: E402

from vsqs._inspect import RESTAMP_AFTER, STAGING_HOLD  # noqa: E402
from vsqs._publish import commit, stage  # noqa: E402
from vsqs.spark import _read, _write  # noqa: E402
from vsqs.spark._options import WRITE, Options  # noqa: E402
from vsqs.spark._source import SnapshotReader  # noqa: E402
from vsqs.spark._stream import QueueStreamReader  # noqa: E402
from vsqs.spark._write import QueueWriter  # noqa: E402
from vsqs.testing import FakeClock  # noqa: E402

from .support.fault_proxy import FaultProxy, Gate  # noqa: E402
from .support.faulty_io import FaultyIO  # noqa: E402
from .support.servers import Server, proxied  # noqa: E402
from .support.spark_streams import body_get, listing, run_stream, streamed  # noqa: E402
from .support.waiting import wait_until  # noqa: E402

COLUMNS = [
    "id",
    "sent_at",
    "body",
    "state",
    "receive_count",
    "visible_at",
    "group",
    "attributes",
]


def staged(path: Path) -> list[str]:
    return [n for n in listing(path) if n.endswith(names.NEW_SUFFIX)]


# ------------------------------------------------------------- 1. empty reads
def test_an_empty_read_is_no_rows_and_a_directory_that_is_no_queue_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    queue = str(tmp_path / "q")
    vsqs.Queue(queue).close()
    empty = spark.read.format("vsqs").load(queue)
    assert empty.columns == COLUMNS and empty.collect() == []
    with vsqs.Queue(queue) as q:
        q.send(b"ready")
    nothing = spark.read.format("vsqs").option("states", "in_flight,delayed").load(queue)
    assert nothing.count() == 0
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("not a queue")
    with pytest.raises(PySparkException, match=r"no queue at .*plain \(no vsqs config in it\)"):
        spark.read.format("vsqs").load(str(tmp_path / "plain")).collect()
    assert listing(tmp_path / "plain") == ["notes.txt"]


# ------------------------------------------------- 2. lost executors, dead writers
#: One task of a Spark write, run as an executor's Python worker runs it: the
#: writer (pickled by the driver) stages the task's rows, then the process is
#: killed before the task returns, as a lost executor's worker is.
KILLED_TASK = """
import pickle, signal, sys
from pyspark.sql import Row
writer = pickle.load(sys.stdin.buffer)
def rows():
    for i in range(int(sys.argv[1])):
        yield Row(body=f"lost {i}")
    print("staged", flush=True)
    signal.pause()  # SIGKILL arrives here: rows staged, nothing reported
writer.write(rows())
"""


def kill_a_task(writer: QueueWriter, rows: int) -> None:
    task = subprocess.Popen(
        [sys.executable, "-c", KILLED_TASK, str(rows)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=os.environ | {"PYTHONPATH": os.getcwd()},
    )
    assert task.stdin is not None and task.stdout is not None
    task.stdin.write(pickle.dumps(writer))
    task.stdin.close()
    assert task.stdout.readline() == b"staged\n"
    task.send_signal(signal.SIGKILL)
    assert task.wait() == -signal.SIGKILL


def a_writer(queue: Path) -> QueueWriter:
    """The driver's writer of one job, as ``df.write.format("vsqs")`` makes it."""
    schema = StructType([StructField("body", StringType())])
    return QueueWriter(Options.parse({"path": str(queue)}, WRITE), schema)


def test_a_lost_tasks_staging_is_removed_by_the_commit_and_holds_no_stream_back(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A job whose executor died mid-task succeeds by a retry; the dead task's
    staging must neither stay nor hold a stream back from what is ready."""
    queue = tmp_path / "q"
    q = vsqs.Queue(queue)
    before = q.send_batch([b"before"] * 3)
    writer = a_writer(queue)
    kill_a_task(writer, 300)  # two bundles staged, the last 44 rows not yet
    assert len(staged(queue)) == 2
    after = q.send_batch([b"after"] * 3)  # newer ids than the dead task's staging
    retried = writer.write(iter([Row(body=f"row {i}") for i in range(5)]))  # the retry
    writer.commit([retried])
    assert staged(queue) == [], "the lost task's staging outlived its job"
    ready = sorted(m.id for m in q.peek(100))
    assert len(ready) == 11 and set(before + after) <= set(ready)
    run_stream(spark, queue, tmp_path / "out", tmp_path / "checkpoint")
    assert sorted(streamed(spark, tmp_path / "out")) == ready
    assert spark.read.format("vsqs").load(str(queue)).count() == 11


def test_an_abort_removes_what_every_task_of_the_job_staged(tmp_path: Path) -> None:
    """``abort`` hears only of the tasks that succeeded; a killed task's
    staging is found by the job's nonce in the ids."""
    queue = tmp_path / "q"
    vsqs.Queue(queue).close()
    writer = a_writer(queue)
    kill_a_task(writer, 200)
    assert len(staged(queue)) == 1
    done = writer.write(iter([Row(body="ok")]))
    other_job = a_writer(queue).write(iter([Row(body="another job's")]))
    writer.abort([done])
    assert staged(queue) == [names.new_name(i) for i in other_job.ids]


def test_staging_older_than_the_hold_holds_no_stream_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's planner: a ``.new`` holds the offset back for STAGING_HOLD
    after its id, not for the hour of the garbage collection's grace."""
    q = vsqs.Queue(tmp_path / "q")
    store = vsqs.LocalStore(str(tmp_path / "q"))
    store.ensure(create=False)
    now_ms = int(time.time() * 1000)
    dead = f"{now_ms - int(STAGING_HOLD * 1000) - 60_000:013d}-0000-{'0' * 16}"
    store.write_new(names.new_name(dead), b"a dead writer's", fsync=False)
    after = q.send(b"after a dead writer")
    reader = QueueStreamReader(Options.parse({"path": str(tmp_path / "q"), "settleSeconds": "0"}))
    assert [name for _, name in reader._list()] == [after]
    live = names.ids.next_id(int(time.time() * 1000))
    store.write_new(names.new_name(live), b"a live writer's", fsync=False)
    later = q.send(b"after a live writer")
    assert [name for _, name in reader._list()] == [after], "a live writer's staging was passed"
    store.rename(names.new_name(live), live)
    assert [name for _, name in reader._list()] == [after, live, later]
    monkeypatch.setenv("VSQS_NEW_GRACE", "1")  # gc's grace, if shorter, bounds the hold too
    store.write_new(names.new_name(names.ids.next_id(now_ms - 2000)), b"", fsync=False)
    assert len(reader._list()) == 3


def test_staging_older_than_the_restamp_age_is_published_under_a_fresh_id(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A tail stops waiting for a ``.new`` after STAGING_HOLD: a commit
    publishes what was staged long ago under an id of the commit's time, so it
    cannot land behind a tail's offset; what was staged after it too, so the
    batch keeps its order."""
    vsqs.Queue(tmp_path / "q").close()
    store = vsqs.LocalStore(str(tmp_path / "q"))
    store.ensure(create=False)
    ms_clock = names.MsClock(clock)
    old = stage(store, b"staged long ago", ms_clock.next_id)
    clock.advance(RESTAMP_AFTER + 1)
    young = stage(store, b"staged just now", ms_clock.next_id)
    finals: list[str] = []
    commit(
        store,
        [old, young],
        None,
        durable=False,
        clock=ms_clock,
        published=lambda _, f: finals.append(f),
    )
    fresh, after = finals
    assert fresh != old and after != young
    assert names.id_ms(fresh) == ms_clock.now_ms() and young < fresh < after  # in batch order
    assert listing(tmp_path / "q") == sorted([names.CONFIG_NAME, fresh, after])
    assert store.read(fresh) == b"staged long ago" and store.read(after) == b"staged just now"


@pytest.mark.parametrize("bundle", ["true", "false"])
def test_a_restamped_commit_that_fails_publishes_each_row_once_or_never_and_leaves_nothing(
    s3_server: Server, monkeypatch: pytest.MonkeyPatch, bundle: str
) -> None:
    """The driver's commit of rows staged long ago (each restamped) fails at
    each of its requests in turn on S3, and Spark runs the abort: each row is
    published once or not at all (a bundle: all its rows or none), and once
    the moves left half done are repaired nothing of the job is left (a move
    of a ``.new`` to another id left a marker that neither the abort nor gc
    accepted)."""
    monkeypatch.setattr(_publish, "RESTAMP_AFTER", -1.0)  # every row was staged "long ago"
    rows = [f"row {i}" for i in range(3)]
    schema = StructType([StructField("body", StringType())])

    def failed_commit(fault_at: int | None) -> tuple[Options, FaultyIO]:
        options = Options.parse(
            {
                "path": s3_server.url(),
                "storageOptions": json.dumps(s3_server.storage_options),
                "bundle": bundle,
            },
            WRITE,
        )
        writer = QueueWriter(options, schema)
        done = writer.write(iter([Row(body=row) for row in rows]))
        store = _read.open_existing(options)
        assert isinstance(store, ObjectStore)
        faulty = FaultyIO(store.io, "lost", fault_at)
        faulty.in_flight = 1  # one request at a time: the k-th is the same in every run
        with monkeypatch.context() as patched:
            patched.setattr(_write, "open_existing", lambda _: ObjectStore(faulty))
            try:
                writer.commit([done])
            except OSError:
                writer.abort([done])  # what Spark does when the commit raises
        return options, faulty

    _, faulty = failed_commit(None)
    for fault_at in range(1, faulty.calls[0] + 1):
        options, _ = failed_commit(fault_at)
        store = _read.open_existing(options)
        assert isinstance(store, ObjectStore)
        with monkeypatch.context() as long_after:  # every move left half done is old
            long_after.setattr(_moves, "FINISH_AFTER", -1.0)
            with vsqs.Queue(ObjectStore(store.io)) as q:
                q.gc()
                got = Counter(bytes(m.body).decode() for m in q.peek(10))
        assert set(got) <= set(rows) and max(got.values(), default=1) == 1, (fault_at, got)
        objects = len(got) if bundle == "false" else len(got) // len(rows)
        assert bundle == "false" or len(got) in (0, len(rows)), (fault_at, got)
        left = [n for n, _ in store.io.listing()]
        assert len(left) == objects + 1 and names.CONFIG_NAME in left, (fault_at, left)


def test_a_failed_write_publishes_nothing_and_leaves_no_staging(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A task still running when the job failed may stage after the driver's
    abort: it removes its own staging on its way out (or, killed, leaves it to
    gc); nothing of the job is ever published."""
    vsqs.Queue(tmp_path / "q").close()

    @F.udf("string")
    def explode_on_last(i):  # type: ignore[no-untyped-def]  # hints make pyspark guess a pandas UDF
        if i == 399:
            raise ValueError("row 399 is bad")
        return f"row {i}"

    df = spark.range(400).repartition(4).select(explode_on_last("id").alias("body"))
    with pytest.raises(PySparkException, match="row 399 is bad"):
        df.write.format("vsqs").mode("append").save(str(tmp_path / "q"))

    def published() -> list[str]:
        return [n for n in listing(tmp_path / "q") if (p := names.parse(n)) and p.state != "new"]

    def clean() -> bool:
        """Nothing published; staging left only by tasks Spark killed (it kills
        a cancelled task's Python worker after two seconds, before it can clean
        up: more often on a busy machine), which gc removes once stale."""
        assert not published(), "a failed job published rows"
        if staged(tmp_path / "q"):
            with vsqs.Queue(tmp_path / "q", clock=lambda: time.time() + 3600) as later:
                later.gc()
        return listing(tmp_path / "q") == [names.CONFIG_NAME]

    wait_until(clean, 120, "staging removed")
    # A task that fails midway (a null body after two staged rows) removes
    # what it staged before it reports the failure.
    vsqs.Queue(tmp_path / "q2").close()
    nulls = spark.createDataFrame([("a",), ("b",), (None,)], "body string").coalesce(1)
    with pytest.raises(PySparkException, match="body is null"):
        nulls.write.format("vsqs").mode("append").save(str(tmp_path / "q2"))
    assert listing(tmp_path / "q2") == [names.CONFIG_NAME]
    # A straggling task of the first job stages nothing that survives either.
    wait_until(clean, 120, "staging removed")


def test_a_row_larger_than_the_queues_max_message_size_fails_the_write(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Before: it was published, and every receiver then passed it over."""
    vsqs.Queue(tmp_path / "q", max_message_size=8).close()
    rows = spark.createDataFrame([("8 bytes.",), ("nine byte",)], "body string").coalesce(1)
    with pytest.raises(PySparkException, match=r"is 9 bytes; this queue takes at most 8"):
        rows.write.format("vsqs").mode("append").save(str(tmp_path / "q"))
    assert listing(tmp_path / "q") == [names.CONFIG_NAME]
    rows.limit(1).write.format("vsqs").mode("append").save(str(tmp_path / "q"))
    with vsqs.Queue(tmp_path / "q") as q:
        assert [bytes(m.body) for m in q.peek(10)] == [b"8 bytes."]


# --------------------------------------------- 3. a stream beside consumers
def test_a_stream_offers_what_still_exists_once_it_settled(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What docs/spark.md states: a message received (in flight, or released
    with a delay) is still offered; one deleted before its key settled is not."""
    q = vsqs.Queue(tmp_path / "q")
    acked, held, released, ready = q.send_batch([b"acked", b"held", b"released", b"ready"])
    for expected in (acked, held, released):
        message = q.receive(visibility_timeout=600)
        assert message is not None and message.id == expected
        if expected == acked:
            message.delete()
        elif expected == released:
            message.release(delay=600)
    run_stream(spark, tmp_path / "q", tmp_path / "out", tmp_path / "checkpoint")
    assert sorted(streamed(spark, tmp_path / "out")) == sorted([held, released, ready])


def body_gets(proxy: FaultProxy) -> int:
    return sum(1 for e in proxy.exchanges if body_get(e.method, e.path) and e.attempt <= 1)


def test_a_task_reads_s3_bodies_side_by_side(spark: SparkSession, s3_server: Server) -> None:
    """The proxy holds the first body GET until a second is in flight, which
    never happens if one task reads them one at a time."""
    url = s3_server.url()
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        sent = q.send_batch([f"s3 {i}".encode() for i in range(40)], bundle=False)
    with FaultProxy(s3_server.storage_options["client_kwargs"]["endpoint_url"]) as proxy:
        gate = proxy.gate = Gate(body_get)
        df = (
            spark.read.format("vsqs")
            .option("storageOptions", json.dumps(proxied(s3_server, proxy)))
            .option("numPartitions", "1")
            .load(url)
        )
        rows = df.orderBy("id").collect()
    assert gate.most_in_flight >= 2
    assert [r.id for r in rows] == sent and bytes(rows[-1].body) == b"s3 39"


def test_default_partitions_are_smaller_on_object_stores(
    tmp_path: Path, s3_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_read, "NAMES_PER_OBJECT_PARTITION", 10)
    url = s3_server.url()
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        q.send_batch([b"x"] * 30, bundle=False)
    with vsqs.Queue(tmp_path / "q") as q:
        q.send_batch([b"x"] * 30, bundle=False)
    on_s3 = {"path": url, "storageOptions": json.dumps(s3_server.storage_options)}
    assert len(SnapshotReader(Options.parse(on_s3)).partitions()) == 3
    assert len(SnapshotReader(Options.parse({"path": str(tmp_path / "q")})).partitions()) == 1


# ------------------------------------------------------------- 6. pushdown
def test_metadata_queries_read_no_bodies(spark: SparkSession, s3_server: Server) -> None:
    url = s3_server.url()
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        sent = q.send_batch([f"m{i}".encode() for i in range(20)], bundle=False)
        held = sorted(m.id for m in q.receive_batch(5, visibility_timeout=600))
    with FaultProxy(s3_server.storage_options["client_kwargs"]["endpoint_url"]) as proxy:

        def read(**options: str) -> DataFrame:
            reader = spark.read.format("vsqs").option("states", "all")
            reader = reader.option("storageOptions", json.dumps(proxied(s3_server, proxy)))
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load(url)

        proxy.arm(None)
        names_only = read(includeBody="false")
        assert names_only.columns == ["id", "sent_at", "state", "receive_count", "visible_at"]
        assert names_only.count() == 20
        assert names_only.filter(F.col("state") == "in_flight").count() == 5
        assert body_gets(proxy) == 0, "a names-only read read bodies"

        with pytest.raises(PySparkException, match=r"spark\.sql\.python\.filterPushdown\.enabled"):
            read(filterPushdown="true").collect()  # PySpark refuses it without its setting
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        try:
            pushed = read(filterPushdown="true")
            proxy.arm(None)
            in_flight = pushed.filter(
                (F.col("state") == "in_flight") & (F.col("receive_count") >= 1)
            )
            assert sorted(r.id for r in in_flight.collect()) == held
            assert body_gets(proxy) == 5
            proxy.arm(None)
            now = dt.datetime.now(dt.UTC)
            older = pushed.filter((F.col("id") < sent[10]) & (F.col("sent_at") <= now))
            assert sorted(r.id for r in older.select("id", "body").collect()) == sent[:10]
            assert body_gets(proxy) == 10
            proxy.arm(None)
            assert pushed.filter(F.col("receive_count") > 5).count() == 0
            assert pushed.filter(F.col("id").isin(sent[3], sent[7])).count() == 2
            assert body_gets(proxy) == 2
        finally:
            spark.conf.unset("spark.sql.python.filterPushdown.enabled")


# ---------------------------------------------------------- 8. option errors
@pytest.mark.parametrize(
    ("stream", "option", "value", "message"),
    [
        (True, "settleSecond", "1", r"vsqs has no option 'settlesecond'; its options are: path, "),
        (True, "maxMessagesPerBatch", "0", "option maxMessagesPerBatch must be a positive integer"),
        (
            True,
            "startingOffsets",
            "newest",
            "option startingOffsets must be one of earliest, latest",
        ),
        (True, "delay", "5", "option delay applies to writes, not to reads or streams"),
        (False, "numPartition", "2", r"vsqs has no option 'numpartition'"),
        (False, "includeBody", "no", "option includeBody must be one of true, false"),
    ],
)
def test_an_option_error_fails_the_load(
    spark: SparkSession, tmp_path: Path, stream: bool, option: str, value: str, message: str
) -> None:
    vsqs.Queue(tmp_path / "q").close()
    source = spark.readStream if stream else spark.read
    with pytest.raises(PySparkException, match=message) as refused:
        source.format("vsqs").option(option, value).load(str(tmp_path / "q"))  # nothing runs
    assert "UnboundLocalError" not in str(refused.value)


def test_an_option_of_another_use_is_refused_at_its_first_use(
    spark: SparkSession, tmp_path: Path
) -> None:
    vsqs.Queue(tmp_path / "q").close()
    stream = spark.readStream.format("vsqs").option("states", "all").load(str(tmp_path / "q"))
    query = stream.writeStream.format("noop").trigger(availableNow=True).start()
    with pytest.raises(
        PySparkException, match="option states applies to reads, not to streams"
    ) as refused:
        query.awaitTermination(120)
    assert "UnboundLocalError" not in str(refused.value)
    with pytest.raises(
        PySparkException, match="option settleSeconds applies to streams, not to reads"
    ):
        spark.read.format("vsqs").option("settleSeconds", "1").load(str(tmp_path / "q")).collect()
    rows = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(PySparkException, match="vsqs has no option 'dealy'"):
        rows.write.format("vsqs").option("dealy", "5").mode("append").save(str(tmp_path / "q"))


# ------------------------------------------------------------- 9. backlog
def test_stream_progress_shows_the_backlog(spark: SparkSession, tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q")
    sent = q.send_batch([f"{i}".encode() for i in range(5)])
    stream = spark.readStream.format("vsqs").option("settleSeconds", "0")
    query = (
        stream.option("maxMessagesPerBatch", "2")
        .load(str(tmp_path / "q"))
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    reported: list[dict[str, Any]] = []
    for progress in query.recentProgress:
        if progress["numInputRows"]:
            latest = progress["sources"][0]["latestOffset"]
            reported.append(json.loads(latest) if isinstance(latest, str) else latest)
    assert [r["backlog"] for r in reported] == [3, 1, 0]  # messages of one bundle
    [part] = [n for n in listing(tmp_path / "q") if names.parse(n)]
    assert names.members_of(part) == list(range(len(sent)))
    assert {(r["id"], r["place"]) for r in reported} == {(part[: names.ID_LEN], len(sent) - 1)}
