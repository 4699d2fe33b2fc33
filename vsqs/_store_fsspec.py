"""Any fsspec filesystem as an :class:`~vsqs._store_object.ObjectIO` (``memory://``, ``gs://`` ...).

One request per call where the filesystem maps it to one: ``ls``, ``cat_file``,
``pipe_file(mode="create")``, ``cp_file`` and ``rm_file``. Whether a create is
exclusive is probed at queue open, not assumed: gcsfs sends
``ifGenerationMatch=0``; fsspec's memory filesystem checks and sets without a
lock, so vsqs serializes its creates with a process-wide lock (a ``memory://``
queue lives in one process anyway).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

from ._store_object import ObjectIO

_MEMORY_CREATES = threading.Lock()


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
    """A queue at ``root`` (a path without protocol) of the fsspec filesystem ``fs``."""

    def __init__(
        self, fs: Any, root: str, url: str, *, bucketed: bool, create_via: str = "create-only"
    ) -> None:
        super().__init__()
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        #: The first path component is a bucket that must exist (vsqs never creates one).
        self.bucketed = bucketed
        self.exclusive_create_via = create_via
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        self._creating: AbstractContextManager[Any] = (
            _MEMORY_CREATES if "memory" in protocols else nullcontext()
        )

    @property
    def probe_scope(self) -> Hashable:
        bucket = self.root.partition("/")[0] if self.bucketed else ""
        return (type(self), type(self.fs), getattr(self.fs, "_fs_token", id(self.fs)), bucket)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def container_exists(self) -> bool:
        if not self.bucketed:
            return True
        self.count("head")
        return bool(self.fs.exists(self.root.partition("/")[0]))

    def listing(self) -> Iterator[tuple[str, float | None]]:
        self.count("list")
        try:
            entries = self.fs.ls(self.root, detail=True, refresh=True)
        except FileNotFoundError:
            return
        found = []
        prefix = self.root.lstrip("/") + "/"
        for entry in entries:
            path = entry["name"].lstrip("/")
            if entry.get("type") != "file" or not path.startswith(prefix):
                continue
            name = path[len(prefix) :]
            if name and "/" not in name:
                found.append((name, _modified(entry)))
        found.sort()
        yield from found

    def get(self, name: str) -> bytes:
        self.count("get")
        data: bytes = self.fs.cat_file(self._path(name))
        return data

    def create(self, name: str, data: bytes) -> str | None:
        self.count("put")
        with self._creating:
            self.fs.pipe_file(self._path(name), data, mode="create")
        return None

    def copy(self, src: str, dst: str) -> str | None:
        self.count("copy")
        self.fs.cp_file(self._path(src), self._path(dst))
        return None

    def delete(self, name: str, tag: str | None = None) -> None:
        self.count("delete")
        self.fs.rm_file(self._path(name))

    def sibling(self, name: str) -> FsspecObjects:
        parent = self.root.rpartition("/")[0]
        url_parent = self.url.rpartition("/")[0]
        return type(self)(
            self.fs,
            f"{parent}/{name}",
            f"{url_parent}/{name}",
            bucketed=self.bucketed,
            create_via=self.exclusive_create_via,
        )
