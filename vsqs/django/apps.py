"""The Django app of :mod:`vsqs.django` (``"vsqs.django"`` in
``INSTALLED_APPS``): it brings the ``vsqs_worker`` management command."""

from __future__ import annotations

from django.apps import AppConfig


class VsqsConfig(AppConfig):
    name = "vsqs.django"
    label = "vsqs_django"
    verbose_name = "vsqs tasks"
