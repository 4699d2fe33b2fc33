"""The test tiers the README promises: a ``-m`` that names an undeclared marker
is refused, the cost markers follow the fixtures a test uses and imply
``slow`` (so ``-m "not slow"`` starts no server), and a test that starts a
server or a JVM without its marker fails. Each runs pytest in a process of
its own, with this checkout's settings and ``tests/conftest.py``, on a module
written here."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
#: Three pytest processes, each importing what conftest.py imports (Spark's Python side).
pytestmark = pytest.mark.slow

MODULE = """
import pytest

def test_on_a_server(s3_server):
    pass

def test_on_spark(spark):
    pass

@pytest.mark.sweep
def test_a_sweep():
    pass

def test_in_process():
    pass

def test_a_server_looked_up_unmarked(request):
    request.getfixturevalue("s3_server")
"""


#: A plugin that prints each test's markers once they are all set.
PROBE = """
def pytest_collection_finish(session):
    for item in session.items:
        print("marks", item.name, *sorted({m.name for m in item.iter_markers()}))
"""


def pytest_in(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on ``MODULE``, in a process of its own, in one worker."""
    module = tmp_path / "test_tiered.py"
    module.write_text(MODULE)
    (tmp_path / "tiers_probe.py").write_text(PROBE)
    command = [sys.executable, "-m", "pytest", "-c", str(CHECKOUT / "pyproject.toml")]
    command += ["--rootdir", str(CHECKOUT), "-p", "tests.conftest", "-n", "0", "-q", *args]
    command += ["-W", "error::pytest.PytestUnknownMarkWarning"]  # every marker is declared
    return subprocess.run(
        [*command, str(module)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKOUT), str(tmp_path)])},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_mark_expression_naming_an_undeclared_marker_is_a_usage_error(tmp_path: Path) -> None:
    done = pytest_in(tmp_path, "--collect-only", "-m", "not slwo")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "-m names undeclared markers: slwo" in done.stderr


def test_the_cost_markers_follow_the_fixtures_and_each_implies_slow(tmp_path: Path) -> None:
    tiers: dict[str, set[str]] = {}
    done = pytest_in(tmp_path, "--collect-only", "-p", "tiers_probe")
    assert done.returncode == 0, done.stdout + done.stderr
    for line in done.stdout.splitlines():
        if line.startswith("marks "):
            _, test, *marks = line.split()
            for mark in marks:
                tiers.setdefault(mark, set()).add(test)
    assert tiers["servers"] == {"test_on_a_server"}
    assert tiers["spark"] == {"test_on_spark"}
    assert tiers["sweep"] == {"test_a_sweep"}
    assert tiers["slow"] == {"test_on_a_server", "test_on_spark", "test_a_sweep"}


def test_a_test_that_starts_a_server_without_its_marker_fails_before_it_starts(
    tmp_path: Path,
) -> None:
    done = pytest_in(tmp_path, "-k", "unmarked", "-p", "no:cacheprovider")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_a_server_looked_up_unmarked starts s3_server but is not marked servers" in (
        done.stdout
    )


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/support/: a test module (or conftest.py)
    imported from another module of tests/ would run or read its tests too."""
    tests = CHECKOUT / "tests"
    found = []
    for path in tests.rglob("*.py"):
        package = path.relative_to(CHECKOUT).parent.parts
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = list(package[: len(package) - node.level + 1]) if node.level else []
                modules = [".".join([*base, node.module or ""]).strip(".")]
                modules += [f"{modules[0]}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                last = module.rpartition(".")[2]
                if module.startswith("tests") and (last.startswith("test_") or last == "conftest"):
                    found.append(f"{path.relative_to(CHECKOUT)}:{node.lineno} imports {module}")
    assert not found, "\n".join(found)
