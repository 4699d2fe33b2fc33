"""The queue: state machine of ``docs/format.md`` over any :class:`~vsqs._store.Store`."""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, nullcontext, suppress
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, overload

from . import _names as names
from ._config import (
    DEFAULT_VISIBILITY_TIMEOUT,
    ENV_DURABLE,
    ENV_NEW_GRACE,
    ENV_VISIBILITY_TIMEOUT,
    QueueConfig,
    env_flag,
    env_seconds,
    seconds,
)
from ._errors import (
    InvalidArgument,
    InvalidBody,
    NotAQueue,
    QueueNotFound,
    QueuePermissionError,
    ReceiptExpired,
    StorageError,
    UnsupportedStore,
    VsqsError,
)
from ._registry import open_store
from ._store import OutcomeUnknown, Store

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("vsqs")

Body = bytes | bytearray | memoryview | str
#: ``progress(done, total)`` of a long operation: items done so far, and the
#: total when known (``None`` while it is not).
Progress = Callable[[int, int | None], object]

#: A cached listing is refreshed at least this often (seconds), so messages
#: whose visibility expired (or that other clients released) come back in FIFO
#: position within this delay, or within 20 listing times on huge backlogs.
STALE_AFTER = 1.0
#: Listings of more than THROTTLE_ABOVE names may take at most
#: 1/LISTING_BUDGET of a receiver's time; smaller ones are never throttled.
LISTING_BUDGET = 20
THROTTLE_ABOVE = 1000
#: A ready name issued less than this before a listing started becomes a
#: candidate only once a second listing has seen it: a listing racing with a
#: producer may show the producer's newer message but not its older one
#: (docs/format.md, "FIFO"). It covers clock skew between hosts sharing a disk.
YOUNG_MS = 50
#: A receiver that lost every race of a receive sleeps up to this (seconds)
#: before looking again; one woken by changes that brought it nothing, at
#: most this long before waiting again.
BACKOFF = 0.001
#: On stores where a lost claim costs requests (object stores), the first loss
#: already skips fewer than 2**COSTLY_SPREAD candidates ahead (then twice as far
#: per loss in a row, up to 64): measured on moto with 4 consumers, lost claims
#: fell from 1.2 to 0.2 per message.
COSTLY_SPREAD = 5
#: A receiver with an arrival feed reads it at least every FEED_EVERY claims.
FEED_EVERY = 64
#: On stores that list in order (object stores), a listing stops once it has
#: found this many candidates (within the first page of 1 000 keys, if few are
#: in flight): a receive never lists the whole backlog.
HEAD_NAMES = 500
#: A ``.new`` leftover older than this (by its id) is a crashed writer's.
DEFAULT_NEW_GRACE = 3600.0
#: How long a redrive or dead-letter move holds a message while moving it.
_MOVE_HOLD_MS = 300_000
#: Names a move into another queue tries before it gives up.
_MOVE_ATTEMPTS = 3
#: Fresh ids a send tries before it gives up.
_SEND_ATTEMPTS = 8


def as_bytes(body: object) -> bytes:
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


def _storage_error(exc: OSError, where: str) -> NoReturn:
    """Re-raise an OSError of the store as the matching VsqsError."""
    if isinstance(exc, VsqsError):
        raise exc
    if isinstance(exc, PermissionError):
        raise QueuePermissionError(f"{where}: {exc}") from exc
    if isinstance(exc, NotADirectoryError):
        raise NotAQueue(f"{where}: not a queue directory") from exc
    raise StorageError(f"{where}: {exc}") from exc


def default_new_grace() -> float:
    """Seconds after which a ``.new`` is a crashed writer's: ``VSQS_NEW_GRACE``, or one hour."""
    return env_seconds(ENV_NEW_GRACE, DEFAULT_NEW_GRACE)


def stage(store: Store, data: bytes, next_id: Callable[[], str]) -> str:
    """Write ``data`` as ``<id>.new`` (invisible, not durable yet) under a fresh
    id, drawing another on a collision; return the id."""
    while True:
        message_id = next_id()
        try:
            store.write_new(names.new_name(message_id), data, fsync=False)
        except FileExistsError:
            continue
        return message_id


class Message:
    """A received (or peeked) message.

    ``receipt`` is the message's current name while this client holds it; it
    changes on :meth:`extend`. Peeked messages have no receipt.
    """

    __slots__ = ("_done", "_issued", "_lock", "_queue", "body", "id", "receipt", "receive_count")

    def __init__(
        self, queue: Queue, message_id: str, body: bytes, receipt: str | None, receive_count: int
    ) -> None:
        self._queue = queue
        self.id = message_id
        self.body = body
        self.receipt = self._issued = receipt  # _issued: the name vsqs gave it, known valid
        self.receive_count = receive_count
        self._lock = threading.Lock()
        self._done = False

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

    def delete(self) -> None:
        """Acknowledge: see :meth:`Queue.delete`."""
        self._queue.delete(self)

    def extend(self, visibility_timeout: float) -> Message:
        """Change visibility: see :meth:`Queue.extend`."""
        return self._queue.extend(self, visibility_timeout)

    def release(self, *, delay: float = 0) -> None:
        """Negative acknowledge: see :meth:`Queue.release`."""
        self._queue.release(self, delay=delay)

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, receive_count={self.receive_count}, "
            f"body={self.body[:40]!r}{'...' if len(self.body) > 40 else ''})"
        )


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


class _Candidates:
    """The receiver's view of the queue between listings.

    ``names[pos:]`` are candidate names, ascending (FIFO); ``pending`` maps the
    invisible names this client knows of (from the listing, or its own claims,
    extends, releases and delayed sends) to their expiry, with ``heap`` in
    expiry order, so that they become candidates in FIFO position the moment
    they are due, without a listing. ``fed``: the store's arrival feed has
    reported every name that appeared since the last listing, so the
    candidates are the whole queue without listing again.
    """

    __slots__ = (
        "fed",
        "gone",
        "heap",
        "listed_at",
        "listed_count",
        "listing_seconds",
        "losses",
        "names",
        "oldest_young",
        "pending",
        "pos",
        "since_feed",
        "skipped",
        "token",
        "young",
    )

    def __init__(self) -> None:
        self.names: list[str] = []
        self.pos = 0
        self.pending: dict[str, int] = {}
        self.heap: list[tuple[int, str]] = []
        self.token: Hashable = None
        self.listed_at = -float("inf")
        self.listing_seconds = 0.0
        self.listed_count = 0
        self.young: set[str] = set()
        self.oldest_young: str | None = None
        self.losses = 0  # consecutive renames lost to other consumers
        self.fed = False
        self.skipped: list[str] = []  # fed: names skipped after lost races, to retry
        self.gone: set[str] = set()  # fed: ready names the feed saw leave
        self.since_feed = 0  # claims since the feed was last read

    def add_invisible(self, name: str, expiry_ms: int) -> None:
        self.pending[name] = expiry_ms
        heapq.heappush(self.heap, (expiry_ms, name))

    def forget(self, name: str) -> None:
        """This client renamed or deleted ``name``: it is no candidate any more."""
        if self.pending.pop(name, None) is None:  # not invisible: maybe a candidate
            i = bisect.bisect_left(self.names, name, lo=self.pos)
            if i < len(self.names) and self.names[i] == name:
                del self.names[i]
        if len(self.heap) > 2 * len(self.pending) + 1024:  # drop forgotten entries
            self.heap = [(expiry, name) for name, expiry in self.pending.items()]
            heapq.heapify(self.heap)

    def add_changes(self, changes: list[tuple[str, bool]]) -> None:
        """Apply what the store's feed reported of ready names: arrivals become
        candidates, departures (taken by someone) are passed over unclaimed.

        Invisible names (claims, extends, releases, delayed sends) are left to
        the next listing, as expiries are: this client's own are pending
        already, and a feed read late would report names long renamed again.
        """
        for name, appeared in changes:
            if not appeared:
                # Only a name still ahead (or skipped) can be tried again; this
                # client's own claims are behind it.
                i = bisect.bisect_left(self.names, name, lo=self.pos)
                if self.skipped or (i < len(self.names) and self.names[i] == name):
                    self.gone.add(name)
            elif names.is_id(name):
                self.gone.discard(name)
                i = bisect.bisect_left(self.names, name, lo=self.pos)
                if i == len(self.names) or self.names[i] != name:
                    self.names.insert(i, name)

    def promote_due(self, now_ms: int) -> bool:
        """Move known invisible names whose expiry has passed into the candidates.

        Returns whether any moved.
        """
        heap, pending = self.heap, self.pending
        promoted = False
        while heap and heap[0][0] <= now_ms:
            expiry, name = heapq.heappop(heap)
            if pending.get(name) == expiry:
                del pending[name]
                bisect.insort(self.names, name, lo=self.pos)
                promoted = True
        return promoted

    def skip(self, count: int) -> None:
        """Pass over ``count`` candidates; with a feed, keep them to retry when the rest run out."""
        end = min(len(self.names), self.pos + count)
        if self.fed:
            self.skipped.extend(self.names[self.pos : end])
        self.pos = end

    def retry_skipped(self) -> None:
        """Make the skipped names candidates again once the others ran out (fed only)."""
        if self.pos >= len(self.names) and self.skipped:
            gone = self.gone
            self.names[self.pos :] = [n for n in self.skipped if n not in gone]  # ascending
            self.skipped = []

    def feed_due(self, promoted: bool) -> bool:
        """Whether to read the feed before the next claim.

        New ready names are newer than the candidates, bar a slow producer's
        or a skewed clock's: read when the candidates run out, when older
        names were promoted (own sends must not be overtaken), and every
        ``FEED_EVERY`` claims, which also keeps the kernel's event queue short
        (this client's own claims are events too).
        """
        self.since_feed += 1
        if (
            promoted
            or self.losses  # contended: others' claims tell which names are gone
            or self.since_feed >= FEED_EVERY
            or self.pos >= len(self.names)
        ):
            self.since_feed = 0
            return True
        return False

    def next_expiry_ms(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def due(self, store: Store, now: float) -> bool:
        """Whether to list again before the next claim (possibly to find nothing).

        ``now``: the receiver's monotonic time, as ``listed_at`` was taken.
        """
        exhausted = self.pos >= len(self.names)
        oldest_young = self.oldest_young
        if oldest_young is not None and (exhausted or oldest_young < self.names[self.pos]):
            return True  # a second look makes fresh names candidates, in FIFO order
        age = now - self.listed_at
        if self.listed_count > THROTTLE_ABOVE and age < LISTING_BUDGET * self.listing_seconds:
            return False
        if age >= STALE_AFTER:
            return True
        if self.fed:
            return False  # the feed told of every new name
        return exhausted and (self.token is None or store.changed_since(self.token))


class Queue:
    """A FIFO queue with visibility timeouts in a directory (or any :class:`Store`).

    Guarantees (on stores with ``atomic_rename``; see ``docs/guarantees.md``):

    * a message is held by at most one receiver until its visibility timeout
      expires; a receipt that is no longer current changes nothing;
    * a ``send`` that returned is never lost (and, with ``durable=True`` on a
      durable store, survives a power cut); delivery is at least once;
    * one producer's messages are first delivered in send order to a single
      consumer; with several consumers, receives are spread over the head of
      the queue.

    A ``Queue`` is thread-safe and may be shared by threads of one process.

    ``visibility_timeout``, ``max_receives`` and ``dead_letter`` are the
    queue's defaults, written into its config when this call creates it and
    checked against it otherwise. Defaults left out come, in this order, from
    the queue's config, the ``VSQS_VISIBILITY_TIMEOUT`` (at creation),
    ``VSQS_DURABLE`` and ``VSQS_NEW_GRACE`` environment variables, and the
    built-in values (30 s, durable, one hour). No file is read but the queue's own.
    """

    def __init__(
        self,
        url: object,
        *,
        storage_options: dict[str, Any] | None = None,
        create: bool = True,
        visibility_timeout: float | None = None,
        max_receives: int | None = None,
        dead_letter: str | None = None,
        durable: bool | None = None,
        clock: Callable[[], float] = time.time,
        new_grace: float | None = None,
        unsafe_claims: bool = False,
    ) -> None:
        self._store = open_store(url, storage_options)
        self._owns_store = self._store is not url  # a Store passed in stays the caller's
        self._storage_options = storage_options
        self._unsafe_claims = bool(unsafe_claims)
        self.url = self._store.url
        if durable is None:
            durable = env_flag(ENV_DURABLE, True)
        self.durable = bool(durable) and self._store.durable
        self._clock = clock
        # Listing ages follow an injected clock too (a simulation replays).
        self._elapsed = time.monotonic if clock is time.time else clock
        self._ids = names.id_generator(clock)
        if new_grace is None:
            new_grace = default_new_grace()
        self._new_grace_ms = int(seconds(new_grace, "new_grace") * 1000)
        self._lock = threading.Lock()
        self._candidates = _Candidates()
        self._dead_letter_queue: Queue | None = None
        requested = {
            "visibility_timeout": None
            if visibility_timeout is None
            else seconds(visibility_timeout, "visibility_timeout"),
            "max_receives": max_receives,
            "dead_letter": dead_letter,
        }
        try:
            self.config = self._open(create, requested)
        except BaseException:
            self.close()
            raise

    def _open(self, create: bool, requested: dict[str, Any]) -> QueueConfig:
        store = self._store
        try:
            if not store.ensure(create):
                raise QueueNotFound(f"no queue at {self.url}")
            if not store.exclusive_claims():
                if not self._unsafe_claims:
                    why = f" ({store.refusal})" if store.refusal else ""
                    raise UnsupportedStore(
                        f"{self.url}: this store cannot make claims exclusive{why}, so two "
                        "consumers could receive the same message at once. To use it "
                        "anyway: unsafe_claims=True (Python), --unsafe-claims (vsqs "
                        'command), .option("unsafeClaims", "true") (Spark); see '
                        "docs/protocol.md"
                    )
                log.warning("%s: claims are not exclusive here (unsafe_claims=True)", self.url)
            try:
                config = QueueConfig.from_json(store.read(names.CONFIG_NAME), self.url)
            except FileNotFoundError:
                if not create:
                    raise QueueNotFound(f"no queue at {self.url} (no vsqs config in it)") from None
                defaults = {
                    "visibility_timeout": env_seconds(
                        ENV_VISIBILITY_TIMEOUT, DEFAULT_VISIBILITY_TIMEOUT
                    )
                }
                config = QueueConfig(
                    **defaults | {k: v for k, v in requested.items() if v is not None}
                )
                message_id = self._next_id()
                if self._publish(message_id, config.to_json(), names.CONFIG_NAME):
                    return config
                config = QueueConfig.from_json(store.read(names.CONFIG_NAME), self.url)
            config.check_agrees(requested, self.url)
            return config
        except OSError as exc:
            _storage_error(exc, f"opening {self.url}")

    # ------------------------------------------------------------------ util
    def _now_ms(self) -> int:
        """The clock in whole ms, rounded down: what has surely passed."""
        return int(self._clock() * 1000)

    def _expiry_ms(self, after_ms: int) -> int:
        """``after_ms`` from now, rounded up: a holder never gets less than asked.

        Zero means now, rounded down: a release is visible at once.
        """
        if after_ms == 0:
            return self._now_ms()
        return math.ceil(self._clock() * 1000) + after_ms

    def _vt_ms(self, visibility_timeout: float | None) -> int:
        if visibility_timeout is None:
            return int(self.config.visibility_timeout * 1000)
        return int(seconds(visibility_timeout, "visibility_timeout") * 1000)

    def close(self) -> None:
        """Carry out deletions held back for batching (object stores), and
        release the resources of a store this queue opened. The data is untouched."""
        if self._owns_store:
            self._store.close()
        else:
            with suppress(OSError):  # listers collect what is left
                self._store.flush()
        if self._dead_letter_queue is not None:
            self._dead_letter_queue.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"vsqs.Queue({self.url!r})"

    @property
    def protocol(self) -> str:
        """How claims are made exclusive here: ``"atomic-rename"`` on directories,
        or the object-store protocol the capability probe chose (docs/protocol.md)."""
        return self._store.protocol

    # -------------------------------------------------------------- publish
    def _publish(
        self, message_id: str, data: bytes, final: str, *, replace_new: bool = False
    ) -> bool:
        """Write ``<id>.new`` and rename it to ``final``; ``False`` if ``final`` exists.

        ``replace_new`` removes a leftover ``<id>.new`` first: only for moves of
        a message this client holds, whose earlier attempt may have crashed.
        """
        store, tmp = self._store, names.new_name(message_id)
        if store.creates_atomically(self.durable):
            try:
                store.write_new(final, data, fsync=self.durable)
            except FileExistsError:
                return False
            return True
        try:
            store.write_new(tmp, data, fsync=self.durable)
        except FileExistsError:
            if not replace_new:
                raise
            store.delete(tmp, known=True)
            store.write_new(tmp, data, fsync=self.durable)
        try:
            store.rename(tmp, final)
        except FileExistsError:
            store.delete(tmp, known=True)
            return False
        if self.durable:
            store.sync_names()
        return True

    def send(self, body: Body, *, delay: float = 0) -> str:
        """Send one message; return its id.

        The message is visible (after ``delay`` seconds) once this returns, and
        never before it is complete. With ``durable=True`` (the default) it
        survives a power cut on a durable store.
        """
        return self._send_each([as_bytes(body)], int(seconds(delay, "delay") * 1000))[0]

    def _send_each(self, datas: list[bytes], delay_ms: int) -> list[str]:
        """Publish each message on its own; the ids, in order."""
        sent: list[str] = []
        try:
            for data in datas:
                sent.append(self._send_one(data, delay_ms))
            return sent
        except OSError as exc:
            done = f" ({len(sent)} of {len(datas)} sent)" if len(datas) > 1 else ""
            _storage_error(exc, f"sending to {self.url}{done}")

    def _next_id(self) -> str:
        return self._ids.next_id(self._now_ms())

    def _send_one(self, data: bytes, delay_ms: int) -> str:
        """Publish under a fresh id; draw another if the name is taken (an id
        collision), or burned by a create whose outcome is unknown (it may
        land later: a send is at least once)."""
        for _ in range(_SEND_ATTEMPTS):
            message_id = self._next_id()
            visible_at = self._expiry_ms(delay_ms)
            final = names.published_name(message_id, visible_at if delay_ms else None)
            try:
                if self._publish(message_id, data, final):
                    self._note_sent(final, visible_at if delay_ms else None)
                    return message_id
            except FileExistsError:
                pass
        raise StorageError(f"could not publish a message under {_SEND_ATTEMPTS} fresh ids")

    def send_batch(self, bodies: Iterable[Body], *, delay: float = 0) -> list[str]:
        """Send several messages; return their ids in order.

        Durability is paid once per batch: the files are flushed with one
        filesystem sync and the directory once. Not atomic: if this raises, a
        prefix of the batch may have been sent.
        """
        datas = [as_bytes(body) for body in bodies]
        delay_ms = int(seconds(delay, "delay") * 1000)
        store, sent, written = self._store, [], []
        if store.creates_atomically(self.durable):
            return self._send_each(datas, delay_ms)
        try:
            try:
                for data in datas:
                    written.append(stage(store, data, self._next_id))
                if self.durable:
                    store.sync_files(names.new_name(i) for i in written)
                visible_at = self._expiry_ms(delay_ms)
                for message_id in written:
                    final = names.published_name(message_id, visible_at if delay_ms else None)
                    store.rename(names.new_name(message_id), final)
                    sent.append(message_id)
                    self._note_sent(final, visible_at if delay_ms else None)
                if self.durable and sent:
                    store.sync_names()
                return sent
            finally:
                for message_id in written[len(sent) :]:
                    with suppress(OSError):
                        store.delete(names.new_name(message_id), known=True)
        except OSError as exc:
            _storage_error(exc, f"sending a batch to {self.url} ({len(sent)} sent)")

    # -------------------------------------------------------------- receive
    def receive(
        self, *, visibility_timeout: float | None = None, wait: float = 0
    ) -> Message | None:
        """Receive the oldest visible message, waiting up to ``wait`` seconds for one.

        The message stays invisible to others for ``visibility_timeout`` seconds
        (the queue's default if ``None``); delete it before then or it is
        delivered again.
        """
        got = self.receive_batch(1, visibility_timeout=visibility_timeout, wait=wait)
        return got[0] if got else None

    def receive_batch(
        self, max_messages: int = 10, *, visibility_timeout: float | None = None, wait: float = 0
    ) -> list[Message]:
        """Receive up to ``max_messages`` visible messages, oldest first.

        Returns as soon as at least one message was received, or an empty list
        after ``wait`` seconds (a long poll: it wakes when a message arrives or
        an invisible one expires).
        """
        return self._receive_batch(max_messages, visibility_timeout, wait, None)

    def _receive_batch(
        self,
        max_messages: int,
        visibility_timeout: float | None,
        wait: float,
        cancelled: threading.Event | None,
    ) -> list[Message]:
        """:meth:`receive_batch` that gives up, claiming nothing more, at its
        next wake-up (within :data:`STALE_AFTER` seconds) after ``cancelled`` is set."""
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise InvalidArgument(f"max_messages must be a positive int, not {max_messages!r}")
        vt_ms = self._vt_ms(visibility_timeout)
        deadline = time.monotonic() + seconds(wait, "wait")
        idle_wakes = 0
        try:
            while True:
                if cancelled is not None and cancelled.is_set():
                    return []
                got = self._claim_available(max_messages, vt_ms)
                remaining = deadline - time.monotonic()
                if got or remaining <= 0:
                    return got
                if self._candidates.losses:
                    # Lost every race: let the winners have this arrival and
                    # come back when more have arrived, instead of waking with
                    # every consumer at each one.
                    time.sleep(min(remaining, random.uniform(0, BACKOFF)))
                    continue
                if idle_wakes:
                    # Woken by changes that brought nothing (other consumers'
                    # claims): look less often, up to every BACKOFF seconds,
                    # or idle consumers starve the busy ones of CPU.
                    time.sleep(min(remaining, BACKOFF * min(idle_wakes, 8) / 8))
                self._wait(deadline - time.monotonic())
                idle_wakes += 1
        except OSError as exc:
            _storage_error(exc, f"receiving from {self.url}")

    def _wait(self, remaining: float) -> None:
        c = self._candidates
        timeout = min(remaining, STALE_AFTER)
        next_expiry = c.next_expiry_ms()
        if next_expiry is not None:
            timeout = min(timeout, max(0.0, (next_expiry - self._now_ms()) / 1000))
        self._store.wait_for_change(c.token, timeout)

    def _claim_available(self, max_messages: int, vt_ms: int) -> list[Message]:
        store, c = self._store, self._candidates
        max_receives = self.config.max_receives
        out: list[Message] = []
        # Names this call made invisible join the expiry heap only when it
        # ends, so a short visibility timeout cannot bring a message back into
        # the same batch.
        claimed_ids: set[str] = set()
        later: list[tuple[str, int]] = []
        relists = 0
        try:
            while len(out) < max_messages:
                with self._lock:
                    now = self._now_ms()
                    promoted = c.promote_due(now)
                    if c.fed and c.feed_due(promoted):
                        changes = store.changes(names.ID_LEN)
                        if changes is None:
                            c.fed, c.listed_at = False, -math.inf  # events were lost: list
                        else:
                            c.add_changes(changes)
                        c.retry_skipped()
                    if c.due(store, self._elapsed()):
                        if relists == 2:
                            break
                        self._relist(now)
                        relists += 1
                        continue
                    if c.pos >= len(c.names):
                        break
                    name = c.names[c.pos]
                    c.pos += 1
                    if name in c.gone:
                        continue  # the feed saw another client take it
                    if name[: names.ID_LEN] in claimed_ids:  # not again in this batch
                        parsed = names.parse(name)
                        if parsed is not None and parsed.expiry_ms is not None:
                            later.append((name, parsed.expiry_ms))
                        continue
                    claimed = self._claim(name, now, vt_ms)
                if claimed is None:
                    continue
                message_id, held, count, expiry = claimed
                claimed_ids.add(message_id)
                later.append((held, expiry))
                if max_receives is not None and count > max_receives:
                    self._dead_letter(held)
                    continue
                try:
                    body = store.read(held)
                except FileNotFoundError:
                    continue  # already expired and taken by another receiver
                out.append(Message(self, message_id, body, held, count))
        finally:
            with self._lock:
                for name, expiry in later:
                    c.add_invisible(name, expiry)
        return self._unexpired(out) if vt_ms else out

    def _unexpired(self, claimed: list[Message]) -> list[Message]:
        """Drop claims whose visibility timeout ran out before the batch returns
        (slow storage, or slow later claims of the batch): others may hold the
        message already. It is visible again, with its receive count."""
        now = self._now_ms()
        kept = []
        for message in claimed:
            parsed = names.parse(message.receipt or "")
            if parsed is not None and parsed.expiry_ms is not None and parsed.expiry_ms <= now:
                log.warning(
                    "%s: the claim of %s outlasted its visibility timeout",
                    self.url,
                    message.receipt,
                )
                continue
            kept.append(message)
        return kept

    def _claim(self, name: str, now: int, vt_ms: int) -> tuple[str, str, int, int] | None:
        """Rename a candidate to held: ``(id, held name, count, expiry)``, ``None`` if lost.

        The caller holds the lock.
        """
        parsed = names.parse(name)
        if parsed is None or parsed.state == names.NEW or not names.is_visible(parsed, now):
            return None  # foreign, or not visible (any more)
        message_id, count = parsed.id, parsed.receive_count + 1
        expiry = self._expiry_ms(vt_ms)
        held = names.next_name(parsed, expiry, count)
        c = self._candidates
        try:
            self._store.rename(name, held)
        except OutcomeUnknown:
            # Slow enough that a lister may have finished it for us: not
            # ours to return; if it took effect, the message comes back at
            # ``held``'s expiry, as from a claimer that died.
            log.warning("%s: a claim of %s was too slow to tell its outcome", self.url, name)
            return None
        except (FileNotFoundError, FileExistsError):
            # Another consumer took it. After the second loss in a row (on
            # stores where losses are costly, the first), skip ahead a
            # random, growing distance: consumers sharing one view
            # would otherwise all fight for the same head message. A lone
            # consumer (whose only losses are its own stale names) stays FIFO;
            # skipped names come back when the others ran out (with a feed)
            # or at the next listing, if nobody took them.
            c.losses += 1
            skip = random.randrange(skip_bound(c.losses, self._store.lost_claims_are_costly))
            c.skip(skip)
            log.debug("%s: lost a claim race; skipping %d candidates", self.url, skip)
            return None
        c.losses = 0
        return message_id, held, count, expiry

    def _relist(self, now_ms: int) -> None:
        """Refresh the candidates from one listing (caller holds the lock)."""
        c, store = self._candidates, self._store
        started = self._elapsed()
        # Drain (or start) the arrival feed first: with one, every name that
        # appears during or after this listing is reported, so no name needs
        # a second look. The first listing goes without: a client that drains
        # a backlog need not pay for events (its own claims are events too)
        # until it runs out.
        fed = c.token is not None and store.changes(names.ID_LEN) is not None
        token = store.change_token()
        # "~" sorts after every id: with a feed, no name is young.
        young_before = "~" if fed else f"{now_ms - YOUNG_MS:013d}"
        stale_new_before = f"{now_ms - self._new_grace_ms:013d}"
        visible: list[str] = []
        young: list[str] = []
        stale_new: list[str] = []
        pending: dict[str, int] = {}
        listed = 0
        head = HEAD_NAMES if store.lists_in_order else math.inf
        for name in store.list():
            listed += 1
            if len(name) == names.ID_LEN:
                if name < young_before or name in c.young:
                    visible.append(name)
                else:
                    young.append(name)
            elif name.endswith(names.NEW_SUFFIX):
                if name < stale_new_before:
                    stale_new.append(name)
            elif (parsed := names.parse(name)) is not None and parsed.expiry_ms is not None:
                if parsed.expiry_ms <= now_ms:
                    visible.append(name)
                else:
                    pending[name] = parsed.expiry_ms
            if len(visible) + len(young) >= head:
                break  # in key order: the rest of the backlog is newer
        visible.sort()
        c.pending = pending
        c.heap = [(expiry, name) for name, expiry in pending.items()]
        heapq.heapify(c.heap)
        c.gone = set()
        if fed:  # names that changed while listing: some are listed too
            during = store.changes(names.ID_LEN)
            if during is None:
                fed = False
            else:
                c.names, c.pos = visible, 0
                c.add_changes(during)
        # A consumer that has been losing races starts at a random offset, so
        # consumers sharing a queue spread over its head; one that has not
        # (a lone consumer) starts at the oldest name: strict FIFO.
        spread = min(len(visible), 1 << min(c.losses, 6))
        start = random.randrange(spread) if c.losses and visible else 0
        c.names, c.pos, c.token, c.young, c.fed = visible, start, token, set(young), fed
        c.skipped = []
        c.oldest_young = min(young) if young else None
        c.losses = c.losses // 2
        c.listed_at = self._elapsed()
        c.listing_seconds = c.listed_at - started
        c.listed_count = listed
        if stale_new:
            self._collect_stale_new(stale_new)

    def _collect_stale_new(
        self, candidates: Iterable[str], progress: Progress | None = None
    ) -> list[str]:
        removed: list[str] = []
        candidates = list(candidates)
        for done, name in enumerate(candidates, 1):
            parsed = names.parse(name)
            if parsed is not None and parsed.state == names.NEW:  # foreign: never touched
                with suppress(FileNotFoundError):
                    self._store.delete(name, known=True)
                    removed.append(name)
            if progress is not None:
                progress(done, len(candidates))
        if removed:
            log.info(
                "%s: removed %d stale .new leftovers of crashed writers", self.url, len(removed)
            )
        return removed

    def gc(self, *, progress: Progress | None = None) -> list[str]:
        """Repair every leftover a crashed client can leave; return the names repaired.

        On every store: ``.new`` objects of crashed writers older than the
        grace period are removed. On object stores, moves a crashed client
        left half done (older than ``FINISH_AFTER``) are finished, and their
        spent markers and the capability probes of killed clients removed;
        the sources of finished moves and the removed objects are returned
        too. Receivers do the same as they list; this does it now, with one
        listing of the whole queue.

        Safe while producers and consumers run: a ``.new`` younger than the
        grace period is a send under way, and a younger marker a move under
        way; both are kept. Foreign names are never touched.
        """
        cutoff = f"{self._now_ms() - self._new_grace_ms:013d}"
        try:
            removed = self._collect_stale_new(
                (n for n in self._store.list() if n.endswith(names.NEW_SUFFIX) and n < cutoff),
                progress,
            )
            return removed + self._store.take_repairs()
        except OSError as exc:
            _storage_error(exc, f"collecting leftovers in {self.url}")

    # --------------------------------------------------------- dead letters
    @overload
    def _dead_letter_target(self) -> Queue: ...
    @overload
    def _dead_letter_target(self, *, create: bool) -> Queue | None: ...
    def _dead_letter_target(self, *, create: bool = True) -> Queue | None:
        """The dead-letter queue (opened once); ``None`` if it does not exist
        and ``create`` is false."""
        if self._dead_letter_queue is None:
            target = self.config.dead_letter
            assert target is not None
            nearby = "/" not in target and "://" not in target
            try:
                dlq = Queue(
                    self._store.sibling(target) if nearby else target,
                    storage_options=None if nearby else self._storage_options,
                    create=create,
                    durable=self.durable,
                    clock=self._clock,
                    unsafe_claims=self._unsafe_claims,
                )
            except QueueNotFound:
                if create:
                    raise  # it vanished while being created: an error, not "none"
                return None
            self._dead_letter_queue = dlq
        return self._dead_letter_queue

    def _dead_letter(self, held: str) -> None:
        """Move a message this client holds to the dead-letter queue, keeping its id."""
        parsed = names.parse(held)
        assert parsed is not None
        try:
            body = self._store.read(held)
        except FileNotFoundError:
            return
        dlq = self._dead_letter_target()
        dlq._move_in(parsed, body)  # raises: the message stays held here, and comes back
        with suppress(FileNotFoundError):
            self._store.delete(held, known=True)
        log.info("%s: message %s dead-lettered to %s", self.url, parsed.id, dlq.url)

    def _move_in(self, moved: names.Name, body: bytes) -> bool:
        """Publish a message moved here from another queue (where its name was
        ``moved``): visible, receive count 0. Under its id, or where names must
        not recur (:attr:`Store.unique_names`), under the next version: a name
        it never had. Returns whether it published.

        An earlier move of it may have published it here already and been cut
        short before it removed the message at its source: if it is here and
        nobody received it yet (receive count 0), nothing is published (one
        listing of the id's names). A copy here that was received is not
        trusted: it may be on its way out (a dead-lettering crossing a
        redrive), so the message is published again (at least once).
        """
        try:
            for name in self._store.list(prefix=moved.id):
                here = names.parse(name)
                if here is not None and here.state != names.NEW and not here.receive_count:
                    return False
            if not self._store.unique_names:
                return self._publish(moved.id, body, moved.id, replace_new=True)
            # Visible since it was sent, whatever the clock; a name that is taken
            # or burned (a create of unknown outcome, which may land later: at
            # least once) is not used again.
            for expiry in range(names.id_ms(moved.id), names.id_ms(moved.id) + _MOVE_ATTEMPTS):
                final = names.invisible_name(moved.id, expiry, 0, moved.version + 1)
                if self._publish(moved.id, body, final):
                    return True
            raise StorageError(f"{moved.id}: could not publish it in {_MOVE_ATTEMPTS} attempts")
        except OSError as exc:
            _storage_error(exc, f"moving {moved.id} into {self.url}")

    # ------------------------------------------------------- by receipt
    def _check_own(self, message: Message) -> None:
        if message._queue is not self and message._queue.url != self.url:
            raise InvalidArgument("that message belongs to another queue")
        if message.receipt is None:
            raise InvalidArgument("a peeked message has no receipt")

    def _held(self, msg_or_receipt: Message | str) -> tuple[names.Name, Message | None]:
        if isinstance(msg_or_receipt, Message):
            self._check_own(msg_or_receipt)
            return names.parse_receipt(msg_or_receipt.receipt), msg_or_receipt
        return names.parse_receipt(msg_or_receipt), None

    @staticmethod
    def _locked(message: Message | None) -> AbstractContextManager[Any]:
        return message._lock if message is not None else nullcontext()

    @staticmethod
    def _receipt_name(parsed: names.Name) -> str:
        return names.invisible_name(
            parsed.id, parsed.expiry_ms or 0, parsed.receive_count, parsed.version
        )

    def _move_held(self, parsed: names.Name, expiry_ms: int, what: str) -> str:
        """Rename a held message to a new expiry; return the new name.

        The new name has the next version, so it differs from the receipt (and
        from every earlier name of the message): the atomic rename itself
        proves the receipt is still current.
        """
        receipt = self._receipt_name(parsed)
        new = names.next_name(parsed, expiry_ms, parsed.receive_count)
        try:
            self._store.rename(receipt, new)
        except (FileNotFoundError, FileExistsError):
            raise ReceiptExpired(f"cannot {what}: {receipt} is no longer current") from None
        except OSError as exc:
            _storage_error(exc, f"{what} in {self.url}")
        with self._lock:
            self._candidates.forget(receipt)
            self._candidates.add_invisible(new, expiry_ms)
        return new

    def _note_sent(self, name: str, visible_at: int | None) -> None:
        """Let this client's receives see its own sends in FIFO order at once.

        A client that never received keeps nothing.
        """
        c = self._candidates
        if c.token is None:
            return
        with self._lock:
            if visible_at is None:
                if c.fed:
                    return  # the feed reports it
                bisect.insort(c.names, name, lo=c.pos)
            else:
                c.add_invisible(name, visible_at)

    def delete(self, msg_or_receipt: Message | str) -> None:
        """Acknowledge a received message: remove it for good.

        Raises :class:`ReceiptExpired` (and changes nothing) if the receipt is
        no longer current: the message was deleted, or was received again by
        someone else after its visibility timeout.
        """
        message = msg_or_receipt if isinstance(msg_or_receipt, Message) else None
        if message is not None:
            self._check_own(message)
        elif not names.is_receipt(msg_or_receipt):
            names.parse_receipt(msg_or_receipt)  # raises InvalidReceipt with the reason
        with self._locked(message):
            receipt = message.receipt if message is not None else msg_or_receipt
            if message is not None and receipt is not message._issued:
                names.parse_receipt(receipt)  # changed by the caller: untrusted again
            assert isinstance(receipt, str)
            issued = message is not None and receipt is message._issued
            try:
                self._store.delete(receipt, known=issued)
            except FileNotFoundError:
                raise ReceiptExpired(f"cannot delete: {receipt} is no longer current") from None
            except OSError as exc:
                _storage_error(exc, f"deleting from {self.url}")
            with self._lock:
                self._candidates.forget(receipt)
            if message is not None:
                message._done = True

    def extend(self, msg_or_receipt: Message | str, visibility_timeout: float) -> Message:
        """Keep a received message invisible for ``visibility_timeout`` more seconds from now.

        Returns the message with its new receipt (a ``Message`` argument is
        updated in place). Raises :class:`ReceiptExpired` if the receipt is stale.
        """
        vt_ms = int(seconds(visibility_timeout, "visibility_timeout") * 1000)
        parsed, message = self._held(msg_or_receipt)
        if message is None:
            # The body before the rename: the rename alone decides the
            # outcome (a read after it could find the name already expired
            # and taken, and call an extend that took effect stale).
            receipt = self._receipt_name(parsed)
            try:
                body = self._store.read(receipt)
            except FileNotFoundError:
                raise ReceiptExpired(f"cannot extend: {receipt} is no longer current") from None
            except OSError as exc:
                _storage_error(exc, f"reading from {self.url}")
            new = self._move_held(parsed, self._expiry_ms(vt_ms), "extend")
            return Message(self, parsed.id, body, new, parsed.receive_count)
        with message._lock:
            parsed = names.parse_receipt(message.receipt)
            message.receipt = message._issued = self._move_held(
                parsed, self._expiry_ms(vt_ms), "extend"
            )
            return message

    def release(self, msg_or_receipt: Message | str, *, delay: float = 0) -> None:
        """Negative acknowledge: make a received message visible again after ``delay``.

        It keeps its FIFO position and receive count. Raises
        :class:`ReceiptExpired` if the receipt is stale.
        """
        delay_ms = int(seconds(delay, "delay") * 1000)
        parsed, message = self._held(msg_or_receipt)
        with self._locked(message):
            if message is not None:
                parsed = names.parse_receipt(message.receipt)
            self._move_held(parsed, self._expiry_ms(delay_ms), "release")
            if message is not None:
                message._done = True

    # ---------------------------------------------------------- inspection
    def _parsed_listing(self, *, settle: bool = False) -> Iterator[tuple[str, names.Name]]:
        for name in self._store.list(settle=settle):
            parsed = names.parse(name)
            if parsed is not None:
                yield name, parsed

    def peek(self, max_messages: int = 10) -> list[Message]:
        """Up to ``max_messages`` visible messages, oldest first, without receiving them.

        Changes nothing; the returned messages have no receipt.
        """
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise InvalidArgument(f"max_messages must be a positive int, not {max_messages!r}")
        now = self._now_ms()
        try:
            visible = sorted(
                (name, parsed)
                for name, parsed in self._parsed_listing()
                if names.is_visible(parsed, now)
            )
            out = []
            for name, parsed in visible:
                try:
                    body = self._store.read(name)
                except FileNotFoundError:
                    continue
                out.append(Message(self, parsed.id, body, None, parsed.receive_count))
                if len(out) == max_messages:
                    break
            return out
        except OSError as exc:
            _storage_error(exc, f"peeking into {self.url}")

    def stats(self) -> QueueStats:
        """Counts by state from one listing (and one of the dead-letter queue).

        Reads names only, never a body, and changes nothing (a dead-letter
        queue that does not exist yet counts 0 and is not created). A message
        being renamed by another client (on object stores, a move under way)
        counts under the name it leaves.
        """
        now = self._now_ms()
        ready = in_flight = delayed = writing = 0
        oldest: int | None = None
        next_visible: int | None = None
        in_flight_expiry: int | None = None
        try:
            for _, parsed in self._parsed_listing(settle=True):
                if parsed.state == names.NEW:
                    writing += 1
                    continue
                state = names.visibility(parsed, now)
                if state == names.READY:
                    ready += 1
                    sent = names.id_ms(parsed.id)
                    oldest = sent if oldest is None else min(oldest, sent)
                    continue
                assert parsed.expiry_ms is not None
                in_flight += state == names.IN_FLIGHT
                delayed += state == names.DELAYED
                expiry = parsed.expiry_ms
                next_visible = expiry if next_visible is None else min(next_visible, expiry)
                if state == names.IN_FLIGHT:
                    in_flight_expiry = min(in_flight_expiry or expiry, expiry)
        except OSError as exc:
            _storage_error(exc, f"listing {self.url}")
        return QueueStats(
            ready=ready,
            in_flight=in_flight,
            delayed=delayed,
            writing=writing,
            oldest_ready_age=None if oldest is None else max(0.0, (now - oldest) / 1000),
            next_visible_in=None if next_visible is None else (next_visible - now) / 1000,
            in_flight_expires_in=None
            if in_flight_expiry is None
            else (in_flight_expiry - now) / 1000,
            dead_letter=self._dead_letter_depth(),
        )

    def _dead_letter_depth(self) -> int | None:
        if self.config.dead_letter is None:
            return None
        dlq = self._dead_letter_target(create=False)
        if dlq is None:
            return 0
        try:
            return sum(1 for _, parsed in dlq._parsed_listing() if parsed.state != names.NEW)
        except OSError as exc:
            _storage_error(exc, f"listing {dlq.url}")

    def purge(self, *, progress: Progress | None = None) -> int:
        """Delete every message in every state (not sends under way); return how many.

        Holders of purged messages get :class:`ReceiptExpired` on their receipts.
        Messages sent, received or renamed while it runs may survive it (on
        object stores, one whose move another client began less than
        ``FINISH_AFTER`` ago).
        """
        removed = 0
        with self._lock:
            self._candidates = _Candidates()  # everything it knew is going
        try:
            doomed = [name for name, parsed in self._parsed_listing() if parsed.state != names.NEW]
            for done, name in enumerate(doomed, 1):
                with suppress(FileNotFoundError):
                    self._store.delete(name, known=True)
                    removed += 1
                if progress is not None:
                    progress(done, len(doomed))
            self._store.flush()
        except OSError as exc:
            _storage_error(exc, f"purging {self.url}")
        log.info("%s: purged %d messages", self.url, removed)
        return removed

    # -------------------------------------------------------------- worker
    def consume(
        self,
        handler: Callable[[Message], object],
        *,
        visibility_timeout: float | None = None,
        max_messages: int | None = None,
        idle_timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> int:
        """Run ``handler`` on messages one at a time; return how many succeeded.

        While the handler runs, a heartbeat thread extends the message's
        visibility every third of the visibility timeout. When the handler
        returns, the message is deleted; when it raises, the message is
        released for another attempt (and the error is logged). Stops after
        ``max_messages`` messages, after ``idle_timeout`` seconds without one,
        or when ``stop`` is set.
        """
        vt = self._vt_ms(visibility_timeout) / 1000
        pacing = ConsumePacing(max_messages, idle_timeout, stop)
        succeeded = 0
        with _Heartbeat(self, vt) as heartbeat:
            while (poll := pacing.next_wait()) is not None:
                message = self.receive(visibility_timeout=vt, wait=poll)
                if message is None:
                    continue
                pacing.received()
                heartbeat.watch(message)
                try:
                    handler(message)
                except Exception:
                    log.exception("%s: handler failed on %s; releasing it", self.url, message.id)
                    failed = True
                else:
                    failed = False
                finally:
                    heartbeat.watch(None)
                succeeded += self._settle(message, failed=failed)
                pacing.finished()
        return succeeded

    def _settle(self, message: Message, *, failed: bool) -> bool:
        if message._done:
            return not failed
        try:
            if failed:
                self.release(message)
            else:
                self.delete(message)
            return not failed
        except ReceiptExpired:
            log.warning(
                "%s: %s became visible again before its handler finished; it will be redelivered",
                self.url,
                message.id,
            )
            return False


def skip_bound(losses: int, costly: bool) -> int:
    """A receiver that lost ``losses`` claims in a row skips fewer than this many candidates."""
    return min(1 << (losses - 1 + (COSTLY_SPREAD if costly else 0)), 64)


class ConsumePacing:
    """When a ``consume`` loop stops, and how long each of its receives waits."""

    def __init__(
        self,
        max_messages: int | None,
        idle_timeout: float | None,
        stop: threading.Event | asyncio.Event | None,
    ) -> None:
        self._left = max_messages
        self._idle = None if idle_timeout is None else seconds(idle_timeout, "idle_timeout")
        self._stop = stop
        self._idle_since = time.monotonic()

    def next_wait(self) -> float | None:
        """Seconds the next receive may wait, or ``None`` to stop."""
        if self._left is not None and self._left <= 0:
            return None
        if self._stop is not None and self._stop.is_set():
            return None
        if self._idle is None:
            return 0.5
        waited = time.monotonic() - self._idle_since
        return None if waited >= self._idle else min(0.5, self._idle - waited)

    def received(self) -> None:
        if self._left is not None:
            self._left -= 1

    def finished(self) -> None:
        """A message was handled: the idle clock starts again."""
        self._idle_since = time.monotonic()


class _Heartbeat:
    """One background thread per ``consume`` call that keeps the message being
    handled invisible, extending it every third of the visibility timeout."""

    def __init__(self, queue: Queue, visibility_timeout: float) -> None:
        self._queue, self._vt = queue, visibility_timeout
        self._changed = threading.Condition()
        self._message: Message | None = None
        self._extended_at = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="vsqs-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        if self._vt > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join()

    def watch(self, message: Message | None) -> None:
        """Keep ``message`` invisible from now on (``None``: stop)."""
        with self._changed:
            self._message, self._extended_at = message, time.monotonic()
            self._changed.notify()

    def _run(self) -> None:
        interval = self._vt / 3
        with self._changed:
            while not self._closed:
                message = self._message
                if message is None:
                    self._changed.wait()
                    continue
                remaining = self._extended_at + interval - time.monotonic()
                if remaining > 0:
                    self._changed.wait(remaining)
                    continue
                self._extended_at = time.monotonic()
                if message._done:
                    continue
                try:
                    self._queue.extend(message, self._vt)
                except VsqsError as exc:
                    log.warning(
                        "%s: heartbeat for %s stopped: %s", self._queue.url, message.id, exc
                    )
                    self._message = None


def redrive(
    dead_letter: object,
    source: object,
    *,
    storage_options: dict[str, Any] | None = None,
    max_messages: int | None = None,
    progress: Progress | None = None,
    unsafe_claims: bool = False,
) -> int:
    """Move visible messages from a dead-letter queue back to ``source``; return how many.

    ``dead_letter`` and ``source`` are locations (opened here with
    ``storage_options`` and ``unsafe_claims``, and closed again) or open
    :class:`Queue` objects (left open). Each message keeps its id (so its FIFO
    position) and starts with a receive count of 0. Safe to run concurrently
    with consumers of either queue and with another redrive: every message is
    first received from the dead-letter queue, so only one mover handles it.
    """
    moved = 0
    with ExitStack() as opened:

        def queue(location: object) -> Queue:
            if isinstance(location, Queue):
                return location
            return opened.enter_context(
                Queue(
                    location,
                    storage_options=storage_options,
                    create=False,
                    unsafe_claims=unsafe_claims,
                )
            )

        dlq, target = queue(dead_letter), queue(source)
        while max_messages is None or moved < max_messages:
            batch = dlq.receive_batch(
                100 if max_messages is None else min(100, max_messages - moved),
                visibility_timeout=_MOVE_HOLD_MS / 1000,
            )
            if not batch:
                break
            for message in batch:
                held = names.parse(message.receipt or "")
                assert held is not None
                target._move_in(held, message.body)
                try:
                    dlq.delete(message)
                except ReceiptExpired:
                    continue
                moved += 1
                if progress is not None:
                    progress(moved, max_messages)
    log.info("redrove %d messages from %s to %s", moved, dlq.url, target.url)
    return moved


__all__ = ["Message", "Queue", "QueueStats", "redrive"]
