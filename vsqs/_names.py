"""The on-disk name grammar (format version 3): pure functions, no I/O.

A message is one object whose name is its state (see ``docs/format.md``)::

    <id>                              ready: visible, never received
    <id>.<expiry>.<count>.<version>   invisible until unix-ms <expiry>; received
                                      <count> times (0: a delayed send); visible
                                      again once expired
    <id>.new                          being written by a producer; invisible
    <id>.<record id>.origin           where a dead-lettered <id> came from (not a
                                      message); <record id> is fresh per dead-lettering,
                                      so the name never recurs (older records: <id>.origin)

    <id> = <ms:13 digits>-<seq:4 hex>-<nonce:16 hex>[_<tag>]
    <tag> = a                 the object is an envelope (attributes), no group
          | g<16 hex>         an envelope of a message of the group with this token
          | b<first><set>[g<16 hex>]
                              a part of a bundle (format 4): the messages of the
                              bundle whose bits are set in <set> (hex, no leading
                              zeros), the first of them at <first> (2 hex: parts
                              of one bundle sort in the order of their first
                              messages), of one group if a token follows

Names are fixed width up to the first dot, so a plain sort of names is FIFO
order. ``<version>`` counts a message's names: every rename (and every move
into another queue) gives it a name with the next version, so no name of a
message ever recurs. Anything else in a queue (including names that merely
look similar) is foreign: vsqs never reads, renames or deletes it, except the
config object.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import NamedTuple

from ._errors import InvalidArgument, InvalidQueueName, InvalidReceipt

FORMAT_VERSION = 4
#: Formats this vsqs opens: format 2 has no tags (no group, attributes or
#: dedup records), format 3 no bundles; such a queue is used as it is,
#: without those features.
READABLE_FORMATS = (2, 3, 4)
#: The first format with bundles (docs/format.md, "Format 4: bundles").
BUNDLES_FORMAT = 4
CONFIG_NAME = "vsqs.json"
NEW_SUFFIX = ".new"
#: Suffix of a dead letter's origin record ``<id>.<record id>.origin`` (or
#: ``<id>.origin``, as written before record ids; docs/format.md, "Dead
#: letters"): a name format-2 readers without it take for foreign.
ORIGIN_SUFFIX = ".origin"

#: The length of an id's untagged part, which fixes its FIFO position: a
#: plain sort of names is FIFO order up to here.
ID_LEN = 35  # 13 + 1 + 4 + 1 + 16
NONCE_LEN = 16
#: The most messages one bundle holds: its set is at most 32 hex digits.
MAX_BUNDLE = 128
#: The most bytes of messages' objects one bundle holds (vsqs._bundle).
BUNDLE_BYTES = 1 << 20
#: The most bytes a receiver reads of a part: its messages and their header.
BUNDLE_READ_LIMIT = BUNDLE_BYTES + (64 << 10)
_SET_LEN = MAX_BUNDLE // 4
#: The longest id (and so ready name): a bundle of a group with a full set.
MAX_ID_LEN = ID_LEN + 4 + _SET_LEN + 17
TAG_SEPARATOR = "_"
#: The tag of an envelope without a group (docs/format.md, "Envelopes").
ENVELOPE_TAG = "a"
GROUP_TAG = "g"
#: The first letter of a bundle's tag (docs/format.md, "Format 4: bundles").
BUNDLE_TAG = "b"
_ID = (
    r"[0-9]{13}-[0-9a-f]{4}-[0-9a-f]{16}"
    rf"(?:_(?:a|g[0-9a-f]{{16}}|b[0-7][0-9a-f][1-9a-f][0-9a-f]{{0,{_SET_LEN - 1}}}"
    r"(?:g[0-9a-f]{16})?))?"
)
_ID_RE = re.compile(_ID)
_NUMBER = r"(0|[1-9][0-9]{0,8})"
_INVISIBLE_RE = re.compile(rf"({_ID})\.([0-9]{{13}})\.{_NUMBER}\.([1-9][0-9]{{0,8}})")
_QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")

_SEQ_LIMIT = 0x10000
MAX_EXPIRY_MS = 10**13 - 1
MAX_COUNT = 10**9 - 1
MAX_VERSION = 10**9 - 1
#: The last version is kept for the renames that let go of a held message (a
#: release, a give back): a claim or an extend never takes it, so a holder
#: can always make its message visible again (docs/format.md, "Names").
LAST_HELD_VERSION = MAX_VERSION - 1

READY = "ready"
INVISIBLE = "invisible"
NEW = "new"
#: What a message is at a given time (see :func:`visibility`).
IN_FLIGHT = "in_flight"
DELAYED = "delayed"


class Name(NamedTuple):
    """A parsed message name. ``expiry_ms`` is ``None`` for ready and new names,
    whose version is 0."""

    id: str
    state: str
    expiry_ms: int | None = None
    receive_count: int = 0
    version: int = 0

    @property
    def group(self) -> str | None:
        """The token of the message's group (:func:`group_of`)."""
        return group_of(self.id)


def id_of(name: str) -> str:
    """The id (tag included) a name of the grammar starts with: up to its first dot."""
    end = name.find(".")
    return name if end < 0 else name[:end]


def group_of(message_id: str) -> str | None:
    """The group token in an id's tag (``g`` and 16 hex), ``None`` without one."""
    if len(message_id) > ID_LEN + 17 and message_id[-17] == GROUP_TAG:
        return message_id[-17:]
    return None


def is_enveloped(message_id: str) -> bool:
    """Whether the message's object is an envelope (its id has a tag, not a bundle's)."""
    return len(message_id) > ID_LEN and message_id[ID_LEN + 1] != BUNDLE_TAG


def is_bundle(message_id: str) -> bool:
    """Whether the object is (a part of) a bundle: its tag starts with ``b``."""
    return len(message_id) > ID_LEN and message_id[ID_LEN + 1] == BUNDLE_TAG


def bundle_set(message_id: str) -> int:
    """The set of a bundle's id: bit ``i`` is set if its message ``i`` is here."""
    tag = message_id[ID_LEN + 4 :]
    end = tag.find(GROUP_TAG)
    return int(tag if end < 0 else tag[:end], 16)


def bundle_id(core: str, members: int, token: str | None) -> str:
    """The id of the part of a bundle (whose first message has the untagged id
    ``core``) that holds the messages of ``members``, of the group ``token``
    (``g`` and 16 hex, as :func:`group_of` gives it)."""
    if not 0 < members < 1 << MAX_BUNDLE:
        raise InvalidArgument(f"a bundle holds 1 to {MAX_BUNDLE} messages")
    first = (members & -members).bit_length() - 1
    return f"{core[:ID_LEN]}{TAG_SEPARATOR}{BUNDLE_TAG}{first:02x}{members:x}{token or ''}"


def members_of(message_id: str) -> list[int]:
    """The places in its bundle of the messages an id holds, in order (``[0]``
    for a message's own object)."""
    if not is_bundle(message_id):
        return [0]
    members = bundle_set(message_id)
    return [i for i in range(members.bit_length()) if members >> i & 1]


def lineage(message_id: str) -> str:
    """What the names of one message (or, for a part, of every part of its
    bundle) share: the id, or a part's 35-character core."""
    return message_id[:ID_LEN] if is_bundle(message_id) else message_id


def message_count(message_id: str) -> int:
    """How many messages the object of ``message_id`` holds (a name's count of them)."""
    return bundle_set(message_id).bit_count() if is_bundle(message_id) else 1


def tagged(message_id: str, tag: str | None) -> str:
    """``message_id`` (untagged, or tagged: its tag is replaced) with ``tag``."""
    core = message_id[:ID_LEN]
    return core if tag is None else f"{core}{TAG_SEPARATOR}{tag}"


def tag_of(message_id: str) -> str | None:
    """The tag of an id, ``None`` for an untagged one."""
    return message_id[ID_LEN + 1 :] if len(message_id) > ID_LEN else None


def parse(name: str) -> Name | None:
    """Parse a name of the grammar, or return ``None`` for anything foreign."""
    n = len(name)
    if n <= MAX_ID_LEN and "." not in name:
        return Name(name, READY) if n >= ID_LEN and _ID_RE.fullmatch(name) else None
    if name.endswith(NEW_SUFFIX) and name.count(".") == 1:
        message_id = name[: -len(NEW_SUFFIX)]
        return Name(message_id, NEW) if _ID_RE.fullmatch(message_id) else None
    m = _INVISIBLE_RE.fullmatch(name)
    if m is None:
        return None
    return Name(m.group(1), INVISIBLE, int(m.group(2)), int(m.group(3)), int(m.group(4)))


def is_receipt(name: object) -> bool:
    """Fast check: an invisible name received at least once."""
    if not isinstance(name, str):
        return False
    m = _INVISIBLE_RE.fullmatch(name)
    return m is not None and m.group(3) != "0"


def is_id(name: str) -> bool:
    return _ID_RE.fullmatch(name) is not None


def parse_receipt(receipt: object) -> Name:
    """Validate an untrusted receipt: an invisible name that was received at least once.

    Raises :class:`InvalidReceipt` for anything else (wrong type, separators,
    ``..``, ready or new names), before it can reach storage.
    """
    if not isinstance(receipt, str):
        raise InvalidReceipt(f"a receipt is a str, not {type(receipt).__name__}")
    parsed = parse(receipt)
    if parsed is None or parsed.state != INVISIBLE or parsed.receive_count == 0:
        raise InvalidReceipt(f"not a receipt of this queue format: {receipt!r:.80}")
    return parsed


def new_name(message_id: str) -> str:
    return message_id + NEW_SUFFIX


def origin_name(message_id: str, record_id: str) -> str:
    """The name of the origin record ``record_id`` (a fresh id, drawn for this
    record alone: the name never recurs) of a dead letter ``message_id``."""
    return f"{message_id}.{record_id}{ORIGIN_SUFFIX}"


def origin_record(name: str) -> tuple[str, str] | None:
    """``(message id, record id)`` of an origin record's name, ``None`` for any
    other name. A record named ``<id>.origin`` (written before record ids) has
    the record id ``""``, older than any other."""
    message_id = id_of(name)
    if not (name.endswith(ORIGIN_SUFFIX) and is_id(message_id)):
        return None
    between = name[len(message_id) : -len(ORIGIN_SUFFIX)]
    if not between:
        return message_id, ""
    if between[0] == "." and is_id(between[1:]):
        return message_id, between[1:]
    return None


def origin_id(name: str) -> str | None:
    """The message id whose origin record ``name`` is, ``None`` for any other name."""
    record = origin_record(name)
    return None if record is None else record[0]


#: The names of one message's origin records.
Records = tuple[str, ...]


def note_origin(origins: dict[str, Records], name: str) -> None:
    """Add ``name`` to ``origins`` (message id: its records) if it is an origin record's name."""
    message_id = origin_id(name)
    if message_id is not None:
        origins[message_id] = (*origins.get(message_id, ()), name)


def invisible_name(message_id: str, expiry_ms: int, count: int, version: int) -> str:
    """The name of a message invisible until ``expiry_ms`` after ``count`` receives."""
    if not 1 <= version <= MAX_VERSION:
        raise InvalidArgument(f"message {message_id} was renamed more than {MAX_VERSION} times")
    expiry = min(max(expiry_ms, 0), MAX_EXPIRY_MS)
    return f"{message_id}.{expiry:013d}.{min(count, MAX_COUNT)}.{version}"


def can_hold(name: Name) -> bool:
    """Whether ``name`` may be renamed to a held name (claimed, or extended)
    and still leave its holder a version to release it to."""
    return name.version < LAST_HELD_VERSION


def next_name(name: Name, expiry_ms: int, count: int) -> str:
    """The name ``name`` is renamed to: invisible until ``expiry_ms``, received
    ``count`` times, with the next version (so it never was a name of the message)."""
    return invisible_name(name.id, expiry_ms, count, name.version + 1)


def sibling_id(message_id: str) -> str:
    """An id with ``message_id``'s ms and seq (so its FIFO position), its tag,
    and a fresh random nonce: a name of another lineage, for a second copy of
    a message that must never share a name with the first."""
    core = f"{message_id[: ID_LEN - NONCE_LEN]}{secrets.token_hex(NONCE_LEN // 2)}"
    return tagged(core, tag_of(message_id))


def id_ms(message_id: str) -> int:
    """The unix-ms timestamp at which the message's id was issued."""
    return int(message_id[:13])


def is_visible(name: Name, now_ms: int) -> bool:
    return name.state == READY or (name.state == INVISIBLE and name.expiry_ms <= now_ms)  # type: ignore[operator]


def published_name(message_id: str, delayed_until: int | None) -> str:
    """A sent message's first name: its id, or invisible until ``delayed_until`` (ms)."""
    return message_id if delayed_until is None else invisible_name(message_id, delayed_until, 0, 1)


def visibility(name: Name, now_ms: int) -> str:
    """A message name at ``now_ms``: :data:`READY` (visible), :data:`IN_FLIGHT`
    (received, its visibility timeout running) or :data:`DELAYED` (a delayed
    send not yet due). Not for ``.new`` names."""
    if is_visible(name, now_ms):
        return READY
    return IN_FLIGHT if name.receive_count else DELAYED


def validate_queue_name(name: object) -> str:
    """A queue name is one path component: letters, digits, ``_ . -``; no ``..``."""
    if not isinstance(name, str):
        raise InvalidQueueName(f"a queue name is a str, not {type(name).__name__}")
    if not _QUEUE_NAME_RE.fullmatch(name) or ".." in name or name == CONFIG_NAME:
        raise InvalidQueueName(
            f"invalid queue name {name!r:.80}: use 1-128 letters, digits, '_', '.', '-', "
            "starting with a letter or digit, without '..'"
        )
    return name


class IdGenerator:
    """Issues message ids that sort in issue order within a process and never collide.

    Ids take the wall clock in ms; when it stands still or steps back, the last
    ms is reused with the next sequence number (and moves one ms forward when
    65 536 ids were issued in one ms), so a process's ids strictly increase.
    The 64-bit random nonce is drawn per process (again after ``fork``), so
    ids of different processes or hosts do not collide.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._nonce = secrets.token_hex(8)
        self._last_ms = -1
        self._seq = 0

    def next_id(self, now_ms: int) -> str:
        if not 0 <= now_ms <= MAX_EXPIRY_MS:  # the id would not be a name of the format
            raise InvalidArgument(
                f"the clock reads {now_ms} ms since 1970; ids need 0..{MAX_EXPIRY_MS}"
            )
        with self._lock:
            if now_ms > self._last_ms:
                self._last_ms, self._seq = now_ms, 0
            else:
                self._seq += 1
                if self._seq == _SEQ_LIMIT:
                    self._last_ms, self._seq = self._last_ms + 1, 0
            return f"{self._last_ms:013d}-{self._seq:04x}-{self._nonce}"


ids = IdGenerator()
_by_clock: weakref.WeakKeyDictionary[Callable[[], float], dict[Hashable, IdGenerator]] = (
    weakref.WeakKeyDictionary()
)
_host: dict[Hashable, IdGenerator] = {None: ids}


def _reset_after_fork() -> None:
    """A forked child draws fresh nonces in every generator: it is another sender."""
    for generators in [_host, *_by_clock.values()]:
        for generator in generators.values():
            generator._reset()


os.register_at_fork(after_in_child=_reset_after_fork)


def id_generator(clock: Callable[[], float], frame: Hashable = None) -> IdGenerator:
    """The process's generator for the wall clock; one per injected (test) clock.

    Every client of one clock shares a generator, so one thread's sends are in
    order whichever ``Queue`` object they go through; ``frame`` keeps apart
    the clients of one clock that write ids on other clocks (object stores,
    each on its own clock, ``None`` for the hosts' clocks), as their ms differ.
    """
    try:
        found = _host if clock is time.time else _by_clock.setdefault(clock, {})
    except TypeError:  # not weak-referenceable
        return IdGenerator()
    return found.setdefault(frame, IdGenerator())


def _no_offset() -> int:
    return 0


class MsClock:
    """A clock read as the format needs it: whole ms for ids and expiries, and
    the elapsed time of listings (monotonic, unless a test injected a clock).

    ``offset`` gives the ms this client adds to its clock to read the time in
    which names are written and judged (the store's clock on object stores,
    measured; 0 on a directory, whose names are on the hosts' clocks), and
    ``frame`` names that time (see :func:`id_generator`).
    :meth:`local_ms` turns such a time back into this client's clock, for
    what it shows its caller.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        offset: Callable[[], int] = _no_offset,
        frame: Hashable = None,
    ) -> None:
        self.clock = clock
        self.elapsed = time.monotonic if clock is time.time else clock
        self.offset = offset
        self._ids = id_generator(clock, frame)

    def now_ms(self) -> int:
        """The clock in whole ms, rounded down: what has surely passed."""
        offset = self.offset
        if offset is _no_offset:  # a directory's: no call
            return int(self.clock() * 1000)
        measured = offset()  # first: a measure may take a request
        return int(self.clock() * 1000) + measured

    def expiry_ms(self, after_ms: int) -> int:
        """``after_ms`` from now, rounded up: a holder never gets less than asked.

        Zero means now, rounded down: a release is visible at once.
        """
        if after_ms == 0:
            return self.now_ms()
        offset = self.offset
        measured = 0 if offset is _no_offset else offset()
        return math.ceil(self.clock() * 1000) + measured + after_ms

    def local_ms(self, ms: int) -> int:
        """A time of a name (ms) on this client's clock."""
        return ms - self.offset()

    def next_id(self) -> str:
        """A fresh message id, ordered after this process's earlier ones."""
        return self._ids.next_id(self.now_ms())


def receipt_name(name: Name) -> str:
    """The name a parsed receipt stands for (an in-flight name, spelled as the format spells it)."""
    return invisible_name(name.id, name.expiry_ms or 0, name.receive_count, name.version)
