"""Changing a queue's settings after creation: numbered config versions.

``vsqs.json`` is version 1: written once, at creation, and never rewritten.
A change writes version ``n + 1`` as ``vsqs-config.<n + 1>``, with the
exclusive create that publishes ``vsqs.json`` and messages (it never
replaces a name): of admins racing for one number exactly one wins, and
each of the others reads the winner's version and applies its own change on
top of it (compare-and-swap), so no change is lost. These names are outside
the message grammar: every lister (stats, peek, purge, move, gc, receivers,
Spark) passes them by as foreign.

A client looks for a newer version when it is used and its last look is
:data:`REFRESH_EVERY` seconds old or more, by its own clock: one read of
the next version's name and, if there is none, one of its own version's (is
the queue still there?). So a call a client begins ``REFRESH_EVERY`` seconds
or more after a change returned runs with the new settings; it costs at most
two reads per client per ``REFRESH_EVERY`` seconds of use, none per message.
An idle client makes none.

A version is collected once its successor is :data:`COLLECT_AFTER` old;
``vsqs.json`` and version 2 always stay (an opener that finds no version 2
lists nothing). A client whose last look is older than half of
``COLLECT_AFTER`` lists the versions instead of reading the next one, so it
never misses a version collected while it slept.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any, NamedTuple

from . import _forks
from . import _names as names
from ._config import QueueConfig, requested
from ._dead_letter import check_target
from ._errors import (
    InvalidArgument,
    QueueConfigError,
    QueueNotFound,
    StorageError,
    VsqsError,
    storage_errors,
)
from ._publish import publish
from .stores._base import Store

log = logging.getLogger("vsqs")

#: Names of config versions 2 and later: ``vsqs-config.<n>``.
CONFIG_PREFIX = "vsqs-config."
_VERSION_RE = re.compile(r"vsqs-config\.([1-9][0-9]{0,8})")
#: Seconds between two looks for a newer config version by a client in use.
REFRESH_EVERY = 10.0
#: Seconds after which a version whose successor is that old is collected.
COLLECT_AFTER = 3600.0
#: Rounds of compare-and-swap a change tries before it gives up.
ATTEMPTS = 16

#: The settings a change may set. Clients read each of them from the config
#: at every call that uses it, so a new value applies from their next look on.
CHANGEABLE = (
    "visibility_timeout",
    "max_receives",
    "dead_letter",
    "retry_delay",
    "max_retry_delay",
    "max_message_size",
    "content_dedup",
)
#: The settings fixed at creation, and why.
FIXED = {
    "format": "it is the on-disk format of every name and object in the queue",
    "dedup_window": "deduplication records are named by slot (send time // dedup_window): "
    "under another window a send would not find the records written under this one",
    "dead_letter_blocks_group": "the blockers in the queue are lifted by clients that "
    "set this up when they opened it",
}


def version_name(number: int) -> str:
    """The name of config version ``number`` (1: ``vsqs.json``)."""
    return names.CONFIG_NAME if number == 1 else f"{CONFIG_PREFIX}{number}"


def version_of(name: str) -> int | None:
    """The number of a config version's name (2 and later), ``None`` for other names."""
    match = _VERSION_RE.fullmatch(name)
    number = int(match.group(1)) if match else 0
    return number if number >= 2 else None


class Version(NamedTuple):
    """One config version: its number, settings, where each came from, and
    when it was written (unix ms; ``None`` for ``vsqs.json``)."""

    number: int
    config: QueueConfig
    sources: dict[str, str]
    written_ms: int | None


def read_version(store: Store, number: int) -> Version:
    """Config version ``number`` (``FileNotFoundError`` if it is not there)."""
    data = store.read(version_name(number))
    config = QueueConfig.from_json(data, store.url)
    doc = json.loads(data)
    sources = doc.get("sources")
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        sources = {}
    written = doc.get("written_ms")
    return Version(number, config, sources, written if isinstance(written, int) else None)


def newest(store: Store, known: int | None = None) -> Version:
    """The newest config version: read version ``known + 1``, ``+ 2`` ...
    until one is missing (``known=None``: start from the newest a listing of
    the versions shows). :class:`QueueNotFound` once there is no config."""
    listing = known is None
    number = known if known is not None else _listed_newest(store)
    found = None
    while True:
        try:
            found = read_version(store, number + 1)
        except FileNotFoundError:
            break
        number += 1
    if found is not None:
        return found
    try:
        return read_version(store, number)
    except FileNotFoundError:
        if not listing:
            return newest(store)
        raise QueueNotFound(f"{store.url}: the queue was deleted (its config is gone)") from None


def _listed_newest(store: Store) -> int:
    """The number of the newest version a listing shows (1: none but ``vsqs.json``)."""
    return max(filter(None, map(version_of, store.list(prefix=CONFIG_PREFIX))), default=1)


def collect(store: Store, now_ms: int) -> list[str]:
    """Remove the versions (3 and later, never the newest) whose successor was
    written :data:`COLLECT_AFTER` ago or more; return their names."""
    numbers = sorted(filter(None, map(version_of, store.list(prefix=CONFIG_PREFIX))))
    removed = []
    for number in numbers[:-1]:
        if number < 3 or number + 1 not in numbers:
            continue
        try:
            written = read_version(store, number + 1).written_ms
        except FileNotFoundError:
            continue
        if written is not None and now_ms - written >= COLLECT_AFTER * 1000:
            try:
                store.delete(version_name(number), known=True)
            except FileNotFoundError:
                continue
            removed.append(version_name(number))
    return removed


def checked_changes(changes: Mapping[str, object]) -> dict[str, Any]:
    """``changes`` with each value checked as its own argument; a setting
    that cannot change raises :class:`QueueConfigError` saying why, an
    unknown name :class:`InvalidArgument`."""
    for key in changes:
        if key in FIXED:
            raise QueueConfigError(f"{key} cannot change: {FIXED[key]}")
        if key not in CHANGEABLE:
            raise InvalidArgument(f"no setting {key!r}; these can change: {', '.join(CHANGEABLE)}")
    return requested(**changes)


def changed(current: Version, changes: Mapping[str, Any]) -> QueueConfig:
    """``current``'s settings with ``changes`` applied, checked whole
    (:class:`InvalidArgument`: ``max_receives`` without ``dead_letter`` ...)."""
    config = current.config
    if config.format < 3 and changes.get("content_dedup"):
        raise QueueConfigError(
            "content_dedup cannot be on in a queue of format 2, which has no deduplication "
            "(move its messages into a new queue: vsqs move)"
        )
    if (
        config.dead_letter_blocks_group
        and "dead_letter" in changes
        and changes["dead_letter"] != config.dead_letter
    ):
        raise QueueConfigError(
            "dead_letter cannot change while dead_letter_blocks_group is on: its blockers "
            "wait for their dead letters in the dead-letter queue they went to"
        )
    return replace(config, **changes)


def write_change(
    store: Store,
    changes: Mapping[str, Any],
    *,
    durable: bool,
    clock: names.MsClock,
) -> Version:
    """Apply ``changes`` (:func:`checked_changes`) to the newest config
    version as a new version; return the version that holds them (the
    newest, unchanged, if it holds them already).

    Compare-and-swap: the new version is created only if its number is
    free; if another change took it, this one is applied again on top of
    that (up to :data:`ATTEMPTS` rounds, then :class:`StorageError`).
    """
    token = secrets.token_hex(8)
    for _ in range(ATTEMPTS):
        current = newest(store)
        config = changed(current, changes)
        if config == current.config:
            return current
        number, now_ms = current.number + 1, clock.now_ms()
        news = [key for key in changes if getattr(config, key) != getattr(current.config, key)]
        sources = current.sources | dict.fromkeys(news, f"changed in version {number}")
        data = config.to_json(sources=sources, written_ms=now_ms, writer=token)
        name = version_name(number)
        if publish(store, durable, clock.next_id(), data, name, replace_new=False):
            won = True
        else:  # taken, or (object stores) a create of ours with an unknown outcome
            try:
                won = store.read(name) == data
            except FileNotFoundError:
                won = False
        if won:
            collect(store, now_ms)
            log.info("%s: config version %d: %s", store.url, number, dict(changes))
            return Version(number, config, sources, now_ms)
    raise StorageError(
        f"{store.url}: could not change the config: {ATTEMPTS} other changes came first"
    )


class LiveConfig:
    """The newest config version one client knows, looked for again as the
    client is used (:meth:`refresh`). Thread-safe."""

    def __init__(
        self, store: Store, clock: Callable[[], float], first: QueueConfig, explicit: dict[str, Any]
    ) -> None:
        self._store = store
        self._clock = clock
        self.version = Version(1, first, {}, None)
        self._explicit = {k: v for k, v in explicit.items() if v is not None}
        self._looked = -math.inf  # the last look begun (its pace)
        self._seen = -math.inf  # the last look that read the versions (what it may have missed)
        self._lock = _forks.lock()  # one look at a time; the others go on with what is known
        self._taking = _forks.lock()
        self.gone: str | None = None

    def load(self) -> QueueConfig:
        """The newest version, at open: one read more than ``vsqs.json``
        on a queue never changed (no version 2), a listing of the versions
        on one that was."""
        now = self._clock()  # before the read: the bound counts from here
        try:
            self._store.read(version_name(2))
        except FileNotFoundError:
            self._looked = self._seen = now
            return self.version.config
        found = newest(self._store)
        self._looked = self._seen = now
        return self.take(found, warn=False)

    def refresh(self) -> QueueConfig | None:
        """The newer version's settings if there is one, looked for at most
        every :data:`REFRESH_EVERY` seconds (else ``None``). Raises
        :class:`QueueNotFound` once the queue is deleted; another storage
        error is logged and the settings known stay."""
        if self.gone is not None:
            raise QueueNotFound(self.gone)
        now = self._clock()
        since = abs(now - self._looked)  # a clock stepped back looks at once
        if since < REFRESH_EVERY or not self._lock.acquire(blocking=False):
            return None
        try:
            # Versions may have been collected since the last look that read
            # them (a failed look does not count): then list them.
            listing = abs(now - self._seen) >= COLLECT_AFTER / 2
            self._looked = now
            with storage_errors(f"reading the config of {self._store.url}"):
                found = newest(self._store, None if listing else self.version.number)
            self._seen = now
            known = self.version
            if found.number < known.number or (
                found.number == known.number and found.config != known.config
            ):
                raise QueueNotFound(
                    f"{self._store.url}: the queue was deleted and created again: reopen it"
                )
        except QueueNotFound as exc:
            self.gone = str(exc)
            raise
        except VsqsError as exc:
            log.warning("%s: could not look for a config change: %s", self._store.url, exc)
            return None
        finally:
            self._lock.release()
        if found.number == self.version.number:
            return None
        return self.take(found)

    def change(
        self, settings: Mapping[str, object], *, durable: bool, clock: names.MsClock
    ) -> QueueConfig:
        """Write ``settings`` as a change (:func:`checked_changes`,
        :func:`write_change`) and adopt the version that holds them."""
        changes = checked_changes(settings)
        if isinstance(changes.get("dead_letter"), str):
            check_target(changes["dead_letter"], self._store.url, given=True)
        with storage_errors(f"changing the config of {self._store.url}"):
            version = write_change(self._store, changes, durable=durable, clock=clock)
        return self.take(version, warn=False)

    def take(self, found: Version, *, warn: bool = True) -> QueueConfig:
        """Adopt ``found`` if it is newer; ``warn`` once per setting that this
        client opened with explicitly and that another client's change now
        contradicts (the client goes on with the new value)."""
        with self._taking:
            if found.number <= self.version.number:
                return self.version.config
            self.version = found
            if warn:
                self._warn(found)
        return found.config

    def _warn(self, found: Version) -> None:
        for key, value in list(self._explicit.items()):
            now = getattr(found.config, key)
            if now != value:
                log.warning(
                    "%s: %s is now %r (config version %d); this client opened with %r and "
                    "goes on with %r",
                    self._store.url, key, now, found.number, value, now,
                )  # fmt: skip
                del self._explicit[key]  # once


def effective(
    store: Store, client: Mapping[str, tuple[object, str]]
) -> list[tuple[str, object, str]]:
    """Each setting of the queue in ``store`` as ``(name, value, source)``:
    the stored ones with where their value came from (given at creation,
    an environment variable or the default then, or a change), then the
    ``client`` settings given, as they are."""
    with storage_errors(f"reading the config of {store.url}"):
        version = newest(store)
    rows: list[tuple[str, object, str]] = []
    for f in fields(QueueConfig):
        how = version.sources.get(f.name, "not recorded")
        if not f.metadata.get("setting", True):
            how = "fixed at creation"
        if how.startswith("VSQS_"):
            how = f"environment variable {how} at creation"
        elif how in ("explicit", "default"):
            how = f"{how} at creation"
        rows.append((f.name, getattr(version.config, f.name), f"stored: {how}"))
    rows += [(name, value, source) for name, (value, source) in client.items()]
    return rows


__all__ = [
    "CHANGEABLE",
    "CONFIG_PREFIX",
    "FIXED",
    "LiveConfig",
    "Version",
    "checked_changes",
    "collect",
    "effective",
    "newest",
    "version_name",
    "version_of",
    "write_change",
]
