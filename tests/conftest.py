from __future__ import annotations

import pytest

from .servers import ceph_server, gcs_server, memory_server, s3_server

__all__ = ["ceph_server", "clock", "gcs_server", "memory_server", "s3_server"]


class FakeClock:
    """An injectable clock (unix seconds) that only moves when told to."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
