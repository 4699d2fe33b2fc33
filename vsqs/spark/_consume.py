"""Process a queue at least once with Spark: claim on the driver, delete after the sink."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from pyspark.sql import DataFrame

from .. import _names as names
from .._errors import InvalidArgument, ReceiptExpired
from .._fanout import fan_out
from .._message import Message
from .._options import ConsumeOptions, RetryPolicy
from .._queue import Queue
from .._worker import FailureLog, Heartbeat, failure_log
from ._read import SCHEMA

log = logging.getLogger("vsqs")

#: What ``process`` returns: nothing (every row succeeded), or the rows that
#: failed, as a DataFrame with an ``id`` column or as an iterable of ids.
Failed: TypeAlias = DataFrame | Iterable[str] | None


@dataclass(frozen=True)
class ConsumeReport:
    """What :func:`consume` did."""

    batches: int
    #: Messages received (handed to ``process``).
    messages: int
    #: Messages received again by someone else after their visibility timeout
    #: ran out during the batch: not deleted here, delivered again (at least once).
    expired: int
    #: Rows ``process`` returned as failed: released after their retry delay
    #: (or dead-lettered by the queue's ``max_receives`` when received again).
    failed: int


def consume(
    spark: Any,
    url: str,
    process: Callable[[DataFrame, int], Failed],
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
    ``in_flight``). While ``process`` runs, a heartbeat extends their
    visibility every third of the timeout, so a slow batch keeps its claims.
    A batch may hold several consecutive messages of one group (in send
    order: by ``id``); Spark runs rows side by side, so a ``process`` that
    must handle them one at a time does so itself (docs/spark.md).

    ``process`` returns the rows that failed: ``None`` (none did), a DataFrame
    with an ``id`` column (e.g. ``df.filter(...)``), or an iterable of ids.
    Those are released, each after the retry delay of
    :meth:`vsqs.Queue.consume` for its receive count (``retry_delay``,
    ``max_retry_delay`` and ``jitter`` as there; the queue's defaults unless
    given), and logged as ``Queue.consume`` logs a failing handler; the
    queue's ``max_receives`` dead-letters them when they are received again.
    The others are deleted, except the rows that follow a failed row in its
    group: those are released at once, not deleted, and come again after it,
    so a group's messages are settled in send order. An id that is not in
    the batch, or a return value of another kind, is an
    :class:`~vsqs.InvalidArgument` and fails the batch.

    If ``process`` raises (or fails the batch), the whole batch is released
    after the retry delays and the exception propagates: nothing is lost and
    nothing is deleted early; if it was interrupted (not an ``Exception``:
    Ctrl-C), the batch is visible again at once. A message whose visibility
    timeout ran out anyway and that someone else received meanwhile is not
    deleted and comes again to its new holder, so delivery is at least once:
    make ``process`` idempotent.

    Stops when a receive (waiting up to ``wait`` seconds) finds nothing, or
    after ``max_batches`` batches. ``unsafe_claims`` opens a store that cannot
    make claims exclusive (see :class:`vsqs.Queue`).
    """
    options = ConsumeOptions(
        visibility_timeout, retry_delay=retry_delay, max_retry_delay=max_retry_delay, jitter=jitter
    )
    batches = messages = expired = failed = 0
    with Queue(
        url, storage_options=storage_options, create=False, unsafe_claims=unsafe_claims
    ) as queue:
        plan = options.resolve(queue.config)
        vt, retry = plan.visibility_timeout, plan.retry
        failures = failure_log(queue)
        with Heartbeat(queue, vt) as heartbeat:
            while max_batches is None or batches < max_batches:
                got = queue.receive_batch(max_messages, visibility_timeout=vt, wait=wait)
                if not got:
                    break
                failed_ids = _process(spark, process, queue, got, batches, heartbeat, retry)
                expired += _settle(queue, got, failed_ids, retry, failures, batches)
                batches += 1
                messages += len(got)
                failed += len(failed_ids)
    if expired:
        log.warning("%s: %d receipts expired before their batch succeeded", url, expired)
    return ConsumeReport(batches, messages, expired, failed)


def _row(message: Message) -> tuple[Any, ...]:
    return (
        message.id,
        message.sent_at,
        message.body,
        names.IN_FLIGHT,
        message.receive_count,
        message.visible_at,
        message.group,
        message.attributes,
    )


def _process(
    spark: Any,
    process: Callable[[DataFrame, int], Failed],
    queue: Queue,
    got: list[Message],
    batch_id: int,
    heartbeat: Heartbeat,
    retry: RetryPolicy,
) -> set[str]:
    """Run ``process`` on a batch while the heartbeat holds it; return the ids
    of the rows it failed. If it raises, release the batch (after the retry
    delays, or at once if interrupted) and re-raise."""
    heartbeat.watch(*got)
    try:
        try:
            frame = spark.createDataFrame([_row(m) for m in got], SCHEMA)
            return _failed_ids(process(frame, batch_id), {m.id for m in got}, batch_id)
        finally:
            heartbeat.watch()
    except Exception:
        _release(queue, got, [retry.delay(m.receive_count) for m in got])
        raise
    except BaseException:
        _release(queue, got, [0.0] * len(got))
        raise


def _failed_ids(result: Failed, batch: set[str], batch_id: int) -> set[str]:
    """The ids of the rows ``process`` says failed (checked to be in its batch)."""
    if result is None:
        return set()
    if isinstance(result, DataFrame):
        if "id" not in result.columns:
            raise InvalidArgument(
                f"process returned a DataFrame without an id column for batch {batch_id}: "
                "return the failed rows (or their ids), or None"
            )
        ids: list[object] = [row[0] for row in result.select("id").collect()]
    elif isinstance(result, str | bytes) or not isinstance(result, Iterable):
        raise InvalidArgument(
            f"process returned {type(result).__name__} for batch {batch_id}: return None, "
            "the failed rows as a DataFrame with an id column, or an iterable of their ids"
        )
    else:
        ids = list(result)
    unknown = [i for i in ids if i not in batch]
    if unknown:
        raise InvalidArgument(
            f"process returned {len(unknown)} failed ids that are not in batch {batch_id}, "
            f"such as {unknown[0]!r}"
        )
    return {str(i) for i in ids}  # each is an id of the batch


def _settle(
    queue: Queue,
    got: list[Message],
    failed_ids: set[str],
    retry: RetryPolicy,
    failures: FailureLog,
    batch_id: int,
) -> int:
    """Release the failed rows after their retry delays, and the rows behind
    them in their groups at once; delete the others. Return how many receipts
    were stale (someone else received them meanwhile)."""
    failed = [m for m in got if m.id in failed_ids]
    delays = [retry.delay(m.receive_count) for m in failed]
    for message, delay in zip(failed, delays, strict=True):
        failures.failed(message, RuntimeError(f"process failed its row in batch {batch_id}"), delay)
    behind = _behind(got, failed)
    stale = _release(queue, failed + behind, delays + [0.0] * len(behind))
    kept = failed_ids.union(m.id for m in behind)
    done = [m for m in got if m.id not in kept]
    acked = queue.delete_batch(done)  # side by side on object stores
    if acked.failed:
        raise next(iter(acked.failed.values()))
    for message in done:
        failures.succeeded(message)
    return stale + len(acked.stale)


def _behind(got: list[Message], failed: list[Message]) -> list[Message]:
    """The messages of ``got`` that follow a failed one of their group (ids
    of one group sort in send order), failed ones left out."""
    first: dict[str, str] = {}  # group: its first failed id
    for message in failed:
        if message.group is not None:
            first[message.group] = min(first.get(message.group, message.id), message.id)
    failed_ids = {m.id for m in failed}
    return [m for m in got if m.group in first and m.id > first[m.group] and m.id not in failed_ids]


def _release(queue: Queue, got: list[Message], delays: list[float]) -> int:
    """Release each message after its delay, side by side on object stores;
    return how many receipts were stale. A release that fails otherwise is
    logged: the message comes back when its visibility timeout ends anyway."""
    outcomes = fan_out(
        lambda item: queue.release(item[0], delay=item[1]),
        list(zip(got, delays, strict=True)),
        queue.store.batch_width,
    )
    stale = 0
    for message, outcome in zip(got, outcomes, strict=True):
        error = outcome.exception()
        if isinstance(error, ReceiptExpired):
            stale += 1
        elif isinstance(error, Exception):
            log.warning("%s: could not release %s: %s", queue.url, message.id, error)
        elif error is not None:
            raise error
    return stale
