"""A client process of the test project: ``python -m tests.django_project.client
enqueue TASK ARG...`` prints the result id; ``result ID...`` prints one JSON
line per result (status, return value, errors, worker ids), read through
``get_result`` in this process."""

from __future__ import annotations

import json
import os
import sys

import django


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_project.settings")
    django.setup()
    from tests.django_project import tasks

    command, *rest = argv
    if command == "enqueue":
        name, *args = rest
        print(getattr(tasks, name).enqueue(*args).id)
        return
    for result_id in rest:
        result = tasks.record.get_backend().get_result(result_id)
        ok = str(result.status) == "SUCCESSFUL"
        print(
            json.dumps(
                {
                    "id": result.id,
                    "status": str(result.status),
                    "return_value": result.return_value if ok else None,
                    "errors": [[e.exception_class_path, e.traceback] for e in result.errors],
                    "worker_ids": result.worker_ids,
                }
            )
        )


if __name__ == "__main__":
    main(sys.argv[1:])
