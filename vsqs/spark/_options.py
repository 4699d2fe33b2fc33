"""Spark options of the ``vsqs`` data source: parsed once, on the driver.

Spark hands a data source its options as strings under lower-cased keys.
Storage options come as ``fs.<key>`` strings, or all at once as the JSON
object of ``storageOptions`` for values that are not strings.
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
    max_messages_per_batch: int | None = None
    starting_offsets: str = "earliest"
    settle_seconds: float = 5.0
    delay: float = 0.0
    durable: bool = True
    #: Write to a store that cannot make claims exclusive (``unsafeClaims``).
    unsafe_claims: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        options = {key.lower(): value for key, value in options.items()}
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
            max_messages_per_batch=_positive_int(options, "maxMessagesPerBatch", None),
            starting_offsets=_choice(options, "startingOffsets", ("earliest", "latest")),
            settle_seconds=_seconds(options, "settleSeconds", 5.0),
            delay=_seconds(options, "delay", 0.0),
            durable=_choice(options, "durable", ("true", "false")) == "true",
            unsafe_claims=_choice(options, "unsafeClaims", ("false", "true")) == "true",
        )


def _choice(options: Mapping[str, str], key: str, allowed: tuple[str, ...]) -> str:
    value = options.get(key.lower(), allowed[0]).strip().lower()
    if value not in allowed:
        raise InvalidArgument(f"option {key} must be one of {', '.join(allowed)}, not {value!r}")
    return value


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
        if key.startswith("fs.") and len(key) > 3:
            found[key[3:]] = value
    return found
