"""A Celery app on the vsqs transport, for ``tests/test_kombu_celery.py``.

Configured by environment variables, so that the test process and the
``celery worker`` processes it starts share one broker: ``VSQS_CELERY_ROOT``
(the queue root, a vsqs location), ``VSQS_CELERY_OUT`` (a directory where the
tasks write what they did, one line per run, so runs are counted even after a
``kill -9``), ``VSQS_CELERY_VT`` (the visibility timeout) and
``VSQS_CELERY_STORAGE`` (storage options, JSON).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

import vsqs.kombu  # noqa: F401  (registers the transport alias "vsqs")

OUT = Path(os.environ.get("VSQS_CELERY_OUT", "."))
#: A task that finds no release file after this long fails the test loudly.
STALL = 120.0
(OUT / "results").mkdir(parents=True, exist_ok=True)  # Celery's file backend needs it

app = Celery("vsqs_test")
app.conf.update(
    broker_url="vsqs+" + os.environ.get("VSQS_CELERY_ROOT", "memory://celery"),
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("VSQS_CELERY_VT", "1800")),
        "storage_options": json.loads(os.environ.get("VSQS_CELERY_STORAGE", "null")),
        "wait": 0.5,
    },
    result_backend=f"file://{OUT / 'results'}",
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_enable_remote_control=False,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


def note(key: str, what: str = "") -> None:
    """Append one line (pid, time, ``what``) to ``OUT/key``: one write per run."""
    with open(OUT / key, "a") as f:
        f.write(f"{os.getpid()} {time.time()} {what}\n")


@app.task
def record(key: str) -> str:
    note(key)
    return key


@app.task
def block(key: str) -> str:
    """Say it started, then wait for ``OUT/release`` before it records its run."""
    note(key + ".started")
    give_up = time.monotonic() + STALL
    while not (OUT / "release").exists():
        if time.monotonic() > give_up:
            raise RuntimeError("no release file")
        time.sleep(0.05)
    note(key)
    return key


@app.task(bind=True, max_retries=5)
def flaky(self: Any, key: str, failures: int) -> str:
    """Fail ``failures`` times (each retried by Celery's own retry), then succeed."""
    note(key + ".attempts", str(self.request.retries))
    if self.request.retries < failures:
        raise self.retry(countdown=0)
    note(key)
    return key
