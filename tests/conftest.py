from __future__ import annotations

import pytest

from vsqs.testing import FakeClock

from ._spark_cluster import spark_cluster
from ._spark_session import spark  # noqa: F401 - one SparkSession for every Spark test
from .servers import ceph_server, gcs_server, memory_server, s3_proxy, s3_server

#: ``pytester`` runs the shipped conformance suites on a third-party store.
pytest_plugins = ["pytester"]

__all__ = [
    "FakeClock",
    "ceph_server",
    "clock",
    "gcs_server",
    "memory_server",
    "s3_proxy",
    "s3_server",
    "spark_cluster",
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
