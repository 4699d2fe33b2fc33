"""The queue's config object: each version written once, by exclusive create
(versions after the first: :mod:`._configure`), read by every client."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from ._errors import InvalidArgument, QueueConfigError
from ._names import FORMAT_VERSION, READABLE_FORMATS

N = TypeVar("N", int, float)

DEFAULT_VISIBILITY_TIMEOUT = 30.0
#: A failed ``consume`` handler's message is retried after ``retry_delay``,
#: doubling per receive up to ``max_retry_delay`` (seconds; see ``_options.RetryPolicy``).
DEFAULT_RETRY_DELAY = 1.0
DEFAULT_MAX_RETRY_DELAY = 300.0
#: The smallest ``retry_delay``: a failing message is never retried sooner
#: than half of it, so it cannot spin.
MIN_RETRY_DELAY = 0.01
#: The largest body a queue takes unless its config says otherwise (bytes):
#: 256 MiB, room for the 100 MB bodies of docs/performance.md, and a bound on
#: what one receive may hold in memory.
DEFAULT_MAX_MESSAGE_SIZE = 256 * 1024 * 1024
#: Longest visibility timeout or delay accepted: one year.
MAX_SECONDS = 365 * 24 * 3600.0
#: How long a deduplication id is remembered (seconds; SQS's 5 minutes).
DEFAULT_DEDUP_WINDOW = 300.0


def seconds(value: object, what: str) -> float:
    """Validate a duration in seconds: a finite, non-negative real number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS:
        raise InvalidArgument(
            f"{what} must be between 0 and {MAX_SECONDS:.0f} seconds, not {value}"
        )
    return float(value)


#: Process-wide defaults, read when a queue is opened; explicit arguments win.
#: The visibility timeout written into the config of queues this process creates.
ENV_VISIBILITY_TIMEOUT = "VSQS_VISIBILITY_TIMEOUT"
#: The retry delays written into the config of queues this process creates.
ENV_RETRY_DELAY = "VSQS_RETRY_DELAY"
ENV_MAX_RETRY_DELAY = "VSQS_MAX_RETRY_DELAY"
#: The maximum message size (bytes) written into the config of queues this process creates.
ENV_MAX_MESSAGE_SIZE = "VSQS_MAX_MESSAGE_SIZE"
#: ``0``/``false`` makes ``durable=False`` the default (no fsync per send).
ENV_DURABLE = "VSQS_DURABLE"
#: ``0``/``false``: ``send_batch`` writes each message in an object of its own (no bundles).
ENV_BUNDLES = "VSQS_BUNDLES"
#: Seconds after which a ``.new`` leftover counts as a crashed writer's.
ENV_NEW_GRACE = "VSQS_NEW_GRACE"
#: The longest an idle receiver waits between listings where waiting means
#: listing again (object stores).
ENV_MAX_POLL_INTERVAL = "VSQS_MAX_POLL_INTERVAL"

#: Every ``VSQS_*`` variable that is a setting (docs/settings.md).
SETTINGS_ENV = (
    ENV_VISIBILITY_TIMEOUT,
    ENV_RETRY_DELAY,
    ENV_MAX_RETRY_DELAY,
    ENV_MAX_MESSAGE_SIZE,
    ENV_DURABLE,
    ENV_BUNDLES,
    ENV_NEW_GRACE,
    ENV_MAX_POLL_INTERVAL,
)
#: The environment variables ``vsqs consume`` sets for each command it runs
#: (:mod:`vsqs.cli._consume`). They are not settings: nothing in vsqs reads them as such.
COMMAND_ENV = (
    "VSQS_MESSAGE_ID",
    "VSQS_RECEIPT",
    "VSQS_RECEIVE_COUNT",
    "VSQS_GROUP",
    "VSQS_ATTRIBUTES",
    "VSQS_QUEUE",
)
#: ``VSQS_*`` variables that are not settings and draw no warning: the log
#: level of the ``vsqs`` command, :data:`COMMAND_ENV`, and those of vsqs's
#: own test suite.
NOT_SETTINGS_ENV = (
    "VSQS_LOG_LEVEL",
    *COMMAND_ENV,
    "VSQS_REQUIRE_CEPH",
    "VSQS_SPARK_MASTER",
    "VSQS_EXECUTOR_PYTHONPATH",
)
#: Prefixes of the test suite's own variables (the simulation's, the Celery and
#: Django tests').
NOT_SETTINGS_PREFIXES = ("VSQS_SIM_", "VSQS_CELERY_", "VSQS_DJANGO_")
_warned_env = False

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def unknown_env(environ: dict[str, str] | None = None) -> list[str]:
    """The ``VSQS_*`` variables set in ``environ`` (``os.environ``) that vsqs
    does not know, sorted: a misspelled setting is one."""
    env = os.environ if environ is None else environ
    return sorted(
        var
        for var in env
        if var.startswith("VSQS_")
        and var not in SETTINGS_ENV
        and var not in NOT_SETTINGS_ENV
        and not var.startswith(NOT_SETTINGS_PREFIXES)
    )


def warn_unknown_env() -> None:
    """Name the unknown ``VSQS_*`` variables in one WARNING line, once per
    process (the first time a queue is opened with any set)."""
    global _warned_env
    if _warned_env:
        return
    unknown = unknown_env()
    if unknown:
        _warned_env = True
        logging.getLogger("vsqs").warning(
            "unknown VSQS_* environment variables ignored: %s (the settings: %s)",
            ", ".join(unknown),
            ", ".join(SETTINGS_ENV),
        )


def _env_number(var: str, parse: Callable[[str], N], what: str) -> N | None:
    """Environment variable ``var`` read by ``parse``; ``None`` if unset or empty."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        return None
    try:
        return parse(raw)
    except ValueError:
        raise InvalidArgument(f"{var}={raw!r:.40} is not {what}") from None


def env_seconds(var: str, default: float) -> float:
    """The duration in environment variable ``var``, or ``default`` if unset or empty."""
    value = _env_number(var, float, "a number of seconds")
    return default if value is None else seconds(value, var)


def env_size(var: str, default: int) -> int:
    """The number of bytes (at least 1) in environment variable ``var``, or
    ``default`` if unset or empty."""
    value = _env_number(var, int, "a whole number of bytes")
    return default if value is None else positive_int(value, var)


def env_flag(var: str, default: bool) -> bool:
    """The yes/no in environment variable ``var``, or ``default`` if unset or empty."""
    raw = os.environ.get(var, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    raise InvalidArgument(f"{var}={raw!r:.40}: use 1/0, true/false, yes/no or on/off")


def positive_int(value: object, what: str) -> int:
    """``value`` if it is an int of at least 1 (not a bool); else :class:`InvalidArgument`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{what} must be a positive int, not {value!r}")
    return value


def retry_seconds(value: object, what: str) -> float:
    """Validate a retry delay: seconds, at least :data:`MIN_RETRY_DELAY`."""
    delay = seconds(value, what)
    if delay < MIN_RETRY_DELAY:
        raise InvalidArgument(
            f"{what} must be at least {MIN_RETRY_DELAY} seconds (a failing message "
            f"would be retried in a tight loop), not {value}"
        )
    return delay


def retry_delays(retry_delay: object, max_retry_delay: object) -> tuple[float, float]:
    """Validate a pair of retry delays; refuse a cap below the first delay."""
    base = retry_seconds(retry_delay, "retry_delay")
    cap = retry_seconds(max_retry_delay, "max_retry_delay")
    if cap < base:
        raise InvalidArgument(f"max_retry_delay ({cap:g}) must be at least retry_delay ({base:g})")
    return base, cap


#: The environment variable each stored setting falls back to at creation.
_SETTING_ENV = {
    "visibility_timeout": ENV_VISIBILITY_TIMEOUT,
    "retry_delay": ENV_RETRY_DELAY,
    "max_retry_delay": ENV_MAX_RETRY_DELAY,
    "max_message_size": ENV_MAX_MESSAGE_SIZE,
}


def creation_sources(requested: dict[str, Any]) -> dict[str, str]:
    """Where each setting of :meth:`QueueConfig.create` comes from:
    ``"explicit"`` (given), the name of its ``VSQS_*`` variable (set), or
    ``"default"``. Stored in the config object as ``sources``."""
    out = {}
    for f in fields(QueueConfig):
        var = _SETTING_ENV.get(f.name)
        if requested.get(f.name) is not None:
            out[f.name] = "explicit"
        elif var is not None and os.environ.get(var, "").strip():
            out[f.name] = var
        elif f.metadata.get("setting", True):
            out[f.name] = "default"
    return out


_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "visibility_timeout": seconds,
    "retry_delay": retry_seconds,
    "max_retry_delay": retry_seconds,
    "max_message_size": positive_int,
    "dedup_window": seconds,
}


def requested(**given: Any) -> dict[str, Any]:
    """The queue settings a client asks for (``None``: not given), each
    checked as its own argument (:class:`InvalidArgument`)."""
    return {k: v if v is None or k not in _CHECKS else _CHECKS[k](v, k) for k, v in given.items()}


@dataclass(frozen=True)
class QueueConfig:
    """Queue defaults every client agrees on (``vsqs.json`` in the queue).

    ``dead_letter`` is a queue name next to this queue, or a URL/path.
    ``retry_delay`` and ``max_retry_delay`` pace the retries of ``consume``.
    ``max_message_size``: the largest body (bytes) sends take and receivers
    read; a config written before it existed has the default.
    ``dedup_window``: seconds during which a second send of one deduplication
    id creates nothing; ``content_dedup``: a send without one uses the SHA-256
    of its body. ``dead_letter_blocks_group``: a dead-lettered message of a
    group keeps its group blocked until its dead letter is redriven or
    deleted (docs/groups.md). ``format``: the queue's on-disk format (2: no groups,
    attributes or deduplication; docs/format.md).
    """

    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
    max_receives: int | None = None
    dead_letter: str | None = None
    retry_delay: float = DEFAULT_RETRY_DELAY
    max_retry_delay: float = DEFAULT_MAX_RETRY_DELAY
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    dedup_window: float = DEFAULT_DEDUP_WINDOW
    content_dedup: bool = False
    dead_letter_blocks_group: bool = False
    #: Not a setting: the format the queue was created in.
    format: int = field(default=FORMAT_VERSION, metadata={"setting": False})

    def __post_init__(self) -> None:
        seconds(self.visibility_timeout, "visibility_timeout")
        retry_delays(self.retry_delay, self.max_retry_delay)
        positive_int(self.max_message_size, "max_message_size")
        if seconds(self.dedup_window, "dedup_window") == 0:
            raise InvalidArgument("dedup_window must be more than 0 seconds")
        for flag in ("content_dedup", "dead_letter_blocks_group"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidArgument(f"{flag} must be True or False")
        if self.format not in READABLE_FORMATS:
            raise InvalidArgument(f"format {self.format!r} is not one this vsqs reads")
        if self.max_receives is not None:
            positive_int(self.max_receives, "max_receives")
        if self.dead_letter is not None and not isinstance(self.dead_letter, str):
            raise InvalidArgument("dead_letter must be a queue name, path or URL (str)")
        if (self.max_receives is None) != (self.dead_letter is None):
            raise InvalidArgument("max_receives and dead_letter go together: give both or neither")
        if self.dead_letter_blocks_group and self.dead_letter is None:
            raise InvalidArgument("dead_letter_blocks_group needs a dead_letter (and max_receives)")

    @classmethod
    def create(cls, requested: dict[str, Any]) -> QueueConfig:
        """The config of a queue this process creates: each setting from
        ``requested`` (the creator's arguments; ``None``: not given), else its
        ``VSQS_*`` environment variable, else the built-in default
        (:func:`creation_sources` says which)."""
        defaults = {
            "visibility_timeout": env_seconds(ENV_VISIBILITY_TIMEOUT, DEFAULT_VISIBILITY_TIMEOUT),
            "retry_delay": retry_seconds(
                env_seconds(ENV_RETRY_DELAY, DEFAULT_RETRY_DELAY), ENV_RETRY_DELAY
            ),
            "max_retry_delay": retry_seconds(
                env_seconds(ENV_MAX_RETRY_DELAY, DEFAULT_MAX_RETRY_DELAY), ENV_MAX_RETRY_DELAY
            ),
            "max_message_size": env_size(ENV_MAX_MESSAGE_SIZE, DEFAULT_MAX_MESSAGE_SIZE),
        }
        return cls(**defaults | {k: v for k, v in requested.items() if v is not None})

    def to_json(self, **extra: object) -> bytes:
        """The config object's bytes; ``extra`` keys (not settings: readers
        ignore keys they do not know) go beside the settings."""
        doc = extra | asdict(self)
        return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes, where: str) -> QueueConfig:
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise QueueConfigError(f"{where}: unreadable queue config ({exc})") from None
        version = doc.get("format")
        if version not in READABLE_FORMATS:
            raise QueueConfigError(
                f"{where}: queue format {version!r}; this vsqs writes format {FORMAT_VERSION} and "
                f"reads formats {', '.join(map(str, READABLE_FORMATS))} (move the messages of a "
                "queue of another format with the vsqs that wrote it)"
            )
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in doc.items() if k in known})
        except InvalidArgument as exc:
            raise QueueConfigError(f"{where}: invalid queue config: {exc}") from None

    def check_agrees(
        self, requested: dict[str, Any], where: str, sources: dict[str, str] | None = None
    ) -> None:
        """Refuse to open a queue with defaults that differ from its config
        (``sources``: where its values came from, to say which changed)."""
        for key, value in requested.items():
            if value is not None and getattr(self, key) != value:
                how = (sources or {}).get(key, "")
                how = "was changed to" if how.startswith("changed") else "was created with"
                raise QueueConfigError(
                    f"{where} {how} {key}={getattr(self, key)!r}, not {value!r}; a queue's "
                    "settings are its config's (override per call, or change them: "
                    "vsqs config, Queue.configure)"
                )
