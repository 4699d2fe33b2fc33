"""``consume``'s heartbeat on a store slower than a third of the visibility timeout."""

from __future__ import annotations

import threading
import time

import vsqs
from vsqs import _names as names

#: Each extend takes longer than the heartbeat's interval (a third of VT).
VT, EXTEND_TAKES = 0.3, 0.15


class SlowExtends(vsqs.MemoryStore):
    """A ``MemoryStore`` whose moves of a held name to a later one (extends)
    take EXTEND_TAKES seconds; it counts them."""

    extends = 0

    def rename(self, src: str, dst: str) -> None:
        held, later = names.parse(src), names.parse(dst)
        if held and later and held.expiry_ms is not None and later.expiry_ms is not None:
            self.extends += 1
            time.sleep(EXTEND_TAKES)
        super().rename(src, dst)


def test_a_handler_that_returns_is_settled_while_extends_run_back_to_back() -> None:
    """Before: the heartbeat thread kept its lock from one round of extends
    to the next when a round outlasted its interval, and ``consume`` waited
    for it for ever once the handler returned (seen on S3 at load 15)."""
    store = SlowExtends()
    queue = vsqs.Queue(store)
    queue.send(b"slow to handle")

    def handler(message: vsqs.Message) -> None:
        # Long enough for the extends to run back to back.
        while store.extends < 3:
            time.sleep(0.01)

    done: list[int] = []
    worker = threading.Thread(
        target=lambda: done.append(queue.consume(handler, visibility_timeout=VT, max_messages=1)),
        daemon=True,
    )
    worker.start()
    worker.join(120)  # a round takes EXTEND_TAKES: this is a hang, not a slow machine
    assert done == [1], "consume did not return after its handler did"
    assert queue.stats().ready == queue.stats().in_flight == 0
