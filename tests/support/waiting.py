"""Waiting for what another thread or process does: a condition polled until
a deadline, and a local store that says when a receiver waits on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

import vsqs


class WaitingStore(vsqs.LocalStore):
    """A real local store that sets ``waiting`` whenever a receiver waits on it
    for a change."""

    def __init__(self, path: str, *, notifications: bool = True) -> None:
        super().__init__(path, notifications=notifications)
        self.waiting = threading.Event()

    def wait_for_change(self, token: Hashable, timeout: float) -> bool:
        self.waiting.set()
        return super().wait_for_change(token, timeout)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)
