"""Queue administration (issue 31): settings changed after creation by racing
admins, what a change costs a client, a consume under way following it,
queues of older configs, deleting queues, and unknown ``VSQS_*`` variables.
The conformance suite (``vsqs/testing/_queue_config.py``) runs the rest on
every backend."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _config as config
from vsqs import _configure as configure
from vsqs import _names as names
from vsqs.cli._consume import COMMAND_ENV
from vsqs.testing import FakeClock

from .support.cli import ok, run
from .support.format2 import FORMAT_2_CONFIG, config_bytes, write_format_2

ROOT = Path(__file__).resolve().parents[1]

#: One change per admin, each of another setting: all must be there at the end.
CHANGES: list[dict[str, Any]] = [
    {"visibility_timeout": 11.0},
    {"retry_delay": 2.0},
    {"max_retry_delay": 200.0},
    {"max_message_size": 5000},
    {"content_dedup": True},
    {"max_receives": 4, "dead_letter": "dlq"},
]


def _admin(url: str, change: dict[str, Any], barrier: Any) -> None:
    with vsqs.Queue(url, create=False) as q:
        barrier.wait()
        q.configure(**change)


def _all_changes_kept(got: vsqs.QueueConfig) -> None:
    for change in CHANGES:
        for key, value in change.items():
            assert getattr(got, key) == value, (key, got)


@pytest.mark.processes
def test_admin_processes_racing_lose_no_update(tmp_path: Path) -> None:
    url = str(tmp_path / "q")
    vsqs.Queue(url).close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(CHANGES))
    procs = [ctx.Process(target=_admin, args=(url, c, barrier)) for c in CHANGES]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with vsqs.Queue(url, create=False) as q:
        _all_changes_kept(q.config)
    numbers = sorted(
        filter(None, (configure.version_of(p.name) for p in (tmp_path / "q").iterdir()))
    )
    assert numbers == list(range(2, 2 + len(CHANGES)))  # one version each, none lost


@pytest.mark.parametrize("url", ["memory://admin-race/q", "local"])
def test_admin_threads_racing_lose_no_update(url: str, tmp_path: Path) -> None:
    url = str(tmp_path / "q") if url == "local" else url
    vsqs.Queue(url).close()
    barrier = threading.Barrier(len(CHANGES))
    errors: list[BaseException] = []

    def admin(change: dict[str, Any]) -> None:
        try:
            _admin(url, change, barrier)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=admin, args=(c,)) for c in CHANGES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with vsqs.Queue(url, create=False) as q:
        _all_changes_kept(q.config)
        q.delete_queue()


@contextmanager
def config_requests(store: vsqs.Store) -> Iterator[list[str]]:
    """The reads and listings of config objects made until the block ends."""
    seen: list[str] = []
    read, listing = store.read, store.list

    def read_one(name: str) -> bytes:
        if name == names.CONFIG_NAME or name.startswith(configure.CONFIG_PREFIX):
            seen.append(f"read {name}")
        return read(name)

    def list_some(*, prefix: str = "", settle: bool = False) -> Iterable[str]:
        if prefix == configure.CONFIG_PREFIX:
            seen.append("list")
        return listing(prefix=prefix, settle=settle)

    store.read, store.list = read_one, list_some  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del store.read, store.list


def test_a_client_pays_no_request_per_message_for_changes() -> None:
    """Measured: sends and receives within REFRESH_EVERY read no config;
    the look after it reads the next version's name and its own version."""
    clock = FakeClock()
    store = vsqs.MemoryStore("cost")
    with vsqs.Queue(store, clock=clock) as q, vsqs.Queue(store, clock=clock) as admin:
        with config_requests(store) as seen:
            for _ in range(100):
                q.send(b"x")
            assert len(q.receive_batch(100)) == 100
        assert seen == []
        clock.advance(configure.REFRESH_EVERY)
        with config_requests(store) as seen:
            q.send(b"y")
            q.send(b"z")
        assert seen == ["read vsqs-config.2", "read vsqs.json"]
        admin.configure(retry_delay=5.0)
        clock.advance(configure.REFRESH_EVERY)
        with config_requests(store) as seen:
            q.send(b"y")
        assert seen == ["read vsqs-config.2", "read vsqs-config.3"]
        with config_requests(store) as seen:
            vsqs.Queue(store, clock=clock, create=False).close()
        assert seen == [  # at open: one read more than before on a queue never changed
            "read vsqs.json",
            "read vsqs-config.2",
            "list",  # it was: the newest version, then is there one after it?
            "read vsqs-config.3",
            "read vsqs-config.2",
        ]


def test_a_clock_stepped_back_looks_at_once() -> None:
    """A client whose clock steps back (NTP) does not wait for it to catch
    up before it looks for a change again."""
    clock, admin_clock = FakeClock(), FakeClock()
    store = vsqs.MemoryStore("stepped")
    with vsqs.Queue(store, clock=clock) as q, vsqs.Queue(store, clock=admin_clock) as admin:
        admin.configure(visibility_timeout=5)
        clock.advance(-3600)
        q.stats()
        assert q.config.visibility_timeout == 5


def test_a_consume_under_way_follows_a_change(tmp_path: Path) -> None:
    clock = FakeClock()
    url = str(tmp_path / "q")
    with vsqs.Queue(url, clock=clock) as q, vsqs.Queue(url, clock=clock) as admin:
        q.send_batch([b"a", b"b"])
        expiries: list[int] = []

        def handle(message: vsqs.Message) -> None:
            assert message.visible_at is not None
            expiries.append(round(message.visible_at.timestamp() * 1000) - int(clock() * 1000))
            if len(expiries) == 1:
                admin.configure(visibility_timeout=77)
                clock.advance(configure.REFRESH_EVERY)

        assert q.consume(handle, max_messages=2) == 2
    assert [round(e / 1000) for e in expiries] == [30, 77]


def test_a_consume_stops_when_its_queue_is_deleted(tmp_path: Path) -> None:
    """A client consuming while another deletes the queue (a foreign file
    keeps the directory, so only the config tells) stops with QueueNotFound,
    without "it will be redelivered"."""
    clock = FakeClock()
    url = str(tmp_path / "q")
    with vsqs.Queue(url, clock=clock) as q, vsqs.Queue(url, clock=clock) as admin:
        (tmp_path / "q" / "keep").write_text("not vsqs's")
        q.send_batch([b"a", b"b", b"c"])
        handled: list[bytes] = []

        def handle(message: vsqs.Message) -> None:
            handled.append(message.body)
            admin.delete_queue(force=True)
            clock.advance(configure.REFRESH_EVERY)

        with pytest.raises(vsqs.QueueNotFound, match="deleted"):
            q.consume(handle, idle_timeout=1)
    assert handled == [b"a"]
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == ["keep"]


def test_a_consume_under_way_retries_with_changed_delays(tmp_path: Path) -> None:
    clock = FakeClock()
    url = str(tmp_path / "q")
    stop = threading.Event()
    with vsqs.Queue(url, clock=clock) as q, vsqs.Queue(url, clock=clock) as admin:
        q.send_batch([b"a", b"b"])

        def handle(message: vsqs.Message) -> None:
            if message.body == b"a":  # succeeds, after a change
                admin.configure(retry_delay=7.0)
                clock.advance(configure.REFRESH_EVERY)
                return
            stop.set()
            raise RuntimeError("b fails")

        assert q.consume(handle, stop=stop, jitter=lambda: 1.0) == 1
        assert q.stats().next_visible_in == pytest.approx(7.0)  # not the 1 s it started with


def test_a_move_takes_messages_and_leaves_config_versions(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    with vsqs.Queue(src) as q:
        q.send_batch([b"a", b"b"])
        q.configure(visibility_timeout=9)
    assert vsqs.move(src, dst) == 2
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["vsqs-config.2", "vsqs.json"]
    with vsqs.Queue(dst) as moved:
        assert [m.body for m in moved.peek()] == [b"a", b"b"]
        assert moved.config.visibility_timeout == 30  # its own config, not the source's
    assert not [p for p in (tmp_path / "dst").iterdir() if p.name.startswith("vsqs-config")]


def test_a_consume_after_a_max_receives_change_logs_the_new_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    url = str(tmp_path / "q")
    with vsqs.Queue(url, clock=clock, max_receives=3, dead_letter="dlq") as q:
        q.send(b"a")
        stop = threading.Event()

        def fail(message: vsqs.Message) -> None:
            stop.set()
            raise RuntimeError("fails")

        q.consume(fail, stop=stop)  # its failure log is made now, with max_receives 3
        q.configure(max_receives=1, dead_letter="dlq")
        clock.advance(configure.REFRESH_EVERY)  # a, back, is dead-lettered at its next receive
        q.send(b"b")
        stop.clear()
        with caplog.at_level("ERROR", logger="vsqs"):
            q.consume(fail, stop=stop)  # receive 1 of b: its last under max_receives 1
    said = [r.getMessage() for r in caplog.records if "handler failed" in r.getMessage()]
    assert said and "max_receives 1" in said[-1], said


def test_older_configs_open_and_change(tmp_path: Path) -> None:
    """A format-2 queue and a format-3 config without sources (written before
    this vsqs) open, change and say where their values came from."""
    clock = FakeClock()
    old = vsqs.LocalStore(str(tmp_path / "old"))
    write_format_2(old, clock, FORMAT_2_CONFIG)
    plain = vsqs.LocalStore(str(tmp_path / "plain"))
    plain.ensure(True)
    doc = json.loads(vsqs.Queue(vsqs.MemoryStore("x")).config.to_json()) | {"format": 3}
    plain.write_new(names.CONFIG_NAME, config_bytes(doc), fsync=False)
    for store, fmt in ((old, 2), (plain, 3)):
        with vsqs.Queue(store, clock=clock, create=False) as q:
            assert q.configure(visibility_timeout=12).visibility_timeout == 12
            assert q.config.format == fmt
        rows = {n: s for n, _, s in configure.effective(store, {})}
        assert "changed in version 2" in rows["visibility_timeout"]
        assert "not recorded" in rows["retry_delay"]
    assert json.loads(old.read(names.CONFIG_NAME)) == FORMAT_2_CONFIG  # never rewritten
    with vsqs.Queue(old, clock=clock) as q, pytest.raises(vsqs.QueueConfigError, match="format 2"):
        q.configure(content_dedup=True)  # every send would fail


def test_a_dead_letter_queue_holding_blockers_cannot_change(tmp_path: Path) -> None:
    url = str(tmp_path / "q")
    with vsqs.Queue(url, max_receives=1, dead_letter="d", dead_letter_blocks_group=True) as q:
        with pytest.raises(vsqs.QueueConfigError, match="while dead_letter_blocks_group is on"):
            q.configure(dead_letter="elsewhere", max_receives=1)
        assert q.configure(max_receives=2).max_receives == 2


# ------------------------------------------------------------------ the CLI
def test_vsqs_config_shows_changes_and_says_where_values_came_from(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("create", q, "--retry-delay", "3", env={"VSQS_MAX_RETRY_DELAY": "40"})
    shown = json.loads(ok("config", q, "--json"))
    assert shown["config_version"] == 1 and shown["retry_delay"] == 3.0
    assert shown["queue"] == q and shown["format"] == 4
    changed = ok("config", q, "--set", "visibility_timeout=60", "--set", "max_receives=2",
                 "--set", "dead_letter=dlq")  # fmt: skip
    assert re.search(r"^visibility_timeout +60\.0$", changed, re.M), changed
    effective = json.loads(ok("config", q, "--effective", "--json"))
    sources = effective["sources"]
    assert effective["config_version"] == 2
    assert "changed in version 2" in sources["visibility_timeout"]
    assert "explicit at creation" in sources["retry_delay"]
    assert "VSQS_MAX_RETRY_DELAY at creation" in sources["max_retry_delay"]
    assert "default at creation" in sources["max_message_size"]
    assert effective["durable"] is True and sources["durable"] == "default"
    removed = json.loads(ok("config", q, "--set", "max_receives=none", "--set", "dead_letter=",
                            "--json"))  # fmt: skip
    assert removed["dead_letter"] is None and removed["config_version"] == 3


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("dedup_window=5", "dedup_window cannot change: deduplication records are named by slot"),
        ("format=2", "format cannot change"),
        ("visibilty_timeout=5", "no setting 'visibilty_timeout'"),
        ("max_receives=3", "max_receives and dead_letter go together"),
        ("max_receives=x", "max_receives takes a whole number"),
        ("visibility_timeout", "give NAME=VALUE"),
    ],
)
def test_vsqs_config_refuses_in_one_line(tmp_path: Path, setting: str, says: str) -> None:
    q = str(tmp_path / "q")
    vsqs.Queue(q).close()
    done = run("config", q, "--set", setting)
    assert done.returncode in (1, 2) and says in done.stderr, done.stderr
    assert done.returncode == 2 or len(done.stderr.splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == ["vsqs.json"]


def test_vsqs_delete_queue_refuses_then_forces_and_keeps_a_foreign_file(tmp_path: Path) -> None:
    q = tmp_path / "q"
    ok("send", str(q), "a")
    refused = run("delete-queue", str(q))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "is not empty (messages: 1)" in refused.stderr
    (q / "notes.txt").write_text("mine")
    done = json.loads(ok("delete-queue", str(q), "--force", "--json"))
    assert done["kept"] == ["notes.txt"] and done["removed"] == 2  # the message and vsqs.json
    assert sorted(p.name for p in q.iterdir()) == ["notes.txt"]
    (q / "notes.txt").unlink()
    ok("create", str(q))
    assert "deleted" in run("delete-queue", str(q)).stderr
    assert not q.exists()  # empty: its directory went too
    gone = run("stats", str(q))
    assert gone.returncode == 1 and "no queue at" in gone.stderr


# ------------------------------------------------------ VSQS_* variables
def test_an_unknown_vsqs_variable_is_named_once(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    done = run("send", q, "a", "b", env={"VSQS_VISIBILTY_TIMEOUT": "5"})
    assert done.returncode == 0
    lines = [line for line in done.stderr.splitlines() if "unknown VSQS_" in line]
    assert len(lines) == 1 and "VSQS_VISIBILTY_TIMEOUT" in lines[0], done.stderr
    assert vsqs.Queue(q).config.visibility_timeout == 30  # not 5: the default went in


def test_variables_vsqs_sets_or_its_tests_use_draw_no_warning(tmp_path: Path) -> None:
    assert set(COMMAND_ENV) <= set(config.NOT_SETTINGS_ENV)
    used = {
        name
        for folder in ("tests", "benchmarks", ".ci", "vsqs")
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and path.suffix in (".py", ".sh", "") and path != Path(__file__)
        for name in re.findall(r"VSQS_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace"))
        if name + "_" not in config.NOT_SETTINGS_PREFIXES  # startswith("VSQS_SIM")
    }
    assert len(used) > 15, used
    env = dict.fromkeys(used, "1") | {"VSQS_LOG_LEVEL": "WARNING"}
    for var in config.SETTINGS_ENV:
        env.pop(var)  # settings: their values are checked
    assert config.unknown_env(env) == [], "add them to NOT_SETTINGS_ENV"
    done = run("send", str(tmp_path / "q"), "a", env=env)
    assert done.returncode == 0 and "unknown" not in done.stderr, done.stderr


def test_the_warning_is_logged_once_per_process(tmp_path: Path) -> None:
    script = (
        "import logging, vsqs; logging.basicConfig()\n"
        "for name in 'ab': vsqs.Queue(vsqs.MemoryStore(name)).close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "VSQS_DURABEL": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("VSQS_DURABEL") == 1, done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_a_client_whose_looks_failed_for_an_hour_still_finds_the_newest_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its looks failed (the store unreachable) while versions were written
    and the older ones collected: its first look that reads them again
    lists the versions, so it lands on the newest, not on one it can reach
    by counting up from what it knew."""
    clock = FakeClock()
    path = str(tmp_path / "q")
    with (
        vsqs.Queue(vsqs.LocalStore(path), clock=clock) as client,
        vsqs.Queue(path, clock=clock) as admin,
    ):
        reads = client.store.read

        def unreachable(name: str) -> bytes:
            raise ConnectionError(f"{name}: the store is unreachable")

        client.store.read = unreachable  # type: ignore[method-assign]
        for vt in (41, 42, 43):
            admin.configure(visibility_timeout=vt)  # versions 2, 3, 4
        with caplog.at_level("WARNING", logger="vsqs"):
            for _ in range(int(configure.COLLECT_AFTER / configure.REFRESH_EVERY) + 1):
                clock.advance(configure.REFRESH_EVERY)
                assert client.receive() is None  # each look fails, and is logged
        assert "could not look for a config change" in caplog.text
        admin.configure(visibility_timeout=44)  # version 5; version 3 is collected
        assert not (tmp_path / "q" / "vsqs-config.3").exists()
        client.store.read = reads  # type: ignore[method-assign]
        clock.advance(configure.REFRESH_EVERY)
        assert client.receive() is None
        assert client.config.visibility_timeout == 44


@pytest.mark.parametrize("changed", [False, True], ids=["version-1", "version-2"])
def test_a_client_of_a_queue_deleted_and_created_again_is_told(
    changed: bool,
) -> None:
    """The queue was deleted and a new one created at its place between two
    looks of a client: the client's next look raises QueueNotFound (it would
    go on with the deleted queue's settings), whether it knew the first
    version or a later one. (On a local directory the replaced directory
    tells it first: tests/test_local_replaced.py.)"""
    clock = FakeClock()
    path = vsqs.MemoryStore("q")
    with vsqs.Queue(path, clock=clock, visibility_timeout=33) as old:
        if changed:
            old.configure(max_message_size=1000)
        with vsqs.Queue(path, clock=clock) as admin:
            admin.delete_queue()
        vsqs.Queue(path, clock=clock, visibility_timeout=5).close()
        clock.advance(configure.REFRESH_EVERY)
        with pytest.raises(vsqs.QueueNotFound, match="created again"):
            old.receive()
