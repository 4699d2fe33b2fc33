"""Parts of bundles, as the oracle reads the bucket: one object, many messages.

A name of the grammar holds one message (its id's), or, for a part of a
bundle (``docs/format.md``, "Format 4: bundles"), the messages of the bundle
whose places its set names, each under its own id (what ``send_batch``
returned, ``Message.id``). The oracle judges messages, so it reads each
name as the messages it holds, from the bytes first written to its key
(every part of a bundle holds the whole bundle's bytes).
"""

from __future__ import annotations

from typing import NamedTuple

from vsqs import _names as names
from vsqs._bundle import members
from vsqs._envelope import unseal

#: Between a part's held name and a message's place in a bundled message's
#: receipt (``vsqs._bundled``: ``<held name>#<place>``).
PLACE_SEPARATOR = "#"


class Held(NamedTuple):
    """One message a name holds: its own id, its place in its bundle (``None``
    for a message alone or an object delivered whole) and its body."""

    id: str
    place: int | None
    body: bytes


def held_in(name: names.Name, data: bytes) -> list[Held]:
    """The messages the object ``name`` (first written as ``data``) holds: a
    part's members, or the object as one message under its own id."""
    found = members(name.id, data) if names.is_bundle(name.id) else None
    if found is None:
        return [Held(name.id, None, unseal(name.id, data)[0])]
    return [Held(m.id, m.place, unseal(m.id, m.data)[0]) for m in found]


def ids_in(name: names.Name, data: bytes) -> list[str]:
    """The ids of the messages the object ``name`` holds (:func:`held_in`)."""
    return [held.id for held in held_in(name, data)]


def receipt_of(name: names.Name, place: int | None) -> str:
    """The receipt of the message at ``place`` of a held name (a message
    alone's: the name)."""
    receipt = names.receipt_name(name)
    return receipt if place is None else f"{receipt}{PLACE_SEPARATOR}{place}"


def held_name(receipt: str) -> names.Name:
    """The held name a receipt names (a bundled message's: its part's)."""
    parsed = names.parse(receipt.partition(PLACE_SEPARATOR)[0])
    assert parsed is not None and parsed.expiry_ms is not None, receipt
    return parsed
