"""Queues on object stores: an exactly-once rename built from exclusive creates.

Object stores (S3, GCS, ``memory://`` and other fsspec filesystems) have no
rename. :class:`ObjectStore` emulates the no-replace atomic rename the queue
needs on top of the requests an :class:`ObjectIO` adapter sends: list keys in
order, get, head, exclusive create, server-side copy and (batched) delete.
``docs/protocol.md`` analyses it request by request and window by window; in
short, ``rename(S, D)``:

1. creates the *move marker* ``S.moved`` (content: ``D`` and a token unique to
   this attempt) with an exclusive create. This is the commit point: of any
   number of clients moving or deleting ``S``, exactly one creates the marker.
   From now on ``S`` is hidden from listings;
2. copies ``S`` to ``D`` on the server;
3. deletes ``S``, in one batch with those of this client's earlier deletions
   that fit in the same requests.

An ack (``delete(D)``) commits the same way, with a marker of empty target,
then checks that ``D`` is still there; the object itself is deleted with the
next batch.

It rests on three invariants:

* **no name recurs**: every rename gives a message a name with the next
  version (``docs/format.md``), moves into another queue continue the count,
  and no client library is allowed to send a create twice (the adapters refuse
  their retries; vsqs resolves an unknown outcome itself and publishes under a
  fresh name). So a marker, once its source is gone, is spent for ever, and a
  delete, copy or create that lands late can never act on a later incarnation
  of its name;
* **no target is shown while its source exists**: ``D`` is returned to the
  mover, or listed to anyone, only once ``S`` is deleted. A copy of ``S`` to
  ``D`` can land only while ``S`` exists, so it can never recreate a ``D``
  that moved on;
* **a committed move is finished by anyone**: a marker older than
  ``FINISH_AFTER`` is finished by whoever lists it (copy, delete); it only
  writes ``S``'s bytes to ``D`` while ``S`` exists. Its client, if it was only
  slow, then finds ``S`` gone and reports the move as lost: ``D`` cannot tell
  it that the move was its own, since two clients may choose the same ``D``.

Guarantees hold only on stores whose exclusive create is atomic, which
:meth:`ObjectStore.exclusive_claims` probes once per bucket and process.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from itertools import count
from typing import ClassVar

from .. import _forks
from .. import _names as names
from .._errors import QueueNotFound, UnsupportedStore, storage_errors
from .._fanout import IN_FLIGHT, Outcome, fan_out
from ._base import Outcomes, OutcomeUnknown, Store
from ._clock import CLOCK_BOUND, RESOLUTION, StoreClock, StoreOffset, store_offset

log = logging.getLogger("vsqs")

#: Suffix of a move marker: ``<source name>.moved`` (foreign to the name grammar).
MOVED_SUFFIX = ".moved"
#: A move marker older than this (seconds, by the store's clock) whose move did
#: not finish is finished by the next client that lists it. Finishing earlier
#: would be just as safe, but it would race every claim in flight for nothing.
FINISH_AFTER = 10.0
#: Suffix of a batch marker ``<floor id>.sending``: while it is younger than
#: FINISH_AFTER, listings hide every name of its sender (the floor id's nonce)
#: whose id is above the floor: a batch written side by side is shown once it
#: is whole.
SENDING_SUFFIX = ".sending"
#: Deletions (acknowledged messages, spent markers) a client holds back to
#: send with its next batch; at this many it sends them at once.
BATCH = 1000
#: Creates of one move marker whose outcome stayed unknown, before giving up.
COMMIT_ATTEMPTS = 3

_COUNT_LOCK = _forks.lock()


def http_date(value: str | None) -> float | None:
    """The unix time of an HTTP ``Date`` header (``None`` if absent or unreadable)."""
    try:
        return parsedate_to_datetime(value).timestamp() if value else None
    except (TypeError, ValueError):
        return None


#: One id's objects: ``(name, modified)`` (``list`` is a method name in the store).
Group = list[tuple[str, float | None]]
Names = list[str]


class ObjectIO(ABC):
    """The requests an object store serves, for one queue prefix.

    Every method is one request (a listing: one request per page, a removal
    one per batch) and counts itself in :attr:`requests`. Names are single
    components of the queue. An ``OSError`` other than the documented ones
    means the outcome is unknown: the request may or may not take effect, now
    or later.
    """

    #: Short name of the protocol that makes creates exclusive, shown by
    #: :attr:`ObjectStore.protocol` (``"create-only"``, ``"gcs-generation"``).
    exclusive_create_via: ClassVar[str] = "create-only"
    #: Requests of one batch this adapter serves at once; 1 sends them one
    #: after another (a filesystem that is not thread-safe, a simulation).
    in_flight: int = IN_FLIGHT
    #: Names one :meth:`remove` request deletes (S3: 1 000, GCS: 100; 1: one
    #: request per name). A claim's delete carries the deletions held back only
    #: as far as they fit in the requests its own names need.
    names_per_remove: ClassVar[int] = 1
    #: The store's clock at the latest response that told it (an HTTP ``Date``
    #: header, whole seconds), or ``None``. It is never later than the store's
    #: time now, so :class:`ObjectStore` takes it for a lower bound of it when
    #: it ages objects; adapters set it from responses they receive anyway.
    last_date: float | None = None

    url: str

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()

    @property
    def probe_scope(self) -> Hashable:
        """What a capability probe result holds for (one bucket of one endpoint)."""
        return (type(self), self.url)

    def count(self, kind: str) -> None:
        with _COUNT_LOCK:  # batches send requests from several threads
            self.requests[kind] += 1

    @abstractmethod
    def container_exists(self) -> bool:
        """Whether the bucket (or root) that holds the queue exists."""

    @abstractmethod
    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        """``(name, modified)`` of every object directly in the queue whose name
        starts with ``prefix``, ascending by name; ``modified`` is the store's
        unix time of the last write, if known."""

    @abstractmethod
    def get(self, name: str) -> bytes:
        """The object's bytes; ``FileNotFoundError`` if absent."""

    @abstractmethod
    def exists(self, name: str) -> bool:
        """Whether the object exists (a ``HEAD``)."""

    @abstractmethod
    def create(self, name: str, data: bytes) -> None:
        """Create-only put; ``FileExistsError`` if the name exists.

        Sent once: the client library must not send it again after an error
        (a retry could create the name again after it was deleted), and
        :class:`UnsupportedStore` if the server does not implement exclusive
        creates at all.
        """

    @abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Server-side copy (replaces ``dst``); ``FileNotFoundError`` if ``src`` is absent."""

    @abstractmethod
    def remove(self, names: list[str]) -> list[str]:
        """Delete every name (absent ones are no error); return those that failed."""

    def clock_offset(self) -> float | None:
        """The store's clock minus this host's, in seconds, if the store tells
        (one request: :meth:`store_date`, whose time is truncated to the second)."""
        before = time.time()
        date = self.store_date()
        after = time.time()
        if date is None:
            return None
        # The store's time was in [date, date + 1) while the request was sent.
        return date + 0.5 - (before + after) / 2

    def store_date(self) -> float | None:
        """The store's clock, from the ``Date`` of one request that carries no
        data (S3: a ``HEAD`` of the bucket), truncated to whole seconds as
        HTTP dates are; ``None`` if the store tells none (then vsqs reads its
        clock from the listed time of an object it creates)."""
        return None

    @abstractmethod
    def sibling(self, name: str) -> ObjectIO:
        """The adapter of the queue ``name`` next to this one."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the client session if this adapter owns one."""


#: The probe's object, in the queue's prefix; a client killed mid-probe leaves
#: it, and listings remove it once older than ``FINISH_AFTER``.
PROBE_PREFIX = "vsqs-probe."

#: A host whose clock is further than this (seconds) from the store's is warned about.
CLOCK_WARNING = 2.0


@dataclass(frozen=True)
class Capabilities:
    """What the probe found about one bucket of one endpoint."""

    exclusive_create: bool
    #: The store's clock minus this host's (seconds, about ±0.5 s), if the store tells.
    clock_offset: float | None
    #: Why exclusive creates are not available, in the store's words.
    refusal: str = ""


_PROBED: dict[Hashable, Capabilities] = {}
_PROBE_LOCK = _forks.lock()


def _marked_sources(group: Group) -> dict[str, float | None]:
    """The sources that a marker of the group names, with the marker's age."""
    marked: dict[str, float | None] = {}
    for name, modified in group:
        if name.endswith(MOVED_SUFFIX) and names.parse(name[: -len(MOVED_SUFFIX)]):
            marked[name[: -len(MOVED_SUFFIX)]] = modified
    return marked


def _os_error(outcome: Outcome[None]) -> OSError | None:
    """The ``OSError`` a finished call raised (``None`` if it returned); other errors propagate."""
    error = outcome.exception()
    if error is None or isinstance(error, OSError):
        return error
    raise error


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


class ObjectStore(Store):
    """One queue on an object store; see the module docstring.

    Listing is in key order (so FIFO comes from the listing itself) and a
    listing may stop early: ``list()`` is lazy, page by page. Thread-safe.

    ``clock`` is the host's wall clock; nothing here measures time on it.
    Durations (how long a request took) are measured on ``monotonic``
    (``time.monotonic`` unless given), and ages of objects on the store's
    clock as :class:`~vsqs.stores._clock.StoreClock` tells it from listings,
    counted on ``monotonic`` if given, else on an injected ``clock`` (a
    test's clock, which it moves), else on ``time.monotonic``. A host whose
    clock is more than ``CLOCK_BOUND`` (30 s) off the store's gets
    :class:`vsqs.ClockSkew` from its listings.
    """

    atomic_rename = True
    durable = True  # an acknowledged PUT is on the store's stable storage
    lists_in_order = True
    renames_cost_requests = True
    polled = True
    unique_names = True

    def __init__(
        self,
        io: ObjectIO,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.io = io
        self.url = io.url
        self._clock = clock
        self._monotonic = monotonic
        self._durations = monotonic or time.monotonic
        steady = monotonic or (time.monotonic if clock is time.time else clock)
        self._ages = StoreClock(clock, steady)
        self._offsets: dict[Callable[[], float], StoreOffset] = {}
        self._lock = _forks.lock()
        self._doomed: dict[str, None] = {}  # acknowledged names to delete (ordered set)
        self._spent: dict[str, None] = {}  # markers and probes to delete
        self._repaired: list[str] = []  # crashed clients' leftovers repaired by listings
        self._token = secrets.token_hex(8)
        self._attempts = count()

    # ---------------------------------------------------------------- probe
    @property
    def capabilities(self) -> Capabilities:
        """The probe's findings, probed at the first call per bucket and process.

        Only a definite answer is kept; a probe that failed (the store was
        unreachable) raises and runs again at the next open.
        """
        with _PROBE_LOCK:
            known = _PROBED.get(self.io.probe_scope)
            if known is None:
                known = _PROBED[self.io.probe_scope] = self._run_probe()
            return known

    def _run_probe(self) -> Capabilities:
        name = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
        try:
            self.io.create(name, b"1")
        except UnsupportedStore as exc:
            return Capabilities(False, None, str(exc))
        try:
            self._check_dates(name, self.io.last_date)
            try:
                self.io.create(name, b"2")
            except FileExistsError:
                exclusive, refusal = True, ""
            except UnsupportedStore as exc:
                exclusive, refusal = False, str(exc)
            else:
                exclusive, refusal = False, "a create with If-None-Match replaced an object"
        finally:
            self.io.remove([name])
        if not exclusive:
            log.warning("%s: claims cannot be exclusive here: %s", self.url, refusal)
        offset = self.io.clock_offset()
        if offset is not None and abs(offset) > CLOCK_WARNING:
            log.warning(
                "%s: this host's clock is %+.1f s off the store's; vsqs writes names on "
                "the store's clock, but synchronise it (docs/protocol.md)",
                self.url,
                -offset,
            )
        return Capabilities(exclusive, offset, refusal)

    def _check_dates(self, name: str, date: float | None) -> None:
        """Refuse a store whose ``Date`` (``date``, of the response that created
        ``name``) and listed modification time of ``name`` disagree by more
        than the resolution and :data:`CLOCK_BOUND`: vsqs reads the store's
        clock from both, as one clock (docs/protocol.md, "Assumptions")."""
        if date is None:
            return  # no Date to compare (and no listing spent)
        listed = next((m for n, m in self.io.listing(name) if n == name), None)
        if listed is not None and abs(listed - date) > RESOLUTION + CLOCK_BOUND:
            raise UnsupportedStore(
                f"{self.url}: the store's Date header and the modification time it lists "
                f"for one object disagree by {listed - date:+.0f} s; vsqs reads both as "
                "the store's one clock (docs/protocol.md)"
            )

    def exclusive_claims(self) -> bool:
        return self.capabilities.exclusive_create

    # ---------------------------------------------------------------- clock
    def ms_clock(self, clock: Callable[[], float]) -> names.MsClock:
        """``clock`` plus its offset to the store's clock (a failed measure
        raises :class:`vsqs.StorageError`); ids of one clock on one bucket
        come from one generator, apart from the same clock's on other stores."""

        def offset() -> int:
            with storage_errors(lambda: f"reading the clock of {self.url}"):  # a request
                return self.offset_ms(clock)

        return names.MsClock(clock, offset, self.io.probe_scope)

    def offset_ms(self, clock: Callable[[], float]) -> int:
        """Milliseconds ``clock`` is behind the store's clock, as measured (see
        :class:`~vsqs.stores._clock.StoreOffset`): a client adds them to read
        the time in which names are written and judged. Shared by the clients
        of one clock object on one bucket; 0 if the store tells no time."""
        offset = self._offsets.get(clock)
        if offset is None:
            found = store_offset(clock, self.io.probe_scope, self._durations)
            offset = found or StoreOffset(self._durations)
            with self._lock:
                offset = self._offsets.setdefault(clock, offset)
        return offset.ms(clock, self._measure)

    def _measure(self, read: Callable[[], float]) -> tuple[float, float] | None:
        """The least and the greatest the store's clock minus ``read()``'s can
        be (seconds): the store read a time within the second a ``Date`` names
        (of one request), or at the listed time of an object created for it
        (on a store that tells no ``Date``; deleted at once, or collected as
        a probe if its client dies first; a whole second is taken for a
        truncated time), while ``read()`` read between its readings around
        that request. Both also tell :class:`StoreClock` the store's time (a
        first listing can then age what it lists)."""
        before = read()
        date = self.io.store_date()
        after = read()
        if date is not None:
            self._ages.dated(date)
            stamp, resolution = date, RESOLUTION
        else:
            name = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
            before = read()
            self.io.create(name, b"")
            after = read()
            try:
                listed = next((m for n, m in self.io.listing(name) if n == name), None)
            finally:
                if self.io.remove([name]):
                    self._spend(name)
            if listed is None:
                return None
            self._ages.observed(name, listed)
            stamp, resolution = listed, RESOLUTION if listed.is_integer() else 0.0
        return stamp - after, stamp + resolution - before

    @property
    def protocol(self) -> str:
        """The protocol the store supports, as probed (see ``docs/protocol.md``)."""
        return self.io.exclusive_create_via if self.capabilities.exclusive_create else "none"

    @property
    def refusal(self) -> str:
        """Why claims cannot be exclusive here, in the store's words ('' if they can)."""
        return self.capabilities.refusal

    # ------------------------------------------------------------ container
    def ensure(self, create: bool) -> bool:
        """A prefix needs no creating; its bucket must exist (vsqs never creates buckets)."""
        if not self.io.container_exists():
            raise QueueNotFound(f"{self.url}: the bucket does not exist")
        return True

    def sibling(self, name: str) -> ObjectStore:
        return ObjectStore(
            self.io.sibling(names.validate_queue_name(name)),
            clock=self._clock,
            monotonic=self._monotonic,
        )

    def close(self) -> None:
        try:
            self.flush()
        except OSError as exc:  # listers collect them later
            log.debug("%s: could not send deletions: %s", self.url, exc)
        self.io.close()

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
                if self._ages.older(name, modified, FINISH_AFTER):  # its client was killed
                    self._spend(name, repaired=True)
                elif floor is not None:  # keys ascend: the first is the lowest
                    floors.setdefault(floor[-names.NONCE_LEN :], floor)
                continue
            if name[: names.ID_LEN] != group_id:
                yield from _unsent(self._settle(group, settle), floors)
                group, group_id = [], name[: names.ID_LEN]
            group.append((name, modified))
        yield from _unsent(self._settle(group, settle), floors)
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
                return self._marker_target(name + MOVED_SUFFIX, name) != ""
            except FileNotFoundError:  # finished since: a copy may be at its target
                return True

        return [name for name in self._settle(group, True) if a_copy(name)]

    def _settle(self, group: Group, settle: bool) -> Names:
        """The shown names of one id's objects (all of its keys are adjacent).

        * a marked source is hidden, and so is its marker's target while the
          source exists;
        * a marked source whose marker is older than ``FINISH_AFTER`` is
          finished: copied to its target unless listed, then deleted; its
          target is shown from then on;
        * a marker whose source is not listed is spent: once older than
          ``FINISH_AFTER`` and its source confirmed gone, it is collected.

        With ``settle`` (for counting, not for claiming) nothing is finished
        or collected, and a marked source is shown instead of its target, so
        a message counts once whatever step its move is at.
        """
        present = {n for n, _ in group}
        marked = _marked_sources(group)
        if not marked:
            return [n for n, _ in group]
        hidden = set(marked) | {source + MOVED_SUFFIX for source in marked}
        others = [n for n in present if n not in hidden and names.parse(n) is not None]
        finished: Names = []
        gone: set[str] = set()
        for source, modified in marked.items():
            marker = source + MOVED_SUFFIX
            repair = not settle and self._ages.older(marker, modified, FINISH_AFTER)
            if source not in present:
                if repair:
                    self._collect_spent(source, marker)
                continue
            if not (repair or others):
                continue  # nothing to hide besides the source: no need to read the marker
            try:
                target = self._marker_target(marker, source)
            except FileNotFoundError:  # spent since the listing: its source is gone
                gone.add(source)
                continue
            if target is None:
                continue
            hidden.add(target)
            if repair and self._finish(source, target, copied=target in present) and target:
                finished.append(target)
        if settle:  # moves under way or abandoned count under the name they leave
            hidden -= {source for source in marked if source in present and source not in gone}
        shown = [n for n, _ in group if n not in hidden]
        return sorted(shown + finished) if finished else shown

    def _marker_target(self, marker: str, source: str) -> str | None:
        """The target a marker names: a message name of the source's id, or ``''``
        for a delete; ``None`` if the marker is not one of ours.
        ``FileNotFoundError`` if it is gone (spent: its source is gone)."""
        target = self.io.get(marker).decode("utf-8", "replace").partition("\n")[0]
        if target == "" or (
            names.parse(target) and target[: names.ID_LEN] == source[: names.ID_LEN]
        ):
            return target
        log.warning("%s: %s is not a marker of vsqs; %s stays hidden", self.url, marker, source)
        return None

    def _finish(self, source: str, target: str, *, copied: bool) -> bool:
        """Complete a committed move (or delete) of ``source``; whether it is gone now."""
        try:
            if target and not copied:
                try:
                    self.io.copy(source, target)
                except FileNotFoundError:
                    return False  # its owner finished it meanwhile: the next listing shows it
            if self.io.remove([source]):
                return False
        except OSError as exc:
            log.warning("%s: could not finish the move of %s: %s", self.url, source, exc)
            return False
        log.warning("%s: finished the move of %s to %s", self.url, source, target or "nowhere")
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

    # ------------------------------------------------------- operations
    def read(self, name: str) -> bytes:
        return self.io.get(name)

    def write_new(self, name: str, data: bytes, *, fsync: bool) -> None:
        """Create ``name``; ``FileExistsError`` if it exists or may exist later.

        A create whose outcome is unknown is resolved by reading the name: the
        same bytes under a name with this process's 64-bit nonce are ours. If
        the name is absent the create may still land later, so the name is
        burned (``FileExistsError``): the caller publishes under a fresh one,
        and a late landing is a duplicate, never a name that comes back.
        """
        self._ages.creating(name)
        try:
            self.io.create(name, data)
        except FileExistsError:
            self._ages.not_created(name)
            raise
        except OSError as exc:
            try:
                if self.io.get(name) == data:
                    return
            except FileNotFoundError:
                pass
            self._ages.not_created(name)
            raise FileExistsError(name) from exc

    def creates_atomically(self, fsync: bool) -> bool:
        return True  # a PUT is all or nothing

    @property
    def batch_width(self) -> int:
        return self.io.in_flight

    @contextmanager
    def sending(self, floor_id: str) -> Iterator[None]:
        """A batch marker ``<floor_id>.sending`` for as long as this lasts.

        Its sender issues the batch's ids once the marker exists: a listing
        that read the marker's place before it existed started before those
        ids were issued, so receivers take them for young names and look
        again (docs/format.md, "FIFO"); one that reads the marker hides them.
        The marker is created as a message is (:meth:`write_new`): a create
        whose outcome is unknown is read back, and ``FileExistsError`` if the
        name is burned (the caller draws another floor). A marker left by a
        killed sender stops hiding after ``FINISH_AFTER`` and is collected.
        """
        marker = floor_id + SENDING_SUFFIX
        self.write_new(marker, b"", fsync=False)
        try:
            yield
        finally:
            try:
                left = self.io.remove([marker])
            except OSError:
                left = [marker]
            if left:
                self._spend(marker)

    def write_batch(self, items: Sequence[tuple[str, bytes]], *, fsync: bool) -> Outcomes:
        writes = fan_out(lambda item: self.write_new(*item, fsync=fsync), items, self.batch_width)
        return [_os_error(future) for future in writes]

    def rename(self, src: str, dst: str) -> None:
        error = self.rename_batch([(src, dst)])[0]
        if error is not None:
            raise error

    def rename_batch(self, moves: Sequence[tuple[str, str]]) -> Outcomes:
        """Commit and copy every move side by side (up to the adapter's
        :attr:`~ObjectIO.in_flight`), then delete all their sources with one
        batch: each target is returned only once its source is gone."""
        copied = fan_out(self._commit_and_copy, moves, self.batch_width)
        errors = [_os_error(future) for future in copied]
        sources = [src for (src, _), error in zip(moves, errors, strict=True) if error is None]
        failed = self._send_deletions(sources) if sources else set()
        for i, (src, _) in enumerate(moves):
            if errors[i] is None:
                if src in failed:  # the source stays hidden under its marker
                    errors[i] = OSError(f"{self.url}: could not delete {src}")
                else:
                    self._spend(src + MOVED_SUFFIX)
        return errors

    def _commit_and_copy(self, move: tuple[str, str]) -> None:
        """The first two steps of a move: its marker (the commit), then the copy."""
        src, dst = move
        marker = src + MOVED_SUFFIX
        started = self._durations()
        self._ages.creating(dst)  # before the commit: a lister may finish the move
        try:
            self._commit(marker, dst)  # FileNotFoundError: another client moved it
        except FileNotFoundError:
            self._ages.not_created(dst)
            raise
        try:
            self.io.copy(src, dst)
        except FileNotFoundError:
            self._ages.not_created(dst)
            self._spend(marker)
            if self._durations() - started >= FINISH_AFTER / 2:
                # A lister may have finished our own move while we stalled:
                # the message may sit at ``dst`` (hidden until its expiry),
                # and ``dst`` may since have moved on, so no read can tell.
                raise OutcomeUnknown(f"{src}: the outcome of a slow move is unknown") from None
            raise  # gone before our marker was made: another client moved it

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
    def change_token(self) -> Hashable:
        return None

    def changed_since(self, token: Hashable) -> bool:
        return True  # no change feed: only a listing can tell
