"""The storage interface that every backend implements.

A :class:`Store` is one queue's flat namespace of names, small enough to
implement in an afternoon. The queue logic (:mod:`vsqs._queue` and the
modules it delegates to) is written once on top of it and relies only on
what the capability flags promise.
"""

from __future__ import annotations

import errno
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar, TypeVar

from .. import _forks
from .._names import MsClock, id_of

T = TypeVar("T")

#: Notified by every store's :meth:`Store.wake` (each pause checks its own store's count).
_WAKES = _forks.condition()

#: Name changes (``list`` is a method name inside :class:`Store`).
Changes = list[tuple[str, bool]]
Names = list[str]
#: Per operation of a batch: ``None``, or the ``OSError`` it raised.
Outcomes = list[OSError | None]


def one_by_one(call: Callable[[T], object], items: Iterable[T]) -> Outcomes:
    """Call ``call`` on each item in turn: ``None``, or the ``OSError`` it raised."""
    errors: Outcomes = []
    for item in items:
        try:
            call(item)
        except OSError as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors


def exactly(message_id: str, listed: Iterable[str]) -> list[str]:
    """The names of ``listed`` whose id is ``message_id`` itself, not one it prefixes."""
    return [name for name in listed if id_of(name) == message_id]


class OutcomeUnknown(TimeoutError):
    """A change whose requests were so slow that another client may have
    finished it meanwhile: it may or may not have taken effect."""


class TooLarge(OSError):
    """An object larger than a read's limit (``EFBIG``); it was not read whole."""

    def __init__(self, name: str, size: int | None, limit: int) -> None:
        about = f"{size:,} bytes, " if size is not None else ""
        super().__init__(errno.EFBIG, f"{about}over the limit of {limit:,} bytes", name)
        self.size = size


class Store(ABC):
    """One queue's namespace, as the queue layer needs it.

    The contract every backend keeps:

    * **Names.** Every name passed in is a single component chosen by vsqs: a
      name of the grammar of :mod:`vsqs._names` (``<id>``, ``<id>.new``,
      in-flight names), an origin record's name or the config object, never
      a path. Backends may rely on the grammar (object stores key markers by
      name); untrusted input is validated before it reaches a store.
    * **Errors.** Methods raise the builtin ``FileNotFoundError`` (the name is
      absent: ``read``, ``rename``'s source, ``delete``), ``FileExistsError``,
      ``PermissionError`` or another ``OSError``; never a client library's own
      exception. The queue layer turns them into :class:`vsqs.VsqsError`.
    * **Threads.** A store is shared by the threads of a :class:`vsqs.Queue`:
      every method must be thread-safe, and a batch method may call the
      others from several threads at once. The queue holds one lock of its
      own across each claim's rename, or a batch of claims' ``rename_batch``
      (so one client's threads claim one batch at a time); a store must not
      call back into the queue.
    * **Capabilities** are class attributes (or, where probed, methods) that
      the queue reads instead of asking which backend it is.
    """

    #: ``rename`` is atomic: of any number of racing renames of one name, exactly
    #: one succeeds. A multi-consumer queue needs this (or a probe that says
    #: :meth:`exclusive_claims`).
    atomic_rename: ClassVar[bool] = False
    #: ``write_new(..., fsync=True)``, ``sync_files`` and ``sync_names`` reach
    #: stable storage (a returned send survives a power cut).
    durable: ClassVar[bool] = False
    #: ``list`` yields names in ascending order, lazily: a receiver may stop
    #: reading it once it has enough candidates (object stores, page by page).
    lists_in_order: ClassVar[bool] = False
    #: A rename costs requests to a server (object stores): receivers that lose
    #: a claim spread further over the head of the queue at once, and a Spark
    #: commit renames concurrently. A local rename is a system call.
    renames_cost_requests: ClassVar[bool] = False
    #: The store has no change feed or token (``changed_since`` is always
    #: true): only a listing, a request, tells what changed (object stores).
    #: Receivers then pace their listings themselves, faster while messages come.
    polled: ClassVar[bool] = False
    #: No name may be used twice (object stores, whose emulated renames leave
    #: markers keyed by name): a message moved into the queue is published
    #: under a new versioned name, not under its id again.
    unique_names: ClassVar[bool] = False

    url: str
    #: Ids of messages that the last :meth:`list` so far hid because another
    #: client's move of them (a claim, release or delete) was under way: in
    #: flight for all a receiver can tell, so their groups stay closed
    #: (object stores; nothing elsewhere, where a rename is one step).
    moving: AbstractSet[str] = frozenset()
    #: Calls of :meth:`wake` so far (the default :meth:`wait_for_change` watches it).
    _wakes: int = 0

    # -- container -------------------------------------------------------
    @abstractmethod
    def ensure(self, create: bool) -> bool:
        """Check the queue's container exists, creating it if ``create``.

        Returns whether it exists afterwards. Raises ``NotADirectoryError`` if
        the location holds something that is not a container. A store that
        never creates its container (a bucket) may raise
        :class:`vsqs.QueueNotFound` saying so instead of returning ``False``.
        """

    @abstractmethod
    def sibling(self, name: str) -> Store:
        """The store of the queue called ``name`` next to this one (validated name)."""

    @property
    def protocol(self) -> str:
        """How this store makes claims exclusive (object stores: as probed)."""
        return "atomic-rename" if self.atomic_rename else "none"

    def exclusive_claims(self) -> bool:
        """Whether claims are exclusive here: ``atomic_rename``, or what the
        store's capability probe found (object stores). May make requests."""
        return self.atomic_rename

    @property
    def refusal(self) -> str:
        """Why claims cannot be exclusive here, in the store's own words ('' if unknown)."""
        return ""

    def offset_ms(self, clock: Callable[[], float]) -> int:
        """Milliseconds a client of ``clock`` adds to it to read the time in
        which names are written and judged: 0 here (names are on the hosts'
        clocks, docs/format.md); object stores measure their own clock."""
        return 0

    def ms_clock(self, clock: Callable[[], float]) -> MsClock:
        """``clock`` read as a client of this store writes and judges names
        (here: as it reads; object stores add their offset)."""
        return MsClock(clock)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (file descriptors, sessions). Idempotent."""

    # -- names -----------------------------------------------------------
    @abstractmethod
    def list(self, *, prefix: str = "", settle: bool = False) -> Iterable[str]:
        """Names of the plain objects in the namespace that start with ``prefix``,
        in any order (ascending where :attr:`lists_in_order`).

        Directories, symlinks and other special files are not listed. With
        ``settle``, a message that another client is renaming right now (on
        object stores, a move under way or abandoned) is listed under the name
        it leaves, so that every message is counted once, and the listing
        changes no message's state (it finishes no other client's move).
        """

    def names_of(self, message_id: str) -> Iterable[str]:
        """The names that start with ``message_id``, as a move into this queue
        must see them to tell whether a copy of the message is here: every
        name that is or will be a live name of it, including one another
        client is moving right now (listed under the name it leaves); a name
        whose delete was committed is no copy and may be left out.

        Only names whose id is exactly ``message_id`` (a bundle part's id is
        a prefix of its siblings' ids). This default is ``list(settle=True)``
        with that prefix: stores whose renames are atomic have no move under
        way to show but a split (shown as its targets), though a directory
        listing may miss a name renamed while it runs, docs/format.md.
        """
        return exactly(message_id, self.list(prefix=message_id, settle=True))

    @abstractmethod
    def read(self, name: str) -> bytes:
        """The content of ``name`` (``FileNotFoundError`` if absent); never follows a symlink."""

    def read_limited(self, name: str, limit: int) -> bytes:
        """:meth:`read`, refusing an object of more than ``limit`` bytes with
        :class:`TooLarge`. Stores that can tell the size before reading (a
        local file, a ranged ``GET``) never hold more than ``limit + 1`` bytes
        of it; this default reads it whole first."""
        data = self.read(name)
        if len(data) > limit:
            raise TooLarge(name, len(data), limit)
        return data

    @abstractmethod
    def write_new(self, name: str, data: bytes, *, fsync: bool) -> None:
        """Create ``name`` with ``data``; ``FileExistsError`` if it exists.

        With ``fsync`` the content is on stable storage when this returns (the
        name itself needs :meth:`sync_names`).
        """

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomically rename ``src`` to ``dst`` without replacing ``dst``.

        ``FileNotFoundError`` if ``src`` is gone (another client won the race),
        ``FileExistsError`` if ``dst`` exists, :class:`OutcomeUnknown` if a
        slow request leaves the outcome unknown (object stores). Where
        :attr:`unique_names` holds, the queue never renames onto a name that
        exists, and the store need not check ``dst`` (it costs a request).
        """

    @abstractmethod
    def split(self, src: str, first: str, second: str) -> None:
        """Replace ``src`` by ``first`` and ``second`` in one step that is exclusive
        with every other rename, split or delete of ``src``: of any number of
        them racing, exactly one succeeds, and no listing ever shows ``src``
        together with a target, nor one target without the other once the
        split returned. Both targets are names of the grammar with src's
        35-character core and the same version (src's + 1), absent before,
        each holding src's content. ``FileNotFoundError`` if ``src`` is gone
        (another client moved it: nothing changed); :class:`OutcomeUnknown`
        as for :meth:`rename`.
        """

    @property
    def batch_width(self) -> int:
        """Calls of one batch (sends, claims, acks, reads) worth running at once:
        1 (one after another) where a call is a system call; more where each
        is a round trip (object stores)."""
        return 1

    def sending(self, floor_id: str) -> AbstractContextManager[None]:
        """While this lasts, a sender writes a batch side by side: names of its
        ids above ``floor_id`` (an id it drew for this, never a message's;
        same nonce) must not be listed, so that no receiver takes a later one
        before an earlier one exists. ``FileExistsError`` on entering if the
        floor cannot be used (draw another). Nothing to do where a batch is
        written one name after another."""
        return nullcontext()

    def write_batch(self, items: Sequence[tuple[str, bytes]], *, fsync: bool) -> Outcomes:
        """:meth:`write_new` every ``(name, data)`` of fresh, ascending ids;
        per item ``None`` or the ``OSError`` it raised, in order.

        One after another here; side by side where requests cost round trips
        (inside :meth:`sending`).
        """
        return one_by_one(lambda item: self.write_new(*item, fsync=fsync), items)

    def rename_batch(self, moves: Sequence[tuple[str, str]]) -> Outcomes:
        """:meth:`rename` every ``(src, dst)``; per move ``None`` or the
        ``OSError`` it raised, in order (other errors propagate).

        One after another here; stores whose renames cost requests run them
        side by side. The moves must be of distinct messages.
        """
        return one_by_one(lambda move: self.rename(*move), moves)

    @abstractmethod
    def delete(self, name: str, *, known: bool = False) -> None:
        """Remove ``name``; ``FileNotFoundError`` if it is gone.

        ``known``: the caller made or listed the name (it is no untrusted
        input), which spares object stores a request. A message name that is
        gone still raises; where renames cost requests, a known name outside
        the message grammar (the config object) may be deleted blind.
        """

    def creates_atomically(self, fsync: bool) -> bool:
        """Whether ``write_new(name, data, fsync=fsync)`` shows readers all or nothing.

        When it does (and, with ``fsync``, has also made the name durable), the
        queue publishes a message by creating its final name directly, without
        the format's ``<id>.new`` stage and rename.
        """
        return False

    def take_repairs(self) -> Names:
        """Finish repairs that listings started and return what listings repaired.

        Listings of stores whose renames are not atomic repair what crashed
        clients left (half-done moves, spent markers) as they pass; this
        returns the names repaired or removed since the last call. Stores
        whose renames are atomic leave nothing to repair: ``[]``.
        """
        return []

    def flush(self) -> None:  # noqa: B027 - optional hook
        """Carry out work held back for batching (object stores: deletions of
        acknowledged messages and spent markers)."""

    def sync_files(self, names: Iterable[str]) -> None:  # noqa: B027 - optional hook
        """Make the content of the given new objects durable (one flush where possible)."""

    def sync_names(self) -> None:  # noqa: B027 - optional hook
        """Make preceding creates and renames durable."""

    # -- change notification --------------------------------------------
    @abstractmethod
    def change_token(self) -> Hashable:
        """An opaque token; take it *before* listing."""

    def changed_since(self, token: Hashable) -> bool:
        """Whether the namespace may have changed since ``token`` was taken.

        May answer ``True`` spuriously, never ``False`` after a change.
        """
        return bool(self.change_token() != token)

    def changes(self, name_length: int) -> Changes | None:
        """``(name, appeared)`` for every name without a dot of at most
        ``name_length`` characters that appeared in (created, renamed into) or
        was renamed away from the
        namespace since the previous call, in the order it happened.
        Deletions need not be reported.

        The first call starts the feed and returns ``[]``. ``None`` means the
        store cannot tell (no feed, or the feed lost events): list instead. A
        store that returns lists here reports every change by any client, so
        that a listing taken after one call, updated with the changes of later
        calls, is the namespace.
        """
        return None

    def wait_for_change(self, token: Hashable, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until :meth:`changed_since` holds
        (or, once :meth:`changes` runs, until something changes).

        The default polls adaptively: every 1 ms at first, backing off to 10 ms.
        """
        deadline = time.monotonic() + timeout
        interval = 0.001
        wakes = self._wakes
        while True:
            if self.changed_since(token) or self._wakes != wakes:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(interval, remaining))
            interval = min(interval * 1.5, 0.010)

    def wake(self) -> None:
        """Make the :meth:`wait_for_change` and :meth:`pause` calls under way
        return now (a queue on this store is closing; other waiters wake
        spuriously).

        A store that overrides :meth:`wait_for_change` overrides this too
        (calling this one); otherwise its waits end at their timeout.
        """
        with _WAKES:
            self._wakes += 1
            _WAKES.notify_all()

    def pause(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, or until :meth:`wake` (the wait of a
        receiver on a polled store, where only a listing tells what changed)."""
        deadline = time.monotonic() + timeout
        with _WAKES:
            wakes = self._wakes
            while self._wakes == wakes and (remaining := deadline - time.monotonic()) > 0:
                _WAKES.wait(remaining)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
