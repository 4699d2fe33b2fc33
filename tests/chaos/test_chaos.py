"""Chaos: producers and consumers killed with SIGKILL at random, on a directory and on S3.

The short version of ``benchmarks/chaos.py``: the same harness
(``tests/chaos/harness.py``) for a few seconds per store. Each run kills
dozens of processes mid-send, mid-receive and while holding messages, then
checks that nothing was lost, held twice, resurrected or reordered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.servers import Server
from .harness import ChaosConfig, Report, run_chaos

pytestmark = pytest.mark.processes


def assert_clean(report: Report, min_kills: int) -> None:
    print(report.figures)
    assert not report.violations, "\n".join(report.violations[:20])
    figures = report.figures
    assert figures["kills"] >= min_kills, "too few kills landed: the run tried nothing"
    assert (
        figures["messages_sent"] > 0
        and figures["acked"] >= figures["messages_sent"] - (figures["claims_cut_short"])
    )


@pytest.mark.timeout(120)
def test_racing_processes_killed_at_random_lose_nothing_on_a_directory(tmp_path: Path) -> None:
    config = ChaosConfig(target=str(tmp_path / "q"), producers=3, consumers=4, seconds=8)
    report = run_chaos(config, tmp_path / "logs")
    assert_clean(report, min_kills=10)
    moments = report.figures["kills_by_moment"]
    in_flight = sum(moments.get(f"consumer {m}", 0) for m in ("mid-receive", "holding", "mid-ack"))
    assert moments.get("producer mid-send", 0) and in_flight, moments
    assert report.figures["redeliveries"] > 0


@pytest.mark.timeout(120)
def test_one_consumer_killed_at_random_keeps_each_producers_order(tmp_path: Path) -> None:
    config = ChaosConfig(
        target=str(tmp_path / "q"), producers=3, consumers=1, seconds=6, p_release=0, p_slow=0
    )
    report = run_chaos(config, tmp_path / "logs")
    assert_clean(report, min_kills=8)
    assert report.figures["out_of_order_first_deliveries"] == 0


@pytest.mark.timeout(180)
def test_racing_processes_killed_at_random_lose_nothing_on_s3(
    s3_server: Server, tmp_path: Path
) -> None:
    config = ChaosConfig(
        target=[s3_server.url(), s3_server.storage_options],
        producers=2,
        consumers=3,
        seconds=10,
        rate=8,
        vt=3.0,
        kill_every=0.8,
        max_padding=1024,
    )
    report = run_chaos(config, tmp_path / "logs")
    assert_clean(report, min_kills=5)
