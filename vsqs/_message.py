"""What a queue hands out: :class:`Message`, :class:`QueueStats`, and message bodies."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from . import _names as names
from ._errors import InvalidBody, StorageError

if TYPE_CHECKING:
    from ._queue import Queue

Body = bytes | bytearray | memoryview | str
#: ``progress(done, total)`` of a long operation: items done so far, and the
#: total when known (``None`` while it is not).
Progress = Callable[[int, int | None], object]


def as_bytes(body: object) -> bytes:
    """The bytes a body is sent as: a ``str`` as UTF-8; :class:`InvalidBody` for other types."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        try:
            return body.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate has no UTF-8 form
            raise InvalidBody(f"a str body must be valid Unicode: {exc}") from None
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise InvalidBody(f"a message body is bytes or str, not {type(body).__name__}")


class Hold:
    """This client's bookkeeping of a message it handed out.

    ``issued`` is the receipt vsqs gave (known valid, so it need not be checked
    again); ``lock`` serialises the holder's own changes of the receipt;
    ``done`` is set once it was deleted or released.
    """

    __slots__ = ("done", "issued", "lock", "queue")

    def __init__(self, queue: Queue, issued: str | None) -> None:
        self.queue = queue
        self.issued = issued
        self.lock = threading.Lock()
        self.done = False


class Message:
    """A received (or peeked) message.

    ``receipt`` is the message's current name while this client holds it; it
    changes on :meth:`extend`. Peeked messages have no receipt.
    """

    __slots__ = ("_hold", "body", "id", "receipt", "receive_count")

    def __init__(
        self, queue: Queue, message_id: str, body: bytes, receipt: str | None, receive_count: int
    ) -> None:
        self.id = message_id
        self.body = body
        self.receipt = receipt
        self.receive_count = receive_count
        self._hold = Hold(queue, receipt)

    @property
    def sent_at(self) -> datetime:
        """When the message was sent (UTC, ms precision, the sender's clock)."""
        return datetime.fromtimestamp(names.id_ms(self.id) / 1000, UTC)

    @property
    def visible_at(self) -> datetime | None:
        """When the message becomes visible again unless deleted or extended."""
        if self.receipt is None:
            return None
        parsed = names.parse(self.receipt)
        assert parsed is not None and parsed.expiry_ms is not None
        return datetime.fromtimestamp(parsed.expiry_ms / 1000, UTC)

    @property
    def settled(self) -> bool:
        """Whether this client deleted or released it (through any path)."""
        return self._hold.done

    def delete(self) -> None:
        """Acknowledge: see :meth:`Queue.delete`."""
        self._hold.queue.delete(self)

    def extend(self, visibility_timeout: float) -> Message:
        """Change visibility: see :meth:`Queue.extend`."""
        return self._hold.queue.extend(self, visibility_timeout)

    def release(self, *, delay: float = 0) -> None:
        """Negative acknowledge: see :meth:`Queue.release`."""
        self._hold.queue.release(self, delay=delay)

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, receive_count={self.receive_count}, "
            f"body={self.body[:40]!r}{'...' if len(self.body) > 40 else ''})"
        )


def hold(message: Message) -> Hold:
    """The queue's bookkeeping of ``message`` (for the queue, not for users)."""
    return message._hold


@dataclass(frozen=True)
class QueueStats:
    """Counts from one listing. Expired in-flight messages count as ready."""

    ready: int
    in_flight: int
    delayed: int
    #: ``.new`` objects: sends under way, or a crashed writer's leftovers.
    writing: int
    #: Seconds since the oldest ready message was sent.
    oldest_ready_age: float | None
    #: Seconds until the next invisible message becomes visible.
    next_visible_in: float | None
    #: Seconds until the first in-flight visibility timeout runs out.
    in_flight_expires_in: float | None = None
    #: Messages in the dead-letter queue (every state); ``None`` without one.
    dead_letter: int | None = None

    def as_dict(self) -> dict[str, int | float | None]:
        """The figures by name, for JSON and metrics."""
        return asdict(self)


@dataclass(frozen=True)
class DeleteResult:
    """What :meth:`vsqs.Queue.delete_batch` did, receipt by receipt, in the
    order given (SQS's ``DeleteMessageBatch`` result).

    ``deleted``: acknowledged for good. ``stale``: no longer current (the
    message was deleted, or received again after its visibility timeout);
    nothing changed. ``failed``: the storage call failed, with its error; the
    outcome is unknown and an ack can be retried with the same receipt.
    """

    deleted: list[str]
    stale: list[str]
    failed: dict[str, StorageError]

    @property
    def ok(self) -> bool:
        """Whether every receipt was deleted."""
        return not (self.stale or self.failed)
