"""The console sessions of the docs, replayed.

Every ``$ command`` of a document's ``console`` blocks runs in ``bash``, in
order, in one directory, and what it prints (stdout and stderr as a terminal
shows them; ``[exit N]`` for a status other than 0) must be what the document
shows, up to what differs from run to run: ids (numbered in order of first
appearance, so a session that shows one id twice must print one id twice),
the expiry in a receipt, times, durations, rates, temp names, ports, the
padding of table columns and the places of a traceback. The documents show
the directory as ``/tmp/doc``.

``python -m tests.support.doc_sessions docs/cli.md`` rewrites the outputs of a
document from a fresh run in ``/tmp/doc``, with a moto server for its S3 session.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: Where the documents' sessions ran.
DOC_DIR = "/tmp/doc"
#: Seconds one command may take.
DEADLINE = 300
_EXIT = re.compile(r"\[exit (\d+)\]")
_RECEIPT = re.compile(r"(\d{13}-[0-9a-f]{4}-[0-9a-f]{16})\.\d{13}\.(\d+)\.(\d+)")
_ID = re.compile(r"\d{13}-[0-9a-f]{4}-[0-9a-f]{16}")
#: Run-to-run differences other than ids: (pattern, replacement), in order.
_VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00"), "<time>"),
    (re.compile(r'File "[^"]*/vsqs/'), 'File "<vsqs>/'),
    (re.compile(r", line \d+, in "), ", line <n>, in "),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"vsqs-demo-[A-Za-z0-9_]+"), "vsqs-demo-<x>"),
    (re.compile(r"producer [0-9a-f]{8}\b"), "producer <p>"),
    (re.compile(r"[\d,]+ msg/s"), "<n> msg/s"),
    (re.compile(r"[+-]?\d+\.\d+"), "<n>"),
    (re.compile(r" +"), " "),
]


@dataclass
class Step:
    """One ``$ command`` of a session and what the document shows it printing."""

    command: str
    shown: list[str]
    status: int
    line: int  # of the command in the document (1-based)


@dataclass
class Session:
    """The steps of one ``console`` block."""

    steps: list[Step] = field(default_factory=list)


def sessions(markdown: str) -> list[Session]:
    """The ``console`` blocks of a document."""
    found: list[Session] = []
    current: Session | None = None
    for number, line in enumerate(markdown.splitlines(), 1):
        if current is None:
            if line.strip() == "```console":
                current = Session()
            continue
        if line.strip() == "```":
            found.append(current)
            current = None
        elif line.startswith("$ "):
            current.steps.append(Step(line[2:], [], 0, number))
        elif current.steps:
            step = current.steps[-1]
            if (end := _EXIT.fullmatch(line)) is not None:
                step.status = int(end.group(1))
            else:
                step.shown.append(line)
    return found


def run(step: Step, cwd: Path, env: dict[str, str]) -> tuple[list[str], int]:
    """What ``step`` prints (stdout and stderr in one stream) and its status."""
    done = subprocess.run(
        ["bash", "-c", step.command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=DEADLINE,
    )
    text = done.stdout.decode(errors="replace").replace(str(cwd), DOC_DIR)
    return text.splitlines(), done.returncode


class Normaliser:
    """Lines as they compare: ids numbered in order of first appearance."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}

    def __call__(self, lines: list[str]) -> list[str]:
        return [self._line(line) for line in lines]

    def _line(self, line: str) -> str:
        line = _RECEIPT.sub(lambda m: f"{m.group(1)}.<expiry>.{m.group(2)}.{m.group(3)}", line)
        line = _ID.sub(self._number, line)
        for pattern, replacement in _VARYING:
            line = pattern.sub(replacement, line)
        return line.rstrip()

    def _number(self, match: re.Match[str]) -> str:
        return self._ids.setdefault(match.group(0), f"<id{len(self._ids) + 1}>")


def environment(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a session: the ``vsqs`` and ``python`` of this
    interpreter first on ``PATH``, no terminal, no VSQS_* of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VSQS_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["TERM"] = "dumb"
    return env | extra


def replay(
    markdown: str, cwd: Path, env: dict[str, str], skip: Callable[[Step], bool]
) -> Iterator[tuple[Step, list[str], int]]:
    """Run every step not skipped; yield it with what it printed and its status."""
    for session in sessions(markdown):
        for step in session.steps:
            if not skip(step):
                printed, status = run(step, cwd, env)
                yield step, printed, status


def rewrite(document: Path, env: dict[str, str], skip: Callable[[Step], bool]) -> None:
    """Replace the outputs the document shows by those of a fresh run in :data:`DOC_DIR`."""
    shutil.rmtree(DOC_DIR, ignore_errors=True)
    os.makedirs(DOC_DIR)
    lines = document.read_text().splitlines()
    markdown = "\n".join(lines)
    outputs = {
        step.line: printed + ([f"[exit {status}]"] if status else [])
        for step, printed, status in replay(markdown, Path(DOC_DIR), env, skip)
    }
    rewritten: list[str] = []
    keeping = True
    for number, line in enumerate(lines, 1):
        if number in outputs:
            rewritten.append(line)
            rewritten.extend(outputs[number])
            keeping = False
        elif line.startswith("$ ") or line.strip() == "```":
            rewritten.append(line)
            keeping = True
        elif keeping:
            rewritten.append(line)
    document.write_text("\n".join(rewritten) + "\n")


#: The credentials of the document's S3 session (its endpoint is the test's moto server).
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: Steps not run, by the start of their command, and why.
NOT_REPLAYED = {
    "vsqs pump load -n 0": "stopped by Ctrl-C at a moment of its own (tests/test_cli_signals.py)",
}


def not_replayed(step: Step) -> bool:
    return step.command.startswith(tuple(NOT_REPLAYED))


if __name__ == "__main__":
    from .moto_server import moto_s3

    with moto_s3("vsqs-docs") as options:
        endpoint = options["client_kwargs"]["endpoint_url"]
        rewrite(
            Path(sys.argv[1]), environment(AWS_ENV | {"AWS_ENDPOINT_URL": endpoint}), not_replayed
        )
