"""What the console script says and where (issue 16): data on stdout,
summaries on stderr or, with ``--json``, on stdout; a closed stdout ends
``receive`` quietly and loses nothing; ``stats --watch`` shows time and rates
and notices a queue that is gone; ``demo`` keeps to a queue of its own."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import vsqs

from .support.cli import finish, json_lines, ok, run, said, start


def visible(url: str) -> list[vsqs.Message]:
    with vsqs.Queue(url, create=False) as queue:
        return queue.peek(1_000)


# ------------------------------------------------------------ one rule
@pytest.mark.parametrize(
    ("args", "summary", "fields"),
    [
        (["create", "{q}"], "{q}: visibility_timeout=30s max_receives=None", {"queue"}),
        (["purge", "{q}", "--yes"], "purged 2 messages from {q}", {"queue", "purged"}),
        (["redrive", "{dlq}", "{q}", "--force"], "moved 0 messages from {dlq} to {q}", {"moved"}),
        (["move", "{q}", "{dst}"], "moved 2 messages from {q} to {dst}", {"moved"}),
        (["gc", "{q}"], "removed 0 leftovers from {q}", {"queue", "removed"}),
        (["pump", "{q}", "-n", "10"], "pump: sent 10 messages as producer", {"sent"}),
        (["sink", "{q}", "--idle", "0.2"], "sink: 2 messages from 0 producer(s)", {"received"}),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_summaries_go_to_stderr_and_with_json_to_stdout(
    tmp_path: Path, args: list[str], summary: str, fields: set[str]
) -> None:
    """Before, purge, redrive, create, pump and sink printed theirs on stdout."""
    paths = {name: str(tmp_path / name) for name in ("q", "dlq", "dst")}
    argv = [a.format(**paths) for a in args]
    vsqs.Queue(paths["q"]).send_batch(["a", "b"])
    (line,) = said(*argv).splitlines()
    assert line.startswith(summary.format(**paths))
    vsqs.Queue(paths["q"]).send_batch(["a", "b"])
    done = run(*argv, "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    (report,) = json_lines(done.stdout)
    assert fields <= set(report)


def test_redrive_into_a_queue_that_does_not_name_the_dead_letter_queue_needs_force(
    tmp_path: Path,
) -> None:
    """``redrive jobs jobs-dlq`` (swapped) moved a live queue into its
    dead-letter queue without a word."""
    q, other = str(tmp_path / "jobs"), str(tmp_path / "other")
    vsqs.Queue(q).close()  # names no dead-letter queue
    vsqs.Queue(other).send("stranded")
    refused = run("redrive", other, q)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith("vsqs: error: ") and refused.stderr.count("\n") == 1
    assert [m.body for m in visible(other)] == [b"stranded"] and visible(q) == []
    assert said("redrive", other, q, "--force") == f"moved 1 messages from {other} to {q}\n"
    assert [m.body for m in visible(q)] == [b"stranded"]


# ------------------------------------------------------- closed stdout
def test_receive_delete_into_a_reader_that_leaves_after_one_line_loses_nothing(
    tmp_path: Path,
) -> None:
    """``receive --delete | head -1``: the messages it could not print are
    released (visible again at once), the command exits 0 and says nothing.
    Each body is larger than a pipe's buffer, so the second cannot be written
    once ``head`` has gone."""
    q = str(tmp_path / "q")
    bodies = [f"{i} " + "x" * 200_000 for i in range(5)]
    vsqs.Queue(q).send_batch(bodies)
    receiver = start("receive", q, "--max", "5", "--delete", stdout=subprocess.PIPE, stderr=-1)
    head = subprocess.run(
        ["head", "-n", "1"], stdin=receiver.stdout, capture_output=True, timeout=120
    )
    assert receiver.stdout is not None
    receiver.stdout.close()
    status, _, err = finish(receiver)
    assert (status, err) == (0, "")
    assert head.stdout.decode() == bodies[0] + "\n"
    with vsqs.Queue(q) as queue:
        assert queue.stats().in_flight == 0
    assert [m.body.decode() for m in visible(q)] == bodies[1:]
    assert all(m.receive_count == 1 for m in visible(q))


# ------------------------------------------------------------ stats --watch
def test_stats_watch_shows_the_time_and_the_backlog_rate(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    vsqs.Queue(q).close()
    proc = start("stats", q, "--watch", "--json", "--interval", "0.1", stdout=-1, stderr=-1)
    assert proc.stdout is not None

    def refresh() -> dict[str, Any]:
        line = proc.stdout.readline() if proc.stdout else b""
        assert line, "stats --watch ended"
        doc: dict[str, Any] = json.loads(line)
        return doc

    first = refresh()
    assert first["backlog_change"] is None and first["ready"] == 0
    seen = [first]
    vsqs.Queue(q).send_batch(["a"] * 5)
    while seen[-1]["ready"] < 5:
        seen.append(refresh())
    for before, after in itertools.pairwise(seen):
        grew = after["ready"] - before["ready"]
        assert (after["backlog_change"] > 0) if grew else (after["backlog_change"] == 0)
        assert datetime.fromisoformat(after["time"]) > datetime.fromisoformat(before["time"])
    shutil.rmtree(q)
    status, _, err = finish(proc)
    assert status == 1
    assert err == f"vsqs: error: {q}: the queue directory was removed while open: reopen it\n"


def test_stats_watch_as_a_table_shows_the_time_and_the_change(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    vsqs.Queue(q).send("a")
    tables = ok("stats", q, "--watch", "--interval", "0.1", "--count", "2").split("\n\n")
    assert tables[-1] == ""
    first, second = ({row[:21].strip(): row[21:] for row in t.splitlines()} for t in tables[:2])
    assert datetime.fromisoformat(first["time"]) <= datetime.fromisoformat(second["time"])
    assert first["backlog change"] == "- (sends - deletes)"
    assert second["backlog change"] == "+0.0 msg/s (sends - deletes)"
    assert second["ready"] == "1"


# -------------------------------------------------------------------- demo
@pytest.mark.processes  # a producer and consumer processes
def test_demo_uses_a_queue_of_its_own_and_leaves_others_alone(tmp_path: Path) -> None:
    """With two foreign messages in DIR/jobs, the demo reported '202 acked ...
    lost -2', failed, and left the queue empty."""
    jobs = str(tmp_path / "jobs")
    vsqs.Queue(jobs).send_batch(["foreign 1", "foreign 2"])
    report = said("demo", "-n", "300", "-c", "2", "--dir", str(tmp_path))
    (kept,) = tmp_path.glob("vsqs-demo-*")
    assert report.startswith(f"queue {kept / 'jobs'}: 300 sent, 300 acked by 2 consumers")
    assert report.endswith("duplicates 0, lost 0\n")
    foreign = visible(jobs)
    assert [(m.body, m.receive_count) for m in foreign] == [(b"foreign 1", 0), (b"foreign 2", 0)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs", kept.name]


#: A client library that logs its retries with a traceback (as gcsfs does)
#: before the store gives up.
NOISY_STORE = """
import logging, sys
import vsqs, vsqs.cli, vsqs.stores

def noisy(url, options):
    try:
        raise ConnectionError("connect call failed")
    except ConnectionError:
        logging.getLogger("somelib.retry").error("out of retries", exc_info=True)
    raise vsqs.StorageError(f"opening {url}: connect call failed")

vsqs.stores.register_scheme("noisy", noisy)
vsqs.cli.run(sys.argv[1:])
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_a_client_librarys_log_records_show_only_with_v(tmp_path: Path, verbose: bool) -> None:
    """``vsqs send gs://...`` without network printed four gcsfs tracebacks
    before its one-line error."""
    argv = ["send", "noisy://b/q", "x", *(["-v"] if verbose else [])]
    done = subprocess.run(
        [sys.executable, "-c", NOISY_STORE, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    if verbose:
        assert "vsqs: ERROR: out of retries" in done.stderr and "Traceback" in done.stderr
    else:
        assert done.stderr == "vsqs: error: opening noisy://b/q: connect call failed\n"
