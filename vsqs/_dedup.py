"""Deduplication records: one message per deduplication id within the queue's window.

The window of a deduplication id runs from its first send, ``W`` ms long (the
queue's ``dedup_window``). Its record is named by the id's token (32 hex of
its SHA-256) and the *slot* of the first send, ``at_ms // W``
(docs/format.md, "Deduplication records")::

    vsqs-dedup.<token>.<slot>.dedup    the record: the message's id, the first
                                       send's time, and the message itself (to
                                       publish it if its sender died before it did)
    vsqs-dedup.<token>.<slot>.sent     created once the message is published

A send at ``t`` (slot ``s``) first reads the record of slot ``s - 1``: one
whose window still runs makes the send a duplicate. Otherwise it creates the
record of slot ``s`` (exclusive create); if that exists, the send is a
duplicate of it (a record of slot ``s`` is never older than ``W``). The one
send that created the record publishes its message, then creates ``.sent``.

Guaranteed: sends of one id racing within a window create one message (one
exclusive create decides), a send retried after an unknown outcome finds the
record, and a sender that dies between its record and its message leaves a
record without ``.sent``: after :data:`FENCE_MS` the next duplicate send or
``gc()`` creates ``.sent`` (exclusive: one of them) and publishes the
message from the record. A sender publishes only within half of
:data:`FENCE_MS` of its record, so no one rolls forward a send under way.
Not guaranteed (docs/groups.md, "Known limits"): two sends racing across a
slot boundary (one reads slot ``s - 1`` before the other creates it) both
create; hosts whose clocks disagree widen that moment by their skew.

Records are never deleted while their window may run: ``gc()`` removes a
slot's names once two slots have passed (no read), so a delete never meets
a record that is consulted again.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from contextlib import suppress
from typing import NamedTuple

from . import _names as names
from ._config import QueueConfig
from ._envelope import HEADER_SLACK, dedup_token
from ._errors import StorageError
from ._inspect import RESTAMP_AFTER
from ._publish import PublishAs, publish
from .stores._base import Store, TooLarge

log = logging.getLogger("vsqs")

#: Every deduplication name starts with it: after every message id in key
#: order, so records never push messages off a listing's first page.
PREFIX = "vsqs-dedup."
RECORD_SUFFIX = ".dedup"
SENT_SUFFIX = ".sent"
#: A record whose message is not marked sent after this long (ms) is
#: published by the next duplicate send or ``gc()``: its sender is taken
#: for dead (as a staged send is after :data:`~vsqs._inspect.RESTAMP_AFTER`).
FENCE_MS = int(RESTAMP_AFTER * 1000)
MAGIC = b"\x00vsqs-dedup 1\n"
_NAME_RE = re.compile(r"vsqs-dedup\.([0-9a-f]{32})\.(0|[1-9][0-9]{0,12})(\.dedup|\.sent)")
#: Rounds of read and create a send tries before it gives up.
ATTEMPTS = 8


class Record(NamedTuple):
    """A deduplication record: the message of the first send, and when."""

    id: str
    at_ms: int
    delay_ms: int
    data: bytes

    def encode(self) -> bytes:
        header = {"id": self.id, "at_ms": self.at_ms, "delay_ms": self.delay_ms}
        return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + self.data

    @classmethod
    def decode(cls, data: bytes) -> Record | None:
        """The record in ``data``; ``None`` if it is not one (torn, or foreign)."""
        end = data.find(b"\n", len(MAGIC))
        if not data.startswith(MAGIC) or end < 0:
            return None
        try:
            doc = json.loads(data[len(MAGIC) : end])
            message_id, at_ms, delay_ms = doc["id"], doc["at_ms"], doc["delay_ms"]
        except (ValueError, TypeError, KeyError):
            return None
        if not (isinstance(message_id, str) and names.is_id(message_id)):
            return None
        if type(at_ms) is not int or type(delay_ms) is not int:
            return None
        return cls(message_id, at_ms, delay_ms, data[end + 1 :])


class Claim(NamedTuple):
    """What :meth:`Deduplicator.claim` found: the id of the message of the
    deduplication id, when the claim began, and, if this claim recorded it,
    the name of its sent mark (``None`` for a duplicate)."""

    id: str
    at_ms: int
    sent_mark: str | None


def slot_names(token: str, slot: int) -> tuple[str, str]:
    """The record's and the sent mark's names of one slot."""
    return f"{PREFIX}{token}.{slot}{RECORD_SUFFIX}", f"{PREFIX}{token}.{slot}{SENT_SUFFIX}"


def parse_name(name: str) -> tuple[str, int, bool] | None:
    """``(token, slot, is the record)`` of a deduplication name; ``None`` for others."""
    m = _NAME_RE.fullmatch(name)
    if m is None:
        return None
    return m.group(1), int(m.group(2)), m.group(3) == RECORD_SUFFIX


class Deduplicator:
    """The deduplication records of one queue, for one client."""

    def __init__(
        self,
        store: Store,
        clock: names.MsClock,
        durable: bool,
        config: Callable[[], QueueConfig],
    ) -> None:
        """``config()``: the queue's config (its window and largest message)."""
        self._store = store
        self._clock = clock
        self._durable = durable
        self._config = config

    def _window_ms(self) -> int:
        return int(self._config().dedup_window * 1000)

    def send(
        self, dedup_id: str, message_id: str, data: bytes, delay_ms: int, publish: PublishAs
    ) -> str:
        """Send ``data`` as ``message_id`` (by ``publish``) unless ``dedup_id``
        was sent within the window; return the id of the message of ``dedup_id``."""
        claim = self.claim(dedup_id, message_id, data, delay_ms, publish)
        # Too slow to publish safely (not in time), or not known to be
        # published (a burned create may land): a duplicate or gc() decides
        # after the fence, from the names of the id.
        ours = claim.sent_mark is not None and self.in_time(claim)
        if ours and (publish(message_id, data, delay_ms) or self._is_there(message_id)):
            self.sent(claim)
        return claim.id

    def claim(
        self, dedup_id: str, message_id: str, data: bytes, delay_ms: int, publish: PublishAs
    ) -> Claim:
        """Record ``message_id`` (``data``) as the message of ``dedup_id``, or find
        the id recorded within the window. The claim's ``sent_mark`` is set when
        this call recorded it: publish it (while :meth:`in_time`), then
        :meth:`sent`. ``publish``: for a record whose sender died."""
        token, window_ms = dedup_token(dedup_id), self._window_ms()
        for _ in range(ATTEMPTS):
            now = self._clock.now_ms()
            slot = now // window_ms
            earlier = self._read(slot_names(token, slot - 1)[0])
            if earlier is not None and now < earlier.at_ms + window_ms:
                return Claim(self._duplicate(earlier, token, slot - 1, publish), now, None)
            record_name, sent_name = slot_names(token, slot)
            record = Record(message_id, now, delay_ms, data)
            if self._create(record_name, record.encode()):
                return Claim(message_id, now, sent_name)
            found = self._read(record_name)
            if found is not None:
                return Claim(self._duplicate(found, token, slot, publish), now, None)
        raise StorageError(
            f"could not record deduplication id {dedup_id!r:.80} in {self._store.url}"
        )

    def _is_there(self, message_id: str) -> bool:
        """Whether a name of the message is there (a create whose outcome was
        unknown landed after all)."""
        return any(names.parse(n) is not None for n in self._store.names_of(message_id))

    def in_time(self, claim: Claim) -> bool:
        """Whether the message of a claim may still be published by its
        claimer: within half of :data:`FENCE_MS` of its record."""
        return self._clock.now_ms() - claim.at_ms <= FENCE_MS // 2

    def sent(self, claim: Claim) -> None:
        """Mark a claim's message published (no one rolls it forward then),
        trying again on errors: a record left unmarked is published again by
        a roll forward if its message was received and deleted meanwhile."""
        if claim.sent_mark is None:
            return
        for attempt in range(ATTEMPTS):
            try:
                self._create(claim.sent_mark, b"")
                return
            except OSError as exc:
                if attempt == ATTEMPTS - 1:
                    log.warning(
                        "%s: could not mark %s sent (%s): a roll forward may publish it "
                        "again after %d s if it is deleted by then",
                        self._store.url,
                        claim.id,
                        exc,
                        FENCE_MS // 1000,
                    )

    def _duplicate(self, record: Record, token: str, slot: int, publish: PublishAs) -> str:
        """A send of a recorded id: the first message's id. If that message's
        sender left it unsent for longer than the fence, publish it now."""
        if self._clock.now_ms() - record.at_ms > FENCE_MS:
            self._roll_forward(record, slot_names(token, slot)[1], publish)
        return record.id

    def _roll_forward(self, record: Record, sent_name: str, publish: PublishAs) -> bool:
        """Publish the message of a record whose sender died (once: whoever
        creates its sent mark), unless a name of it is there (its sender died
        after publishing it); whether this call published it."""
        if not self._create(sent_name, b"") or self._is_there(record.id):
            return False
        publish(record.id, record.data, 0)
        return True

    def collect(self, listed: list[str], publish: PublishAs) -> list[str]:
        """Publish the messages of records left unsent past the fence, and
        remove the names of slots two windows old; return the names removed
        and the ids published (``gc()``)."""
        now, window_ms = self._clock.now_ms(), self._window_ms()
        slots: dict[tuple[str, int], set[bool]] = {}
        for name in listed:
            parsed = parse_name(name)
            if parsed is not None:
                slots.setdefault(parsed[:2], set()).add(parsed[2])
        done: list[str] = []
        for (token, slot), kinds in sorted(slots.items()):
            record_name, sent_name = slot_names(token, slot)
            if kinds == {True}:  # no sent mark: its sender may have died
                record = self._read(record_name)
                if record is not None and now - record.at_ms <= FENCE_MS:
                    continue  # a send under way
                if record is not None and self._roll_forward(record, sent_name, publish):
                    done.append(record.id)
            if now >= (slot + 2) * window_ms:
                for name in (sent_name, record_name):
                    with suppress(FileNotFoundError):
                        self._store.delete(name)
                        done.append(name)
        return done

    def _create(self, name: str, data: bytes) -> bool:
        """Create ``name`` exclusively (whole or not at all); whether this did."""
        return publish(
            self._store, self._durable, self._clock.next_id(), data, name, replace_new=False
        )

    def _read(self, name: str) -> Record | None:
        limit = self._config().max_message_size + HEADER_SLACK + 4096
        try:
            return Record.decode(self._store.read_limited(name, limit))
        except (FileNotFoundError, TooLarge):
            return None
