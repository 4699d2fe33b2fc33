"""``vsqs move SRC DST``: move messages between any two queues, losing none
(:func:`vsqs.move`, with the command's interrupt checkpoints, report and
progress bar).
"""

from __future__ import annotations

from typing import Any

import click

from .._move import move_between
from .._place import refuse_same
from .._queue import Queue
from ._common import (
    DEST_OPTIONS,
    SECONDS,
    SOURCE_OPTIONS,
    batch_option,
    create_option,
    max_option,
    open_queue,
    progress_bar,
    progress_shown,
    queue_options,
    side_options,
)
from ._interrupt import STOP, checkpoint
from ._report import Report, json_option


@click.command(short_help="Move messages to another queue, losing none.")
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@max_option(None, "Move at most this many.")
@batch_option(100, 1000, "Messages received, sent and deleted together.")
@click.option(
    "--visibility-timeout",
    type=SECONDS,
    metavar="SECONDS",
    help="Seconds a batch stays hidden at SRC while it moves (default: SRC's).",
)
@create_option("DST")
@json_option
@side_options
@queue_options
def move(
    source: str,
    destination: str,
    max_messages: int | None,
    batch: int,
    visibility_timeout: float | None,
    create: bool,
    as_json: bool,
) -> None:
    """Move the visible messages of SRC to DST (any two queues: local, S3, GCS),
    losing none, until SRC has none left (or --max).

    Each batch is sent to DST, durably, before it is deleted at SRC: a crash
    in between leaves it in both queues, never in neither (at least once);
    an error gives back to SRC what was not deleted. Run it again to resume.
    Bodies move; DST gives them new ids, in SRC's order, and a receive count
    of 0. Messages in flight or delayed at SRC stay there. Ctrl-C or SIGTERM
    finishes or gives back the batch under way and says how many moved.

    -o options go to both queues (those on an object store); --source-option
    and --dest-option to one of them, over -o's (two object stores with
    their own endpoints or credentials).
    """
    with (
        open_queue(source, one_of_two=True, side=SOURCE_OPTIONS) as src,
        open_queue(destination, create=create, one_of_two=True, side=DEST_OPTIONS) as dst,
    ):
        refuse_same("move", src, dst)
        report = Report(_moved_text, as_json=as_json, moved=0, source=src.url, destination=dst.url)
        with progress_bar("moved", _total(src, max_messages)) as bar:

            def moved(done: int, _total: int | None) -> None:
                report.add("moved", done - report.fields["moved"])
                bar.update(done - bar.n)

            move_between(
                src,
                dst,
                max_messages=max_messages,
                batch_size=batch,
                visibility_timeout=visibility_timeout,
                progress=moved,
                stop=STOP,
                stale=_warn_stale,
            )
            checkpoint()  # a signal stopped it: say so, with how many moved
        report.done()


def _moved_text(f: dict[str, Any]) -> str:
    return f"moved {f['moved']:,} messages from {f['source']} to {f['destination']}"


def _total(src: Queue, max_messages: int | None) -> int | None:
    """How many the bar counts to (a listing of SRC, made only for a bar)."""
    if not progress_shown():
        return max_messages
    ready = src.stats().ready
    return ready if max_messages is None else min(ready, max_messages)


def _warn_stale(count: int, src: Queue, dst: Queue) -> None:
    click.echo(
        f"vsqs: warning: {count} messages were received again at "
        f"{src.url} after their hold ran out (try a longer --visibility-timeout): "
        f"they were sent to {dst.url} and remain at {src.url}",
        err=True,
    )


__all__ = ["move"]
