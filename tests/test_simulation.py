"""The deterministic simulation (``tests/sim/``): seeded schedules of real vsqs
clients on a simulated bucket, each judged by the oracle.

* Random schedules for S3 (``aws``), Ceph RGW (``ceph``) and GCS (``gcs``)
  semantics run for a fixed budget of seconds each; a failure prints the
  seed, and ``python -m tests.sim SEED --flavour F`` replays it exactly.
* Named regression schedules: the seeds at which the simulation found each
  class of failure of format 1 by itself (``docs/reliability.md``).
* The simulation itself is checked: a seed replays to the same schedule, in
  this process and in another; and the oracle catches the bugs of planted
  mutants of the protocol (a test that could not fail would prove nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from vsqs._store_object import ObjectStore

from .sim.run import Plan, Report, run
from .sim.scheduler import Faults

#: Seconds of random schedules per flavour (``VSQS_SIM_SECONDS`` overrides).
BUDGET = float(os.environ.get("VSQS_SIM_SECONDS", "12"))
#: The first seed of the random schedules (``VSQS_SIM_FIRST_SEED`` overrides: a
#: long run elsewhere explores other seeds than the suite's).
FIRST_SEED = int(os.environ.get("VSQS_SIM_FIRST_SEED", "100000"))
#: Schedules run per flavour however long they take (a busy machine runs
#: fewer in the budget; a stalled schedule trips the scheduler's watchdog).
MIN_SCHEDULES = 20
#: Schedules a planted bug gets to be found in.
MUTANT_SEEDS = 300


def schedules(flavour: str, first: int) -> Iterator[Report]:
    deadline = time.monotonic() + BUDGET
    seed = first
    while seed - first < MIN_SCHEDULES or time.monotonic() < deadline:
        yield run(Plan(seed, flavour))
        seed += 1


@pytest.mark.parametrize("flavour", ["aws", "ceph", "gcs"])
def test_random_schedules_keep_every_promise(flavour: str) -> None:
    failed = []
    for report in schedules(flavour, FIRST_SEED):
        if not report.verdict:
            failed.append(report)
            if len(failed) == 3:
                break
    assert not failed, (
        "\n".join(str(r) for r in failed)
        + f"\nreplay: python -m tests.sim {failed[0].plan.seed} --flavour {flavour}"
    )


#: Seeds at which the simulation, run on format 1 (``docs/reliability.md``
#: says how), broke each promise by itself, and two it found in format 2 while
#: it was written. Format 2 makes other requests, so a seed replays its
#: workload and fault rates here, not the format-1 schedule.
REGRESSIONS = {
    "f1-ack-and-extend-both-won": Plan(97),  # class 1: a heartbeat's extend and an ack
    "f1-acknowledged-came-back": Plan(31),
    "f1-acknowledged-came-back-after-stalls": Plan(319, faults=Faults(stall=0.03)),
    "f1-two-holders": Plan(91),
    "f1-lost": Plan(538),
    "f1-ack-said-stale-but-deleted": Plan(57),
    "f1-leftover-in-the-dead-letter-queue": Plan(32),
    "f1-hidden-for-ever": Plan(150, "gcs"),  # class 7: lost, and left over after the drain
    "f2-slow-extend-finished-by-a-lister": Plan(200475),
    "f2-extend-by-receipt-read-after-its-rename": Plan(300821),
}


@pytest.mark.parametrize("plan", REGRESSIONS.values(), ids=REGRESSIONS.keys())
def test_regression_schedules(plan: Plan) -> None:
    report = run(plan)
    assert report.verdict, str(report)


def test_a_seed_replays_the_same_schedule_here_and_in_another_process() -> None:
    plan = Plan(7)
    first, second = run(plan), run(plan)
    assert first.fingerprint == second.fingerprint and first.steps == second.steps
    out = subprocess.run(
        [sys.executable, "-m", "tests.sim", "7"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert f"schedule {first.fingerprint}" in out.stdout, out.stdout + out.stderr


# ---------------------------------------------------------------- mutants
def _no_marker_for_acks(self: ObjectStore, name: str, *, known: bool = False) -> None:
    """Format 1's one-request ack: delete the name, no commit with the marker."""
    if not self.io.exists(name):
        raise FileNotFoundError(name)
    if self.io.remove([name]):
        raise OSError(name)


#: A planted bug: a patch of vsqs (owner, attribute, replacement), or none and
#: a plan that breaks one of its assumptions instead.
MUTANTS: dict[str, tuple[tuple[object, str, object] | None, Callable[[int], Plan]]] = {
    "one-request-ack": ((ObjectStore, "delete", _no_marker_for_acks), Plan),
    # The client library re-sends an exclusive create whose response was
    # lost: what vsqs's S3 and GCS adapters turn off.
    "retried-creates": (None, lambda seed: Plan(seed, retry_creates=True)),
    # An exclusive create that checks, then writes: moto's, which let two
    # consumers both win one marker under load.
    "torn-creates": (None, lambda seed: Plan(seed, torn=frozenset({"create"}))),
    # A copy that reads its source, then writes its target: a late write
    # brings back a name that moved on (docs/protocol.md).
    "torn-copies": (None, lambda seed: Plan(seed, torn=frozenset({"copy"}))),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_the_simulation_finds_a_planted_bug(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    patch, plan = MUTANTS[mutant]
    if patch is not None:
        monkeypatch.setattr(*patch)
    for seed in range(MUTANT_SEEDS):
        if not run(plan(seed)).verdict:
            return
    pytest.fail(f"{MUTANT_SEEDS} schedules missed the planted bug {mutant!r}")
