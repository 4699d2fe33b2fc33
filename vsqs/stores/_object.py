"""Queues on object stores: an exactly-once rename built from exclusive creates.

Object stores (S3, GCS, ``memory://`` and other fsspec filesystems) have no
rename. :class:`ObjectStore` emulates the no-replace atomic rename the queue
needs on top of the requests an :class:`~vsqs.stores._object_io.ObjectIO`
adapter sends. ``docs/protocol.md`` analyses it request by request and window
by window; the code is laid out as it is:

* :mod:`~vsqs.stores._object_io`: the adapter contract, one method per request;
* :mod:`~vsqs.stores._probe`: capabilities and the probe that finds them;
* :mod:`~vsqs.stores._moves`: commit (the move marker), copy, delete, spend,
  and finishing another client's committed move;
* :mod:`~vsqs.stores._listing`: what a listing shows, one settled name per message;
* this module: the :class:`~vsqs.stores._base.Store` on top of them (creates,
  batches being sent, the store's clock).

It rests on three invariants of ``rename(S, D)`` (:mod:`~vsqs.stores._moves`):

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
import secrets
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager

from .. import _names as names
from .._errors import QueueNotFound, storage_errors
from .._fanout import fan_out
from ._base import Outcomes
from ._clock import RESOLUTION, StoreClock, StoreOffset, store_offset
from ._listing import SENDING_SUFFIX, ObjectListing
from ._moves import os_error
from ._object_io import ObjectIO
from ._probe import PROBE_PREFIX, Capabilities, probed

log = logging.getLogger("vsqs")


class ObjectStore(ObjectListing):
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
        steady = monotonic or (time.monotonic if clock is time.time else clock)
        super().__init__(io, monotonic or time.monotonic, StoreClock(clock, steady))
        self._clock = clock
        self._monotonic = monotonic
        self._offsets: dict[Callable[[], float], StoreOffset] = {}

    # ---------------------------------------------------------------- probe
    @property
    def capabilities(self) -> Capabilities:
        """The probe's findings (:func:`~vsqs.stores._probe.probed`), probed at the
        first call per bucket and process."""
        return probed(self.io)

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
        return [os_error(future) for future in writes]

    # -------------------------------------------------------------- changes
    def change_token(self) -> Hashable:
        return None

    def changed_since(self, token: Hashable) -> bool:
        return True  # no change feed: only a listing can tell
