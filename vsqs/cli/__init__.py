"""The ``vsqs`` command line (click): one module per group of commands.

``run()`` is the console script; ``main`` the click group (for click's test
runner). See ``docs/cli.md``.
"""

from __future__ import annotations

from ._app import main
from ._script import run

__all__ = ["main", "run"]
