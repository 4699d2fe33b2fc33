"""S3 (and S3-compatible stores) through s3fs.

Requests go through ``S3FileSystem.call_s3`` so that their conditions reach
the server: ``put_object(IfNoneMatch="*")`` is the exclusive create, and one
``delete_objects`` request removes up to 1 000 keys. Listings are read page by
page (1 000 keys, in key order) so a receiver stops at the head of a backlog.

botocore and s3fs retry a request whose response was lost or that the server
refused with 5xx, and aiohttp re-sends an idempotent one once when a
kept-alive connection breaks. That is safe for every request vsqs sends (a
``GET``, ``HEAD``, ``LIST``, copy or delete of a name that never recurs), but
not for a create: a create re-sent after the first one took effect and the
message was consumed would create the message again. So a create's failed
attempt is never re-sent: a ``needs-retry`` hook on the client turns it into
:class:`CreateOutcomeUnknown`, which s3fs does not retry either, aiohttp's
re-send is turned off on the client's sessions, and vsqs resolves the outcome
itself (``docs/protocol.md``). A 412 is recognised by its status
(Ceph RGW's carries no ``<Condition>``, so s3fs cannot tell it from other
errors), and a server that does not implement conditional creates (501) is
reported as :class:`vsqs.UnsupportedStore` in its own words.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._errors import InvalidArgument, UnsupportedStore
from ._fsspec import FsspecObjects
from ._object_io import PartlyFailed, http_date, partly_failed

log = logging.getLogger("vsqs")

_PAGE = 1000
#: Statuses botocore retries (501 Not Implemented is final).
_RETRIED = frozenset({408, 429, 500, 502, 503, 504})
#: ``needs-retry`` hooks on one client are registered under this id once.
_HOOK_ID = "vsqs-never-resend-a-create"


class CreateOutcomeUnknown(ConnectionError):
    """An exclusive create failed in a way that leaves its outcome unknown; not re-sent."""


def _never_resend_a_create(
    request_dict: dict[str, Any] | None = None,
    response: tuple[Any, dict[str, Any]] | None = None,
    caught_exception: BaseException | None = None,
    **_: Any,
) -> None:
    """botocore's ``needs-retry`` event for ``PutObject``: stop its retries of a create."""
    headers = (request_dict or {}).get("headers", {})
    if headers.get("If-None-Match") != "*":
        return
    status = getattr(response[0], "status_code", 0) if response else 0
    if caught_exception is not None or status in _RETRIED:
        raise CreateOutcomeUnknown(f"a create failed ({caught_exception or status}); not re-sent")


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(
        "%s: a create whose connection breaks may be sent twice, and a consumed "
        "message come back (docs/protocol.md)",
        message,
    )


def _status(exc: BaseException) -> tuple[int, str, str]:
    """HTTP status, error code and message behind an error s3fs raised (0 if none)."""
    cause = exc.__cause__ or exc.__context__
    response = getattr(cause, "response", None)
    if not isinstance(response, dict):
        return 0, "", ""
    error = response.get("Error", {})
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return int(status or 0), str(error.get("Code", "")), str(error.get("Message", ""))


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


def _check_session_options(url: str, fs: Any) -> None:
    """s3fs hands the storage options it does not know to botocore's session
    at the first request, where they fail as a ``TypeError``: refuse them now,
    in one line that names them."""
    import aiobotocore.session

    known = inspect.signature(aiobotocore.session.AioSession).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in known.values()):
        return
    unknown = sorted(set(getattr(fs, "kwargs", {})) - set(known))
    if unknown:
        raise InvalidArgument(f"{url}: s3fs takes no storage option {', '.join(unknown)}")


class S3Objects(FsspecObjects):
    """A queue under ``bucket/prefix/name`` of an ``s3fs.S3FileSystem``."""

    names_per_remove = _PAGE

    def __init__(self, fs: Any, root: str, url: str, **kwargs: Any) -> None:
        _check_session_options(url, fs)
        super().__init__(fs, root, url, **kwargs)
        self.bucket, _, prefix = self.root.partition("/")
        self.prefix = prefix + "/"

    def _call(self, method: str, **kwargs: Any) -> Any:
        with _unknown_outcome(method):
            response = self.fs.call_s3(method, Bucket=self.bucket, **kwargs)
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        self.last_date = http_date(headers.get("date")) or self.last_date
        return response

    def container_exists(self) -> bool:
        """One ``HEAD`` of the bucket: only a 404 means it is missing (s3fs's
        ``exists`` answers False for any error, a throttled or dead network too)."""
        try:
            with self.request("head"):
                self._call("head_bucket")
        except FileNotFoundError:
            return False
        return True

    def get(self, name: str) -> bytes:
        with self.request("get"), _unknown_outcome("get_object"):
            data: bytes = self.fs.cat_file(self._path(name), **_ONE_GET)
        return data

    def exists(self, name: str) -> bool:
        try:
            with self.request("head"):
                self._call("head_object", Key=self.prefix + name)
        except FileNotFoundError:
            return False
        return True

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        token: dict[str, str] = {}
        while True:
            with self.request("list"):
                page = self._call(
                    "list_objects_v2",
                    Prefix=self.prefix + prefix,
                    Delimiter="/",
                    MaxKeys=_PAGE,
                    **token,
                )
            for entry in page.get("Contents", ()):
                name = entry["Key"][len(self.prefix) :]
                if name:
                    yield name, entry["LastModified"].timestamp()
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def _guard_creates(self) -> None:
        """Keep the client stack from re-sending a create: botocore (a
        ``needs-retry`` hook, once per client) and aiohttp, which re-sends an
        idempotent request (a ``PUT``) once when a kept-alive connection breaks
        (its own test client turns that off the same way)."""
        from fsspec.asyn import sync

        sync(self.fs.loop, self.fs.set_session)  # a create may be its first request
        client = sync(self.fs.loop, self.fs.get_s3, self.bucket)
        client.meta.events.register_first(
            "needs-retry.s3.PutObject", _never_resend_a_create, unique_id=_HOOK_ID
        )
        http = getattr(getattr(client, "_endpoint", None), "http_session", None)
        sessions = getattr(http, "_sessions", None)
        if not isinstance(sessions, dict):
            _warn_once(f"{self.url}: cannot keep aiohttp from re-sending a create")
            return
        for session in sessions.values():
            if getattr(session, "_retry_connection", None) is None:
                _warn_once(f"{self.url}: cannot keep aiohttp from re-sending a create")
            session._retry_connection = False

    def create(self, name: str, data: bytes) -> None:
        with self.request("put"):
            self._guard_creates()
            try:
                self._call("put_object", Key=self.prefix + name, Body=data, IfNoneMatch="*")
            except CreateOutcomeUnknown:
                raise
            except OSError as exc:
                status, code, message = _status(exc)
                if status == 412 or isinstance(exc, FileExistsError):
                    raise FileExistsError(name) from None
                if status == 501 or code == "NotImplemented":
                    raise UnsupportedStore(
                        f"{self.url}: the store does not implement exclusive creates "
                        f"(PUT with If-None-Match: *): {status} {code} {message}".rstrip()
                    ) from None
                raise

    def copy(self, src: str, dst: str) -> None:
        with self.request("copy"):
            self._call(
                "copy_object",
                Key=self.prefix + dst,
                CopySource={"Bucket": self.bucket, "Key": self.prefix + src},
            )

    def remove(self, names: list[str]) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(names), _PAGE):
            chunk = names[start : start + _PAGE]
            keys = [{"Key": self.prefix + n} for n in chunk]
            try:
                with self.request("delete"):
                    response = self._call("delete_objects", Delete={"Objects": keys, "Quiet": True})
                    errors = response.get("Errors", ())
                    partly_failed([error["Key"][len(self.prefix) :] for error in errors])
            except PartlyFailed as exc:
                failed.extend(exc.names)
            except OSError:
                failed.extend(chunk)
        return failed

    def store_date(self) -> float | None:
        """The ``Date`` header of a ``HEAD`` of the bucket (whole seconds)."""
        with self.request("head"):
            response = self._call("head_bucket")
        return http_date(response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date"))
