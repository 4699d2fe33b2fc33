"""``python -m vsqs``: the ``vsqs`` command line."""

from .cli import run

run()
