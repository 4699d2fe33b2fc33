"""Publishing: a message is written whole as ``<id>.new`` (invisible) and
renamed to its final name, so receivers never see part of one.

Used by :meth:`vsqs.Queue.send` and ``send_batch``, by moves into another
queue (dead letters, redrive), and by the Spark writer's commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress

from . import _meter as meter
from . import _names as names
from ._bundle import bundle, ids_of, with_sibling_ids
from ._config import ENV_BUNDLES, env_flag
from ._envelope import NO_META
from ._errors import StorageError, VsqsError, storage_errors
from ._fanout import fan_out
from ._inspect import RESTAMP_AFTER
from ._outgoing import Prepared
from .stores._base import Store

#: ``publish(message_id, data, delay_ms)`` under that very id; whether it did.
PublishAs = Callable[[str, bytes, int], bool]
#: ``dedup(dedup_id, message_id, data, delay_ms, publish)``: send the message
#: unless its deduplication id was sent within the window; the id of the
#: id's message (:meth:`vsqs._dedup.Deduplicator.send`).
Dedup = Callable[[str, str, bytes, int, PublishAs], str]

#: Fresh ids a send tries before it gives up.
SEND_ATTEMPTS = 8
#: Sends of one batch that share one batch marker on object stores
#: (:meth:`ObjectStore.write_batch`).
SEND_CHUNK = 256


@contextmanager
def telling_sent(sent: list[str]) -> Iterator[None]:
    """Attach ``sent`` (the ids published so far, in batch order) to a
    :class:`VsqsError` raised inside, as its ``sent`` attribute."""
    try:
        yield
    except VsqsError as exc:
        exc.sent = list(sent)
        raise


def publish(
    store: Store, durable: bool, message_id: str, data: bytes, final: str, *, replace_new: bool
) -> bool:
    """Write ``<id>.new`` and rename it to ``final``; ``False`` if ``final`` exists.

    ``replace_new`` removes a leftover ``<id>.new`` first: only for moves of
    a message the caller holds, whose earlier attempt may have crashed.
    Stores that create atomically get ``final`` directly.
    """
    if store.creates_atomically(durable):
        try:
            store.write_new(final, data, fsync=durable)
        except FileExistsError:
            return False
        return True
    tmp = names.new_name(message_id)
    try:
        store.write_new(tmp, data, fsync=durable)
    except FileExistsError:
        if not replace_new:
            raise
        store.delete(tmp, known=True)
        store.write_new(tmp, data, fsync=durable)
    try:
        store.rename(tmp, final)
    except FileExistsError:
        store.delete(tmp, known=True)
        return False
    if durable:
        store.sync_names()
    return True


def publish_as(
    store: Store, durable: bool, message_id: str, data: bytes, visible_at: int | None
) -> bool:
    """Publish under ``message_id`` itself (a deduplication record's id),
    visible at ``visible_at`` (ms; ``None``: at once); whether this published
    it. A name of it already there, or burned, is no error: at least once."""
    final = names.published_name(message_id, visible_at)
    with suppress(FileExistsError):
        return publish(store, durable, message_id, data, final, replace_new=False)
    return False


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


def staged_by(store: Store, job: str) -> list[str]:
    """The ``.new`` names in one listing whose id's nonce starts with ``job``
    (a Spark job's nonce: every id its tasks stage ends in it)."""
    return [
        name
        for name in store.list()
        if name.endswith(names.NEW_SUFFIX)
        and (parsed := names.parse(name)) is not None
        and parsed.id[: names.ID_LEN][-names.NONCE_LEN :].startswith(job)
    ]


def unstage(store: Store, staged: Iterable[str]) -> None:
    """Remove what :func:`stage` wrote under these ids (best effort: the
    garbage collection of ``.new`` leftovers removes what this cannot)."""
    for message_id in staged:
        with suppress(OSError):
            store.delete(names.new_name(message_id), known=True)


def commit(
    store: Store,
    staged: list[str],
    visible_at: int | None,
    *,
    durable: bool,
    clock: names.MsClock,
    published: Callable[[str, str], object] | None = None,
) -> None:
    """Publish staged ids under their final names (ready, or delayed until
    ``visible_at``), :attr:`Store.batch_width` at a time (side by side where
    renames cost requests), then make the names durable if asked.

    A staged id issued more than :data:`RESTAMP_AFTER` before its publish is
    published under a fresh id of ``clock``, drawn just before (and so is
    every id staged after it, which keeps the batch in order): a tail of the
    queue waits for a ``.new`` only :data:`STAGING_HOLD`, and must never find
    a message land behind the place it has passed. Where creates are atomic
    (object stores, non-durable local writes) such a message is created anew
    (:func:`restamp`), never moved across ids; elsewhere it is renamed.

    ``published(staged_id, final_name)`` is called for each id published, in
    order. If one fails, the first error is raised once the others were
    made; the ids published stay published.
    """
    failed: list[OSError] = []
    width = store.batch_width
    restamping = False  # once one id is, every later one is too: the batch keeps its order

    def fresh(staged_id: str) -> str:
        """A fresh name for what ``staged_id`` staged (with its tag: its group)."""
        fresh_id = names.tagged(clock.next_id(), names.tag_of(staged_id))
        return names.published_name(fresh_id, visible_at)

    for start in range(0, len(staged), width):
        chunk = staged[start : start + width]
        restamp_before = clock.now_ms() - int(RESTAMP_AFTER * 1000)
        finals = []
        for i in chunk:
            restamping = restamping or names.id_ms(i) < restamp_before
            finals.append(fresh(i) if restamping else names.published_name(i, visible_at))
        for message_id, (final, error) in zip(
            chunk, _publish_chunk(store, chunk, finals, fresh, durable=durable), strict=True
        ):
            if error is not None:
                failed.append(error)
            elif published is not None:
                published(message_id, final)
    if durable and staged:
        store.sync_names()
    if failed:
        raise failed[0]


def _publish_chunk(
    store: Store,
    chunk: list[str],
    finals: list[str],
    fresh: Callable[[str], str],
    *,
    durable: bool,
) -> list[tuple[str, OSError | None]]:
    """Rename each staged id of ``chunk`` to its final name, side by side;
    where creates are atomic, those whose final name has a fresh id (a
    suffix of the chunk) are created anew (:func:`restamp`). The name each
    was published under, and its error."""
    pairs = list(zip(chunk, finals, strict=True))
    kept = len(pairs)
    if store.creates_atomically(durable):
        kept = next((k for k, (i, f) in enumerate(pairs) if names.id_of(f) != i), kept)
    moves = [(names.new_name(i), f) for i, f in pairs[:kept]]
    outcomes = [(f, e) for (_, f), e in zip(moves, store.rename_batch(moves), strict=True)]
    created = fan_out(
        lambda item: restamp(store, *item, fresh, durable=durable),
        pairs[kept:],
        store.batch_width,
    )
    for outcome in created:
        error = outcome.exception()
        if error is not None and not isinstance(error, OSError):
            raise error
        outcomes.append((outcome.value or "", error))
    return outcomes


def restamp(
    store: Store, staged_id: str, final: str, fresh: Callable[[str], str], *, durable: bool
) -> str:
    """Publish what ``staged_id`` staged by creating ``final`` (a name of a
    fresh id) with its bytes, then remove the staged name; return the name
    published.

    It is created as a send is (:meth:`Store.write_new`): a name that is taken
    or burned (a create whose outcome is unknown, which may land later: at
    least once) is replaced by ``fresh(staged_id)``. Never a move across ids: an
    object store's move marker hides its target only among the names of its
    source's id (``docs/protocol.md``, "Restamped commits"). The staged name
    goes after the create, so a tail that waits for it never passes the new
    name before it lands; if it cannot be removed, it is a leftover that the
    writer's cleanup or ``gc()`` removes (only its writer ever publishes it).
    """
    tmp = names.new_name(staged_id)
    data = store.read(tmp)
    for _ in range(SEND_ATTEMPTS):
        try:
            store.write_new(final, data, fsync=durable)
        except FileExistsError:
            final = fresh(staged_id)
            continue
        with suppress(OSError):
            store.delete(tmp, known=True)
        return final
    raise StorageError(f"could not publish {tmp} under {SEND_ATTEMPTS} fresh ids")


class Publisher:
    """Sends of one client to one queue, with ids from its clock."""

    def __init__(
        self,
        store: Store,
        clock: names.MsClock,
        durable: bool,
        published: Callable[[str, int | None], object],
        dedup: Dedup,
        queue_format: Callable[[], int],
    ) -> None:
        """``published(name, visible_at)`` is told of every message sent (for the
        client's own receives); ``dedup`` sends messages with deduplication ids;
        ``queue_format()``: the queue's format (bundles need 4)."""
        self._store = store
        self._clock = clock
        self._durable = durable
        self._published = published
        self._dedup = dedup
        self._format = queue_format

    def send(self, items: list[Prepared], delay_ms: int) -> list[str]:
        """Publish each message on its own, in order; return the ids (a
        duplicate's is the id of the first message of its deduplication id)."""
        if meter.observer is meter.OFF:  # metrics off: a branch
            return self._send_each(items, delay_ms)
        return self._counted("send", self._send_each, items, delay_ms)

    def send_batch(self, items: list[Prepared], delay_ms: int, bundle: bool | None) -> list[str]:
        """Publish a batch: in bundles (:meth:`_send_bundled`) unless ``bundle``
        is false (``None``: as ``VSQS_BUNDLES`` says, by default true), the
        queue's format is older than 4 or a message has a deduplication id;
        else each message in an object of its own (:meth:`_send_batch`).
        Return the ids in order."""
        wanted = env_flag(ENV_BUNDLES, True) if bundle is None else bundle
        send = self._send_batch
        if (
            wanted
            and len(items) > 1
            and self._format() >= names.BUNDLES_FORMAT
            and all(item.meta.dedup_id is None for item in items)
        ):
            send = self._send_bundled
        if meter.observer is meter.OFF:
            return send(items, delay_ms)
        return self._counted("send_batch", send, items, delay_ms)

    def _send_bundled(self, items: list[Prepared], delay_ms: int) -> list[str]:
        """Publish a batch in bundles (:func:`vsqs._bundle.bundle`), one object
        after another, each as :meth:`_send_one` publishes a message (one
        create, or one write and rename); return the messages' ids in order.
        On an error, its ``sent`` lists the messages of the objects sent."""
        packed = bundle(items, lambda tag: names.tagged(self._clock.next_id(), tag))
        sent: list[str] = []
        with telling_sent(sent), self._shown_whole(len(packed) > 1):
            for item, ids in packed:
                try:
                    object_id, published = self._publish_one(item, delay_ms)
                except OSError:
                    with storage_errors(f"sending a batch to {self._store.url} ({len(sent)} sent)"):
                        raise
                sent.extend([object_id] if ids is None else ids_of(published))
        return sent

    @contextmanager
    def _shown_whole(self, several: bool) -> Iterator[None]:
        """While several objects of a batch are published, receivers see none of
        them until all are there (:meth:`Store.sending`, another floor if burned)."""
        if not several:
            yield
            return
        with ExitStack() as marked:
            for _ in range(SEND_ATTEMPTS):
                with suppress(FileExistsError):
                    marked.enter_context(self._store.sending(self._clock.next_id()))
                    break
            else:
                raise StorageError(f"could not mark a batch under {SEND_ATTEMPTS} fresh ids")
            yield

    def _counted(
        self,
        operation: str,
        send: Callable[[list[Prepared], int], list[str]],
        items: list[Prepared],
        delay_ms: int,
    ) -> list[str]:
        """``send(items, delay_ms)``, reported to the meter as ``operation``."""
        observer = meter.observer  # one for both calls: metrics may be enabled meanwhile
        started = observer.clock()
        sent = send(items, delay_ms)
        observer.sent(self._store.url, operation, len(sent), started)
        return sent

    def _send_each(self, items: list[Prepared], delay_ms: int) -> list[str]:
        sent: list[str] = []
        # telling_sent(sent) and storage_errors, inlined: they are on every send
        try:
            try:
                for item in items:
                    sent.append(self._send_one(item, delay_ms))
            except OSError:
                done = f" ({len(sent)} of {len(items)} sent)" if len(items) > 1 else ""
                with storage_errors(f"sending to {self._store.url}{done}"):
                    raise
        except VsqsError as exc:
            exc.sent = list(sent)
            raise
        return sent

    def _send_one(self, item: Prepared, delay_ms: int) -> str:
        """Publish under a fresh id; draw another if the name is taken (an id
        collision), or burned by a create whose outcome is unknown (it may
        land later: a send is at least once). A message with a deduplication
        id goes through its record (:mod:`vsqs._dedup`)."""
        return self._publish_one(item, delay_ms)[0]

    def _publish_one(self, item: Prepared, delay_ms: int) -> tuple[str, bytes]:
        """:meth:`_send_one`, and the bytes published: a bundle sent again after
        a burned name holds its messages under sibling ids, so that a late
        landing of the first create is no second copy under their ids."""
        meta = item.meta
        tag = None if meta is NO_META and item.bundle is None else item.tag
        if meta.dedup_id is not None:
            message_id = names.tagged(self._clock.next_id(), tag)
            sent = self._dedup(meta.dedup_id, message_id, item.data, delay_ms, self.publish_as)
            return sent, item.data
        next_id = self._clock.next_id
        data = item.data
        for attempt in range(SEND_ATTEMPTS):
            if attempt and item.bundle is not None:
                data = with_sibling_ids(data)
            message_id = next_id() if tag is None else names.tagged(next_id(), tag)
            if delay_ms:
                visible_at: int | None = self._clock.expiry_ms(delay_ms)
                final = names.published_name(message_id, visible_at)
            else:
                visible_at, final = None, message_id
            try:
                if publish(self._store, self._durable, message_id, data, final, replace_new=False):
                    self._published(final, visible_at)
                    return message_id, data
            except FileExistsError:
                pass
        raise StorageError(f"could not publish a message under {SEND_ATTEMPTS} fresh ids")

    def publish_as(self, message_id: str, data: bytes, delay_ms: int) -> bool:
        """See :func:`publish_as`; this client's receives see it at once."""
        visible_at = self._clock.expiry_ms(delay_ms) if delay_ms else None
        if not publish_as(self._store, self._durable, message_id, data, visible_at):
            return False
        self._published(names.published_name(message_id, visible_at), visible_at)
        return True

    def _send_batch(self, items: list[Prepared], delay_ms: int) -> list[str]:
        """Stage every message, make them durable with one sync, then publish
        them (one rename batch). Not atomic: on an error some may have been
        sent. A batch with deduplication ids is sent one message at a time."""
        store = self._store
        if any(item.meta.dedup_id is not None for item in items):
            return self._send_each(items, delay_ms)
        if store.creates_atomically(self._durable):
            if store.renames_cost_requests:
                return self._send_side_by_side(items, delay_ms)
            return self._send_each(items, delay_ms)
        staged: list[str] = []
        done: set[str] = set()
        sent: list[str] = []

        def published(staged_id: str, final: str) -> None:
            done.add(staged_id)
            sent.append(names.id_of(final))  # the id it was published under
            self._published(final, visible_at)

        with (
            telling_sent(sent),
            storage_errors(lambda: f"sending a batch to {store.url} ({len(sent)} sent)"),
        ):
            try:
                for item in items:
                    staged.append(stage(store, item.data, self._next_id(item)))
                if self._durable:
                    store.sync_files(names.new_name(i) for i in staged)
                visible_at = self._clock.expiry_ms(delay_ms) if delay_ms else None
                commit(
                    store,
                    staged,
                    visible_at,
                    durable=self._durable,
                    clock=self._clock,
                    published=published,
                )
            finally:
                unstage(store, sorted(set(staged).difference(done)))
        return sent

    def _next_id(self, item: Prepared) -> Callable[[], str]:
        """Fresh ids for ``item``: with its tag (its group)."""
        tag = item.tag
        return lambda: names.tagged(self._clock.next_id(), tag)

    def _send_side_by_side(self, items: list[Prepared], delay_ms: int) -> list[str]:
        """Create a batch's names side by side, :data:`SEND_CHUNK` at a time,
        each chunk's ids issued inside :meth:`Store.sending`, above an id drawn
        for the marker (receivers see a chunk once it is whole). A name that
        was taken or burned is sent again under a fresh id, after the rest of
        its chunk; the ids returned are in the order of ``items``."""
        sent: list[str] = []
        with (
            telling_sent(sent),
            storage_errors(lambda: f"sending a batch to {self._store.url} ({len(sent)} sent)"),
        ):
            for start in range(0, len(items), SEND_CHUNK):
                chunk = items[start : start + SEND_CHUNK]
                ids, error = self._send_chunk(chunk, delay_ms)
                if error is not None:
                    sent.extend(i for i in ids if i is not None)
                    raise error
                for k, (sent_id, item) in enumerate(zip(ids, chunk, strict=True)):
                    if sent_id is None:
                        try:
                            sent_id = self._send_one(item, delay_ms)
                        except BaseException:  # the chunk's later names are sent all the same
                            sent.extend(i for i in ids[k + 1 :] if i is not None)
                            raise
                    sent.append(sent_id)
        return sent

    def _send_chunk(
        self, chunk: list[Prepared], delay_ms: int
    ) -> tuple[list[str | None], OSError | None]:
        """Write one chunk side by side; the id of each message sent (``None``
        where its name was taken or burned, or its create failed), and the
        first error other than a taken or burned name."""
        store = self._store
        burned: FileExistsError | None = None
        for _ in range(SEND_ATTEMPTS):
            try:
                with store.sending(self._clock.next_id()):  # a floor: later ids are above it
                    ids = [self._next_id(item)() for item in chunk]
                    visible_at = self._clock.expiry_ms(delay_ms) if delay_ms else None
                    finals = [names.published_name(i, visible_at) for i in ids]
                    items = [(f, item.data) for f, item in zip(finals, chunk, strict=True)]
                    errors = store.write_batch(items, fsync=self._durable)  # never raises OSError
                break
            except FileExistsError as exc:  # the marker's name was burned: nothing written yet
                burned = exc
        else:
            cause = burned.__cause__ if burned is not None else None
            why = f"; the last create failed: {cause}" if cause else ""
            raise StorageError(f"could not mark a batch under {SEND_ATTEMPTS} fresh ids{why}")
        failure: OSError | None = None
        for final, error in zip(finals, errors, strict=True):
            if error is None:
                self._published(final, visible_at)
            elif not isinstance(error, FileExistsError):
                failure = failure or error
        return [i if e is None else None for i, e in zip(ids, errors, strict=True)], failure
