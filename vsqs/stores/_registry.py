"""Which store serves a queue location.

Local paths and ``file://`` URLs are directories (:class:`LocalStore`). A
``scheme://`` URL goes, in this order, to a store registered in this process
(:func:`register_scheme`), to vsqs's own S3 and GCS stores, to a plugin
installed under the ``vsqs.stores`` entry-point group, and else to an object
store reached through fsspec. Packages are imported only when used, and a
missing one is reported with the extra that installs it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from .. import _forks
from .._errors import (
    InvalidArgument,
    InvalidQueueName,
    NotAQueue,
    QueueNotFound,
    QueuePermissionError,
    StorageError,
    UnsupportedStore,
    VsqsError,
)
from .._fanout import POOL_THREADS
from .._names import CONFIG_NAME, validate_queue_name
from ._base import Store
from ._local import LocalStore
from ._location import (
    SCHEME,
    Location,
    check_components,
    check_s3_endpoints,
    file_url_path,
    location_text,
    url_path,
    without_credentials,
)
from ._location import mistyped_url as mistyped_spelling

#: scheme -> (package, vsqs extra that installs it); other schemes need only fsspec.
_PACKAGES = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
}
#: Schemes whose first path component is a bucket.
_BUCKETED = {"s3", "s3a", "gs", "gcs"}

#: ``opener(url, storage_options)``: the store of a queue URL of a registered scheme.
Opener = Callable[[str, dict[str, Any]], Store]
#: The entry-point group under which installed packages offer stores, by scheme.
ENTRY_POINT_GROUP = "vsqs.stores"
_registered: dict[str, Opener | str] = {}
_plugins: dict[str, str] | None = None  # scheme -> "module:attr", read once
_registry_lock = _forks.lock()


def register_scheme(scheme: str, opener: Opener | str, *, clobber: bool = False) -> None:
    """Serve ``scheme://`` URLs with ``opener(url, storage_options) -> Store``.

    ``opener`` may be a ``"module:attr"`` string, imported on first use. The
    URL is checked as every URL is (no empty, ``.`` or ``..`` component, a
    valid queue name last) before the opener sees it. A registration holds in
    this process only: other processes (Spark's Python workers) find a store
    installed under the ``vsqs.stores`` entry-point group. ``file`` cannot be
    registered; replacing another registration, or vsqs's own ``s3``, ``s3a``,
    ``gs`` and ``gcs``, needs ``clobber=True``.
    """
    if not isinstance(scheme, str) or not SCHEME.fullmatch(scheme.lower()):
        raise InvalidArgument(
            f"{scheme!r:.40} is not a URL scheme (RFC 3986: a letter, then a-z0-9+.-)"
        )
    scheme = scheme.lower()
    if scheme == "file":
        raise InvalidArgument(
            "file:// URLs are local directories; that scheme cannot be registered"
        )
    if not callable(opener) and not (isinstance(opener, str) and ":" in opener):
        raise InvalidArgument(
            f"an opener is a callable or a 'module:attr' string, not {opener!r:.60}"
        )
    with _registry_lock:
        current = _registered.get(scheme)
        taken = current is not None and current != opener
        if (taken or scheme in _PACKAGES) and not clobber:
            raise InvalidArgument(
                f"{scheme}:// is served already ({current or 'by vsqs'}); clobber=True replaces it"
            )
        _registered[scheme] = opener


def unregister_scheme(scheme: str) -> None:
    """Forget what :func:`register_scheme` registered for ``scheme`` (if anything)."""
    with _registry_lock:
        _registered.pop(scheme.lower(), None)


def _opener(scheme: str) -> Opener | None:
    """The opener registered in this process, else a built-in's (``None``), else a plugin's."""
    with _registry_lock:
        opener = _registered.get(scheme)
    if opener is None and scheme not in _PACKAGES:
        opener = _installed_plugins().get(scheme)
    if opener is None or callable(opener):
        return opener
    module, _, attr = opener.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UnsupportedStore(f"{scheme}:// stores: cannot load {opener!r}: {exc}") from None
    if not callable(found):
        raise UnsupportedStore(f"{scheme}:// stores: {opener!r} is not callable")
    return found  # type: ignore[no-any-return]


def _installed_plugins() -> dict[str, str]:
    """Schemes offered under :data:`ENTRY_POINT_GROUP`, read once per process."""
    global _plugins
    if _plugins is None:
        found = {ep.name.lower(): ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
        _plugins = {k: v for k, v in found.items() if SCHEME.fullmatch(k) and k != "file"}
    return _plugins


def open_store(location: object, storage_options: dict[str, Any] | None) -> Store:
    """Resolve a path, URL or :class:`Store` to a store (not yet opened)."""
    if isinstance(location, Store):
        return location
    where = parse_location(location)
    if where.scheme is not None:
        return _object_store(where.scheme, where.url, storage_options or {})
    if storage_options:
        raise UnsupportedStore("storage_options apply to object-store URLs, not local paths")
    return LocalStore(where.url)


def parse_location(location: object) -> Location:
    """:meth:`Location.parse` knowing the schemes registered in this process
    and installed as plugins (a local path starting like one is a mistyped URL)."""
    return Location.parse(location, _KNOWN_SCHEMES)


def same_location(a: object, b: object) -> bool:
    """Whether two paths or URLs name one queue, as far as their spelling
    tells (:attr:`~vsqs.stores._location.Location.key`)."""
    return parse_location(a).key == parse_location(b).key


def check_location(location: str) -> None:
    """Refuse what :func:`open_store` would refuse for its form alone, without
    making a store or a request: a path or URL that names no valid queue, a
    mistyped URL, a web URL, and a scheme that no store on this host serves
    (with the extra that installs its package)."""
    where = parse_location(location)
    if where.scheme is None:
        return
    _check_url(where.scheme, where.url)
    if _opener(where.scheme) is None:
        for protocol in where.scheme.split("::"):
            _filesystem_class(protocol)


def mistyped_url(path: str) -> str | None:
    """The URL that a local path starting like a URL with a slash or two
    missing probably meant (:func:`~vsqs.stores._location.mistyped_url`,
    schemes registered or installed here included), or ``None``."""
    return mistyped_spelling(path, _KNOWN_SCHEMES)


class _KnownSchemes:
    """The schemes registered in this process or installed as plugins, looked
    up only when a path starts like a URL (plugins are read once, on demand)."""

    def __contains__(self, scheme: object) -> bool:
        with _registry_lock:
            if scheme in _registered:
                return True
        return scheme in _installed_plugins()


_KNOWN_SCHEMES = _KnownSchemes()


#: Web URLs can be read, not written exclusively: no queue lives there.
_WEB = {"http", "https"}


def _check_resolved(url: str, path: str, name: str) -> None:
    """Refuse a URL that fsspec resolves to another path than the one checked
    (whose last component is ``name``): a query string kept in the key, or a
    chained URL whose outer link ignores the inner path (``file::memory://a/q``
    is the working directory)."""
    if path.rpartition("/")[2] != name or (
        "::" in url and path.strip("/") != url_path(url).strip("/")
    ):
        raise InvalidQueueName(
            f"{without_credentials(url)}: resolves to {path!r}, not to the path it names"
        )


def _check_registered(url: str) -> None:
    """Refuse, for a registered scheme's opener, a URL with a query, fragment or
    ``::`` chain: an opener parses its URL its own way, so the whole of what
    follows ``://`` must be the path :func:`~vsqs.stores._location.check_components` checked
    (``mystore://../..::x/q`` would pass it)."""
    if any(mark in url.partition("://")[2] for mark in ("?", "#", "::")):
        raise InvalidQueueName(
            f"{without_credentials(url)}: a query, fragment or '::' chain is refused here"
        )


def _check_url(scheme: str, url: str) -> str:
    """Refuse an object-store URL that names no queue, or that only a web
    server would serve; its queue name."""
    name = validate_queue_name(check_components(url))
    if _opener(scheme) is not None:
        _check_registered(url)
    elif scheme in _BUCKETED and "/" not in url_path(url):
        raise InvalidQueueName(
            f"{without_credentials(url)}: name a queue inside the bucket ({scheme}://bucket/queue)"
        )
    elif scheme in _WEB:
        raise UnsupportedStore(
            f"{without_credentials(url)}: a web server cannot hold a queue (no exclusive creates); "
            "use s3://, gs://, a registered scheme or a path"
        )
    return name


def _object_store(scheme: str, url: str, storage_options: dict[str, Any]) -> Store:
    name = _check_url(scheme, url)
    opener = _opener(scheme)
    if opener is not None:
        store = opener(url, dict(storage_options))
        if not isinstance(store, Store):
            raise UnsupportedStore(
                f"{without_credentials(url)}: the store registered for {scheme}:// returned a "
                f"{type(store).__name__}, not a vsqs Store"
            )
        return store
    fs, path = _filesystem(scheme, url, storage_options)
    _check_resolved(url, path, name)
    bucketed = scheme in _BUCKETED
    display = _display_url(url, path, bucketed)
    from ._object import ObjectStore

    if scheme in ("s3", "s3a"):
        from ._s3 import S3Objects

        return ObjectStore(S3Objects(fs, path, display, bucketed=True))
    if scheme in ("gs", "gcs"):
        from ._gcs import GCSObjects

        return ObjectStore(GCSObjects(fs, path, display, bucketed=True))
    from ._fsspec import FsspecObjects

    return ObjectStore(FsspecObjects(fs, path, display, bucketed=bucketed))


def _display_url(url: str, path: str, bucketed: bool) -> str:
    base = url.split("://", 1)[0]
    return f"{base}://{path.lstrip('/')}" if bucketed else f"{base}://{path}"


def _fsspec(scheme: str) -> Any:
    """The fsspec module; if it is missing, :class:`UnsupportedStore` naming the extra."""
    extra = _PACKAGES.get(scheme.rpartition("::")[2], (None, None))[1]
    try:
        import fsspec
        import fsspec.core
    except ImportError:
        hint = f"pip install 'vsqs[{extra}]'" if extra else "pip install fsspec"
        raise UnsupportedStore(f"{scheme}:// queues need fsspec: {hint}") from None
    return fsspec


def _filesystem_class(protocol: str) -> None:
    """Refuse a protocol that fsspec does not know, or whose package is missing."""
    fsspec = _fsspec(protocol)
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        raise _missing_package(protocol, exc) from None
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise UnsupportedStore(f"no vsqs backend for {protocol}:// URLs: {exc}") from None


def _missing_package(scheme: str, exc: ImportError) -> UnsupportedStore:
    package, extra = _PACKAGES.get(scheme.rpartition("::")[2], (None, None))
    if package is None:  # fsspec's message names the package of its protocol
        return UnsupportedStore(f"{scheme}:// queues: {exc}")
    return UnsupportedStore(f"{scheme}:// queues need {package}: pip install 'vsqs[{extra}]'")


def _filesystem(scheme: str, url: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path in it (no trailing slash)."""
    fsspec = _fsspec(scheme)
    options = dict(storage_options)
    if scheme in _PACKAGES:
        options.setdefault("use_listings_cache", False)
    if scheme in ("s3", "s3a"):  # botocore keeps 10 connections: batches need more
        check_s3_endpoints(options, os.environ)
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", POOL_THREADS)
        options["config_kwargs"] = config
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        raise _missing_package(scheme, exc) from None
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise UnsupportedStore(f"no vsqs backend for {scheme}:// URLs: {exc}") from None
    except OSError as exc:  # a filesystem that connects when it is made (ftp, sftp)
        raise StorageError(f"opening {without_credentials(url)}: {exc}") from exc
    return fs, path.rstrip("/")


def list_queues(
    root: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> list[str]:
    """The locations of the queues directly under ``root`` (a directory, a
    bucket or a prefix), sorted.

    A queue is a child with a valid queue name that holds a vsqs config;
    anything else is skipped, and symlinks are not followed. One listing of
    ``root`` plus one check per child; no queue is opened or changed.
    """
    text = location_text(root, "queue root is a path or URL")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme == "file":
        if storage_options:
            raise UnsupportedStore("storage_options apply to object-store URLs, not local paths")
        return _local_queues(os.path.abspath(file_url_path(text, rest) if sep else text))
    scheme = scheme.lower()
    last = check_components(text)
    if _opener(scheme) is not None:
        raise UnsupportedStore(
            f"{without_credentials(text)}: listing the queues of {scheme}:// stores "
            "is not supported"
        )
    fs, path = _filesystem(scheme, text, storage_options or {})
    _check_resolved(text, path, last)
    found = []
    try:
        for entry in fs.ls(path, detail=True):
            child = entry["name"].rstrip("/")
            if entry.get("type") != "directory" or not _is_queue_name(child.rpartition("/")[2]):
                continue
            if fs.isfile(f"{child}/{CONFIG_NAME}"):
                found.append(_display_url(text, child, scheme in _BUCKETED))
    except FileNotFoundError:
        raise QueueNotFound(f"nothing at {without_credentials(text)}") from None
    except Exception as exc:  # OSError, or the client library's own (botocore, aiohttp)
        raise _listing_error(exc, without_credentials(text)) from exc
    return sorted(found)


def _local_queues(root: str) -> list[str]:
    found = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False) or not _is_queue_name(entry.name):
                    continue
                with contextlib.suppress(OSError):
                    if stat.S_ISREG(os.lstat(os.path.join(entry.path, CONFIG_NAME)).st_mode):
                        found.append(entry.path)
    except FileNotFoundError:
        raise QueueNotFound(f"no directory at {root}") from None
    except NotADirectoryError:
        raise NotAQueue(f"{root} is not a directory") from None
    except OSError as exc:  # a symlink loop, a name too long, no permission
        raise _listing_error(exc, root) from exc
    return sorted(found)


def _listing_error(exc: Exception, where: str) -> VsqsError:
    if isinstance(exc, PermissionError):
        return QueuePermissionError(f"listing {where}: {exc}")
    return StorageError(f"listing {where}: {exc}")


def _is_queue_name(name: str) -> bool:
    try:
        validate_queue_name(name)
    except InvalidQueueName:
        return False
    return True
