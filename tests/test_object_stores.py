"""The conformance suite on every object store, through real servers."""

from __future__ import annotations

from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs.stores._object import ObjectStore
from vsqs.stores._registry import open_store
from vsqs.testing import QueueTests, StoreTests

from .support import workers
from .support.backends import BY_ID, OnBackend, Place
from .support.races import check_race, run_race
from .support.servers import Server


class ObjectStoreTests(OnBackend, QueueTests, StoreTests):
    @pytest.fixture
    def server(self, place: Place) -> Server:
        assert place.server is not None
        return place.server

    def test_list_queues_under_a_prefix(self, server: Server) -> None:
        prefix = server.url().rpartition("/")[0]
        urls = []
        for name in ("b", "a"):
            with vsqs.Queue(f"{prefix}/{name}", storage_options=server.storage_options) as q:
                urls.append(q.url)
        fs = open_store(f"{prefix}/c", server.storage_options).io.fs  # type: ignore[attr-defined]
        fs.pipe_file(f"{prefix.split('://', 1)[1]}/c/not-a-config", b"x")
        found = vsqs.list_queues(prefix, storage_options=server.storage_options)
        assert found == sorted(urls)


class TestS3(ObjectStoreTests):
    backend = BY_ID["s3"]


class TestCephRGW(ObjectStoreTests):
    """A real S3 server that honours exclusive creates and no other condition."""

    backend = BY_ID["ceph"]

    def test_the_probe_finds_exclusive_creates(self, server: Server) -> None:
        with vsqs.Queue(server.url(), storage_options=server.storage_options) as q:
            assert q.protocol == "create-only"


class TestGCS(ObjectStoreTests):
    backend = BY_ID["gcs"]


class TestMemoryURL(ObjectStoreTests):
    backend = BY_ID["memory-url"]


# ------------------------------------------------------------------ races
@pytest.mark.processes
@pytest.mark.timeout(900)  # a safety net: run_race fails a stall itself
def test_eight_racing_consumer_processes_on_s3(tmp_path: Path, s3_server: Server) -> None:
    """Each message claimed by one consumer at a time, acked exactly once, none lost."""
    vt = 30.0
    target = [s3_server.url("race"), s3_server.storage_options]
    sent, claims = run_race(
        tmp_path,
        producers=[(150, "single", True), (150, "batch", True)],
        consumers=8,
        vt=vt,
        max_batch=3,
        p_release=0.05,
        target=target,
    )
    check_race(sent, claims, vt)
    assert len({c["pid"] for c in claims}) == 8, "not every consumer got work"
    released = sum(c["action"] == "release" and c["ok"] for c in claims)
    assert released > 0 and len(claims) == len(sent) + released
    with workers.open_queue(target) as q:
        assert isinstance(q.store, ObjectStore)
        raw = [name for name, _ in q.store.io.listing()]
    assert raw == [names.CONFIG_NAME], f"markers or sources left behind: {raw[:5]}"
