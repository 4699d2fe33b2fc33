"""The test project's tasks. Each writes one line per run (pid, time, what)
to a file under ``VSQS_DJANGO_OUT``, so runs are counted even after a
``kill -9``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task

#: A task that finds no release file after this long fails the test loudly.
STALL = 120.0


def out() -> Path:
    return Path(os.environ.get("VSQS_DJANGO_OUT", "."))


def note(key: str, what: str = "") -> None:
    """Append one line (pid, time, ``what``) to ``OUT/key``: one write per run."""
    with open(out() / key, "a") as f:
        f.write(f"{os.getpid()} {time.time()} {what}\n")


@task
def record(key: str) -> str:
    note(key)
    return key


@task(queue_name="urgent")
def urgent(key: str) -> str:
    note(key)
    return key


@task
def add(x: int, y: int) -> dict[str, Any]:
    return {"sum": x + y, "parts": (x, y)}


@task
def fail(key: str) -> None:
    note(key)
    raise ValueError(f"failed on purpose: {key}")


@task
def block(key: str) -> str:
    """Say it started, then wait for ``OUT/release`` before it records its run."""
    note(key + ".started")
    give_up = time.monotonic() + STALL
    while not (out() / "release").exists():
        if time.monotonic() > give_up:
            raise RuntimeError("no release file")
        time.sleep(0.05)
    note(key)
    return key


@task(takes_context=True)
def attempt(context: Any, key: str) -> int:
    note(key, str(context.attempt))
    return int(context.attempt)


@task
async def later(key: str) -> str:
    note(key)
    return key


@task
def unjsonable() -> object:
    return object()
