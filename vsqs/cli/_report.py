"""What the ``vsqs`` command says, and where: data on stdout, words for people on stderr.

Data (ids, bodies, JSON lines, names) goes to stdout through :func:`out`. A
command's summary (``purged 3 messages ...``) goes to stderr, or, with
``--json``, as one JSON object to stdout. A command that does its work in
steps keeps a :class:`Report` of how far it got, so that one line can say it
also when the command is interrupted or fails half way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: Where the command's report is kept, in ``click.Context.meta``.
REPORT = "vsqs.report"


class OutputClosed(Exception):
    """Whoever reads stdout closed it (``| head``): the command ends quietly."""


def out(data: bytes) -> None:
    """Write all of ``data`` to stdout at once; :class:`OutputClosed` if the
    reader is gone (then not all of it was written)."""
    stream = sys.stdout.buffer  # unbuffered (python -u): a write may take part of it
    view = memoryview(data)
    try:
        while view:
            view = view[stream.write(view) :]
        stream.flush()
    except BrokenPipeError:
        raise OutputClosed from None


def out_line(text: str) -> None:
    out(text.encode() + b"\n")


def json_option(fn: F) -> F:
    """``--json``: the summary as one JSON object on stdout instead of a line on stderr."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the summary as one JSON object on stdout (not a line on stderr).",
    )(fn)


class Report:
    """How far a command got: ``fields`` (its JSON summary) and ``text`` (its line).

    Made at the start of the work; the command updates ``fields`` as each step
    commits and calls :meth:`done` at its end. Until then, the console script
    says it in one line if the command is interrupted or fails
    (:meth:`ended_early`).
    """

    def __init__(
        self, text: Callable[[dict[str, Any]], str], *, as_json: bool = False, **fields: Any
    ) -> None:
        self.text = text
        self.as_json = as_json
        self.fields = fields
        #: Whether any step was reported (an error then says how far it got).
        self.progressed = False
        click.get_current_context().meta[REPORT] = self

    def add(self, key: str, count: int) -> None:
        self.fields[key] += count
        self.progressed = self.progressed or count > 0

    def line(self) -> str:
        return self.text(self.fields)

    def done(self, *, say: bool = True) -> None:
        """The command's normal end: its summary (unless not ``say``: a
        command whose data output says it all)."""
        click.get_current_context().meta.pop(REPORT, None)
        if say:
            self._say(self.line(), {})

    def ended_early(self, prefix: str, why: dict[str, str]) -> None:
        """The command stopped before its end: ``prefix`` and the summary on
        stderr (and, with --json, the fields and ``why`` on stdout)."""
        self._say(f"{prefix}{self.line()}", why, always_line=True)

    def _say(self, line: str, extra: dict[str, str], *, always_line: bool = False) -> None:
        if self.as_json:
            with suppress(OutputClosed):
                out_line(json.dumps(self.fields | extra))
        if always_line or not self.as_json:
            click.echo(line, err=True)


def current_report(meta: dict[str, Any]) -> Report | None:
    """The report of the command whose context ``meta`` is, if it keeps one and has not ended."""
    report = meta.get(REPORT)
    return report if isinstance(report, Report) else None


__all__ = ["OutputClosed", "Report", "current_report", "json_option", "out", "out_line"]
