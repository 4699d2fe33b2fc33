"""The ``vsqs`` console script, run for real in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs.cli._load import pump_body

from .support.cli import VSQS, json_lines, ok, run, said
from .support.servers import Server


# ----------------------------------------------------------------- messages
def test_send_from_arguments_stdin_and_file_then_receive_as_json(tmp_path: Path) -> None:
    q = str(tmp_path / "jobs")
    ids = ok("send", q, "one", "two").split()
    ids += ok("send", q, input="three\r\n").split()
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"four\r\nfive\n\nseven")
    ids += ok("send", q, "--file", str(lines)).split()
    assert len(ids) == 7 and ids == sorted(ids)
    got = json_lines(ok("receive", q, "--max", "10", "--json"))
    assert [m["body"] for m in got] == ["one", "two", "three", "four", "five", "", "seven"]
    assert [m["id"] for m in got] == ids
    assert all(m["receive_count"] == 1 and m["receipt"] for m in got)
    receipts = "".join(m["receipt"] + "\n" for m in got)
    ok("delete", q, "-", input=receipts)
    assert vsqs.Queue(q).stats().in_flight == 0


def test_raw_stdin_keeps_every_byte_and_json_carries_non_utf8_as_base64(tmp_path: Path) -> None:
    q = str(tmp_path / "bin")
    body = b"\x00\xff binary\n"
    ok("send", q, "--raw", input=body)
    (message,) = json_lines(ok("receive", q, "--json"))
    assert "body" not in message
    import base64

    assert base64.b64decode(message["body_base64"]) == body


def test_pipeline_receive_delete_into_send(tmp_path: Path) -> None:
    source, target = str(tmp_path / "a"), str(tmp_path / "b")
    bodies = [f"job {i}" for i in range(120)]
    vsqs.Queue(source).send_batch(bodies)
    vsqs.Queue(target).close()
    assert VSQS is not None
    receiver = subprocess.Popen(
        [VSQS, "receive", source, "--max", "1000", "--delete"], stdout=subprocess.PIPE
    )
    sender = subprocess.run(
        [VSQS, "send", target, "--file", "-"],
        stdin=receiver.stdout,
        capture_output=True,
        timeout=60,
    )
    assert receiver.wait(timeout=60) == 0 and sender.returncode == 0, sender.stderr
    assert vsqs.Queue(source).stats().ready == 0
    with vsqs.Queue(target) as q:
        assert [m.body.decode() for m in q.receive_batch(200)] == bodies


def test_extend_release_and_stale_receipts(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "x")
    (first,) = json_lines(ok("receive", q, "--json", "--visibility-timeout", "60"))
    new_receipt = ok("extend", q, first["receipt"], "--visibility-timeout", "120").strip()
    assert new_receipt != first["receipt"] and new_receipt.startswith(first["id"])
    stale = run("delete", q, first["receipt"])
    assert stale.returncode == 1 and f"not a current receipt of {q}" in stale.stderr
    assert stale.stderr.count("\n") == 1 and "Traceback" not in stale.stderr
    ok("release", q, new_receipt)
    (again,) = json_lines(ok("receive", q, "--json"))
    assert again["id"] == first["id"] and again["receive_count"] == 2


def test_every_receipt_is_tried_and_each_stale_one_is_a_line(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "a", "b")
    got = json_lines(ok("receive", q, "--max", "2", "--json"))
    ok("delete", q, got[1]["receipt"])
    done = run("delete", q, got[1]["receipt"], got[0]["receipt"], got[1]["receipt"])
    assert done.returncode == 1
    assert done.stderr.count("not a current receipt") == 2 and done.stderr.count("\n") == 2
    assert vsqs.Queue(q).stats().in_flight == 0, "the good receipt between them was not deleted"


def test_peek_changes_nothing(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "a", "b", "c")
    assert ok("peek", q, "--max", "2") == "a\nb\n"
    assert [m["body"] for m in json_lines(ok("peek", q, "--json"))] == ["a", "b", "c"]
    assert vsqs.Queue(q).stats().ready == 3


def test_peek_json_says_where_a_dead_letter_came_from(tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "jobs", max_receives=1, dead_letter="jobs-dlq") as q:
        q.send("poison")
        assert q.receive(visibility_timeout=0) is not None
        assert q.receive() is None  # the second receive dead-letters it
    (peeked,) = json_lines(ok("peek", str(tmp_path / "jobs-dlq"), "--json"))
    origin = peeked["dead_lettered"]
    assert origin["source"].endswith("/jobs") and origin["receive_count"] == 1
    assert origin["at"].endswith("+00:00")
    ok("send", str(tmp_path / "jobs"), "fine")
    (plain,) = json_lines(ok("peek", str(tmp_path / "jobs"), "--json"))
    assert plain["dead_lettered"] is None


def test_receive_waits_and_prints_nothing_on_an_empty_queue(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    vsqs.Queue(q).close()
    assert ok("receive", q, "--wait", "0.3") == ""


# -------------------------------------------------------------- operations
def test_stats_table_json_and_watch(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "a", "b")
    ok("send", q, "later", "--delay", "600")
    table = ok("stats", q)
    assert "ready" in table and " 2\n" in table
    figures = json.loads(ok("stats", q, "--json"))
    assert figures["queue"] == q and (figures["ready"], figures["delayed"]) == (2, 1)
    assert 590 < figures["next_visible_in"] <= 600 and figures["dead_letter"] is None
    watched = json_lines(ok("stats", q, "--json", "--watch", "--interval", "0.1", "--count", "3"))
    assert len(watched) == 3 and all(w["ready"] == 2 for w in watched)


def test_purge_asks_first(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "a", "b", "c")
    refused = run("purge", q, input="n\n")
    assert refused.returncode == 1 and "Delete all 3 messages" in refused.stderr
    assert vsqs.Queue(q).stats().ready == 3
    assert "purged 3 messages" in said("purge", q, input="y\n")
    ok("send", q, "d")
    assert said("purge", q, "--yes") == f"purged 1 messages from {q}\n"


def test_dead_letter_queues_listing_and_redrive(tmp_path: Path) -> None:
    q, dlq = str(tmp_path / "orders"), str(tmp_path / "orders-dlq")
    ok("create", q, "--max-receives", "1", "--dead-letter", "orders-dlq")
    ok("send", q, "poison")
    ok("receive", q, "--visibility-timeout", "0")
    assert ok("receive", q) == ""  # the second receive dead-letters it
    listed = {row["queue"]: row for row in json_lines(ok("queues", str(tmp_path), "--json"))}
    assert set(listed) == {q, dlq}
    assert listed[q]["dead_letter"] == 1 and listed[dlq]["ready"] == 1
    table = ok("queues", str(tmp_path))
    assert table.splitlines()[0].split()[:2] == ["QUEUE", "READY"]
    assert said("redrive", dlq, q) == f"moved 1 messages from {dlq} to {q}\n"
    assert ok("receive", q) == "poison\n"


def test_a_redrive_into_itself_is_refused_and_a_missing_dead_letter_queue_holds_nothing(
    tmp_path: Path,
) -> None:
    """A redrive of a queue into itself never ended, also under another name
    (a symlink); one from a dead-letter queue that was never created failed
    where stats() counts 0, and one from a misspelling of it said 0."""
    q = str(tmp_path / "jobs")
    ok("create", q, "--max-receives", "3", "--dead-letter", "jobs-dlq")
    ok("send", q, "x")
    (tmp_path / "alias").symlink_to(tmp_path / "jobs")
    for other, alias in (
        (q, ""),
        (str(tmp_path / "alias"), f" ({tmp_path / 'alias'} is the same queue)"),
    ):
        done = run("redrive", q, other, "--force")  # run() gives up after 120 s
        assert done.returncode == 1
        assert done.stderr == f"vsqs: error: cannot redrive {q} into itself{alias}\n"
    assert "moved 0 messages" in said("redrive", str(tmp_path / "jobs-dlq"), q)
    misspelled = run("redrive", str(tmp_path / "jobs-dql"), q)
    assert misspelled.returncode == 1 and misspelled.stderr.count("\n") == 1
    assert (
        f"dead-letters to {tmp_path / 'jobs-dlq'}, not {tmp_path / 'jobs-dql'}" in misspelled.stderr
    )
    assert not (tmp_path / "jobs-dlq").exists() and not (tmp_path / "jobs-dql").exists()
    assert json.loads(ok("stats", q, "--json"))["ready"] == 1


def test_gc_removes_only_stale_leftovers_and_says_which(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "keep")
    stale = names.new_name(f"{1_000_000_000_000:013d}-0000-{'0' * 16}")
    (tmp_path / "q" / stale).write_bytes(b"half")
    (tmp_path / "q" / "notes.txt").write_bytes(b"foreign")
    done = run("gc", q)
    assert done.returncode == 0 and done.stdout == stale + "\n"
    assert "removed 1 leftovers" in done.stderr
    assert sorted(p.name for p in (tmp_path / "q").iterdir() if not p.name.startswith("1")) == [
        "notes.txt",
        names.CONFIG_NAME,
    ]
    assert vsqs.Queue(q).stats().ready == 1


def test_pump_and_sink(tmp_path: Path) -> None:
    q = str(tmp_path / "load")
    assert "sent 500 messages" in said("pump", q, "-n", "500", "--batch", "50", "--size", "64")
    report = said("sink", q, "--idle", "0.5")
    assert "500 messages from 1 producer(s)" in report
    assert "duplicates 0, out of order 0, gaps 0, foreign 0" in report


def test_sink_fails_on_messages_out_of_order(tmp_path: Path) -> None:
    q = str(tmp_path / "load")
    vsqs.Queue(q).send_batch([pump_body("p1", 1, 0), pump_body("p1", 0, 0), b"other"])
    done = run("sink", q, "--idle", "0.3")
    assert done.returncode == 1, done.stderr
    summary, error = done.stderr.splitlines()
    assert "out of order 1" in summary and "foreign 1" in summary
    assert error == "vsqs: error: sink found duplicates or messages out of order"


@pytest.mark.processes  # a producer and two consumer processes
def test_demo_runs_and_checks_itself(tmp_path: Path) -> None:
    report = said("demo", "-n", "400", "-c", "2", "--dir", str(tmp_path))
    assert "400 sent, 400 acked by 2 consumers" in report
    assert "duplicates 0, lost 0" in report


# ---------------------------------------------------------- configuration
def test_environment_defaults(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    created = said("create", q, env={"VSQS_VISIBILITY_TIMEOUT": "7"})
    assert "visibility_timeout=7s" in created
    assert vsqs.Queue(q).config.visibility_timeout == 7
    logged = run("purge", q, "--yes", env={"VSQS_LOG_LEVEL": "info"})
    assert "vsqs: INFO: " in logged.stderr and "purged 0 messages" in logged.stderr
    bad = run("stats", q, env={"VSQS_DURABLE": "maybe"})
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "VSQS_DURABLE" in bad.stderr
    bad = run("stats", q, env={"VSQS_LOG_LEVEL": "loud"})
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "VSQS_LOG_LEVEL" in bad.stderr
    assert "ERROR or CRITICAL" in bad.stderr
    for level in ("error", "CRITICAL"):
        assert run("stats", q, env={"VSQS_LOG_LEVEL": level}).returncode == 0


def test_create_sets_every_queue_default(tmp_path: Path) -> None:
    """``create`` had no option for the retry delays or the maximum size (only
    the library and VSQS_* set them); what it prints is the whole config."""
    q = str(tmp_path / "q")
    argv = ["--retry-delay", "2", "--max-retry-delay", "60", "--max-message-size", "1000"]
    created = json.loads(ok("create", q, *argv, "--json"))
    assert created | {"queue": q} == {
        "queue": q,
        "visibility_timeout": 30.0,
        "max_receives": None,
        "dead_letter": None,
        "retry_delay": 2.0,
        "max_retry_delay": 60.0,
        "max_message_size": 1000,
        "dedup_window": 300.0,
        "content_dedup": False,
        "dead_letter_blocks_group": False,
        "format": 4,
    }
    config = vsqs.Queue(q).config
    assert (config.retry_delay, config.max_retry_delay, config.max_message_size) == (2, 60, 1000)
    assert "retry_delay=2s max_retry_delay=60s max_message_size=1000" in said("create", q)
    too_big = run("send", q, "x" * 1001)
    assert too_big.returncode == 1 and "at most 1,000" in too_big.stderr
    for bad in (["--retry-delay", "3"], ["--retry-delay", "0.001"], ["--max-message-size", "0"]):
        done = run("create", str(tmp_path / "q2" if "0.001" in bad else q), *bad)
        assert done.returncode in (1, 2) and done.stderr.count("\n") == 1, done.stderr


def test_s3_queue_from_store_environment_and_options(s3_server: Server) -> None:
    url = s3_server.url("cli")
    client = s3_server.storage_options["client_kwargs"]
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": client["endpoint_url"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    ok("send", url, "over s3", env=env)
    endpoint = f"client_kwargs.endpoint_url={client['endpoint_url']}"
    options = ["-o", "key=testing", "-o", "secret=testing", "-o", endpoint]
    (message,) = json_lines(ok("receive", url, "--json", "--delete", *options))
    assert message["body"] == "over s3"
    assert json.loads(ok("stats", url, "--json", env=env))["in_flight"] == 0
    # Before: a TypeError traceback from botocore's session at the first request.
    bad = run("send", url, "x", *options, "-o", "retries=3", "-o", "bogus=1")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "s3fs takes no storage option bogus, retries" in bad.stderr


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "args",
    [
        ["receive"],
        ["receive", "{q}", "--max", "0"],
        ["receive", "{q}", "--wait", "-1"],
        ["send", "{q}", "x", "--file", "{q}/../lines"],
        ["stats", "{q}", "-o", "novalue"],
        ["extend", "{q}", "receipt"],
        ["no-such-command"],
        ["purge", "{q}", "--force"],
    ],
)
def test_bad_usage_exits_2_with_one_line(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "lines").write_text("x\n")
    q = str(tmp_path / "q")
    done = run(*[a.format(q=q) for a in args])
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "error:" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ["receive", "{q}/missing"],
        ["send", "{q}/missing", "x", "--no-create"],
        ["delete", "{q}", "../../etc/passwd"],
        ["send", "{q}/bad name", "x"],
        ["send", "nosuchscheme://bucket/q", "x"],
        ["queues", "{q}/missing"],
    ],
)
def test_errors_exit_1_with_one_line_and_a_traceback_only_with_v(
    tmp_path: Path, args: list[str]
) -> None:
    vsqs.Queue(tmp_path / "q").close()
    argv = [a.format(q=str(tmp_path / "q")) for a in args]
    done = run(*argv)
    assert done.returncode == 1
    assert done.stderr.startswith("vsqs: error: ") and done.stderr.count("\n") == 1
    verbose = run(*argv, "-v")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr
    assert not (tmp_path / "q" / "missing").exists()


@pytest.mark.slow  # 3000 sends drawn on a terminal
def test_a_progress_bar_is_drawn_when_only_stderr_is_a_terminal(tmp_path: Path) -> None:
    """``vsqs send q --file x > ids.txt`` showed no bar: stdout was not a terminal."""
    import fcntl
    import pty
    import struct
    import termios
    import threading

    lines = tmp_path / "lines.txt"
    lines.write_text("x\n" * 3000)
    master, terminal = pty.openpty()
    fcntl.ioctl(
        terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0)
    )  # tqdm needs a width
    drawn: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal side is closed
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert VSQS is not None
        done = subprocess.run(
            [VSQS, "send", str(tmp_path / "q"), "--file", str(lines)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=terminal,
            timeout=120,
        )
    finally:
        os.close(terminal)
        reader.join(60)
        os.close(master)
    assert done.returncode == 0 and len(done.stdout.split()) == 3000
    assert b"msg" in b"".join(drawn)  # tqdm's bar, with its unit


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3:/demo/jobs", "did you mean 's3://demo/jobs'?"),
        ("s3:demo/jobs", "did you mean 's3://demo/jobs'?"),
        ("GS:/bucket/q", "did you mean 'gs://bucket/q'?"),
        ("http://127.0.0.1:9/q", "http://127.0.0.1:9/q: a web server cannot hold a queue"),
        ("HTTPS://127.0.0.1:9/q", "https://127.0.0.1:9/q: a web server cannot hold a queue"),
        ("MEMORY://vsqs-cli/q", ""),
        ("file:/{tmp}/q", "did you mean 'file:///{tmp}/q'?"),
        ("file://tmp/q", "names the host 'tmp': a local directory is 'file:///tmp/q'"),
        (" s3://demo/jobs", "' s3' is not a URL scheme (spaces around it?)"),
        ("s3 ://demo/jobs", "'s3 ' is not a URL scheme (spaces around it?)"),
    ],
)
def test_a_misspelled_url_is_refused_in_one_line_naming_it(url: str, says: str) -> None:
    """Before: local directories named 's3:' and 'gs:' and exit 0, 'no vsqs
    backend for s3://' for 'S3://' or ' s3://', a network request for
    http://, a suggestion of 'file://tmp/q' (which fsspec takes for the
    relative path tmp/q) for 'file:/tmp/q'."""
    # A short directory: the message quotes 80 characters of a path, and
    # pytest's tmp_path under an xdist worker is longer.
    with tempfile.TemporaryDirectory(prefix="vsqs-") as short:
        tmp = short.lstrip("/")
        done = run("send", url.format(tmp=tmp), "x", cwd=Path(short))
        if not says:  # an upper-case scheme is the same scheme
            assert done.returncode == 0, done.stderr
            return
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1 and says.format(tmp=tmp) in done.stderr, done.stderr
        assert list(Path(short).iterdir()) == []


def test_a_file_url_may_name_localhost(tmp_path: Path) -> None:
    """RFC 8089: ``file://localhost/p`` is ``/p`` (it made ./localhost/p)."""
    ok("send", f"file://localhost{tmp_path}/q", "x", cwd=tmp_path)
    assert [m.body for m in vsqs.Queue(tmp_path / "q").peek()] == [b"x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q"]


@pytest.mark.parametrize("directory", ["s3://demo", "s3:/demo", "gs:bucket"])
def test_the_demo_refuses_a_url_for_its_directory(tmp_path: Path, directory: str) -> None:
    """``demo --dir s3://demo`` made ./s3:/demo/vsqs-demo-XXXX and left it."""
    done = run("demo", "--dir", directory, "-n", "10", cwd=tmp_path)
    assert done.returncode == 2 and "is a URL" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_a_bare_vsqs_prints_the_help_not_an_error() -> None:
    done = run()
    assert done.returncode == 2
    assert done.stderr.startswith("Usage: vsqs [OPTIONS] COMMAND")
    assert "error" not in done.stderr.splitlines()[0]
    assert "  send " in done.stderr


def test_help_and_version() -> None:
    text = ok("--help")
    for command in ("send", "receive", "stats", "purge", "redrive", "gc", "queues", "pump"):
        assert f"  {command} " in text
    assert vsqs.__version__ in ok("--version")
    assert "--visibility-timeout" in ok("receive", "-h")


def test_python_dash_m_runs_the_same_command(tmp_path: Path) -> None:
    q = str(tmp_path / f"q{uuid.uuid4().hex[:6]}")
    done = subprocess.run(
        [sys.executable, "-m", "vsqs", "send", q, "x"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and len(done.stdout.split()) == 1, done.stderr
