"""``manage.py vsqs_worker``: run the tasks of vsqs queues (docs/django.md).

SIGTERM or SIGINT stops taking tasks and waits for those running; a second
one releases them (visible again at once) and exits. Either way the exit
status is 0.
"""

from __future__ import annotations

import signal
from argparse import ArgumentParser
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...._errors import VsqsError
from ..._backend import QueueBackend
from ..._serve import Worker
from ..._tasks import task_backends


class Command(BaseCommand):
    help = "Run the tasks of a vsqs.django.QueueBackend's queues."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--backend", default="default", metavar="ALIAS", help="the TASKS entry (default)"
        )
        parser.add_argument(
            "--queue-name", action="append", dest="queue_names", metavar="Q",
            help="a queue to serve (repeat for more; default: the backend's QUEUES)",
        )  # fmt: skip
        parser.add_argument(
            "--concurrency", type=int, default=1, metavar="N", help="tasks at once per queue"
        )
        parser.add_argument("--max-tasks", type=int, metavar="M", help="stop after M tasks")
        parser.add_argument(
            "--idle-timeout", type=float, metavar="S", help="stop after S seconds without a task"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        backend = task_backends[options["backend"]]
        if not isinstance(backend, QueueBackend):
            raise CommandError(f"TASKS[{options['backend']!r}] is not a vsqs.django.QueueBackend")
        names = options["queue_names"] or sorted(backend.queues) or ["default"]
        try:
            self._serve(backend, names, options)
        except VsqsError as exc:  # one line, exit status 1
            raise CommandError(str(exc)) from None

    def _serve(self, backend: QueueBackend, names: list[str], options: dict[str, Any]) -> None:
        worker = Worker(
            backend, names,
            concurrency=options["concurrency"],
            max_tasks=options["max_tasks"],
            idle_timeout=options["idle_timeout"],
        )  # fmt: skip
        self.stderr.write(f"vsqs_worker {worker.worker_id}: serving {', '.join(names)}")
        stopper = self._stopper(worker)  # one for both: the second signal may be the other
        previous = {s: signal.signal(s, stopper) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            ran = worker.run()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        self.stderr.write(f"vsqs_worker {worker.worker_id}: stopped after {ran} task(s)")

    def _stopper(self, worker: Worker) -> Any:
        signalled: list[int] = []

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            signalled.append(signum)
            if len(signalled) > 1:
                released = worker.release()
                self.stderr.write(f"{name} again: released {released} task(s) in hand")
            else:
                worker.stop()
                self.stderr.write(
                    f"{name}: no new tasks; waiting for {worker.running} running "
                    f"(send {name} again to release them)"
                )

        return on_signal
