"""The module-level coroutines of :mod:`vsqs.aio`: :func:`vsqs.redrive` and
:func:`vsqs.move` run on a worker thread (``asyncio.to_thread``), so the
event loop never waits on storage; their guarantees are the sync ones."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from ._move import move as sync_move
from ._redrive import redrive as sync_redrive

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def redrive(
    dead_letter: object,
    source: object,
    *,
    storage_options: dict[str, Any] | None = None,
    max_messages: int | None = None,
    force: bool = False,
) -> int:
    """:func:`vsqs.redrive` on a worker thread."""
    return await asyncio.to_thread(
        sync_redrive,
        dead_letter,
        source,
        storage_options=storage_options,
        max_messages=max_messages,
        force=force,
    )


def on_a_thread(fn: Callable[_P, _T]) -> Callable[_P, Coroutine[Any, Any, _T]]:
    """``fn`` as a coroutine function that runs it on a worker thread."""

    @functools.wraps(fn)
    async def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    run.__doc__ = f":func:`vsqs.{fn.__name__}` on a worker thread (callbacks are called there)."
    return run


move = on_a_thread(sync_move)
"""``await vsqs.aio.move(source, destination, ...)``: :func:`vsqs.move` (the
same arguments) on a worker thread; ``progress`` is called there."""

__all__ = ["move", "redrive"]
