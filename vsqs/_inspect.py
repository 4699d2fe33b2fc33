"""Reading a queue without receiving from it: one listing classifier for
``peek``, ``stats``, ``purge``, ``gc`` and the Spark planners (origin records
of dead letters included), and the rules for how long a ``.new`` is a send
under way."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field

from . import _names as names
from ._config import ENV_NEW_GRACE, env_seconds
from ._message import Progress
from .stores._base import Store

log = logging.getLogger("vsqs")

#: A ``.new`` leftover older than this (by its id) is a crashed writer's.
DEFAULT_NEW_GRACE = 3600.0


#: A ``.new`` younger than this (by its id) may still be published under its
#: id, so a tail of the queue (the Spark stream) waits for it; an older one
#: holds nothing back, whether its writer died or not.
STAGING_HOLD = 60.0
#: Writers publish what they staged longer ago than this under a fresh id
#: (:func:`vsqs._publish.commit`): a tail may have stopped waiting for it. The
#: difference to :data:`STAGING_HOLD` is the time left for the rename and for
#: the skew between the writer's clock and the reader's.
RESTAMP_AFTER = 30.0


def default_new_grace() -> float:
    """Seconds after which a ``.new`` is a crashed writer's: ``VSQS_NEW_GRACE``, or one hour."""
    return env_seconds(ENV_NEW_GRACE, DEFAULT_NEW_GRACE)


def staging_hold_ms() -> int:
    """How long a ``.new`` holds a tail back: :data:`STAGING_HOLD`, or the
    garbage-collection grace if that is shorter (gc removes it then)."""
    return int(min(STAGING_HOLD, default_new_grace()) * 1000)


def stale_new_before(now_ms: int, grace_ms: int) -> str:
    """Names below this (``.new`` names included) were issued more than
    ``grace_ms`` before ``now_ms``: a ``.new`` among them is a crashed writer's."""
    return f"{now_ms - grace_ms:013d}"


@dataclass(frozen=True, slots=True)
class Entry:
    """A listed name of the format, and its state at the listing's time.

    ``state`` is :data:`names.NEW` for a send under way (or a leftover), else
    the visibility of :func:`names.visibility` (ready, in flight, delayed).
    """

    name: str
    parsed: names.Name
    state: str

    @property
    def is_message(self) -> bool:
        """A published message (every state but a send under way)."""
        return self.state != names.NEW


def classify(name: str, now_ms: int) -> Entry | None:
    """The entry of one listed name at ``now_ms``; ``None`` for a foreign name."""
    parsed = names.parse(name)
    if parsed is None:
        return None
    state = names.NEW if parsed.state == names.NEW else names.visibility(parsed, now_ms)
    return Entry(name, parsed, state)


def entries(store: Store, now_ms: int, *, settle: bool = False) -> Iterator[Entry]:
    """The format's names in one listing of ``store`` (foreign names skipped), classified."""
    for name in store.list(settle=settle):
        entry = classify(name, now_ms)
        if entry is not None:
            yield entry


def scan(store: Store, now_ms: int) -> tuple[list[Entry], dict[str, names.Records]]:
    """The format's names of one listing, classified, and the origin records
    in it, by the id of their message."""
    found: list[Entry] = []
    origins: dict[str, names.Records] = {}
    for name in store.list():
        entry = classify(name, now_ms)
        if entry is not None:
            found.append(entry)
        else:
            names.note_origin(origins, name)
    return found, origins


def stale_new(store: Store, now_ms: int, grace_ms: int) -> list[str]:
    """The ``.new`` names of crashed writers in one listing."""
    cutoff = stale_new_before(now_ms, grace_ms)
    return [n for n in store.list() if n.endswith(names.NEW_SUFFIX) and n < cutoff]


def collect_stale_new(
    store: Store, candidates: Iterable[str], where: str, progress: Progress | None = None
) -> list[str]:
    """Remove the given ``.new`` leftovers (foreign names are never touched);
    return those this call removed."""
    removed: list[str] = []
    candidates = list(candidates)
    for done, name in enumerate(candidates, 1):
        parsed = names.parse(name)
        if parsed is not None and parsed.state == names.NEW:
            with suppress(FileNotFoundError):
                store.delete(name, known=True)
                removed.append(name)
        if progress is not None:
            progress(done, len(candidates))
    if removed:
        log.info("%s: removed %d stale .new leftovers of crashed writers", where, len(removed))
    return removed


@dataclass
class Tally:
    """The counts of :class:`vsqs.QueueStats`, gathered from one listing (ms times)."""

    now_ms: int
    ready: int = 0
    in_flight: int = 0
    delayed: int = 0
    writing: int = 0
    oldest_sent_ms: int | None = None
    next_visible_ms: int | None = None
    in_flight_expiry_ms: int | None = None
    #: The tokens of the groups with a message in flight.
    held_groups: set[str] = field(default_factory=set)

    def add(self, entry: Entry) -> None:
        """Count the messages of one name (a part of a bundle holds several)."""
        state, parsed = entry.state, entry.parsed
        n = names.message_count(parsed.id)
        if state == names.NEW:
            self.writing += n
            return
        if state == names.READY:
            self.ready += n
            sent = names.id_ms(parsed.id)
            self.oldest_sent_ms = _earliest(self.oldest_sent_ms, sent)
            return
        expiry = parsed.expiry_ms
        assert expiry is not None
        self.next_visible_ms = _earliest(self.next_visible_ms, expiry)
        if state == names.IN_FLIGHT:
            self.in_flight += n
            self.in_flight_expiry_ms = _earliest(self.in_flight_expiry_ms, expiry)
            if parsed.group is not None:
                self.held_groups.add(parsed.group)
        else:
            self.delayed += n

    def seconds_ago(self, ms: int | None) -> float | None:
        return None if ms is None else max(0.0, (self.now_ms - ms) / 1000)

    def seconds_until(self, ms: int | None) -> float | None:
        return None if ms is None else (ms - self.now_ms) / 1000


def _earliest(current: int | None, ms: int) -> int:
    return ms if current is None else min(current, ms)


def settled(store: Store, now_ms: int) -> Iterator[Entry]:
    """The entries of one settled listing, which repairs nothing, with each
    message once: a move under way or abandoned at the name it leaves, and a
    message listed under two names (a move that finished while the listing
    ran, whose source one page showed and whose target a later page did, or
    a directory listing did) under the first. A queue holds one copy of a
    message per id, so an id is a message."""
    seen: set[str] = set()
    last = ""  # where keys are listed in order, those of one id are adjacent
    places: dict[str, set[int]] = {}  # the messages of parts counted, by bundle
    for entry in entries(store, now_ms, settle=True):
        if entry.is_message:
            message_id = entry.parsed.id
            if message_id == last or message_id in seen:
                continue
            if names.is_bundle(message_id):  # a split's source on one page, targets on the next
                counted = places.setdefault(names.lineage(message_id), set())
                these = set(names.members_of(message_id))
                if counted & these:
                    continue
                counted |= these
            if store.lists_in_order:
                last = message_id
            else:
                seen.add(message_id)
        yield entry


def tally(store: Store, now_ms: int) -> Tally:
    """Counts by state from one settled listing (:func:`settled`): each
    message once, and nothing repaired."""
    counts = Tally(now_ms)
    for entry in settled(store, now_ms):
        counts.add(entry)
    return counts


def message_count(store: Store) -> int:
    """Messages in every state (sends under way not counted), each once, from
    one settled listing that repairs nothing (:func:`settled`)."""
    return sum(names.message_count(e.parsed.id) for e in settled(store, 0) if e.is_message)
