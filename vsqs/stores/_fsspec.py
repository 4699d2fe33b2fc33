"""Any fsspec filesystem as an :class:`~vsqs.stores._object_io.ObjectIO` (``memory://`` ...).

One request per call where the filesystem maps it to one: ``ls``, ``cat_file``,
``info``, ``pipe_file(mode="create")``, ``cp_file`` and ``rm_file``. Whether a
create is exclusive is probed at queue open, not assumed. fsspec's memory
filesystem is not thread-safe (it checks and sets without a lock, and its
``ls`` and copies fail with ``KeyError`` when another thread deletes a key), so
every request to it takes one process-wide lock: a ``memory://`` queue lives
in one process anyway.

S3 and GCS have adapters of their own (:mod:`vsqs.stores._s3`,
:mod:`vsqs.stores._gcs`) that keep their client libraries from sending a
create twice, list page by page and delete in batches.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any

from .. import _forks
from ._object_io import ObjectIO

_MEMORY = _forks.lock()


def _modified(entry: dict[str, Any]) -> float | None:
    for key in ("LastModified", "mtime", "updated", "created"):
        value = entry.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


class FsspecObjects(ObjectIO):
    """A queue at ``root`` (a path without protocol) of the fsspec filesystem ``fs``.

    A request that fails with one of :attr:`request_errors` (a client
    library's own errors, not ``OSError``: gcsfs's ``HttpError`` once its
    retries are spent) raises ``ConnectionError`` instead: an ``OSError`` whose
    request may or may not have taken effect, as :class:`ObjectIO` says of
    every ``OSError``, which :class:`vsqs.Queue` reports as ``StorageError``.
    """

    #: The filesystem's errors that are not ``OSError`` (set by an adapter).
    request_errors: tuple[type[Exception], ...] = ()

    def __init__(self, fs: Any, root: str, url: str, *, bucketed: bool) -> None:
        super().__init__()
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        #: The first path component is a bucket that must exist (vsqs never creates one).
        self.bucketed = bucketed
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        self._serial: AbstractContextManager[Any] = (
            _MEMORY if "memory" in protocols else nullcontext()
        )
        if "memory" in protocols:
            self.in_flight = 1  # its requests take one lock anyway

    @property
    def probe_scope(self) -> Hashable:
        bucket = self.root.partition("/")[0] if self.bucketed else ""
        return (type(self), type(self.fs), getattr(self.fs, "_fs_token", id(self.fs)), bucket)

    @contextmanager
    def _request(self, kind: str) -> Iterator[None]:
        """Count one request; serialize it where the filesystem is not thread-safe."""
        with self.request(kind), self._serial:
            try:
                yield
            except KeyError as exc:  # fsspec's memory filesystem, racing a delete
                raise FileNotFoundError(str(exc)) from None
            except self.request_errors as exc:
                raise ConnectionError(f"{self.url}: {kind}: {exc}") from exc

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def container_exists(self) -> bool:
        if not self.bucketed:
            return True
        with self._request("head"):
            return bool(self.fs.exists(self.root.partition("/")[0]))

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        try:
            with self._request("list"):
                entries = self.fs.ls(self.root, detail=True, refresh=True)
        except FileNotFoundError:
            return
        found = []
        root = self.root.lstrip("/") + "/"
        for entry in entries:
            path = entry["name"].lstrip("/")
            if entry.get("type") != "file" or not path.startswith(root + prefix):
                continue
            name = path[len(root) :]
            if name and "/" not in name:
                found.append((name, _modified(entry)))
        found.sort()
        yield from found

    def get(self, name: str) -> bytes:
        with self._request("get"):
            data: bytes = self.fs.cat_file(self._path(name))
        return data

    def exists(self, name: str) -> bool:
        try:
            with self._request("head"):
                self.fs.info(self._path(name))
        except FileNotFoundError:
            return False
        return True

    def create(self, name: str, data: bytes) -> None:
        with self._request("put"):
            self.fs.pipe_file(self._path(name), data, mode="create")

    def copy(self, src: str, dst: str) -> None:
        with self._request("copy"):
            self.fs.cp_file(self._path(src), self._path(dst))

    def remove(self, names: list[str]) -> list[str]:
        failed = []
        for name in names:
            try:
                with self._request("delete"):
                    self.fs.rm_file(self._path(name))
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(name)
        return failed

    def sibling(self, name: str) -> FsspecObjects:
        return type(self)(
            self.fs,
            f"{self.root.rpartition('/')[0]}/{name}",
            f"{self.url.rpartition('/')[0]}/{name}",
            bucketed=self.bucketed,
        )
