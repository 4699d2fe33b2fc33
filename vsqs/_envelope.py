"""Message metadata: groups, deduplication ids, attributes, and the envelope
that stores them with the body (format 3; docs/format.md, "Envelopes").

Pure functions, no I/O. A message with a group or attributes is stored as an
envelope, and its id carries a tag that says so (``_a``, or ``_g`` and the
group's token), so a listing tells a message's group without reading it::

    \\x00vsqs-envelope 1\\n<header: one line of JSON>\\n<body>

The header holds ``group``, ``attributes`` and ``dedup_id`` (each left out
when absent). A message without either is its body alone, as in format 2.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import NamedTuple

from . import _names as names
from ._errors import InvalidArgument

#: The first line of every envelope: its magic and the envelope's version.
MAGIC = b"\x00vsqs-envelope 1\n"
#: Most attributes on one message (as SQS).
MAX_ATTRIBUTES = 10
#: Longest attribute name, group and deduplication id (characters).
MAX_ATTRIBUTE_NAME = 256
MAX_KEY = 128
#: What an envelope may add to a body beyond its attribute values (bytes):
#: the receiver reads at most ``max_message_size`` plus this.
HEADER_SLACK = 64 * 1024

_ATTRIBUTE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,256}")
#: Groups and deduplication ids: printable ASCII, no space (SQS's alphabet).
_KEY_RE = re.compile(r"[!-~]{1,128}")


class Meta(NamedTuple):
    """What one message carries besides its body."""

    group: str | None = None
    dedup_id: str | None = None
    attributes: Mapping[str, str] = {}

    @property
    def enveloped(self) -> bool:
        """Whether the message is stored as an envelope (has a group or attributes)."""
        return self.group is not None or bool(self.attributes)

    @property
    def tag(self) -> str | None:
        """The tag of the message's id (:mod:`vsqs._names`)."""
        if self.group is not None:
            return group_token(self.group)
        return names.ENVELOPE_TAG if self.attributes else None


NO_META = Meta()


def check_key(value: object, what: str) -> str:
    """A group or deduplication id: 1-128 printable ASCII characters without space."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__}")
    if not _KEY_RE.fullmatch(value):
        raise InvalidArgument(
            f"{what} {value!r:.80} must be 1-{MAX_KEY} printable ASCII characters, no space"
        )
    return value


def check_attributes(value: object) -> dict[str, str]:
    """Message attributes: at most 10, names of 1-256 letters, digits, ``_.-``, str values."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"attributes must be a dict of str, not {type(value).__name__}")
    if len(value) > MAX_ATTRIBUTES:
        raise InvalidArgument(
            f"a message has at most {MAX_ATTRIBUTES} attributes, not {len(value)}"
        )
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _ATTRIBUTE_NAME_RE.fullmatch(key):
            raise InvalidArgument(
                f"attribute name {key!r:.80}: use 1-{MAX_ATTRIBUTE_NAME} letters, digits, '_.-'"
            )
        if not isinstance(item, str):
            raise InvalidArgument(f"attribute {key} must be a str, not {type(item).__name__}")
        try:
            item.encode()
        except UnicodeEncodeError:
            raise InvalidArgument(f"attribute {key} must be valid Unicode") from None
        out[key] = item
    return out


def meta(group: object, dedup_id: object, attributes: object) -> Meta:
    """Validated metadata of one message."""
    return Meta(
        None if group is None else check_key(group, "group"),
        None if dedup_id is None else check_key(dedup_id, "dedup_id"),
        check_attributes(attributes),
    )


def group_token(group: str) -> str:
    """The tag of a group's messages: ``g`` and 64 bits of the group's SHA-256.
    Two groups with one token are handled as one group (order and exclusion
    still hold; they only run one after the other)."""
    return names.GROUP_TAG + hashlib.sha256(group.encode()).hexdigest()[: names.NONCE_LEN]


def dedup_token(dedup_id: str) -> str:
    """The name part of a deduplication id's record: 128 bits of its SHA-256."""
    return hashlib.sha256(dedup_id.encode()).hexdigest()[:32]


def content_dedup_id(body: bytes) -> str:
    """The deduplication id of a body under ``content_dedup``: its SHA-256."""
    return hashlib.sha256(body).hexdigest()


def attributes_size(attributes: Mapping[str, str]) -> int:
    """The bytes attributes count against ``max_message_size`` (names and values)."""
    return sum(len(k) + len(v.encode()) for k, v in attributes.items())


def seal(body: bytes, meta: Meta) -> bytes:
    """The object a message is stored as: its body, or an envelope."""
    if not meta.enveloped:
        return body
    header: dict[str, object] = {}
    if meta.group is not None:
        header["group"] = meta.group
    if meta.dedup_id is not None:
        header["dedup_id"] = meta.dedup_id
    if meta.attributes:
        header["attributes"] = dict(meta.attributes)
    line = json.dumps(header, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return MAGIC + line.encode() + b"\n" + body


def unseal(message_id: str, data: bytes) -> tuple[bytes, Meta]:
    """A stored object's body and metadata. The object of an untagged id is
    its body; a tagged one that is no envelope (not written by vsqs) is
    returned whole, without metadata."""
    if not names.is_enveloped(message_id) or not data.startswith(MAGIC):
        return data, NO_META
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC) : end]) if end > 0 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        return data, NO_META
    group, dedup_id, attributes = (
        header.get("group"),
        header.get("dedup_id"),
        header.get("attributes"),
    )
    if not (
        (group is None or isinstance(group, str))
        and (dedup_id is None or isinstance(dedup_id, str))
        and (attributes is None or _string_map(attributes))
    ):
        return data, NO_META
    return data[end + 1 :], Meta(group, dedup_id, dict(attributes or {}))


def _string_map(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def read_limit(message_id: str, max_size: int) -> int:
    """The most bytes a receiver reads of the message: ``max_size``, plus
    :data:`HEADER_SLACK` for an envelope; a part of a bundle, whatever the
    size of its messages (each was checked when it was sent), up to
    :data:`~vsqs._names.BUNDLE_READ_LIMIT`."""
    if names.is_bundle(message_id):
        return names.BUNDLE_READ_LIMIT
    return max_size + HEADER_SLACK if names.is_enveloped(message_id) else max_size
