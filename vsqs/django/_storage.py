"""Where task results live: one object per task id, ``<id>.json``, in the
folder :data:`RESULTS` under the queue root (a name no queue can have, so
``vsqs queues`` never lists it). Each write replaces the whole object at
once: a reader sees the previous record or the new one, never a part.

A local root (a path or ``file://``) writes a temporary file, syncs it and
renames it over the old one; any other root goes through fsspec (S3, GCS,
``memory://``), whose single ``PUT`` replaces an object whole.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any, Protocol

from .._errors import InvalidArgument, StorageError
from ..stores._location import file_url_path, split, without_credentials

#: The folder of the results under the queue root (vsqs queue names start
#: with a letter or digit, so no queue is called this).
RESULTS = "_django_results"

#: What a result id may be (the framework's ids are 32 letters and digits):
#: an id that is not never becomes a name on storage.
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_result_id(result_id: object) -> bool:
    """Whether ``result_id`` may name a result (untrusted input)."""
    return isinstance(result_id, str) and _ID.fullmatch(result_id) is not None


class ResultStore(Protocol):
    """A folder of result objects, named by result id."""

    where: str

    def put(self, result_id: str, data: bytes) -> None:
        """Replace the object of ``result_id`` with ``data`` at once."""

    def get(self, result_id: str) -> bytes | None:
        """The object of ``result_id``, or ``None`` if there is none."""

    def ids(self) -> list[str]:
        """The ids that have an object."""

    def delete(self, result_id: str) -> None:
        """Remove the object of ``result_id`` (nothing if it is gone)."""


def open_results(root: str, storage_options: dict[str, Any] | None) -> ResultStore:
    """The result store under the queue root ``root``."""
    scheme, url = split(root)
    if scheme is None:
        if storage_options:
            raise InvalidArgument("storage_options apply to object-store URLs, not local paths")
        _, sep, rest = url.partition("://")
        path = file_url_path(url, rest) if sep else url
        return LocalResults(os.path.join(os.path.abspath(path), RESULTS))
    return FsspecResults(url.rstrip("/") + "/" + RESULTS, storage_options or {})


class LocalResults:
    """Results in a local directory: write, sync, rename over."""

    def __init__(self, path: str) -> None:
        self.where = path

    def put(self, result_id: str, data: bytes) -> None:
        temporary = os.path.join(self.where, f".{result_id}.{uuid.uuid4().hex}.tmp")
        try:
            os.makedirs(self.where, exist_ok=True)
            with open(temporary, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, self._path(result_id))
        except OSError as exc:
            _discard(temporary)
            raise StorageError(f"writing the result {result_id} in {self.where}: {exc}") from None

    def get(self, result_id: str) -> bytes | None:
        try:
            with open(self._path(result_id), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"reading the result {result_id} in {self.where}: {exc}") from None

    def ids(self) -> list[str]:
        try:
            names = os.listdir(self.where)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"listing the results in {self.where}: {exc}") from None
        return [n[: -len(".json")] for n in names if n.endswith(".json") and not n.startswith(".")]

    def delete(self, result_id: str) -> None:
        _discard(self._path(result_id))

    def _path(self, result_id: str) -> str:
        return os.path.join(self.where, result_id + ".json")


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"removing {path}: {exc}") from None


class FsspecResults:
    """Results as objects of an fsspec filesystem (one ``PUT`` each)."""

    def __init__(self, url: str, storage_options: dict[str, Any]) -> None:
        import fsspec.core  # only for object stores, as vsqs itself

        self.where = without_credentials(url)
        try:
            self._fs, self._path = fsspec.core.url_to_fs(url, **storage_options)
        except (ImportError, ValueError) as exc:
            raise StorageError(f"results in {self.where}: {exc}") from None

    def put(self, result_id: str, data: bytes) -> None:
        try:
            self._fs.pipe_file(self._key(result_id), data)
        except Exception as exc:  # OSError, or the client library's own
            raise StorageError(f"writing the result {result_id} in {self.where}: {exc}") from None

    def get(self, result_id: str) -> bytes | None:
        try:
            data = self._fs.cat_file(self._key(result_id))
        except FileNotFoundError:
            return None
        except Exception as exc:  # OSError, or the client library's own
            raise StorageError(f"reading the result {result_id} in {self.where}: {exc}") from None
        return bytes(data)

    def ids(self) -> list[str]:
        self._fs.invalidate_cache(self._path)
        try:
            names = self._fs.ls(self._path, detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:  # OSError, or the client library's own
            raise StorageError(f"listing the results in {self.where}: {exc}") from None
        last = (str(name).rstrip("/").rpartition("/")[2] for name in names)
        return [n[: -len(".json")] for n in last if n.endswith(".json")]

    def delete(self, result_id: str) -> None:
        try:
            self._fs.rm_file(self._key(result_id))
        except FileNotFoundError:
            pass
        except Exception as exc:  # OSError, or the client library's own
            raise StorageError(f"removing the result {result_id} in {self.where}: {exc}") from None

    def _key(self, result_id: str) -> str:
        return f"{self._path}/{result_id}.json"
