"""What the ``vsqs`` subcommands share: storage options, -v, queues, progress bars."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from tqdm import tqdm

from .._config import MAX_SECONDS
from .._envelope import check_key
from .._errors import VsqsError
from .._message import Progress
from .._queue import Queue
from ..stores._location import object_store_options

F = TypeVar("F", bound=Callable[..., Any])


class OwnRecords(logging.Filter):
    """Only vsqs's own log records, until ``-v`` lets a client library's
    warnings through too (gcsfs logs each failed retry with a traceback:
    that would break the rule of one line per error)."""

    others = False

    def filter(self, record: logging.LogRecord) -> bool:
        return self.others or record.name == "vsqs" or record.name.startswith("vsqs.")


#: The filter on the console script's log handler.
OWN_RECORDS = OwnRecords()


def _set_verbosity(ctx: click.Context, _param: click.Parameter, count: int) -> None:
    if count:
        logging.getLogger("vsqs").setLevel(logging.INFO if count == 1 else logging.DEBUG)
        OWN_RECORDS.others = True
        ctx.meta["vsqs.traceback"] = True


#: Where the ``-o`` options are kept in ``click.Context.meta``, and those of
#: one side of a command on two queues (``--source-option``, ``--dest-option``).
OPTIONS, SOURCE_OPTIONS, DEST_OPTIONS = (
    "vsqs.storage_options",
    "vsqs.source_options",
    "vsqs.dest_options",
)


def _parse_options(ctx: click.Context, param: click.Parameter, pairs: tuple[str, ...]) -> None:
    where = {"source_options": SOURCE_OPTIONS, "dest_options": DEST_OPTIONS}.get(
        param.name or "", OPTIONS
    )
    options: dict[str, Any] = ctx.meta.setdefault(where, {})
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=f"'{param.opts[0]}'")
        try:
            value = json.loads(text)
        except ValueError:
            value = text  # plain strings need no quotes
        *parents, leaf = key.split(".")
        target = options
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value


def _set_unsafe(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta["vsqs.unsafe_claims"] = True


def queue_options(fn: F) -> F:
    """``-o KEY=VALUE`` storage options, ``--unsafe-claims`` and ``-v`` on a subcommand."""
    fn = click.option(
        "--unsafe-claims",
        is_flag=True,
        expose_value=False,
        callback=_set_unsafe,
        help="Use a store that cannot make claims exclusive (two consumers may "
        "receive one message at once; see docs/protocol.md).",
    )(fn)
    fn = click.option(
        "-o",
        "--option",
        "storage_options",
        multiple=True,
        metavar="KEY=VALUE",
        expose_value=False,
        callback=_parse_options,
        help="Storage option for s3:// or gs:// queues (repeatable). VALUE is JSON "
        "if it parses (true, 3, {...}), else a string; a.b=v nests.",
    )(fn)
    return verbose_option(fn)


def max_option(default: int | None, help: str) -> Callable[[F], F]:
    """``-n/--max N``: how many messages a command handles at most."""
    return click.option(
        "-n",
        "--max",
        "max_messages",
        type=click.IntRange(1),
        metavar="N",
        default=default,
        show_default=default is not None,
        help=help,
    )


def batch_option(default: int, most: int | None, help: str) -> Callable[[F], F]:
    """``--batch N``: messages a command sends, receives or deletes together."""
    return click.option(
        "--batch",
        type=click.IntRange(1, most),
        metavar="N",
        default=default,
        show_default=True,
        help=help,
    )


def create_option(what: str) -> Callable[[F], F]:
    """``--create/--no-create``: whether a command creates ``what`` when it does not exist."""
    return click.option(
        "--create/--no-create",
        default=True,
        show_default=True,
        help=f"Create {what} if it does not exist.",
    )


def _check_key(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    try:
        return None if value is None else check_key(value, param.name or "value")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def key_option(flag: str, metavar: str, help: str) -> Callable[[F], F]:
    """``--group G`` or ``--dedup-id ID``: 1-128 printable ASCII characters
    without space, checked as the option is read (a bad one is bad usage)."""
    return click.option(flag, metavar=metavar, callback=_check_key, help=help)


def verbose_option(fn: F) -> F:
    return click.option(
        "-v",
        "--verbose",
        count=True,
        expose_value=False,
        callback=_set_verbosity,
        help="Log INFO (-vv: DEBUG) to stderr and show tracebacks.",
    )(fn)


def side_options(fn: F) -> F:
    """``--source-option`` and ``--dest-option``: storage options of one of
    the two queues of a command (on top of ``-o``, which both take)."""
    for flag, name, queue in (
        ("--dest-option", "dest_options", "DST"),
        ("--source-option", "source_options", "SRC"),
    ):
        fn = click.option(
            flag,
            name,
            multiple=True,
            metavar="KEY=VALUE",
            expose_value=False,
            callback=_parse_options,
            help=f"Storage option for {queue} alone, over -o's (repeatable; as -o).",
        )(fn)
    return fn


def storage_options() -> dict[str, Any] | None:
    """The ``-o`` options of the command being run."""
    return click.get_current_context().meta.get(OPTIONS) or None


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s options on top, nested ones merged key by key."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            value = _merged(below, value)
        out[key] = value
    return out


def unsafe_claims() -> bool:
    """Whether the command runs with ``--unsafe-claims``."""
    return bool(click.get_current_context().meta.get("vsqs.unsafe_claims"))


def open_queue(
    url: str,
    *,
    create: bool = False,
    one_of_two: bool = False,
    side: str | None = None,
    **queue_args: Any,
) -> Queue:
    """The queue at ``url`` with the command's ``-o`` options and ``--unsafe-claims``
    (by default, only if it exists).

    ``one_of_two``: the command works on two queues (``move``, ``redrive``),
    and the ``-o`` options are for those on an object store; a local path
    gets none. ``side``: which of the two it is (:data:`SOURCE_OPTIONS` or
    :data:`DEST_OPTIONS`), whose own options go on top, as given.
    """
    options = storage_options()
    if one_of_two:
        options = object_store_options(url, options)
    own = click.get_current_context().meta.get(side) if side is not None else None
    if own:
        options = _merged(options or {}, own)
    return Queue(
        url,
        storage_options=options,
        create=create,
        unsafe_claims=unsafe_claims(),
        **queue_args,
    )


def progress_shown() -> bool:
    """Whether progress bars are drawn: whenever stderr is a terminal (stdout
    may be a file or a pipe)."""
    return sys.stderr.isatty()


@contextmanager
def progress_bar(desc: str, total: int | None = None) -> Iterator[tqdm]:
    """A tqdm bar on stderr, shown only on a terminal."""
    with tqdm(desc=desc, total=total, unit="msg", disable=not progress_shown(), leave=False) as bar:
        yield bar


@contextmanager
def progress_callback(desc: str, step: Progress | None = None) -> Iterator[Progress]:
    """A :data:`vsqs._message.Progress` callback that drives a bar, then calls ``step``."""
    with progress_bar(desc) as bar:

        def update(done: int, total: int | None) -> None:
            if total is not None and bar.total != total:
                bar.total = total
            bar.update(done - bar.n)
            if step is not None:
                step(done, total)

        yield update


SECONDS = click.FloatRange(0, MAX_SECONDS)


def one_line(exc: BaseException) -> str:
    """An error's message on one line (named by its type unless it is vsqs's own)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, VsqsError) else f"{type(exc).__name__}: {text}"
