from __future__ import annotations

from collections.abc import Iterator

import pytest

from vsqs.testing import FakeClock

from ._cli import kill_leftovers
from ._spark_cluster import spark_cluster
from ._spark_session import spark  # noqa: F401 - one SparkSession for every Spark test
from .servers import ceph_server, gcs_proxy, gcs_server, memory_server, s3_proxy, s3_server

#: ``pytester`` runs the shipped conformance suites on a third-party store.
pytest_plugins = ["pytester"]

__all__ = [
    "FakeClock",
    "ceph_server",
    "clock",
    "gcs_proxy",
    "gcs_server",
    "memory_server",
    "no_command_left_running",
    "s3_proxy",
    "s3_server",
    "spark_cluster",
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def no_command_left_running() -> Iterator[None]:
    """A console script a test started is gone when the test ends, passed or failed."""
    yield
    kill_leftovers()
