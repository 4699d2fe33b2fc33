"""The move protocol of object stores: commit with a marker, copy, delete, spend.

``rename(S, D)`` on an object store (docs/protocol.md, "Requests, operation
by operation"):

1. creates the *move marker* ``S.moved`` (content: ``D`` and a token unique to
   this attempt; a split's names both its targets, ``"D1 D2"``) with an
   exclusive create. This is the commit point: of any
   number of clients moving or deleting ``S``, exactly one creates the marker.
   From now on ``S`` is hidden from listings;
2. copies ``S`` to ``D`` on the server (a split: to both targets, side by side);
3. deletes ``S``, in one batch with those of this client's earlier deletions
   that fit in the same requests.

An ack (``delete(D)``) commits the same way, with a marker of empty target,
then checks that ``D`` is still there; the object itself is deleted with the
next batch. A marker whose source is gone is spent, and deleted with a later
batch. A committed move whose client went away is finished by whoever lists
its marker once it is ``FINISH_AFTER`` old (:meth:`ObjectMoves._finish`).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Sequence
from itertools import count

from .. import _forks
from .. import _names as names
from .._fanout import Outcome, fan_out
from ._base import Outcomes, OutcomeUnknown, Store
from ._clock import StoreClock
from ._object_io import ObjectIO

log = logging.getLogger("vsqs")

#: Suffix of a move marker: ``<source name>.moved`` (foreign to the name grammar).
MOVED_SUFFIX = ".moved"
#: A move marker older than this (seconds, by the store's clock) whose move did
#: not finish is finished by the next client that lists it. Finishing earlier
#: would be just as safe, but it would race every claim in flight for nothing.
FINISH_AFTER = 10.0
#: Deletions (acknowledged messages, spent markers) a client holds back to
#: send with its next batch; at this many it sends them at once.
BATCH = 1000
#: Creates of one move marker whose outcome stayed unknown, before giving up.
COMMIT_ATTEMPTS = 3

#: Names of objects (``list`` is a method name in the store).
Names = list[str]
#: The targets of a move: one (a rename), two (a split) or none (a delete).
Targets = tuple[str, ...]
#: Targets one marker may name: a split's two.
MAX_TARGETS = 2


def os_error(outcome: Outcome[None]) -> OSError | None:
    """The ``OSError`` a finished call raised (``None`` if it returned); other errors propagate."""
    error = outcome.exception()
    if error is None or isinstance(error, OSError):
        return error
    raise error


class ObjectMoves(Store):
    """Moves and deletions of one queue's objects, exclusive with each other
    across clients; the base of :class:`~vsqs.stores._object.ObjectStore`.

    Durations (how long a request took) are measured on ``durations``; ages
    of objects on the store's clock by ``ages``. Thread-safe.
    """

    def __init__(self, io: ObjectIO, durations: Callable[[], float], ages: StoreClock) -> None:
        self.io = io
        self.url = io.url
        self._durations = durations
        self._ages = ages
        self._lock = _forks.lock()
        self._doomed: dict[str, None] = {}  # acknowledged names to delete (ordered set)
        self._spent: dict[str, None] = {}  # markers and probes to delete
        self._repaired: list[str] = []  # crashed clients' leftovers repaired by listings
        self._token = secrets.token_hex(8)
        self._attempts = count()

    def rename(self, src: str, dst: str) -> None:
        error = self.rename_batch([(src, dst)])[0]
        if error is not None:
            raise error

    def split(self, src: str, first: str, second: str) -> None:
        """A move to two targets: one marker naming both (the commit), two
        copies side by side, then the batched delete of ``src`` (which may
        carry held-back deletions, as a claim's does)."""
        error = self._move_batch([(src, (first, second))])[0]
        if error is not None:
            raise error

    def rename_batch(self, moves: Sequence[tuple[str, str]]) -> Outcomes:
        """Commit and copy every move side by side (up to the adapter's
        :attr:`~ObjectIO.in_flight`), then delete all their sources with one
        batch: each target is returned only once its source is gone."""
        return self._move_batch([(src, (dst,)) for src, dst in moves])

    def _move_batch(self, moves: Sequence[tuple[str, Targets]]) -> Outcomes:
        """:meth:`rename_batch` of moves to one target or more each."""
        copied = fan_out(self._commit_and_copy, moves, self.batch_width)
        errors = [os_error(future) for future in copied]
        sources = [src for (src, _), error in zip(moves, errors, strict=True) if error is None]
        failed = self._send_deletions(sources) if sources else set()
        for i, (src, _) in enumerate(moves):
            if errors[i] is None:
                if src in failed:  # the source stays hidden under its marker
                    errors[i] = OSError(f"{self.url}: could not delete {src}")
                else:
                    self._spend(src + MOVED_SUFFIX)
        return errors

    def _commit_and_copy(self, move: tuple[str, Targets]) -> None:
        """The first two steps of a move: its marker (the commit), then the
        copies (side by side)."""
        src, targets = move
        marker = src + MOVED_SUFFIX
        started = self._durations()
        for dst in targets:  # before the commit: a lister may finish the move
            self._ages.creating(dst)
        try:
            self._commit(marker, " ".join(targets))  # FileNotFoundError: another client moved it
        except FileNotFoundError:
            self._not_created(targets)
            raise
        try:
            for outcome in fan_out(lambda dst: self.io.copy(src, dst), targets, len(targets)):
                if (error := os_error(outcome)) is not None:
                    raise error
        except FileNotFoundError:
            self._not_created(targets)
            self._spend(marker)
            if self._durations() - started >= FINISH_AFTER / 2:
                # A lister may have finished our own move while we stalled:
                # the message may sit at ``dst`` (hidden until its expiry),
                # and ``dst`` may since have moved on, so no read can tell.
                raise OutcomeUnknown(f"{src}: the outcome of a slow move is unknown") from None
            raise  # gone before our marker was made: another client moved it

    def _not_created(self, targets: Targets) -> None:
        for dst in targets:
            self._ages.not_created(dst)

    def delete(self, name: str, *, known: bool = False) -> None:
        """Delete a message name, exclusively with every move of it.

        The marker with an empty target commits the delete; then a ``HEAD``
        tells whether the name was still there (a receipt that is no longer
        current raises ``FileNotFoundError``, its marker spent): with our
        marker in place nobody else can remove it, and a marker of a name that
        is gone is spent for ever. Listers finish a delete only once its
        marker is ``FINISH_AFTER`` old, so a ``HEAD`` that comes back later
        than half of that raises :class:`OutcomeUnknown` rather
        than a false "no longer current". The object itself goes with this
        client's next batch. Unless the name is ``known`` (this client made or listed
        it), a ``HEAD`` first keeps a name that does not exist (yet) from
        getting a marker.
        """
        if not known and not self.io.exists(name):
            raise FileNotFoundError(name)
        if names.parse(name) is None:  # the config object: no claim races it
            if self.io.remove([name]):
                raise OSError(f"{self.url}: could not delete {name}")
            return
        marker = name + MOVED_SUFFIX
        started = self._durations()
        self._commit(marker, "")  # FileNotFoundError: moved by another
        if not self.io.exists(name):
            if self._durations() - started >= FINISH_AFTER / 2:
                # Slow enough that a lister may have finished our own delete.
                raise OutcomeUnknown(f"{name}: the outcome of a slow delete is unknown")
            self._spend(marker)
            raise FileNotFoundError(name)
        with self._lock:
            self._doomed[name] = None
            full = len(self._doomed) + len(self._spent) >= BATCH
        if full:
            self._send_deletions()

    def _claim(self, target: str) -> bytes:
        """A marker's content: the target ('' for a delete) and a token unique to
        this attempt (the pid keeps forked processes sharing a token apart)."""
        return f"{target}\n{self._token}-{os.getpid()}-{next(self._attempts)}".encode()

    def _commit(self, marker: str, target: str) -> None:
        """Create the move marker: the commit. ``FileNotFoundError`` if another won.

        A create whose outcome is unknown is resolved by reading the marker
        back (the token says whose it is) and, if it is absent, by creating it
        again with the same content: whichever attempt lands first wins, a
        later one finds it.
        """
        claim = self._claim(target)
        error: OSError | None = None
        for _ in range(COMMIT_ATTEMPTS):
            try:
                self.io.create(marker, claim)
                return
            except FileExistsError:
                if error is None:
                    raise FileNotFoundError(marker) from None  # another client's commit
            except OSError as exc:
                error = exc
            try:
                found = self.io.get(marker)
            except FileNotFoundError:
                continue  # no attempt landed (yet): try again
            if found == claim:
                return
            raise FileNotFoundError(marker)
        assert error is not None
        raise error

    # -------------------------------------------------------------- changes
    def _marker_targets(self, marker: str, source: str) -> Targets | None:
        """The targets a marker names: one (a rename) or two (a split) message
        names of the source's core, none for a delete; ``None`` if the marker
        is not one of ours. ``FileNotFoundError`` if it is gone (spent: its
        source is gone)."""
        line = self.io.get(marker).decode("utf-8", "replace").partition("\n")[0]
        targets = tuple(line.split(" ")) if line else ()
        if len(targets) <= MAX_TARGETS and all(
            names.parse(target) and target[: names.ID_LEN] == source[: names.ID_LEN]
            for target in targets
        ):
            return targets
        log.warning("%s: %s is not a marker of vsqs; %s stays hidden", self.url, marker, source)
        return None

    def _finish(self, source: str, targets: Targets, present: set[str]) -> bool:
        """Complete a committed move, split or delete of ``source`` (copies to
        the targets not in ``present``, then the delete); whether it is gone now."""
        try:
            for target in targets:
                if target in present:
                    continue
                try:
                    self.io.copy(source, target)
                except FileNotFoundError:
                    return False  # its owner finished it meanwhile: the next listing shows it
            if self.io.remove([source]):
                return False
        except OSError as exc:
            log.warning("%s: could not finish the move of %s: %s", self.url, source, exc)
            return False
        where = " and ".join(targets) or "nowhere"
        log.warning("%s: finished the move of %s to %s", self.url, source, where)
        with self._lock:
            self._repaired.append(source)
        self._spend(source + MOVED_SUFFIX, repaired=True)
        return True

    def _collect_spent(self, source: str, marker: str) -> None:
        """Collect another client's spent marker, once its source is surely gone.

        A listing of several pages may show a marker without a source that was
        created after the source's page was read; a ``HEAD`` after the marker
        was seen settles it (a marker is only ever made for a source that
        exists, and names never recur).
        """
        with self._lock:
            if marker in self._spent:
                return
        try:
            if self.io.exists(source):
                return
        except OSError:
            return
        self._spend(marker, repaired=True)

    # ------------------------------------------------------- deletions
    def _pending(self) -> bool:
        with self._lock:
            return bool(self._doomed or self._spent)

    def _spend(self, name: str, *, repaired: bool = False) -> None:
        """Delete ``name`` (a spent marker, a probe) with the next batch."""
        with self._lock:
            self._spent[name] = None
            if repaired:
                self._repaired.append(name)
            full = len(self._doomed) + len(self._spent) >= BATCH
        if full:
            self._send_deletions()

    def _send_deletions(self, first: Sequence[str] = ()) -> set[str]:
        """Delete ``first`` with what this client held back, in one batch; return
        the names of ``first`` that were not deleted.

        With ``first`` (a claim's sources), only the deletions held back that
        fit in the requests ``first`` needs anyway go along (none where a
        request carries one name): the rest would cost the claim requests of
        their own, and wait for the next listing instead. An acknowledged
        name's marker is spent once the name is deleted, and goes with the next
        batch (never with the name: a batch deletes in no promised order).
        """
        with self._lock:
            doomed, spent = list(self._doomed), list(self._spent)
            if first:
                room = -len(first) % max(1, self.io.names_per_remove)
                doomed = doomed[:room]
                spent = spent[: room - len(doomed)]
            for name in doomed:
                del self._doomed[name]
            for name in spent:
                del self._spent[name]
        failed = (
            set(self.io.remove([*first, *doomed, *spent])) if first or doomed or spent else set()
        )
        with self._lock:
            for name in doomed:
                if name in failed:
                    self._doomed[name] = None
                else:
                    self._spent[name + MOVED_SUFFIX] = None
            self._spent.update(dict.fromkeys(m for m in spent if m in failed))
        if failed:
            log.debug("%s: %d deletions failed; retried with the next batch", self.url, len(failed))
        return failed.intersection(first)

    def flush(self) -> None:
        """Send every deletion held back (acknowledged names, then their markers)."""
        for _ in range(3):
            if not self._pending():
                return
            self._send_deletions()

    def take_repairs(self) -> Names:
        """Leftovers of crashed clients that listings repaired (sources of moves
        they finished, spent markers, probes), removed now."""
        self.flush()
        with self._lock:
            repaired, self._repaired = self._repaired, []
        return repaired

    def _finishable(self, name: str, modified: float | None) -> bool:
        """Whether a marker or probe listed with ``modified`` is older than
        ``FINISH_AFTER`` by the store's clock: its client, if it is still
        there, is late enough that anyone may finish (or collect) it."""
        return self._ages.older(name, modified, FINISH_AFTER)
