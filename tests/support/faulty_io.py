"""An object store's requests made to fail, or to let another client act
between two of them: ``ObjectIO`` wrappers over a real (or in-process)
object store, below vsqs's adapters."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

from vsqs.stores._object import ObjectIO

from .crashes import Crash


class FaultyIO(ObjectIO):
    """Delegates every request to ``inner``; the ``fault_at``-th one fails as ``mode`` says.

    A create is never sent twice by vsqs's adapters (``docs/protocol.md``), so
    in mode ``retried`` a create's lost response is reported as in ``lost``.
    """

    def __init__(self, inner: ObjectIO, mode: str, fault_at: int | None) -> None:
        super().__init__()
        self.inner, self.mode, self.fault_at = inner, mode, fault_at
        self.url = inner.url
        self.exclusive_create_via = inner.exclusive_create_via  # type: ignore[misc]
        self.names_per_remove = inner.names_per_remove  # type: ignore[misc]
        self.calls = [0]  # shared with siblings: one process

    def _request(self, what: str, call: Callable[[], Any], *, resend: bool = True) -> Any:
        self.calls[0] += 1
        if self.fault_at is None or self.calls[0] < self.fault_at:
            return call()
        if self.mode == "crash":
            raise Crash(f"dead since request {self.fault_at} ({what})")
        if self.calls[0] > self.fault_at:
            return call()
        with suppress(OSError):  # its outcome is lost with the response
            call()
        if self.mode == "lost" or not resend:
            raise ConnectionResetError(f"response to {what} lost")
        return call()  # "retried": the client library sends it again

    @property
    def probe_scope(self) -> Any:
        return self.inner.probe_scope

    def container_exists(self) -> bool:
        return self.inner.container_exists()

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        return iter(self._request("list", lambda: list(self.inner.listing(prefix))))

    def get(self, name: str) -> bytes:
        return self._request(f"get {name}", lambda: self.inner.get(name))  # type: ignore[no-any-return]

    def exists(self, name: str) -> bool:
        return self._request(f"head {name}", lambda: self.inner.exists(name))  # type: ignore[no-any-return]

    def create(self, name: str, data: bytes) -> None:
        self._request(f"create {name}", lambda: self.inner.create(name, data), resend=False)

    def copy(self, src: str, dst: str) -> None:
        self._request(f"copy {src}", lambda: self.inner.copy(src, dst))

    def remove(self, names: list[str]) -> list[str]:
        return self._request(f"remove {names}", lambda: self.inner.remove(names))  # type: ignore[no-any-return]

    def sibling(self, name: str) -> FaultyIO:
        twin = FaultyIO(self.inner.sibling(name), self.mode, self.fault_at)
        twin.calls = self.calls
        return twin


class Interleave(FaultyIO):
    """Delegates every request; once, right before (or after) the first request
    ``when(what)`` matches (``what``: ``"create <name>"``, ``"copy <src>"``,
    ``"head <name>"``, ``"get <name>"``, ``"remove [...]"``, ``"list"``),
    runs ``meanwhile``: another client acting between two requests of this one,
    as a slow, throttled or retried request lets it."""

    def __init__(
        self,
        inner: ObjectIO,
        when: Callable[[str], bool],
        meanwhile: Callable[[], object],
        *,
        after: bool = False,
    ) -> None:
        super().__init__(inner, "crash", None)
        self.when, self.after = when, after
        self.meanwhile: Callable[[], object] | None = meanwhile

    def _request(self, what: str, call: Callable[[], Any], *, resend: bool = True) -> Any:
        due = self.meanwhile is not None and self.when(what)
        if due and not self.after:
            self._interleave()
        result = super()._request(what, call, resend=resend)
        if due and self.after:
            self._interleave()
        return result

    def _interleave(self) -> None:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()


def die() -> None:
    raise Crash("the client process died here")


def on(kind: str, name: str = "") -> Callable[[str], bool]:
    """Match requests of one kind (``create``, ``copy``, ``head``...) naming ``name``."""
    return lambda what: what.startswith(kind + " ") and name in what
