"""The queue-level conformance suite: the whole :class:`vsqs.Queue` API on one store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import vsqs

from ._clock import FakeClock
from ._queue_admin import AdminTests
from ._queue_bundles import BundleTests
from ._queue_config import ConfigTests
from ._queue_dedup import AttributeTests, DedupTests
from ._queue_flow import FlowTests
from ._queue_groups import GroupTests
from ._queue_receipts import ReceiptTests
from ._queue_worker import WorkerTests
from ._suite import Suite


class QueueTests(
    Suite,
    FlowTests,
    ReceiptTests,
    BundleTests,
    AdminTests,
    ConfigTests,
    WorkerTests,
    GroupTests,
    DedupTests,
    AttributeTests,
):
    """Every promise of :class:`vsqs.Queue`, on the backend's ``store``.

    Most tests run on a fake clock, with durable and with non-durable sends
    (stores may publish them differently); long polls and the worker helper
    run on the real clock and take a few seconds in all.
    """

    @pytest.fixture(params=[True, False], ids=["durable", "not-durable"])
    def q(
        self, store: vsqs.Store, clock: FakeClock, request: pytest.FixtureRequest
    ) -> Iterator[vsqs.Queue]:
        """A queue on a fake clock; sends durable or not (local stores publish differently)."""
        with vsqs.Queue(store, clock=clock, visibility_timeout=30, durable=request.param) as queue:
            yield queue

    @pytest.fixture
    def live(self, store: vsqs.Store) -> Iterator[vsqs.Queue]:
        """A queue on the real clock, for long polls and the worker helper."""
        with vsqs.Queue(store, visibility_timeout=30) as queue:
            yield queue
