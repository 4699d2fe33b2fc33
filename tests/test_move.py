"""``vsqs.move`` and ``vsqs.aio.move``: the library's move between any two
queues (``vsqs move`` runs the same loop: tests/test_cli_move.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import vsqs
import vsqs.aio
from vsqs._move import move_between

from .support.servers import Server


def bodies(queue: vsqs.Queue) -> list[str]:
    """The bodies of the visible messages, in order (changing nothing)."""
    return [m.body.decode() for m in queue.peek(1_000_000)]


def held(queue: vsqs.Queue) -> int:
    return queue.stats().in_flight


def test_move_moves_every_visible_message_in_order_and_reports_its_progress(
    tmp_path: Path,
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    sent = [f"job {i}" for i in range(25)]
    with vsqs.Queue(src) as queue:
        queue.send_batch(sent)
        queue.send("later", delay=600)  # not visible: stays
    seen: list[tuple[int, int | None]] = []
    assert vsqs.move(src, dst, batch_size=10, progress=lambda *a: seen.append(a)) == 25
    assert seen == [(10, None), (20, None), (25, None)]
    with vsqs.Queue(src, create=False) as s, vsqs.Queue(dst, create=False) as d:
        assert bodies(d) == sent and bodies(s) == []
        assert (s.stats().delayed, held(s)) == (1, 0)
        assert [m.receive_count for m in d.peek(100)] == [0] * 25


def test_move_stops_after_max_messages_and_a_second_move_resumes(tmp_path: Path) -> None:
    sent = [f"job {i}" for i in range(12)]
    with vsqs.Queue(tmp_path / "src") as src, vsqs.Queue(tmp_path / "dst") as dst:
        src.send_batch(sent)
        seen: list[tuple[int, int | None]] = []
        moved = vsqs.move(
            src, dst, max_messages=5, batch_size=2, progress=lambda *a: seen.append(a)
        )
        assert moved == 5 and seen == [(2, 5), (4, 5), (5, 5)]
        assert bodies(dst) == sent[:5] and bodies(src) == sent[5:]
        assert vsqs.move(src, dst) == 7
        assert bodies(dst) == sent and held(src) == 0
        src.send("still open")  # open queues passed in are left open
        assert dst.stats().ready == 12


def test_move_into_a_missing_destination_creates_it_unless_told_not_to(tmp_path: Path) -> None:
    src = tmp_path / "src"
    vsqs.Queue(src).send("a")
    with pytest.raises(vsqs.QueueNotFound):
        vsqs.move(src, tmp_path / "none", create=False)
    assert not (tmp_path / "none").exists()
    with pytest.raises(vsqs.QueueNotFound):
        vsqs.move(tmp_path / "missing", tmp_path / "dst")
    assert vsqs.move(src, tmp_path / "dst") == 1


def test_a_move_into_itself_under_any_spelling_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    vsqs.Queue(src).send_batch(["a", "b"])
    (tmp_path / "alias").symlink_to(src)
    for same in (src, tmp_path / "alias", f"file://{src}"):
        with pytest.raises(vsqs.InvalidArgument, match="into itself"):
            vsqs.move(src, same)
    with vsqs.Queue(src, create=False) as queue:
        assert bodies(queue) == ["a", "b"] and held(queue) == 0


def test_a_message_too_large_for_the_destination_stays_and_the_ones_before_it_move(
    tmp_path: Path,
) -> None:
    with (
        vsqs.Queue(tmp_path / "src") as src,
        vsqs.Queue(tmp_path / "dst", max_message_size=100) as dst,
    ):
        ids = src.send_batch(["a", "b", "c" * 200, "d"])
        with pytest.raises(vsqs.MessageTooLarge, match=f"message {ids[2]} of {src.url} is 200"):
            vsqs.move(src, dst)
        assert bodies(dst) == ["a", "b"] and bodies(src) == ["c" * 200, "d"]
        assert held(src) == 0


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_a_move_refuses_a_count_that_is_not_a_positive_int_before_opening_anything(
    tmp_path: Path, bad: object
) -> None:
    for option in ("max_messages", "batch_size"):
        with pytest.raises(vsqs.InvalidArgument, match=option):
            vsqs.move(tmp_path / "src", tmp_path / "dst", **{option: bad})  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_stopped_move_gives_back_the_batch_it_received_and_says_how_many_moved(
    tmp_path: Path,
) -> None:
    """``stop`` (the CLI's Ctrl-C) is set while the second batch is received:
    it is released at once, and the first batch's count is returned."""
    sent = [f"job {i}" for i in range(9)]
    stop = threading.Event()
    with vsqs.Queue(tmp_path / "src") as src, vsqs.Queue(tmp_path / "dst") as dst:
        src.send_batch(sent)
        receive = src.receive_batch

        def receive_then_stop(*args: object, **kwargs: object) -> list[vsqs.Message]:
            got = receive(*args, **kwargs)  # type: ignore[arg-type]
            if dst.stats().ready:  # the first batch arrived: this is the second
                stop.set()
            return got

        src.receive_batch = receive_then_stop  # type: ignore[method-assign]
        moved = move_between(
            src, dst, max_messages=None, batch_size=3, visibility_timeout=None, stop=stop
        )
        assert moved == 3 and bodies(dst) == sent[:3]
        assert bodies(src) == sent[3:] and held(src) == 0
        # the second batch was received once and given back; the third never received
        assert [m.receive_count for m in src.peek(10)] == [1, 1, 1, 0, 0, 0]


def test_move_from_a_local_queue_to_s3_gives_the_storage_options_to_s3(
    tmp_path: Path, s3_server: Server
) -> None:
    src, dst = tmp_path / "src", s3_server.url("moved-by-library")
    sent = [f"job {i}" for i in range(30)]
    vsqs.Queue(src).send_batch(sent)
    options = s3_server.storage_options
    assert vsqs.move(src, dst, storage_options=options) == 30
    assert vsqs.move(dst, src, storage_options=options, max_messages=10) == 10
    with vsqs.Queue(dst, create=False, storage_options=options) as d:
        assert bodies(d) == sent[10:]
    with vsqs.Queue(src, create=False) as s:
        assert bodies(s) == sent[:10]


def test_the_asyncio_move_is_vsqs_move_on_a_worker_thread(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    sent = [f"job {i}" for i in range(7)]
    vsqs.Queue(src).send_batch(sent)

    async def main() -> tuple[int, list[tuple[int, int | None]]]:
        seen: list[tuple[int, int | None]] = []
        moved = await vsqs.aio.move(src, dst, batch_size=3, progress=lambda *a: seen.append(a))
        with pytest.raises(vsqs.InvalidArgument, match="into itself"):
            await vsqs.aio.move(dst, dst)
        return moved, seen

    assert asyncio.run(main()) == (7, [(3, None), (6, None), (7, None)])
    with vsqs.Queue(dst, create=False) as d:
        assert bodies(d) == sent
