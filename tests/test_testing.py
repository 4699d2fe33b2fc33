"""``vsqs.testing``: the conformance suites ship in the package, and only they need pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import vsqs
import vsqs.testing

#: Where the ``vsqs`` under test lives, for child interpreters.
SOURCE = str(Path(vsqs.__file__).resolve().parents[1])


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SOURCE}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_importing_vsqs_does_not_import_pytest() -> None:
    out = run_python("import sys, vsqs, vsqs.aio; print('pytest' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_without_pytest_vsqs_testing_says_what_to_install() -> None:
    code = "import sys; sys.modules['pytest'] = None; import vsqs.testing"
    out = run_python(code)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last == "ImportError: vsqs.testing needs pytest: pip install 'vsqs[test]'"


def test_the_suites_and_the_clock_are_public() -> None:
    assert vsqs.testing.__all__ == ["FakeClock", "QueueTests", "StoreTests"]
    assert vsqs.testing.QueueTests.__module__ == "vsqs.testing._queue_tests"
    clock = vsqs.testing.FakeClock(10.0)
    clock.advance(2.5)
    assert clock() == 12.5
