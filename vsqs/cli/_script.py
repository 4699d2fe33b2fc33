"""The ``vsqs`` console script: the click group of :mod:`._app` run with
one-line errors and conventional exit codes.

Exit codes: 0 ok (also when the reader of stdout closes it: ``| head``), 1 an
error (one line on stderr; ``-v`` adds the traceback), 2 bad usage, 130 and
143 stopped by SIGINT and SIGTERM (one line on stderr says how far it got).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Any

import click

from .._errors import VsqsError
from ._app import main
from ._common import OWN_RECORDS, one_line
from ._interrupt import Interrupted, handling, pending
from ._report import OutputClosed, current_report

#: ``VSQS_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR, CRITICAL) sets the log
#: level when no -v is given.
LOG_LEVEL_ENV = "VSQS_LOG_LEVEL"


def run(argv: list[str] | None = None) -> None:
    """The console script: click with one-line errors and conventional exit codes."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("vsqs: %(levelname)s: %(message)s"))
    handler.addFilter(OWN_RECORDS)
    logging.getLogger().addHandler(handler)
    logging.getLogger("vsqs").setLevel(_env_level())
    meta: dict[str, Any] = {}
    with handling():
        try:
            with main.make_context("vsqs", list(sys.argv[1:] if argv is None else argv)) as ctx:
                meta = ctx.meta
                main.invoke(ctx)
        except BaseException as exc:  # each kind of end has its exit status
            sys.exit(_ended(exc, meta))
        if (signum := pending()) is not None:  # it came as the command finished its work
            sys.exit(_ended(Interrupted(signum), meta))


def _ended(exc: BaseException, meta: dict[str, Any]) -> int:
    """Say in one line (at most) why the command ended early; its exit status."""
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code
    if isinstance(exc, Interrupted):
        if (report := current_report(meta)) is not None:
            report.ended_early(f"vsqs: interrupted by {exc.name}: ", {"interrupted": exc.name})
        return exc.exit_code
    if isinstance(exc, OutputClosed):
        _silence_stdout()
        return 0
    if isinstance(exc, click.ClickException):
        return _click_error(exc)
    if isinstance(exc, VsqsError | OSError):
        if meta.get("vsqs.traceback"):
            traceback.print_exc()
        _error(one_line(exc), meta)
        return 1
    if isinstance(exc, click.Abort):
        click.echo("vsqs: aborted", err=True)
        return 1
    raise exc  # SystemExit, and bugs: as Python shows them


def _click_error(exc: click.ClickException) -> int:
    if isinstance(exc, _NO_ARGS_IS_HELP):  # bare `vsqs`: the help, as click shows it
        exc.show()
    elif isinstance(exc, click.UsageError):
        where = exc.ctx.command_path if exc.ctx is not None else "vsqs"
        click.echo(f"{where}: error: {exc.format_message()} (try '{where} --help')", err=True)
        return 2
    else:
        click.echo(f"vsqs: error: {exc.format_message()}", err=True)
    return exc.exit_code


def _error(message: str, meta: dict[str, Any]) -> None:
    """One line: the error, and how far the command got if it got anywhere."""
    report = current_report(meta)
    if report is not None and report.progressed:
        report.ended_early(f"vsqs: error: {message}; so far: ", {"error": message})
    else:
        click.echo(f"vsqs: error: {message}", err=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


#: click >= 8.2 raises this for a group run without a command (older click
#: prints the help and exits by itself).
_NO_ARGS_IS_HELP: type[click.UsageError] | tuple[()] = getattr(
    click.exceptions, "NoArgsIsHelpError", ()
)


def _env_level() -> str:
    level = os.environ.get(LOG_LEVEL_ENV, "WARNING").strip().upper() or "WARNING"
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise SystemExit(
            f"vsqs: error: {LOG_LEVEL_ENV}={level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL"
        )
    return level


__all__ = ["LOG_LEVEL_ENV", "run"]
