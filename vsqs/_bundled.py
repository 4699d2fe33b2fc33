"""Messages of bundles: what a receive hands out of a part, and how one
client settles them (docs/format.md, "Format 4: bundles").

A client that claimed a part holds it under one name whose set is exactly
the places of the messages it still holds (:class:`Part`). Every change is
one request's worth of the object protocol, exclusive with every other
client's: an ack of some of them renames the part to the set of the others
(of all: deletes it); an extend or a release of all of them renames it to
a new expiry, of some of them splits it (``Store.split``) into the moved
messages and the others, each under the next version. So the rename itself
proves that the receipt was current, as for a message alone, and every
message keeps its own state: what a holder acks is gone, what it releases
or lets lapse comes back with its own receive count.

A receipt of a bundled message is ``<its part's held name>#<place>``. A
:class:`vsqs.Message` follows its part's renames; a receipt string is
current until its holder settles any message of the part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from . import _forks
from . import _meter as meter
from . import _names as names
from ._bundle import members
from ._dead_letter import remove_records
from ._errors import InvalidReceipt, ReceiptExpired, storage_errors
from ._message import DeadLettered, Message, Owner, hold
from ._plans import Claim
from .stores._base import Store

#: Between a part's held name and the place of a message in its bundle.
PLACE_SEPARATOR = "#"


class Part:
    """A part of a bundle this client holds: its current name (``name``) and
    the messages of it not settled yet, by place; ``lock`` serialises this
    client's changes of it."""

    __slots__ = ("lock", "messages", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: dict[int, Message] = {}
        self.lock = _forks.lock()

    @property
    def parsed(self) -> names.Name:
        parsed = names.parse(self.name)
        assert parsed is not None and parsed.expiry_ms is not None
        return parsed

    def renamed(self, name: str, kept: Iterable[int]) -> None:
        """The part is now ``name`` and holds the messages at ``kept``; their
        receipts follow, the others leave it."""
        kept = set(kept)
        self.name = name
        for place in list(self.messages):
            if place in kept:
                self.messages[place].receipt = receipt_of(name, place)
                hold(self.messages[place]).issued = self.messages[place].receipt
            else:
                del self.messages[place]


def receipt_of(name: str, place: int) -> str:
    return f"{name}{PLACE_SEPARATOR}{place}"


def parse_receipt(receipt: str) -> tuple[names.Name, int] | None:
    """``(held name, place)`` of a bundled message's receipt; ``None`` if it is
    not one (:class:`InvalidReceipt` if it names a place its part lacks)."""
    name, sep, place = receipt.rpartition(PLACE_SEPARATOR)
    if not sep:
        return None
    parsed = names.parse_receipt(name)
    if not (place.isdigit() and place == str(int(place)) and names.is_bundle(parsed.id)):
        raise InvalidReceipt(f"not a receipt of this queue format: {receipt!r:.80}")
    if int(place) not in names.members_of(parsed.id):
        raise InvalidReceipt(f"{receipt!r:.80} names a message its part does not hold")
    return parsed, int(place)


def messages_of(queue: Owner, claim: Claim) -> list[Message]:
    """The messages a claim hands out: one per message of a part; the object
    whole (as one message) if it is no part, or one whose bytes are not a
    bundle it is part of."""
    name, count, origin = claim.name, claim.receive_count, claim.origin
    found = members(claim.id, claim.body) if names.is_bundle(claim.id) else None
    if found is None:
        return [Message(queue, claim.id, claim.body, name, count, origins=origin)]
    part = Part(name)
    out = []
    for member in found:
        message = Message(
            queue, member.id, member.data, receipt_of(name, member.place), count, origins=origin
        )
        hold(message).part = part
        part.messages[member.place] = message
        out.append(message)
    return out


def peeked(
    queue: Owner, object_id: str, data: bytes, count: int, origin: DeadLettered | None
) -> list[Message]:
    """The messages ``peek`` shows of a visible object: one per message of a
    part (without receipts), or the object whole."""
    found = members(object_id, data) if names.is_bundle(object_id) else None
    if found is None:
        return [Message(queue, object_id, data, None, count, dead_lettered=origin)]
    return [Message(queue, m.id, m.data, None, count, dead_lettered=origin) for m in found]


def part_of(message: Message) -> tuple[Part, int] | None:
    """The part that holds a received bundled message, and its place."""
    part = hold(message).part
    if part is None:
        return None
    assert isinstance(part, Part) and message.receipt is not None
    return part, int(message.receipt.rpartition(PLACE_SEPARATOR)[2])


def bare_part(receipt: str) -> tuple[Part, int] | None:
    """A bare receipt of a bundled message as a part of its own (the part
    its name holds), and the place; ``None`` for a receipt of a message alone."""
    found = parse_receipt(receipt)
    if found is None:
        return None
    parsed, place = found
    return Part(names.receipt_name(parsed)), place


class Parts:
    """Settles bundled messages this client holds, in ``store`` (of the queue
    ``owner``), on ``clock``; ``moved(old, new, expiry)`` and
    ``deleted(name)`` tell the client's receiver."""

    def __init__(
        self,
        store: Store,
        clock: names.MsClock,
        owner: Owner,
        moved: Callable[[str, str, int], None],
        deleted: Callable[[str], None],
    ) -> None:
        self._store = store
        self._clock = clock
        self._owner = owner
        self._moved = moved
        self._deleted = deleted

    @property
    def _url(self) -> str:
        return self._owner.url

    def ack(self, part: Part, places: Sequence[int]) -> list[int]:
        """Delete the messages at ``places`` of ``part``: the part goes if they
        are all it holds, else it is renamed to the others. Returns the places
        whose receipts were stale (nothing changed for them)."""

        def change(here: Part, gone: list[int]) -> None:
            parsed = here.parsed
            rest = [p for p in names.members_of(parsed.id) if p not in gone]
            new = _renamed(parsed, rest, parsed.expiry_ms or 0) if rest else ""
            if new:
                self._apply(f"deleting from {self._url}", self._store.rename, here.name, new)
            else:
                self._apply(f"deleting from {self._url}", self._delete_known, here.name)
            observer = meter.observer
            for place in gone:
                message = here.messages.get(place)
                if message is not None:
                    hold(message).done = True
                if observer is not meter.OFF:
                    observer.deleted(self._url, receipt_of(here.name, place), self._clock.now_ms)
            if new:
                self._moved(here.name, new, parsed.expiry_ms or 0)
            else:
                self._deleted(here.name)
                self._last_part_gone(
                    parsed.id, [here.messages[p] for p in gone if p in here.messages]
                )
            here.renamed(new or here.name, rest)

        with part.lock:
            return self._where_current(part, places, change)

    def move(
        self, part: Part, places: Sequence[int], expiry_ms: int, what: str, *, holds: bool
    ) -> tuple[list[Message], list[int]]:
        """Extend (``holds``) or release the messages at ``places`` of ``part``
        to ``expiry_ms``: a rename of the part if they are all it holds, else a
        split into them and the others. Returns the messages moved (their
        receipts follow) and the places whose receipts were stale."""
        out: list[Message] = []

        def change(here: Part, moving: list[int]) -> None:
            parsed = here.parsed
            lapsed = (parsed.expiry_ms or 0) <= self._clock.now_ms()
            if holds and parsed.group is not None and lapsed:
                raise ReceiptExpired(
                    f"cannot {what}: the visibility timeout of {here.name} ran out, and its "
                    "group may have moved on (docs/groups.md)"
                )
            rest = [p for p in names.members_of(parsed.id) if p not in moving]
            moved = _renamed(parsed, moving, expiry_ms)
            kept = _renamed(parsed, rest, parsed.expiry_ms or 0) if rest else ""
            if kept:
                self._apply(f"{what} in {self._url}", self._store.split, here.name, moved, kept)
            else:
                self._apply(f"{what} in {self._url}", self._store.rename, here.name, moved)
            self._moved(here.name, moved, expiry_ms)
            if kept:
                self._moved(here.name, kept, parsed.expiry_ms or 0)
            after = Part(moved)
            for place in moving:
                message = here.messages.pop(place, None)
                if message is None:
                    continue
                if holds:
                    after.messages[place] = message
                    hold(message).part = after
                    out.append(message)
                else:  # let go: its receipt stays the name it had, no longer current
                    hold(message).part = Part(here.name)
                    hold(message).done = True
            after.renamed(moved, moving)
            here.renamed(kept or here.name, rest)

        with part.lock:
            stale = self._where_current(part, places, change)
        return out, stale

    def _last_part_gone(self, part_id: str, acked: list[Message]) -> None:
        """A dead letter's origin records are its bundle's (one per part moved
        in): they all go with the ack of its last part (one listing of the
        bundle's names tells), as a message alone's go with its ack; a failed
        delete leaves them to ``gc()``."""
        if not any(hold(message).origin for message in acked):
            return  # not a dead letter: no records, no listing
        core = names.lineage(part_id)
        with storage_errors(f"listing {self._url}"):
            listed = list(self._store.list(prefix=core))
        parsed = [names.parse(n) for n in listed]
        if not any(p and p.state != names.NEW and names.lineage(p.id) == core for p in parsed):
            records = [
                n for n in listed if (of := names.origin_id(n)) and names.lineage(of) == core
            ]
            remove_records(self._store, tuple(records))

    def _delete_known(self, name: str) -> None:
        """Delete a name this client holds (no ``HEAD`` first: it made it)."""
        self._store.delete(name, known=True)

    @staticmethod
    def _apply(what: str, change: Callable[..., None], *args: str) -> None:
        """One change of the store: ``FileNotFoundError`` and ``FileExistsError``
        as they are (the name moved on), any other ``OSError`` as a
        :class:`~vsqs.StorageError` about ``what``."""
        try:
            change(*args)
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError:
            with storage_errors(what):
                raise

    def _where_current(
        self, part: Part, places: Sequence[int], change: Callable[[Part, list[int]], None]
    ) -> list[int]:
        """Run ``change(part, places)``; if the part's name is gone, on the
        names that hold those messages now in the state its receipts name (the
        same expiry and receive count: a change of the part's other messages
        by its holder, or a receive of some of them after its timeout ran out,
        renamed it; one listing of the bundle's names finds them). Returns the
        places whose receipts are stale. The caller holds the part's lock."""
        wanted = sorted(set(places))
        held = set(names.members_of(part.parsed.id))
        stale = [p for p in wanted if p not in held]
        wanted = [p for p in wanted if p in held]
        if not wanted:
            return stale
        try:
            change(part, wanted)
            return stale
        except (FileNotFoundError, FileExistsError):
            pass
        found = self._current(part, wanted)
        stale += [p for p in wanted if not any(p in ps for ps in found.values())]
        for name, these in found.items():
            here = Part(name)
            here.messages = {p: part.messages.pop(p) for p in these if p in part.messages}
            for message in here.messages.values():
                hold(message).part = here
            try:
                change(here, these)
            except (FileNotFoundError, FileExistsError):
                stale += these
        return sorted(stale)

    def _current(self, part: Part, places: list[int]) -> dict[str, list[int]]:
        """The names of the bundle that hold ``places`` in the state of the
        part's (gone) name, each with the places it holds."""
        parsed = part.parsed
        found: dict[str, list[int]] = {}
        with storage_errors(f"listing {self._url}"):
            listed = list(self._store.list(prefix=parsed.id[: names.ID_LEN]))
        for name in listed:
            now = names.parse(name)
            if not (
                now is not None
                and names.is_bundle(now.id)
                and now.expiry_ms == parsed.expiry_ms
                and now.receive_count == parsed.receive_count
                and now.version > parsed.version
            ):
                continue
            these = [p for p in names.members_of(now.id) if p in places]
            if these:
                found[name] = these
        return found

    def extend(self, bundled: tuple[Part, int], item: Message | str, expiry_ms: int) -> Message:
        """Extend one bundled message to ``expiry_ms``; the message (a new one
        for a bare receipt, whose object is read before the rename: the
        rename alone decides the outcome, as for a message alone)."""
        part, place = bundled
        if isinstance(item, Message):
            moved, stale = self.move(part, [place], expiry_ms, "extend", holds=True)
            if stale:
                raise ReceiptExpired(f"cannot extend: {self._stale(part.name)}")
            return moved[0] if moved else item
        data = self._read_current(part, place)
        found = {m.place: m for m in members(part.parsed.id, data) or ()}
        count = part.parsed.receive_count
        member = found.get(place)
        message_id, body = (member.id, member.data) if member else (part.parsed.id, data)
        message = Message(self._owner, message_id, body, receipt_of(part.name, place), count)
        hold(message).part = part
        part.messages[place] = message
        moved, stale = self.move(part, [place], expiry_ms, "extend", holds=True)
        if stale:
            raise ReceiptExpired(f"cannot extend: {self._stale(part.name)}")
        return message

    def _read_current(self, part: Part, place: int) -> bytes:
        """The bytes of the part that holds the message at ``place`` now in the
        state its receipt names (renamed to it if the receipt's name is gone)."""
        for _ in range(2):
            with storage_errors(f"reading from {self._url}"):
                try:
                    return self._store.read_limited(part.name, names.BUNDLE_READ_LIMIT)
                except FileNotFoundError:
                    pass
            found = list(self._current(part, [place]))
            if not found:
                break
            part.name = found[0]
        raise ReceiptExpired(f"cannot extend: {self._stale(part.name)}")

    def _stale(self, name: str) -> str:
        return stale_receipt(name, self._url)


def stale_receipt(receipt: str, url: str) -> str:
    """What a receipt that changed nothing in the queue at ``url`` is."""
    return (
        f"{receipt} is not a current receipt of {url} "
        "(its message was deleted or received again since, or it is another queue's)"
    )


def _renamed(parsed: names.Name, places: Sequence[int], expiry_ms: int) -> str:
    """The next name of the part ``parsed`` holding ``places``, until ``expiry_ms``."""
    mask = sum(1 << p for p in places)
    part_id = names.bundle_id(parsed.id, mask, names.group_of(parsed.id))
    return names.invisible_name(part_id, expiry_ms, parsed.receive_count, parsed.version + 1)
