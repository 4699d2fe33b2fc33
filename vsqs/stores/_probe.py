"""Capabilities of an object store, and the probe that finds them.

The probe runs once per bucket of one endpoint and process (:func:`probed`):
it creates an object twice, exclusively, to tell whether the store refuses
the second create (docs/protocol.md, "Capability probe and modes"), checks
that the store's ``Date`` and the modification time it lists tell one clock,
and measures this host's clock against the store's.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Hashable
from dataclasses import dataclass

from .. import _forks
from .._errors import UnsupportedStore
from ._clock import CLOCK_BOUND, RESOLUTION
from ._object_io import ObjectIO

log = logging.getLogger("vsqs")

#: The probe's object, in the queue's prefix; a client killed mid-probe leaves
#: it, and listings remove it once older than ``FINISH_AFTER``.
PROBE_PREFIX = "vsqs-probe."

#: A host whose clock is further than this (seconds) from the store's is warned about.
CLOCK_WARNING = 2.0


@dataclass(frozen=True)
class Capabilities:
    """What the probe found about one bucket of one endpoint."""

    exclusive_create: bool
    #: The store's clock minus this host's (seconds, about ±0.5 s), if the store tells.
    clock_offset: float | None
    #: Why exclusive creates are not available, in the store's words.
    refusal: str = ""


_PROBED: dict[Hashable, Capabilities] = {}
_PROBE_LOCK = _forks.lock()


def probed(io: ObjectIO) -> Capabilities:
    """The probe's findings about ``io``'s bucket, probed at the first call per
    bucket and process.

    Only a definite answer is kept; a probe that failed (the store was
    unreachable) raises and runs again at the next call.
    """
    with _PROBE_LOCK:
        known = _PROBED.get(io.probe_scope)
        if known is None:
            known = _PROBED[io.probe_scope] = probe(io)
        return known


def probe(io: ObjectIO) -> Capabilities:
    """Probe ``io``'s bucket now (uncached)."""
    name = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
    try:
        io.create(name, b"1")
    except UnsupportedStore as exc:
        return Capabilities(False, None, str(exc))
    try:
        _check_dates(io, name, io.last_date)
        try:
            io.create(name, b"2")
        except FileExistsError:
            exclusive, refusal = True, ""
        except UnsupportedStore as exc:
            exclusive, refusal = False, str(exc)
        else:
            exclusive, refusal = False, "a create with If-None-Match replaced an object"
    finally:
        io.remove([name])
    if not exclusive:
        log.warning("%s: claims cannot be exclusive here: %s", io.url, refusal)
    offset = io.clock_offset()
    if offset is not None and abs(offset) > CLOCK_WARNING:
        log.warning(
            "%s: this host's clock is %+.1f s off the store's; vsqs writes names on "
            "the store's clock, but synchronise it (docs/protocol.md)",
            io.url,
            -offset,
        )
    return Capabilities(exclusive, offset, refusal)


def _check_dates(io: ObjectIO, name: str, date: float | None) -> None:
    """Refuse a store whose ``Date`` (``date``, of the response that created
    ``name``) and listed modification time of ``name`` disagree by more
    than the resolution and :data:`CLOCK_BOUND`: vsqs reads the store's
    clock from both, as one clock (docs/protocol.md, "Assumptions")."""
    if date is None:
        return  # no Date to compare (and no listing spent)
    listed = next((m for n, m in io.listing(name) if n == name), None)
    if listed is not None and abs(listed - date) > RESOLUTION + CLOCK_BOUND:
        raise UnsupportedStore(
            f"{io.url}: the store's Date header and the modification time it lists "
            f"for one object disagree by {listed - date:+.0f} s; vsqs reads both as "
            "the store's one clock (docs/protocol.md)"
        )
