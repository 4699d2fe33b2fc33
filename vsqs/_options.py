"""The options of a ``consume`` (sync, asyncio and Spark alike) and its retry policy.

Each setting a ``consume`` reads comes from the first of: the argument of the
call, the queue's config (which its creator wrote from its own arguments,
else the ``VSQS_*`` environment variables, else the built-in defaults:
:meth:`QueueConfig.create`; a change made since applies from the client's
next look at it), and for the settings a config does not hold, their
defaults. :meth:`ConsumeOptions.resolve` is where a call's
arguments meet the config: every face builds one :class:`ConsumeOptions`
from its keyword arguments and runs the :class:`ConsumePlan` it resolves to.

These classes are not exported: each face's keyword arguments are its API,
and an ``options=`` beside them would be a second way to say the same thing,
with a rule of its own for which one wins.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._config import (
    DEFAULT_MAX_RETRY_DELAY,
    DEFAULT_RETRY_DELAY,
    QueueConfig,
    positive_int,
    retry_delays,
    retry_seconds,
    seconds,
)
from ._errors import InvalidArgument

if TYPE_CHECKING:
    import asyncio
    import threading

    #: What stops a ``consume`` once set: a ``threading.Event`` (sync) or an
    #: ``asyncio.Event`` (:mod:`vsqs.aio`).
    Stop = threading.Event | asyncio.Event


@dataclass(frozen=True)
class RetryPolicy:
    """How long a message whose handler failed stays hidden before it is offered again.

    Exponential with "equal jitter": for a message received ``n`` times,
    ``step = min(max_retry_delay, retry_delay * 2 ** (n - 1))`` and the delay
    is ``step / 2 + jitter() * step / 2``, so it is never shorter than half
    the step (and never than ``retry_delay / 2``): a failing message cannot
    spin. ``jitter`` returns a float in [0, 1) (``random.random`` unless
    given, e.g. ``random.Random(seed).random`` for repeatable delays).
    Bad values raise :class:`InvalidArgument`: ``retry_delay`` under 0.01 s,
    a ``max_retry_delay`` below it, a ``jitter`` that is not callable.
    """

    retry_delay: float = DEFAULT_RETRY_DELAY
    max_retry_delay: float = DEFAULT_MAX_RETRY_DELAY
    jitter: Callable[[], float] = random.random

    def __post_init__(self) -> None:
        retry_delays(self.retry_delay, self.max_retry_delay)
        if not callable(self.jitter):
            raise InvalidArgument(
                f"jitter must be a function returning a float in [0, 1), "
                f"not {type(self.jitter).__name__}"
            )

    def delay(self, receive_count: int) -> float:
        """Seconds to keep a message received ``receive_count`` times hidden after a failure."""
        doublings = min(max(receive_count, 1) - 1, 64)  # beyond 64 the cap rules anyway
        step = min(self.max_retry_delay, self.retry_delay * 2.0**doublings)
        return step / 2 + self.jitter() * step / 2


@dataclass(frozen=True)
class ConsumePlan:
    """What one ``consume`` runs with (:meth:`ConsumeOptions.resolve`): each
    setting given, else the queue's, read from ``config()`` at each use, so
    that a change of the queue's settings reaches a ``consume`` under way."""

    options: ConsumeOptions
    config: Callable[[], QueueConfig]
    #: The retry policy at the start: kept if a change makes the one of the
    #: settings given and the queue's new ones invalid (a cap below the delay).
    first_retry: RetryPolicy

    @property
    def visibility_timeout(self) -> float:
        given = self.options.visibility_timeout
        return self.config().visibility_timeout if given is None else float(given)

    @property
    def retry(self) -> RetryPolicy:
        try:
            return self.options.retry_policy(self.config())
        except InvalidArgument:
            return self.first_retry

    @property
    def max_messages(self) -> int | None:
        return self.options.max_messages

    @property
    def idle_timeout(self) -> float | None:
        given = self.options.idle_timeout
        return None if given is None else float(given)

    @property
    def stop(self) -> Stop | None:
        return self.options.stop

    @property
    def concurrency(self) -> int:
        return 1 if self.options.concurrency is None else self.options.concurrency


@dataclass(frozen=True)
class ConsumeOptions:
    """The keyword arguments of ``consume`` as given (``None``: not given).

    ``visibility_timeout``, ``retry_delay`` and ``max_retry_delay`` not given
    are the queue's; ``jitter`` not given is ``random.random``;
    ``max_messages``, ``idle_timeout`` and ``stop`` not given set no limit;
    ``concurrency`` (handlers at once) is 1 unless given.
    Each value given is checked here, before anything is received: a bad one
    raises a one-line :class:`InvalidArgument` naming it.
    """

    visibility_timeout: float | None = None
    max_messages: int | None = None
    idle_timeout: float | None = None
    stop: Stop | None = None
    retry_delay: float | None = None
    max_retry_delay: float | None = None
    jitter: Callable[[], float] | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.visibility_timeout is not None:
            seconds(self.visibility_timeout, "visibility_timeout")
        if self.idle_timeout is not None:
            seconds(self.idle_timeout, "idle_timeout")
        count = self.max_messages
        if count is not None and (type(count) is not int or count < 0):  # no bool, no float
            raise InvalidArgument(f"max_messages must be an int of at least 0, not {count!r}")
        if self.concurrency is not None:
            positive_int(self.concurrency, "concurrency")
        if self.stop is not None and not callable(getattr(self.stop, "is_set", None)):
            raise InvalidArgument(f"stop must be an Event, not {type(self.stop).__name__}")
        for name in ("retry_delay", "max_retry_delay"):
            if (value := getattr(self, name)) is not None:
                retry_seconds(value, name)

    def retry_policy(self, config: QueueConfig) -> RetryPolicy:
        """The retry delays given here, else ``config``'s."""
        return RetryPolicy(
            config.retry_delay if self.retry_delay is None else self.retry_delay,
            config.max_retry_delay if self.max_retry_delay is None else self.max_retry_delay,
            random.random if self.jitter is None else self.jitter,
        )

    def resolve(self, config: QueueConfig | Callable[[], QueueConfig]) -> ConsumePlan:
        """The plan of a ``consume`` of the queue whose config is ``config``
        (or, at each use, what ``config()`` returns): each setting given
        here, else the config's. A ``max_retry_delay`` that ends up below the
        ``retry_delay`` is an :class:`InvalidArgument`."""
        current = config if callable(config) else lambda: config
        return ConsumePlan(self, current, self.retry_policy(current()))


__all__ = ["ConsumeOptions", "ConsumePlan", "RetryPolicy"]
