"""Celery throughput: empty tasks through a worker with 2 prefork processes,
vsqs's transport (``vsqs+file://``: persistent tasks, Celery's default, each
send synced to disk; and transient ones, ``task_default_delivery_mode =
"transient"``, not synced) against kombu's ``filesystem://`` transport, in
the same run on the same disk.

Each round starts one ``celery worker -c 2`` on a fresh directory, waits
until it ran a first task, then times N tasks from their first publish (one
client, ``delay`` in a loop) until the last has run (each task appends one
byte to a file; the worker's late acks included). The best of ``--repeat``
rounds of each variant, and the ratios to filesystem://, are printed.

    python benchmarks/bench_celery.py            # 2 000 tasks, 3 rounds each
    python benchmarks/bench_celery.py --quick    # 200 tasks, 1 round each
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 600.0

APP = """
import json, os
import vsqs.kombu
from celery import Celery

app = Celery("bench")
app.conf.update(
    broker_url=os.environ["BENCH_BROKER"],
    broker_transport_options=json.loads(os.environ["BENCH_OPTIONS"]),
    task_acks_late=True,
    task_default_delivery_mode=os.environ["BENCH_DELIVERY"],
    worker_hijack_root_logger=False,
)
DONE = os.open(os.environ["BENCH_DONE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)


@app.task
def empty():
    os.write(DONE, b"x")
"""


#: The variants: vsqs with Celery's default persistent tasks (every send
#: synced to disk), vsqs with transient tasks (not synced: the durability of
#: kombu's filesystem transport, which syncs nothing), and kombu's filesystem
#: transport (with Celery's default, which it does not sync).
VARIANTS = ("vsqs", "vsqs-transient", "filesystem")


def broker(variant: str, where: Path) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The broker URL, transport options and environment of a variant, under ``where``."""
    delivery = {"BENCH_DELIVERY": "transient" if variant == "vsqs-transient" else "persistent"}
    if variant == "filesystem":
        folder = where / "filesystem"
        folder.mkdir()
        options = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
        return "filesystem://", options, delivery
    return f"vsqs+file://{where / 'vsqs'}", {}, delivery


def wait_for(done: Path, count: int, worker: subprocess.Popen[bytes]) -> None:
    give_up = time.monotonic() + DEADLINE
    while not done.exists() or done.stat().st_size < count:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited ({worker.returncode})")
        if time.monotonic() > give_up:
            raise RuntimeError(f"{count} tasks did not run within {DEADLINE} s")
        time.sleep(0.005)


def one_round(variant: str, tasks: int) -> float:
    """Seconds for ``tasks`` empty tasks through a warm worker on ``variant``."""
    with tempfile.TemporaryDirectory(prefix="bench-celery-") as tmp:
        where = Path(tmp)
        (where / "bench_app.py").write_text(APP)
        url, options, extra = broker(variant, where)
        done = where / "done"
        env = {
            **os.environ,
            **extra,
            "PYTHONPATH": os.pathsep.join([str(where), str(ROOT)]),
            "BENCH_BROKER": url,
            "BENCH_OPTIONS": json.dumps(options),
            "BENCH_DONE": str(done),
        }
        args = ["-m", "celery", "-A", "bench_app", "worker", "-P", "prefork", "-c", "2"]
        args += ["--without-mingle", "--without-gossip", "-l", "WARNING"]
        worker = subprocess.Popen(
            [sys.executable, *args],
            cwd=where,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        saved = dict(os.environ)
        try:
            os.environ.update({k: v for k, v in env.items() if k.startswith(("BENCH_", "VSQS_"))})
            sys.path.insert(0, str(where))
            try:
                import bench_app
            finally:
                sys.path.remove(str(where))
                del sys.modules["bench_app"]
            bench_app.empty.delay()  # the worker is up and warm
            wait_for(done, 1, worker)
            start = time.perf_counter()
            for _ in range(tasks):
                bench_app.empty.delay()
            wait_for(done, tasks + 1, worker)
            return time.perf_counter() - start
        finally:
            os.environ.clear()
            os.environ.update(saved)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def run(tasks: int, repeat: int) -> dict[str, float]:
    """Best tasks/s of each variant, rounds interleaved."""
    best: dict[str, float] = {}
    for _ in range(repeat):
        for variant in VARIANTS:
            rate = tasks / one_round(variant, tasks)
            best[variant] = max(best.get(variant, 0.0), rate)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 tasks, 1 round")
    args = parser.parse_args()
    tasks, repeat = (200, 1) if args.quick else (args.tasks, args.repeat)
    best = run(tasks, repeat)
    for variant, rate in best.items():
        print(f"{variant:>12}: {rate:8.0f} tasks/s (best of {repeat}, {tasks} tasks)")
    for variant in ("vsqs", "vsqs-transient"):
        print(f"{variant} / filesystem: {best[variant] / best['filesystem']:.2f}x")


if __name__ == "__main__":
    main()
