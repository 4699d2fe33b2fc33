"""What both conformance suites share: the fixtures a backend provides or gets."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest

from ..stores._base import Store
from ._clock import FakeClock


class Suite:
    """Base of :class:`~vsqs.testing.QueueTests` and :class:`~vsqs.testing.StoreTests`.

    A backend's test class provides the ``store`` fixture: a fresh, empty
    :class:`vsqs.Store` (its container need not exist yet) whose ``sibling()``
    reaches other queues of the same backend.
    """

    #: Tests this backend is known to fail, by test function name, with the
    #: reason; they run as strict ``xfail``, so a fix shows up as a failure.
    known_failures: ClassVar[Mapping[str, str]] = {}

    @pytest.fixture
    def store(self) -> Store:
        raise NotImplementedError("a backend's test class provides the store fixture")

    @pytest.fixture
    def clock(self) -> FakeClock:
        """A fake clock at a fixed time (2025-06-15), moved only by ``advance``."""
        return FakeClock()

    @pytest.fixture(autouse=True)
    def _mark_known_failure(self, request: pytest.FixtureRequest) -> None:
        reason = self.known_failures.get(request.node.originalname)
        if reason is not None:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def drop(store: Store, *names: str, body: bytes = b"dropped") -> None:
    """Put objects under raw ``names`` into ``store``, as a hand, another tool
    or another client's bug could: no queue checks them on the way in."""
    for name in names:
        store.write_new(name, body, fsync=False)


@contextmanager
def counting(store: Store, *methods: str) -> Iterator[list[str]]:
    """Record every call of the given ``store`` methods until the block ends:
    yields the list of the names of the methods called, in order."""
    calls: list[str] = []

    def counted(method: str) -> Callable[..., Any]:
        real = getattr(store, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(method)
            return real(*args, **kwargs)

        return call

    for method in methods:
        setattr(store, method, counted(method))
    try:
        yield calls
    finally:
        for method in methods:
            delattr(store, method)


def listing(store: Store) -> list[str]:
    """Every name in ``store``, sorted."""
    return sorted(store.list())


@contextmanager
def failing(store: Store, method: str, fails: Callable[[str], bool]) -> Iterator[list[str]]:
    """Make ``store.<method>(name, ...)`` raise ``EIO`` for the names ``fails``
    picks (as a disk or a connection that fails under a client), until the
    block ends; the others go through. Yields the names it failed, in order."""
    real = getattr(store, method)
    failed: list[str] = []

    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        if fails(name):
            failed.append(name)
            raise OSError(errno.EIO, f"injected: {method} failed", name)
        return real(name, *args, **kwargs)

    setattr(store, method, call)
    try:
        yield failed
    finally:
        delattr(store, method)  # the class's method again
