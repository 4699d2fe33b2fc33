"""A queue's administration: opening (and creating) it, and the bodies of
:meth:`vsqs.Queue.peek`, ``stats``, ``purge`` and ``gc``.

Opening reads the queue's config, or creates it once (the first creator's
config wins; later ones are checked against it). Peek and stats change
nothing; purge and gc remove only names of the format (docs/format.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from . import _configure as configure
from . import _inspect as inspect
from . import _meter as meter
from . import _names as names
from ._bundled import peeked
from ._config import (
    ENV_DURABLE,
    ENV_MAX_POLL_INTERVAL,
    QueueConfig,
    creation_sources,
    env_flag,
    env_seconds,
    seconds,
    warn_unknown_env,
)
from ._dead_letter import check_target, collect_origins, remove_records
from ._dedup import Deduplicator
from ._envelope import read_limit
from ._errors import QueueNotFound, UnsupportedStore, storage_errors
from ._message import Message, Owner, Progress, QueueStats, read_origin
from ._publish import PublishAs, publish
from ._receiver import DEFAULT_MAX_POLL_INTERVAL
from .stores._base import Store, TooLarge

log = logging.getLogger("vsqs")


def client_settings(
    durable: bool | None, new_grace: float | None, max_poll_interval: float | None
) -> tuple[bool, float, float]:
    """A client's own settings as given, else from their ``VSQS_*``
    variables, else the defaults: ``durable``, ``new_grace`` and
    ``max_poll_interval`` (checked). Names unknown ``VSQS_*`` variables in a
    warning, once per process."""
    warn_unknown_env()
    durable = env_flag(ENV_DURABLE, True) if durable is None else durable
    grace = inspect.default_new_grace() if new_grace is None else new_grace
    poll = max_poll_interval
    poll = env_seconds(ENV_MAX_POLL_INTERVAL, DEFAULT_MAX_POLL_INTERVAL) if poll is None else poll
    return bool(durable), seconds(grace, "new_grace"), seconds(poll, "max_poll_interval")


def open_config(
    store: Store,
    clock: names.MsClock,
    *,
    create: bool,
    durable: bool,
    unsafe_claims: bool,
    requested: dict[str, Any],
) -> configure.LiveConfig:
    """The config of the queue in ``store`` (its newest version), made from
    ``requested`` when ``create`` and there is none
    (:meth:`QueueConfig.create`); raises :class:`QueueConfigError` where
    ``requested`` disagrees with it, :class:`QueueNotFound` without one."""
    url = store.url
    check_target(requested.get("dead_letter"), url, given=True)  # before anything is created
    with storage_errors(f"opening {url}"):
        if not store.ensure(create):
            raise QueueNotFound(f"no queue at {url}")
        check_claims(store, unsafe_claims)
        try:
            config = QueueConfig.from_json(store.read(names.CONFIG_NAME), url)
        except FileNotFoundError:
            if not create:
                raise QueueNotFound(f"no queue at {url} (no vsqs config in it)") from None
            config = QueueConfig.create(requested)
            data = config.to_json(sources=creation_sources(requested))
            message_id = clock.next_id()
            if not publish(store, durable, message_id, data, names.CONFIG_NAME, replace_new=False):
                config = QueueConfig.from_json(store.read(names.CONFIG_NAME), url)
        live = configure.LiveConfig(store, clock.clock, config, requested)
        config = live.load()
        config.check_agrees(requested, url, live.version.sources)
    check_target(config.dead_letter, url, given=False)  # another client's
    return live


def check_claims(store: Store, unsafe_claims: bool) -> None:
    """Refuse a store that cannot make claims exclusive, unless told not to."""
    if store.exclusive_claims():
        return
    if not unsafe_claims:
        why = f" ({store.refusal})" if store.refusal else ""
        raise UnsupportedStore(
            f"{store.url}: this store cannot make claims exclusive{why}, so two "
            "consumers could receive the same message at once. To use it "
            "anyway: unsafe_claims=True (Python), --unsafe-claims (vsqs "
            'command), .option("unsafeClaims", "true") (Spark); see '
            "docs/protocol.md"
        )
    log.warning("%s: claims are not exclusive here (unsafe_claims=True)", store.url)


def peek(
    owner: Owner, store: Store, clock: names.MsClock, max_size: int, max_messages: int
) -> list[Message]:
    """See :meth:`vsqs.Queue.peek` (``max_messages`` checked by the caller)."""
    now = clock.now_ms()
    out: list[Message] = []
    with storage_errors(f"peeking into {store.url}"):
        found, origins = inspect.scan(store, now)
        ready = sorted((e.name, e.parsed) for e in found if e.state == names.READY)
        for name, parsed in ready:
            try:
                body = store.read_limited(name, read_limit(parsed.id, max_size))
            except FileNotFoundError:
                continue
            except TooLarge as exc:
                log.warning("%s: peek passes over %s, too large: %s", store.url, name, exc.strerror)
                continue
            origin = read_origin(store, origins.get(parsed.id, ()))
            out.extend(peeked(owner, parsed.id, body, parsed.receive_count, origin))
            if len(out) >= max_messages:
                break
    return out[:max_messages]


def stats(
    store: Store, clock: names.MsClock, dead_letter_depth: Callable[[], int] | None
) -> QueueStats:
    """See :meth:`vsqs.Queue.stats`; ``dead_letter_depth`` counts the
    dead-letter queue (``None`` without one)."""
    with storage_errors(f"listing {store.url}"):
        t = inspect.tally(store, clock.now_ms())
    meter.observer.groups_in_flight(store.url, len(t.held_groups))
    return QueueStats(
        ready=t.ready,
        in_flight=t.in_flight,
        delayed=t.delayed,
        writing=t.writing,
        oldest_ready_age=t.seconds_ago(t.oldest_sent_ms),
        next_visible_in=t.seconds_until(t.next_visible_ms),
        in_flight_expires_in=t.seconds_until(t.in_flight_expiry_ms),
        dead_letter=None if dead_letter_depth is None else dead_letter_depth(),
        groups_in_flight=len(t.held_groups),
    )


def purge(store: Store, progress: Progress | None) -> int:
    """See :meth:`vsqs.Queue.purge` (the caller's receiver forgets what it knew first)."""
    removed = 0
    with storage_errors(f"purging {store.url}"):
        found, origins = inspect.scan(store, 0)
        doomed = [e for e in found if e.is_message]
        total = sum(names.message_count(e.parsed.id) for e in doomed)  # a part holds several
        done = 0
        for entry in doomed:
            done += names.message_count(entry.parsed.id)
            with suppress(FileNotFoundError):
                store.delete(entry.name, known=True)
                removed += names.message_count(entry.parsed.id)
                # Its message is gone: so are the records listed with it
                # (not those of a message whose delete lost a race: it lives on).
                remove_records(store, origins.pop(entry.parsed.id, ()))
            if progress is not None:
                progress(done, total)
        store.flush()
    log.info("%s: purged %d messages", store.url, removed)
    return removed


def gc(
    store: Store,
    clock: names.MsClock,
    new_grace_ms: int,
    progress: Progress | None,
    records: tuple[Deduplicator, PublishAs],
) -> list[str]:
    """See :meth:`vsqs.Queue.gc`; ``records``: the queue's deduplication
    records and how their messages are published (rolled forward)."""
    with storage_errors(f"collecting leftovers in {store.url}"):
        now = clock.now_ms()
        leftovers = inspect.stale_new(store, now, new_grace_ms)
        removed = inspect.collect_stale_new(store, leftovers, store.url, progress)
        removed += collect_origins(store, now, new_grace_ms)
        dedup, publish = records
        removed += dedup.collect(list(store.list()), publish)
        removed += configure.collect(store, now)
        return removed + store.take_repairs()
