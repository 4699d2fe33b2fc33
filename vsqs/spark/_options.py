"""Spark options of the ``vsqs`` data source: parsed once, on the driver.

Spark hands a data source its options as strings under lower-cased keys.
Storage options come as ``fs.<key>`` strings, or all at once as the JSON
object of ``storageOptions`` for values that are not strings.

Every option is checked when the source is loaded (``load()`` of a read or a
stream, before anything runs): a bad value, a name that is no option, or an
option of another use (``delay`` on a read) fails with one line that names it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._config import seconds
from .._errors import InvalidArgument, UnsupportedStore
from .._names import DELAYED, IN_FLIGHT, READY

#: Row states, as the ``state`` column names them.
STATES = (READY, IN_FLIGHT, DELAYED)

READ, STREAM, WRITE = "read", "stream", "write"
#: Every option (as spelled in docs/spark.md) and the uses it applies to.
KNOWN: dict[str, tuple[str, ...]] = {
    "path": (READ, STREAM, WRITE),
    "storageOptions": (READ, STREAM, WRITE),
    "states": (READ,),
    "numPartitions": (READ, STREAM),
    "includeBody": (READ, STREAM),
    "filterPushdown": (READ,),
    "startingOffsets": (STREAM,),
    "maxMessagesPerBatch": (STREAM,),
    "settleSeconds": (STREAM,),
    "delay": (WRITE,),
    "durable": (WRITE,),
    "unsafeClaims": (WRITE,),
    "bundle": (WRITE,),
}
_SPELLING = {name.lower(): name for name in KNOWN}
#: ``fs.<key>`` options: one storage option each.
FS_PREFIX = "fs."


def _positive_int(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgument(f"option {key} must be a positive integer, not {raw!r}")
    return value


def _seconds(options: Mapping[str, str], key: str, default: float) -> float:
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgument(f"option {key} must be a number of seconds, not {raw!r}") from None
    return seconds(value, f"option {key}")


@dataclass(frozen=True)
class Options:
    """Everything the readers and the writer need; picklable."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    states: tuple[str, ...] = ("ready",)
    num_partitions: int | None = None
    #: Read each message's body (``includeBody``); without it, names only.
    include_body: bool = True
    #: Take filters that Spark pushes down (``filterPushdown``).
    filter_pushdown: bool = False
    max_messages_per_batch: int | None = None
    starting_offsets: str = "earliest"
    settle_seconds: float = 5.0
    delay: float = 0.0
    durable: bool = True
    #: Write to a store that cannot make claims exclusive (``unsafeClaims``).
    unsafe_claims: bool = False
    #: Write each task's rows in bundles on queues of format 4 (``bundle``).
    bundle: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str], *uses: str) -> Options:
        """Check and parse every option, and refuse the options that apply to
        none of ``uses`` (``read``, ``stream``, ``write``; default: all)."""
        options = {key.lower(): value for key, value in options.items()}
        _check_names(options, uses or (READ, STREAM, WRITE))
        url = options.get("path")
        if not url:
            raise InvalidArgument("name the queue: .load(url) / .save(url), or option path")
        if url.startswith("memory://"):
            raise UnsupportedStore(
                f"{url}: a memory:// queue lives in one process; Spark's Python workers "
                "cannot see it (use a directory or an object store)"
            )
        return cls(
            url=url,
            storage_options=_storage_options(options),
            states=_states(options.get("states", "ready")),
            num_partitions=_positive_int(options, "numPartitions", None),
            include_body=_flag(options, "includeBody", True),
            filter_pushdown=_flag(options, "filterPushdown", False),
            max_messages_per_batch=_positive_int(options, "maxMessagesPerBatch", None),
            starting_offsets=_choice(options, "startingOffsets", ("earliest", "latest")),
            settle_seconds=_seconds(options, "settleSeconds", 5.0),
            delay=_seconds(options, "delay", 0.0),
            durable=_flag(options, "durable", True),
            unsafe_claims=_flag(options, "unsafeClaims", False),
            bundle=_flag(options, "bundle", True),
        )


def _check_names(options: Mapping[str, str], uses: tuple[str, ...]) -> None:
    """Refuse a name that is no option (a typo would be ignored), and an
    option that applies to none of ``uses``."""
    for key in sorted(options):
        if key.startswith(FS_PREFIX) and len(key) > len(FS_PREFIX):
            continue
        name = _SPELLING.get(key)
        if name is None:
            known = ", ".join([*KNOWN, f"{FS_PREFIX}<key>"])
            raise InvalidArgument(f"vsqs has no option {key!r}; its options are: {known}")
        if not set(uses) & set(KNOWN[name]):
            raise InvalidArgument(
                f"option {name} applies to {' and '.join(f'{u}s' for u in KNOWN[name])}, "
                f"not to {' or '.join(f'{u}s' for u in uses)}"
            )


def _choice(options: Mapping[str, str], key: str, allowed: tuple[str, ...]) -> str:
    value = options.get(key.lower(), allowed[0]).strip().lower()
    if value not in allowed:
        raise InvalidArgument(f"option {key} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _flag(options: Mapping[str, str], key: str, default: bool) -> bool:
    allowed = ("true", "false") if default else ("false", "true")
    return _choice(options, key, allowed) == "true"


def _states(raw: str) -> tuple[str, ...]:
    wanted = tuple(s.strip().lower() for s in raw.split(",") if s.strip())
    if wanted == ("all",):
        return STATES
    unknown = [s for s in wanted if s not in STATES]
    if unknown or not wanted:
        raise InvalidArgument(
            f"option states takes 'all' or a list of {', '.join(STATES)}, not {raw!r}"
        )
    return wanted


def _storage_options(options: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    raw = options.get("storageoptions")
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise InvalidArgument(f"option storageOptions is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("option storageOptions must be a JSON object")
        found.update(parsed)
    for key, value in options.items():
        if key.startswith(FS_PREFIX) and len(key) > len(FS_PREFIX):
            found[key[len(FS_PREFIX) :]] = value
    return found
