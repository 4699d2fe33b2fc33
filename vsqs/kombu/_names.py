"""Celery queue names to vsqs queue names, and back: a reversible rule.

A Celery queue name that vsqs accepts as it is (``validate_queue_name``) and
that does not begin with :data:`ESCAPED` is its own vsqs name. Any other name
(``celery@host.celery.pidbox``, ``a..b``, ``x_y``) is :data:`ESCAPED` followed
by the name with each character outside ``A-Z a-z 0-9 -`` written as ``_``
and the two lowercase hex digits of each of its UTF-8 bytes (``@`` is
``_40``, ``.`` is ``_2e``, ``_`` is ``_5f``). A name whose vsqs name would be
longer than 128 characters is refused.
"""

from __future__ import annotations

import re
from contextlib import suppress

from .._errors import InvalidQueueName
from .._names import validate_queue_name

#: The prefix of an escaped vsqs name.
ESCAPED = "x_"
_KEPT = re.compile(r"[A-Za-z0-9-]")
_ESCAPED_BODY = re.compile(r"(?:[A-Za-z0-9-]|_[0-9a-f]{2})*")


def _valid(name: str) -> bool:
    with suppress(InvalidQueueName):
        return validate_queue_name(name) == name
    return False


def vsqs_name(celery_name: str) -> str:
    """The vsqs queue name of a Celery queue name; :class:`InvalidQueueName` if too long."""
    if _valid(celery_name) and not celery_name.startswith(ESCAPED):
        return celery_name
    escaped = ESCAPED + "".join(
        char if _KEPT.fullmatch(char) else "".join(f"_{b:02x}" for b in char.encode())
        for char in celery_name
    )
    if not _valid(escaped):
        raise InvalidQueueName(
            f"Celery queue name {celery_name!r:.80} is too long for vsqs once escaped "
            f"({len(escaped)} characters, at most 128)"
        )
    return escaped


def celery_name(vsqs_queue_name: str) -> str:
    """The Celery queue name whose vsqs name this is (the inverse of :func:`vsqs_name`)."""
    if not vsqs_queue_name.startswith(ESCAPED):
        return validate_queue_name(vsqs_queue_name)
    body = vsqs_queue_name[len(ESCAPED) :]
    if not _ESCAPED_BODY.fullmatch(body):
        raise InvalidQueueName(f"{vsqs_queue_name!r:.80} is not an escaped Celery queue name")
    try:
        name = _unescape(body)
    except UnicodeDecodeError as exc:
        raise InvalidQueueName(f"{vsqs_queue_name!r:.80} escapes invalid UTF-8") from exc
    if vsqs_name(name) != vsqs_queue_name:  # one vsqs name per Celery name
        raise InvalidQueueName(f"{vsqs_queue_name!r:.80} is not an escaped Celery queue name")
    return name


def _unescape(body: str) -> str:
    out = bytearray()
    i = 0
    while i < len(body):
        if body[i] == "_":
            out.append(int(body[i + 1 : i + 3], 16))
            i += 3
        else:
            out.extend(body[i].encode())
            i += 1
    return out.decode()
