from __future__ import annotations

import pickle

import pytest

import vsqs
from vsqs.testing import QueueTests, StoreTests

from .support.backends import BY_ID, OnBackend


class TestMemoryStore(OnBackend, QueueTests, StoreTests):
    backend = BY_ID["memory"]


def test_memory_stores_are_per_instance() -> None:
    one, two = vsqs.MemoryStore("q"), vsqs.MemoryStore("q")
    with vsqs.Queue(one) as a, vsqs.Queue(two) as b:
        a.send(b"x")
        assert b.receive() is None
        assert a.receive() is not None


def test_memory_store_refuses_pickling() -> None:
    with pytest.raises(TypeError):
        pickle.dumps(vsqs.MemoryStore())
