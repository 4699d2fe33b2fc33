"""Queue locations: a path or URL, parsed and checked for its form alone.

A :class:`Location` is what every part of vsqs that takes a queue location
from a user works on (the registry that opens its store, a dead-letter
setting, ``redrive`` and ``move``): it is made only from text that names a
queue (no NUL, no text a file name cannot hold, no empty, ``.`` or ``..``
URL path component, a valid queue name last, no local path that is a
mistyped URL), so a location never reaches a store as a path outside the
queue it names. Errors are one-line :class:`~vsqs.InvalidQueueName`.

Nothing here makes a store or sends a request: which store serves a URL,
and whether its package is installed, is :mod:`vsqs.stores._registry`'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from .._errors import InvalidArgument, InvalidQueueName
from .._names import validate_queue_name

#: A URL scheme (RFC 3986), in lower case.
SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
#: Schemes whose ``scheme:`` at the start of a local path is a mistyped URL
#: (besides those registered or installed as plugins).
LIKELY_SCHEMES = frozenset(
    {"s3", "s3a", "gs", "gcs", "file", "memory", "http", "https", "ftp", "sftp"}
)
_Options: TypeAlias = dict[str, Any] | None
#: Schemes whose URLs name a bucket, then a queue inside it.
_BUCKETS = frozenset({"s3", "s3a", "gs", "gcs"})
#: Schemes that name the stores of another (``s3a`` is Hadoop's name for S3).
_ALIASES = {"s3a": "s3", "gcs": "gs"}


@dataclass(frozen=True)
class Location:
    """A queue location, checked for its form: a local directory
    (``scheme`` is ``None``, ``url`` its absolute path) or an object-store
    URL (``url`` with its ``scheme`` in lower case)."""

    scheme: str | None
    url: str

    @classmethod
    def parse(cls, location: object, schemes: Container[str] = ()) -> Location:
        """The location a path, ``file://`` URL or object-store URL names
        (its messages show a URL without the user and password it may carry);
        :class:`~vsqs.InvalidQueueName` if it names no queue. A local path
        starting like a URL of a scheme of ``schemes`` (or
        :data:`LIKELY_SCHEMES`) with a slash or two missing is refused as
        a mistyped URL."""
        scheme, url = split(location)
        if scheme is None:
            return cls(None, local_path(url, schemes))
        validate_queue_name(check_components(url))
        return cls(scheme, url)

    @property
    def key(self) -> str:
        """What two spellings of one queue location have in common, found
        without making a store: a local path as its real path (after
        symlinks); an object-store URL as its scheme (aliases folded) and its
        path without slashes around it. Two endpoints of one server are not
        found out this way (:func:`vsqs._place.same_place` looks)."""
        if self.scheme is None:
            return os.path.realpath(self.url)
        return (
            f"{_ALIASES.get(self.scheme, self.scheme)}://{self.url.partition('://')[2].strip('/')}"
        )


def without_credentials(text: str) -> str:
    """``text`` with the ``user:password@`` of each URL authority in it removed
    (``ftp://user:secret@host/q`` is ``ftp://host/q``): how error messages
    show a location."""
    return "::".join(_link_without_credentials(link) for link in text.split("::"))


def _link_without_credentials(link: str) -> str:
    scheme, sep, rest = link.partition("://")
    if not sep:
        return link
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def is_sibling_name(setting: str) -> bool:
    """Whether a ``dead_letter`` setting is a bare queue name, which stands
    for the queue of that name next to this one (its sibling), rather than
    a path or a URL."""
    return "/" not in setting and "://" not in setting


def object_store_options(location: object, options: _Options) -> _Options:
    """``options`` if ``location`` is an object-store URL (or a store), ``None``
    if it is a local path: a move between a local queue and an object store
    takes the object store's storage options."""
    if isinstance(location, str | os.PathLike) and split(location)[0] is None:
        return None
    return options


def split(location: object) -> tuple[str | None, str]:
    """``(scheme, url)`` of an object-store URL (scheme in lower case), or
    ``(None, text)`` of a local path or ``file://`` URL."""
    text = location_text(location, "queue location is a path, URL or Store")
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()  # schemes are case-insensitive (RFC 3986)
    if sep and not all(SCHEME.fullmatch(part) for part in scheme.split("::")):
        spaces = " (spaces around it?)" if scheme != scheme.strip() else ""
        raise InvalidQueueName(
            f"{without_credentials(text)!r:.80}: {scheme!r:.40} is not a URL scheme{spaces}"
        )
    if sep and scheme != "file":
        return scheme, f"{scheme}://{rest}"
    return None, text


def local_path(text: str, schemes: Container[str] = ()) -> str:
    """The absolute path of a local path or ``file://`` URL (validated)."""
    _, sep, rest = text.partition("://")
    if sep:
        text = file_url_path(text, rest)
    else:
        _refuse_mistyped_url(text, schemes)
    path = os.path.abspath(text)
    validate_queue_name(os.path.basename(path))
    return path


def location_text(location: object, what: str) -> str:
    """The text of an untrusted path or URL; refuse other types, NUL and blank text."""
    if not isinstance(location, str | os.PathLike):
        raise InvalidQueueName(f"a {what}, not {type(location).__name__}")
    text = os.fspath(location)
    if not isinstance(text, str):
        raise InvalidQueueName("a queue path must be text, not bytes")
    if "\x00" in text or not text.strip():
        raise InvalidQueueName(f"invalid queue path {without_credentials(text)!r:.80}")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate that no file or key name can hold
        raise InvalidQueueName(
            f"invalid queue path {without_credentials(text)!r:.80}: not encodable"
        ) from None
    return text


def mistyped_url(path: str, schemes: Container[str] = ()) -> str | None:
    """The URL that a local path starting like a URL with a slash or two
    missing (``s3:/bucket/q``, ``s3:bucket/q``, ``file:/tmp/q``) probably
    meant, or ``None`` if it does not look like one (its scheme one of
    :data:`LIKELY_SCHEMES` or ``schemes``)."""
    head = path.split("/", 1)[0]
    prefix, colon, rest = path.partition(":")
    scheme = prefix.lower()
    if not colon or ":" not in head or (scheme not in LIKELY_SCHEMES and scheme not in schemes):
        return None
    if scheme == "file":  # file:///tmp/q is /tmp/q; file:tmp/q would be tmp/q
        return f"file://{rest}" if rest.startswith("/") else rest
    return f"{scheme}://{rest.lstrip('/')}"


def _refuse_mistyped_url(path: str, schemes: Container[str]) -> None:
    """Refuse a local path that looks like a mistyped URL: it would make a
    directory ``s3:``."""
    fixed = mistyped_url(path, schemes)
    if fixed is None:
        return
    scheme = path.partition(":")[0].lower()
    # file:tmp/q is fixed to the relative tmp/q: no "://" to split at.
    parts = [part for part in fixed.split("://")[-1].split("/") if part]
    if len(parts) >= (2 if scheme in _BUCKETS else 1):
        raise InvalidQueueName(
            f"{path!r:.80} looks like a mistyped URL: did you mean {fixed!r:.80}?"
        )
    form = "bucket/queue" if scheme in _BUCKETS else "path/queue"
    if scheme == "file":
        form = "/path/queue"
    raise InvalidQueueName(
        f"{path!r:.80} looks like a mistyped URL and names no queue: "
        f"a queue URL reads '{scheme:.20}://{form}'"
    )


def file_url_path(url: str, path: str) -> str:
    """The path of a ``file://`` URL (RFC 8089: its host, if any, must be
    ``localhost``); an empty one would be the working directory."""
    host, slash, rest = path.partition("/")
    if host.lower() == "localhost":
        path = slash + rest
    elif host:  # fsspec would take file://tmp/q for the relative path tmp/q
        raise InvalidQueueName(
            f"{url!r:.80} names the host {host!r:.40}: a local directory is "
            f"'file:///{path}' (three slashes) or a plain path"
        )
    if not path.strip():
        raise InvalidQueueName(f"{url!r:.80}: a file:// URL needs a path")
    return path


def url_path(url: str) -> str:
    """The path a URL names: after its last ``::`` link and scheme, without a query."""
    return url.rsplit("::", 1)[-1].split("://", 1)[-1].split("?", 1)[0].rstrip("/")


def check_components(url: str) -> str:
    """Refuse a URL whose path has an empty, ``.`` or ``..`` component, before
    any filesystem (and its credential lookup) is made. Returns the last component."""
    parts = url_path(url).split("/")
    if any(part in ("", ".", "..") for part in parts[1:]) or parts[0] in (".", ".."):
        raise InvalidQueueName(
            f"{without_credentials(url)}: empty, '.' or '..' path components are refused"
        )
    return parts[-1]


#: Where botocore takes an S3 endpoint from, besides the storage options.
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def check_s3_endpoints(options: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    """Refuse the S3 endpoint in effect (the first given and not empty of
    the storage option ``endpoint_url``, ``client_kwargs.endpoint_url`` and
    the :data:`ENDPOINT_VARIABLES`) if it is not ``http(s)://host[:port]``:
    botocore would refuse it only at the first request, in a long
    traceback. One line naming where it came from."""
    client = options.get("client_kwargs")
    given = [
        ("storage option endpoint_url", options.get("endpoint_url")),
        (
            "storage option client_kwargs.endpoint_url",
            client.get("endpoint_url") if isinstance(client, Mapping) else None,
        ),
        *((name, environ.get(name)) for name in ENDPOINT_VARIABLES),
    ]
    where, value = next(((k, v) for k, v in given if v not in (None, "")), ("", None))
    if value is not None and not (isinstance(value, str) and _is_endpoint(value)):
        raise InvalidArgument(
            f"{where}={value!r:.80} is not an endpoint URL: use the form http://host:port "
            "(or https://)"
        )


def _is_endpoint(value: str) -> bool:
    try:
        parts = urlsplit(value)
        return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:  # a bad port or IPv6 literal
        return False
