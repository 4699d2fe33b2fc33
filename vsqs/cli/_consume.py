"""``vsqs consume QUEUE -- CMD ARGS...``: a worker that runs a command per message.

Each message's body goes to CMD's stdin, its id, receipt, receive count,
group, attributes and queue to the environment variables of
:data:`COMMAND_ENV`. Exit 0 deletes the message; any other exit (or
``--timeout``, or a command that cannot be started) releases it after the
queue's retry backoff. :meth:`vsqs.Queue.consume` runs the loop: its
heartbeat keeps each message hidden while its command runs, its
``concurrency`` runs up to N commands at once (a group's messages one after
another, in order), its stop waits for the commands under way.

Signals: the first SIGINT or SIGTERM stops receiving and waits for the
commands under way (their exit status settles their messages); a second one
kills them (SIGKILL to each command's process group), their messages are
released, and the command exits 130 or 143. Commands run in process groups
of their own, so a Ctrl-C at the terminal reaches vsqs alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, NoReturn

import click

from .. import _config as config
from .. import _forks
from .._message import Message
from .._worker import POLL
from ._common import SECONDS, F, open_queue, queue_options
from ._interrupt import STOP, checkpoint
from ._report import Report, json_option

#: The environment variables ``vsqs consume`` sets for each command it runs
#: (defined with the settings, whose unknown-variable check passes them by).
COMMAND_ENV = config.COMMAND_ENV

#: Seconds a command that ran past ``--timeout`` gets between SIGTERM and SIGKILL.
KILL_GRACE = 5.0


class CommandFailed(Exception):
    """A command did not exit 0 (or ran past its timeout, or could not start):
    its message is released after the retry backoff. Its repr is its message,
    as the worker's log line of a repeated failure shows it."""

    def __repr__(self) -> str:
        return str(self)


class _Abandoned(BaseException):
    """A command killed by a second signal: the stopping consume released its
    message already. Not an ``Exception``, so that the worker neither logs a
    failure nor settles the message; it ends the handler's thread."""


class _OneLine(logging.Filter):
    """Drops the traceback from the worker's failure log when the failure is a
    command's: it would show vsqs's own frames, and the line before says why."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], CommandFailed):
            record.exc_info = None
        return True


@contextmanager
def _one_line_failures() -> Iterator[None]:
    logger, only = logging.getLogger("vsqs"), _OneLine()
    logger.addFilter(only)
    try:
        yield
    finally:
        logger.removeFilter(only)


@contextmanager
def _say_when_stopping(commands: Commands) -> Iterator[None]:
    """While this lasts, say on stderr when a first signal stops the consume."""
    over = _forks.event()

    def watch() -> None:
        while not over.is_set():
            if STOP.wait(POLL):
                click.echo(
                    f"vsqs: stopping: waiting for the {commands.running()} commands under way "
                    "(a second signal kills them)",
                    err=True,
                )
                return

    watcher = threading.Thread(target=watch, name="vsqs-consume-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        over.set()


def command_env(message: Message, url: str) -> dict[str, str]:
    """The environment of the command run for ``message`` (received from ``url``)."""
    return {
        **os.environ,
        "VSQS_MESSAGE_ID": message.id,
        "VSQS_RECEIPT": message.receipt or "",
        "VSQS_RECEIVE_COUNT": str(message.receive_count),
        "VSQS_GROUP": message.group or "",
        "VSQS_ATTRIBUTES": json.dumps(message.attributes, ensure_ascii=False),
        "VSQS_QUEUE": url,
    }


class Commands:
    """The handler of the consume: runs ``argv`` for a message, counts the
    outcomes in ``report``, and knows the commands running, to kill them."""

    def __init__(self, argv: list[str], url: str, timeout: float | None, report: Report) -> None:
        self._argv, self._url, self._timeout, self._report = argv, url, timeout, report
        self._lock = _forks.lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._killed: set[subprocess.Popen[bytes]] = set()  # by a second signal
        self._closing = False  # kill_all was called: a command started after is killed

    def __call__(self, message: Message) -> None:
        """Run the command on ``message``; raise :class:`CommandFailed` unless it exits 0."""
        # Started and known as running at once (under the lock), so that no
        # command starts unseen by kill_all, nor after it: a command left out
        # would outlive vsqs in its own process group.
        with self._lock:
            if self._closing:
                raise _Abandoned(self._argv[0])
            try:
                proc = subprocess.Popen(
                    self._argv,
                    stdin=subprocess.PIPE,
                    env=command_env(message, self._url),
                    process_group=0,  # a Ctrl-C at the terminal is vsqs's to handle
                )
            except OSError as exc:
                error: OSError | None = exc
            else:
                error = None
                self._running.add(proc)
        if error is not None:
            self._failed(message, f"could not start {self._argv[0]}: {error.strerror or error}")
        try:
            proc.communicate(message.body, timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._end(proc)
            self._count("timed_out")
            self._failed(message, f"timed out after {self._timeout:g} s (killed)")
        except BaseException:  # a second signal (concurrency 1: here, in the main thread)
            self.kill_all()
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
        if proc in self._killed:
            raise _Abandoned(self._argv[0])
        if proc.returncode != 0:
            self._failed(message, _status(proc.returncode))
        self._count("handled", "succeeded")

    def running(self) -> int:
        """How many commands are running."""
        with self._lock:
            return len(self._running)

    def kill_all(self) -> None:
        """SIGKILL the commands still running; count them as released."""
        with self._lock:
            running, self._running = list(self._running), set()
            self._closing = True
            self._killed.update(running)
            self._report.add("released", len(running))
        for proc in running:
            self._kill(proc)

    def _failed(self, message: Message, why: str) -> NoReturn:
        self._count("handled", "failed")
        click.echo(
            f"vsqs: {self._url}: command failed on {message.id} "
            f"(receive {message.receive_count}): {why}",
            err=True,
        )
        raise CommandFailed(why)

    def _count(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._report.add(key, 1)

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the command's process group, SIGKILL after :data:`KILL_GRACE`."""
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(KILL_GRACE)
        except subprocess.TimeoutExpired:
            self._kill(proc)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _status(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


def _summary(f: dict[str, Any]) -> str:
    return (
        f"handled {f['handled']:,} messages from {f['queue']}: {f['succeeded']:,} succeeded, "
        f"{f['failed']:,} failed ({f['timed_out']:,} timed out), {f['released']:,} released"
    )


def _seconds(flag: str, help: str) -> Callable[[F], F]:
    return click.option(flag, type=SECONDS, metavar="SECONDS", help=help)


def _count(short: str, flag: str, metavar: str, help: str) -> Callable[[F], F]:
    return click.option(short, flag, type=click.IntRange(1), metavar=metavar, help=help)


@click.command(short_help="Run a command for each message: exit 0 deletes it.")
@click.argument("url", metavar="QUEUE")
@click.argument("argv", metavar="-- CMD [ARGS]...", nargs=-1, required=True)
@_count("-c", "--concurrency", "N", "Commands run at once (default 1; a group's: one at a time).")
@_count("-n", "--max-messages", "M", "Stop after receiving this many messages.")
@_seconds("--idle-timeout", "Stop after this long without a command that succeeded.")
@click.option(
    "--timeout",
    type=click.FloatRange(0, min_open=True),
    metavar="SECONDS",
    help=f"Kill a command running longer (SIGTERM, SIGKILL {KILL_GRACE:g} s later).",
)
@_seconds(
    "--visibility-timeout",
    "Seconds a message is hidden (default: the queue's), extended while its command runs.",
)
@json_option
@queue_options
def consume(
    url: str,
    argv: tuple[str, ...],
    concurrency: int | None,
    max_messages: int | None,
    idle_timeout: float | None,
    timeout: float | None,
    visibility_timeout: float | None,
    as_json: bool,
) -> None:
    """Run CMD once per message of QUEUE, its body on stdin; exit 0 deletes it.

    Any other exit, a --timeout or a command that cannot start releases the
    message after the queue's retry backoff (dead-lettered after its
    max_receives). The environment holds VSQS_MESSAGE_ID, VSQS_RECEIPT,
    VSQS_RECEIVE_COUNT, VSQS_GROUP (empty if none), VSQS_ATTRIBUTES (JSON)
    and VSQS_QUEUE. Runs until --max-messages, --idle-timeout or a signal:
    the first SIGINT or SIGTERM waits for the commands under way, a second
    kills them and releases their messages. Exit 0, or 130/143 on a signal;
    failed commands are counted in the summary, not in the exit status. CMD
    not found: exit 1 before any message is received.
    """
    if shutil.which(argv[0]) is None:
        raise click.ClickException(f"{argv[0]}: command not found (or not executable)")
    with open_queue(url) as queue, _one_line_failures():
        report = Report(
            _summary,
            as_json=as_json,
            queue=queue.url,
            handled=0,
            succeeded=0,
            failed=0,
            timed_out=0,
            released=0,
        )
        commands = Commands(list(argv), queue.url, timeout, report)
        try:
            with _say_when_stopping(commands):
                queue.consume(
                    commands,
                    concurrency=concurrency or 1,
                    max_messages=max_messages,
                    idle_timeout=idle_timeout,
                    visibility_timeout=visibility_timeout,
                    stop=STOP,
                )
        finally:
            commands.kill_all()
        checkpoint()  # a first signal stopped it: exit 130 or 143, with the summary
        report.done()


__all__ = ["COMMAND_ENV", "KILL_GRACE", "CommandFailed", "command_env", "consume"]
