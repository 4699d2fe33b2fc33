"""``vsqs.testing``: the conformance suites ship in the package, and only they need pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_a_known_failure_runs_as_a_strict_xfail(pytester: pytest.Pytester) -> None:
    """A backend lists what it fails; once it passes, the suite says so (XPASS strict)."""
    pytester.makepyfile(
        test_third_party="""
        import pytest
        import vsqs
        from vsqs.testing import StoreTests


        class BlindRename(vsqs.MemoryStore):
            def rename(self, src, dst):  # overwrites: breaks the contract
                data = self.read(src)
                self.delete(src)
                try:
                    self.delete(dst)
                except FileNotFoundError:
                    pass
                self.write_new(dst, data, fsync=False)


        class TestBroken(StoreTests):
            known_failures = {"test_rename_refuses_an_existing_destination": "overwrites"}

            @pytest.fixture
            def store(self):
                return BlindRename()


        class TestFixed(TestBroken):
            @pytest.fixture
            def store(self):
                return vsqs.MemoryStore()
        """
    )
    result = pytester.runpytest("-k", "refuses_an_existing_destination", "-p", "no:cacheprovider")
    result.assert_outcomes(xfailed=1, failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*overwrites*", "FAILED*TestFixed*"])
