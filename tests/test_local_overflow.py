"""An ``inotify`` overflow read in the middle of a listing that trusts the feed.

A receiver with a feed lists without the 50 ms second look (``YOUNG_MS``):
every name created during the listing is reported by the feed, so one the
listing missed is found in the feed's events. A directory listing may show a
producer's newer message and miss its older one, both published while it
ran (POSIX leaves entries created during ``readdir`` unspecified); if the
feed's queue overflowed meanwhile, those events are lost too, and the newer
message was claimed first. Here a real producer publishes during a real
listing of a real directory, and the store passes on what the kernel may do:
a listing that misses the older name, and an overflow (``IN_Q_OVERFLOW``)
read right after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import vsqs
from vsqs.testing import FakeClock


class RacingStore(vsqs.LocalStore):
    """A real local store whose next listing runs while a producer publishes
    two messages, misses the first, and whose feed then overflows."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.producer: vsqs.Queue | None = None
        self.published: list[str] = []
        self.overflow = False

    def list(self, *, prefix: str = "", settle: bool = False) -> Iterator[str]:
        producer, self.producer = self.producer, None
        if producer is None:
            return super().list(prefix=prefix)
        listed = list(super().list(prefix=prefix))  # the listing starts...
        self.published = producer.send_batch([b"older", b"newer"])
        listed.append(self.published[1])  # ...and sees the newer one only
        self.overflow = True
        return iter(listed)

    def changes(self, name_length: int) -> list[tuple[str, bool]] | None:
        changed = super().changes(name_length)
        if self.overflow:
            self.overflow = False
            return None  # IN_Q_OVERFLOW: the events of both are lost
        return changed


def test_an_overflow_during_a_listing_that_trusted_the_feed_keeps_fifo(tmp_path: Path) -> None:
    clock = FakeClock()
    store = RacingStore(str(tmp_path / "q"))
    with (
        vsqs.Queue(store, clock=clock) as consumer,
        vsqs.Queue(tmp_path / "q", clock=clock) as producer,
    ):
        assert consumer.receive() is None  # the first listing
        producer.send(b"wake")
        clock.advance(1)  # the next receive lists again, with the feed
        msg = consumer.receive()
        assert msg is not None and msg.body == b"wake"
        msg.delete()
        assert store._feed is not None  # type: ignore[attr-defined]
        store.producer = producer
        clock.advance(1)  # STALE_AFTER: a listing trusted to the feed is due
        got = consumer.receive_batch(10)
        assert [m.body for m in got] == [b"older", b"newer"]
        assert [m.id for m in got] == store.published
