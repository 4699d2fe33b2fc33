"""Celery throughput: empty tasks through a worker with 2 prefork processes,
vsqs's transport (``vsqs+file://``: persistent tasks, Celery's default, each
send synced to disk; transient ones, ``task_default_delivery_mode =
"transient"``, not synced; and transient ones without dedup ids) against
kombu's ``filesystem://`` transport, in the same run on the same disk.

Each round starts one ``celery worker -c 2`` on a fresh directory, waits
until it ran a first task, then times N tasks from their first publish (one
client, ``delay`` in a loop) until the last has run (each task appends one
byte to a file; the worker's late acks included). The best of ``--repeat``
rounds of each variant (and each round's figure), and the ratios to
filesystem://, are printed. A round whose worker crashed (kombu's filesystem
worker can die reading a message file still being written) is counted and
run again, up to three times.

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
#: kombu's filesystem transport, which syncs nothing), the same without the
#: dedup ids of tasks (``dedup_ids=False``: what kombu's filesystem transport
#: offers), and kombu's filesystem transport (with Celery's default, which it
#: does not sync).
VARIANTS = ("vsqs", "vsqs-transient", "vsqs-no-dedup", "filesystem")
OUR_VARIANTS = VARIANTS[:-1]


def broker(variant: str, where: Path) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The broker URL, transport options and environment of a variant, under ``where``."""
    transient = variant in ("vsqs-transient", "vsqs-no-dedup")
    delivery = {"BENCH_DELIVERY": "transient" if transient else "persistent"}
    if variant == "filesystem":
        folder = where / "filesystem"
        folder.mkdir()
        options: dict[str, Any] = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
        return "filesystem://", options, delivery
    options = {"dedup_ids": False} if variant == "vsqs-no-dedup" else {}
    return f"vsqs+file://{where / 'vsqs'}", options, delivery


def wait_for(done: Path, count: int, worker: subprocess.Popen[bytes], log: Path) -> None:
    give_up = time.monotonic() + DEADLINE
    while not done.exists() or done.stat().st_size < count:
        if worker.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-5:]
            raise WorkerCrashed(f"the worker exited ({worker.returncode}): " + " | ".join(tail))
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
        log = where / "worker.log"
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, *args],
                cwd=where,
                env=env,
                start_new_session=True,
                stdout=out,
                stderr=out,
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
            wait_for(done, 1, worker, log)
            start = time.perf_counter()
            for _ in range(tasks):
                bench_app.empty.delay()
            wait_for(done, tasks + 1, worker, log)
            return time.perf_counter() - start
        finally:
            os.environ.clear()
            os.environ.update(saved)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


class WorkerCrashed(RuntimeError):
    """The worker exited during a round (kombu's filesystem transport can read
    a message file its producer is still writing, and die on it)."""


def run(tasks: int, repeat: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """The tasks/s of each round of each variant, rounds interleaved, and
    how many rounds of each a worker crash spoiled (each tried again, up to
    three times)."""
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    crashes = dict.fromkeys(VARIANTS, 0)
    for _ in range(repeat):
        for variant in VARIANTS:
            for _attempt in range(3):
                try:
                    rates[variant].append(tasks / one_round(variant, tasks))
                    break
                except WorkerCrashed as exc:
                    crashes[variant] += 1
                    print(f"{variant}: {exc}", file=sys.stderr)
    return rates, crashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 tasks, 1 round")
    args = parser.parse_args()
    tasks, repeat = (200, 1) if args.quick else (args.tasks, args.repeat)
    rates, crashes = run(tasks, repeat)
    best = {variant: max(r, default=0.0) for variant, r in rates.items()}
    for variant, rate in best.items():
        rounds = ", ".join(f"{r:.0f}" for r in rates[variant])
        crashed = f"; {crashes[variant]} worker crashes" if crashes[variant] else ""
        print(f"{variant:>15}: {rate:6.0f} tasks/s best of [{rounds}] ({tasks} tasks{crashed})")
    for variant in OUR_VARIANTS:
        if best["filesystem"]:
            print(f"{variant} / filesystem: {best[variant] / best['filesystem']:.2f}x")


if __name__ == "__main__":
    main()
