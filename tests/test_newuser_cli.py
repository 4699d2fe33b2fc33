"""What a new user of the ``vsqs`` command hits (issue 31): each test failed
before its fix. The console script runs for real, in subprocesses."""

from __future__ import annotations

from pathlib import Path

import vsqs

from .support.cli import ok, run


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
