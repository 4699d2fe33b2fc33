"""Google Cloud Storage through gcsfs.

Every request but a create goes through gcsfs as usual (with its retries, all
safe: a ``GET``, metadata read, list, rewrite or delete of a name that never
recurs). A create is an upload with ``ifGenerationMatch=0`` sent exactly once:
gcsfs retries a failed upload up to six times, and a retry that lands after
the first attempt took effect and the message was consumed would create the
message again. So vsqs sends it through gcsfs's request method without its
retry decorator and resolves an unknown outcome itself (``docs/protocol.md``).

A listing goes to the JSON API directly, not through gcsfs's ``ls``: it sends
its prefix to the server and is read page by page, only as far as the caller
reads (``ls`` reads every page of the queue).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote

from ._errors import UnsupportedStore
from ._store_fsspec import FsspecObjects

#: Names of one listing page (the JSON API's most).
_PAGE = 1000


class GCSObjects(FsspecObjects):
    """A queue under ``bucket/prefix/name`` of a ``gcsfs.GCSFileSystem``."""

    exclusive_create_via = "gcs-generation"

    def __init__(self, fs: Any, root: str, url: str, **kwargs: Any) -> None:
        super().__init__(fs, root, url, **kwargs)
        if not callable(getattr(type(fs)._request, "__wrapped__", None)):
            raise UnsupportedStore(
                f"{url}: this gcsfs cannot send a request without retrying it; "
                "vsqs needs gcsfs>=2025.7"
            )
        self.bucket, _, key = self.root.partition("/")
        self.prefix = f"{key}/" if key else ""

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        """One ``GET`` per page of 1 000 names under the queue's prefix and
        ``prefix``, in name order; the delimiter keeps keys under the queue out."""
        token: str | None = None
        while True:
            self.count("list")
            try:
                page = self.fs.call(
                    "GET",
                    "b/{}/o",
                    self.bucket,
                    json_out=True,
                    prefix=self.prefix + prefix,
                    delimiter="/",
                    maxResults=_PAGE,
                    pageToken=token,
                )
            except FileNotFoundError:  # no bucket
                return
            for item in page.get("items", ()):
                name = item["name"][len(self.prefix) :]
                if name:
                    yield name, datetime.fromisoformat(item["updated"]).timestamp()
            token = page.get("nextPageToken")
            if not token:
                return

    def create(self, name: str, data: bytes) -> None:
        from fsspec.asyn import sync

        self.count("put")
        bucket, _, key = self._path(name).partition("/")
        # A multipart upload, as gcsfs sends it (fake-gcs-server honours the
        # precondition on no other kind), with a boundary no body contains.
        boundary = secrets.token_hex(16)
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps({"name": key}).encode(),
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--".encode(),
            ]
        )
        once = type(self.fs)._request.__wrapped__  # the request, without gcsfs's retries
        try:
            sync(
                self.fs.loop,
                once,
                self.fs,
                "POST",
                f"{self.fs._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o",
                uploadType="multipart",
                ifGenerationMatch="0",
                data=body,
                headers={"Content-Type": f'multipart/related; boundary="{boundary}"'},
            )
        except (FileExistsError, PermissionError):
            raise
        except Exception as exc:  # gcsfs's HttpError, aiohttp's errors: the outcome is unknown
            raise ConnectionError(f"creating {name}: {exc}") from exc
