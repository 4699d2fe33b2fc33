"""An in-process store: thread-safe, per instance, nothing global.

``MemoryStore()`` makes a new, empty set of queues; ``store.sibling(name)``
reaches another queue of the same set (dead-letter queues resolve this way).
Nothing is durable and other processes cannot see it. Long polls wake at once
on a change (a condition variable, no polling).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .. import _forks
from .._names import validate_queue_name
from ._base import Store


class _Namespaces:
    """The shared state of one ``MemoryStore()`` and all its siblings."""

    def __init__(self) -> None:
        self.changed = _forks.condition()
        self.queues: dict[str, dict[str, bytes]] = {}
        self.version = 0
        self.wakes = 0  # calls of MemoryStore.wake on any queue of the set


class MemoryStore(Store):
    """A queue held in this process's memory. See the module docstring."""

    atomic_rename = True

    def __init__(self, name: str = "queue", *, _spaces: _Namespaces | None = None) -> None:
        self.name = validate_queue_name(name)
        self._spaces = _spaces if _spaces is not None else _Namespaces()
        #: One queue, one URL: its siblings' stores agree on it.
        self.url = f"memory-store:{id(self._spaces):x}/{name}"

    def __reduce__(self) -> Any:
        raise TypeError("a MemoryStore lives in one process and cannot be pickled")

    @property
    def _names(self) -> dict[str, bytes]:
        try:
            return self._spaces.queues[self.name]
        except KeyError:
            raise FileNotFoundError(self.name) from None

    def _bump(self) -> None:
        self._spaces.version += 1
        self._spaces.changed.notify_all()

    def ensure(self, create: bool) -> bool:
        with self._spaces.changed:
            if create:
                self._spaces.queues.setdefault(self.name, {})
            return self.name in self._spaces.queues

    def sibling(self, name: str) -> MemoryStore:
        return MemoryStore(name, _spaces=self._spaces)

    def list(self, *, prefix: str = "", settle: bool = False) -> list[str]:
        with self._spaces.changed:
            return [name for name in self._names if name.startswith(prefix)]

    def read(self, name: str) -> bytes:
        with self._spaces.changed:
            try:
                return self._names[name]
            except KeyError:
                raise FileNotFoundError(name) from None

    def creates_atomically(self, fsync: bool) -> bool:
        return True  # under the lock; nothing here is durable anyway

    def write_new(self, name: str, data: bytes, *, fsync: bool) -> None:
        with self._spaces.changed:
            names = self._names
            if name in names:
                raise FileExistsError(name)
            names[name] = bytes(data)
            self._bump()

    def rename(self, src: str, dst: str) -> None:
        with self._spaces.changed:
            names = self._names
            if src not in names:
                raise FileNotFoundError(src)
            if dst in names:
                raise FileExistsError(dst)
            names[dst] = names.pop(src)
            self._bump()

    def split(self, src: str, first: str, second: str) -> None:
        """Atomic under the lock: ``FileNotFoundError`` if ``src`` is gone,
        ``FileExistsError`` if a target exists; either way nothing changed."""
        with self._spaces.changed:
            names = self._names
            if src not in names:
                raise FileNotFoundError(src)
            for target in (first, second):
                if target in names:
                    raise FileExistsError(target)
            names[first] = names[second] = names.pop(src)
            self._bump()

    def delete(self, name: str, *, known: bool = False) -> None:
        with self._spaces.changed:
            try:
                del self._names[name]
            except KeyError:
                raise FileNotFoundError(name) from None
            self._bump()

    def change_token(self) -> Hashable:
        return self._spaces.version

    def wait_for_change(self, token: Hashable, timeout: float) -> bool:
        spaces = self._spaces
        with spaces.changed:
            wakes = spaces.wakes
            return spaces.changed.wait_for(
                lambda: spaces.version != token or spaces.wakes != wakes, timeout=timeout
            )

    def wake(self) -> None:
        super().wake()  # a pause
        with self._spaces.changed:
            self._spaces.wakes += 1
            self._spaces.changed.notify_all()
