"""Deduplication records: one message per deduplication id within the queue's window.

A send with a deduplication id first creates the id's record,
``<token>.dedup`` (``<token>``: 32 hex of the id's SHA-256), by exclusive
create, naming the message id it is about to publish and when (ms, the
sender's clock; on object stores the store's as it measured it). A send
that finds the record younger than ``dedup_window`` creates nothing and
returns the recorded id (also when that message was received and deleted
since). One that finds it older replaces it: it deletes the record it read
and creates its own (docs/format.md, "Deduplication records").

Guaranteed: of sends of one id racing while its record is young, exactly one
creates the record and publishes. Not guaranteed (docs/queues.md, "Known
limits"): two sends racing at the very moment a window ends may both
replace the old record (each deletes what it judged expired), and a sender
that dies between its record and its message leaves the id recorded for a
message that never came (its retries return that id until the window ends).
"""

from __future__ import annotations

import json
from contextlib import suppress

from . import _names as names
from ._envelope import dedup_token
from ._errors import StorageError
from ._publish import publish
from .stores._base import Store, TooLarge

#: Suffix of a deduplication record's name.
DEDUP_SUFFIX = ".dedup"
#: A record is a few hundred bytes; more under its name is no record of ours.
RECORD_MAX = 4096
#: Rounds of create / read / replace a send tries before it gives up.
ATTEMPTS = 8


def record_name(dedup_id: str) -> str:
    return dedup_token(dedup_id) + DEDUP_SUFFIX


def is_record(name: str) -> bool:
    """Whether ``name`` is a deduplication record's name."""
    token = name[: -len(DEDUP_SUFFIX)]
    return (
        name.endswith(DEDUP_SUFFIX)
        and len(token) == 32
        and all(c in "0123456789abcdef" for c in token)
    )


def read_record(data: bytes) -> tuple[str, int] | None:
    """``(message id, first send ms)`` of a record; ``None`` if it is not one."""
    try:
        doc = json.loads(data)
        message_id, at_ms = doc["id"], doc["at_ms"]
    except (ValueError, TypeError, KeyError):
        return None
    if not (isinstance(message_id, str) and names.is_id(message_id) and type(at_ms) is int):
        return None
    return message_id, at_ms


class Deduplicator:
    """The deduplication records of one queue, for one client."""

    def __init__(self, store: Store, clock: names.MsClock, durable: bool) -> None:
        self._store = store
        self._clock = clock
        self._durable = durable

    def first(self, dedup_id: str, message_id: str, window_ms: int) -> str | None:
        """Record ``message_id`` as the message of ``dedup_id``, unless another
        is recorded within the window: then return that one's id (the send
        creates nothing). ``None``: recorded; publish ``message_id`` now."""
        store, name = self._store, record_name(dedup_id)
        for _ in range(ATTEMPTS):
            now = self._clock.now_ms()
            doc = {"id": message_id, "at_ms": now, "dedup_id": dedup_id}
            data = json.dumps(doc, sort_keys=True).encode()
            if publish(store, self._durable, self._clock.next_id(), data, name, replace_new=False):
                return None
            try:
                found = store.read_limited(name, RECORD_MAX)
            except FileNotFoundError:
                continue  # replaced or collected meanwhile: create it again
            except TooLarge:
                found = b""
            record = read_record(found)
            if record is not None and now < record[1] + window_ms:
                return record[0]
            # Expired (or no record of ours under its name): replace it.
            with suppress(FileNotFoundError):
                store.delete(name)
        raise StorageError(f"could not record deduplication id {dedup_id!r:.80} in {store.url}")

    def expired(self, name: str, now_ms: int, window_ms: int) -> bool:
        """Whether the record ``name`` may be collected: older than the window (one read)."""
        try:
            record = read_record(self._store.read_limited(name, RECORD_MAX))
        except (FileNotFoundError, TooLarge):
            return False
        return record is not None and record[1] + window_ms <= now_ms
