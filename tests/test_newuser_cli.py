"""What a new user of the ``vsqs`` command hits (issue 31): each test failed
before its fix. The console script runs for real, in subprocesses."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores._location import check_s3_endpoints

from .support.cli import json_lines, ok, run
from .support.moto_server import moto_s3
from .support.servers import Server


# ------------------------------------------------------- send: empty stdin
def test_an_empty_stdin_sends_nothing_unless_allow_empty_is_given(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    refused = run("send", q, input=b"")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--allow-empty" in refused.stderr
    assert not (tmp_path / "q").exists(), "the queue was created for nothing"
    (sent,) = ok("send", q, "--allow-empty", input=b"").split()
    ok("send", q, input=b"\n")  # a line, if an empty one, is a body someone typed
    with vsqs.Queue(q) as queue:
        got = queue.receive_batch(10)
    assert [(m.id, m.body) for m in got][:1] == [(sent, b"")] and len(got) == 2


# --------------------------------------------------- receive, peek: -0/--null
def test_null_ends_each_body_with_a_nul_so_bodies_with_newlines_stay_apart(
    tmp_path: Path,
) -> None:
    q = str(tmp_path / "q")
    bodies = [b"two\nlines", b"", b"last\n"]
    with vsqs.Queue(q) as queue:
        queue.send_batch(bodies, group="g")
    for command in ("peek", "receive"):
        done = run(command, q, "--max", "5", "-0")
        assert done.returncode == 0, done.stderr
        assert done.stdout.encode().split(b"\0") == [*bodies, b""], command
    assert ok("peek", q, "--null") == "", "receive -0 received them"
    both = run("receive", q, "--json", "--null")
    assert both.returncode == 2 and "not both" in both.stderr
    for command in ("receive", "peek"):
        helped = ok(command, "--help")
        assert "-0, --null" in helped and "--json is the safe form" in " ".join(helped.split())


# ---------------------------------------------------- queues: a broken queue
def test_queues_lists_the_others_and_a_row_with_the_error_of_a_broken_queue(
    tmp_path: Path,
) -> None:
    for name in ("a", "old", "torn", "z"):
        vsqs.Queue(tmp_path / name).close()
    vsqs.Queue(tmp_path / "z").send(b"x")
    (tmp_path / "old" / names.CONFIG_NAME).write_text('{"format": 1}')
    (tmp_path / "torn" / names.CONFIG_NAME).write_text('{"format": 3, "visibili')
    done = run("queues", str(tmp_path))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "2 of the 4 queues" in done.stderr
    table = {line.split()[0]: line.split(maxsplit=1)[1] for line in done.stdout.splitlines()}
    assert table[str(tmp_path / "a")].split() == ["0", "0", "0", "-", "-"]
    assert table[str(tmp_path / "z")].split()[0] == "1"
    assert table[str(tmp_path / "old")].startswith("error: ") and "queue format 1" in done.stdout
    assert "unreadable queue config" in table[str(tmp_path / "torn")]
    rows = json_lines(run("queues", str(tmp_path), "--json").stdout)
    assert [("error" in row, row["queue"].rpartition("/")[2]) for row in rows] == [
        (False, "a"),
        (True, "old"),
        (True, "torn"),
        (False, "z"),
    ]
    assert "exit status is then 1" in " ".join(ok("queues", "--help").split())


# ---------------------------------------------------------- format versions
def test_version_names_the_format_and_a_queue_of_another_format_is_refused_with_both(
    tmp_path: Path,
) -> None:
    readable = ", ".join(map(str, names.READABLE_FORMATS))
    expected = f"(queue format {names.FORMAT_VERSION}; reads {readable})"
    assert ok("--version").strip() == f"vsqs, version {version('vsqs')} {expected}"
    vsqs.Queue(tmp_path / "q").close()
    (tmp_path / "q" / names.CONFIG_NAME).write_text('{"format": 5}')
    refused = run("peek", str(tmp_path / "q"))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "queue format 5" in refused.stderr
    assert f"this vsqs writes format {names.FORMAT_VERSION}" in refused.stderr
    assert f"reads formats {readable}" in refused.stderr


# ------------------------------------------------- an endpoint with no scheme
def test_an_s3_endpoint_without_a_scheme_is_one_line_naming_where_it_came_from(
    tmp_path: Path,
) -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ENDPOINT_URL_S3": "",
        "AWS_ENDPOINT_URL": "127.0.0.1:5055",
    }
    for args in (("send", "s3://bucket/q", "x"), ("queues", "s3://bucket")):
        done = run(*args, env=env)
        assert done.returncode == 1 and done.stdout == "", args
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert "AWS_ENDPOINT_URL='127.0.0.1:5055'" in done.stderr
        assert "http://host:port" in done.stderr
    option = run("peek", "s3://bucket/q", "-o", "endpoint_url=localhost:9", env=env)
    assert option.returncode == 1 and "storage option endpoint_url='localhost:9'" in option.stderr
    with pytest.raises(vsqs.InvalidArgument, match=r"^AWS_ENDPOINT_URL='127\.0\.0\.1:5055'"):
        check_s3_endpoints({}, env)
    check_s3_endpoints({"endpoint_url": "http://127.0.0.1:5055"}, env)  # the option wins
    check_s3_endpoints({}, {**env, "AWS_ENDPOINT_URL": "https://s3.example"})


# --------------------------------------- move: options of each object store
def test_move_between_two_object_stores_gives_each_its_own_options(
    tmp_path: Path, s3_server: Server
) -> None:
    """Two moto servers, a bucket on each: no one set of options reaches
    both, so before --source-option and --dest-option no move could."""
    with moto_s3("vsqs-other") as other:
        src, dst = s3_server.url("src"), f"s3://vsqs-other/{tmp_path.name}/dst"
        vsqs.Queue(src, storage_options=s3_server.storage_options).send_batch(["a", "b", "c"])
        shared = ["-o", "key=testing", "-o", "secret=testing"]
        shared += ["-o", "client_kwargs.region_name=us-east-1"]
        endpoints = [
            f"client_kwargs.endpoint_url={options['client_kwargs']['endpoint_url']}"
            for options in (s3_server.storage_options, other)
        ]
        mixed = run("move", src, dst, *shared, "-o", endpoints[0])  # DST's bucket is not there
        assert mixed.returncode == 1 and mixed.stderr.count("\n") == 1
        done = run(
            "move",
            src,
            dst,
            *shared,
            "--source-option",
            endpoints[0],
            "--dest-option",
            endpoints[1],
            "--json",
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["moved"] == 3
        with vsqs.Queue(dst, create=False, storage_options=other) as moved:
            assert [m.body for m in moved.peek(10)] == [b"a", b"b", b"c"]
        with vsqs.Queue(src, storage_options=s3_server.storage_options) as left:
            assert left.peek(10) == []
    bad = run("move", src, dst, "--dest-option", "nokey")
    assert bad.returncode == 2 and "'--dest-option'" in bad.stderr


# ------------------------------------------------------------------ wording
@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("s3:", "names no queue: a queue URL reads 's3://bucket/queue'"),
        ("s3:/", "names no queue: a queue URL reads 's3://bucket/queue'"),
        ("s3:bucket", "names no queue: a queue URL reads 's3://bucket/queue'"),
        ("GS:/", "names no queue: a queue URL reads 'gs://bucket/queue'"),
        ("file:", "names no queue: a queue URL reads 'file:///path/queue'"),
        ("file:/", "names no queue: a queue URL reads 'file:///path/queue'"),
        ("memory:", "names no queue: a queue URL reads 'memory://path/queue'"),
        ("s3:/bucket/q", "did you mean 's3://bucket/q'?"),
    ],
)
def test_a_mistyped_url_is_never_answered_with_a_suggestion_that_names_no_queue(
    tmp_path: Path, typed: str, said: str
) -> None:
    done = run("peek", typed, cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert done.stderr == f"vsqs: error: {typed!r} looks like a mistyped URL" + (
        f": {said}\n" if said.startswith("did") else f" and {said}\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_receipt_of_another_queue_is_not_called_no_longer_current(tmp_path: Path) -> None:
    """A receipt does not name its queue: the error says it may be another's."""
    first, other = str(tmp_path / "first"), str(tmp_path / "other")
    ok("send", first, "x")
    ok("create", other)
    (got,) = json_lines(ok("receive", first, "--json"))
    for command in ("delete", "release"):
        done = run(command, other, got["receipt"])
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        assert "no longer current" not in done.stderr
        assert done.stderr.endswith(
            f"{got['receipt']} is not a current receipt of {other} (its message was deleted "
            "or received again since, or it is another queue's)\n"
        )
    ok("delete", first, got["receipt"])  # still current where it came from
