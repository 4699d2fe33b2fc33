"""What a queue hands out: :class:`Message`, :class:`QueueStats`, and message bodies.

A message refers to the queue that handed it out through :class:`Owner`
(the calls it makes), not through the facade itself: this module sits below it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from . import _forks
from . import _names as names
from ._envelope import Meta, seal, unseal
from ._errors import InvalidBody, StorageError, storage_errors
from .stores._base import Store, TooLarge

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


#: An origin record is a few hundred bytes; a larger object under its name is no record of ours.
ORIGIN_MAX = 64 * 1024


@dataclass(frozen=True)
class DeadLettered:
    """Where a message of a dead-letter queue came from (``Message.dead_lettered``)."""

    #: The queue it was dead-lettered from (its URL or path).
    source: str
    #: How many times it had been received there.
    receive_count: int
    #: When it was dead-lettered (UTC, ms precision): the dead-lettering
    #: client's clock (on object stores, the store's), shown on the reader's.
    at: datetime

    def to_json(self) -> bytes:
        doc = {
            "source": self.source,
            "receive_count": self.receive_count,
            "at_ms": round(self.at.timestamp() * 1000),
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> DeadLettered | None:
        """The record in ``data``; ``None`` if it is not one (torn, or foreign)."""
        try:
            doc = json.loads(data)
            source, count, at_ms = doc["source"], doc["receive_count"], doc["at_ms"]
        except (ValueError, TypeError, KeyError):
            return None
        if not (isinstance(source, str) and type(count) is int and type(at_ms) is int):
            return None
        if not 0 <= at_ms <= names.MAX_EXPIRY_MS:
            return None
        return cls(source, count, datetime.fromtimestamp(at_ms / 1000, UTC))


def read_record(store: Store, name: str) -> DeadLettered | None:
    """The origin record named ``name`` (one read); ``None`` if it is gone or is not one."""
    with storage_errors(f"reading {name} in {store.url}"):
        try:
            return DeadLettered.from_json(store.read_limited(name, ORIGIN_MAX))
        except (FileNotFoundError, TooLarge):  # gone, or not a record of ours
            return None


def find_records(store: Store, message_id: str) -> names.Records:
    """The names of the origin records of ``message_id`` (or of the bundle
    whose parts' ids have that core), from one listing of its names."""
    with storage_errors(f"looking for the origin of {message_id} in {store.url}"):
        return tuple(
            n
            for n in store.list(prefix=message_id)
            if (of := names.origin_id(n)) is not None and names.lineage(of) == message_id
        )


def read_origin(store: Store, records: names.Records) -> DeadLettered | None:
    """The newest of a message's origin ``records`` that reads as one; ``None`` if none does.

    Every dead-lettering writes a record of its own, so a message that was
    dead-lettered, redriven and dead-lettered again may have two (a crash
    left the first): the newest, by record id, is its last dead-lettering.
    """
    for name in sorted(records, key=_record_id, reverse=True):
        record = read_record(store, name)
        if record is not None:
            return record
    return None


def _record_id(name: str) -> str:
    record = names.origin_record(name)
    return "" if record is None else record[1]


class Owner(Protocol):
    """The queue a message came from, as the message uses it (a :class:`vsqs.Queue`)."""

    @property
    def url(self) -> str: ...

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    def delete(self, msg_or_receipt: Message | str) -> None: ...

    def extend(self, msg_or_receipt: Message | str, visibility_timeout: float) -> Message: ...

    def release(self, msg_or_receipt: Message | str, *, delay: float = 0) -> None: ...


#: How a receiver takes back claims that reached no caller (their receipts).
GiveBack = Callable[[list[str]], None]

#: ``Message.dead_lettered`` before its origin record was looked up.
_UNREAD = object()


class Hold:
    """This client's bookkeeping of a message it handed out.

    ``issued`` is the receipt vsqs gave (known valid, so it need not be checked
    again); ``lock`` serialises the holder's own changes of the receipt;
    ``done`` is set once it was deleted or released; ``origin``: the names of
    its origin records, as a listing showed or a lookup found them (an ack
    removes them with the message); ``give_back``: how the receiver that
    claimed it takes it back (``None`` unless it was received); ``part``: the
    part of a bundle that holds it.
    """

    __slots__ = ("done", "give_back", "issued", "lock", "origin", "part", "queue")

    def __init__(self, queue: Owner, issued: str | None) -> None:
        self.queue = queue
        #: The part of a bundle it is held in (``vsqs._bundled.Part``), if any.
        self.part: object = None
        self.issued = issued
        self.give_back: GiveBack | None = None
        self.lock = _forks.lock()
        self.done = False
        self.origin: names.Records = ()


class Message:
    """A received (or peeked) message.

    ``receipt`` is the message's current name while this client holds it; it
    changes on :meth:`extend`. Peeked messages have no receipt. ``group``:
    the message's group (``None`` without one); ``attributes``: its
    attributes (``{}`` without); ``dedup_id``: the deduplication id it was
    sent with, where it has a group or attributes (``None`` otherwise).
    """

    __slots__ = (
        "_dead_lettered",
        "_hold",
        "attributes",
        "body",
        "dedup_id",
        "group",
        "id",
        "receipt",
        "receive_count",
    )

    def __init__(
        self,
        queue: Owner,
        message_id: str,
        body: bytes,
        receipt: str | None,
        receive_count: int,
        *,
        dead_lettered: object = _UNREAD,
        origins: names.Records = (),
    ) -> None:
        self.id = message_id
        if names.is_enveloped(message_id):
            self.body, meta = unseal(message_id, body)
            self.group = meta.group
            self.attributes = dict(meta.attributes)
            self.dedup_id = meta.dedup_id
        else:  # its body alone (unseal() returns it as it is): no metadata to copy
            self.body, self.group, self.attributes, self.dedup_id = body, None, {}, None
        self.receipt = receipt
        self.receive_count = receive_count
        self._hold = Hold(queue, receipt)
        self._hold.origin = origins
        self._dead_lettered = dead_lettered

    @property
    def dead_lettered(self) -> DeadLettered | None:
        """Where it came from, if it was dead-lettered into this queue: its
        source queue, its receive count there and when; ``None`` otherwise.

        :meth:`Queue.peek` fills it in from its listing; for a received
        message the origin record is read at the first access: one read of
        the record its receiver's listing showed; if it showed none, or that
        one is gone (on a local directory a ready name recurs: the listing
        may have shown an earlier copy's), a listing of the message's names
        first (on a local directory, of the directory). Acknowledging a
        message whose record was found, or listed by its receiver, removes
        the record too (else ``gc()`` does, once the message is gone).
        """
        if self._dead_lettered is _UNREAD:
            held, store = self._hold, self._hold.queue.store
            found = read_origin(store, held.origin)
            if found is None:  # a part's records are its bundle's: by the core of its id
                key = (
                    self.id if held.part is None else names.lineage(names.id_of(self.receipt or ""))
                )
                held.origin = find_records(store, key)
                found = read_origin(store, held.origin)
            self._dead_lettered = found
        record = self._dead_lettered
        assert record is None or isinstance(record, DeadLettered)
        if record is None:
            return None
        return replace(record, at=self._local(round(record.at.timestamp() * 1000)))

    def _local(self, ms: int) -> datetime:
        """A time of a name on this client's clock (names are written on the
        store's clock on object stores, docs/protocol.md)."""
        queue = self._hold.queue
        with storage_errors(f"reading the clock of {queue.url}"):  # a measure is a request
            offset = queue.store.offset_ms(queue.clock)
        return datetime.fromtimestamp((ms - offset) / 1000, UTC)

    @property
    def sent_at(self) -> datetime:
        """When the message was sent (UTC, ms precision): the sender's clock
        (on object stores, the store's as the sender read it), shown on this
        client's clock."""
        return self._local(names.id_ms(self.id))

    @property
    def visible_at(self) -> datetime | None:
        """When the message becomes visible again unless deleted or extended."""
        if self.receipt is None:
            return None
        parsed = names.parse(held_name(self.receipt))
        assert parsed is not None and parsed.expiry_ms is not None
        return self._local(parsed.expiry_ms)

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
            f"{'' if self.group is None else f'group={self.group!r}, '}"
            f"body={self.body[:40]!r}{'...' if len(self.body) > 40 else ''})"
        )


def held_name(receipt: str) -> str:
    """The name a receipt holds: its own, or, for a bundled message
    (``<part's name>#<place>``), its part's."""
    return receipt.partition("#")[0]


def stored(message: Message) -> bytes:
    """What ``message`` is stored as (its body, or its envelope), to move it
    into another queue as it is."""
    return seal(message.body, Meta(message.group, message.dedup_id, message.attributes))


def hold(message: Message) -> Hold:
    """The queue's bookkeeping of ``message`` (for the queue, not for users)."""
    return message._hold


def give_back(messages: Iterable[Message]) -> None:
    """Make received messages that reached no caller (a cancelled asyncio
    receive) visible again at once, with the receive count they had before:
    a receive that delivered nothing counts nothing. One that cannot be given
    back stays hidden until its visibility timeout (logged)."""
    by_receiver: dict[GiveBack, tuple[str, list[str]]] = {}
    for message in messages:
        held = message._hold
        if message.receipt is not None and held.give_back is not None:
            _, receipts = by_receiver.setdefault(held.give_back, (held.queue.url, []))
            name = held_name(message.receipt)  # a part, once for all its messages
            if name not in receipts:
                receipts.append(name)
    for take_back, (url, receipts) in by_receiver.items():
        with storage_errors(f"giving back to {url}"):
            take_back(receipts)


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
    #: Message groups with a message in flight (SQS's
    #: ApproximateNumberOfGroupsWithInflightMessages).
    groups_in_flight: int = 0

    def as_dict(self) -> dict[str, int | float | None]:
        """The figures by name, for JSON and metrics."""
        return asdict(self)


class Settled:
    """What a batch of settlements did, receipt by receipt, in the order
    given: ``stale``, receipts no longer current (the message was deleted,
    or received again after its visibility timeout), nothing changed;
    ``failed``, the storage call failed, with its error: the outcome is
    unknown and the call can be retried with the same receipt."""

    stale: list[str]
    failed: dict[str, StorageError]

    @property
    def ok(self) -> bool:
        """Whether every receipt was settled."""
        return not (self.stale or self.failed)


@dataclass(frozen=True)
class DeleteResult(Settled):
    """What :meth:`vsqs.Queue.delete_batch` did (SQS's ``DeleteMessageBatch``
    result): ``deleted``, acknowledged for good; ``stale`` and ``failed`` as
    in :class:`Settled` (an ack can be retried with the same receipt)."""

    deleted: list[str]
    stale: list[str]
    failed: dict[str, StorageError]


@dataclass(frozen=True)
class ExtendResult(Settled):
    """What :meth:`vsqs.Queue.extend_batch` did (SQS's
    ``ChangeMessageVisibilityBatch``): ``extended``, each message extended,
    with its new receipt (a ``Message`` given is the one updated in place);
    ``stale`` and ``failed`` as in :class:`Settled`."""

    extended: list[Message]
    stale: list[str]
    failed: dict[str, StorageError]


@dataclass(frozen=True)
class ReleaseResult(Settled):
    """What :meth:`vsqs.Queue.release_batch` did: ``released``, the receipts
    made visible again (after the delay); ``stale`` and ``failed`` as in
    :class:`Settled`."""

    released: list[str]
    stale: list[str]
    failed: dict[str, StorageError]


class DeletedQueue(NamedTuple):
    """What :meth:`vsqs.Queue.delete_queue` did: the number of objects it
    removed, and the foreign names it left (sorted)."""

    removed: int
    kept: list[str]
