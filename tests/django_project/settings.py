"""Settings of the test project, from environment variables so that the
test process and the ``manage.py vsqs_worker`` processes it starts share
one queue root: ``VSQS_DJANGO_ROOT`` (a vsqs location), ``VSQS_DJANGO_STORAGE``
(storage options, JSON), ``VSQS_DJANGO_VT`` (the visibility timeout) and
``VSQS_DJANGO_OUT`` (where the tasks write what they did: tasks.py)."""

from __future__ import annotations

import json
import os
from importlib.util import find_spec

SECRET_KEY = "vsqs-tests-only"
USE_TZ = True
INSTALLED_APPS = ["vsqs.django"]
if find_spec("django.tasks") is None:  # Django 5.2: the backport is an app too
    INSTALLED_APPS.append("django_tasks")

TASKS = {
    "default": {
        "BACKEND": "vsqs.django.QueueBackend",
        "QUEUES": ["default", "urgent"],
        "OPTIONS": {
            "url": os.environ.get("VSQS_DJANGO_ROOT", "memory://django-tests"),
            "storage_options": json.loads(os.environ.get("VSQS_DJANGO_STORAGE", "null")),
            "visibility_timeout": float(os.environ.get("VSQS_DJANGO_VT", "30")),
        },
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"vsqs": {"handlers": ["stderr"], "level": "INFO"}},
}
