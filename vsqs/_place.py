"""Whether two queue locations are one place: the guard of every move
between two queues (``vsqs move``, :func:`vsqs.redrive`), which would never
end if it fed the queue it drains."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

from . import _names as names
from ._errors import InvalidArgument, StorageError, storage_errors
from .stores._base import Store

if TYPE_CHECKING:
    from ._queue import Queue


#: Fresh probe names a comparison tries: a create whose outcome is unknown
#: (a lost response) burns its name.
PROBE_ATTEMPTS = 3


def refuse_same(verb: str, source: Queue, destination: Queue) -> None:
    """Raise :class:`InvalidArgument` if a move from ``source`` into
    ``destination`` would feed the queue it drains (see :func:`same_place`;
    the probe goes into ``destination``)."""
    fresh_id = destination.store.ms_clock(destination.clock).next_id
    if same_place(destination.store, source.store, fresh_id):
        alias = "" if source.url == destination.url else f" ({destination.url} is the same queue)"
        raise InvalidArgument(f"cannot {verb} {source.url} into itself{alias}")


def same_place(a: Store, b: Store, fresh_id: Callable[[], str]) -> bool:
    """Whether the opened stores ``a`` and ``b`` hold the same names.

    Equal URLs do. Otherwise two spellings of one place (a symlink or a bind
    mount of a directory, ``s3://`` and ``s3a://``, two endpoints of one
    server) can only be told by looking: a probe ``<id>.new`` under an id
    of ``fresh_id`` (one of this client's clock, which nobody else uses) is
    written into ``a``, looked for in a listing of ``b``, and removed. A
    ``.new`` is invisible to receivers; one that a crash or a failed removal
    leaves behind is garbage like a crashed writer's, which ``gc`` removes
    once it is older than the grace period.
    """
    if a.url == b.url:
        return True
    with storage_errors(f"comparing {a.url} with {b.url}"):
        for _ in range(PROBE_ATTEMPTS):
            probe_id = fresh_id()
            probe = names.new_name(probe_id)
            try:
                a.write_new(probe, b"", fsync=False)
            except FileExistsError:  # burned: its create may land later
                continue
            try:
                return probe in b.list(prefix=probe_id)
            finally:
                _remove(a, probe)
        raise StorageError(f"could not write a probe under {PROBE_ATTEMPTS} fresh names")


def _remove(store: Store, probe: str) -> None:
    """Remove the probe now (object stores hold deletions back for a batch:
    a marked name left for long reads as a crashed client's to others)."""
    with suppress(OSError):
        store.delete(probe, known=True)
        store.flush()
