"""Redrive: moving dead letters back to the queue they came from
(:func:`redrive`), above the :class:`~vsqs._queue.Queue` facade.

Each message is received from the dead-letter queue first (so only one
mover handles it), published in its queue second (:func:`~vsqs._dead_letter.move_in`:
its id kept, its receive count 0) and deleted from the dead-letter queue
last: a crash between the two leaves a copy in both (at least once), never
in neither.
"""

from __future__ import annotations

import logging
from typing import Any

from ._bundled import held_alone
from ._dead_letter import Origin, move_in
from ._errors import InvalidArgument, QueueNotFound, ReceiptExpired
from ._message import Message, Progress, stored
from ._place import OpenedQueues, refuse_same
from ._queue import Queue
from .stores._base import Store
from .stores._location import without_credentials
from .stores._registry import same_location

log = logging.getLogger("vsqs")

#: How long a redrive holds a message while moving it (seconds).
MOVE_HOLD = 300.0


def check_missing(dead_letter: object, target: Queue, *, force: bool) -> None:
    """For a dead-letter queue that does not exist: it was never created, so
    nothing was dead-lettered (as ``stats()`` counts it), if ``target`` names
    it; else it is a misspelling, refused unless ``force``. Nothing is opened."""
    where = dead_letter.url if isinstance(dead_letter, Store) else dead_letter
    _check_named(where, target, force)


def check_redrive(dlq: Queue, target: Queue, force: bool) -> None:
    """Refuse a redrive into itself (under any two spellings of one place),
    and one whose source does not name ``dlq`` as its dead-letter queue
    unless ``force``."""
    refuse_same("redrive", dlq, target)
    _check_named(dlq.url, target, force)


def _check_named(dlq: object, target: Queue, force: bool) -> None:
    """Unless ``force``, refuse a redrive from ``dlq`` (a path or URL) into a
    queue whose config names another dead-letter queue, or none."""
    if force:
        return
    named = target.dead_letter_url
    if named is not None and same_location(named, dlq):
        return
    dlq = without_credentials(str(dlq))
    has = "has no dead-letter queue" if named is None else f"dead-letters to {named}"
    raise InvalidArgument(
        f"refusing to redrive {dlq} into {target.url}: {target.url} {has}, not "
        f"{dlq} (arguments swapped?); force=True (vsqs redrive --force) redrives anyway"
    )


def _move_back(message: Message, dlq: Queue, target: Queue) -> bool:
    """Move a message received from ``dlq`` into ``target``, then remove it
    from ``dlq``, with the origin records its receiver listed (the ack
    removes them; others are left to ``gc()``); whether it was still held there."""
    held = held_alone(message)
    record_id = target.store.ms_clock(target.clock).next_id()  # on the store's clock, as gc ages it
    move_in(target.store, target.durable, held, stored(message), Origin(record_id, b""))
    try:
        dlq.delete(message)
    except ReceiptExpired:
        return False
    return True


def redrive(
    dead_letter: object,
    source: object,
    *,
    storage_options: dict[str, Any] | None = None,
    max_messages: int | None = None,
    progress: Progress | None = None,
    unsafe_claims: bool = False,
    force: bool = False,
) -> int:
    """Move visible messages from a dead-letter queue back to ``source``; return how many.

    ``dead_letter`` and ``source`` are locations (opened here with
    ``storage_options`` and ``unsafe_claims``, and closed again) or open
    :class:`Queue` objects (left open). Each message keeps its id (so its FIFO
    position) and starts with a receive count of 0; its origin record goes.
    Safe to run concurrently with consumers of either queue and with another
    redrive: every message is first received from the dead-letter queue, so
    only one mover handles it.

    A dead-letter queue that was never created holds nothing: 0. A redrive of
    a queue into itself (which would never end) raises ``InvalidArgument``,
    and so, unless ``force``, does one into a queue whose config does not name
    ``dead_letter`` as its dead-letter queue (a queue name there is the
    sibling queue of that name; paths and URLs compare as the locations they
    resolve to).
    """
    with OpenedQueues(storage_options, unsafe_claims) as opened:
        try:
            dlq = opened.at(dead_letter)
        except QueueNotFound:
            check_missing(dead_letter, opened.at(source), force=force)
            return 0
        target = opened.at(source)
        check_redrive(dlq, target, force)
        moved = move_back(dlq, target, max_messages, progress)
    log.info("redrove %d messages from %s to %s", moved, dlq.url, target.url)
    return moved


def move_back(
    dlq: Queue, target: Queue, max_messages: int | None, progress: Progress | None = None
) -> int:
    """The moves of a redrive that :func:`check_redrive` allowed: up to
    ``max_messages`` visible messages of ``dlq`` into ``target``; how many."""
    moved = 0
    while max_messages is None or moved < max_messages:
        batch = dlq.receive_batch(
            100 if max_messages is None else min(100, max_messages - moved),
            visibility_timeout=MOVE_HOLD,
        )
        if not batch:
            break
        for message in batch:
            if _move_back(message, dlq, target):
                moved += 1
                if progress is not None:
                    progress(moved, max_messages)
    return moved
