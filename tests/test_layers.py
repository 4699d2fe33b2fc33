"""The layer rule of issue 28 holds, and its checker would see it broken.

The rule is import-linter's contracts in pyproject.toml (`lint-imports`, run
by .ci/run before the tests): faces > operations > facade > engine > settings
> stores > base, no import circle, no module importing the package root. Each
mutant below adds one forbidden import to a copy of the package: the check
must fail on it, naming the import, so a contract that checks nothing fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vsqs"
MAX_LINES = 500

#: Runs the `lint-imports` console script's own entry point with this Python.
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache", "--no-logo"],
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(project)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_package_keeps_its_contracts() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the package and of the contracts, to break."""
    shutil.copytree(PACKAGE, tmp_path / "vsqs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


MUTANTS = {
    # the engine naming the facade, if only for a type
    "upward, type-only": (
        "_message.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._queue import Queue\n",
        "vsqs._message -> vsqs._queue",
    ),
    # the stores wing reaching up into the engine
    "upward, across wings": (
        "stores/_memory.py",
        "from .. import _publish\n",
        "vsqs.stores._memory -> vsqs._publish",
    ),
    # a face importing the package root instead of the defining module
    "the package root": ("spark/_read.py", "import vsqs\n", "vsqs.spark._read -> vsqs"),
    # two modules of one layer (":") importing each other (_publish imports _inspect)
    "a circle in a layer": ("_inspect.py", "from . import _publish\n", "no import circle"),
    # two faces ("|") importing each other
    "between faces": ("spark/_read.py", "from .. import aio\n", "vsqs.spark._read -> vsqs.aio"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_lint_imports_fails_on_a_forbidden_import(project: Path, mutant: str) -> None:
    module, line, named = MUTANTS[mutant]
    path = project / "vsqs" / module
    text = path.read_text()
    header_end = text.index("from __future__ import annotations\n") + len(
        "from __future__ import annotations\n"
    )
    path.write_text(text[:header_end] + line + text[header_end:])
    done = lint_imports(project)
    assert done.returncode != 0, done.stdout
    assert named in done.stdout.split("Broken contracts")[-1], done.stdout


def test_a_module_left_out_of_the_layers_fails(project: Path) -> None:
    """The contract is exhaustive: a new module must be given its layer."""
    (project / "vsqs" / "_nowhere.py").write_text('"""In no layer."""\n')
    done = lint_imports(project)
    assert done.returncode != 0, done.stdout
    assert "vsqs._nowhere" in done.stdout, done.stdout


def test_no_module_is_over_500_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert sizes  # the walk found the package
    over = {path: lines for path, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines: {over}"
