"""Injected clocks of hosts that disagree: one true time in whole ms that
moves only when a test says, and each host's clock a fixed skew from it."""

from __future__ import annotations

VT_MS = 10_000  # the queue's visibility timeout


START_MS = 1_750_000_000_000  # ms / 1000 * 1000 round-trips exactly here (tests/test_clock_skew.py)


class TrueTime:
    """The true time of a test in whole ms; it moves only when told to."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.ms = start_ms

    def advance(self, ms: int) -> None:
        self.ms += ms

    def host(self, skew_ms: int) -> HostClock:
        """The clock of a host that runs ``skew_ms`` ahead of the true time (behind if < 0)."""
        return HostClock(self, skew_ms)


class HostClock:
    """An injectable ``clock=``: the true time plus this host's fixed skew."""

    def __init__(self, true: TrueTime, skew_ms: int) -> None:
        self.true, self.skew_ms = true, skew_ms

    @property
    def ms(self) -> int:
        return self.true.ms + self.skew_ms

    def __call__(self) -> float:
        return self.ms / 1000
