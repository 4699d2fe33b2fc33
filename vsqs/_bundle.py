"""Bundles (format 4): one object that holds many messages.

A ``send_batch`` packs its messages into bundles, each written with one
request (docs/format.md, "Format 4: bundles")::

    \\x00vsqs-bundle 1\\n<header: one line of JSON>\\n<each message's object, in order>

The header is ``{"ids": [...], "sizes": [...]}``: each message's own id and
the length of its object, which is what the message would be stored as
alone (its body, or its envelope). The bytes of a bundle are never
rewritten: every part of it (an object whose id has the tag ``b<set>``)
holds them all, and its name says which of them it holds.

Guarantees: :func:`pack` and :func:`members` are inverse; a part whose bytes
are not a bundle vsqs wrote, or whose set names a place the bundle lacks,
gives ``None`` (its receiver delivers the object whole, as it does a tagged
object that is no envelope).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import NamedTuple

from . import _names as names
from ._envelope import NO_META
from ._outgoing import Prepared

MAGIC = b"\x00vsqs-bundle 1\n"
#: A message stored larger than this is sent in an object of its own.
MAX_ALONE = 256 << 10


class Member(NamedTuple):
    """One message of a part: its place in the bundle, its id and its object."""

    place: int
    id: str
    data: bytes


class Packed(NamedTuple):
    """An object to publish: a bundle and the ids of the messages it holds,
    in order, or one message alone (``ids`` is ``None``: its id is the
    object's, drawn when it is published)."""

    item: Prepared
    ids: list[str] | None


def pack(entries: Sequence[tuple[str, bytes]]) -> bytes:
    """The bytes of a bundle of ``entries`` (each message's id and object)."""
    header = {"ids": [i for i, _ in entries], "sizes": [len(d) for _, d in entries]}
    line = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([MAGIC, line, b"\n", *(d for _, d in entries)])


def unpack(data: bytes) -> list[tuple[str, bytes]] | None:
    """The ``(id, object)`` of each message of a bundle; ``None`` if ``data``
    is not a well-formed bundle."""
    if not data.startswith(MAGIC):
        return None
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC) : end]) if end > 0 else None
    except ValueError:
        return None
    if not isinstance(header, dict):
        return None
    ids, sizes = header.get("ids"), header.get("sizes")
    if not (
        isinstance(ids, list)
        and isinstance(sizes, list)
        and 0 < len(ids) == len(sizes) <= names.MAX_BUNDLE
        and all(isinstance(i, str) and names.is_id(i) and not names.is_bundle(i) for i in ids)
        and all(isinstance(s, int) and s >= 0 for s in sizes)
    ):
        return None
    out: list[tuple[str, bytes]] = []
    pos = end + 1
    for message_id, size in zip(ids, sizes, strict=True):
        out.append((message_id, data[pos : pos + size]))
        pos += size
    return out if pos == len(data) else None


def with_sibling_ids(data: bytes) -> bytes:
    """A bundle's bytes with every message under a sibling id (its FIFO
    position, a fresh nonce: :func:`~vsqs._names.sibling_id`), for a second
    copy of it that may meet the first: two copies never share a message id.
    Bytes that are not a bundle come back as they are."""
    entries = unpack(data)
    if entries is None:
        return data
    return pack([(names.sibling_id(i), d) for i, d in entries])


def ids_of(data: bytes) -> list[str]:
    """The ids of a bundle's messages, in order (none if it is no bundle)."""
    return [i for i, _ in unpack(data) or ()]


def members(object_id: str, data: bytes) -> list[Member] | None:
    """The messages that the part ``object_id`` holds, in order; ``None`` if
    its bytes are not a bundle with every place its set names."""
    entries = unpack(data)
    if entries is None:
        return None
    places = names.members_of(object_id)
    if places[-1] >= len(entries):
        return None
    return [Member(p, *entries[p]) for p in places]


def bundle(items: Sequence[Prepared], next_id: Callable[[str | None], str]) -> list[Packed]:
    """The objects that publish ``items`` in order: runs of messages of one
    group (or of none) go into bundles of up to :data:`names.MAX_BUNDLE`
    messages and :data:`names.BUNDLE_BYTES`; a message larger than :data:`MAX_ALONE`
    goes alone, and so does a bundle of one. ``next_id(tag)``: a fresh id
    with that tag, in issue order (each bundled message's id is drawn here,
    in the order of ``items``; an object's own id when it is published)."""
    out: list[Packed] = []
    run: list[tuple[str, bytes]] = []
    run_items: list[Prepared] = []
    token: str | None = None
    size = 0

    def close() -> None:
        if len(run) == 1:
            out.append(Packed(run_items[0], None))
        elif run:
            tag = names.bundle_id("", (1 << len(run)) - 1, token)[1:]
            out.append(Packed(Prepared(pack(run), NO_META, tag), [i for i, _ in run]))
        run.clear()
        run_items.clear()

    for item in items:
        tag = item.tag
        group = tag if tag is not None and tag.startswith(names.GROUP_TAG) else None
        if len(item.data) > MAX_ALONE:
            close()
            out.append(Packed(item, None))
            continue
        if run and (
            group != token
            or len(run) == names.MAX_BUNDLE
            or size + len(item.data) > names.BUNDLE_BYTES
        ):
            close()
        if not run:
            token, size = group, 0
        run.append((next_id(tag), item.data))
        run_items.append(item)
        size += len(item.data)
    close()
    return out
