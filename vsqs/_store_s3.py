"""S3 (and S3-compatible stores) through s3fs, with the conditions S3 honours.

Requests go through ``S3FileSystem.call_s3`` so that their conditions reach
the server: ``put_object(IfNoneMatch="*")`` is the exclusive create,
``delete_object(IfMatch=etag)`` a compare-and-delete that also reports an absent
key (a plain S3 DELETE of an absent key succeeds silently), and one
``delete_objects`` request removes up to 1 000 keys. Listings are read page by
page (1 000 keys, in key order) so a receiver stops at the head of a backlog.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import Any

from ._store_fsspec import FsspecObjects

#: An ETag no object has: a delete conditioned on it must be refused.
_NO_SUCH_ETAG = '"00000000000000000000000000000000"'
_PAGE = 1000


def _precondition_failed(exc: BaseException) -> bool:
    """Whether s3fs raised for an HTTP 412 (it maps some to ``OSError(EINVAL)``)."""
    cause = exc.__cause__ or exc.__context__
    response = getattr(cause, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code == "PreconditionFailed" or "pre-condition" in str(exc)


@contextmanager
def _unknown_outcome(method: str) -> Iterator[None]:
    """Raise botocore's own errors (connection errors, timeouts once the
    retries are spent; s3fs passes them through) as ``ConnectionError``: an
    ``OSError`` whose request may or may not have taken effect, as the
    protocol assumes of every ``OSError``."""
    from botocore.exceptions import BotoCoreError

    try:
        yield
    except BotoCoreError as exc:
        raise ConnectionError(f"{method}: {exc}") from exc


def _one_get() -> dict[str, Any]:
    """``cat_file`` arguments for one ``GET``: newer s3fs first sends a ``HEAD``
    (to split large objects into ranged GETs, with another copy of the body)
    unless ``max_concurrency`` is 1; older s3fs has no such argument."""
    import s3fs

    parameters = inspect.signature(s3fs.S3FileSystem._cat_file).parameters
    return {"max_concurrency": 1} if "max_concurrency" in parameters else {}


_ONE_GET = _one_get()


class S3Objects(FsspecObjects):
    """A queue under ``bucket/prefix/name`` of an ``s3fs.S3FileSystem``."""

    conditional_delete = True

    def __init__(self, fs: Any, root: str, url: str, **kwargs: Any) -> None:
        super().__init__(fs, root, url, **kwargs)
        self.bucket, _, prefix = self.root.partition("/")
        self.prefix = prefix + "/"

    def _call(self, method: str, **kwargs: Any) -> Any:
        with _unknown_outcome(method):
            return self.fs.call_s3(method, Bucket=self.bucket, **kwargs)

    def container_exists(self) -> bool:
        """One ``HEAD`` of the bucket: only a 404 means it is missing (s3fs's
        ``exists`` answers False for any error, a throttled or dead network too)."""
        self.count("head")
        try:
            self._call("head_bucket")
        except FileNotFoundError:
            return False
        return True

    def get(self, name: str) -> bytes:
        self.count("get")
        with _unknown_outcome("get_object"):
            data: bytes = self.fs.cat_file(self._path(name), **_ONE_GET)
        return data

    def listing(self) -> Iterator[tuple[str, float | None]]:
        token: dict[str, str] = {}
        while True:
            self.count("list")
            page = self._call(
                "list_objects_v2", Prefix=self.prefix, Delimiter="/", MaxKeys=_PAGE, **token
            )
            for entry in page.get("Contents", ()):
                name = entry["Key"][len(self.prefix) :]
                if name:
                    yield name, entry["LastModified"].timestamp()
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def create(self, name: str, data: bytes) -> str | None:
        self.count("put")
        response = self._call("put_object", Key=self.prefix + name, Body=data, IfNoneMatch="*")
        etag: str | None = response.get("ETag")
        return etag

    def copy(self, src: str, dst: str) -> str | None:
        self.count("copy")
        response = self._call(
            "copy_object",
            Key=self.prefix + dst,
            CopySource={"Bucket": self.bucket, "Key": self.prefix + src},
        )
        etag: str | None = response.get("CopyObjectResult", {}).get("ETag")
        return etag

    def delete(self, name: str, tag: str | None = None) -> None:
        if tag is None:
            self.count("head")
            tag = self._call("head_object", Key=self.prefix + name)["ETag"]
        self.count("delete")
        try:
            self._call("delete_object", Key=self.prefix + name, IfMatch=tag)
        except OSError as exc:
            if _precondition_failed(exc):
                raise FileNotFoundError(name) from None  # replaced: not the object we knew
            raise

    def remove(self, names: list[str]) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(names), _PAGE):
            chunk = names[start : start + _PAGE]
            self.count("delete")
            try:
                response = self._call(
                    "delete_objects",
                    Delete={"Objects": [{"Key": self.prefix + n} for n in chunk], "Quiet": True},
                )
            except OSError:
                failed.extend(chunk)
                continue
            failed.extend(error["Key"][len(self.prefix) :] for error in response.get("Errors", ()))
        return failed

    def clock_offset(self) -> float | None:
        """From the ``Date`` header of a ``HEAD`` of the bucket (whole seconds)."""
        self.count("head")
        before = time.time()
        response = self._call("head_bucket")
        after = time.time()
        date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        if not date:
            return None
        # The header truncates to the second: the server's time was in [date, date + 1).
        return parsedate_to_datetime(date).timestamp() + 0.5 - (before + after) / 2

    def probe_conditional_delete(self, name: str, tag: str | None) -> bool:
        try:
            self._call("delete_object", Key=self.prefix + name, IfMatch=_NO_SUCH_ETAG)
        except OSError as exc:
            return _precondition_failed(exc)
        return False  # the condition was ignored and the probe object deleted
