"""A clock for tests that moves only when told to."""

from __future__ import annotations


class FakeClock:
    """An injectable ``clock=`` (unix seconds) that only moves when told to.

    ``vsqs.Queue(store, clock=FakeClock())`` makes every expiry, delay and id
    time of that client exact and repeatable: nothing expires by itself.
    """

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
