"""``vsqs.spark.consume`` on a local SparkSession: per-row outcomes and the
heartbeat (``tests/test_spark_cluster.py`` runs it on a cluster)."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs._bundle import members

pytest.importorskip("pyspark", reason="the spark extra is part of .[test]")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import vsqs.spark

from .support.fault_proxy import FaultProxy, Gate
from .support.servers import Server
from .support.waiting import wait_until

BAD = (10, 500, 999)


#: An engine bug the dead-letter tests here found (the move into a queue, main 51e53f5).
def held(path: Path) -> dict[str, names.Name]:
    """The messages of a local queue by their own ids, each with the name of
    the object that holds it (a part of a bundle holds several)."""
    found: dict[str, names.Name] = {}
    for p in path.iterdir():
        parsed = names.parse(p.name)
        if parsed is not None:
            bundled = members(parsed.id, p.read_bytes()) if names.is_bundle(parsed.id) else None
            found.update(
                (i, parsed) for i in ([parsed.id] if bundled is None else [m.id for m in bundled])
            )
    return found


def test_only_the_rows_process_returns_are_released_after_their_backoff(
    spark: SparkSession, tmp_path: Path
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    ids = q.send_batch([b"bad %d" % i if i in BAD else b"job %d" % i for i in range(1000)])
    done: list[str] = []

    def process(df: DataFrame, batch_id: int) -> DataFrame:
        bad = F.col("body").cast("string").startswith("bad")
        done.extend(row.id for row in df.filter(~bad).select("id").collect())
        return df.filter(bad)

    start_ms = int(time.time() * 1000)
    report = vsqs.spark.consume(
        spark, str(tmp_path / "q"), process, retry_delay=100, jitter=lambda: 0.5
    )
    end_ms = int(time.time() * 1000) + 1
    assert report == vsqs.spark.ConsumeReport(batches=1, messages=1000, expired=0, failed=3)
    assert sorted(done) == sorted(set(ids) - {ids[i] for i in BAD})
    left = held(tmp_path / "q")
    assert sorted(left) == sorted(ids[i] for i in BAD), "the good rows were not deleted"
    for name in left.values():  # hidden for 3/4 of retry_delay, to be received again
        assert name.receive_count == 1 and name.expiry_ms is not None
        assert start_ms + 75_000 <= name.expiry_ms <= end_ms + 75_000


def test_failed_ids_are_dead_lettered_by_max_receives(spark: SparkSession, tmp_path: Path) -> None:
    dead = vsqs.Queue(tmp_path / "dead")
    q = vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter=str(tmp_path / "dead"))
    ids = q.send_batch([b"%d" % i for i in range(100)])
    bad = {ids[i] for i in (0, 42, 99)}

    def process(df: DataFrame, batch_id: int) -> list[str]:
        return sorted(bad)  # a list of ids will do, as any iterable

    report = vsqs.spark.consume(spark, str(tmp_path / "q"), process, retry_delay=0.01)
    assert (report.messages, report.failed) == (100, 3)
    wait_until(lambda: q.receive() is None and dead.stats().ready == 3, 60, "the dead letters")
    assert {m.id for m in dead.peek(10)} == bad
    assert q.stats().ready == q.stats().in_flight == q.stats().delayed == 0


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        ("an id", "returned str"),
        (42, "returned int"),
        (["not-an-id-of-the-batch"], "1 failed ids that are not in batch 0"),
        ("frame without id", "without an id column"),
    ],
)
def test_a_return_value_that_is_not_failed_rows_fails_the_batch(
    spark: SparkSession, tmp_path: Path, returned: object, error: str
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    q.send_batch([b"a", b"b"])

    def process(df: DataFrame, batch_id: int) -> object:
        return df.select("body") if returned == "frame without id" else returned

    with pytest.raises(vsqs.InvalidArgument, match=error):
        vsqs.spark.consume(spark, str(tmp_path / "q"), process, retry_delay=100)  # type: ignore[arg-type]
    left = held(tmp_path / "q")
    assert len(left) == 2 and all(n.expiry_ms and n.receive_count == 1 for n in left.values())


def test_a_slow_process_keeps_its_batch_with_a_heartbeat(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``process`` outlives the visibility timeout it started with: a second
    consumer still receives nothing, and every message is deleted after."""
    q = vsqs.Queue(tmp_path / "q")
    q.send_batch([b"%d" % i for i in range(20)])
    other = vsqs.Queue(tmp_path / "q")
    seen: list[list[vsqs.Message]] = []

    def slow(df: DataFrame, batch_id: int) -> None:
        first = max(n.expiry_ms or 0 for n in held(tmp_path / "q").values())
        wait_until(lambda: time.time() * 1000 > first + 500, 60, "the first timeout to run out")
        seen.append(other.receive_batch(100))

    # A heartbeat every 2 s of a 6 s timeout: a busy machine may delay it 4 s.
    report = vsqs.spark.consume(spark, str(tmp_path / "q"), slow, visibility_timeout=6)
    assert seen == [[]], "a second consumer received messages of a running batch"
    assert (report.messages, report.expired) == (20, 0)
    assert held(tmp_path / "q") == {}


def extending(method: str, path: str, headers: dict[str, str]) -> bool:
    """The copy of a move from one in-flight name to a later one: an extend."""
    source = {k.lower(): v for k, v in headers.items()}.get("x-amz-copy-source", "")
    before = names.parse(source.rpartition("/")[2])
    after = names.parse(path.split("?", 1)[0].rpartition("/")[2])
    return all(n is not None and n.expiry_ms is not None for n in (before, after))


def test_the_heartbeat_extends_a_batch_side_by_side_on_s3(
    spark: SparkSession, s3_server: Server
) -> None:
    """The proxy holds the first extend until a second one is in flight,
    which never happens if they run one at a time."""
    url = s3_server.url()
    with vsqs.Queue(url, storage_options=s3_server.storage_options) as q:
        q.send_batch([b"%d" % i for i in range(8)], bundle=False)  # 8 objects to extend
    with FaultProxy(s3_server.storage_options["client_kwargs"]["endpoint_url"]) as proxy:
        gate = Gate(extending)
        options = copy.deepcopy(s3_server.storage_options)
        options["client_kwargs"]["endpoint_url"] = proxy.endpoint

        def process(df: DataFrame, batch_id: int) -> None:
            proxy.gate = gate
            wait_until(lambda: gate.most_in_flight >= 2, 60, "two extends in flight")

        # A timeout of 6 s (a heartbeat every 2 s): on a busy machine a claim
        # outlasted a timeout of 1 s and the batch was dropped (messages 0).
        report = vsqs.spark.consume(
            spark, url, process, storage_options=options, visibility_timeout=6
        )
    assert (report.messages, report.expired) == (8, 0)


def test_messages_of_two_parts_of_a_bundle_keep_their_ids_as_dead_letters(tmp_path: Path) -> None:
    """Without Spark: two messages of one bundle released apart (two parts)
    and dead-lettered one after the other keep their own ids."""
    dead = vsqs.Queue(tmp_path / "dead")
    q = vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter=str(tmp_path / "dead"))
    ids = q.send_batch([b"0", b"1", b"2", b"3"])
    got = q.receive_batch(4, visibility_timeout=600)
    got[0].release()
    got[2].release()
    q.delete_batch([got[1], got[3]])
    assert q.receive() is None  # dead-letters both parts
    assert sorted(m.id for m in dead.peek(10)) == [ids[0], ids[2]]
