"""Moving messages between any two queues, losing none (:func:`move`: the
analogue of SQS's message move task, and the body of ``vsqs move``).

Each batch is received at the source (hidden there, not deleted), sent to
the destination with ``send_batch`` (durable when it returns), and only then
deleted at the source. A crash or an error between the send and the delete
leaves the batch in both queues (at least once), never in neither; what is
not deleted is released at the source at once (after a crash: when its hold
runs out). Run it again to resume.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any

from ._config import positive_int
from ._errors import MessageTooLarge, ReceiptExpired
from ._message import DeleteResult, Message, Progress
from ._outgoing import Outgoing
from ._place import OpenedQueues, refuse_same
from ._queue import Queue

log = logging.getLogger("vsqs")

#: Messages a move receives, sends and deletes together unless told otherwise.
DEFAULT_BATCH = 100

#: ``stale(count, source, destination)``: ``count`` messages of a batch were
#: received again at ``source`` after their hold ran out while they moved.
Stale = Callable[[int, Queue, Queue], None]


def move(
    source: object,
    destination: object,
    *,
    storage_options: dict[str, Any] | None = None,
    max_messages: int | None = None,
    batch_size: int = DEFAULT_BATCH,
    visibility_timeout: float | None = None,
    create: bool = True,
    progress: Progress | None = None,
    unsafe_claims: bool = False,
) -> int:
    """Move the visible messages of ``source`` to ``destination`` (any two
    queues: local, S3, GCS...), until ``source`` has none left or
    ``max_messages`` moved; return how many moved.

    ``source`` and ``destination`` are locations (opened here with
    ``unsafe_claims``, ``storage_options`` going to the one that is an
    object-store URL, and closed again) or open :class:`Queue` objects (left
    open); ``destination`` is created if it does not exist unless not
    ``create``. Each batch of ``batch_size`` is received at ``source``
    (hidden for ``visibility_timeout``, by default ``source``'s), sent to
    ``destination`` and only then deleted at ``source``: a crash in between
    leaves it in both queues (at least once), never in neither, and an error
    gives back to ``source`` what was not deleted. Bodies move; the
    destination gives them new ids, in the source's order, and a receive
    count of 0. Messages in flight or delayed at ``source`` stay there.
    ``progress(moved, max_messages)`` is called after each batch.

    A move of a queue into itself (under any two spellings of one place,
    which would never end) raises ``InvalidArgument``; a message larger than
    the destination's ``max_message_size`` raises ``MessageTooLarge`` (the
    ones before it moved; it stays at ``source``).
    """
    if max_messages is not None:
        positive_int(max_messages, "max_messages")
    positive_int(batch_size, "batch_size")
    with OpenedQueues(storage_options, unsafe_claims, one_of_two=True) as opened:
        src = opened.at(source)
        dst = opened.at(destination, create=create)
        refuse_same("move", src, dst)
        moved = move_between(
            src,
            dst,
            max_messages=max_messages,
            batch_size=batch_size,
            visibility_timeout=visibility_timeout,
            progress=progress,
        )
    log.info("moved %d messages from %s to %s", moved, src.url, dst.url)
    return moved


def move_between(
    src: Queue,
    dst: Queue,
    *,
    max_messages: int | None,
    batch_size: int,
    visibility_timeout: float | None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    stale: Stale | None = None,
) -> int:
    """The moves of :func:`move` between two open queues that
    :func:`~vsqs._place.refuse_same` allowed; how many moved.

    ``stop``: once it is set, no further batch is received, and a batch
    received as it was set is released at ``src`` (a long poll's receive
    ends within a second); the move returns how many moved so far.
    ``stale`` is told of messages received again at ``src`` after their hold
    ran out (sent, and left at ``src``: at least once); by default it is logged.
    """
    moved = 0

    def deleted(count: int) -> None:
        nonlocal moved
        moved += count
        if progress is not None:
            progress(moved, max_messages)

    while max_messages is None or moved < max_messages:
        if stop is not None and stop.is_set():
            break
        room = batch_size if max_messages is None else min(batch_size, max_messages - moved)
        got = src.receive_batch(room, visibility_timeout=visibility_timeout, stop=stop)
        if stop is not None and stop.is_set():
            release(src, got)
            break
        if not got:
            break
        fits, too_big = _fitting(got, dst.config.max_message_size)
        if fits:
            acked = move_batch(src, dst, fits, deleted)
            if acked.stale:
                (stale or _log_stale)(len(acked.stale), src, dst)
        if too_big:
            release(src, too_big)
            raise MessageTooLarge(
                f"message {too_big[0].id} of {src.url} is {len(too_big[0].body):,} "
                f"bytes; {dst.url} takes at most {dst.config.max_message_size:,} "
                "(its max_message_size)"
            )
    return moved


def move_batch(
    src: Queue, dst: Queue, batch: list[Message], moved: Callable[[int], object]
) -> DeleteResult:
    """Send ``batch`` (held at ``src``) to ``dst``, then delete it at
    ``src``; tell ``moved`` how many were deleted, and return what the
    delete did. On any failure (a delete whose outcome is unknown too, which
    is raised), release at ``src`` what is still held there: what was sent
    is then in both queues (at least once), never in neither."""
    try:
        dst.send_batch([Outgoing(m.body, group=m.group, attributes=m.attributes) for m in batch])
        acked = src.delete_batch(batch)
        moved(len(acked.deleted))
        for error in acked.failed.values():
            raise error
    except BaseException:
        release(src, batch)
        raise
    return acked


def release(queue: Queue, messages: Iterable[Message]) -> None:
    """Give back every message this client still holds (visible again at once)."""
    for message in messages:
        if not message.settled:
            with suppress(ReceiptExpired):
                queue.release(message)


def _fitting(batch: list[Message], limit: int) -> tuple[list[Message], list[Message]]:
    """``batch`` cut before its first body of more than ``limit`` bytes."""
    for i, message in enumerate(batch):
        if len(message.body) > limit:
            return batch[:i], batch[i:]
    return batch, []


def _log_stale(count: int, src: Queue, dst: Queue) -> None:
    log.warning(
        "%d messages were received again at %s after their hold ran out (try a longer "
        "visibility_timeout): they were sent to %s and remain at %s",
        count,
        src.url,
        dst.url,
        src.url,
    )
