"""``vsqs consume QUEUE -- CMD``: the real console script running real
commands on a real directory. Every outcome is counted from what the
commands wrote (one JSON line per run in ``runs``) and from the queue;
commands wait on files, never on time, and every wait is bounded by
``DEADLINE``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs.cli._consume import COMMAND_ENV

from .support.cli import DEADLINE, exit_status, finish, ready, run, start, until

pytestmark = pytest.mark.processes  # a command process per message

#: The command of these tests: ``python worker.py OUT MODE [ARG]``. It
#: appends a JSON line to OUT/runs (its body, in hex, its environment, its
#: pid), then acts by MODE: ``ok`` exits 0; ``fail`` exits 3; ``barrier N``
#: makes OUT/started/ID and exits 0 once N such files exist (3 if they do not
#: within DEADLINE: the commands did not run side by side); ``hang`` makes
#: OUT/started/ID and sleeps for ever; ``hang-first`` hangs at its first
#: receive, exits 0 at the next; ``stubborn-first`` too, ignoring SIGTERM;
#: ``wait`` makes OUT/started/ID and exits 0 once OUT/go exists; ``group``
#: holds OUT/lock-GROUP (made exclusively: a command finding it made already
#: appends to OUT/overlaps) until another group's lock exists too (or 0.5 s
#: passed), so that two of a group run side by side would overlap there.
WORKER = textwrap.dedent(
    f"""
    import json, os, sys, time
    from pathlib import Path
    out, mode, arg = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    body = sys.stdin.buffer.read()
    env = {{k: os.environ.get(k) for k in {COMMAND_ENV!r}}}
    line = json.dumps({{"body": body.hex(), "env": env, "pid": os.getpid()}})
    with open(out / "runs", "a") as f:
        f.write(line + "\\n")
    me = env["VSQS_MESSAGE_ID"]
    def until(ready):
        give_up = time.monotonic() + {DEADLINE}
        while not ready():
            if time.monotonic() > give_up:
                sys.exit(3)
            time.sleep(0.005)
    first = env["VSQS_RECEIVE_COUNT"] == "1"
    hang = mode == "hang" or (mode in ("hang-first", "stubborn-first") and first)
    if mode == "stubborn-first":
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hang or mode in ("barrier", "wait"):
        (out / "started").mkdir(exist_ok=True)
        (out / "started" / me).touch()
    if mode == "fail":
        sys.exit(3)
    if mode == "barrier":
        until(lambda: len(os.listdir(out / "started")) >= int(arg[0]))
    if hang:
        while True:
            time.sleep(3600)
    if mode == "wait":
        until((out / "go").exists)
    if mode == "group":
        lock = out / ("lock-" + env["VSQS_GROUP"])
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            with open(out / "overlaps", "a") as f:
                f.write(me + "\\n")
        else:  # held until another group's command holds its lock too (0.5 s at most)
            os.close(fd)
            others = lambda: [n for n in os.listdir(out) if n.startswith("lock-")] != [lock.name]
            give_up = time.monotonic() + 0.5
            while not others() and time.monotonic() < give_up:
                time.sleep(0.005)
            os.unlink(lock)
    """
)


class Worker:
    """The command of a test and what its runs wrote."""

    def __init__(self, tmp_path: Path) -> None:
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.script = tmp_path / "worker.py"
        self.script.write_text(WORKER)

    def argv(self, mode: str, *arg: str) -> list[str]:
        return ["--", sys.executable, str(self.script), str(self.out), mode, *arg]

    def runs(self) -> list[dict[str, Any]]:
        path = self.out / "runs"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def started(self) -> list[str]:
        folder = self.out / "started"
        return sorted(os.listdir(folder)) if folder.exists() else []


@pytest.fixture
def worker(tmp_path: Path) -> Worker:
    return Worker(tmp_path)


def queue_with(tmp_path: Path, bodies: list[bytes], **config: Any) -> tuple[str, list[str]]:
    """A queue (retry delay 10 ms) holding ``bodies``; its url and their ids."""
    url = str(tmp_path / "q")
    with vsqs.Queue(url, retry_delay=0.01, max_retry_delay=0.05, **config) as q:
        ids = [q.send(body) for body in bodies]
    return url, ids


def remaining(url: str) -> vsqs.QueueStats:
    with vsqs.Queue(url, create=False) as q:
        return q.stats()


def test_each_message_runs_its_command_once_with_its_body_and_environment(
    tmp_path: Path, worker: Worker
) -> None:
    bodies = [f"job {i}".encode() for i in range(20)]
    bodies.append(b"a\0b\n\nline\r\n\0")  # NULs and newlines arrive intact
    url, ids = queue_with(tmp_path, bodies)
    with vsqs.Queue(url) as q:
        ids.append(q.send(b"grouped", group="g1", attributes={"kind": "x", "n": "1"}))
    done = run("consume", url, "--idle-timeout", "1", *worker.argv("ok"))
    assert done.returncode == 0, done.stderr
    runs = worker.runs()
    assert Counter(r["env"]["VSQS_MESSAGE_ID"] for r in runs) == Counter(ids)  # each once
    by_id = {r["env"]["VSQS_MESSAGE_ID"]: r for r in runs}
    assert [bytes.fromhex(by_id[i]["body"]) for i in ids] == [*bodies, b"grouped"]
    plain, grouped = by_id[ids[0]]["env"], by_id[ids[-1]]["env"]
    assert plain["VSQS_RECEIVE_COUNT"] == "1" and plain["VSQS_QUEUE"] == url
    assert plain["VSQS_GROUP"] == "" and json.loads(plain["VSQS_ATTRIBUTES"]) == {}
    assert plain["VSQS_RECEIPT"] and plain["VSQS_RECEIPT"] != plain["VSQS_MESSAGE_ID"]
    assert grouped["VSQS_GROUP"] == "g1"
    assert json.loads(grouped["VSQS_ATTRIBUTES"]) == {"kind": "x", "n": "1"}
    stats = remaining(url)
    assert stats.ready + stats.in_flight + stats.delayed == 0  # exit 0 acknowledged each
    assert done.stderr == f"handled 22 messages from {url}: 22 succeeded, 0 failed " + (
        "(0 timed out), 0 released\n"
    )


def test_a_failing_command_releases_its_message_and_it_is_dead_lettered(
    tmp_path: Path, worker: Worker
) -> None:
    dlq = str(tmp_path / "dlq")
    url, [mid] = queue_with(tmp_path, [b"bad"], max_receives=2, dead_letter=dlq)
    done = run("consume", url, "--max-messages", "2", "--json", *worker.argv("fail"))
    assert done.returncode == 0, done.stderr  # failures do not change the exit status
    runs = worker.runs()
    assert [r["env"]["VSQS_RECEIVE_COUNT"] for r in runs] == ["1", "2"]
    assert {r["env"]["VSQS_MESSAGE_ID"] for r in runs} == {mid}
    summary = json.loads(done.stdout)
    assert summary == {
        "queue": url,
        "handled": 2,
        "succeeded": 0,
        "failed": 2,
        "timed_out": 0,
        "released": 0,
    }
    lines = done.stderr.splitlines()
    assert f"vsqs: {url}: command failed on {mid} (receive 1): exited with status 3" in lines
    assert not any("Traceback" in line for line in lines)
    with vsqs.Queue(url) as q, vsqs.Queue(dlq) as dead:  # the next receive dead-letters it
        give_up = time.monotonic() + DEADLINE
        while dead.stats().ready == 0:
            assert q.receive(wait=0.1) is None and time.monotonic() < give_up
        [back] = dead.peek()
    assert back.body == b"bad" and back.dead_lettered is not None


def test_four_commands_run_at_once_and_a_groups_run_one_at_a_time_in_order(
    tmp_path: Path, worker: Worker
) -> None:
    url, _ = queue_with(tmp_path, [f"{i}".encode() for i in range(4)])
    done = run("consume", url, "--concurrency", "4", "-n", "4", *worker.argv("barrier", "4"))
    assert done.returncode == 0, done.stderr
    assert "4 succeeded, 0 failed" in done.stderr  # none gave up waiting for the other three
    assert len(worker.started()) == 4
    # groups: 4 groups of 10, side by side, each in send order and never two at once
    url = str(tmp_path / "groups")
    with vsqs.Queue(url) as q:
        sent = [(f"g{i % 4}", f"{i}") for i in range(40)]
        for group, body in sent:
            q.send(body, group=group)
    (worker.out / "runs").unlink()
    done = run("consume", url, "--concurrency", "4", "-n", "40", *worker.argv("group"))
    assert done.returncode == 0, done.stderr
    order: dict[str, list[str]] = {}
    for r in worker.runs():
        order.setdefault(r["env"]["VSQS_GROUP"], []).append(bytes.fromhex(r["body"]).decode())
    assert order == {f"g{g}": [str(i) for i in range(g, 40, 4)] for g in range(4)}
    assert not (worker.out / "overlaps").exists()


@pytest.mark.parametrize("mode", ["hang-first", "stubborn-first"])  # SIGTERM, then SIGKILL
def test_timeout_kills_a_command_that_hangs_and_counts_it_failed(
    tmp_path: Path, worker: Worker, mode: str
) -> None:
    url, [mid] = queue_with(tmp_path, [b"slow"])
    done = run("consume", url, "--timeout", "5", "-n", "2", "--json", *worker.argv(mode))
    assert done.returncode == 0, done.stderr
    runs = worker.runs()
    assert [r["env"]["VSQS_RECEIVE_COUNT"] for r in runs] == ["1", "2"]
    summary = json.loads(done.stdout)
    assert (summary["failed"], summary["timed_out"], summary["succeeded"]) == (1, 1, 1)
    assert f"{mid} (receive 1): timed out after 5 s (killed)" in done.stderr
    assert not alive(runs[0]["pid"])


def test_the_heartbeat_keeps_the_message_of_a_running_command_hidden(
    tmp_path: Path, worker: Worker
) -> None:
    """Another client polls for the message for over two visibility timeouts
    (of 3 s: extended every second) while its command runs; then the command
    exits 0 and the message is deleted."""
    url, [mid] = queue_with(tmp_path, [b"long"])
    proc = start("consume", url, "-n", "1", "--visibility-timeout", "3", *worker.argv("wait"))
    until(lambda: worker.started() == [mid], "the command", proc)
    with vsqs.Queue(url) as other:
        polled_until = time.monotonic() + 7
        while time.monotonic() < polled_until:
            assert other.receive(wait=0.5) is None
    (worker.out / "go").touch()
    assert proc.wait(DEADLINE) == 0
    assert [r["env"]["VSQS_RECEIVE_COUNT"] for r in worker.runs()] == ["1"]
    stats = remaining(url)
    assert stats.ready + stats.in_flight + stats.delayed == 0


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (and is not a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def stderr_of(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_sigterm_waits_for_the_command_under_way_and_takes_no_more(
    tmp_path: Path, worker: Worker
) -> None:
    url, [first, second] = queue_with(tmp_path, [b"one", b"two"])
    err = tmp_path / "err"
    with err.open("wb") as stderr:
        proc = start("consume", url, "--json", *worker.argv("wait"), stdout=-1, stderr=stderr)
        ready(proc)
        until(lambda: worker.started() == [first], "the first command", proc)
        os.kill(proc.pid, signal.SIGTERM)
        until(lambda: "vsqs: stopping" in stderr_of(err), "the stopping line", proc)
        (worker.out / "go").touch()  # the command under way finishes
        status, out, _ = finish(proc)
    assert status == exit_status(signal.SIGTERM)
    assert json.loads(out) | {"interrupted": "SIGTERM"} == json.loads(out)
    assert json.loads(out)["succeeded"] == 1
    with vsqs.Queue(url) as q:  # the first was acknowledged, the second never taken
        [left] = q.peek()
    assert left.id == second and left.receive_count == 0
    assert [r["env"]["VSQS_MESSAGE_ID"] for r in worker.runs()] == [first]


@pytest.mark.parametrize("concurrency", ["1", "2"])
def test_a_second_sigint_kills_the_commands_and_releases_their_messages(
    tmp_path: Path, worker: Worker, concurrency: str
) -> None:
    url, ids = queue_with(tmp_path, [b"one", b"two"])
    err = tmp_path / "err"
    want = sorted(ids[: int(concurrency)])
    with err.open("wb") as stderr:
        argv = worker.argv("hang")
        proc = start("consume", url, "-c", concurrency, *argv, stdout=-1, stderr=stderr)
        ready(proc)
        until(lambda: worker.started() == want, "the commands", proc)
        os.kill(proc.pid, signal.SIGINT)
        until(lambda: "vsqs: stopping" in stderr_of(err), "the stopping line", proc)
        os.kill(proc.pid, signal.SIGINT)
        status, _, _ = finish(proc)
    assert status == exit_status(signal.SIGINT)
    pids = [r["pid"] for r in worker.runs()]
    try:
        assert len(pids) == int(concurrency) and not any(alive(pid) for pid in pids)
    finally:  # a command that outlived vsqs (one started unseen by the kill once did) goes
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    stats = remaining(url)
    assert stats.ready == 2 and stats.in_flight == 0  # released, visible again at once
    with vsqs.Queue(url) as q:
        assert sorted(m.receive_count for m in q.peek()) == sorted(
            [1] * int(concurrency) + [0] * (2 - int(concurrency))
        )
    assert f"{concurrency} released" in stderr_of(err).splitlines()[-1]


def test_max_messages_and_idle_timeout_exit_0(tmp_path: Path, worker: Worker) -> None:
    url, _ = queue_with(tmp_path, [f"{i}".encode() for i in range(5)])
    done = run("consume", url, "-n", "3", *worker.argv("ok"))
    assert done.returncode == 0, done.stderr
    assert len(worker.runs()) == 3 and remaining(url).ready == 2
    done = run("consume", url, "--idle-timeout", "0.5", *worker.argv("ok"))
    assert done.returncode == 0, done.stderr
    assert len(worker.runs()) == 5 and remaining(url).ready == 0


def test_a_missing_command_is_one_line_and_exit_1_before_any_receive(tmp_path: Path) -> None:
    url, _ = queue_with(tmp_path, [b"x"])
    done = run("consume", url, "--", "no-such-command-here", "arg")
    assert done.returncode == 1
    assert done.stderr == (
        "vsqs: error: no-such-command-here: command not found (or not executable)\n"
    )
    with vsqs.Queue(url) as q:
        [m] = q.peek()
    assert m.receive_count == 0


def test_the_command_environment_is_the_fixed_list_the_docs_name() -> None:
    """docs/cli.md's table lists them in order, docs/workers.md names each;
    issue 31's check of unknown ``VSQS_*`` settings imports the tuple to
    leave them alone."""
    docs = Path(__file__).parent.parent / "docs"
    table = re.findall(r"^\| `(VSQS_[A-Z_]+)` \|", (docs / "cli.md").read_text(), re.MULTILINE)
    assert tuple(table) == COMMAND_ENV and len(COMMAND_ENV) == 6
    workers = (docs / "workers.md").read_text()
    assert all(f"`{name}`" in workers for name in COMMAND_ENV)


def test_no_command_is_bad_usage(tmp_path: Path) -> None:
    done = run("consume", str(tmp_path / "q"))
    assert done.returncode == 2
    assert "Missing argument '-- CMD [ARGS]...'" in done.stderr
