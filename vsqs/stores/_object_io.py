"""The adapter contract of object stores: one method per request (:class:`ObjectIO`).

:class:`~vsqs.stores._object.ObjectStore` runs the protocol of
``docs/protocol.md`` on the requests an adapter sends: list keys in order,
get, head, exclusive create, server-side copy and (batched) delete. An
adapter per service (``_s3``, ``_gcs``, ``_fsspec``) implements it.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import ClassVar

from .. import _forks
from .. import _meter as meter
from .._fanout import IN_FLIGHT

_COUNT_LOCK = _forks.lock()


def http_date(value: str | None) -> float | None:
    """The unix time of an HTTP ``Date`` header (``None`` if absent or unreadable)."""
    try:
        return parsedate_to_datetime(value).timestamp() if value else None
    except (TypeError, ValueError):
        return None


class PartlyFailed(OSError):
    """Raised inside a batch :meth:`ObjectIO.request` whose response names some
    of its names as failed, so that the request counts as outcome ``error``;
    :attr:`names` are those names (the adapter catches it and returns them)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"{len(names)} names of a batch failed")
        self.names = names


def partly_failed(names: list[str]) -> None:
    """Raise :class:`PartlyFailed` if ``names`` (those a batch response says
    failed) is not empty."""
    if names:
        raise PartlyFailed(names)


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

    @contextmanager
    def request(self, kind: str) -> Iterator[None]:
        """One request of ``kind`` (what runs inside): counted in
        :attr:`requests`, and reported to :mod:`vsqs.metrics` with its outcome."""
        self.count(kind)
        with meter.request(self.url, kind):
            yield

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
