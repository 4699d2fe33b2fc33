"""What a receive plans and gets: the rename (or split) of each claim, and
the messages it then holds (:mod:`vsqs._claims` makes them)."""

from __future__ import annotations

from typing import NamedTuple

from . import _names as names


class Claim(NamedTuple):
    """A message this client now holds: its id, held name, receive count and
    body, and the origin records the last listing showed of it."""

    id: str
    name: str
    receive_count: int
    expiry_ms: int
    body: bytes
    origin: names.Records = ()


class Plan(NamedTuple):
    """A claim to try: rename ``candidate`` to ``held``; or, for some of the
    messages of a part of a bundle, split it into ``held`` and ``rest`` (the
    others, left as they were: docs/format.md, "Format 4: bundles")."""

    candidate: str
    id: str
    held: str
    receive_count: int
    expiry_ms: int
    rest: str | None = None


def plan_of(
    name: str, parsed: names.Name, messages: int, count: int, expiry: int, now: int
) -> Plan:
    """A claim of up to ``messages`` of ``parsed`` (listed as ``name``, visible
    at ``now``): a rename to its held name; of the first ``messages`` of a
    part that holds more, a split into them, held, and the rest, which keeps
    the part's receive count and stays visible (both take the next version)."""
    if names.message_count(parsed.id) <= messages:
        return Plan(name, parsed.id, names.next_name(parsed, expiry, count), count, expiry)
    places = names.members_of(parsed.id)
    token = names.group_of(parsed.id)
    took = names.bundle_id(parsed.id, sum(1 << p for p in places[:messages]), token)
    left = names.bundle_id(parsed.id, sum(1 << p for p in places[messages:]), token)
    visible = parsed.expiry_ms if parsed.expiry_ms is not None else now
    version = parsed.version + 1
    return Plan(
        name,
        took,
        names.invisible_name(took, expiry, count, version),
        count,
        expiry,
        names.invisible_name(left, visible, parsed.receive_count, version),
    )
