"""The extension point: the storage contract, the stores vsqs ships, and URL schemes.

A store is one queue's flat namespace (:class:`Store`). To add a backend:

* write a :class:`Store` (its docstring is the contract), or, for an object
  store, an :class:`ObjectIO` (one method per request) and wrap it in an
  :class:`ObjectStore`, which runs the claim protocol of ``docs/protocol.md``
  on it; :class:`FsspecObjects` does this for any fsspec filesystem;
* run the conformance suites on it: subclass :class:`vsqs.testing.StoreTests`
  and :class:`vsqs.testing.QueueTests` with a ``store`` fixture;
* reach it by URL: :func:`register_scheme` in a process, or, so that every
  process finds it (the ``vsqs`` command, Spark's Python workers), an entry
  point in the ``vsqs.stores`` group of your package::

      [project.entry-points."vsqs.stores"]
      myscheme = "mypackage.store:open_store"

  where ``open_store(url, storage_options)`` returns a :class:`Store`.

A store's ``read_limited`` refuses an object over the limit with :class:`TooLarge`.
A ``Store`` object also works without a scheme: ``vsqs.Queue(store)``.
See ``docs/stores.md``.
"""

from __future__ import annotations

from ._base import OutcomeUnknown, Store, TooLarge
from ._fsspec import FsspecObjects
from ._local import LocalStore
from ._memory import MemoryStore
from ._object import ObjectStore
from ._object_io import ObjectIO
from ._registry import ENTRY_POINT_GROUP, Opener, register_scheme, unregister_scheme

__all__ = [
    "ENTRY_POINT_GROUP",
    "FsspecObjects",
    "LocalStore",
    "MemoryStore",
    "ObjectIO",
    "ObjectStore",
    "Opener",
    "OutcomeUnknown",
    "Store",
    "TooLarge",
    "register_scheme",
    "unregister_scheme",
]
