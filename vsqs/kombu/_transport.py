"""The kombu virtual transport over vsqs queues (docs/celery.md).

Modelled on kombu's SQS transport: a received message stays invisible for
``visibility_timeout`` and is deleted by its ack, released by a reject with
requeue, deleted by a reject without; a worker that dies holding it leaves
it to come back after the timeout.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from queue import Empty
from typing import Any

from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads

from .. import _forks
from .._config import MAX_SECONDS, seconds
from .._errors import InvalidArgument, StorageError, VsqsError
from .._queue import Queue
from ._held import Held, delete, release
from ._names import vsqs_name

log = logging.getLogger("vsqs.kombu")

#: The visibility timeout of what the transport receives, as kombu's SQS transport.
DEFAULT_VISIBILITY_TIMEOUT = 1800.0
#: Seconds one ``_get`` long-polls an empty queue (below Celery's 2 s drain timeout).
DEFAULT_WAIT = 1.0
#: Seconds a channel whose prefetch slots are all taken waits for an ack at most.
FULL_PAUSE = 0.5
_QUEUE_SETTINGS = ("max_receives", "dead_letter")
#: kombu's ``delivery_mode`` of a transient message (Celery's
#: ``task_default_delivery_mode = "transient"``): sent without syncing.
TRANSIENT = 1


class Unsupported(VsqsError, NotImplementedError):
    """A kombu feature the vsqs transport does not have (fanout exchanges:
    Celery's remote control and ``celery inspect``)."""


@dataclass(frozen=True)
class Options:
    """``broker_transport_options`` the transport reads."""

    visibility_timeout: float
    wait: float
    storage_options: dict[str, Any] | None
    queue_settings: dict[str, Any]
    #: Send each Celery task with its dedup id (:func:`task_dedup_id`).
    dedup_ids: bool = True

    @classmethod
    def parse(cls, given: dict[str, Any]) -> Options:
        """Check the options; :class:`InvalidArgument` on a bad one."""
        vt = seconds(
            given.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT), "visibility_timeout"
        )
        if vt <= 0:
            raise InvalidArgument("visibility_timeout must be above 0 seconds")
        storage_options = given.get("storage_options")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise InvalidArgument("storage_options must be a dict")
        dedup_ids = given.get("dedup_ids", True)
        if not isinstance(dedup_ids, bool):
            raise InvalidArgument("dedup_ids must be True or False")
        return cls(
            visibility_timeout=vt,
            wait=seconds(given.get("wait", DEFAULT_WAIT), "wait"),
            storage_options=storage_options,
            queue_settings={k: given[k] for k in _QUEUE_SETTINGS if given.get(k) is not None},
            dedup_ids=dedup_ids,
        )


def queue_root(hostname: str | None) -> str:
    """The vsqs location under which the Celery queues are (ending in ``/``),
    from kombu's hostname."""
    if hostname and hostname.startswith("vsqs://"):
        hostname = hostname[len("vsqs://") :]
    if not hostname or hostname == "localhost":
        raise InvalidArgument(
            "the vsqs transport needs a queue root: broker_url = 'vsqs+file:///var/spool/celery'"
        )
    return hostname if hostname.endswith("/") else hostname + "/"


def eta_delay(headers: dict[str, Any], now: float) -> float:
    """The delay of a message from Celery's ``eta`` header: 0 without one or
    for one past, at most vsqs's longest delay (then the worker holds the task
    until its eta, as with any broker)."""
    eta = headers.get("eta")
    if not eta:
        return 0.0
    try:
        when = datetime.fromisoformat(str(eta))
    except ValueError:
        raise InvalidArgument(f"eta {eta!r:.60} is not an ISO 8601 time") from None
    if when.tzinfo is None:  # Celery's naive etas are UTC
        when = when.replace(tzinfo=UTC)
    delay = when.timestamp() - now
    if not math.isfinite(delay) or delay <= 0:
        return 0.0
    if delay > MAX_SECONDS:
        log.warning(
            "vsqs.kombu: eta %s is beyond vsqs's longest delay; delayed by %.0f s", eta, MAX_SECONDS
        )
        return MAX_SECONDS
    return delay


def task_dedup_id(headers: dict[str, Any]) -> str | None:
    """Celery's task id, retry count and replacement depth
    (``<id>:<retries>:<replaced>``), or None for a message that is not a
    Celery task. ``Task.retry`` publishes the next retry count and
    ``Task.replace`` the next ``replaced_task_nesting``, both under the same
    task id: each is a message of its own."""
    task_id = headers.get("id")
    if not task_id or not headers.get("task"):
        return None
    replaced = headers.get("replaced_task_nesting") or 0
    return f"{task_id}:{headers.get('retries') or 0}:{replaced}"


class Channel(virtual.Channel):
    """A kombu channel whose queues are vsqs queues under the transport's root."""

    connection: Transport

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._held = Held(connection.options.visibility_timeout)
        self._noack_queues: set[str] = set()
        self._freed = _forks.event()  # set by every ack and reject

    def _queue(self, name: str) -> Queue:
        return self.connection.queue(name)

    def exchange_declare(
        self,
        exchange: Any = None,
        type: Any = "direct",
        durable: Any = False,
        auto_delete: Any = False,
        arguments: Any = None,
        nowait: Any = False,
        passive: Any = False,
    ) -> Any:
        if type == "fanout":
            raise Unsupported(
                f"exchange {exchange!r}: the vsqs transport has no fanout exchanges "
                "(Celery's remote control and `celery inspect` are unsupported)"
            )
        return super().exchange_declare(
            exchange, type, durable, auto_delete, arguments, nowait, passive
        )

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self._queue(queue)

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        headers = message.get("headers") or {}
        properties = message.get("properties") or {}
        durable = properties.get("delivery_mode") != TRANSIENT
        self.connection.queue(queue, durable=durable).send(
            dumps(message),
            delay=eta_delay(headers, time.time()),
            dedup_id=task_dedup_id(headers) if self.connection.options.dedup_ids else None,
        )

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        options = self.connection.options
        vq = self._queue(queue)
        self.connection.collect(queue)
        message = vq.receive(visibility_timeout=options.visibility_timeout, wait=options.wait)
        if message is None:
            raise Empty()
        text = bytes_to_str(message.body)
        try:
            payload = loads(text)
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or "properties" not in payload:  # not kombu's: as SQS
            payload = {"body": text, "properties": {"delivery_info": {}}}
        tag = uuid.uuid4().hex  # one per delivery: a redelivery is another
        payload["properties"]["delivery_tag"] = tag
        if queue in self._noack_queues:
            vq.delete(message)
        else:
            self._held.add(tag, vq, message)
        return payload

    def basic_consume(
        self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any
    ) -> Any:
        if no_ack:
            self._noack_queues.add(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        self._noack_queues.discard(self._tag_to_queue.get(consumer_tag))
        return super().basic_cancel(consumer_tag)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack=no_ack, **kwargs)
        if message is not None and no_ack:
            self._held.settle(message.delivery_tag, delete)
        return message

    def drain_events(self, timeout: float | None = None, callback: Any = None) -> Any:
        """Poll the queues; with every prefetch slot taken, wait (up to
        ``FULL_PAUSE``) for an ack or reject instead of spinning: kombu's loop
        calls again at once."""
        if self._consumers and not self.qos.can_consume():
            self._freed.clear()
            if not self.qos.can_consume():  # no ack came in between
                self._freed.wait(FULL_PAUSE if timeout is None else min(timeout, FULL_PAUSE))
            raise Empty()
        return super().drain_events(timeout=timeout, callback=callback)

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        try:
            self._held.settle(delivery_tag, delete)
        finally:
            super().basic_ack(delivery_tag)
            self._freed.set()

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        try:
            if not requeue:  # discarded: deleted (requeue releases, in _restore)
                self._held.settle(delivery_tag, delete)
        finally:
            super().basic_reject(delivery_tag, requeue=requeue)
            self._freed.set()

    def _restore(self, message: Any) -> None:
        if not self._held.settle(message.delivery_tag, release):
            log.warning("vsqs.kombu: no held message to restore for %s", message.delivery_tag)

    def _size(self, queue: str) -> int:
        return int(self._queue(queue).stats().ready)

    def _purge(self, queue: str) -> int:
        return self._queue(queue).purge()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._held.close()


def _collect(queue: Queue) -> None:
    try:
        queue.gc()
    except (VsqsError, OSError) as exc:  # tried again a window later
        log.warning("vsqs.kombu: collecting the leftovers of %s failed: %s", queue.url, exc)


class Transport(virtual.Transport):
    """kombu's transport ``vsqs``: broker URL ``vsqs+<queue root>``."""

    Channel = Channel
    #: ``_get`` long-polls ``wait`` seconds itself; 1 s between polls with ``wait=0``.
    polling_interval = 0.0
    default_port = None
    can_parse_url = True
    #: A storage failure makes Celery reconnect (with its retry policy), not stop the worker.
    connection_errors: tuple[Any, ...] = (*virtual.Transport.connection_errors, StorageError)
    driver_type = "vsqs"
    driver_name = "vsqs"
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct"])
    )

    def __init__(self, client: Any, **kwargs: Any) -> None:
        topts = client.transport_options
        self.options = Options.parse(topts)
        self.root = queue_root(client.hostname)
        self._queues: dict[tuple[str, bool], Queue] = {}
        self._queues_lock = _forks.lock()
        self._next_gc: dict[str, float] = {}  # by Celery queue: when to collect again
        self._collecting: list[threading.Thread] = []
        super().__init__(client, **kwargs)
        if "polling_interval" not in topts and self.options.wait == 0:
            self.polling_interval = 1.0

    def queue(self, name: str, *, durable: bool = True) -> Queue:
        """The vsqs queue of Celery queue ``name`` (created on first use).

        ``durable=False``: a second client of it whose sends are never synced
        (``durable=False``), for transient messages; else the sends are
        durable unless ``VSQS_DURABLE=0``.
        """
        with self._queues_lock:
            queue = self._queues.get((name, durable))
            if queue is None:
                queue = Queue(
                    self.root + vsqs_name(name),
                    storage_options=self.options.storage_options,
                    durable=None if durable else False,
                    **self.options.queue_settings,
                )
                self._queues[name, durable] = queue
            return queue

    def collect(self, name: str) -> None:
        """Collect the leftovers of Celery queue ``name`` (``Queue.gc()``, in a
        thread) if it was not for a deduplication window: above all the two
        files a task's dedup id leaves, removed two windows after its send."""
        queue = self.queue(name)
        now = time.monotonic()
        with self._queues_lock:
            if now < self._next_gc.get(name, now):
                return
            self._next_gc[name] = now + queue.config.dedup_window
            self._collecting = [t for t in self._collecting if t.is_alive()]
            thread = threading.Thread(
                target=_collect, args=(queue,), name="vsqs-kombu-gc", daemon=True
            )
            self._collecting.append(thread)
            thread.start()  # under the lock: close_connection joins only started ones

    def close_connection(self, connection: Any) -> None:
        try:
            super().close_connection(connection)
        finally:
            with self._queues_lock:
                collecting, self._collecting = self._collecting, []
            for thread in collecting:  # before their queues close
                thread.join()
            with self._queues_lock:
                queues, self._queues = list(self._queues.values()), {}
            for queue in queues:
                queue.close()

    def driver_version(self) -> str:
        from importlib.metadata import version

        return version("vsqs")
