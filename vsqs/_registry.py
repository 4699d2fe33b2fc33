"""Which store serves a queue location."""

from __future__ import annotations

import os
from typing import Any

from ._errors import InvalidQueueName, UnsupportedStore
from ._names import validate_queue_name
from ._store import Store
from ._store_local import LocalStore


def open_store(location: object, storage_options: dict[str, Any] | None) -> Store:
    """Resolve a path, ``file://`` URL or :class:`Store` to a store (not yet opened)."""
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
    if sep:
        if scheme != "file":
            raise UnsupportedStore(
                f"no vsqs backend for {scheme}:// URLs in this version; "
                "use a local path or file:// URL"
            )
        text = rest
    if storage_options:
        raise UnsupportedStore("storage_options apply to object-store URLs, not local paths")
    path = os.path.abspath(text)
    validate_queue_name(os.path.basename(path))
    return LocalStore(path)
