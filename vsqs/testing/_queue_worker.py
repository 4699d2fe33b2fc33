"""Part of :class:`~vsqs.testing.QueueTests`:
The worker helper, and bad input through the whole API.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import vsqs
from vsqs import _names as names

from ._suite import listing


class WorkerTests:
    """The worker helper, and bad input through the whole API."""

    # ---------------------------------------------------------------- worker
    def test_consume_deletes_on_success_and_releases_on_error(self, live: vsqs.Queue) -> None:
        live.send_batch([b"ok", b"fail-once", b"ok2"])
        attempts: dict[bytes, int] = {}

        def handler(msg: vsqs.Message) -> None:
            attempts[msg.body] = attempts.get(msg.body, 0) + 1
            if msg.body == b"fail-once" and msg.receive_count == 1:
                raise RuntimeError("boom")

        assert live.consume(handler, idle_timeout=0.5) == 3
        assert attempts == {b"ok": 1, b"fail-once": 2, b"ok2": 1}
        stats = live.stats()
        assert (stats.ready, stats.in_flight) == (0, 0)

    def test_consume_heartbeat_keeps_a_slow_message_hidden(
        self, live: vsqs.Queue, store: vsqs.Store
    ) -> None:
        live.send(b"slow")
        stolen: list[vsqs.Message] = []

        def handler(msg: vsqs.Message) -> None:
            with vsqs.Queue(store) as other:
                deadline = time.monotonic() + 1.2  # four visibility timeouts
                while time.monotonic() < deadline:
                    got = other.receive(wait=0.1)
                    if got is not None:
                        stolen.append(got)

        assert live.consume(handler, visibility_timeout=0.3, max_messages=1) == 1
        assert stolen == []
        assert live.stats().in_flight == 0 and live.receive() is None

    def test_consume_stops_on_event(self, live: vsqs.Queue) -> None:
        stop = threading.Event()
        stop.set()
        live.send(b"x")
        assert live.consume(lambda m: None, stop=stop) == 0
        assert live.stats().ready == 1

    # -------------------------------------------------------------- bad input
    @pytest.mark.parametrize(
        "receipt",
        [
            "..",
            "../x",
            "/etc/passwd",
            "a/b",
            "",
            names.CONFIG_NAME,
            "1750000000000-0000-0123456789abcdef",  # a ready name is no receipt
            "1750000000000-0000-0123456789abcdef.new",
            "1750000000000-0000-0123456789abcdef.1750000000000.0",  # never received
            "1750000000000-0000-0123456789abcdef.1750000000000.1/../x",
            "1750000000000-0000-0123456789ABCDEF.1750000000000.1",
            123,
            None,
            b"1750000000000-0000-0123456789abcdef.1750000000000.1",
        ],
    )
    def test_invalid_receipts_are_refused_before_storage(
        self, q: vsqs.Queue, store: vsqs.Store, receipt: object
    ) -> None:
        q.send(b"x")
        before = listing(store)
        operations: list[Callable[[Any], object]] = [q.delete, lambda r: q.extend(r, 5), q.release]
        for operation in operations:
            with pytest.raises(vsqs.InvalidReceipt):
                operation(receipt)
        assert listing(store) == before

    @pytest.mark.parametrize("tampered", ["../x", "/etc/passwd", "vsqs.json", 7])
    def test_a_tampered_message_receipt_is_refused(
        self, q: vsqs.Queue, store: vsqs.Store, tampered: object
    ) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        before = listing(store)
        msg.receipt = tampered  # type: ignore[assignment]
        for operation in (msg.delete, lambda: msg.extend(5), msg.release):
            with pytest.raises(vsqs.InvalidReceipt):
                operation()
        assert listing(store) == before

    @pytest.mark.parametrize("body", [None, 1, 1.5, ["a"], {"a": 1}, object()])
    def test_non_bytes_bodies_are_refused(
        self, q: vsqs.Queue, store: vsqs.Store, body: object
    ) -> None:
        before = listing(store)
        with pytest.raises(vsqs.InvalidBody):
            q.send(body)  # type: ignore[arg-type]
        with pytest.raises(vsqs.InvalidBody):
            q.send_batch([b"fine", body])  # type: ignore[list-item]
        assert listing(store) == before

    @pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, "5", True, None, 10**12])
    def test_bad_durations_are_refused(
        self, q: vsqs.Queue, store: vsqs.Store, value: object
    ) -> None:
        q.send(b"x")
        msg = q.receive()
        assert msg is not None
        before = listing(store)
        calls: list[Callable[[], object]] = [
            lambda: q.send(b"y", delay=value),  # type: ignore[arg-type]
            lambda: q.receive(visibility_timeout=value),  # type: ignore[arg-type]
            lambda: q.receive(wait=value),  # type: ignore[arg-type]
            lambda: msg.extend(value),  # type: ignore[arg-type]
            lambda: msg.release(delay=value),  # type: ignore[arg-type]
        ]
        for call in calls:
            if value is None and call is calls[1]:
                continue  # visibility_timeout=None means the queue default
            with pytest.raises(vsqs.InvalidArgument):
                call()
        assert listing(store) == before

    @pytest.mark.parametrize("count", [0, -1, True, 1.0, "3"])
    def test_bad_counts_are_refused(self, q: vsqs.Queue, count: object) -> None:
        with pytest.raises(vsqs.InvalidArgument):
            q.receive_batch(count)  # type: ignore[arg-type]
        with pytest.raises(vsqs.InvalidArgument):
            q.peek(count)  # type: ignore[arg-type]

    @pytest.mark.parametrize("name", ["..", "a/b", "/abs", "", ".hidden", "x" * 200, 5])
    def test_bad_dead_letter_names_are_refused(self, store: vsqs.Store, name: object) -> None:
        with pytest.raises(vsqs.InvalidQueueName):
            store.sibling(name)  # type: ignore[arg-type]

    def test_message_of_another_queue_is_refused(self, q: vsqs.Queue, store: vsqs.Store) -> None:
        with vsqs.Queue(store.sibling("other")) as other:
            other.send(b"x")
            msg = other.receive()
            assert msg is not None
            with pytest.raises(vsqs.InvalidArgument):
                q.delete(msg)
            msg.delete()
