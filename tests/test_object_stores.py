"""The conformance suite on every object store, through real servers."""

from __future__ import annotations

from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs._registry import open_store
from vsqs._store_object import ObjectStore
from vsqs.testing import QueueTests

from . import _workers
from .servers import Server
from .test_processes import check_race, run_race


class ObjectStoreTests(QueueTests):
    server_fixture = ""

    @pytest.fixture
    def server(self, request: pytest.FixtureRequest) -> Server:
        return request.getfixturevalue(self.server_fixture)  # type: ignore[no-any-return]

    @pytest.fixture
    def store(self, server: Server) -> vsqs.Store:
        return open_store(server.url(), server.storage_options)

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
    server_fixture = "s3_server"


class TestCephRGW(ObjectStoreTests):
    """A real S3 server that honours exclusive creates and no other condition."""

    server_fixture = "ceph_server"

    def test_the_probe_finds_exclusive_creates(self, server: Server) -> None:
        with vsqs.Queue(server.url(), storage_options=server.storage_options) as q:
            assert q.protocol == "create-only"


class TestGCS(ObjectStoreTests):
    server_fixture = "gcs_server"


class TestMemoryURL(ObjectStoreTests):
    server_fixture = "memory_server"


# ------------------------------------------------------------------ races
@pytest.mark.slow
@pytest.mark.timeout(120)
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
    with _workers.open_queue(target) as q:
        assert isinstance(q._store, ObjectStore)
        raw = [name for name, _ in q._store.io.listing()]
    assert raw == [names.CONFIG_NAME], f"markers or sources left behind: {raw[:5]}"
