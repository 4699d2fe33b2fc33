"""A crash injected before every storage call of every operation, on every backend.

``CrashingStore`` wraps a real store and kills the "process" at its k-th
storage call: that call and every later one raise :class:`Crash` (a
``BaseException``, like a process death, so no ``except Exception`` in the
library can swallow it); a crash during ``write_new`` leaves a torn, half-written
object, as a power cut or kill -9 mid-write would. After the crash, a fresh
client on the same storage recovers (time passes beyond every visibility
timeout and the leftover grace period) and the test checks:

* nothing acknowledged is lost: every message the test did not delete is
  delivered again;
* nothing is duplicated within a queue: no two names of one id, and a
  message is received at most once per visibility period;
* no partial message is ever visible and leftovers are collected;
* a message deleted before the crash never comes back;
* a dead letter always carries its origin record (written before the
  message is published), a message in its source never does, and ``gc()``
  leaves no record whose message is gone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs.testing import FakeClock

from .support.backends import select, send_modes
from .support.crashes import (
    SCENARIOS,
    Crash,
    CrashingStore,
    Expect,
    finish_at_once,
    open_pair,
    recover_and_check,
)


@pytest.fixture(params=send_modes(select(object_store=False, sweeps=True, variants=False)))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[vsqs.Store, bool]]:
    """A store and whether the crashing client sends durably (local stages only then)."""
    kind, durable = request.param
    place = kind.place(request, tmp_path)
    try:
        yield place.store(), durable
    finally:
        place.close()


@pytest.mark.sweep  # a run per storage call
@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_a_crash_before_any_storage_call_loses_nothing(
    backend: tuple[vsqs.Store, bool], scenario: str
) -> None:
    inner_store, durable = backend
    run = SCENARIOS[scenario]
    probe = CrashingStore(inner_store, None)
    clock = FakeClock(time.time())
    healthy, crashing = open_pair(inner_store, probe, clock, durable)
    probe.calls = 0
    run(healthy, crashing, Expect())
    total = probe.calls
    assert total >= 1
    recover_and_check(inner_store, clock, Expect())
    for crash_at in range(1, total + 1):
        clock = FakeClock(time.time())
        crashing_store = CrashingStore(inner_store, None)
        healthy, crashing = open_pair(inner_store, crashing_store, clock, durable)
        crashing_store.crash_at = crash_at
        crashing_store.calls = 0
        expect = Expect()
        with pytest.raises(Crash):
            run(healthy, crashing, expect)
        recover_and_check(inner_store, clock, expect)


@pytest.fixture(autouse=True)
def _finished_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splits and moves left half done by a crash are finished at the next listing."""
    finish_at_once(monkeypatch)
