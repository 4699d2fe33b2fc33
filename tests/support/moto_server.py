"""A moto S3 server on 127.0.0.1 and an OS-chosen port, in a process of its own.

Run as a script it prints its port and stops when its standard input closes.
:func:`moto_s3` runs it for the ``s3_server`` fixture and ``benchmarks/bench_s3.py``
(a process of its own, so racing clients do not share the caller's GIL with
the server).

moto's request handlers are not atomic: an exclusive create (``PUT`` with
``If-None-Match: *``) looks the key up, then writes it several steps later,
and a ``CopyObject`` reads its source, then writes its target. Under load a
thread switch between the two lets two racing creates of one key both win
(8 processes creating 300 keys side by side: 2 won twice), where S3 refuses
the second, and two consumers that both win one marker both hold, and both
acknowledge, one message. :func:`serve` therefore runs one request at a
time (:class:`OneAtATime`): each takes effect at one instant, as the
protocol assumes (docs/protocol.md, "A store whose requests are not atomic").
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

#: A WSGI application.
App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class OneAtATime:
    """WSGI middleware: runs each request's handler alone, under :attr:`lock`.

    A request's body is read before the lock is taken, and its response is
    sent after it is released, so a slow client holds up nobody.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.lock: AbstractContextManager[Any] = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("CONTENT_LENGTH"):
            body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))
            environ["wsgi.input"] = io.BytesIO(body)
        with self.lock:
            return list(self.app(environ, start_response))


def serve(port: int = 0) -> tuple[Any, OneAtATime]:
    """A moto S3 server on 127.0.0.1 (not yet serving: call ``serve_forever``)
    and the middleware that serializes its requests."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = OneAtATime(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    return server, app


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
    server, _ = serve()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_port, flush=True)
    sys.stdin.read()
    server.shutdown()
