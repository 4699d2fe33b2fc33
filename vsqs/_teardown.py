"""Deleting a queue: everything vsqs wrote in it, and nothing else.

What vsqs writes in a queue: messages in every state and ``.new`` stages
(the name grammar), origin records of dead letters, deduplication records,
the config (``vsqs.json`` and its versions), on object stores move
markers, batch markers and capability probes, and on directories the
transitional names of splits (whose targets count as messages). Anything
else is foreign: it stays, and is named in the result. The config goes
last, so a delete cut short leaves a queue that opens, and that a second
delete finishes.
"""

from __future__ import annotations

import logging
import os
from contextlib import suppress

from . import _names as names
from ._configure import version_of
from ._dedup import parse_name
from ._errors import QueueNotEmpty, storage_errors
from ._message import DeletedQueue
from .stores._base import OutcomeUnknown, Store
from .stores._listing import SENDING_SUFFIX
from .stores._local import LocalStore
from .stores._moves import MOVED_SUFFIX
from .stores._object import ObjectStore
from .stores._probe import PROBE_PREFIX

log = logging.getLogger("vsqs")


def is_config(name: str) -> bool:
    """Whether ``name`` is the config object or one of its versions."""
    return name == names.CONFIG_NAME or version_of(name) is not None


def is_ours(name: str) -> bool:
    """Whether a listed name is one vsqs writes (a message or a ``.new``, an
    origin record, a deduplication record, the config or a version of it)."""
    return (
        names.parse(name) is not None
        or names.origin_id(name) is not None
        or parse_name(name) is not None
        or is_config(name)
    )


def _internal(name: str) -> bool:
    """Whether an object store's raw key is a marker or probe of vsqs's."""
    if name.startswith(PROBE_PREFIX):
        return True
    if name.endswith(MOVED_SUFFIX):
        return names.parse(name[: -len(MOVED_SUFFIX)]) is not None
    return name.endswith(SENDING_SUFFIX) and names.is_id(name[: -len(SENDING_SUFFIX)])


def _remove(store: Store, doomed: list[str]) -> int:
    removed = 0
    for name in doomed:
        with suppress(FileNotFoundError, OutcomeUnknown):
            store.delete(name, known=True)
            removed += 1
    store.flush()
    return removed


def delete_queue(store: Store, *, force: bool) -> DeletedQueue:
    """Delete the queue in ``store`` (see :meth:`vsqs.Queue.delete_queue`)."""
    with storage_errors(f"deleting {store.url}"):
        # On a directory, a split's targets count, linked yet or not.
        listed = list(store.list(settle=isinstance(store, LocalStore)))
        held = [n for n in listed if (p := names.parse(n)) is not None and p.state != names.NEW]
        if held and not force:
            raise QueueNotEmpty(
                f"{store.url} is not empty (messages: {len(held):,}): delete them first "
                "(vsqs purge), or force it (--force, force=True)"
            )
        removed = _remove(store, [n for n in listed if is_ours(n) and not is_config(n)])
        if isinstance(store, LocalStore):  # the splits' transitional names, which listings hide
            removed += _remove(store, store.splits())
        if isinstance(store, ObjectStore):  # markers and probes, which listings hide
            keys = [key for key, _ in store.io.listing() if _internal(key)]
            removed += len(keys) - len(store.io.remove(keys) if keys else [])
        configs = sorted((n for n in listed if is_config(n)), key=lambda n: version_of(n) or 1)
        removed += _remove(store, configs[::-1])  # vsqs.json last
        late = [n for n in store.list() if is_ours(n)]  # sent while this ran
        removed += _remove(store, late)
        if isinstance(store, LocalStore):
            kept = sorted(os.listdir(store.fd))  # directories too
            if not kept:
                with suppress(OSError):  # not empty after all: it stays
                    os.rmdir(store.path)
        else:
            kept = sorted(store.list())
    if kept:
        log.warning("%s: deleted, but left %d foreign names: %s", store.url, len(kept), kept[:10])
    log.info("%s: deleted the queue (%d objects)", store.url, removed)
    return DeletedQueue(removed, kept)


__all__ = ["delete_queue", "is_ours"]
