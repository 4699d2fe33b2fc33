"""Settings of the test project, from environment variables so that the
test process and the ``manage.py vsqs_worker`` processes it starts share
one queue root: ``VSQS_DJANGO_ROOT`` (a vsqs location), ``VSQS_DJANGO_STORAGE``
(storage options, JSON), ``VSQS_DJANGO_VT`` (the visibility timeout) and
``VSQS_DJANGO_OUT`` (where the tasks write what they did: tasks.py)."""

from __future__ import annotations

import json
import os
from importlib.util import find_spec
from typing import Any

SECRET_KEY = "vsqs-tests-only"
USE_TZ = True
INSTALLED_APPS = ["vsqs.django"]
if find_spec("django.tasks") is None:  # Django 5.2: the backport is an app too
    INSTALLED_APPS.append("django_tasks")


def tasks_setting(root: str, storage: Any = None, vt: float = 30.0, **more: Any) -> dict[str, Any]:
    """The TASKS setting of a queue root (tests override it with this)."""
    options = {"url": root, "storage_options": storage, "visibility_timeout": vt, **more}
    return {
        "default": {
            "BACKEND": "vsqs.django.QueueBackend",
            "QUEUES": ["default", "urgent"],
            "OPTIONS": options,
        }
    }


TASKS = tasks_setting(
    os.environ.get("VSQS_DJANGO_ROOT", "memory://django-tests"),
    json.loads(os.environ.get("VSQS_DJANGO_STORAGE", "null")),
    float(os.environ.get("VSQS_DJANGO_VT", "30")),
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"vsqs": {"handlers": ["stderr"], "level": "INFO"}},
}
