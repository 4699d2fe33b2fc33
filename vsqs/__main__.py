"""``python -m vsqs``: the ``vsqs`` command line."""

from ._cli import run

run()
