"""The two queues of a move between queues (:func:`vsqs.move`,
:func:`vsqs.redrive`): opening them, and whether they are one place, the
guard of every such move, which would never end if it fed the queue it drains."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack, suppress
from typing import Any

from . import _names as names
from ._errors import InvalidArgument, StorageError, storage_errors
from ._queue import Queue
from .stores._base import Store
from .stores._location import object_store_options

#: Fresh probe names a comparison tries: a create whose outcome is unknown
#: (a lost response) burns its name.
PROBE_ATTEMPTS = 3


class OpenedQueues(ExitStack):
    """The queues of a move (a context manager): each location opened with
    ``storage_options`` and ``unsafe_claims``, and closed when it ends.

    ``one_of_two``: the options are for whichever of the two queues is on an
    object store; a local path gets none.
    """

    def __init__(
        self,
        storage_options: dict[str, Any] | None,
        unsafe_claims: bool,
        *,
        one_of_two: bool = False,
    ) -> None:
        super().__init__()
        self._storage_options = storage_options
        self._unsafe_claims = unsafe_claims
        self._one_of_two = one_of_two

    def at(self, location: object, *, create: bool = False) -> Queue:
        """``location`` itself if it is an open :class:`Queue` (left open),
        else the queue there (created if it does not exist only if ``create``)."""
        if isinstance(location, Queue):
            return location
        options = self._storage_options
        if self._one_of_two:
            options = object_store_options(location, options)
        return self.enter_context(
            Queue(
                location, storage_options=options, create=create, unsafe_claims=self._unsafe_claims
            )
        )


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
