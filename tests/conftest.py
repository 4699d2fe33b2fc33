from __future__ import annotations

from collections.abc import Iterator

import pytest

from vsqs.testing import FakeClock

from .support.backends import Backend
from .support.cli import kill_leftovers
from .support.servers import ceph_server, gcs_proxy, gcs_server, memory_server, s3_proxy, s3_server
from .support.spark_cluster import spark_cluster
from .support.spark_session import spark  # noqa: F401 - one SparkSession for every Spark test

#: ``pytester`` runs the shipped conformance suites on a third-party store.
pytest_plugins = ["pytester"]

__all__ = [
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

#: Session fixtures that start a process: a store's server, a JVM.
SERVED = frozenset(
    {"s3_server", "ceph_server", "gcs_server", "s3_proxy", "gcs_proxy", "spark", "spark_cluster"}
)
#: The ones that start a JVM: tests using them run on one xdist worker (``spark``
#: group), so a run starts one SparkSession and one cluster, not one per worker.
JVM = frozenset({"spark", "spark_cluster"})


def served_by_a_process(item: pytest.Item) -> bool:
    """Whether ``item`` needs a server process or Spark: by the fixtures it
    names, the backend it runs on (a parameter, a conformance class's
    ``backend``), or a server fixture it names as a parameter to look up."""
    if SERVED & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    values = list(callspec.params.values()) if callspec else []
    values.append(getattr(item.cls, "backend", None))
    for value in values:
        for v in value if isinstance(value, tuple) else (value,):  # send_modes: (backend, durable)
            if (isinstance(v, Backend) and not v.in_process) or (
                isinstance(v, str) and v in SERVED
            ):
                return True
    return False


@pytest.hookimpl(tryfirst=True)  # before xdist names the groups in node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``slow``: whatever needs a server process or Spark (the fast tier,
    ``-m "not slow"``, runs on in-process stores); ``xdist_group("spark")``:
    whatever needs a JVM."""
    for item in items:
        if served_by_a_process(item):
            item.add_marker(pytest.mark.slow)
        if JVM & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("spark"))


class FastTierGuard:
    """Fails a test not marked ``slow`` that starts a server: the fast tier
    starts none. A plugin of its own: a conftest's ``pytest_fixture_setup``
    is not called for the session fixtures, which the rootdir's node sets up."""

    def __init__(self) -> None:
        self.running: list[pytest.Item] = []  # the test in its setup, call or teardown

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[object]:
        self.running.append(item)
        try:
            return (yield)
        finally:
            self.running.pop()

    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[object]) -> None:
        if fixturedef.argname in SERVED and self.running:
            item = self.running[-1]
            if not item.get_closest_marker("slow"):
                pytest.fail(f"{item.nodeid} starts {fixturedef.argname} but is not marked slow")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FastTierGuard(), "vsqs-fast-tier-guard")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def no_command_left_running() -> Iterator[None]:
    """A console script a test started is gone when the test ends, passed or failed."""
    yield
    kill_leftovers()
