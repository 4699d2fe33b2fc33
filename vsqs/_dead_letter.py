"""Dead letters: moving a message received too often into another queue, with
a record of where it came from (:func:`vsqs.redrive`, in :mod:`._redrive`,
moves them back).

A move publishes the message in the target queue first and removes it at its
source second, so a crash between the two leaves a copy in both (at least
once), never in neither. A dead-lettering writes the message's origin record
(``<id>.<record id>.origin``, docs/format.md) before it publishes the
message, so a dead letter never lacks one. Every dead-lettering writes a
record of its own under a name that never recurs, and a record is only ever
deleted by a name a listing (or a lookup) showed with its message, so no
late or repeated delete can remove the record of a later dead-lettering. A
record whose message is gone is removed by ``gc()``, by ``purge()``, and by
the ack of its message (a redrive's too) when its receiver listed it.

Where the queue's ``dead_letter_blocks_group`` is set, a dead-lettered
message of a group is not deleted at its source: it is renamed to its
*blocker*, the same message in flight until the end of the format's time
(:data:`~vsqs._names.MAX_EXPIRY_MS`), which holds its group as any message in
flight does. Receivers of the queue remove a blocker once its dead letter has
left the dead-letter queue (acknowledged, purged, redriven or moved):
:meth:`DeadLetters.unblock`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from . import _meter as meter
from . import _names as names
from ._errors import (
    InvalidArgument,
    InvalidQueueName,
    QueueNotFound,
    StorageError,
    VsqsError,
    storage_errors,
)
from ._inspect import message_count
from ._message import DeadLettered, read_record
from ._publish import publish
from .stores._base import Store
from .stores._location import is_sibling_name, without_credentials
from .stores._registry import check_location, open_store, same_location

log = logging.getLogger("vsqs")

#: Names a move into another queue tries before it gives up.
MOVE_ATTEMPTS = 3
#: A receiver looks for the dead letter of a blocker it lists at most once
#: in this many seconds, and for at most ``BLOCKER_CHECKS`` of them a listing.
BLOCKER_CHECK = 5.0
BLOCKER_CHECKS = 8

#: ``unblock(blockers, now)``: the blockers of a listing whose dead letter is
#: gone, removed (``now``: the receiver's monotonic clock, seconds).
Unblock = Callable[[list[str], float], list[str]]


class Origin(NamedTuple):
    """A record of a move into a queue: its record id (fresh, drawn for it
    alone) and its bytes, a dead-lettering's origin (``DeadLettered``), or
    ``b""`` for a redrive's, which records nothing and goes once it served."""

    record_id: str
    data: bytes


def write_origin(store: Store, message_id: str, origin: Origin) -> str:
    """Create the origin record of ``message_id`` in ``store``, under a name no
    record ever had (``<id>.<record id>.origin``), and return that name:
    records left by earlier moves of the message stay, and readers take the
    newest.

    Not fsynced: after a power cut a dead letter may have lost its record,
    never the reverse order. A create whose outcome is unknown burns its name
    (it may land later: a second copy of the record, which is harmless); the
    record is then written under a sibling record id.
    """
    record_id = origin.record_id
    for _ in range(MOVE_ATTEMPTS):
        name = names.origin_name(message_id, record_id)
        try:
            store.write_new(name, origin.data, fsync=False)
            return name
        except FileExistsError:
            record_id = names.sibling_id(record_id)
    raise StorageError(f"{message_id}: could not write its origin record in {store.url}")


def remove_records(store: Store, records: names.Records) -> None:
    """Delete origin records by the names a listing showed, whose message left
    ``store`` (acknowledged or redriven): they never recur, so a delete cannot
    reach a record written since. At best: the outcome is the message's, so a
    record whose delete fails is left for :func:`collect_origins` (``gc()``)
    and logged, never raised."""
    for name in records:
        try:
            store.delete(name, known=True)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.info("%s: the origin record %s is left for gc(): %s", store.url, name, exc)


def move_in(store: Store, durable: bool, moved: names.Name, body: bytes, origin: Origin) -> bool:
    """Publish in ``store`` a message moved from another queue (where its name
    was ``moved``): visible, receive count 0. Under its id (a ready name), or
    where names must not recur (:attr:`Store.unique_names`), under the next
    version: a name it never had. Returns whether it published.

    Every move first writes its record ``origin`` under the id
    (:func:`write_origin`), then lists the id's names here
    (:meth:`~vsqs.stores._base.Store.names_of`) and decides:

    * a copy nobody received (receive count 0) is the message (an earlier
      move published it and was cut short before it removed it at its
      source): nothing is published, and the record goes;
    * a copy that was received may be on its way out (a dead-lettering
      crossing a redrive), and another move's record without a copy is a
      move under way, or one whose publish may still land: the message is
      published again (at least once), under a
      :func:`~vsqs._names.sibling_id` (the same FIFO position, an id of its
      own, with a record of its own), and the record under the id goes;
    * nothing: it is published under its id.

    Of two moves of one message at once, the one that lists second sees the
    first's record (each lists after its own record landed), so two copies
    never share an id, and so never a name. A record stays with a message
    published under its id (a redrive's, which records nothing, goes then),
    and with a name whose create's outcome was unknown (it may land later):
    ``gc()`` removes it once its id has had no message for the grace period.
    """
    with storage_errors(f"moving {moved.id} into {store.url}"):
        record = write_origin(store, moved.id, origin)
        here = _copy_here(store, moved.id, record)
        if here is not None:
            remove_records(store, (record,))
            if not here:
                return False
        message_id = names.sibling_id(moved.id) if here else moved.id
        if not store.unique_names:
            if message_id != moved.id and origin.data:
                write_origin(store, message_id, origin)
            published = publish(store, durable, message_id, body, message_id, replace_new=True)
            if published and message_id == moved.id and not origin.data:
                remove_records(store, (record,))
            return published
        for _ in range(MOVE_ATTEMPTS):
            # Visible since it was sent, whatever the clock; a name that is
            # burned (a create of unknown outcome, which may land later: at
            # least once) is not used again, nor is its id (its record stays
            # until gc() finds it without a message).
            final = names.invisible_name(message_id, names.id_ms(moved.id), 0, moved.version + 1)
            if message_id != moved.id and origin.data:
                write_origin(store, message_id, origin)
            if publish(store, durable, message_id, body, final, replace_new=False):
                if message_id == moved.id and not origin.data:
                    remove_records(store, (record,))
                return True
            message_id = names.sibling_id(moved.id)
        raise StorageError(f"{moved.id}: could not publish it in {MOVE_ATTEMPTS} attempts")


def _copy_here(store: Store, message_id: str, record: str) -> bool | None:
    """What a move of ``message_id`` into ``store`` finds there, besides its
    own ``record``: ``False`` a copy nobody received, ``True`` a copy that
    was received or another move's record, ``None`` nothing."""
    found: bool | None = None
    for name in store.names_of(message_id):
        here = names.parse(name)
        if here is not None and here.state != names.NEW:
            if not here.receive_count:
                return False
            found = True
        elif name != record and names.origin_id(name) == message_id:
            found = True
    return found


def dead_letter_location(target: str | None, store: Store) -> Store | str | None:
    """Where a config's ``dead_letter`` is: the sibling queue of ``store`` a
    name stands for, or the path or URL itself."""
    if target is None or not is_sibling_name(target):
        return target
    return store.sibling(target)


def dead_letter_url(
    target: str | None, store: Store, storage_options: dict[str, Any] | None
) -> str | None:
    """The url of a config's ``dead_letter`` (:func:`dead_letter_location`),
    ``None`` without one. A store made to name it is closed at once."""
    location = dead_letter_location(target, store)
    if location is None:
        return None
    named = location if isinstance(location, Store) else open_store(location, storage_options)
    try:
        return named.url
    finally:
        named.close()  # made here only to be named: nothing of it is kept


def check_target(target: str | None, own_url: str, *, given: bool) -> None:
    """Refuse, when a queue at ``own_url`` is opened, a dead-letter location
    it could never use: a name that is not a queue name, a relative path
    (which would resolve against the working directory of whichever process
    dead-letters).

    ``given``: the location was given now, to be written into a new config,
    which cannot be changed later. It is then also refused if it is the
    queue itself (a dead-lettering would only reset the receive count:
    ``max_receives`` would never end a message), or if no store on this host
    could serve it, for its form alone (:func:`~vsqs.stores._registry.check_location`:
    a mistyped or web URL, an unknown scheme, a missing package). No store is
    made and no request is sent.
    """
    if target is None:
        return
    if given:
        check_location(target)
    sibling = is_sibling_name(target)
    if sibling:
        names.validate_queue_name(target)
    elif "://" not in target and not os.path.isabs(target):
        raise InvalidQueueName(
            f"dead_letter {target!r:.80}: a relative path depends on the working directory "
            "of whichever process dead-letters; use a queue name (a sibling), an absolute "
            "path or a URL"
        )
    if not given:
        return
    own_name = own_url.rstrip("/").rpartition("/")[2]
    if target == own_name if sibling else same_location(target, own_url):
        raise InvalidArgument(
            f"{own_url} cannot be its own dead-letter queue "
            f"(dead_letter {without_credentials(target)!r:.80})"
        )


class DeadLetterQueue(Protocol):
    """What dead-lettering needs of the queue it moves messages into (a
    :class:`vsqs.Queue`)."""

    @property
    def url(self) -> str: ...

    @property
    def store(self) -> Store: ...

    @property
    def durable(self) -> bool: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    def close(self) -> None: ...


class DeadLetters:
    """The dead-letter queue of one queue, opened on first use.

    ``open_queue(create)`` opens it (``QueueNotFound`` if it does not exist
    and ``create`` is false); ``blocks()``: whether a dead-lettered message
    of a group leaves a blocker (the queue's ``dead_letter_blocks_group``).
    """

    def __init__(
        self,
        source: Store,
        open_queue: Callable[[bool], DeadLetterQueue],
        blocks: Callable[[], bool],
    ) -> None:
        self._source = source
        self._open_queue = open_queue
        self._blocks = blocks
        self._queue: DeadLetterQueue | None = None
        self._checked: dict[str, float] = {}  # blocker: when its dead letter was looked for

    def queue(self, *, create: bool = True) -> DeadLetterQueue | None:
        """The dead-letter queue; ``None`` if it does not exist and ``create`` is false."""
        if self._queue is None:
            try:
                self._queue = self._open_queue(create)
            except QueueNotFound:
                if create:
                    raise  # it vanished while being created: an error, not "none"
                return None
        return self._queue

    def depth(self) -> int:
        """Messages in the dead-letter queue, every state (0 if it does not exist yet)."""
        dlq = self.queue(create=False)
        if dlq is None:
            return 0
        with storage_errors(f"listing {dlq.url}"):
            return message_count(dlq.store)

    def take(self, held: str, body: bytes) -> str | None:
        """Move a message this client holds (as ``held``, with ``body``) to the
        dead-letter queue, keeping its id, with its origin record: this queue,
        the times it was received here, and now. If this raises, the message
        stays held at its source, and comes back there when its visibility
        timeout runs out. Returns the name of its blocker, where it leaves one
        (``dead_letter_blocks_group``, a message of a group), else ``None``."""
        parsed = names.parse(held)
        assert parsed is not None
        dlq = self.queue()
        assert dlq is not None
        clock = dlq.store.ms_clock(dlq.clock)
        at = datetime.fromtimestamp(clock.now_ms() / 1000, UTC)
        # The claim that found it exhausted counted one receive nobody got.
        origin = DeadLettered(self._source.url, parsed.receive_count - 1, at)
        move_in(dlq.store, dlq.durable, parsed, body, Origin(clock.next_id(), origin.to_json()))
        log.warning(
            "%s: message %s dead-lettered after %d receives to %s",
            self._source.url,
            parsed.id,
            origin.receive_count,
            dlq.url,
        )
        for _ in range(names.message_count(parsed.id)):  # a part's messages, each
            meter.observer.dead_lettered(self._source.url)
        if parsed.group is not None and self._blocks():
            blocker = names.next_name(parsed, names.MAX_EXPIRY_MS, parsed.receive_count)
            self._source.rename(held, blocker)
            return blocker
        with suppress(FileNotFoundError):
            self._source.delete(held, known=True)
        return None

    def unblock(self, found: list[str], now: float) -> list[str]:
        """Remove the blockers among ``found`` (a listing's) whose dead letter
        has left the dead-letter queue, and return their names: from then on
        their groups go on. Each is looked for at most once in
        :data:`BLOCKER_CHECK` seconds (``now``, monotonic), at most
        :data:`BLOCKER_CHECKS` a call; a look that fails is tried again later.

        The dead letter is looked for by its FIFO position and group, so
        under the id a move into the dead-letter queue gave it, its own or a
        sibling; it counts as gone once two listings miss it (a directory
        listing may miss a name renamed while it runs). A redrive publishes
        it at its source before it leaves: it is the group's head again."""
        checked = {name: self._checked[name] for name in found if name in self._checked}
        self._checked = checked
        due = sorted(found, key=lambda name: checked.get(name, -math.inf))[:BLOCKER_CHECKS]
        removed: list[str] = []
        for name in due:
            if checked.get(name, -math.inf) + BLOCKER_CHECK > now:
                break
            checked[name] = now
            try:
                dlq = self.queue(create=False)
                if dlq is not None and _dead_letter_of(dlq.store, name):
                    continue
                with suppress(FileNotFoundError):
                    self._source.delete(name, known=True)
            except (OSError, VsqsError) as exc:
                log.info("%s: blocker %s is kept for now: %s", self._source.url, name, exc)
                continue
            log.info("%s: the dead letter of %s is gone; its group goes on", self._source.url, name)
            removed.append(name)
        return removed

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()


def blockers(pending: dict[str, int]) -> list[str]:
    """The blockers among a listing's invisible names and their expiries."""
    return [
        name
        for name, expiry in pending.items()
        if expiry == names.MAX_EXPIRY_MS and names.group_of(names.id_of(name)) is not None
    ]


def _dead_letter_of(store: Store, blocker: str) -> bool:
    """Whether ``store``, a dead-letter queue, may hold the dead letter of
    ``blocker``: a name of a message at its FIFO position and of its group
    (a ``.new`` is a move under way) in either of two listings."""
    message_id = names.id_of(blocker)
    position, tag = message_id[: names.ID_LEN - names.NONCE_LEN], names.tag_of(message_id)
    for _ in range(2):
        for name in store.list(prefix=position, settle=True):
            parsed = names.parse(name)
            if parsed is not None and names.tag_of(parsed.id) == tag:
                return True
    return False


def collect_origins(store: Store, now_ms: int, grace_ms: int) -> list[str]:
    """Remove the origin records whose message is gone; return their names.

    A record is written before its message is published, so one without a
    message may belong to a move under way: it is removed only once it is
    older than ``grace_ms``, by its record id's time (a record named
    ``<id>.origin``, written before record ids, by the time it records; an
    unreadable one at once). A message must be missing from two listings,
    which show messages being moved under the name they leave: a directory
    listing may miss a name renamed while it runs.
    """
    candidates = _orphan_origins(store)
    if candidates:
        candidates &= _orphan_origins(store)
    removed: list[str] = []
    for name in sorted(candidates):
        if now_ms - _written_ms(store, name) < grace_ms:
            continue
        with suppress(FileNotFoundError):
            store.delete(name, known=True)
            removed.append(name)
    if removed:
        log.info("%s: removed %d origin records of messages gone", store.url, len(removed))
    return removed


def _written_ms(store: Store, name: str) -> float:
    """When the record ``name`` was written (unix ms, by its writer's clock);
    ``-inf`` for a record named ``<id>.origin`` that does not read as one."""
    record = names.origin_record(name)
    if record is not None and record[1]:
        return names.id_ms(record[1])
    found = read_record(store, name)
    return -math.inf if found is None else found.at.timestamp() * 1000


def _orphan_origins(store: Store) -> set[str]:
    """The origin records of one listing whose id has no name there."""
    ids: set[str] = set()
    records: dict[str, names.Records] = {}
    for name in store.list(settle=True):
        parsed = names.parse(name)
        if parsed is not None:
            ids.add(names.lineage(parsed.id))  # a part's record is its bundle's
        else:
            names.note_origin(records, name)
    return {name for of_id, of in records.items() if names.lineage(of_id) not in ids for name in of}
