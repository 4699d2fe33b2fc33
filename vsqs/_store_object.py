"""Queues on object stores: an exactly-once rename built from exclusive creates.

Object stores (S3, GCS, ``memory://`` and other fsspec filesystems) have no
rename. :class:`ObjectStore` emulates the no-replace atomic rename that the
queue needs on top of five requests an :class:`ObjectIO` adapter provides:
list keys in order, get, create-only put, server-side copy and delete. The
protocol, its commit point and every crash window are in ``docs/protocol.md``;
in short, ``rename(S, D)``:

1. creates the *move marker* ``S.moved`` (content: ``D`` and a token unique to
   this attempt) with an exclusive create. This is the commit point: of any
   number of clients moving ``S``, exactly one creates the marker. From now on
   ``S`` is hidden from listings;
2. reads ``S`` (the body is kept for the receiver, which reads ``D`` next);
3. copies ``S`` to ``D`` on the server;
4. deletes ``S``, together with the markers of earlier moves whose source is
   gone (one batched request where the store has one).

A marker whose move did not finish (its client crashed or stalled) is finished
by whoever lists it later: copying ``S`` to ``D`` again is harmless, because
only the marker's owner or a finisher ever writes ``D``, and always ``S``'s
bytes. Guarantees hold only on stores whose exclusive create is atomic, which
:meth:`ObjectStore.exclusive_claims` probes once per bucket and process.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import ClassVar

from . import _names as names
from ._errors import QueueNotFound
from ._store import Store

log = logging.getLogger("vsqs")

#: Suffix of a move marker: ``<source name>.moved`` (foreign to the name grammar).
MOVED_SUFFIX = ".moved"
#: A move marker older than this (seconds, by the store's clock) whose move did
#: not finish is finished by the next client that lists it. Finishing earlier
#: would be just as safe, but it would race every claim in flight for nothing.
FINISH_AFTER = 10.0
#: A receipt whose expiry is further away than this (seconds) is deleted with
#: one request; closer to its expiry another client may be claiming it (clocks
#: of hosts differ), so the delete takes the move marker first.
ACK_MARGIN = 5.0
#: How often a long poll lists an object store (seconds): listings cost money.
POLL_INTERVAL = 0.2
#: Bodies and tags remembered per store between a move and the receiver's read.
_REMEMBERED = 256

#: One id's objects: ``(name, modified)`` (``list`` is a method name in the store).
Group = list[tuple[str, float | None]]
Names = list[str]


class ObjectIO(ABC):
    """The requests an object store serves, for one queue prefix.

    Every method is one request (a listing: one request per page) and counts
    itself in :attr:`requests`. Names are single components of the queue.
    """

    #: Short name of the protocol that makes creates exclusive, shown by
    #: :attr:`ObjectStore.protocol` (``"create-only"``, ``"gcs-generation"``).
    exclusive_create_via: str = "create-only"
    #: ``delete(name, tag=...)`` is honoured as a compare-and-delete.
    conditional_delete: ClassVar[bool] = False

    url: str

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()

    @property
    def probe_scope(self) -> Hashable:
        """What a capability probe result holds for (one bucket of one endpoint)."""
        return (type(self), self.url)

    def count(self, kind: str) -> None:
        self.requests[kind] += 1

    @abstractmethod
    def container_exists(self) -> bool:
        """Whether the bucket (or root) that holds the queue exists."""

    @abstractmethod
    def listing(self) -> Iterator[tuple[str, float | None]]:
        """``(name, modified)`` of every object directly in the queue, ascending
        by name; ``modified`` is the store's unix time of the last write, if known."""

    @abstractmethod
    def get(self, name: str) -> bytes:
        """The object's bytes; ``FileNotFoundError`` if absent."""

    @abstractmethod
    def create(self, name: str, data: bytes) -> str | None:
        """Create-only put; ``FileExistsError`` if the name exists. Returns a tag."""

    @abstractmethod
    def copy(self, src: str, dst: str) -> str | None:
        """Server-side copy (may replace ``dst``); ``FileNotFoundError`` if ``src``
        is absent. Returns the tag of ``dst``."""

    @abstractmethod
    def delete(self, name: str, tag: str | None = None) -> None:
        """Delete; ``FileNotFoundError`` if absent (or, with ``tag`` on a store
        with :attr:`conditional_delete`, if the object has another tag)."""

    def remove(self, names: list[str]) -> list[str]:
        """Delete every name, absent ones included; return those that failed."""
        failed = []
        for name in names:
            try:
                self.delete(name)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.debug("%s: could not remove %s: %s", self.url, name, exc)
                failed.append(name)
        return failed

    def probe_conditional_delete(self, name: str, tag: str | None) -> bool:
        """Whether a delete with a wrong tag is refused (``name`` exists)."""
        return False

    def clock_offset(self) -> float | None:
        """The store's clock minus this host's, in seconds, if the store tells (one request)."""
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
    conditional_delete: bool
    #: The store's clock minus this host's (seconds, about ±0.5 s), if the store tells.
    clock_offset: float | None


_PROBED: dict[Hashable, Capabilities] = {}
_PROBE_LOCK = threading.Lock()


class ObjectStore(Store):
    """One queue on an object store; see the module docstring.

    Listing is in key order (so FIFO comes from the listing itself) and a
    listing may stop early: ``list()`` is lazy, page by page.
    """

    atomic_rename = True
    durable = True  # an acknowledged PUT is on the store's stable storage
    shared = True
    lists_in_order = True
    lost_claims_are_costly = True

    def __init__(self, io: ObjectIO) -> None:
        self.io = io
        self.url = io.url
        self._lock = threading.Lock()
        self._bodies: OrderedDict[str, bytes] = OrderedDict()
        self._tags: OrderedDict[str, str | None] = OrderedDict()
        self._spent: dict[str, None] = {}  # markers whose source is gone (ordered set)
        self._uncertain: set[str] = set()  # names whose move failed after its marker
        self._repaired: list[str] = []  # crashed clients' leftovers repaired by listings
        self._stale: set[str] = set()  # of those, spent markers not yet removed
        self._token = secrets.token_hex(8)
        self._attempts = count()

    # ---------------------------------------------------------------- probe
    @property
    def capabilities(self) -> Capabilities:
        """The probe's findings, probed at the first call per bucket and process."""
        with _PROBE_LOCK:
            known = _PROBED.get(self.io.probe_scope)
            if known is None:
                known = _PROBED[self.io.probe_scope] = self._run_probe()
            return known

    def _run_probe(self) -> Capabilities:
        name = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
        tag = self.io.create(name, b"1")
        try:
            try:
                self.io.create(name, b"2")
            except FileExistsError:
                exclusive = True
            else:
                exclusive = False
            conditional = self.io.conditional_delete and self.io.probe_conditional_delete(name, tag)
        finally:
            self.io.remove([name])
        if not exclusive:
            log.warning("%s: this store overwrites on create: claims cannot be exclusive", self.url)
        offset = self.io.clock_offset()
        if offset is not None and abs(offset) > CLOCK_WARNING:
            log.warning(
                "%s: this host's clock is %+.1f s off the store's; visibility timeouts "
                "shared with other hosts are off by as much (docs/protocol.md)",
                self.url,
                -offset,
            )
        return Capabilities(exclusive, conditional, offset)

    def exclusive_claims(self) -> bool:
        return self.capabilities.exclusive_create

    @property
    def protocol(self) -> str:
        """The strongest protocol the store supports, as probed (see ``docs/protocol.md``)."""
        found = self.capabilities
        if not found.exclusive_create:
            return "none"
        return "s3-conditional" if found.conditional_delete else self.io.exclusive_create_via

    # ------------------------------------------------------------ container
    def ensure(self, create: bool) -> bool:
        """A prefix needs no creating; its bucket must exist (vsqs never creates buckets)."""
        if not self.io.container_exists():
            raise QueueNotFound(f"{self.url}: the bucket does not exist")
        return True

    def sibling(self, name: str) -> ObjectStore:
        return ObjectStore(self.io.sibling(names.validate_queue_name(name)))

    def close(self) -> None:
        spent = self._take_spent()
        if spent:
            try:
                self.io.remove(spent)
            except OSError as exc:  # listers collect them later
                log.debug("%s: could not remove spent markers: %s", self.url, exc)
        self.io.close()

    # --------------------------------------------------------------- names
    def list(self) -> Iterator[str]:
        """Names of messages, in key order, without moved sources and markers.

        Finishes moves whose client went away (see :meth:`_settle`).
        """
        group: Group = []
        group_id = ""
        for name, modified in self.io.listing():
            if name.startswith(PROBE_PREFIX) and _older(modified, FINISH_AFTER):
                self._collect_stale(name)  # a probe whose client was killed mid-way
            if name[: names.ID_LEN] != group_id:
                yield from self._settle(group)
                group, group_id = [], name[: names.ID_LEN]
            group.append((name, modified))
        yield from self._settle(group)

    def _settle(self, group: Group) -> Names:
        """The live names of one id's objects (all of its keys are adjacent).

        A source with a marker is hidden. Leftovers are repaired here, before
        any name of the id is shown, so no name is ever claimable while an
        older copy of its message exists:

        * a marker whose source is gone is spent: collected once older than
          ``FINISH_AFTER`` (a listing of several pages may miss a newer source);
        * a marked source whose marker's target is listed was copied already:
          deleted (then its marker);
        * a marked source alone, marked more than ``FINISH_AFTER`` ago: its
          move is finished (copy, delete); younger, the id is in transition
          and nothing of it is shown yet.
        """
        markers = {
            n[: -len(MOVED_SUFFIX)]: m
            for n, m in group
            if n.endswith(MOVED_SUFFIX) and _movable(n[: -len(MOVED_SUFFIX)])
        }
        if not markers:
            return [n for n, _ in group]
        marker_names = {source + MOVED_SUFFIX for source in markers}
        present = {n for n, _ in group}
        shown = [n for n, _ in group if n not in markers and n not in marker_names]
        live = [n for n in shown if _movable(n)]  # not foreign names that share the id
        for source, modified in markers.items():
            marker = source + MOVED_SUFFIX
            old = _older(modified, FINISH_AFTER)
            if source not in present:
                # Spent, unless the listing (pages taken at different times)
                # missed a source created after its page: only old ones.
                if old:
                    self._collect_stale(marker)
            elif live and self._marker_target(marker) in present:
                if not self._finish(source, None):  # its copy exists: drop the source
                    shown = []
            else:
                if old and not live:
                    self._finish(source, self._marker_target(marker))
                shown = []  # in transition: listed again next time
        return shown

    def _marker_target(self, marker: str) -> str | None:
        try:
            target = self.io.get(marker).decode("utf-8", "replace").partition("\n")[0]
        except FileNotFoundError:
            return None
        return target if names.parse(target) is not None else None

    def _finish(self, source: str, target: str | None) -> bool:
        """Complete a move: copy ``source`` to ``target`` (if given), delete the
        source. Returns whether the source is gone."""
        try:
            if target is not None and target[: names.ID_LEN] == source[: names.ID_LEN]:
                try:
                    self.io.copy(source, target)
                    log.warning("%s: finished the move of %s to %s", self.url, source, target)
                except FileNotFoundError:
                    return True  # its owner finished it meanwhile
            if self.io.remove([source]):
                return False
        except OSError as exc:
            log.warning("%s: could not repair %s: %s", self.url, source, exc)
            return False
        self._collect_stale(source + MOVED_SUFFIX)
        with self._lock:
            self._repaired.append(source)
        return True

    def _collect_stale(self, name: str) -> None:
        """Remove a crashed client's leftover with the next batch (or ``take_repairs``)."""
        self._collect([name])
        with self._lock:
            self._stale.add(name)

    def take_repairs(self) -> Names:
        """Sources of moves listings finished, and leftovers they found (spent
        markers, probes of killed clients), removed now."""
        spent = self._take_spent()
        failed = self.io.remove(spent) if spent else []
        self._collect(failed)
        with self._lock:
            removed = sorted(self._stale.difference(self._spent))  # here or by a move since
            self._stale.difference_update(removed)
            repaired, self._repaired = self._repaired + removed, []
        return repaired

    def _collect(self, markers: Iterable[str]) -> None:
        with self._lock:
            self._spent.update(dict.fromkeys(markers))

    def _take_spent(self) -> Names:
        with self._lock:
            spent, self._spent = list(self._spent), {}
        return spent

    def read(self, name: str) -> bytes:
        with self._lock:
            body = self._bodies.pop(name, None)
        if body is not None:
            return body
        return self.io.get(name)

    def write_new(self, name: str, data: bytes, *, fsync: bool) -> None:
        try:
            self.io.create(name, data)
        except FileExistsError:
            # Our own create, retried after its response was lost? Names carry
            # a 64-bit process nonce, so equal bytes under one are ours.
            try:
                if self.io.get(name) == data:
                    return
            except FileNotFoundError:
                pass
            raise

    def creates_atomically(self, fsync: bool) -> bool:
        return True  # a PUT is all or nothing

    def rename(self, src: str, dst: str) -> None:
        marker = src + MOVED_SUFFIX
        self._create_marker(marker, self._claim(dst))
        try:
            self._move(src, dst, marker)
        except BaseException:
            if _held(src):  # committed, outcome unknown: src is no plain receipt now
                with self._lock:
                    self._uncertain.add(src)
            raise

    def _claim(self, target: str) -> bytes:
        """A marker's content: the target ('' for a delete) and a token unique to
        this attempt (the pid keeps forked processes sharing a token apart)."""
        return f"{target}\n{self._token}-{os.getpid()}-{next(self._attempts)}".encode()

    def _move(self, src: str, dst: str, marker: str) -> None:
        """Steps 2-4 of a rename whose marker this client created."""
        try:
            body = self.io.get(src)
        except FileNotFoundError:
            # Its move finished before our marker was made (we were slow, and
            # the marker was collected): we did not win anything.
            self._collect([marker])
            raise
        try:
            tag = self.io.copy(src, dst)
        except FileNotFoundError:
            # A finisher moved it for us, or the message moved on without us.
            if not self._exists(dst):
                raise
            tag = None
        spent = self._take_spent()
        failed = self.io.remove([src, *spent])
        self._collect(m for m in spent if m in failed)
        if src in failed:
            raise OSError(f"could not delete {src} after copying it to {dst}")
        self._collect([marker])
        with self._lock:
            self._bodies[dst] = body
            self._tags[dst] = tag
            for cache in (self._bodies, self._tags):
                if len(cache) > _REMEMBERED:
                    cache.popitem(last=False)

    def _create_marker(self, marker: str, claim: bytes) -> None:
        """Create the move marker: the commit. ``FileNotFoundError`` if another won.

        A create whose response was lost (an error after the request may have
        succeeded, or an automatic retry that then met our own marker) is
        resolved by reading the marker back: the token says whose it is.
        """
        try:
            self.io.create(marker, claim)
            return
        except FileExistsError:
            pass
        except OSError as exc:
            try:
                mine = self.io.get(marker) == claim
            except FileNotFoundError:
                raise exc from None  # the create did not happen: nothing to undo
            if mine:
                return
            raise FileNotFoundError(marker) from None
        if self.io.get(marker) != claim:
            raise FileNotFoundError(marker)

    def _exists(self, name: str) -> bool:
        try:
            self.io.get(name)
        except FileNotFoundError:
            return False
        return True

    def delete(self, name: str) -> None:
        """Delete a message name, ordered with moves of it.

        A receipt whose expiry is more than ``ACK_MARGIN`` away cannot be moved
        by anyone else yet (hosts' clocks agree within that), so it is deleted
        with one request. Otherwise (and for ready names, and a receipt whose
        move by this client failed midway) the delete is a move to nowhere:
        its marker makes it exclusive with claims of the same name.
        """
        with self._lock:
            tag = self._tags.pop(name, None)
            self._bodies.pop(name, None)
            uncertain = name in self._uncertain
            self._uncertain.discard(name)
        parsed = names.parse(name)
        # Hosts that pass the probe's clock check are within ACK_MARGIN of each
        # other once this host's own measured offset is added.
        margin = ACK_MARGIN + abs(self.capabilities.clock_offset or 0.0)
        far = parsed is not None and (parsed.expiry_ms or 0) / 1000 - time.time() > margin
        if not uncertain and (far or not _movable(name)):  # not movable: no claim races it
            self.io.delete(name, tag)
            return
        marker = name + MOVED_SUFFIX
        self._create_marker(marker, self._claim(""))  # FileNotFoundError: moved by another
        self.io.delete(name, tag)  # FileNotFoundError: gone before our marker, or finished
        self._collect([marker])

    # -------------------------------------------------------------- changes
    def change_token(self) -> Hashable:
        return None

    def changed_since(self, token: Hashable) -> bool:
        return True  # no change feed: only a listing can tell

    def wait_for_change(self, token: Hashable, timeout: float) -> bool:
        time.sleep(max(0.0, min(timeout, POLL_INTERVAL)))
        return True


def _older(modified: float | None, seconds: float) -> bool:
    """Whether an object last modified at ``modified`` (unix time) is older than ``seconds``."""
    return modified is not None and time.time() - modified > seconds


def _held(name: str) -> bool:
    """Whether ``name`` is an invisible message name: a receipt, or a delayed send."""
    parsed = names.parse(name)
    return parsed is not None and parsed.state == names.INVISIBLE


def _movable(name: str) -> bool:
    """Whether ``name`` is a message name that a move marker may hide."""
    parsed = names.parse(name)
    return parsed is not None and parsed.state != names.NEW
