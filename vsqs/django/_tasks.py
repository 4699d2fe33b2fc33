"""Which tasks framework this Django has: ``django.tasks`` (Django >= 6) or,
where that is absent, the ``django-tasks`` backport (Django 5.2). The one
place that chooses; every other module of :mod:`vsqs.django` imports the
framework's names from here. Both have the same API under the same
submodule names; the type checker reads the backport's.
"""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING


def framework() -> str:
    """The package of the tasks framework: ``django.tasks`` if Django has
    it, else ``django_tasks`` (the backport)."""
    return "django.tasks" if find_spec("django.tasks") is not None else "django_tasks"


if TYPE_CHECKING:
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
else:
    FRAMEWORK = framework()
    task_backends = import_module(FRAMEWORK).task_backends
    BaseTaskBackend = import_module(FRAMEWORK + ".backends.base").BaseTaskBackend
    _base = import_module(FRAMEWORK + ".base")
    Task, TaskContext, TaskError = _base.Task, _base.TaskContext, _base.TaskError
    TaskResult, TaskResultStatus = _base.TaskResult, _base.TaskResultStatus
    TaskResultDoesNotExist = import_module(FRAMEWORK + ".exceptions").TaskResultDoesNotExist
    _signals = import_module(FRAMEWORK + ".signals")
    task_enqueued = _signals.task_enqueued
    task_started, task_finished = _signals.task_started, _signals.task_finished

__all__ = [
    "BaseTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "framework",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
