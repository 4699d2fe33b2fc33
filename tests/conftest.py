from __future__ import annotations

import re
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

#: Session fixtures that start a store's server process (or a proxy to one).
SERVERS = frozenset({"s3_server", "ceph_server", "gcs_server", "s3_proxy", "gcs_proxy"})
#: The ones that start a JVM: tests using them run on one xdist worker (``spark``
#: group), so a run starts one SparkSession and one cluster, not one per worker.
JVM = frozenset({"spark", "spark_cluster"})
#: Markers of a cost; each implies ``slow``, so ``-m "not slow"`` (the fast
#: tier) leaves them all out (pyproject.toml declares them).
COSTS = ("servers", "spark", "processes", "sweep")


def named(item: pytest.Item) -> set[str]:
    """What ``item`` names that may start a process: its fixtures, and the
    backends it runs on (a parameter, a conformance class's ``backend``) and
    server fixtures it names as parameters to look up, by fixture name."""
    found = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    values = list(callspec.params.values()) if callspec else []
    values.append(getattr(item.cls, "backend", None))
    for value in values:
        for v in value if isinstance(value, tuple) else (value,):  # send_modes: (backend, durable)
            if isinstance(v, Backend) and v.server:
                found.add(v.server)
            elif isinstance(v, str):
                found.add(v)
    return found


@pytest.hookimpl(tryfirst=True)  # before xdist names the groups in node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``servers`` and ``spark`` by what a test names (``named``); ``slow``
    for every cost marker, set here or by the test; ``xdist_group("spark")``:
    whatever needs Spark, so one worker starts it. Then the modules with a
    slow test run first (each module's tests stay together): a long test
    left for the end of a run keeps one worker busy while the other has
    nothing left to do."""
    for item in items:
        uses = named(item)
        if SERVERS & uses:
            item.add_marker(pytest.mark.servers)
        if JVM & uses:
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.xdist_group("spark"))
        if any(item.get_closest_marker(cost) for cost in COSTS):
            item.add_marker(pytest.mark.slow)
    long_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in long_modules)


class CostGuard:
    """Fails a test that starts a server not marked ``servers``, or a JVM not
    marked ``spark``: the markers say what a tier starts. A plugin of its own: a
    conftest's ``pytest_fixture_setup`` is not called for the session
    fixtures, which the rootdir's node sets up."""

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
        marker = "servers" if fixturedef.argname in SERVERS else "spark"
        if fixturedef.argname in SERVERS | JVM and self.running:
            item = self.running[-1]
            if not item.get_closest_marker(marker):
                pytest.fail(f"{item.nodeid} starts {fixturedef.argname} but is not marked {marker}")


def pytest_configure(config: pytest.Config) -> None:
    """A ``-m`` expression names only declared markers: a misspelt one
    (``-m "not slwo"``) would select every test, or none, without a word."""
    config.pluginmanager.register(CostGuard(), "vsqs-cost-guard")
    declared = {line.split(":")[0].split("(")[0] for line in config.getini("markers")}
    expression = re.sub(r"\([^)]*\)", "", config.option.markexpr or "")  # no arguments
    unknown = set(re.findall(r"[A-Za-z_]\w*", expression)) - {"and", "or", "not"} - declared
    if unknown:
        raise pytest.UsageError(f"-m names undeclared markers: {', '.join(sorted(unknown))}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def no_command_left_running() -> Iterator[None]:
    """A console script a test started is gone when the test ends, passed or failed."""
    yield
    kill_leftovers()
