"""Queue figures for Prometheus: ``vsqs stats --prometheus`` and ``vsqs metrics serve``.

A scan takes one listing of every queue (:meth:`vsqs.Queue.stats` without
its dead-letter queue) and one of each dead-letter queue that is not
scanned itself; the figures go out through a prometheus-client collector
(docs/monitoring.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from .. import _admin as admin
from .. import _forks
from .._errors import QueueNotFound, VsqsError
from .._message import QueueStats
from .._queue import Queue
from ..stores._registry import list_queues
from ._common import open_queue, queue_options, storage_options
from ._interrupt import interruptible
from ._report import out, out_line

if TYPE_CHECKING:
    from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger("vsqs")

#: The gauges of a scan: name, help, and the figure of a queue's stats.
GAUGES: tuple[tuple[str, str, Callable[[QueueStats], float]], ...] = (
    ("vsqs_messages_visible", "Messages ready to receive.", lambda s: s.ready),
    ("vsqs_messages_in_flight", "Messages received and not yet deleted.", lambda s: s.in_flight),
    ("vsqs_messages_delayed", "Messages sent with a delay not yet over.", lambda s: s.delayed),
    (
        "vsqs_oldest_message_age_seconds",
        "Seconds since the oldest ready message was sent (0 with none).",
        lambda s: s.oldest_ready_age or 0.0,
    ),
)
DEAD_LETTER = (
    "vsqs_dead_letter_messages",
    "Messages in the queue's dead-letter queue (label queue: the source queue).",
)
GROUPS = ("vsqs_groups_in_flight", "Message groups with a message in flight.")


class Figures(NamedTuple):
    """One queue's figures of one scan (``dead_letter``: ``None`` without a
    dead-letter queue; ``grouped``: whether its format has message groups)."""

    url: str
    stats: QueueStats
    dead_letter: int | None
    grouped: bool


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise click.ClickException(
            "prometheus-client is not installed: pip install 'vsqs[metrics]'"
        ) from None
    return prometheus_client


def _depth(stats: QueueStats) -> int:
    return stats.ready + stats.in_flight + stats.delayed


class Scanner:
    """Scans a fixed set of open queues; :meth:`scan` lists each once, and
    each dead-letter queue that is not one of them once (through its source
    queue, which opens it once)."""

    def __init__(self, queues: Sequence[Queue]) -> None:
        self.queues = list(queues)
        #: Each queue's dead-letter queue, named once (settings are fixed).
        self._targets = {queue.url: queue.dead_letter_url for queue in self.queues}
        #: The figures of the latest scan.
        self.figures: list[Figures] = []
        self._lock = _forks.lock()

    def scan(self, *, keep_going: bool = False) -> list[Figures]:
        """List every queue once; ``keep_going``: a queue whose listing fails
        keeps the figures of its last scan (logged), and the others go on,
        else the failure is raised."""
        seen: dict[str, QueueStats] = {}
        for queue in self.queues:
            try:
                seen[queue.url] = self._stats(queue)
            except VsqsError as exc:
                if not keep_going:
                    raise
                log.error("%s: a scan failed (the last figures stay): %s", queue.url, exc)
        last = {f.url: f for f in self.latest()}
        figures = []
        for queue in self.queues:
            stats = seen.get(queue.url)
            if stats is None:
                figures.extend([last[queue.url]] if queue.url in last else [])
                continue
            target = self._targets[queue.url]
            depth = None if target is None else stats.dead_letter
            if target in seen:
                depth = _depth(seen[target])
            grouped = queue.config.format >= 3
            figures.append(Figures(queue.url, stats, depth, grouped))
        with self._lock:
            self.figures = figures
        return figures

    def _stats(self, queue: Queue) -> QueueStats:
        """One listing of ``queue``, and one of its dead-letter queue where
        that is not scanned itself."""
        target = self._targets[queue.url]
        if target is None or target in self._targets:
            return _listed(queue)
        return queue.stats()

    def latest(self) -> list[Figures]:
        with self._lock:
            return list(self.figures)


def _listed(queue: Queue) -> QueueStats:
    """One listing of ``queue``: its stats without its dead-letter queue."""
    return admin.stats(queue.store, queue.store.ms_clock(queue.clock), None)


def collector(scanner: Scanner) -> Collector:
    """A prometheus-client collector of the scanner's latest figures."""
    _prometheus()
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    class QueueCollector(Collector):
        def collect(self) -> Iterator[GaugeMetricFamily]:
            figures = scanner.latest()
            for name, doc, figure in GAUGES:
                family = GaugeMetricFamily(name, doc, labels=["queue"])
                for f in figures:
                    family.add_metric([f.url], figure(f.stats))
                yield family
            yield _family(DEAD_LETTER, ((f.url, f.dead_letter) for f in figures))
            grouped = ((f.url, f.stats.groups_in_flight if f.grouped else None) for f in figures)
            yield _family(GROUPS, grouped)

    def _family(
        named: tuple[str, str], values: Iterable[tuple[str, int | None]]
    ) -> GaugeMetricFamily:
        family = GaugeMetricFamily(*named, labels=["queue"])
        for url, value in values:
            if value is not None:
                family.add_metric([url], value)
        return family

    return QueueCollector()


def registry_of(scanner: Scanner) -> CollectorRegistry:
    """A registry of the scanner's figures alone."""
    _prometheus()
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector(scanner))
    return registry


def print_prometheus(urls: Sequence[str], *, other_format: bool) -> None:
    """``vsqs stats --prometheus``: scan once, print the text exposition
    (``other_format``: ``--json`` or ``--watch`` was given too, a usage error)."""
    if other_format:
        raise click.UsageError("--prometheus goes with neither --json nor --watch")
    client = _prometheus()
    with ExitStack() as stack:
        queues = [stack.enter_context(open_queue(url)) for url in urls]
        scanner = Scanner(queues)
        scanner.scan()
        out(client.generate_latest(registry_of(scanner)))


def prometheus_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--prometheus`` of ``vsqs stats``."""
    return click.option(
        "--prometheus",
        is_flag=True,
        help="Print the Prometheus text format, one sample per QUEUE in each family "
        "(needs vsqs[metrics]; several QUEUEs only with it).",
    )(fn)


def only_queue(urls: Sequence[str]) -> str:
    """The one QUEUE of ``vsqs stats`` without ``--prometheus``."""
    if len(urls) > 1:
        raise click.UsageError("several QUEUEs only with --prometheus")
    return urls[0]


# -------------------------------------------------------------- metrics serve
def resolve(targets: Sequence[str]) -> list[str]:
    """The queues of ``targets``: a queue stands for itself, anything else is
    a root whose queues (directly under it, now) stand for it."""
    urls: list[str] = []
    for target in targets:
        try:
            with open_queue(target) as queue:
                urls.append(queue.url)
        except QueueNotFound:
            found = list_queues(target, storage_options=storage_options())
            if not found:
                raise QueueNotFound(f"no queue at or under {target}") from None
            urls.extend(found)
    return list(dict.fromkeys(urls))


@click.group(short_help="Export queue figures to Prometheus.")
def metrics() -> None:
    """Export the figures of queues to Prometheus (docs/monitoring.md)."""


@metrics.command(short_help="Serve /metrics for queues, rescanned every few seconds.")
@click.argument("targets", metavar="ROOT_OR_QUEUE...", nargs=-1, required=True)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    required=True,
    help="TCP port to serve on (0: any free one; the address printed names it).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option(
    "--interval",
    default=15.0,
    help="Seconds between two scans.",
    type=click.FloatRange(0.1),
    show_default=True,
    metavar="SECONDS",
)
@queue_options
def serve(targets: tuple[str, ...], port: int, host: str, interval: float) -> None:
    """Serve the figures of `vsqs stats --prometheus` at http://HOST:PORT/metrics
    (printed on stdout once it serves).

    Each ROOT_OR_QUEUE is a queue, or a directory, bucket or prefix whose
    queues (found at start) are served. Every scan lists each queue once
    and each dead-letter queue not served itself once: on an object store,
    one LIST request per 1 000 messages of each. A scan that fails is
    logged and its queues keep their last figures. Ctrl-C or SIGTERM stops
    it (exit 130 or 143).
    """
    client = _prometheus()
    with ExitStack() as stack:
        queues = [stack.enter_context(open_queue(url)) for url in resolve(targets)]
        scanner = Scanner(queues)
        scanner.scan()  # a queue that cannot be listed at start is an error
        server, thread = client.start_http_server(port, addr=host, registry=registry_of(scanner))
        try:
            address = f"http://{host}:{server.server_port}/metrics"
            out_line(address)  # data: where to scrape (the port it took, with --port 0)
            count = f"{len(queues)} queue{'' if len(queues) == 1 else 's'}"
            click.echo(
                f"vsqs: serving {address} for {count}, scanned every {interval:g} s", err=True
            )
            _rescan(scanner, interval)
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


def _rescan(scanner: Scanner, interval: float) -> None:
    """Scan every ``interval`` seconds until a signal ends the wait."""
    while True:
        with interruptible():  # a signal ends the wait: Interrupted
            time.sleep(interval)
        scanner.scan(keep_going=True)


__all__ = ["metrics", "print_prometheus", "prometheus_option"]
