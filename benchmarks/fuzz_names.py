"""Fuzz vsqs's name grammar and location parsing with atheris (coverage-guided, libFuzzer).

What it tries to break: every function that turns untrusted text into a name
or a path, without doing I/O:

* ``vsqs._names.parse``, ``parse_receipt``, ``is_receipt``, ``validate_queue_name``;
* ``vsqs.stores._location.check_components`` and ``url_path`` (object-store URLs are
  checked before any filesystem object is made), ``location_text``, and
  ``open_store`` on local paths and ``file://`` URLs (it only builds a
  ``LocalStore``; object-store URLs are not passed to it, since fsspec may
  contact a server while building some filesystems).

Properties checked on every input (a failure is an uncaught exception, which
atheris reports with the input that caused it):

* only ``vsqs.VsqsError`` subclasses escape;
* every accepted message name, receipt, queue name and URL queue name is a
  single safe path component: non-empty, ASCII, no ``/`` or NUL, not ``.`` or
  ``..``; every accepted message name rebuilds to itself;
* ``is_receipt`` agrees with ``parse_receipt``;
* a local location resolves to ``os.path.abspath`` of its path, whose last
  component is a valid queue name.

Inputs are either raw text or text assembled from tokens of the grammar
(ids, expiries, ``.new``, ``://``, ``::``, ``..``, look-alike digits), so the
fuzzer reaches the accepting paths, not only the refusals.

Usage (any libFuzzer flag is accepted; ``-runs`` bounds the executions)::

    python benchmarks/fuzz_names.py -runs=200000
    python benchmarks/fuzz_names.py -runs=20000 -seed=1
    python benchmarks/fuzz_names.py -max_total_time=60 corpus_dir/

Needs ``pip install atheris`` (wheels for CPython 3.8-3.11 on Linux x86_64).
"""

from __future__ import annotations

import os
import sys

if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
    print(__doc__)
    sys.exit(0)

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.test_names import rebuilt

with atheris.instrument_imports():
    from vsqs import _names as names
    from vsqs._errors import VsqsError
    from vsqs.stores import _location as location
    from vsqs.stores import _registry as registry
    from vsqs.stores._local import LocalStore

TOKENS = [
    "0",
    "1",
    "9",
    "a",
    "f",
    "F",
    "z",
    "-",
    ".",
    "..",
    "/",
    "\\",
    "\x00",
    " ",
    "\n",
    "+",
    "~",
    "%2e",
    "%2f",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: str.isdigit() and int() accept it
    "\uff13",  # FULLWIDTH DIGIT THREE
    "\u2024",  # ONE DOT LEADER, looks like "."
    "\u200b",
    ".new",
    ".json",
    "vsqs.json",
    "://",
    "::",
    "file",
    "memory",
    "s3",
    "gs",
    "?",
    "#",
    "1750000000000",
    "0123456789abcdef",
    "abcd",
    "1750000000000-0000-0123456789abcdef",
    ".1750000000000.1.1",
    ".1750000000000.0.1",
    ".1750000000000.1",
    ".9999999999999.999999999.999999999",
    "q",
    "jobs",
]


#: Parts of a message name, each valid or nearly so.
ID_PARTS = ["1750000000000", "175000000000", "17500000000000", "\u0661" + "7" * 12, "+750000000000"]
SEQ_PARTS = ["0000", "abcd", "ABCD", "000", "0000 ", "00/0"]
NONCE_PARTS = ["0123456789abcdef", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdefa"]
EXPIRY_PARTS = ["1750000000000", "9999999999999", "0000000000000", "175000000000", "7" * 12 + "\n"]
COUNT_PARTS = ["1", "0", "01", "999999999", "1000000000", "\u0663", "+1", " 1", "1/..", ""]
VERSION_PARTS = ["1", "0", "01", "999999999", "1000000000", "\u0663", ""]
SUFFIXES = ["", ".new", ".new.bak", "/", "/..", "\x00", ".", ".json"]


def _name_like(fdp: atheris.FuzzedDataProvider) -> str:
    """A string shaped like a message name, with one part or more off."""

    def pick(options: list[str]) -> str:
        return options[fdp.ConsumeIntInRange(0, len(options) - 1)]

    name = f"{pick(ID_PARTS)}-{pick(SEQ_PARTS)}-{pick(NONCE_PARTS)}"
    if fdp.ConsumeBool():
        name += f".{pick(EXPIRY_PARTS)}.{pick(COUNT_PARTS)}"
        if fdp.ConsumeBool():
            name += f".{pick(VERSION_PARTS)}"
    name += pick(SUFFIXES)
    if fdp.ConsumeBool():  # one more arbitrary edit
        at = fdp.ConsumeIntInRange(0, len(name))
        name = name[:at] + fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 2)) + name[at + 1 :]
    return name


def _text(fdp: atheris.FuzzedDataProvider) -> str:
    """Raw text (surrogates included), a name-shaped string, or text assembled from tokens."""
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 120))
    if mode == 1:
        return _name_like(fdp)
    parts = []
    for _ in range(fdp.ConsumeIntInRange(0, 12)):
        if fdp.ConsumeBool():
            parts.append(TOKENS[fdp.ConsumeIntInRange(0, len(TOKENS) - 1)])
        else:
            parts.append(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 4)))
    return "".join(parts)


def _safe_component(name: str) -> None:
    assert name and name.isascii(), repr(name)
    assert "/" not in name and "\x00" not in name and name not in (".", ".."), repr(name)


def _check_names(text: str) -> None:
    parsed = names.parse(text)
    if parsed is not None:
        _safe_component(text)
        assert rebuilt(parsed) == text, (text, rebuilt(parsed))
        assert names.is_id(parsed.id)
    try:
        receipt = names.parse_receipt(text)
    except VsqsError:
        assert not names.is_receipt(text), text
    else:
        assert names.is_receipt(text) and receipt == parsed and receipt.receive_count >= 1
    try:
        queue_name = names.validate_queue_name(text)
    except VsqsError:
        pass
    else:
        _safe_component(queue_name)
        assert ".." not in queue_name and len(queue_name) <= 128
        assert queue_name != names.CONFIG_NAME


def _check_url(text: str) -> None:
    try:
        last = location.check_components(text)
    except VsqsError:
        return
    assert "/" not in last and last not in (".", ".."), (text, last)
    assert location.url_path(text).endswith(last)


def _check_local(text: str) -> None:
    scheme, sep, _ = text.partition("://")
    if sep and scheme != "file":
        return  # object stores: fsspec may contact a server while building some
    try:
        store = registry.open_store(text, None)
    except VsqsError:
        return
    assert isinstance(store, LocalStore)
    assert store.path == os.path.abspath(store.path)
    names.validate_queue_name(os.path.basename(store.path))


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    text = _text(fdp)
    _check_names(text)
    _check_url(text)
    _check_local(text)
    try:
        checked = location.location_text(text, "fuzzed location")
    except VsqsError:
        return
    assert "\x00" not in checked and checked.strip()


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
