"""The conformance suite for :class:`vsqs.Store` implementations (needs pytest).

A store's test module subclasses :class:`QueueTests` (the whole
:class:`vsqs.Queue` API on the store) and provides one fixture, ``store``: a
fresh, empty store (its container need not exist yet) whose
``sibling(name)`` reaches other queues of the same backend::

    import pytest
    from vsqs.testing import QueueTests

    class TestMyStore(QueueTests):
        @pytest.fixture
        def store(self, tmp_path):
            return MyStore(tmp_path / "q")

:class:`FakeClock` is the clock the suite injects (fixture ``clock``). Tests
the store is known to fail go in ``known_failures``, ``{test name: reason}``,
and then run as strict ``xfail``.

This module imports pytest (``pip install 'vsqs[test]'``); ``import vsqs``
never does.
"""

from __future__ import annotations

try:
    import pytest
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("vsqs.testing needs pytest: pip install 'vsqs[test]'") from exc

# Plain ``assert`` in the suite explains its failures, as in a test module.
pytest.register_assert_rewrite("vsqs.testing._queue_tests", "vsqs.testing._suite")

from ._clock import FakeClock  # noqa: E402
from ._queue_tests import QueueTests  # noqa: E402

__all__ = ["FakeClock", "QueueTests"]
