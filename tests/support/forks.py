"""Running a test's work in a forked child."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable

import pytest

#: Seconds a forked child (or a thread of a fork test) has before it counts as hung.
BOUND = 60.0


def in_a_child(work: Callable[[], object]) -> None:
    """Fork; the child runs ``work`` and exits 0 (1 if it raised). Fails
    unless the child exits 0 within :data:`BOUND` seconds (a hung one is killed)."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            work()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + BOUND
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not finish within {BOUND:.0f} s: it hung")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child failed"
