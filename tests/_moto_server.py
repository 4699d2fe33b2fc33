"""A moto S3 server on 127.0.0.1 and an OS-chosen port, in a process of its own.

Run as a script it prints its port and stops when its standard input closes.
:func:`moto_s3` runs it for the ``s3_server`` fixture and ``benchmarks/bench_s3.py``
(a process of its own, so racing clients do not share the caller's GIL with
the server).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def moto_s3(bucket: str) -> Iterator[dict[str, Any]]:
    """Start a server with ``bucket`` in it; yield s3fs options that reach it; stop it."""
    process = subprocess.Popen(
        [sys.executable, __file__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        endpoint = f"http://127.0.0.1:{int(process.stdout.readline())}"
        options = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        import s3fs

        s3fs.S3FileSystem(**options).call_s3("create_bucket", Bucket=bucket)
        yield options
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    print(server._server.server_port, flush=True)
    sys.stdin.read()
    server.stop()
