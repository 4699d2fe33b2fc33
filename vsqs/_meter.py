"""The process-wide observer of queue events: what :mod:`vsqs.metrics`
counts, and nothing (one call of an empty method) until it is enabled.

The engine calls ``meter.observer.<event>(...)`` where each event happens:
one place per event (a send, a receive, an ack, a dead letter, a lost claim
race, a store request). :func:`install` swaps the observer for the whole
process, so queues opened before it count from then on too.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Concatenate, ParamSpec, Protocol, TypeVar, cast

R = TypeVar("R")
P = ParamSpec("P")

#: ``now_ms()``: a queue's clock in unix milliseconds (for a message's dwell).
NowMs = Callable[[], int]
#: What a send gives its message: its attributes (``None``: none).
Attributes = Mapping[str, str] | None


class Delivered(Protocol):
    """A received message, as a handler of ``consume`` gets it."""

    @property
    def attributes(self) -> Mapping[str, str]: ...


M = TypeVar("M", bound=Delivered)


class Observer(Protocol):
    """The events of every queue of the process; ``url`` is the queue's
    :attr:`vsqs.Queue.url`. ``started`` is a :meth:`clock` reading taken
    when the operation began."""

    def clock(self) -> float: ...

    def sent(self, url: str, operation: str, count: int, started: float) -> None: ...

    def received(self, url: str, count: int, started: float) -> None: ...

    def deleted(self, url: str, receipt: str, now_ms: NowMs) -> None: ...

    def operation(self, url: str, name: str, started: float) -> None: ...

    def dead_lettered(self, url: str) -> None: ...

    def claim_conflict(self, url: str) -> None: ...

    def request(self, url: str, operation: str, outcome: str) -> None: ...

    def groups_in_flight(self, url: str, count: int) -> None: ...

    def traced(self, attributes: Attributes) -> Attributes: ...

    def handling(self, url: str, handler: Callable[[M], object]) -> Callable[[M], object]: ...


class Off:
    """The observer of a process that enabled no metrics: every event is a no-op."""

    def clock(self) -> float:
        return 0.0

    def sent(self, url: str, operation: str, count: int, started: float) -> None:
        pass

    def received(self, url: str, count: int, started: float) -> None:
        pass

    def deleted(self, url: str, receipt: str, now_ms: NowMs) -> None:
        pass

    def operation(self, url: str, name: str, started: float) -> None:
        pass

    def dead_lettered(self, url: str) -> None:
        pass

    def claim_conflict(self, url: str) -> None:
        pass

    def request(self, url: str, operation: str, outcome: str) -> None:
        pass

    def groups_in_flight(self, url: str, count: int) -> None:
        pass

    def traced(self, attributes: Attributes) -> Attributes:
        return attributes

    def handling(self, url: str, handler: Callable[[M], object]) -> Callable[[M], object]:
        return handler


OFF = Off()
#: The observer every queue of the process reports to.
observer: Observer = OFF


def install(new: Observer) -> None:
    """Make ``new`` the observer of every queue of the process (:data:`OFF`:
    none); the :func:`metered` methods count from then on (or no more)."""
    global observer
    observer = new
    for each in _metered:
        each.switch()


def now() -> float:
    """A reading of the clock observers time operations on (seconds)."""
    return time.perf_counter()


def outcome(error: BaseException | None) -> str:
    """The ``outcome`` label of a store request that raised ``error``."""
    if error is None:
        return "ok"
    if isinstance(error, FileNotFoundError):
        return "not_found"
    if isinstance(error, FileExistsError):
        return "exists"
    return "error"


@contextmanager
def request(url: str, operation: str) -> Iterator[None]:
    """Report one store request of ``url`` with its outcome (what it raised)."""
    try:
        yield
    except BaseException as exc:
        observer.request(url, operation, outcome(exc))
        raise
    observer.request(url, operation, "ok")


class Located(Protocol):
    """A store: what it reports its requests under."""

    url: str


S = TypeVar("S", bound=Located)


class _Metered:
    """A store method that :func:`metered` reports: its class holds the plain
    method while :data:`observer` is :data:`OFF`, the counting one otherwise
    (:func:`install` switches every one)."""

    __slots__ = ("counting", "name", "owner", "plain")

    def __init__(self, plain: Callable[..., object], counting: Callable[..., object]) -> None:
        self.plain, self.counting = plain, counting
        self.owner: type | None = None
        self.name = plain.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner, self.name = owner, name
        _metered.append(self)
        self.switch()

    def switch(self) -> None:
        """Put the method that suits :data:`observer` in its class."""
        setattr(self.owner, self.name, self.plain if observer is OFF else self.counting)


_metered: list[_Metered] = []


def metered(
    operation: str,
) -> Callable[[Callable[Concatenate[S, P], R]], Callable[Concatenate[S, P], R]]:
    """Report each call of a store's method (in a class body) as one request
    ``operation``; while metrics are off, the method is called as it is, at
    no cost (:func:`install` switches it)."""

    def decorate(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
        def counted(store: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            with request(store.url, operation):
                return method(store, *args, **kwargs)

        functools.update_wrapper(counted, method)
        return cast("Callable[Concatenate[S, P], R]", _Metered(method, counted))

    return decorate
