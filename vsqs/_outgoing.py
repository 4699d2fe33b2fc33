"""What a send is given: bodies with their group, deduplication id and
attributes, checked against the queue's config before anything is written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from . import _meter as meter
from ._config import QueueConfig
from ._envelope import (
    HEADER_SLACK,
    NO_META,
    Meta,
    attributes_size,
    content_dedup_id,
    meta,
    seal,
)
from ._errors import InvalidArgument, MessageTooLarge, QueueConfigError
from ._message import Body, as_bytes


@dataclass(frozen=True)
class Outgoing:
    """One message of :meth:`vsqs.Queue.send_batch` with its own group,
    deduplication id or attributes (what it leaves out, the batch's
    arguments give)."""

    body: Body
    group: str | None = None
    dedup_id: str | None = None
    attributes: Mapping[str, str] | None = None


class Prepared(NamedTuple):
    """A message ready to publish: what is stored, and its metadata."""

    data: bytes
    meta: Meta
    #: The tag of a bundle of several messages (vsqs._bundle); ``None`` for one message.
    bundle: str | None = None

    @property
    def tag(self) -> str | None:
        """The tag of the id it is published under."""
        return self.meta.tag if self.bundle is None else self.bundle


def prepare(
    bodies: Iterable[Body | Outgoing],
    config: QueueConfig,
    *,
    group: str | None = None,
    dedup_ids: Iterable[str | None] | None = None,
    attributes: Mapping[str, str] | None = None,
) -> list[Prepared]:
    """Check and seal every message of a send before any is written:
    :class:`InvalidArgument` for a bad group, id or attribute,
    :class:`MessageTooLarge` for a body (with its attributes) over the queue's
    ``max_message_size``, :class:`QueueConfigError` for metadata on a queue
    of format 2."""
    items = list(bodies)
    ids: list[str | None] = [None] * len(items) if dedup_ids is None else list(dedup_ids)
    if len(ids) != len(items):
        raise InvalidArgument(f"{len(ids)} dedup_ids for {len(items)} messages")
    plain = None if group is not None or attributes is not None else _plain(items, ids, config)
    if plain is not None:
        return plain
    out: list[Prepared] = []
    for i, (item, dedup_id) in enumerate(zip(items, ids, strict=True)):
        if isinstance(item, Outgoing):
            body = as_bytes(item.body)
            keys = (
                item.group if item.group is not None else group,
                item.dedup_id if item.dedup_id is not None else dedup_id,
            )
            given = item.attributes if item.attributes is not None else attributes
        else:
            body, keys, given = as_bytes(item), (group, dedup_id), attributes
        traced = meter.observer.traced(given) if config.format >= 3 else given
        m = meta(*keys, traced)
        size = len(body) + attributes_size(m.attributes)
        if size > config.max_message_size and traced is not given:  # no room for a trace context
            m = meta(*keys, given)
            size = len(body) + attributes_size(m.attributes)
        if size > config.max_message_size:
            which = f"message {i} of the batch" if len(items) > 1 else "the message"
            with_attributes = " with its attributes" if m.attributes else ""
            raise MessageTooLarge(
                f"{which} is {size:,} bytes{with_attributes}; this queue takes at most "
                f"{config.max_message_size:,} (its max_message_size)"
            )
        if m.dedup_id is None and config.content_dedup:
            m = m._replace(dedup_id=content_dedup_id(body))
        data = seal(body, m)
        if len(data) > config.max_message_size + HEADER_SLACK:  # escapes in its header
            raise MessageTooLarge(
                f"message {i} is {len(data):,} bytes as stored (its attributes escaped); "
                f"this queue takes at most {config.max_message_size:,} plus "
                f"{HEADER_SLACK:,} for attributes"
            )
        if config.format < 3 and (m.enveloped or m.dedup_id is not None):
            raise QueueConfigError(
                "this queue has format 2, without groups, deduplication ids or attributes: "
                "move its messages into a new queue (vsqs move) to use them"
            )
        out.append(Prepared(data, m))
    return out


def _plain(
    items: list[Body | Outgoing], ids: list[str | None], config: QueueConfig
) -> list[Prepared] | None:
    """What :func:`prepare` makes of bodies without metadata (a send with no
    group or attributes, of no deduplication id, content-based or given, and
    no trace context: each is stored as its body alone), decided without
    building any metadata; ``None`` where a message may have some (an
    :class:`Outgoing`) or is too large: :func:`prepare` says why."""
    if ids.count(None) != len(ids) or config.content_dedup or meter.observer is not meter.OFF:
        return None  # an observer's trace context may join the attributes
    max_size = config.max_message_size
    out: list[Prepared] = []
    for item in items:
        if isinstance(item, Outgoing):
            return None
        body = as_bytes(item)
        if len(body) > max_size:
            return None
        out.append(Prepared(body, NO_META))
    return out
