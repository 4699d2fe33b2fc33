"""``vsqs stats QUEUE... --prometheus`` and ``vsqs metrics serve``: the
Prometheus text format of queues' figures, by the real console script (the
server scraped over HTTP), and what one scan costs on S3 (LIST requests
counted against moto)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import vsqs
import vsqs.metrics
from vsqs.cli._metrics import Scanner

from .support.cli import DEADLINE, exit_status, ok, run, start, until
from .support.servers import Server

GAUGES = (
    "vsqs_messages_visible",
    "vsqs_messages_in_flight",
    "vsqs_messages_delayed",
    "vsqs_oldest_message_age_seconds",
)

Figures = dict[tuple[str, str], float]


def figures(text: str) -> Figures:
    """``(sample name, queue label) -> value`` of a text exposition."""
    return {
        (s.name, s.labels["queue"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def queues(tmp_path: Path) -> Iterator[tuple[vsqs.Queue, vsqs.Queue]]:
    """Under one root: a queue with a dead-letter queue holding one dead
    letter and one ready message; a queue with a group in flight and one
    message delayed."""
    root = tmp_path / "root"
    with (
        vsqs.Queue(root / "jobs", max_receives=1, dead_letter="jobs-dlq") as jobs,
        vsqs.Queue(root / "orders") as orders,
    ):
        jobs.send(b"poison")
        assert jobs.receive(visibility_timeout=0) is not None  # visible again at once
        assert jobs.receive() is None  # dead-lettered
        jobs.send(b"waiting")
        orders.send(b"o1", group="order-1")
        orders.send(b"later", delay=3600)
        assert orders.receive(visibility_timeout=3600) is not None
        yield jobs, orders


def test_stats_prometheus_prints_each_queues_gauges(
    queues: tuple[vsqs.Queue, vsqs.Queue],
) -> None:
    jobs, orders = queues
    text = ok("stats", jobs.url, orders.url, "--prometheus")
    got = figures(text)
    dlq = jobs.dead_letter_url
    assert {name for name, _ in got} == {
        *GAUGES,
        "vsqs_dead_letter_messages",
        "vsqs_groups_in_flight",
    }
    assert got["vsqs_messages_visible", jobs.url] == 1
    assert got["vsqs_messages_visible", orders.url] == 0
    assert got["vsqs_messages_in_flight", orders.url] == 1
    assert got["vsqs_messages_delayed", orders.url] == 1
    assert got["vsqs_oldest_message_age_seconds", jobs.url] >= 0
    assert got["vsqs_dead_letter_messages", jobs.url] == 1  # label queue: the source
    assert ("vsqs_dead_letter_messages", orders.url) not in got  # it has no dead-letter queue
    assert got["vsqs_groups_in_flight", orders.url] == 1
    assert dlq is not None and ("vsqs_messages_visible", dlq) not in got  # not asked for


def test_stats_takes_several_queues_only_with_prometheus_and_it_alone(
    queues: tuple[vsqs.Queue, vsqs.Queue],
) -> None:
    jobs, orders = queues
    done = run("stats", jobs.url, orders.url)
    assert done.returncode == 2
    assert "several QUEUEs only with --prometheus" in done.stderr
    for other in ("--json", "--watch"):
        done = run("stats", jobs.url, "--prometheus", other)
        assert done.returncode == 2 and done.stdout == ""
        assert "--prometheus goes with neither --json nor --watch" in done.stderr


def test_stats_prometheus_without_the_library_says_what_to_install(
    queues: tuple[vsqs.Queue, vsqs.Queue],
) -> None:
    jobs, _ = queues
    hide = "import sys; sys.modules['prometheus_client'] = None; from vsqs.cli import run; run()"
    done = subprocess.run(
        [sys.executable, "-c", hide, "stats", jobs.url, "--prometheus"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "pip install 'vsqs[metrics]'" in done.stderr


def scrape(port: int) -> Figures:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=DEADLINE) as response:
        return figures(response.read().decode())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_metrics_serve_rescans_a_root_and_stops_on_a_signal(
    queues: tuple[vsqs.Queue, vsqs.Queue], signum: int
) -> None:
    """The queues under a root, served on the port it chose and named on
    stderr; a message sent shows in a later scrape; a signal stops it."""
    jobs, orders = queues
    root = str(Path(jobs.url).parent)
    proc = start(
        "metrics",
        "serve",
        root,
        "--port",
        "0",
        "--interval",
        "0.1",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    address = proc.stdout.readline().decode()  # the address alone, as data
    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/metrics\n", address)
    assert match, address
    port = int(match.group(1))
    said = proc.stderr.readline().decode()
    assert f"{address.strip()} for 3 queues, scanned every 0.1 s" in said
    dlq = jobs.dead_letter_url
    first = scrape(port)
    assert first["vsqs_messages_visible", dlq] == 1  # the dead-letter queue is a queue under it
    assert first["vsqs_messages_visible", orders.url] == 0
    with vsqs.Queue(Path(root) / "later") as later:  # found at start only
        orders.send(b"new")
        until(lambda: scrape(port)["vsqs_messages_visible", orders.url] == 1, "a rescan", proc)
        assert ("vsqs_messages_visible", later.url) not in scrape(port)
    proc.send_signal(signum)
    left, err = proc.communicate(timeout=DEADLINE)
    assert left == b""  # nothing more on stdout
    assert proc.returncode == exit_status(signum)
    assert "Traceback" not in err.decode()
    with pytest.raises(OSError):  # the server is gone with it
        scrape(port)


@pytest.mark.servers
@pytest.mark.parametrize("dlq_scanned", [False, True])
def test_one_scan_lists_each_queue_once_on_s3(s3_server: Server, dlq_scanned: bool) -> None:
    """One LIST request per queue per scan (a page holds 1 000 names), and
    one per dead-letter queue, whether it is scanned itself or not."""
    root = f"{s3_server.root}/{uuid.uuid4().hex[:8]}"
    options = s3_server.storage_options
    with ExitStack() as stack:

        def opened(name: str, **settings: Any) -> vsqs.Queue:
            return stack.enter_context(
                vsqs.Queue(f"{root}/{name}", storage_options=options, **settings)
            )

        a = opened("a", max_receives=3, dead_letter="a-dlq")
        b = opened("b")
        dlq = opened("a-dlq")
        a.send_batch([b"x"] * 3)
        scanned = [a, b, dlq] if dlq_scanned else [a, b]
        scanner = Scanner(scanned)
        scanner.scan()  # opens the dead-letter queue, once
        registry = CollectorRegistry()
        vsqs.metrics.enable_prometheus(registry)
        try:
            [first, *_] = scanner.scan()
        finally:
            vsqs.metrics.disable()
    assert first.stats.ready == 3 and first.dead_letter == 0
    requests = [
        s
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
        if s.name == "vsqs_store_requests_total"
    ]
    lists = {s.labels["queue"]: s.value for s in requests if s.labels["operation"] == "list"}
    assert lists == {a.url: 1, b.url: 1, dlq.url: 1}
    # Before: the dead-letter queue was opened again (a HEAD, a GET) at each scan.
    assert {s.labels["operation"] for s in requests if s.value} == {"list"}


def test_a_queue_that_fails_its_scan_keeps_its_figures_and_the_others_go_on(
    tmp_path: Path,
) -> None:
    """Before: the first queue that failed ended the scan, and every queue
    kept its old figures for as long as it failed."""
    with vsqs.Queue(tmp_path / "doomed") as doomed, vsqs.Queue(tmp_path / "live") as live:
        doomed.send(b"x")
        scanner = Scanner([doomed, live])
        scanner.scan()
        shutil.rmtree(tmp_path / "doomed")
        live.send(b"y")
        with pytest.raises(vsqs.VsqsError):
            scanner.scan()  # one scan (vsqs stats --prometheus): the error
        figures = {f.url: f.stats.ready for f in scanner.scan(keep_going=True)}
    assert figures == {doomed.url: 1, live.url: 1}


def test_metrics_serve_keeps_the_last_figures_of_a_scan_that_failed(tmp_path: Path) -> None:
    """A queue removed while served: the scan fails, says so on stderr, and
    a scrape still reads the figures of the last scan that worked."""
    with vsqs.Queue(tmp_path / "doomed") as q:
        q.send(b"x")
        url = q.url
    proc = start(
        "metrics", "serve", url, "--port", "0", "--interval", "0.1", stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    match = re.search(r":(\d+)/metrics for 1 queue,", proc.stderr.readline().decode())
    assert match
    port = int(match.group(1))
    # A scan that worked (the first may still run on a loaded machine).
    until(lambda: scrape(port)["vsqs_messages_visible", url] == 1, "a scan that worked", proc)
    shutil.rmtree(url)
    failed = proc.stderr.readline().decode()  # the next scan's
    assert "a scan failed (the last figures stay)" in failed and url in failed
    assert scrape(port)["vsqs_messages_visible", url] == 1
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=DEADLINE)
    assert proc.returncode == exit_status(signal.SIGTERM)
