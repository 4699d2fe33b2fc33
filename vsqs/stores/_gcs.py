"""Google Cloud Storage through gcsfs.

Every request but a create goes through gcsfs as usual (with its retries, all
safe: a ``GET``, metadata read, list, rewrite or delete of a name that never
recurs). A create is an upload with ``ifGenerationMatch=0`` sent exactly once:
gcsfs retries a failed upload up to six times, and a retry that lands after
the first attempt took effect and the message was consumed would create the
message again. So vsqs sends it through gcsfs's request method without its
retry decorator and resolves an unknown outcome itself (``docs/protocol.md``).

Listings, existence checks and deletions go to the JSON API directly, not
through gcsfs's ``ls``, ``info`` and ``rm``: a listing sends its prefix to
the server and is read page by page, only as far as the caller reads (``ls``
reads every page of the queue), an existence check is one ``GET`` of the
object's metadata (``info`` also lists the name as a directory), and one
batch request deletes up to 100 names (gcsfs sends its batches to Google
only, one ``DELETE`` per name elsewhere). So each request counted is one
request sent.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from datetime import datetime
from email import policy
from email.parser import BytesParser
from typing import Any
from urllib.parse import quote, urlencode

from .._errors import UnsupportedStore
from ._fsspec import FsspecObjects
from ._object_io import PartlyFailed, http_date, partly_failed

#: Names of one listing page (the JSON API's most).
_PAGE = 1000
#: Deletions of one batch request (the JSON API's most).
_BATCH = 100
#: A batch part's ``Content-ID`` (``<vsqs+N>``; the answer's is ``<response-vsqs+N>``).
_PART_ID = re.compile(r"\+(\d+)>$")
_STATUS = re.compile(rb"HTTP/[\d.]+ (\d{3})")


def _statuses(content_type: str, body: bytes) -> dict[int, int]:
    """The HTTP status of each part of a batch response, by the number of its
    part (parts the server did not answer are missing)."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    statuses: dict[int, int] = {}
    for part in BytesParser(policy=policy.default).parsebytes(head + body).iter_parts():
        number = _PART_ID.search(str(part.get("Content-ID", "")).strip())
        payload = part.get_payload(decode=True)
        status = _STATUS.match(payload) if isinstance(payload, bytes) else None
        if number and status:
            statuses[int(number[1])] = int(status[1])
    return statuses


class GCSObjects(FsspecObjects):
    """A queue under ``bucket/prefix/name`` of a ``gcsfs.GCSFileSystem``."""

    exclusive_create_via = "gcs-generation"

    names_per_remove = _BATCH

    def __init__(self, fs: Any, root: str, url: str, **kwargs: Any) -> None:
        super().__init__(fs, root, url, **kwargs)
        from aiohttp import ClientError
        from gcsfs.retry import HttpError

        self.request_errors = (HttpError, ClientError)
        if not callable(getattr(type(fs)._request, "__wrapped__", None)):
            raise UnsupportedStore(
                f"{url}: this gcsfs cannot send a request without retrying it; "
                "vsqs needs gcsfs>=2025.7"
            )
        self.bucket, _, key = self.root.partition("/")
        self.prefix = f"{key}/" if key else ""

    def store_date(self) -> float | None:
        """The ``Date`` of a listing of at most one name of the queue (whole
        seconds): a request a queue's permissions allow (objects.list; a
        ``GET`` of the bucket's metadata needs storage.buckets.get too)."""
        with self._request("list"):
            headers, _ = self.fs.call(
                "GET", "b/{}/o", self.bucket, prefix=self.prefix, delimiter="/", maxResults=1
            )
        return http_date(headers.get("Date"))

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        """One ``GET`` per page of 1 000 names under the queue's prefix and
        ``prefix``, in name order; the delimiter keeps keys under the queue out."""
        token: str | None = None
        while True:
            try:
                with self._request("list"):
                    headers, content = self.fs.call(
                        "GET",
                        "b/{}/o",
                        self.bucket,
                        prefix=self.prefix + prefix,
                        delimiter="/",
                        maxResults=_PAGE,
                        pageToken=token,
                    )
            except FileNotFoundError:  # no bucket
                return
            self.last_date = http_date(headers.get("Date")) or self.last_date
            page = json.loads(content)
            for item in page.get("items", ()):
                name = item["name"][len(self.prefix) :]
                if name:
                    yield name, datetime.fromisoformat(item["updated"]).timestamp()
            token = page.get("nextPageToken")
            if not token:
                return

    def exists(self, name: str) -> bool:
        """One ``GET`` of the object's metadata, never a cached answer (gcsfs's
        ``info`` also lists the name as a directory, side by side)."""
        try:
            with self._request("head"):
                self.fs.call("GET", "b/{}/o/{}", self.bucket, self.prefix + name, json_out=True)
        except FileNotFoundError:
            return False
        return True

    def remove(self, names: list[str]) -> list[str]:
        """One batch request per 100 names; an absent name is no error. The names
        returned failed, or their request did (its outcome is unknown)."""
        failed: list[str] = []
        for start in range(0, len(names), _BATCH):
            failed += self._remove_batch(names[start : start + _BATCH])
        return failed

    def _remove_batch(self, names: list[str]) -> list[str]:
        boundary = secrets.token_hex(16)
        bucket = quote(self.bucket, safe="")
        query = urlencode(self.fs._get_params({}))  # the billing project, if any
        # Each part ends with an empty line: the CRLF before a boundary is the boundary's.
        body = "".join(
            f"--{boundary}\r\nContent-Type: application/http\r\n"
            f"Content-Transfer-Encoding: binary\r\nContent-ID: <vsqs+{i}>\r\n\r\n"
            f"DELETE /storage/v1/b/{bucket}/o/{quote(self.prefix + name, safe='')}"
            f"{'?' if query else ''}{query} HTTP/1.1\r\n\r\n\r\n"
            for i, name in enumerate(names)
        )
        try:
            with self._request("delete"):
                headers, content = self.fs.call(
                    "POST",
                    f"{self.fs._location}/batch/storage/v1",
                    headers={"Content-Type": f'multipart/mixed; boundary="{boundary}"'},
                    data=f"{body}--{boundary}--\r\n",
                )
                statuses = _statuses(headers.get("Content-Type", ""), content)
                partly_failed(
                    [n for i, n in enumerate(names) if statuses.get(i) not in (200, 204, 404)]
                )
        except PartlyFailed as exc:
            return exc.names
        except OSError:  # the outcome is unknown
            return names
        return []

    def create(self, name: str, data: bytes) -> None:
        from fsspec.asyn import sync

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
        with self.request("put"):
            try:
                _, headers, _, _ = sync(
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
        self.last_date = http_date(headers.get("Date")) or self.last_date
