"""The console script's groups, deduplication ids and attributes (issue 29),
run for real in subprocesses: ``send --group --dedup-id --attr``,
``receive --group``, what ``receive``/``peek`` show, ``create
--dedup-window --content-dedup`` and ``stats``' groups in flight."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import vsqs

from .support.cli import DEADLINE, VSQS, json_lines, ok, run, said
from .support.doc_sessions import AWS_ENV
from .support.servers import Server


def usage_error(done: subprocess.CompletedProcess[str], says: str) -> None:
    """Bad usage: exit 2, one line on stderr that says ``says``, nothing on stdout."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def error(done: subprocess.CompletedProcess[str], says: str) -> None:
    """An error: exit 1, one line ``vsqs: error: ...`` that says ``says``."""
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert done.stderr.startswith("vsqs: error: ") and done.stderr.count("\n") == 1
    assert says in done.stderr, done.stderr
    assert done.stdout == ""


def peeked(url: str) -> list[vsqs.Message]:
    with vsqs.Queue(url, create=False) as queue:
        return queue.peek(100)


# ------------------------------------------------------------------- send
def test_group_and_attributes_apply_to_every_message_of_a_send(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    lines = tmp_path / "lines.txt"
    lines.write_text("l1\nl2\n")
    attrs = ["--attr", "type=order", "--attr", "trace=a=b", "--attr", "empty="]
    ids = ok("send", q, "a1", "a2", "--group", "user-7", *attrs).split()
    ids += ok("send", q, "--group", "user-8", "--attr", "from=stdin", input="s1\n").split()
    ids += ok("send", q, "--file", str(lines), "--group", "user-9").split()
    ids += ok("send", q, "plain").split()
    got = json_lines(ok("peek", q, "--json"))
    assert [m["id"] for m in got] == ids
    expected = [
        ("a1", "user-7", {"type": "order", "trace": "a=b", "empty": ""}),
        ("a2", "user-7", {"type": "order", "trace": "a=b", "empty": ""}),
        ("s1", "user-8", {"from": "stdin"}),
        ("l1", "user-9", {}),
        ("l2", "user-9", {}),
        ("plain", None, {}),
    ]
    assert [(m["body"], m["group"], m["attributes"]) for m in got] == expected
    assert all(m["dedup_id"] is None for m in got)
    # To a pipe, the text form is the bodies alone (data for the next command).
    assert ok("peek", q) == "a1\na2\ns1\nl1\nl2\nplain\n"
    # Received, the same (a batch takes consecutive messages of a group).
    received = json_lines(ok("receive", q, "--json", "--max", "10"))
    assert [(m["body"], m["group"], m["attributes"]) for m in received] == expected
    assert all(m["receipt"] for m in received)


def test_a_dedup_id_sends_once_also_after_the_message_was_deleted(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    (first,) = ok("send", q, "charge 42", "--dedup-id", "order-42", "--group", "o").split()
    assert ok("send", q, "--dedup-id", "order-42", "--group", "o", input="again\n").split() == [
        first
    ]
    (message,) = json_lines(ok("receive", q, "--json", "--delete"))
    assert (message["id"], message["body"], message["dedup_id"]) == (first, "charge 42", "order-42")
    assert ok("send", q, "later", "--dedup-id", "order-42").split() == [first]
    assert peeked(q) == []
    (other,) = ok("send", q, "other", "--dedup-id", "order-43").split()
    assert other != first and [m.body for m in peeked(q)] == [b"other"]


@pytest.mark.parametrize(
    "args",
    [["one", "two", "--dedup-id", "d"], ["--file", "{lines}", "--dedup-id", "d"]],
    ids=["bodies", "file"],
)
def test_one_dedup_id_for_several_messages_is_refused(tmp_path: Path, args: list[str]) -> None:
    """A dedup id names one message: given for several, all but the first
    would be dropped as duplicates of it, which no one means."""
    lines = tmp_path / "lines"
    lines.write_text("one\ntwo\n")
    q = tmp_path / "q"
    usage_error(
        run("send", str(q), *[a.format(lines=lines) for a in args]), "--dedup-id names one message"
    )
    assert not q.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["send", "{q}", "x", "--group", "a b"], "group 'a b' must be 1-128 printable ASCII"),
        (["send", "{q}", "x", "--group", "h\u00e9"], "printable ASCII"),
        (["send", "{q}", "x", "--group", "g" * 129], "1-128"),
        (["send", "{q}", "x", "--dedup-id", ""], "dedup_id '' must be 1-128"),
        (["send", "{q}", "x", "--attr", "novalue"], "'novalue' is not NAME=VALUE"),
        (["send", "{q}", "x", "--attr", "=v"], "'=v' is not NAME=VALUE"),
        (["send", "{q}", "x", "--attr", "k=1", "--attr", "k=2"], "attribute 'k' is given twice"),
        (["send", "{q}", "x", "--attr", "b@d=1"], "attribute name 'b@d'"),
        (
            ["send", "{q}", "x", *[f"--attr=k{i}=v" for i in range(11)]],
            "at most 10 attributes, not 11",
        ),
        (["receive", "{q}", "--group", "a b"], "group 'a b'"),
        (["create", "{q}", "--dedup-window", "0"], "'--dedup-window'"),
        (["create", "{q}", "--dedup-window", "x"], "'--dedup-window'"),
    ],
)
def test_bad_groups_ids_and_attributes_are_bad_usage_in_one_line(
    tmp_path: Path, args: list[str], says: str
) -> None:
    q = tmp_path / "q"
    usage_error(run(*[a.format(q=q) for a in args]), says)
    assert not q.exists(), "nothing is created or sent on bad usage"


def test_an_attribute_value_that_is_not_unicode_is_refused(tmp_path: Path) -> None:
    """argv is bytes: one that is not UTF-8 reaches Python as surrogates,
    which no attribute may hold."""
    assert VSQS is not None
    q = tmp_path / "q"
    done = subprocess.run(
        [VSQS, "send", str(q), "x", "--attr", os.fsdecode(b"k=\xff")],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    usage_error(done, "attribute k must be valid Unicode")
    assert not q.exists()


def test_attributes_count_against_the_maximum_message_size(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    said("create", q, "--max-message-size", "10")
    ok("send", q, "12345", "--attr", "k=1234")  # 5 + 1 + 4 bytes
    error(run("send", q, "12345", "--attr", "k=12345"), "11 bytes with its attributes")
    assert [m.body for m in peeked(q)] == [b"12345"]


@pytest.mark.parametrize(
    "args",
    [["--group", "g"], ["--attr", "k=v"], ["--dedup-id", "d"]],
    ids=["group", "attr", "dedup-id"],
)
def test_a_format_2_queue_refuses_groups_ids_and_attributes_in_one_line(
    tmp_path: Path, args: list[str]
) -> None:
    q = tmp_path / "old"
    q.mkdir()
    (q / "vsqs.json").write_text(json.dumps({"format": 2}))
    error(run("send", str(q), "x", *args), "this queue has format 2")
    assert peeked(str(q)) == []
    ok("send", str(q), "x")  # without them, it still takes messages
    (message,) = json_lines(ok("receive", str(q), "--json"))
    assert (message["group"], message["dedup_id"], message["attributes"]) == (None, None, {})
    created = json.loads(ok("create", str(q), "--json"))
    assert (created["format"], created["dedup_window"], created["content_dedup"]) == (2, 300, False)


# ---------------------------------------------------------------- receive
def test_receive_group_takes_only_that_groups_messages_one_at_a_time(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "a1", "a2", "a3", "--group", "a")
    ok("send", q, "b1", "b2", "--group", "b")
    ok("send", q, "plain")
    got = json_lines(ok("receive", q, "--group", "b", "--json", "--max", "10"))
    assert [m["body"] for m in got] == ["b1", "b2"], "a batch takes consecutive messages"
    assert ok("receive", q, "--group", "b") == ""
    assert ok("receive", q, "--group", "a", "--max", "2") == "a1\na2\n"
    assert ok("receive", q, "--group", "a") == "", "a3 waits while a1 and a2 are in flight"
    assert ok("receive", q, "--group", "nobody") == ""
    assert ok("receive", q, "--max", "10") == "plain\n", "groups a and b are in flight"
    figures = json.loads(ok("stats", q, "--json"))
    assert (figures["groups_in_flight"], figures["in_flight"], figures["ready"]) == (2, 5, 1)
    assert "groups in flight     2\n" in ok("stats", q)
    watched = json_lines(ok("stats", q, "--json", "--watch", "--interval", "0.1", "--count", "1"))
    assert watched[0]["groups_in_flight"] == 2


def test_released_head_comes_back_before_the_rest_of_its_group(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "first", "second", "--group", "g")
    (head,) = json_lines(ok("receive", q, "--json"))
    assert ok("receive", q) == ""
    ok("release", q, head["receipt"])
    (again,) = json_lines(ok("receive", q, "--json", "--delete"))
    assert (again["id"], again["receive_count"], again["group"]) == (head["id"], 2, "g")
    assert ok("receive", q, "--delete") == "second\n"
    assert json.loads(ok("stats", q, "--json"))["groups_in_flight"] == 0
    assert "groups in flight     0\n" in ok("stats", q)


def on_a_terminal(*args: str) -> bytes:
    """What the command writes to stdout when stdout is a terminal (a few
    lines: they wait in the terminal's buffer until the command has ended)."""
    import pty

    assert VSQS is not None
    master, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [VSQS, *args],
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=subprocess.PIPE,
            timeout=DEADLINE,
        )
    finally:
        os.close(terminal)
    shown = b""
    try:
        while chunk := os.read(master, 65536):
            shown += chunk
    except OSError:  # EIO: all read, and the terminal side is closed
        pass
    finally:
        os.close(master)
    assert done.returncode == 0, done.stderr
    return shown.replace(b"\r\n", b"\n")


def test_at_a_terminal_the_text_form_shows_each_messages_group(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    ok("send", q, "a1", "--group", "user-7")
    ok("send", q, "plain", "--attr", "k=v")
    ok("send", q, "b1", "--group", "user-8")
    assert on_a_terminal("peek", q) == b"[user-7] a1\nplain\n[user-8] b1\n"
    assert on_a_terminal("receive", q, "--max", "3") == b"[user-7] a1\nplain\n[user-8] b1\n"


# ----------------------------------------------------------------- create
def test_create_stores_the_dedup_settings_and_checks_them_after(tmp_path: Path) -> None:
    q = str(tmp_path / "q")
    created = json.loads(ok("create", q, "--dedup-window", "60", "--content-dedup", "--json"))
    assert (created["dedup_window"], created["content_dedup"], created["format"]) == (60, True, 4)
    config = vsqs.Queue(q).config
    assert (config.dedup_window, config.content_dedup) == (60, True)
    assert "dedup_window=60s content_dedup=True dead_letter_blocks_group=False" in said("create", q)
    ok("create", q, "--dedup-window", "60", "--content-dedup")  # agrees
    error(run("create", q, "--no-content-dedup"), "created with content_dedup=True, not False")
    error(run("create", q, "--dedup-window", "61"), "created with dedup_window=60.0, not 61.0")
    # content_dedup: the same body twice is one message, in a file too.
    lines = tmp_path / "lines"
    lines.write_text("x\ny\nx\n")
    ids = ok("send", q, "--file", str(lines)).split()
    assert ids[0] == ids[2] != ids[1] and ok("send", q, "x").split() == ids[:1]
    assert [m.body for m in peeked(q)] == [b"x", b"y"]
    plain = str(tmp_path / "plain")
    created = said("create", plain)
    assert "dedup_window=300s content_dedup=False dead_letter_blocks_group=False" in created
    assert len(set(ok("send", plain, "x", "x").split())) == 2


def test_groups_ids_and_attributes_over_s3(s3_server: Server) -> None:
    url = s3_server.url("cli-groups")
    env = AWS_ENV | {"AWS_ENDPOINT_URL": s3_server.storage_options["client_kwargs"]["endpoint_url"]}
    first = ok("send", url, "a1", "--group", "a", "--dedup-id", "x", "--attr", "k=v", env=env)
    assert ok("send", url, "again", "--group", "a", "--dedup-id", "x", env=env) == first
    ok("send", url, "a2", "--group", "a", env=env)
    ok("send", url, "b1", "--group", "b", env=env)
    (got,) = json_lines(ok("receive", url, "--group", "a", "--json", env=env))
    assert (got["body"], got["group"], got["dedup_id"], got["attributes"]) == (
        "a1",
        "a",
        "x",
        {"k": "v"},
    )
    assert ok("receive", url, "--group", "a", env=env) == ""
    assert json.loads(ok("stats", url, "--json", env=env))["groups_in_flight"] == 1
    assert ok("receive", url, "--max", "10", env=env) == "b1\n"


# ------------------------------------------------ dead letters and moves
def dead_lettered(tmp_path: Path, *bodies: str) -> tuple[str, str]:
    """A queue ``q`` (dead-lettering at the second receive into ``q-dlq``)
    whose first message, of ``bodies`` sent in group ``g`` with attribute
    ``k=v``, was dead-lettered; the two queues."""
    q, dlq = str(tmp_path / "q"), str(tmp_path / "q-dlq")
    said("create", q, "--max-receives", "1", "--dead-letter", "q-dlq")
    ok("send", q, *bodies, "--group", "g", "--attr", "k=v")
    assert ok("receive", q, "--visibility-timeout", "0") == f"{bodies[0]}\n"
    assert ok("receive", q) == "".join(f"{b}\n" for b in bodies[1:2]), (
        "the dead-lettered head unblocks its group"
    )
    return q, dlq


def test_a_dead_letter_keeps_its_group_and_attributes(tmp_path: Path) -> None:
    _, dlq = dead_lettered(tmp_path, "poison", "next")
    (dead,) = json_lines(ok("peek", dlq, "--json"))
    assert (dead["body"], dead["group"], dead["attributes"]) == ("poison", "g", {"k": "v"})
    assert dead["dead_lettered"]["receive_count"] == 1


def test_a_redriven_message_keeps_its_group_and_attributes(tmp_path: Path) -> None:
    q, dlq = dead_lettered(tmp_path, "poison")
    said("redrive", dlq, q)
    (back,) = json_lines(ok("peek", q, "--json"))
    assert (back["body"], back["group"], back["attributes"]) == ("poison", "g", {"k": "v"})


def test_vsqs_move_keeps_groups_and_attributes(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    ok("send", src, "a", "b", "--group", "g", "--attr", "k=v")
    said("move", src, dst)
    got = json_lines(ok("peek", dst, "--json"))
    assert [(m["body"], m["group"], m["attributes"]) for m in got] == [
        ("a", "g", {"k": "v"}),
        ("b", "g", {"k": "v"}),
    ]
