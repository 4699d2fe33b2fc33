"""Hostile input: text an attacker controls, and entries dropped into a queue directory.

What is attacked:

* **Locations** (``vsqs.Queue``, ``create=False``, ``dead_letter=``,
  ``vsqs.list_queues``, ``vsqs.redrive``): Hypothesis draws arbitrary text and
  adversarial paths and URLs (``..``, ``.``, empty components, NUL, ``~``,
  ``%2e%2e``, look-alike dots and letters, lone surrogates, very long
  components, ``file://``, ``memory://`` and chained ``::`` URLs, query
  strings, fragments). Each call runs with the working directory three levels
  deep in a sandbox, ``HOME`` pointing outside it, and a sentinel tree (a
  secret, a directory, a real queue with a message) outside it. A call must
  raise a ``VsqsError`` subclass or succeed; afterwards nothing outside the
  sandbox changed, and inside it only the directory the location names (and
  its missing parents) was created. Relative inputs that climb out of the
  sandbox are not generated: a path is the caller's to choose.
* **Object-store URLs that name no valid queue** (``s3``, ``s3a``, ``gs``,
  ``gcs``): refused before any request, checked against a listening socket
  the clients are pointed at (there is no network here; a request would hang).
* **Receipts**: arbitrary text, well-formed receipts of no message, and
  mutations of real names (a character changed, truncated, extended, path
  separators, ``..``, NUL, uppercase hex, Unicode digits such as ``٣``, ``+``,
  whitespace), through ``Queue.delete/release/extend`` and a ``Message``
  whose receipt was tampered with: only ``InvalidReceipt`` or
  ``ReceiptExpired``, and the queue directory is unchanged, unless the text
  is the current name of a message received at least once (then it works).
* **Dropped entries** (local directories): empty and 1 TiB sparse files with
  foreign names; regular files whose names look like messages but are not;
  symlinks (to a secret, to a directory, dangling, to a file in the queue),
  FIFOs, sockets and directories named like a message in every state, and a
  symlinked config. ``receive``, ``peek``, ``stats``, ``purge``, ``gc`` and
  ``list_queues`` must never read, follow, rename or delete them (only a
  regular ``<id>.new`` leftover is ours to collect), and never block.

Tests marked ``xfail(strict=True)`` state a guarantee that vsqs does not keep
yet; each names the bug and the fix proposed for it. They start failing
(XPASS) once the fix lands, and then lose the mark.

The last test runs the atheris harness ``benchmarks/fuzz_names.py`` briefly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import re
import socket
import stat
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import vsqs
from vsqs import _names as names
from vsqs.testing import FakeClock

SECRET = b"SECRET: never in a message body"
TIB = 1 << 40
REPO = Path(__file__).resolve().parent.parent
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)

# ----------------------------------------------------------------- helpers
Fingerprint = dict[str, tuple[object, ...]]


def fingerprint(root: Path, skip: Path | None = None) -> Fingerprint:
    """Every entry under ``root``, not following symlinks: type, inode, size,
    mode, mtime and the link target or (small regular files) the content.
    Only regular files are opened, so FIFOs cannot block it."""
    out: Fingerprint = {}

    def walk(directory: str) -> None:
        with os.scandir(directory) as entries:
            for entry in entries:
                if skip is not None and entry.path == str(skip):
                    continue
                st_ = os.lstat(entry.path)
                extra: object = None
                if stat.S_ISLNK(st_.st_mode):
                    extra = os.readlink(entry.path)
                elif stat.S_ISREG(st_.st_mode) and st_.st_size <= 1 << 16:
                    extra = Path(entry.path).read_bytes()
                key = os.path.relpath(entry.path, root)
                out[key] = (st_.st_mode, st_.st_ino, st_.st_size, st_.st_mtime_ns, extra)
                if stat.S_ISDIR(st_.st_mode):
                    walk(entry.path)

    if root.is_dir():
        walk(str(root))
    return out


def changed(before: Fingerprint, after: Fingerprint) -> set[str]:
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}


def within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def make_socket(path: Path) -> None:
    """A unix socket file at ``path`` (bound relative to its directory: the
    absolute path may exceed the 108-byte limit of socket addresses)."""
    with contextlib.chdir(path.parent), socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path.name)


def plant(kind: str, path: Path, outside: Path, queue_dir: Path) -> None:
    """Drop an entry of ``kind`` at ``path``."""
    if kind == "symlink-to-secret":
        path.symlink_to(outside / "secret")
    elif kind == "symlink-to-dir":
        path.symlink_to(outside / "dir")
    elif kind == "dangling-symlink":
        path.symlink_to(outside / "nothing-here")
    elif kind == "symlink-into-queue":
        path.symlink_to(queue_dir / "notes.txt")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        make_socket(path)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_bytes(SECRET)
        (path / names.ids.next_id(1_700_000_000_000)).write_bytes(b"nested message name")
    else:
        raise AssertionError(kind)


NOT_FILES = [
    "symlink-to-secret",
    "symlink-to-dir",
    "dangling-symlink",
    "symlink-into-queue",
    "fifo",
    "socket",
    "directory",
]
#: Old enough that a receiver tries them before any real message, and that a
#: ``.new`` of theirs is past any grace period.
OLD_MS = 1_700_000_000_000
PAST_MS = OLD_MS + 1_000
FUTURE_MS = names.MAX_EXPIRY_MS - 1_000


def state_names(message_id: str) -> dict[str, str]:
    """The name of one message id in every state of the format."""
    return {
        "ready": message_id,
        "expired": names.invisible_name(message_id, PAST_MS, 1, 1),
        "in-flight": names.invisible_name(message_id, FUTURE_MS, 1, 1),
        "due-delayed": names.invisible_name(message_id, PAST_MS, 0, 1),
        "new": names.new_name(message_id),
    }


def with_letters(message_id: str) -> str:
    """The id with a nonce that has hex letters (so ``upper()`` changes it)."""
    return message_id[:-16] + "0123456789abcdef"


def look_alikes(message_id: str) -> list[str]:
    """Regular-file names that resemble messages but are not of the grammar."""
    message_id = with_letters(message_id)
    expired = names.invisible_name(message_id, PAST_MS, 1, 1)
    return [
        message_id.upper(),
        message_id[1:],  # a 12-digit time
        "\u0663" + message_id[1:],  # ARABIC-INDIC DIGIT THREE
        "\uff11" + message_id[1:],  # FULLWIDTH DIGIT ONE
        "+" + message_id[1:],
        " " + message_id[1:],
        message_id + " ",
        message_id[:-1] + "\n",
        message_id[:-1] + "g",
        message_id + ".tmp",
        message_id + ".NEW",
        message_id + ".new.bak",
        message_id.upper() + ".new",
        "\u0663" + message_id[1:] + ".new",
        expired + ".new",
        expired[:-1] + "01",
        expired[:-1] + "+1",
        expired[:-1] + "-1",
        expired[:-1] + "\u0663",
        expired[:-1] + "1234567890",
        f"{message_id}.{PAST_MS}0.1",
        f"{message_id}..1",
        f"{message_id}.{PAST_MS}.",
    ]


def id_maker(ms: int = OLD_MS) -> Callable[[], str]:
    generator = names.IdGenerator()
    return lambda: generator.next_id(ms)


# ------------------------------------------------------------------ sandbox
@dataclass
class Sandbox:
    """``root`` may change (under rules per test); ``outside`` and the rest of
    ``tmp`` never may. The working directory is ``cwd``, three levels down."""

    tmp: Path
    root: Path
    cwd: Path
    outside: Path

    def outside_state(self) -> tuple[Fingerprint, list[str]]:
        return fingerprint(self.tmp, skip=self.root), sorted(os.listdir("/"))

    def text(self, location: str) -> str:
        return location.replace("<SB>", str(self.root))

    def target(self, location: str) -> Path | None:
        """The directory a local location names; ``None`` for an object-store URL."""
        scheme, sep, rest = location.partition("://")
        if sep and scheme != "file":
            return None
        return Path(os.path.abspath(rest if sep else location))

    def check(self, call: Callable[[], object], may_create: list[Path]) -> object:
        """Run ``call``: it returns or raises a VsqsError (anything else fails
        the test). Nothing outside the sandbox changes; inside it, only the
        directories in ``may_create``, their contents and their parents."""
        outside_before, inside_before = self.outside_state(), fingerprint(self.root)
        try:
            result = call()
        except vsqs.VsqsError as exc:
            result = exc
        assert self.outside_state() == outside_before, "something outside the sandbox changed"
        for key in changed(inside_before, fingerprint(self.root)):
            path = self.root / key
            assert any(
                within(path, allowed) or path in allowed.parents for allowed in may_create
            ), f"{key} changed; only {may_create} may"
        return result


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "file").write_bytes(SECRET)
    (outside / "secret").write_bytes(SECRET)
    (outside / "home").mkdir()
    with vsqs.Queue(outside / "q") as q:
        q.send(b"outside")
    root = tmp_path / "sandbox"
    cwd = root / "d1" / "d2" / "d3"
    cwd.mkdir(parents=True)
    with vsqs.Queue(root / "real" / "q1") as q:
        q.send(b"one")
    with vsqs.Queue(root / "real" / "dlq") as q:
        q.send(b"dead")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(outside / "home"))
    return Sandbox(tmp_path, root, cwd, outside)


# -------------------------------------------------------------- strategies
COMPONENTS = st.sampled_from(
    [
        "q",
        "jobs",
        "a.b",
        "Q-1_x",
        "x" * 128,
        "x" * 129,
        "a" * 300,
        ".",
        "..",
        "",
        "~",
        "~root",
        "$HOME",
        "%2e%2e",
        "%2F",
        "..%2f..",
        "\\",
        "..\\..",
        names.CONFIG_NAME,
        "real",
        "q1",
        "dlq",
        "q\x00",
        "\u2024\u2024",  # ONE DOT LEADER, twice: looks like ".."
        "\uff0e\uff0e",  # FULLWIDTH FULL STOP, twice
        "\u2025",  # TWO DOT LEADER
        "q\u200b",
        "\uff51",  # FULLWIDTH q
        "q\u0301",
        "q?x=1",
        "q#f",
        "q;x",
        " q",
        "q ",
        "\n",
        "-q",
        ".hidden",
        "\udc80",  # a raw byte 0x80 (surrogateescape)
        "\ud800",  # a lone surrogate no file name can hold
        "*",
    ]
) | st.text(max_size=6)
PREFIXES = st.sampled_from(
    [
        "",
        "./",
        "../",
        "<SB>/",
        "<SB>/real/",
        "file://",
        "file://<SB>/",
        "file:///",
        "memory://",
        "memory:///",
        "memory::memory://",
        "file::memory://",
        "memory::file://<SB>/",
        "file::file://<SB>/",
        "nosuchscheme://",
        "nosuchscheme::memory://",
        "FILE://",
        "Memory://",
        ":://",
        "::",
    ]
)
SUFFIXES = st.sampled_from(["", "/", "//", "?x=1", "#frag", "?", "/.", "/..", "::", "\x00", ";"])
ADVERSARIAL = st.builds(
    lambda prefix, parts, suffix: prefix + "/".join(parts) + suffix,
    PREFIXES,
    st.lists(COMPONENTS, max_size=5),
    SUFFIXES,
)
LOCATIONS = ADVERSARIAL | st.text(max_size=40) | st.text(alphabet="./~:%\\\x00qa1", max_size=20)
NON_TEXT = st.binary(max_size=20) | st.integers() | st.none() | st.lists(st.text(max_size=3))

#: Links of a scheme that never reach a network: local files and memory.
OFFLINE = {"file", "memory"}


def offline(location: str) -> bool:
    """Whether every link of the URL's scheme is offline or unknown to fsspec
    (so refused as an unsupported store): generated calls never reach a network."""
    from fsspec.registry import known_implementations, registry

    scheme, sep, _ = location.partition("://")
    if not sep:
        return True
    known = set(known_implementations) | set(registry)
    return all(link in OFFLINE or link not in known for link in scheme.split("::"))


def usable(sb: Sandbox, location: object) -> tuple[object, Path | None]:
    """The location to pass (placeholders filled) and the directory it names;
    skips locations that leave the sandbox or could reach a network."""
    if isinstance(location, PurePosixPath):
        text = sb.text(str(location))
        return Path(text), usable(sb, text)[1]
    if not isinstance(location, str):
        return location, None
    text = sb.text(location)
    assume(offline(text))
    target = sb.target(text)
    assume(target is None or within(target, sb.root))
    return text, target


# ---------------------------------------------------------------- locations
@FUZZ
@given(root=LOCATIONS | NON_TEXT)
def test_list_queues_of_any_root_changes_nothing_and_lists_only_queues_under_it(
    sandbox: Sandbox, root: object
) -> None:
    root, target = usable(sandbox, root)
    found = sandbox.check(lambda: vsqs.list_queues(root), [])  # type: ignore[arg-type]
    if isinstance(found, list) and target is not None:
        for url in found:
            assert Path(url).parent == target and (Path(url) / names.CONFIG_NAME).is_file()


REAL = st.sampled_from(
    ["../../../real/q1", "../../../real/dlq", "<SB>/real/q1", "file://<SB>/real/dlq"]
)


@FUZZ
@given(source=REAL | LOCATIONS, dead_letter=REAL | LOCATIONS)
def test_redrive_between_any_locations_changes_only_those_two_queues(
    sandbox: Sandbox, source: str, dead_letter: str
) -> None:
    source, source_dir = usable(sandbox, source)
    dead_letter, dead_dir = usable(sandbox, dead_letter)
    may_change = [path for path in (source_dir, dead_dir) if path is not None]
    moved = sandbox.check(lambda: vsqs.redrive(dead_letter, source, max_messages=20), may_change)
    # Two messages live in the sandbox's queues (memory queues hold none): a
    # redrive that moved more moved one twice.
    assert isinstance(moved, vsqs.VsqsError) or 0 <= moved <= 2  # type: ignore[operator]


_dead_letter_sources = itertools.count()


@FUZZ
@given(dead_letter=COMPONENTS | LOCATIONS)
def test_any_dead_letter_setting_is_refused_or_used_without_leaving_the_sandbox(
    sandbox: Sandbox, dead_letter: str
) -> None:
    dead_letter = str(usable(sandbox, dead_letter)[0])
    source = sandbox.root / "dl" / f"s{next(_dead_letter_sources)}"

    def dead_letter_one() -> object:
        with vsqs.Queue(source, max_receives=1, dead_letter=dead_letter) as q:
            q.send(b"poison")
            first = q.receive(visibility_timeout=0)
            assert first is not None and first.body == b"poison"
            assert q.receive(visibility_timeout=0) is None  # the second receive dead-letters it
            return q.stats()

    # Where a path dead-letter queue lands is checked by the tests below.
    sandbox.check(dead_letter_one, [sandbox.root])


def test_a_location_with_surrogates_or_an_empty_file_url_is_refused(sandbox: Sandbox) -> None:
    """Regression (fixed in vsqs/stores/_location.py): ``file://`` opened the working
    directory as a queue, and a lone surrogate raised ``UnicodeEncodeError``."""
    for location in ["file://", "file://  ", "\ud800/q", "file://\ud800/q", "memory://\ud800/q"]:
        for call in (vsqs.Queue, vsqs.list_queues):
            result = sandbox.check(lambda c=call, loc=location: c(loc), [])  # type: ignore[misc]
            assert isinstance(result, vsqs.InvalidQueueName), (location, result)
    assert not (sandbox.cwd / names.CONFIG_NAME).exists()


@pytest.mark.parametrize(
    "url", ["file::memory://a/q", "memory::memory://a/q", "memory::file:///q", "memory://a/q?x=1"]
)
def test_a_url_that_resolves_elsewhere_than_it_names_is_refused(sandbox: Sandbox, url: str) -> None:
    """Regression (fixed in vsqs/stores/_registry.py): ``file::memory://a/q`` made a
    queue of the working directory through fsspec's local filesystem, and a
    query string became part of the queue's key prefix unchecked."""
    for call in (vsqs.Queue, vsqs.list_queues):
        result = sandbox.check(lambda c=call: c(url), [])  # type: ignore[misc]
        assert isinstance(result, vsqs.InvalidQueueName), result
    assert list(sandbox.cwd.iterdir()) == []


def test_a_location_with_thousands_of_missing_parents_raises_a_vsqs_error(
    sandbox: Sandbox,
) -> None:
    location = "a/" * 1200 + "q"  # 2 401 characters: under PATH_MAX
    result = sandbox.check(lambda: vsqs.Queue(location), [sandbox.cwd / location])
    assert isinstance(result, vsqs.VsqsError)


@pytest.mark.parametrize("dead_letter", ["..", "", "a b", ".hidden", "x" * 129, "vsqs.json"])
def test_an_invalid_dead_letter_name_is_refused_when_the_queue_is_opened(
    tmp_path: Path, dead_letter: str
) -> None:
    with pytest.raises(vsqs.InvalidQueueName):
        vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter=dead_letter).close()


def test_a_relative_dead_letter_path_is_refused_when_the_queue_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It would resolve against the working directory of whichever process
    dead-letters: refused before anything is created."""
    monkeypatch.chdir(tmp_path)
    for dead_letter in ("dl/x", "./x", "../x"):
        with pytest.raises(vsqs.InvalidQueueName, match="relative path"):
            vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter=dead_letter)
    assert list(tmp_path.iterdir()) == []
    with vsqs.Queue(tmp_path / "q", max_receives=1, dead_letter=str(tmp_path / "dl")) as q:
        q.send(b"poison")
        assert q.receive(visibility_timeout=0) is not None
        assert q.receive(visibility_timeout=0) is None  # dead-lettered
    with vsqs.Queue(tmp_path / "dl", create=False) as dlq:
        assert dlq.stats().ready == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "kind", ["symlink-to-secret", "symlink-to-dir", "dangling-symlink", "fifo", "socket"]
)
def test_a_non_file_named_like_a_message_arriving_while_a_receiver_watches_is_ignored(
    tmp_path: Path, kind: str
) -> None:
    """An inotify feed reports every new name; only regular files are messages."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"SECRET")
    with vsqs.Queue(tmp_path / "q") as q:
        assert q.receive(wait=0) is None  # the receiver watches from here on
        if q.store.changes(len(names.IdGenerator().next_id(0))) is None:  # type: ignore[attr-defined]
            pytest.skip("no inotify feed on this filesystem")
        planted = tmp_path / "q" / names.IdGenerator().next_id(OLD_MS)
        plant(kind, planted, outside, tmp_path / "q")
        real = q.send(b"real")
        got = q.receive_batch(10, wait=0.5)
        assert [(m.id, m.body) for m in got] == [(real, b"real")]
        got[0].delete()
        assert q.receive(wait=0.2) is None
        assert planted.is_symlink() or planted.exists(), "the planted entry was renamed or deleted"
    assert (outside / "secret").read_bytes() == b"SECRET"


@pytest.mark.timeout(60)
def test_a_huge_file_named_like_a_message_is_never_read_and_never_blocks_the_queue(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 1 TiB sparse file at the head of the queue: read whole, every receive
    failed with ``MemoryError``. Now the receiver that claims it reads no more
    of it than a small message, logs it once, leaves it held, and passes
    over it from then on; messages behind it are received, peek skips it,
    and it is never dead-lettered (a move would read it)."""
    clock = FakeClock()
    with vsqs.Queue(
        tmp_path / "q", clock=clock, visibility_timeout=1, max_receives=1, dead_letter="dlq"
    ) as q:
        huge = tmp_path / "q" / names.IdGenerator().next_id(int(clock() * 1000) - 1)
        with open(huge, "wb") as f:
            f.truncate(TIB)
        behind = q.send(b"behind")
        tracemalloc.start()
        try:
            got = q.receive_batch(10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert [m.id for m in got] == [behind]
        assert peak < 1 << 20, f"{peak} bytes held to receive past a huge file"
        warned = [r for r in caplog.records if "too large to receive" in r.getMessage()]
        assert len(warned) == 1 and huge.name in warned[0].getMessage()
        got[0].delete()
        for _ in range(3):  # its claim expires: this receiver never claims it again
            clock.advance(2)
            assert q.receive() is None
            assert q.peek() == []
        assert len([r for r in caplog.records if "too large" in r.getMessage()]) == 4  # peeks
        [left] = [n for n in os.listdir(tmp_path / "q") if n.startswith(huge.name)]
        assert os.stat(tmp_path / "q" / left).st_size == TIB
    with vsqs.Queue(tmp_path / "q", clock=clock) as other:
        assert other.receive() is None  # another receiver passes over it too
    assert not (tmp_path / "dlq").exists()


@pytest.mark.timeout(30)
def test_extending_a_forged_receipt_that_names_a_fifo_does_not_block(tmp_path: Path) -> None:
    with vsqs.Queue(tmp_path / "q") as q:
        forged = names.invisible_name(names.IdGenerator().next_id(OLD_MS), OLD_MS + 10**9, 1, 1)
        os.mkfifo(tmp_path / "q" / forged)
        with pytest.raises(vsqs.ReceiptExpired):
            q.extend(forged, 5)
        assert stat.S_ISFIFO(os.lstat(tmp_path / "q" / forged).st_mode), "the FIFO was moved"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", NOT_FILES)
@pytest.mark.parametrize("call", ["delete", "release", "extend"])
def test_a_forged_receipt_never_renames_or_deletes_an_entry_that_is_no_file(
    tmp_path: Path, kind: str, call: str
) -> None:
    """A receipt naming a symlink, FIFO, socket or directory planted in the
    queue is expired: the entry stays as it is, and what it points to too."""
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret").write_bytes(SECRET)
    with vsqs.Queue(tmp_path / "q") as q:
        (tmp_path / "q" / "notes.txt").write_bytes(b"notes")
        receipt = names.invisible_name(names.ids.next_id(OLD_MS), FUTURE_MS, 1, 1)
        plant(kind, tmp_path / "q" / receipt, outside, tmp_path / "q")
        before = fingerprint(tmp_path)
        with pytest.raises(vsqs.ReceiptExpired):
            {"delete": q.delete, "release": q.release, "extend": lambda r: q.extend(r, 5)}[call](
                receipt
            )
        assert fingerprint(tmp_path) == before, "a forged receipt changed something"


@pytest.mark.slow  # 300 examples, each on a real directory
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_mutated_receipt_is_invalid_or_expired_and_changes_nothing(
    tmp_path: Path, data: st.DataObject
) -> None:
    """One character changed, inserted or removed, or the receipt cut or
    extended: ``InvalidReceipt`` or ``ReceiptExpired`` (never another error),
    and nothing in or outside the queue changes unless the receipt was valid."""
    queue_dir = tmp_path / f"q{data.draw(st.integers(0, 10**9))}"
    with vsqs.Queue(queue_dir) as q:
        q.send(b"x")
        msg = q.receive(visibility_timeout=60)
        assert msg is not None and msg.receipt is not None
        receipt = msg.receipt
        pos = data.draw(st.integers(0, len(receipt)))
        piece = data.draw(st.sampled_from(["", "/", "..", "\x00", "٣", "A", "+", " ", "../x", "0"]))
        cut = data.draw(st.integers(0, 2))
        forged = receipt[:pos] + piece + receipt[pos + cut :]
        before = fingerprint(tmp_path)
        call = data.draw(st.sampled_from(["delete", "release", "extend"]))
        try:
            {"delete": q.delete, "release": q.release, "extend": lambda r: q.extend(r, 5)}[call](
                forged
            )
        except (vsqs.InvalidReceipt, vsqs.ReceiptExpired):
            assert fingerprint(tmp_path) == before
        else:
            assert forged == receipt, f"{forged!r} was accepted"


# -------------------------------------------------------------------- atheris
@pytest.mark.timeout(120)
@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None,
    reason="atheris is not installed (pip install atheris: wheels for CPython <= 3.11)",
)
def test_the_atheris_harness_finds_nothing_in_a_short_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "fuzz_names.py"), "-runs=20000", "-seed=1"],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"Done 20000 runs", done.stderr), done.stderr[-3000:]
