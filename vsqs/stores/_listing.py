"""What a listing of an object store shows: one name per message, settled.

A listing groups each id's keys (adjacent, since keys are listed in order)
and settles them (docs/protocol.md, "Listing"): a marked source and its
targets (two for a split) are hidden while a move is under way, a move
whose client went away is finished, spent markers and abandoned probes and
batch markers are collected, and the names of a batch being sent are
hidden until it is whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from .. import _names as names
from .._errors import UnsupportedStore
from ._base import exactly
from ._moves import MOVED_SUFFIX, Names, ObjectMoves, Targets
from ._probe import PROBE_PREFIX

#: Suffix of a batch marker ``<floor id>.sending``: while it is younger than
#: FINISH_AFTER, listings hide every name of its sender (the floor id's nonce)
#: whose id is above the floor: a batch written side by side is shown once it
#: is whole.
SENDING_SUFFIX = ".sending"

#: One id's objects: ``(name, modified)``.
Group = list[tuple[str, float | None]]


class Move(NamedTuple):
    """What a listing settled of one marked source."""

    source: str
    #: The targets its marker names (none for a delete), to hide; ``None`` if unread.
    targets: Targets | None = None
    #: The targets this listing finished the move to, shown instead.
    finished: Targets = ()
    #: Whether its marker was spent since the listing (its source is gone).
    gone: bool = False


def _marked_sources(group: Group) -> dict[str, float | None]:
    """The sources that a marker of the group names, with the marker's age."""
    marked: dict[str, float | None] = {}
    for name, modified in group:
        if name.endswith(MOVED_SUFFIX) and names.parse(name[: -len(MOVED_SUFFIX)]):
            marked[name[: -len(MOVED_SUFFIX)]] = modified
    return marked


def _sending_floor(name: str) -> str | None:
    """The floor id of a batch marker, ``None`` for other names."""
    floor = name[: -len(SENDING_SUFFIX)]
    if name.endswith(SENDING_SUFFIX) and names.is_id(floor):
        return floor
    return None


def _unsent(shown: Names, floors: dict[str, str]) -> Names:
    """The names that no batch marker of their sender hides.

    ``floors`` maps a sender's nonce to the *lowest* floor of its batch
    markers in the listing: the batches one client sends at once (threads of
    one :class:`vsqs.Queue`) each have a marker, and each draws its ids above
    its own floor, so an id is hidden if it is above any of its sender's
    floors, which is exactly when it is above the lowest.
    """
    if not floors:
        return shown
    kept = []
    for name in shown:
        message_id = name[: names.ID_LEN]
        floor = floors.get(message_id[-names.NONCE_LEN :])
        if floor is None or message_id < floor:
            kept.append(name)
    return kept


class ObjectListing(ObjectMoves):
    """Listings of one queue; the base of :class:`~vsqs.stores._object.ObjectStore`.

    Listing is in key order (so FIFO comes from the listing itself) and a
    listing may stop early: ``list()`` is lazy, page by page.
    """

    # --------------------------------------------------------------- names
    def list(self, *, prefix: str = "", settle: bool = False) -> Iterator[str]:
        """Names of messages, in key order, without hidden sources and markers.

        Finishes moves whose client went away and collects leftovers. With
        ``settle`` (for counting), every message is listed once, under the
        name it leaves if a move of it is under way or abandoned, and the
        listing repairs nothing: it only reads (and sends this client's own
        held-back deletions); ``gc()`` and receivers repair. See :meth:`_settle`.
        """
        self._ages.check()
        if self._pending():
            self._send_deletions()
        moving: set[str] = set()
        self.moving = moving  # filled as the listing goes: it may stop early
        group: Group = []
        group_id = ""
        floors: dict[str, str] = {}  # nonce -> lowest floor id of its batches being sent
        previous = ""
        aged_names: set[str] = set()  # markers, batch markers and probes listed
        for name, modified in self.io.listing(prefix):
            if self._observe(name, modified, previous):
                aged_names.add(name)
            previous = name
            floor = _sending_floor(name)
            if floor is not None or name.startswith(PROBE_PREFIX):
                if settle:  # counts every name, collects nothing
                    continue
                if self._finishable(name, modified):  # its client was killed
                    self._spend(name, repaired=True)
                elif floor is not None:  # keys ascend: the first is the lowest
                    floors.setdefault(floor[-names.NONCE_LEN :], floor)
                continue
            if name[: names.ID_LEN] != group_id:
                yield from _unsent(self._settle(group, settle, moving), floors)
                group, group_id = [], name[: names.ID_LEN]
            group.append((name, modified))
        yield from _unsent(self._settle(group, settle, moving), floors)
        if not prefix:  # the whole queue: sightings of names gone since are forgotten
            self._ages.keep_sightings(aged_names)

    def _observe(self, name: str, modified: float | None, previous: str) -> bool:
        """Check that a listing shows ``name`` after ``previous``, and tell the
        store clock what it shows of it (and the ``Date`` of the page's
        response); whether its age may be asked."""
        if name < previous:  # FIFO and the grouping of a message's keys rest on key order
            raise UnsupportedStore(
                f"{self.url}: the store lists keys out of order ({previous} before {name}); "
                "vsqs needs listings in key order (S3 Express directory buckets do not)"
            )
        self._ages.dated(self.io.last_date)
        aged = (
            name.endswith(MOVED_SUFFIX)
            or name.startswith(PROBE_PREFIX)
            or _sending_floor(name) is not None
        )
        # Only objects vsqs writes (their names start with an id) tell the store's
        # time: a foreign file's may come from anywhere (its host, `touch -d`).
        ours = aged or names.is_id(name[: names.ID_LEN])
        self._ages.observed(name, modified if ours else None, aged=aged)
        return aged

    def names_of(self, message_id: str) -> Names:
        """The id's names with every move under way shown under the name it
        leaves, as ``list(settle=True)`` shows them, but without a name being
        deleted: a marked source is a copy unless its marker is a delete's
        (one ``GET`` per marked source). A move that lists the name of a copy
        being moved never takes the copy for gone (docs/protocol.md, "Moves
        between queues")."""
        group = list(self.io.listing(message_id))
        marked = _marked_sources(group)

        def a_copy(name: str) -> bool:
            if name not in marked:
                return True
            try:
                return self._marker_targets(name + MOVED_SUFFIX, name) != ()
            except FileNotFoundError:  # finished since: a copy may be at its target
                return True

        return exactly(message_id, [n for n in self._settle(group, True) if a_copy(n)])

    def _settle(self, group: Group, settle: bool, moving: set[str] | None = None) -> Names:
        """The shown names of one id's objects (all of its keys are adjacent).

        * a marked source is hidden, and so is every target its marker names
          (two for a split) while the source exists;
        * a marked source whose marker is older than ``FINISH_AFTER`` is
          finished: copied to each target not listed, then deleted; its
          targets are shown from then on; the ids of moves not finished go to
          ``moving``;
        * a marker whose source is not listed is spent: once older than
          ``FINISH_AFTER`` and its source confirmed gone, it is collected.

        With ``settle`` (for counting, not for claiming) nothing is finished
        or collected, and a marked source is shown instead of its targets, so
        a message counts once whatever step its move is at.
        """
        present = {n for n, _ in group}
        marked = _marked_sources(group)
        if not marked:
            return [n for n, _ in group]
        hidden = set(marked) | {source + MOVED_SUFFIX for source in marked}
        others = any(n not in hidden and names.parse(n) is not None for n in present)
        moves = [
            self._settle_move(source, modified, present, others, settle)
            for source, modified in marked.items()
        ]
        hidden.update(target for move in moves for target in move.targets or ())
        if moving is not None:  # ids hidden by moves under way (Store.moving)
            moving.update(
                names.id_of(m.source) for m in moves if m.source in present and not m.finished
            )
        if settle:  # moves under way or abandoned count under the name they leave
            hidden -= {move.source for move in moves if move.source in present and not move.gone}
        shown = [n for n, _ in group if n not in hidden]
        finished = [target for move in moves for target in move.finished]
        return sorted(shown + finished) if finished else shown

    def _settle_move(
        self, source: str, modified: float | None, present: set[str], others: bool, settle: bool
    ) -> Move:
        """One marked source of a group (see :meth:`_settle`), its marker listed
        with ``modified``. ``present``: the group's names; ``others``: whether
        the group has message names besides the marked sources (a target to
        hide among them)."""
        marker = source + MOVED_SUFFIX
        repair = not settle and self._finishable(marker, modified)
        if source not in present:
            if repair:
                self._collect_spent(source, marker)
            return Move(source)
        if not (repair or others):
            return Move(source)  # nothing to hide besides the source: no need to read the marker
        try:
            targets = self._marker_targets(marker, source)
        except FileNotFoundError:  # spent since the listing: its source is gone
            return Move(source, gone=True)
        if targets is None:
            return Move(source)
        if repair and self._finish(source, targets, present):
            return Move(source, targets, finished=targets)
        return Move(source, targets)
