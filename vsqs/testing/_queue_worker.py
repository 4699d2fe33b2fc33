"""Part of :class:`~vsqs.testing.QueueTests`:
The worker helper, and bad input through the whole API.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import vsqs
from vsqs import _names as names

from ._clock import FakeClock
from ._suite import listing


def always_fails(attempts: list[int]) -> Callable[[vsqs.Message], None]:
    """A handler that records each message's receive count and raises."""

    def handler(msg: vsqs.Message) -> None:
        attempts.append(msg.receive_count)
        raise RuntimeError(f"cannot handle {msg.body!r}")

    return handler


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

        # Four receives: the three messages and the retry (no idle timeout to race).
        assert live.consume(handler, max_messages=4, retry_delay=0.01) == 3
        assert attempts == {b"ok": 1, b"fail-once": 2, b"ok2": 1}
        stats = live.stats()
        assert (stats.ready, stats.in_flight) == (0, 0)

    def test_consume_heartbeat_keeps_a_slow_message_hidden(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """The clock moves on by more than two visibility timeouts while the
        handler runs, in steps shorter than one, each after the heartbeat's
        next extension and never past the expiry it set: no other client
        receives the message. (Without the heartbeat there is no extension
        to wait for.)"""
        vt = 0.3
        place = store.sibling("heartbeat")
        with vsqs.Queue(place, clock=clock) as q, vsqs.Queue(place, clock=clock) as other:
            q.send(b"slow")
            stolen: list[vsqs.Message] = []

            def handler(msg: vsqs.Message) -> None:
                start = clock.now
                while clock.now < start + 2.2 * vt:
                    receipt = msg.receipt
                    deadline = time.monotonic() + 60
                    while msg.receipt == receipt:  # extended in place by the heartbeat
                        assert time.monotonic() < deadline, "the heartbeat never extended it"
                        time.sleep(0.01)
                    # Up to 0.4 vt before the new expiry: an extension that read the
                    # clock before the previous step (a slow store) set an earlier one.
                    assert msg.visible_at is not None
                    expiry = msg.visible_at.timestamp()
                    clock.advance(max(0.0, expiry - 0.4 * vt - clock.now))
                    got = other.receive()
                    if got is not None:
                        stolen.append(got)

            assert q.consume(handler, visibility_timeout=vt, max_messages=1) == 1
            assert stolen == []
            assert q.stats().in_flight == 0 and q.receive() is None

    def test_a_failing_message_is_retried_after_an_exponential_backoff(
        self, store: vsqs.Store, clock: FakeClock
    ) -> None:
        """Queue defaults from its config, overridden per call; "equal jitter"."""
        with vsqs.Queue(
            store.sibling("backoff"), clock=clock, retry_delay=2, max_retry_delay=16
        ) as q:
            q.send(b"bad")
            attempts: list[int] = []
            half = lambda: 0.5  # noqa: E731 - the jitter source: a delay of 3/4 of each step
            per_call = {"retry_delay": 0.1, "max_retry_delay": 0.1}
            # 3/4 of 2, 4, 8, then of the cap 16; then 3/4 of the per-call 0.1.
            rounds: list[tuple[float, dict[str, Any]]] = [
                (1.5, {}),
                (3, {}),
                (6, {}),
                (12, {}),
                (12, {}),
                (0.075, per_call),
            ]
            for delay, overrides in rounds:
                assert [m.body for m in q.peek()] == [b"bad"]
                handler = always_fails(attempts)
                assert q.consume(handler, max_messages=1, jitter=half, **overrides) == 0
                clock.advance(delay - 0.01)
                assert q.peek() == [], f"retried sooner than {delay} s"
                clock.advance(0.02)
            assert attempts == [1, 2, 3, 4, 5, 6]

    def test_a_failing_message_logs_its_traceback_once(
        self, live: vsqs.Queue, caplog: pytest.LogCaptureFixture
    ) -> None:
        live.send(b"bad")
        attempts: list[int] = []
        with caplog.at_level(logging.ERROR, logger="vsqs"):
            done = live.consume(
                always_fails(attempts), max_messages=3, retry_delay=0.01, max_retry_delay=0.02
            )
        assert done == 0 and attempts == [1, 2, 3]
        failed = [r for r in caplog.records if "handler failed" in r.getMessage()]
        assert [r.exc_info is not None for r in failed] == [True, False, False]
        counts = [n for n in (1, 2, 3) if f"(receive {n})" in failed[n - 1].getMessage()]
        assert counts == [1, 2, 3] and "RuntimeError" in failed[2].getMessage()

    def test_idle_time_is_time_without_a_success(self, q: vsqs.Queue, clock: FakeClock) -> None:
        """A success restarts the idle clock (the queue's); a failure does not."""
        q.send_batch([b"good", b"bad"])
        seen: list[bytes] = []

        def handler(msg: vsqs.Message) -> None:
            seen.append(msg.body)
            clock.advance(10)
            if msg.body == b"bad":
                raise RuntimeError("bad")

        assert q.consume(handler, idle_timeout=5, max_messages=4, retry_delay=0.01) == 1
        assert seen == [b"good", b"bad"]

    def test_a_queue_holding_only_a_failing_message_ends_an_idle_consume(
        self, live: vsqs.Queue
    ) -> None:
        live.send(b"bad")
        attempts: list[int] = []
        # Each retry waits at least half of 0.01 s doubled per receive, so an
        # eighth attempt would come after 0.635 s: past the idle timeout.
        done = live.consume(
            always_fails(attempts), idle_timeout=0.5, retry_delay=0.01, max_messages=50
        )
        assert done == 0 and 1 <= len(attempts) <= 7, attempts

    @pytest.mark.parametrize("interruption", [KeyboardInterrupt, SystemExit])
    def test_an_interrupted_consume_releases_the_message_in_hand_at_once(
        self,
        live: vsqs.Queue,
        caplog: pytest.LogCaptureFixture,
        interruption: type[BaseException],
    ) -> None:
        live.send_batch([b"done", b"interrupted"])

        def handler(msg: vsqs.Message) -> None:
            if msg.body == b"interrupted":
                raise interruption()

        with caplog.at_level(logging.WARNING, logger="vsqs"), pytest.raises(interruption):
            live.consume(handler)
        again = live.receive()  # long before the visibility timeout (30 s)
        assert again is not None and (again.body, again.receive_count) == (b"interrupted", 2)
        assert [r.getMessage() for r in caplog.records if "stopped by" in r.getMessage()] == [
            f"{live.url}: consume stopped by {interruption.__name__}: handled 1 (1 succeeded), "
            "released 1 in hand (visible again now)"
        ]

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

    @pytest.mark.parametrize(
        "retry",
        [
            {"retry_delay": 0},
            {"retry_delay": 0.001},
            {"retry_delay": "1"},
            {"max_retry_delay": math.inf},
            {"retry_delay": 5, "max_retry_delay": 2},
        ],
    )
    def test_bad_retry_delays_are_refused(
        self, q: vsqs.Queue, store: vsqs.Store, retry: dict[str, Any]
    ) -> None:
        q.send(b"x")
        before = listing(store)
        with pytest.raises(vsqs.InvalidArgument):
            q.consume(lambda m: None, **retry)
        assert listing(store) == before
        with pytest.raises(vsqs.InvalidArgument):
            vsqs.Queue(store.sibling("retry"), **retry)

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
