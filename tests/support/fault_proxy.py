"""An HTTP/1.1 forwarding proxy that injects S3 faults between a client and a server.

:class:`FaultProxy` listens on 127.0.0.1 (an OS-chosen port), forwards every
request (method, path and query, headers, body) to an upstream endpoint (the
moto server) and relays the response. Armed with a fault plan, it counts the
requests it receives from the moment of arming and, at the ``at``-th one
(1-based), does one of:

* ``"500"``: answers ``500 InternalError`` (an S3 XML error) without forwarding;
* ``"503"``: answers ``503 SlowDown`` without forwarding;
* ``"throttle"``: answers ``503 SlowDown`` to that request and every later one;
* ``"reset"``: resets the client's connection (``SO_LINGER`` 0: a TCP RST)
  without forwarding;
* ``"lost"``: forwards (the request takes effect upstream), then resets the
  client's connection instead of relaying the response;
* ``"slow"``: forwards, then holds the response for ``delay`` seconds.

With ``every=True`` the fault applies to the ``at``-th request and every later
one (``"throttle"`` always does). ``where`` restricts which requests count
(``where(method, path)``). Every request is logged as an :class:`Exchange`, so
a test can see what the client sent, and how often. Standard library only.

A :class:`Gate` holds requests until several are in flight together: a
test that passes only if a client sends them concurrently.

A :class:`Quirk` makes the upstream behave like another S3 server: answer
some requests with an error of its own (OpenStack Swift's s3api answers 501 to
a conditional ``PUT``, LocalStack to a conditional ``DELETE``), or forward
them without a header (s3rver ignores ``If-None-Match``).
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

FAULTS = ("500", "503", "throttle", "reset", "lost", "slow")

#: Headers that describe one hop, not the message: never forwarded as they are.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "content-length",
}

_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "throttle": (503, "SlowDown", "Please reduce your request rate."),
}


@dataclass(frozen=True)
class Exchange:
    """One request the proxy received and what became of it."""

    number: int  #: 1-based, counted from arming (0: not counted, ``where`` said no)
    method: str
    path: str
    #: The status the client received; ``None`` if its connection was reset.
    status: int | None
    #: The fault injected into this request, if any.
    fault: str | None
    #: botocore's ``amz-sdk-invocation-id``: the same on every retry of one call.
    invocation: str
    #: botocore's attempt number of that call (``amz-sdk-request: attempt=N``), 0 if unknown.
    attempt: int
    #: Whether the request reached the upstream server (and so may have taken effect).
    forwarded: bool
    #: Its ``If-None-Match`` / ``If-Match`` header (``"If-None-Match: *"``), or ``""``.
    condition: str


@dataclass(frozen=True)
class Quirk:
    """How requests that ``match(method, headers)`` are treated instead of forwarded as sent."""

    match: Callable[[str, dict[str, str]], bool]
    #: ``(status, code, message)`` answered without forwarding, or ``None``.
    answer: tuple[int, str, str] | None = None
    #: Headers dropped before forwarding.
    drop: frozenset[str] = frozenset()
    #: Only requests for which ``where(method, path)`` holds (all if ``None``).
    where: Callable[[str, str], bool] | None = None


class Gate:
    """Holds the first requests that ``match(method, path, headers)`` until
    ``width`` different paths are in flight together (or ``timeout`` seconds
    passed), then lets every request through; records the most different
    paths in flight at once (an SDK's retry of a held request is one path).

    Requests sent one after another never overlap: the first waits out the
    timeout alone, the gate then opens, and ``most_in_flight`` stays 1.
    """

    def __init__(
        self,
        match: Callable[[str, str, dict[str, str]], bool],
        width: int = 2,
        timeout: float = 10.0,
    ) -> None:
        self.match, self.width, self.timeout = match, width, timeout
        self.most_in_flight = 0
        self._in_flight: dict[str, int] = {}
        self._open = False
        self._changed = threading.Condition()

    def enter(self, path: str) -> None:
        with self._changed:
            self._in_flight[path] = self._in_flight.get(path, 0) + 1
            self.most_in_flight = max(self.most_in_flight, len(self._in_flight))
            self._open = self._open or len(self._in_flight) >= self.width
            self._changed.notify_all()
            if not self._changed.wait_for(lambda: self._open, self.timeout):
                # Given up: requests sent one after another cost one timeout,
                # not one each.
                self._open = True
                self._changed.notify_all()

    def leave(self, path: str) -> None:
        with self._changed:
            self._in_flight[path] -= 1
            if not self._in_flight[path]:
                del self._in_flight[path]


@dataclass(frozen=True)
class Plan:
    """What to do, from which counted request on, to which requests."""

    fault: str
    at: int
    delay: float
    every: bool
    where: Callable[[str, str], bool] | None


class FaultProxy:
    """A forwarding proxy to ``upstream`` (``http://host:port``); a context manager."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        assert parts.scheme == "http" and parts.hostname and parts.port, upstream
        self.upstream = (parts.hostname, parts.port)
        self.exchanges: list[Exchange] = []
        self.quirk: Quirk | None = None
        self.gate: Gate | None = None
        self._plan: Plan | None = None
        self._count = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> FaultProxy:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        server, thread = self._server, self._thread
        assert server is not None and thread is not None
        server.shutdown()
        server.server_close()
        thread.join()
        server.close_all()

    @property
    def endpoint(self) -> str:
        """The URL clients use instead of the upstream's."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ----------------------------------------------------------------- plan
    def arm(
        self,
        fault: str | None,
        at: int = 1,
        *,
        delay: float = 0.3,
        every: bool = False,
        where: Callable[[str, str], bool] | None = None,
    ) -> None:
        """Start counting (and logging) afresh; inject ``fault`` at request ``at``.

        ``fault=None`` only counts: the dry run of a scenario.
        """
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        assert at >= 1
        with self._lock:
            self._count = 0
            self.exchanges = []
            self._plan = (
                None
                if fault is None
                else Plan(fault, at, delay, every or fault == "throttle", where)
            )

    def disarm(self) -> None:
        """Forward everything from now on (the log and count go on)."""
        with self._lock:
            self._plan = None

    @property
    def count(self) -> int:
        """Requests counted since arming."""
        with self._lock:
            return self._count

    def _decide(self, method: str, path: str) -> tuple[int, Plan | None]:
        """Count a request; return its number and the plan if it is faulted."""
        with self._lock:
            plan = self._plan
            if plan is not None and plan.where is not None and not plan.where(method, path):
                return 0, None
            self._count += 1
            number = self._count
        if plan is None or number < plan.at or (number > plan.at and not plan.every):
            return number, None
        return number, plan

    def _log(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    #: socketserver listens with a backlog of 5: a batch opens up to 32
    #: connections at once, and on a busy machine the overflow waited out SYN
    #: retransmits past s3fs's 5 s connect timeout ("Could not connect").
    request_queue_size = 128
    proxy: FaultProxy

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live: set[socket.socket] = set()
        self.live_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stalls
        with self.live_lock:
            self.live.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.live_lock:
            self.live.discard(request)
        super().shutdown_request(request)

    def close_all(self) -> None:
        """Close every client connection still open (idle keep-alive ones)."""
        with self.live_lock:
            live, self.live = list(self.live), set()
        for sock in live:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        """The request body, de-chunked if it came with ``Transfer-Encoding: chunked``."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self) -> None:
        proxy = self.server.proxy
        body = self._body()
        number, plan = proxy._decide(self.command, self.path)
        fault = plan.fault if plan is not None else None
        sdk = self.headers.get("amz-sdk-request", "")
        attempt = int(sdk.split("attempt=")[1].split(";")[0]) if "attempt=" in sdk else 0

        invocation = self.headers.get("amz-sdk-invocation-id", "")
        condition = next(
            (f"{h}: {self.headers[h]}" for h in ("If-None-Match", "If-Match") if h in self.headers),
            "",
        )

        def log(status: int | None, forwarded: bool) -> None:
            exchange = Exchange(
                number, self.command, self.path, status, fault, invocation, attempt, forwarded,
                condition,
            )  # fmt: skip
            proxy._log(exchange)

        quirk = proxy.quirk
        if quirk is not None and not (
            quirk.match(self.command, dict(self.headers.items()))
            and (quirk.where is None or quirk.where(self.command, self.path))
        ):
            quirk = None
        answer = _ERRORS.get(fault or "", quirk.answer if quirk is not None else None)
        if answer is not None:
            status, code, message = answer
            log(status, False)
            self._answer_error(status, code, message)
            return
        if fault == "reset":
            log(None, False)
            self._reset()
            return
        gate = proxy.gate
        if gate is not None and not gate.match(self.command, self.path, dict(self.headers.items())):
            gate = None
        if gate is not None:
            gate.enter(self.path)
        try:
            status, reason, headers, data = self._forward(
                body, quirk.drop if quirk else frozenset()
            )
        finally:
            if gate is not None:
                gate.leave(self.path)
        if fault == "lost":
            log(None, True)
            self._reset()
            return
        if fault == "slow":
            assert plan is not None
            time.sleep(plan.delay)
        log(status, True)
        self.send_response_only(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if self.command == "HEAD":  # the object's length, with no body
            length = next((v for n, v in headers if n.lower() == "content-length"), None)
            if length is not None:
                self.send_header("Content-Length", length)
        elif status not in (204, 304) and not 100 <= status < 200:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

    def _forward(
        self, body: bytes, drop: frozenset[str]
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() not in drop
        }
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        host, port = self.server.proxy.upstream
        upstream = http.client.HTTPConnection(host, port, timeout=60)
        try:
            upstream.connect()
            assert upstream.sock is not None
            upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            return response.status, response.reason, response.getheaders(), data
        finally:
            upstream.close()

    def _answer_error(self, status: int, code: str, message: str) -> None:
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<Resource>{self.path.split('?')[0]}</Resource>"
            "<RequestId>fault-proxy</RequestId></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(xml)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(xml)

    def _reset(self) -> None:
        """Abort the connection: RST, not FIN, and nothing of a response."""
        self.close_connection = True
        sock = self.connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # (the writer holds no reference of its own)
        sock.close()  # the last reference: the kernel sends RST
