"""Django's tasks framework on vsqs queues (docs/django.md).

With ``"vsqs.django"`` in ``INSTALLED_APPS`` and::

    TASKS = {"default": {"BACKEND": "vsqs.django.QueueBackend",
                         "QUEUES": ["default"],
                         "OPTIONS": {"url": "/var/spool/tasks"}}}

a task's ``enqueue()`` sends it to the vsqs queue ``/var/spool/tasks/default``,
``manage.py vsqs_worker`` runs it, and ``get_result(id)`` reads its result
from any process. Works with ``django.tasks`` (Django >= 6) and with the
``django-tasks`` backport (Django 5.2).
"""

from __future__ import annotations

from ._backend import QueueBackend
from ._records import BadTaskRecord, InvalidTaskArguments
from ._serve import Worker

__all__ = ["BadTaskRecord", "InvalidTaskArguments", "QueueBackend", "Worker"]
