"""``vsqs move SRC DST``: move messages between any two queues, losing none
(the analogue of SQS's message move task).

Each batch is received at SRC (hidden there, not deleted), sent to DST with
``send_batch`` (durable when it returns), and only then deleted at SRC. A
crash or an error between the send and the delete leaves the batch in both
queues (at least once), never in neither; what is not deleted is released
at SRC at once (after a crash: when its hold runs out). Run it again to
resume.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .._errors import MessageTooLarge
from .._message import DeleteResult, Message
from .._place import refuse_same
from .._queue import Queue
from ._common import (
    SECONDS,
    batch_option,
    create_option,
    max_option,
    open_queue,
    progress_bar,
    progress_shown,
    queue_options,
)
from ._interrupt import checkpoint, release, take
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
    """
    with (
        open_queue(source, one_of_two=True) as src,
        open_queue(destination, create=create, one_of_two=True) as dst,
    ):
        refuse_same("move", src, dst)
        report = Report(_moved_text, as_json=as_json, moved=0, source=src.url, destination=dst.url)
        with progress_bar("moved", _total(src, max_messages)) as bar:
            while max_messages is None or report.fields["moved"] < max_messages:
                checkpoint()
                room = batch
                if max_messages is not None:
                    room = min(room, max_messages - report.fields["moved"])
                got = take(src, room, visibility_timeout=visibility_timeout)
                if not got:
                    break
                fits, too_big = _fitting(got, dst.config.max_message_size)
                if fits:
                    bar.update(_move_batch(src, dst, fits, report))
                if too_big:
                    release(src, too_big)
                    raise MessageTooLarge(
                        f"message {too_big[0].id} of {src.url} is {len(too_big[0].body):,} "
                        f"bytes; {dst.url} takes at most {dst.config.max_message_size:,} "
                        "(its max_message_size)"
                    )
        report.done()


def _fitting(batch: list[Message], limit: int) -> tuple[list[Message], list[Message]]:
    """``batch`` cut before its first body of more than ``limit`` bytes."""
    for i, message in enumerate(batch):
        if len(message.body) > limit:
            return batch[:i], batch[i:]
    return batch, []


def _moved_text(f: dict[str, Any]) -> str:
    return f"moved {f['moved']:,} messages from {f['source']} to {f['destination']}"


def _total(src: Queue, max_messages: int | None) -> int | None:
    """How many the bar counts to (a listing of SRC, made only for a bar)."""
    if not progress_shown():
        return max_messages
    ready = src.stats().ready
    return ready if max_messages is None else min(ready, max_messages)


def move_batch(
    src: Queue, dst: Queue, batch: list[Message], moved: Callable[[int], object]
) -> DeleteResult:
    """Send ``batch`` (held at ``src``) to ``dst``, then delete it at
    ``src``; tell ``moved`` how many were deleted, and return what the
    delete did. On any failure (a delete whose outcome is unknown too, which
    is raised), release at ``src`` what is still held there: what was sent
    is then in both queues (at least once), never in neither."""
    try:
        dst.send_batch([message.body for message in batch])
        acked = src.delete_batch(batch)
        moved(len(acked.deleted))
        for error in acked.failed.values():
            raise error
    except BaseException:
        release(src, batch)
        raise
    return acked


def _move_batch(src: Queue, dst: Queue, batch: list[Message], report: Report) -> int:
    """:func:`move_batch`, counted in ``report``; return how many were deleted."""
    acked = move_batch(src, dst, batch, lambda n: report.add("moved", n))
    if acked.stale:
        click.echo(
            f"vsqs: warning: {len(acked.stale)} messages were received again at "
            f"{src.url} after their hold ran out (try a longer --visibility-timeout): "
            f"they were sent to {dst.url} and remain at {src.url}",
            err=True,
        )
    return len(acked.deleted)


__all__ = ["move", "move_batch"]
