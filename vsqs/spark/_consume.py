"""Process a queue at least once with Spark: claim on the driver, delete after the sink."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _names as names
from .._message import Message
from .._queue import Queue
from .._worker import Backoff
from ._read import SCHEMA

log = logging.getLogger("vsqs")


@dataclass(frozen=True)
class ConsumeReport:
    """What :func:`consume` did."""

    batches: int
    messages: int
    #: Messages received again by someone else after their visibility timeout
    #: ran out during the batch: not deleted here, delivered again (at least once).
    expired: int


def consume(
    spark: Any,
    url: str,
    process: Callable[[Any, int], object],
    *,
    max_messages: int = 1000,
    visibility_timeout: float | None = None,
    wait: float = 0.0,
    max_batches: int | None = None,
    storage_options: dict[str, Any] | None = None,
    unsafe_claims: bool = False,
    retry_delay: float | None = None,
    max_retry_delay: float | None = None,
    jitter: Callable[[], float] | None = None,
) -> ConsumeReport:
    """Call ``process(df, batch_id)`` on batches of received messages until the queue is empty.

    The driver receives up to ``max_messages`` (claims: nobody else receives
    them for ``visibility_timeout`` seconds) and hands them to ``process`` as a
    DataFrame with the columns of ``spark.read.format("vsqs")`` (``state`` is
    ``in_flight``). Only when ``process`` returns are they deleted. If it
    raises, they are released and the exception propagates: nothing is lost
    and nothing is deleted early. Each message is released with the backoff
    delay of :meth:`vsqs.Queue.consume` for its receive count
    (``retry_delay``, ``max_retry_delay`` and ``jitter`` as there; the
    queue's defaults unless given), so a job that is run again, or another
    consumer, does not retry a failing batch in a tight loop; if ``process``
    was interrupted (not an ``Exception``: Ctrl-C), they are visible again at once. A message whose
    visibility timeout ran out while ``process`` ran, and that someone else
    received meanwhile, is not deleted and comes again to its new holder, so
    delivery is at least once: make ``process`` idempotent or give it a
    visibility timeout longer than a batch takes.

    Stops when a receive (waiting up to ``wait`` seconds) finds nothing, or
    after ``max_batches`` batches. ``unsafe_claims`` opens a store that cannot
    make claims exclusive (see :class:`vsqs.Queue`).
    """
    batches = messages = expired = 0
    with Queue(
        url, storage_options=storage_options, create=False, unsafe_claims=unsafe_claims
    ) as queue:
        backoff = Backoff(queue, retry_delay, max_retry_delay, jitter)
        while max_batches is None or batches < max_batches:
            got = queue.receive_batch(
                max_messages, visibility_timeout=visibility_timeout, wait=wait
            )
            if not got:
                break
            frame = spark.createDataFrame([_row(m) for m in got], SCHEMA)
            try:
                process(frame, batches)
            except Exception:
                _release(got, backoff)
                raise
            except BaseException:
                _release(got, None)
                raise
            acked = queue.delete_batch(got)  # side by side on object stores
            if acked.failed:
                raise next(iter(acked.failed.values()))
            expired += len(acked.stale)
            batches += 1
            messages += len(got)
    if expired:
        log.warning("%s: %d receipts expired before their batch succeeded", url, expired)
    return ConsumeReport(batches, messages, expired)


def _row(message: Message) -> tuple[Any, ...]:
    return (
        message.id,
        message.sent_at,
        message.body,
        names.IN_FLIGHT,
        message.receive_count,
        message.visible_at,
    )


def _release(got: list[Message], backoff: Backoff | None) -> None:
    """Release ``got`` after a failed batch: each after its backoff delay, or at once."""
    for message in got:
        try:
            message.release(delay=0 if backoff is None else backoff.delay(message.receive_count))
        except Exception as exc:  # it comes back at its expiry anyway
            log.warning("%s: could not release after a failed batch: %s", message.id, exc)
