"""Conformance suites for :class:`vsqs.Store` implementations (needs pytest).

A store's test module subclasses the suites and provides one fixture,
``store``: a fresh, empty store (its container need not exist yet) whose
``sibling(name)`` reaches other queues of the same backend::

    import pytest
    from vsqs.testing import QueueTests, StoreTests

    class TestMyStore(QueueTests, StoreTests):
        @pytest.fixture
        def store(self, tmp_path):
            return MyStore(tmp_path / "q")

* :class:`QueueTests` runs the whole :class:`vsqs.Queue` API on the store;
* :class:`StoreTests` checks the :class:`vsqs.Store` contract on the store
  itself: exclusive creates, exact reads, no-replace renames of which exactly
  one of many racing wins, splits, deletes, listings, change tokens,
  siblings and thread safety;
* :class:`FakeClock` is the clock the suites inject (fixture ``clock``).

Both take ``known_failures``: ``{test name: reason}`` of tests the store is
known to fail, which then run as strict ``xfail``.

This module imports pytest (``pip install 'vsqs[test]'``); ``import vsqs``
never does.
"""

from __future__ import annotations

try:
    import pytest
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("vsqs.testing needs pytest: pip install 'vsqs[test]'") from exc

# Plain ``assert`` in the suites explains its failures, as in a test module.
pytest.register_assert_rewrite(
    *(
        f"vsqs.testing.{module}"
        for module in (
            "_queue_admin",
            "_queue_bundles",
            "_queue_config",
            "_queue_dedup",
            "_queue_flow",
            "_queue_groups",
            "_queue_receipts",
            "_queue_tests",
            "_queue_worker",
            "_store_splits",
            "_store_support",
            "_store_tests",
            "_suite",
        )
    )
)

from ._clock import FakeClock  # noqa: E402
from ._queue_tests import QueueTests  # noqa: E402
from ._store_tests import StoreTests  # noqa: E402

__all__ = ["FakeClock", "QueueTests", "StoreTests"]
