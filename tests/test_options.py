"""The options of ``consume``: where each setting comes from (the same for the
sync, asyncio and Spark faces), and what a bad value does."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import vsqs
import vsqs.aio
from vsqs import _names as names
from vsqs._options import ConsumeOptions, RetryPolicy


class Settings(NamedTuple):
    """What a ``consume`` ran with (seconds)."""

    visibility_timeout: float
    retry_delay: float
    max_retry_delay: float


#: The ``VSQS_*`` variables when a queue is created; DECOY: when it is consumed
#: (they set the config of queues created, never what a consume of an existing
#: queue uses). Each level's values are far apart, so that a consume taking
#: long on a loaded machine cannot pass for another level.
ENV = {"VSQS_VISIBILITY_TIMEOUT": "300", "VSQS_RETRY_DELAY": "100", "VSQS_MAX_RETRY_DELAY": "5000"}
DECOY = {
    "VSQS_VISIBILITY_TIMEOUT": "200000",
    "VSQS_RETRY_DELAY": "200000",
    "VSQS_MAX_RETRY_DELAY": "400000",
}
CREATED = {"visibility_timeout": 3000, "retry_delay": 1000, "max_retry_delay": 50000}
GIVEN = {"visibility_timeout": 30000, "retry_delay": 10000, "max_retry_delay": 500000}

#: (environment at creation, creation arguments, consume arguments) -> what it ran with.
LEVELS = [
    ({}, {}, {}, Settings(30, 1, 300)),  # the built-in defaults
    (ENV, {}, {}, Settings(300, 100, 5000)),  # the environment, at creation
    (ENV, CREATED, {}, Settings(3000, 1000, 50000)),  # the queue's config beats it
    (ENV, CREATED, GIVEN, Settings(30000, 10000, 500000)),  # the argument beats both
    (ENV, CREATED, {"retry_delay": 10000}, Settings(3000, 10000, 50000)),  # per setting
]

#: ``record(ids)`` notes how long the messages ``ids`` are hidden while held.
Record = Callable[[Iterable[str]], None]


def consume_sync(path: Path, given: dict[str, Any], record: Record, request: Any) -> None:
    def handler(message: vsqs.Message) -> None:
        record([message.id])
        raise RuntimeError("fails")

    with vsqs.Queue(path) as q:
        q.consume(handler, max_messages=2, jitter=lambda: 0.5, **given)


def consume_asyncio(path: Path, given: dict[str, Any], record: Record, request: Any) -> None:
    async def handler(message: vsqs.aio.Message) -> None:
        record([message.id])
        raise RuntimeError("fails")

    async def main() -> None:
        async with vsqs.aio.Queue(path) as q:
            await q.consume(handler, max_messages=2, jitter=lambda: 0.5, **given)

    asyncio.run(main())


def consume_spark(path: Path, given: dict[str, Any], record: Record, request: Any) -> None:
    import vsqs.spark

    def process(df: Any, batch_id: int) -> Any:
        record(row.id for row in df.select("id").collect())
        return df  # every row failed

    spark = request.getfixturevalue("spark")
    vsqs.spark.consume(spark, str(path), process, jitter=lambda: 0.5, **given)


def hidden_until(path: Path) -> dict[str, names.Name]:
    """The messages of a local queue by id, from their names."""
    parsed = (names.parse(p.name) for p in path.iterdir())
    return {n.id: n for n in parsed if n is not None}


@pytest.mark.parametrize(
    "consume",
    [
        consume_sync,
        consume_asyncio,
        # Its SparkSession is taken in the test (the other faces need none):
        # marked here as conftest marks the tests that take it as an argument.
        pytest.param(consume_spark, marks=pytest.mark.spark),  # conftest: slow, the Spark worker
    ],
)
def test_each_setting_comes_from_the_argument_then_the_config_then_the_environment(
    consume: Callable[[Path, dict[str, Any], Record, Any], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """Every face: the visibility timeout a message is held for, its first
    retry delay (a message received once) and the cap (one received ten
    times: ``retry_delay * 2**9`` is above every cap here) come from the
    consume's argument, else the queue's config, which its creator wrote from
    its arguments, else the ``VSQS_*`` variables at creation, else the
    built-in values; the variables when consuming change nothing."""
    for level, (env, created, given, want) in enumerate(LEVELS):
        for var in DECOY:
            monkeypatch.delenv(var, raising=False)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        path = tmp_path / f"q{level}"
        with vsqs.Queue(path, **created) as q:
            often = q.send(b"received nine times before")
            for _ in range(9):
                got = q.receive()
                assert got is not None and got.id == often
                got.release()
            once = q.send(b"never received before")
        for var, value in DECOY.items():
            monkeypatch.setenv(var, value)

        held: dict[str, names.Name] = {}

        def record(ids: Iterable[str]) -> None:
            now = hidden_until(path)  # noqa: B023 - called within this iteration
            held.update({i: now[i] for i in ids})  # noqa: B023

        start_ms = int(time.time() * 1000) - 1
        consume(path, given, record, request)
        end_ms = int(time.time() * 1000) + 1

        def between(expiry_ms: int | None, seconds: float) -> bool:
            assert expiry_ms is not None
            return start_ms + seconds * 1000 <= expiry_ms <= end_ms + seconds * 1000  # noqa: B023

        assert {i: n.receive_count for i, n in held.items()} == {often: 10, once: 1}
        for name in held.values():
            assert between(name.expiry_ms, want.visibility_timeout), (level, "visibility", name)
        after = hidden_until(path)
        assert between(after[once].expiry_ms, 0.75 * want.retry_delay), (level, "retry_delay")
        assert between(after[often].expiry_ms, 0.75 * want.max_retry_delay), (level, "max")


async def consume_in_asyncio(path: Path, options: dict[str, Any]) -> int:
    async with vsqs.aio.Queue(path) as q:
        return await q.consume(lambda m: None, **options)


#: The options of ``vsqs.spark.consume`` that the other faces take too.
SPARK_TAKES = {"visibility_timeout", "retry_delay", "max_retry_delay", "jitter"}


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"visibility_timeout": -1}, "visibility_timeout must be between 0 and"),
        ({"idle_timeout": float("nan")}, "idle_timeout must be between 0 and"),
        ({"idle_timeout": "5"}, "idle_timeout must be a number of seconds, not str"),
        ({"max_messages": -1}, "max_messages must be an int of at least 0, not -1"),
        ({"max_messages": True}, "max_messages must be an int of at least 0, not True"),
        ({"max_messages": 2.0}, "max_messages must be an int of at least 0, not 2.0"),
        ({"stop": object()}, "stop must be an Event, not object"),
        ({"retry_delay": 0.001}, "retry_delay must be at least 0.01 seconds"),
        ({"max_retry_delay": float("inf")}, "max_retry_delay must be between 0 and"),
        ({"jitter": 0.5}, "jitter must be a function returning a float in [0, 1), not float"),
    ],
)
def test_a_bad_consume_option_is_refused_in_one_line_before_anything_is_received(
    tmp_path: Path, options: dict[str, Any], says: str
) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        with pytest.raises(vsqs.InvalidArgument) as raised:
            ConsumeOptions(**options).resolve(q.config)
        assert str(raised.value).startswith(says) and "\n" not in str(raised.value)
        q.send(b"x")
        before = sorted(p.name for p in (tmp_path / "q").iterdir())
        with pytest.raises(vsqs.InvalidArgument, match="^" + re.escape(says)):
            q.consume(lambda m: None, **options)
        with pytest.raises(vsqs.InvalidArgument, match="^" + re.escape(says)):
            asyncio.run(consume_in_asyncio(tmp_path / "q", options))
        if SPARK_TAKES.issuperset(options):  # before any Spark call: no session needed
            from vsqs.spark import consume as spark_consume

            with pytest.raises(vsqs.InvalidArgument, match="^" + re.escape(says)):
                spark_consume(None, str(tmp_path / "q"), lambda df, i: None, **options)
        assert sorted(p.name for p in (tmp_path / "q").iterdir()) == before


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"retry_delay": 0}, "retry_delay must be at least 0.01 seconds"),
        ({"max_retry_delay": -1}, "max_retry_delay must be between 0 and"),
        ({"retry_delay": 5, "max_retry_delay": 2}, "max_retry_delay (2) must be at least"),
        ({"jitter": None}, "jitter must be a function returning a float in [0, 1), not NoneType"),
    ],
)
def test_a_bad_retry_policy_is_refused_in_one_line(policy: dict[str, Any], says: str) -> None:
    with pytest.raises(vsqs.InvalidArgument) as raised:
        RetryPolicy(**policy)
    assert str(raised.value).startswith(says) and "\n" not in str(raised.value)


def test_a_retry_delay_above_the_queues_cap_is_refused_when_resolved(tmp_path: Path) -> None:
    """Each is valid alone; together with the config's cap (300 s) they are not."""
    options = ConsumeOptions(retry_delay=400)
    with (
        vsqs.Queue(tmp_path / "q") as q,
        pytest.raises(
            vsqs.InvalidArgument,
            match=r"^max_retry_delay \(300\) must be at least retry_delay \(400\)",
        ),
    ):
        options.resolve(q.config)


def test_the_retry_delay_doubles_per_receive_up_to_the_cap_with_equal_jitter() -> None:
    """For a message received ``n`` times: ``step = min(16, 2 * 2 ** (n - 1))``,
    the delay ``step / 2 + jitter() * step / 2``; a count below 1 counts as 1."""
    draws = iter([0.0, 0.999, 0.5, 0.0, 0.5])
    policy = RetryPolicy(retry_delay=2, max_retry_delay=16, jitter=lambda: next(draws))
    assert [policy.delay(n) for n in (0, 1, 3, 10, 10**6)] == [1.0, 1.999, 6.0, 8.0, 12.0]


def test_options_are_frozen() -> None:
    options = ConsumeOptions(stop=threading.Event())
    with pytest.raises(AttributeError):
        options.max_messages = 3  # type: ignore[misc]
