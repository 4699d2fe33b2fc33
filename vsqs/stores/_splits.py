"""The transitional name of a split on a local directory.

``LocalStore.split(S, A, B)`` renames ``S`` to one name ``T`` that encodes both
targets (its commit: a ``renameat2(RENAME_NOREPLACE)``, exclusive with every
other rename or delete of ``S``), links ``T`` to ``A`` and to ``B``, then
unlinks ``T``. Both targets share ``S``'s core and version, so ``T`` is ``A``
followed by what ``B`` has of its own::

    T = <A>.<B's tag>.<B's expiry>.<B's count>.split

At most 255 bytes for the longest targets (:data:`MAX_LEN`). A name ending in
``.split`` that does not parse back to two such targets is foreign.
"""

from __future__ import annotations

from .. import _names as names
from .._errors import InvalidArgument

SPLIT_SUFFIX = ".split"
#: The longest transitional name: two held names of the longest id, with the
#: longest expiry, count and version (a directory entry holds 255 bytes).
MAX_LEN = (
    len(names.invisible_name("0" * names.MAX_ID_LEN, 0, names.MAX_COUNT, names.MAX_VERSION))
    + 1
    + (names.MAX_ID_LEN - names.ID_LEN - 1)
    + len(f".{0:013d}.{names.MAX_COUNT}{SPLIT_SUFFIX}")
)
assert MAX_LEN <= 255, MAX_LEN


def transitional(first: str, second: str) -> str:
    """The name ``T`` of a split into ``first`` and ``second``: held names of
    one core and version, distinct (``InvalidArgument`` otherwise)."""
    one, two = names.parse(first), names.parse(second)
    if (
        one is None
        or two is None
        or one.state != names.INVISIBLE
        or (two.state, two.version) != (names.INVISIBLE, one.version)
        or first[: names.ID_LEN] != second[: names.ID_LEN]
        or first == second
    ):
        raise InvalidArgument(f"not the targets of a split: {first!r:.130} {second!r:.130}")
    tag = names.tag_of(two.id) or ""
    return f"{first}.{tag}.{two.expiry_ms:013d}.{two.receive_count}{SPLIT_SUFFIX}"


def split_targets(name: str) -> tuple[str, str] | None:
    """The two targets a transitional name encodes; ``None`` for any other
    name (a foreign ``.split`` name included: it parses back to nothing else)."""
    if not name.endswith(SPLIT_SUFFIX) or len(name) > MAX_LEN:
        return None
    parts = name[: -len(SPLIT_SUFFIX)].rsplit(".", 3)
    if len(parts) != 4:
        return None
    first, tag, expiry, count = parts
    one = names.parse(first)
    try:
        expiry_ms, receive_count = int(expiry), int(count)
    except ValueError:
        return None
    if one is None or one.state != names.INVISIBLE:
        return None
    core = one.id[: names.ID_LEN]
    second = f"{core}{names.TAG_SEPARATOR}{tag}" if tag else core
    second = names.invisible_name(second, expiry_ms, receive_count, one.version)
    try:
        if transitional(first, second) != name:
            return None
    except InvalidArgument:
        return None
    return first, second
