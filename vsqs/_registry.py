"""Which store serves a queue location.

Local paths and ``file://`` URLs are directories (:class:`LocalStore`). Any
other ``scheme://`` URL is an object store reached through fsspec; its package
is imported only then, and a missing one is reported with the extra that
installs it.
"""

from __future__ import annotations

import os
from typing import Any

from ._errors import InvalidQueueName, UnsupportedStore
from ._names import validate_queue_name
from ._store import Store
from ._store_local import LocalStore

#: scheme -> (package, vsqs extra that installs it); other schemes need only fsspec.
_PACKAGES = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
}
#: Schemes whose first path component is a bucket.
_BUCKETED = {"s3", "s3a", "gs", "gcs"}


def open_store(location: object, storage_options: dict[str, Any] | None) -> Store:
    """Resolve a path, URL or :class:`Store` to a store (not yet opened)."""
    if isinstance(location, Store):
        return location
    if not isinstance(location, str | os.PathLike):
        raise InvalidQueueName(
            f"a queue location is a path, URL or Store, not {type(location).__name__}"
        )
    text = os.fspath(location)
    if not isinstance(text, str):
        raise InvalidQueueName("a queue path must be text, not bytes")
    if "\x00" in text or not text.strip():
        raise InvalidQueueName(f"invalid queue path {text!r:.80}")
    scheme, sep, rest = text.partition("://")
    if sep and scheme != "file":
        return _object_store(scheme.lower(), text, storage_options or {})
    if sep:
        text = rest
    if storage_options:
        raise UnsupportedStore("storage_options apply to object-store URLs, not local paths")
    path = os.path.abspath(text)
    validate_queue_name(os.path.basename(path))
    return LocalStore(path)


def _check_components(url: str) -> None:
    """Refuse a URL whose path has an empty, ``.`` or ``..`` component or a bad
    queue name, before any filesystem (and its credential lookup) is made."""
    path = url.rsplit("::", 1)[-1].split("://", 1)[-1].split("?", 1)[0].rstrip("/")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts[1:]) or parts[0] in (".", ".."):
        raise InvalidQueueName(f"{url}: empty, '.' or '..' path components are refused")
    validate_queue_name(parts[-1])


def _object_store(scheme: str, url: str, storage_options: dict[str, Any]) -> Store:
    package, extra = _PACKAGES.get(scheme, (None, None))
    try:
        import fsspec
        import fsspec.core
    except ImportError:
        hint = f"pip install 'vsqs[{extra}]'" if extra else "pip install fsspec"
        raise UnsupportedStore(f"{scheme}:// queues need fsspec: {hint}") from None
    _check_components(url)
    options = dict(storage_options)
    if scheme in _PACKAGES:
        options.setdefault("use_listings_cache", False)
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        if package is None:  # fsspec's message names the package of its protocol
            raise UnsupportedStore(f"{scheme}:// queues: {exc}") from None
        raise UnsupportedStore(
            f"{scheme}:// queues need {package}: pip install 'vsqs[{extra}]'"
        ) from None
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise UnsupportedStore(f"no vsqs backend for {scheme}:// URLs: {exc}") from None
    path = path.rstrip("/")
    head = path.rpartition("/")[0]
    bucketed = scheme in _BUCKETED
    if bucketed and not head:
        raise InvalidQueueName(f"{url}: name a queue inside the bucket ({scheme}://bucket/queue)")
    base = url.split("://", 1)[0]
    display = f"{base}://{path.lstrip('/')}" if bucketed else f"{base}://{path}"
    from ._store_object import ObjectStore

    if scheme in ("s3", "s3a"):
        from ._store_s3 import S3Objects

        return ObjectStore(S3Objects(fs, path, display, bucketed=True))
    from ._store_fsspec import FsspecObjects

    via = "gcs-generation" if scheme in ("gs", "gcs") else "create-only"
    return ObjectStore(FsspecObjects(fs, path, display, bucketed=bucketed, create_via=via))
