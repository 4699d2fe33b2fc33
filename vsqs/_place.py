"""Whether two queue locations are one place: the guard of every move
between two queues (``vsqs move``, :func:`vsqs.redrive`), which would never
end if it fed the queue it drains."""

from __future__ import annotations

from contextlib import suppress
from typing import TYPE_CHECKING

from . import _names as names
from ._errors import InvalidArgument, storage_errors
from ._store import Store

if TYPE_CHECKING:
    from ._queue import Queue


def refuse_same(verb: str, source: Queue, destination: Queue) -> None:
    """Raise :class:`InvalidArgument` if a move from ``source`` into
    ``destination`` would feed the queue it drains (see :func:`same_place`;
    the probe goes into ``destination``)."""
    probe_id = names.MsClock(destination.clock).next_id()
    if same_place(destination.store, source.store, probe_id):
        alias = "" if source.url == destination.url else f" ({destination.url} is the same queue)"
        raise InvalidArgument(f"cannot {verb} {source.url} into itself{alias}")


def same_place(a: Store, b: Store, probe_id: str) -> bool:
    """Whether the opened stores ``a`` and ``b`` hold the same names.

    Equal URLs do. Otherwise two spellings of one place (a symlink or a bind
    mount of a directory, ``s3://`` and ``s3a://``, two endpoints of one
    server) can only be told by looking: a probe ``<probe_id>.new`` is
    written into ``a`` and looked for in a listing of ``b``, then removed.
    A ``.new`` is invisible to receivers, and one that a crash leaves behind
    is garbage like any crashed writer's (``gc``). ``probe_id`` must be
    fresh: a name of this client's clock that nobody else uses.
    """
    if a.url == b.url:
        return True
    probe = names.new_name(probe_id)
    with storage_errors(f"comparing {a.url} with {b.url}"):
        a.write_new(probe, b"", fsync=False)
        try:
            return probe in b.list(prefix=probe_id)
        finally:
            with suppress(FileNotFoundError):
                a.delete(probe, known=True)
