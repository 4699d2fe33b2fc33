"""Every backend the tests run on, named once, with what it can do.

A test module picks the backends it needs by capability (:func:`select`), not
by a list of its own; :meth:`Backend.place` opens a fresh queue's storage on
one, which any number of clients then open (:class:`Place`). The conformance
suites' classes name their backend by id and take their ``store`` fixture
from :class:`OnBackend`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

import vsqs
from vsqs.stores._registry import open_store

from .servers import Server


@dataclass(frozen=True)
class Backend:
    """A store the tests run on, and what it can do."""

    #: Test id, and how to name it to :data:`BY_ID`.
    id: str
    #: The store: ``"local"`` (LocalStore), ``"memory"`` (MemoryStore) or
    #: ``"object"`` (ObjectStore, through an fsspec URL).
    kind: str
    #: The session fixture (``tests/support/servers.py``) that serves it.
    server: str | None = None
    #: Its sends can survive a power cut (``Store.durable``).
    durable: bool = False
    #: Durable sends take another path than the others (staged as ``<id>.new``,
    #: fsynced and renamed, against ``O_TMPFILE`` and a link): tests of what a
    #: send writes run both.
    sends_differ_by_durability: bool = False
    #: Receivers learn of arrivals from an ``inotify`` feed, not by listing.
    feed: bool = False
    #: Its queues live in buckets, which vsqs never creates (other object
    #: stores' prefixes always exist): a missing bucket is a missing container.
    bucketed: bool = False
    #: Runs in this process: no server process, no network.
    in_process: bool = True
    #: Runs the exhaustive sweeps (a crash or a fault at every request, every
    #: odd body): the in-process stores and moto. Ceph RGW and fake-gcs-server,
    #: slower servers, run the conformance suites.
    sweeps: bool = True
    #: The backend this one repeats with one option changed (the feed).
    variant_of: str | None = None

    @property
    def object_store(self) -> bool:
        return self.kind == "object"

    def place(self, request: pytest.FixtureRequest, tmp_path: Path) -> Place:
        """A fresh, empty queue's storage (its server comes from its session fixture)."""
        if self.kind == "local":
            return Place(self, str(tmp_path / "q"))
        if self.kind == "memory":
            return Place(self, vsqs.MemoryStore("q"))
        assert self.server is not None
        server: Server = request.getfixturevalue(self.server)
        return Place(self, server.url(), server)


def _local(id: str, *, feed: bool, variant_of: str | None = None) -> Backend:
    """A local directory: durable, and its durable sends stage."""
    return Backend(
        id, "local", durable=True, sends_differ_by_durability=True, feed=feed, variant_of=variant_of
    )


def _served(id: str, *, sweeps: bool) -> Backend:
    """An object store in a bucket of a server process (fixture ``<id>_server``)."""
    return Backend(
        id, "object", f"{id}_server", durable=True, bucketed=True, in_process=False, sweeps=sweeps
    )


#: Every backend, in the order of test ids.
BACKENDS = (
    _local("local", feed=True),
    _local("local-no-feed", feed=False, variant_of="local"),
    Backend("memory", "memory"),
    Backend("memory-url", "object", server="memory_server"),
    _served("s3", sweeps=True),
    _served("ceph", sweeps=False),
    _served("gcs", sweeps=False),
)
BY_ID = {backend.id: backend for backend in BACKENDS}


def select(
    *,
    object_store: bool | None = None,
    in_process: bool | None = None,
    sweeps: bool | None = None,
    variants: bool = True,
) -> list[Backend]:
    """The backends with the given capabilities (``None``: either), in registry order."""
    return [
        b
        for b in BACKENDS
        if object_store in (None, b.object_store)
        and in_process in (None, b.in_process)
        and sweeps in (None, b.sweeps)
        and (variants or b.variant_of is None)
    ]


def params(backends: Iterable[Backend]) -> list[object]:
    """``pytest.param`` per backend, with its id."""
    return [pytest.param(b, id=b.id) for b in backends]


def sweep_cases(
    backends: Iterable[Backend], scenarios: Iterable[str], faults: Iterable[str]
) -> list[object]:
    """``(backend, scenario, fault)`` params of a fault sweep: every scenario
    with every fault on a backend in this process, and on a server each
    scenario once, the faults taking turns (each fault on a share of the
    scenarios), as the server adds its own requests, not other code paths."""
    scenarios, faults = list(scenarios), list(faults)
    cases: list[object] = []
    for b in backends:
        for i, scenario in enumerate(scenarios):
            for fault in faults if b.in_process else [faults[i % len(faults)]]:
                cases.append(pytest.param(b, scenario, fault, id=f"{b.id}-{scenario}-{fault}"))
    return cases


def send_modes(backends: Iterable[Backend]) -> list[object]:
    """``(backend, durable)`` params: every backend with durable sends, and
    those whose other sends differ without as well (``<id>-not-durable``)."""
    modes: list[object] = []
    for b in backends:
        modes.append(pytest.param((b, True), id=b.id))
        if b.sends_differ_by_durability:
            modes.append(pytest.param((b, False), id=f"{b.id}-not-durable"))
    return modes


class Place:
    """One queue's storage on a backend, which clients open as other hosts would.

    Closes what it opened with :meth:`close`.
    """

    def __init__(
        self, backend: Backend, location: str | vsqs.Store, server: Server | None = None
    ) -> None:
        self.backend = backend
        self.location = location  # a path, a URL, or the MemoryStore itself
        self.server = server
        self.storage_options = server.storage_options if server else None
        self._opened: list[vsqs.Store | vsqs.Queue] = []

    def store(self) -> vsqs.Store:
        """A new client's store on it (a ``MemoryStore``'s instance is its namespace)."""
        store = self._open()
        if store is not self.location:
            self._opened.append(store)
        return store

    def _open(self) -> vsqs.Store:
        if isinstance(self.location, vsqs.Store):
            return self.location
        if self.backend.kind == "local":
            return vsqs.LocalStore(self.location, notifications=self.backend.feed)
        return open_store(self.location, self.storage_options)

    def queue(self, **options: Any) -> vsqs.Queue:
        """A new client, opened as a user would: by its path or URL, unless only
        a store says how (a directory without a feed)."""
        if isinstance(self.location, str) and (self.backend.feed or self.backend.object_store):
            queue = vsqs.Queue(self.location, storage_options=self.storage_options, **options)
        else:
            queue = vsqs.Queue(self.store(), **options)
        self._opened.append(queue)
        return queue

    def names(self) -> list[str]:
        """Every name in it now, from a fresh client's listing."""
        store = self._open()
        try:
            return sorted(store.list()) if store.ensure(False) else []
        finally:
            if store is not self.location:
                store.close()

    def missing_store(self) -> vsqs.Store | None:
        """A store of this backend whose container does not exist (``None``: all exist)."""
        if self.server is None:
            missing = self.store().sibling(f"missing-{uuid.uuid4().hex[:12]}")
        elif self.backend.bucketed:
            bucket = f"{self.server.root}-missing-{uuid.uuid4().hex[:8]}"
            missing = open_store(f"{bucket}/q", self.storage_options)
        else:
            return None
        self._opened.append(missing)
        return missing

    def close(self) -> None:
        while self._opened:
            self._opened.pop().close()


class OnBackend:
    """Mixin of a conformance suite class: its ``store`` is on :attr:`backend`."""

    backend: ClassVar[Backend]

    @pytest.fixture
    def place(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
        place = self.backend.place(request, tmp_path)
        yield place
        place.close()

    @pytest.fixture
    def store(self, place: Place) -> vsqs.Store:
        return place.store()

    @pytest.fixture
    def missing_store(self, place: Place) -> vsqs.Store | None:
        return place.missing_store()
