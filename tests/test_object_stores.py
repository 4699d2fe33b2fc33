"""The conformance suite on every object store, through real servers."""

from __future__ import annotations

import pytest

import vsqs
from vsqs._registry import open_store

from .queue_tests import QueueTests
from .servers import Server, gcs_server, memory_server, s3_server  # noqa: F401 - fixtures


class ObjectStoreTests(QueueTests):
    server_fixture = ""

    @pytest.fixture
    def server(self, request: pytest.FixtureRequest) -> Server:
        return request.getfixturevalue(self.server_fixture)  # type: ignore[no-any-return]

    @pytest.fixture
    def store(self, server: Server) -> vsqs.Store:
        return open_store(server.url(), server.storage_options)


class TestS3(ObjectStoreTests):
    server_fixture = "s3_server"


class TestGCS(ObjectStoreTests):
    server_fixture = "gcs_server"


class TestMemoryURL(ObjectStoreTests):
    server_fixture = "memory_server"
