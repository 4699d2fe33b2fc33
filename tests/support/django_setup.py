"""Django in the test process, for tests/test_django*.py: the test project's
settings (tests/django_project), configured once without touching the
environment (a DJANGO_SETTINGS_MODULE left there would reach every process
the other tests start), and its TASKS pointed at a queue root per test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import django
from django.conf import settings
from django.test.utils import override_settings

from tests.django_project import settings as project
from vsqs.django import QueueBackend


def configure() -> None:
    """Configure Django with the test project's settings (once per process)."""
    if not settings.configured:
        settings.configure(**{k: getattr(project, k) for k in dir(project) if k.isupper()})
        django.setup()


@contextmanager
def backend_on(
    root: str, storage: Any = None, vt: float = 30.0, **options: Any
) -> Iterator[QueueBackend]:
    """The test project's backend on the queue root ``root`` while this lasts."""
    configure()
    with override_settings(TASKS=project.tasks_setting(root, storage, vt, **options)):
        from tests.django_project import tasks

        backend = tasks.record.get_backend()
        assert isinstance(backend, QueueBackend)
        yield backend
