"""Locks that a forked child can take.

``fork()`` copies only the thread that calls it: a lock another thread held
at that moment stays held in the child for ever, and the child's first call
that takes it hangs. Every lock, condition and event vsqs makes comes from
here, and a forked child re-initialises each one (released, no waiters), as
the standard library does with its own (``logging``'s handlers,
``concurrent.futures``, ``threading``): the lock objects stay the same, so
whoever holds a reference to one keeps a working lock. Objects whose state
such a lock guarded register with :func:`after_fork` to reset it in the child.

Guarantee: in a forked child, no vsqs call waits for a lock that a thread of
the parent held when it forked.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Protocol


class Resets(Protocol):
    """An object with state a parent's thread may have left half changed."""

    def after_fork(self) -> None:
        """Reset that state in a forked child (its locks are free again)."""


#: Every lock, condition and event made here; each has ``_at_fork_reinit``,
#: the standard library's own re-initialisation (Python 3.9 and later).
_made: weakref.WeakSet[Any] = weakref.WeakSet()
_resets: weakref.WeakSet[Any] = weakref.WeakSet()


def lock() -> threading.Lock:
    """A ``threading.Lock`` that is free in a forked child."""
    made = threading.Lock()
    _made.add(made)
    return made


def rlock() -> threading.RLock:
    """A ``threading.RLock`` that is free in a forked child."""
    made = threading.RLock()
    _made.add(made)
    return made


def condition() -> threading.Condition:
    """A ``threading.Condition`` (on its own lock) that is free in a forked child."""
    made = threading.Condition(threading.Lock())
    _made.add(made)
    return made


def event() -> threading.Event:
    """A ``threading.Event`` whose lock is free in a forked child (it stays set or not)."""
    made = threading.Event()
    _made.add(made)
    return made


def made() -> list[Any]:
    """The locks, conditions and events made here that are alive."""
    return list(_made)


def after_fork(owner: Resets) -> None:
    """Call ``owner.after_fork()`` in every forked child while ``owner`` lives
    (after the locks are free)."""
    _resets.add(owner)


def _in_child() -> None:
    for each in list(_made):
        each._at_fork_reinit()
    for owner in list(_resets):
        owner.after_fork()


os.register_at_fork(after_in_child=_in_child)
