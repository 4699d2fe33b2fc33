"""``vsqs move SRC DST`` through the real console script: nothing is lost,
whatever fails or stops it (issue 16: the README's ``receive --delete |
send`` recipe lost the messages of a failed ``send``)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

import vsqs

from .support.cli import exit_status, interrupted_midway, ok, run, said
from .support.fault_proxy import FaultProxy
from .support.servers import Server, proxied


def bodies_of(url: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The bodies of the visible messages of a queue, in order (changing nothing)."""
    with vsqs.Queue(url, create=False, storage_options=storage_options) as queue:
        return [m.body.decode() for m in queue.peek(1_000_000)]


def counts(url: str) -> tuple[int, int]:
    with vsqs.Queue(url, create=False) as queue:
        s = queue.stats()
    return s.ready, s.in_flight


def test_move_moves_every_visible_message_in_order_and_says_how_many(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    sent = [f"job {i}" for i in range(250)]
    with vsqs.Queue(src) as queue:
        queue.send_batch(sent)
        queue.send("later", delay=600)  # not visible: stays
    assert said("move", src, dst, "--batch", "40") == f"moved 250 messages from {src} to {dst}\n"
    assert bodies_of(dst) == sent
    with vsqs.Queue(src) as queue:
        s = queue.stats()
    assert (s.ready, s.in_flight, s.delayed) == (0, 0, 1)


def test_move_stops_after_max_and_a_second_run_resumes(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    sent = [f"job {i}" for i in range(25)]
    vsqs.Queue(src).send_batch(sent)
    first = json.loads(ok("move", src, dst, "--max", "10", "--batch", "3", "--json"))
    assert first == {"moved": 10, "source": src, "destination": dst}
    assert bodies_of(dst) == sent[:10] and bodies_of(src) == sent[10:]
    assert json.loads(ok("move", src, dst, "--json"))["moved"] == 15
    assert bodies_of(dst) == sent and counts(src) == (0, 0)


def test_a_move_into_itself_or_into_a_file_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    vsqs.Queue(src).send_batch(["a", "b", "c"])
    itself = run("move", src, src)
    assert itself.returncode == 1
    assert itself.stderr == f"vsqs: error: cannot move {src} into itself\n"
    (tmp_path / "alias").symlink_to(tmp_path / "src")  # it moved 23 858 copies in 10 s
    alias = str(tmp_path / "alias")
    itself = run("move", src, alias)
    assert itself.returncode == 1
    assert (
        itself.stderr == f"vsqs: error: cannot move {src} into itself ({alias} is the same queue)\n"
    )
    (tmp_path / "file").write_text("not a queue")
    blocked = run("move", src, str(tmp_path / "file"))
    assert blocked.returncode == 1, blocked.stderr
    assert blocked.stderr.startswith("vsqs: error: ") and blocked.stderr.count("\n") == 1
    assert bodies_of(src) == ["a", "b", "c"] and counts(src) == (3, 0)
    assert (tmp_path / "file").read_text() == "not a queue"


def test_move_from_a_local_queue_to_s3(tmp_path: Path, s3_server: Server) -> None:
    src, dst = str(tmp_path / "src"), s3_server.url("moved")
    sent = [f"job {i}" for i in range(120)]
    vsqs.Queue(src).send_batch(sent)
    options = s3_server.storage_options
    endpoint = f"client_kwargs.endpoint_url={options['client_kwargs']['endpoint_url']}"
    cli_options = ["-o", f"key={options['key']}", "-o", f"secret={options['secret']}"]
    assert "moved 120 messages" in said("move", src, dst, *cli_options, "-o", endpoint)
    assert bodies_of(dst, storage_options=options) == sent and counts(src) == (0, 0)


def test_a_destination_that_fails_half_way_loses_nothing_and_holds_nothing(
    tmp_path: Path, s3_server: Server, s3_proxy: FaultProxy
) -> None:
    """S3 answers 500 to every PUT from some point on: the batch under way is
    given back to SRC at once, what was moved before is reported exactly."""
    src, dst = str(tmp_path / "src"), s3_server.url("failing")
    sent = [f"job {i}" for i in range(300)]
    vsqs.Queue(src).send_batch(sent)
    options = proxied(s3_server, s3_proxy)
    vsqs.Queue(dst, storage_options=options).close()
    # From the sixth PUT on: the capability probe's, then one a batch
    # (of 50: one bundle).
    s3_proxy.arm("500", at=6, every=True, where=lambda method, _path: method == "PUT")
    endpoint = f"client_kwargs.endpoint_url={s3_proxy.endpoint}"
    failed = run(
        "move",
        src,
        dst,
        "--batch",
        "50",
        "--json",
        *["-o", "key=testing", "-o", "secret=testing", "-o", endpoint],
        "-o",
        'config_kwargs={"retries": {"max_attempts": 1}}',
    )
    assert failed.returncode == 1
    (line,) = failed.stderr.splitlines()
    assert line.startswith("vsqs: error: ")
    s3_proxy.disarm()
    report = json.loads(failed.stdout)
    left = bodies_of(src)
    assert counts(src) == (len(left), 0), "a batch stayed held at SRC"
    assert report["moved"] == len(sent) - len(left)
    assert line.endswith(f"; so far: moved {report['moved']} messages from {src} to {dst}")
    arrived = bodies_of(dst, storage_options=options)
    assert 0 < report["moved"] < len(sent) and len(arrived) >= report["moved"]
    assert set(left) | set(arrived) == set(sent), "a message was lost"
    assert set(left).isdisjoint(sent[: report["moved"]]), "a message moved was not deleted"


def test_a_message_too_large_for_the_destination_is_named_and_the_ones_before_it_move(
    tmp_path: Path,
) -> None:
    """It said only 'message 50 of the batch is 200 bytes', and moved none of
    that batch."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    ids = vsqs.Queue(src).send_batch(["a", "b", "c" * 200, "d"])
    ok("create", dst, "--max-message-size", "100")
    failed = run("move", src, dst)
    assert failed.returncode == 1
    assert failed.stderr == (
        f"vsqs: error: message {ids[2]} of {src} is 200 bytes; {dst} takes at most 100 "
        f"(its max_message_size); so far: moved 2 messages from {src} to {dst}\n"
    )
    assert bodies_of(dst) == ["a", "b"] and bodies_of(src) == ["c" * 200, "d"]
    assert counts(src) == (2, 0)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_move_reports_exactly_what_moved_and_gives_back_the_rest(
    tmp_path: Path, signum: int
) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    sent, done = interrupted_midway(signum, src, "move", src, dst, "--batch", "10", empty=(dst,))
    assert done.returncode == exit_status(signum) and done.stdout == ""
    name = signal.Signals(signum).name
    left, arrived = bodies_of(src), bodies_of(dst)
    assert counts(src) == (len(left), 0), "a batch stayed held at SRC"
    moved = len(sent) - len(left)
    assert (
        done.stderr
        == f"vsqs: interrupted by {name}: moved {moved:,} messages from {src} to {dst}\n"
    )
    assert arrived == sent[:moved] and left == sent[moved:]
