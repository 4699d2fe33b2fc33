"""An object store of a test's server, opened as vsqs opens it, and its
names as the server lists them."""

from __future__ import annotations

from typing import Any

from vsqs.stores._object import ObjectStore
from vsqs.stores._registry import open_store

from .servers import Server


def object_store(server: Server, name: str = "q", **kwargs: Any) -> ObjectStore:
    store = open_store(server.url(name), server.storage_options)
    assert isinstance(store, ObjectStore)
    return ObjectStore(store.io, **kwargs) if kwargs else store


def raw_names(store: ObjectStore) -> list[str]:
    return [name for name, _ in store.io.listing()]
