"""The :class:`Queue` facade: the state machine of ``docs/format.md`` over any
:class:`~vsqs.stores._base.Store`.

It checks its arguments, that it is open and (every 10 s) its config, and
delegates each concern to its own module below it: :mod:`._admin`,
:mod:`._configure`, :mod:`._teardown`, :mod:`._publish`, :mod:`._receiver`,
:mod:`._settle`, :mod:`._dead_letter` and :mod:`._crew`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from typing import Any

from . import _admin as admin
from . import _crew as crew
from ._bundled import messages_of
from ._config import QueueConfig, positive_int, requested, seconds
from ._dead_letter import DeadLetters, dead_letter_location, dead_letter_url
from ._dedup import Deduplicator
from ._envelope import check_key, group_token
from ._errors import QueueClosed
from ._message import (
    Body,
    DeletedQueue,
    DeleteResult,
    ExtendResult,
    Message,
    Progress,
    QueueStats,
    ReleaseResult,
    hold,
)
from ._options import ConsumeOptions
from ._outgoing import Outgoing, prepare
from ._publish import Publisher
from ._receiver import Receiver
from ._settle import Settler
from ._teardown import delete_queue
from .stores._base import Store
from .stores._registry import open_store


class Queue:
    """A FIFO queue with visibility timeouts in a directory (or any :class:`Store`).

    Guarantees (on stores whose claims are exclusive; see ``docs/guarantees.md``):

    * a message is held by at most one receiver until its visibility timeout
      expires; a receipt that is no longer current changes nothing;
    * a ``send`` that returned is never lost (and, with ``durable=True`` on a
      durable store, survives a power cut); delivery is at least once;
    * one producer's messages are first delivered in send order to a single
      consumer; with several consumers, receives are spread over the head of
      the queue.

    A ``Queue`` is thread-safe; a process forked while threads use it gets a
    working copy (no lock of the parent stays held; docs/guarantees.md).

    ``visibility_timeout``, ``max_receives``, ``dead_letter``, ``retry_delay``,
    ``max_retry_delay``, ``max_message_size``, ``dedup_window``,
    ``content_dedup`` and ``dead_letter_blocks_group`` are the queue's
    settings, written into its config when this call creates it and checked
    against it otherwise (:meth:`configure` changes some); the others are this
    client's. What is left out comes from the queue's config, then ``VSQS_*``
    environment variables, then built-in values (docs/settings.md).

    ``max_message_size`` (bytes): a larger send raises :class:`MessageTooLarge`;
    a larger message is never read. ``max_poll_interval``: on object stores, how
    often an idle receiver lists at most.
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
        retry_delay: float | None = None,
        max_retry_delay: float | None = None,
        durable: bool | None = None,
        clock: Callable[[], float] = time.time,
        new_grace: float | None = None,
        unsafe_claims: bool = False,
        max_poll_interval: float | None = None,
        max_message_size: int | None = None,
        dedup_window: float | None = None,
        content_dedup: bool | None = None,
        dead_letter_blocks_group: bool | None = None,
    ) -> None:
        self._store = open_store(url, storage_options)
        self._closed = False
        self._owns_store = self._store is not url  # a Store passed in stays the caller's
        self._storage_options = storage_options
        self._unsafe_claims = bool(unsafe_claims)
        self.url = self._store.url
        durable, new_grace, poll = admin.client_settings(durable, new_grace, max_poll_interval)
        self.durable = durable and self._store.durable
        self._clock = self._store.ms_clock(clock)
        self._new_grace_ms = int(new_grace * 1000)
        self._dead_letters = self._new_dead_letters()
        self._receiver = Receiver(self._store, self._clock, self._new_grace_ms, poll)
        self._dedup = Deduplicator(self._store, self._clock, self.durable, lambda: self.config)
        self._publisher = Publisher(
            self._store, self._clock, self.durable, self._receiver.sent, self._dedup.send,
            lambda: self.config.format,
        )  # fmt: skip
        self._settler = Settler(self, self._store, self._clock, self._receiver)
        settings = requested(
            visibility_timeout=visibility_timeout, max_receives=max_receives,
            dead_letter=dead_letter, retry_delay=retry_delay, max_retry_delay=max_retry_delay,
            max_message_size=max_message_size, dedup_window=dedup_window,
            content_dedup=content_dedup, dead_letter_blocks_group=dead_letter_blocks_group,
        )  # fmt: skip
        try:
            self._live = admin.open_config(
                self._store, self._clock, create=create, durable=self.durable,
                unsafe_claims=self._unsafe_claims, requested=settings,
            )  # fmt: skip
            self.config = self._live.version.config
            if self.config.dead_letter_blocks_group:
                self._receiver.unblock = self._dead_letters.unblock
        except BaseException:
            self.close()
            raise

    def _new_dead_letters(self) -> DeadLetters:
        blocks = lambda: self.config.dead_letter_blocks_group  # noqa: E731
        return DeadLetters(self._store, self._open_dead_letter, blocks)

    def _open_dead_letter(self, create: bool) -> Queue:
        location = dead_letter_location(self.config.dead_letter, self._store)
        assert location is not None
        options = None if isinstance(location, Store) else self._storage_options
        return Queue(
            location, storage_options=options, create=create,
            durable=self.durable, clock=self.clock, unsafe_claims=self._unsafe_claims,
        )  # fmt: skip

    def _vt_ms(self, visibility_timeout: float | None) -> int:
        if visibility_timeout is None:  # on every receive: no call
            return int(self.config.visibility_timeout * 1000)
        return int(seconds(visibility_timeout, "visibility_timeout") * 1000)

    # ------------------------------------------------------------ lifecycle
    @property
    def store(self) -> Store:
        """The :class:`Store` this queue runs on."""
        return self._store

    @property
    def dead_letter_url(self) -> str | None:
        """The location of this queue's dead-letter queue (as its ``url`` would
        read), ``None`` without one. Nothing is opened or created."""
        return dead_letter_url(self.config.dead_letter, self._store, self._storage_options)

    @property
    def clock(self) -> Callable[[], float]:
        """The clock this queue reads (``time.time`` unless one was injected)."""
        return self._clock.clock

    @property
    def protocol(self) -> str:
        """How claims are made exclusive here: ``"atomic-rename"`` on directories,
        or the object-store protocol the capability probe chose (docs/protocol.md)."""
        return self._store.protocol

    def close(self) -> None:
        """Carry out deletions held back for batching (object stores), and
        release the resources of a store this queue opened. The data is untouched.

        Every later call raises :class:`QueueClosed`, and so does a receive
        under way in another thread: a long poll is woken at once (this
        returns once it has ended). Other calls under way in other threads
        on a store this queue opened may fail (``QueueClosed`` or
        :class:`StorageError`). Idempotent.
        """
        self._closed = True
        self._receiver.close()
        if self._owns_store:
            self._store.close()
        else:
            with suppress(OSError):  # listers collect what is left
                self._store.flush()
        self._dead_letters.close()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosed(f"{self.url}: the queue is closed")
        self._adopt(self._live.refresh())  # a look at most every 10 s

    def _adopt(self, config: QueueConfig | None) -> None:
        old, self.config = self.config, config or self.config
        if old.dead_letter != self.config.dead_letter:  # the new one opens on first use
            dead, self._dead_letters = self._dead_letters, self._new_dead_letters()
            dead.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"vsqs.Queue({self.url!r})"

    # -------------------------------------------------------------- publish
    def send(
        self,
        body: Body,
        *,
        delay: float = 0,
        group: str | None = None,
        dedup_id: str | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> str:
        """Send one message; return its id.

        The message is visible (after ``delay`` seconds) once this returns, and
        never before it is complete. With ``durable=True`` (the default) it
        survives a power cut on a durable store. ``group``: messages of one
        group are delivered in send order, one at a time; ``dedup_id``: a send
        of an id sent within the queue's ``dedup_window`` creates nothing and
        returns the first message's id; ``attributes``: str names and values
        kept with the message (docs/groups.md).
        """
        self._check_open()
        items = prepare(
            [body], self.config, group=group, dedup_ids=[dedup_id], attributes=attributes
        )
        return self._publisher.send(items, int(seconds(delay, "delay") * 1000))[0]

    def send_batch(
        self,
        bodies: Iterable[Body | Outgoing],
        *,
        delay: float = 0,
        group: str | None = None,
        dedup_ids: Iterable[str | None] | None = None,
        attributes: Mapping[str, str] | None = None,
        bundle: bool | None = None,
    ) -> list[str]:
        """Send several messages; return their ids in order.

        In bundles (format 4, unless ``bundle=False`` or ``VSQS_BUNDLES=0``;
        not with deduplication ids): up to 128 messages of one group, or of
        none, in one object, written with one request or one file; each
        message keeps every promise of a message alone (docs/format.md,
        "Format 4: bundles"). Else each is an object of its own: durability is
        paid once per batch, and on object stores receivers see each chunk of
        up to 256 whole or not at all, so the batch is received in order. Not atomic: if
        this raises, the error's ``sent`` attribute lists the ids of the
        messages that were sent, in batch order (it survives pickling); the
        others were not, bar one whose create had an unknown outcome on an
        object store (it may land later: at least once).

        ``group``, ``attributes``: for every message; ``dedup_ids``: one per
        message (``None`` for none); a :class:`vsqs.Outgoing` in ``bodies``
        gives one message its own (docs/groups.md).
        """
        self._check_open()
        items = prepare(
            bodies, self.config, group=group, dedup_ids=dedup_ids, attributes=attributes
        )
        return self._publisher.send_batch(items, int(seconds(delay, "delay") * 1000), bundle)

    # -------------------------------------------------------------- receive
    def receive(
        self,
        *,
        visibility_timeout: float | None = None,
        wait: float = 0,
        group: str | None = None,
    ) -> Message | None:
        """Receive the oldest visible message, waiting up to ``wait`` seconds for one.

        The message stays invisible to others for ``visibility_timeout`` seconds
        (the queue's default if ``None``); delete it before then or it is
        delivered again. ``group``: the next message of that group only.
        """
        got = self.receive_batch(1, visibility_timeout=visibility_timeout, wait=wait, group=group)
        return got[0] if got else None

    def receive_batch(
        self,
        max_messages: int = 10,
        *,
        visibility_timeout: float | None = None,
        wait: float = 0,
        stop: threading.Event | None = None,
        group: str | None = None,
    ) -> list[Message]:
        """Receive up to ``max_messages`` visible messages, oldest first.

        Returns as soon as at least one message was received, or an empty list
        after ``wait`` seconds (a long poll: it wakes when a message arrives or
        an invisible one expires), or at its next wake-up (within a second)
        after ``stop`` is set, claiming nothing more.

        A storage error part way returns the messages already read (it is
        logged, and raised only when none was); a message claimed but not
        read is visible again at once, its receive count as before.

        Messages of a group come in send order, one at a time: while one is
        in flight, its group gives nothing more, to anyone; a batch may hold
        several consecutive ones. ``group``: only that group's (docs/groups.md).
        """
        self._check_open()
        positive_int(max_messages, "max_messages")
        claims = self._receiver.receive(
            max_messages, self._vt_ms(visibility_timeout), seconds(wait, "wait"), stop=stop,
            max_receives=self.config.max_receives, exhausted=self._dead_letters.take,
            max_size=self.config.max_message_size,
            target=None if group is None else group_token(check_key(group, "group")),
        )  # fmt: skip
        got = [m for claim in claims for m in messages_of(self, claim)]
        for message in got:
            hold(message).give_back = self._receiver.give_back
        return got

    def delete(self, msg_or_receipt: Message | str) -> None:
        """Acknowledge a received message: remove it for good.

        Raises :class:`ReceiptExpired` (and changes nothing) if the receipt is
        no longer current: the message was deleted, or was received again by
        someone else after its visibility timeout.
        """
        self._check_open()
        self._settler.delete(msg_or_receipt)

    def delete_batch(self, msgs_or_receipts: Iterable[Message | str]) -> DeleteResult:
        """Acknowledge several received messages; say which were deleted,
        which receipts were stale and which failed (nothing is raised for them).

        Every receipt is checked before anything is deleted (a malformed one,
        or a message of another queue, raises). Each ack is the one
        :meth:`delete` makes; on object stores they run side by side and the
        objects go with one batched request.
        """
        self._check_open()
        return self._settler.delete_batch(msgs_or_receipts)

    def extend(self, msg_or_receipt: Message | str, visibility_timeout: float) -> Message:
        """Keep a received message invisible for ``visibility_timeout`` more seconds from now.

        Returns the message with its new receipt (a ``Message`` argument is
        updated in place). Raises :class:`ReceiptExpired` if the receipt is stale.
        """
        self._check_open()
        return self._settler.extend(
            msg_or_receipt, visibility_timeout, self.config.max_message_size
        )

    def release(self, msg_or_receipt: Message | str, *, delay: float = 0) -> None:
        """Negative acknowledge: make a received message visible again after ``delay``.

        It keeps its FIFO position and receive count. Raises
        :class:`ReceiptExpired` if the receipt is stale.
        """
        self._check_open()
        self._settler.release(msg_or_receipt, delay=delay)

    def extend_batch(
        self, msgs_or_receipts: Iterable[Message | str], visibility_timeout: float
    ) -> ExtendResult:
        """:meth:`extend` several received messages (SQS's
        ``ChangeMessageVisibilityBatch``); say which were extended (with their
        new receipts), stale or failed, as :meth:`delete_batch` does."""
        self._check_open()
        size = self.config.max_message_size
        return self._settler.extend_batch(msgs_or_receipts, visibility_timeout, size)

    def release_batch(
        self, msgs_or_receipts: Iterable[Message | str], *, delay: float = 0
    ) -> ReleaseResult:
        """:meth:`release` several messages: which were released, stale or failed."""
        self._check_open()
        return self._settler.release_batch(msgs_or_receipts, delay=delay)

    def peek(self, max_messages: int = 10) -> list[Message]:
        """Up to ``max_messages`` visible messages, oldest first, without receiving them.

        Changes nothing; the returned messages have no receipt, and carry
        their origin record (``dead_lettered``) if their listing showed one.
        A message larger than ``max_message_size`` is passed over with a warning.
        """
        self._check_open()
        positive_int(max_messages, "max_messages")
        return admin.peek(
            self, self._store, self._clock, self.config.max_message_size, max_messages
        )

    def stats(self) -> QueueStats:
        """Counts by state from one listing (and one of the dead-letter queue).

        Reads names only, never a body, and changes nothing (a dead-letter
        queue that does not exist yet counts 0 and is not created). A message
        being renamed by another client (on object stores, a move under way)
        counts under the name it leaves.
        """
        self._check_open()
        depth = None if self.config.dead_letter is None else self._dead_letters.depth
        return admin.stats(self._store, self._clock, depth)

    def purge(self, *, progress: Progress | None = None) -> int:
        """Delete every message in every state (not sends under way); return how many.

        Holders of purged messages get :class:`ReceiptExpired` on their receipts.
        Messages sent, received or renamed while it runs may survive it (on
        object stores, one whose move another client began less than
        ``FINISH_AFTER`` ago).
        """
        self._check_open()
        self._receiver.reset()  # everything it knew is going
        return admin.purge(self._store, progress)

    def gc(self, *, progress: Progress | None = None) -> list[str]:
        """Repair every leftover a crashed client can leave; return the names repaired.

        On every store: ``.new`` objects of crashed writers and origin records
        of dead letters whose message is gone, older than the grace period,
        and config versions an hour out of date are removed. On object stores,
        moves a crashed client left half done (older than ``FINISH_AFTER``) are
        finished, and their spent markers and the capability probes of killed
        clients removed; the sources of finished moves and the removed objects
        are returned too. Receivers do the same as they list; this does it now.

        Safe while producers and consumers run: a ``.new`` younger than the
        grace period is a send under way, and a younger marker a move under
        way; both are kept. Foreign names are never touched.
        """
        self._check_open()
        records = (self._dedup, self._publisher.publish_as)
        return admin.gc(self._store, self._clock, self._new_grace_ms, progress, records)

    def configure(self, **settings: Any) -> QueueConfig:
        """Change the queue's settings for every client; return the new config.

        Can change: ``visibility_timeout``, ``max_receives`` and ``dead_letter``
        (both or neither; ``None``: none), ``retry_delay``, ``max_retry_delay``,
        ``max_message_size``, ``content_dedup``; the others raise
        :class:`QueueConfigError` saying why. Safe while clients run, and no
        racing change is lost; every client uses the new values in the calls it
        begins 10 s after this returned (docs/administration.md)."""
        self._check_open()
        self._adopt(self._live.change(settings, durable=self.durable, clock=self._clock))
        return self.config

    def delete_queue(self, *, force: bool = False) -> DeletedQueue:
        """Delete everything vsqs wrote in the queue (its directory if then empty; not its
        dead-letter queue); foreign files stay, named in the result. Refuses a queue with
        messages (``QueueNotEmpty``) unless ``force``. Later calls raise QueueNotFound."""
        self._check_open()
        deleted = delete_queue(self._store, force=force)
        self._live.gone = f"{self.url}: the queue was deleted"
        return deleted

    # --------------------------------------------------------------- worker
    def consume(
        self,
        handler: Callable[[Message], object],
        *,
        visibility_timeout: float | None = None,
        max_messages: int | None = None,
        idle_timeout: float | None = None,
        stop: threading.Event | None = None,
        retry_delay: float | None = None,
        max_retry_delay: float | None = None,
        jitter: Callable[[], float] | None = None,
        concurrency: int = 1,
    ) -> int:
        """Run ``handler`` on messages, up to ``concurrency`` at once (in
        threads when more than 1); return how many succeeded. A group's
        messages are handled in order and never side by side.

        A heartbeat keeps each message invisible while its handler runs. The
        message is deleted when the handler returns, released after a backoff
        (``retry_delay``, ``max_retry_delay``, ``jitter``) when it raises an
        ``Exception``. Stops after ``max_messages``, once ``stop`` is set, or
        after ``idle_timeout`` seconds without a success, once the handlers
        under way are done. A bad option raises :class:`InvalidArgument`
        before anything is received. A ``BaseException`` (Ctrl-C; SIGTERM in
        the main thread) releases every message in hand, logs one line and is
        re-raised. docs/workers.md tells it whole.
        """
        self._check_open()
        options = ConsumeOptions(
            visibility_timeout, max_messages, idle_timeout, stop,
            retry_delay, max_retry_delay, jitter, concurrency,
        )  # fmt: skip
        return crew.consume(self, handler, options.resolve(lambda: self.config))


__all__ = ["Queue"]
