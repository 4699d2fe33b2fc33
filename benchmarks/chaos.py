"""A long chaos run: producers and consumers killed with SIGKILL, for as long as asked.

The harness of ``tests/chaos`` (``tests/chaos/harness.py``): P producers and
C consumers (and a process running ``gc()``) as real processes on one queue,
a random one killed every ``--kill-every`` seconds on average (half of the
kills aimed at a send or a claim under way) and restarted; then the queue
drains and every log is checked. Prints the figures; exits 1 on any
violation (a message lost, held twice, resurrected, torn, foreign or, with
one consumer, out of order).

    python benchmarks/chaos.py                          # 60 s on a local directory
    python benchmarks/chaos.py --seconds 600 --consumers 8
    python benchmarks/chaos.py --store s3 --seconds 120 # on a moto S3 server
    python benchmarks/chaos.py --consumers 1            # also checks per-producer FIFO
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.chaos.harness import ChaosConfig, run_chaos
from tests.support.moto_server import moto_s3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["local", "s3"], default="local")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long kills go on")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--rate", type=float, help="messages a second per producer")
    parser.add_argument("--vt", type=float, help="visibility timeout, seconds")
    parser.add_argument("--kill-every", type=float, help="mean seconds between kills")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", help="where the queue and logs go (kept if given)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    s3 = args.store == "s3"
    defaults: dict[str, float] = {"rate": 8.0, "vt": 3.0, "kill_every": 0.8} if s3 else {}
    if args.consumers == 1:
        # One consumer that sometimes outlives its timeout falls behind for good.
        defaults |= {"p_slow": 0.0, "rate": defaults.get("rate", 200.0) / 2}
    tuning = {k: getattr(args, k) for k in ("rate", "vt", "kill_every") if getattr(args, k)}
    with ExitStack() as stack:
        if args.workdir:
            workdir = Path(args.workdir)
        else:
            workdir = Path(tempfile.mkdtemp(prefix="vsqs-chaos-"))
            stack.callback(shutil.rmtree, workdir, True)
        workdir.mkdir(parents=True, exist_ok=True)
        # Steadier file creation on ext4 (see benchmarks/bench_local.py).
        subprocess.run(["chattr", "+T", str(workdir)], capture_output=True, check=False)
        if s3:
            options = stack.enter_context(moto_s3("vsqs-chaos"))
            target: object = [f"s3://vsqs-chaos/{uuid.uuid4().hex[:8]}/q", options]
        else:
            target = str(workdir / "q")
        config = ChaosConfig(
            target=target,
            producers=args.producers,
            consumers=args.consumers,
            seconds=args.seconds,
            seed=args.seed,
            max_padding=1024 if s3 else 64 << 10,
            drain_timeout=max(90.0, args.seconds),
            **{**defaults, **tuning},
        )
        report = run_chaos(config, workdir / "logs")
    figures = {"store": args.store, "producers": args.producers, "consumers": args.consumers}
    figures |= report.figures
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    for violation in report.violations[:50]:
        print("VIOLATION", violation)
    if args.json:
        Path(args.json).write_text(
            json.dumps({**figures, "violation_list": report.violations}, indent=1)
        )
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
