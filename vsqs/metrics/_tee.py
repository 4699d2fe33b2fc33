"""Several observers as one: what the engine reports while both exporters are on."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import _meter as meter


class Tee:
    """Reports every event to each of ``observers``, in order."""

    def __init__(self, observers: Sequence[meter.Observer]) -> None:
        self._all = tuple(observers)

    def clock(self) -> float:
        return meter.now()

    def sent(self, url: str, operation: str, count: int, started: float) -> None:
        for each in self._all:
            each.sent(url, operation, count, started)

    def received(self, url: str, count: int, started: float) -> None:
        for each in self._all:
            each.received(url, count, started)

    def deleted(self, url: str, receipt: str, now_ms: meter.NowMs) -> None:
        for each in self._all:
            each.deleted(url, receipt, now_ms)

    def operation(self, url: str, name: str, started: float) -> None:
        for each in self._all:
            each.operation(url, name, started)

    def dead_lettered(self, url: str) -> None:
        for each in self._all:
            each.dead_lettered(url)

    def claim_conflict(self, url: str) -> None:
        for each in self._all:
            each.claim_conflict(url)

    def request(self, url: str, operation: str, outcome: str) -> None:
        for each in self._all:
            each.request(url, operation, outcome)

    def groups_in_flight(self, url: str, count: int) -> None:
        for each in self._all:
            each.groups_in_flight(url, count)

    def traced(self, attributes: meter.Attributes) -> meter.Attributes:
        for each in self._all:
            attributes = each.traced(attributes)
        return attributes

    def handling(
        self, url: str, handler: Callable[[meter.M], object]
    ) -> Callable[[meter.M], object]:
        for each in self._all:
            handler = each.handling(url, handler)
        return handler
