"""Large and odd message bodies: every byte survives every backend, and big ones are not copied.

What this tries to break, and how:

* **Odd bytes.** Empty bodies (``b""`` and ``""``), all-zero bodies, 0x00 at
  both ends and in the middle, every byte value, bytes that are not UTF-8,
  non-ASCII ``str``, ``bytearray`` and ``memoryview`` bodies (sliced, strided,
  typed), and sizes at the local store's read-chunk edge (64 KiB - 1, 64 KiB,
  64 KiB + 1). A store that handles bodies as text, stops at a NUL or reads a
  chunk boundary wrongly loses or changes bytes. Each body must come back byte
  for byte through ``send``, ``send_batch``, ``receive``, ``receive_batch``
  and ``peek``, with its id and ``sent_at`` untouched, on a local directory
  (durable and not), ``MemoryStore``, ``memory://`` and S3 (a real moto
  server): one parametrised ``queue`` fixture.
* **Bodies that are not bytes.** A ``str`` with a lone surrogate has no UTF-8
  form: it must be refused as ``vsqs.InvalidBody`` before anything is written.
* **Copies.** A 100 MB random body sent and received on a local directory
  (durable and not) must round-trip exactly (sha256) and never be held twice:
  ``tracemalloc``, started once the body exists, measures the peak extra
  allocation of ``send`` (no copy: < 10 % of the body), ``receive`` and
  ``peek`` (one copy: < 1.2x); a child process checks ``receive`` again with
  ``ru_maxrss``, which sees every allocator. ``MemoryStore``, ``memory://``
  and S3 get the same measurement; the object stores' bounds are what their
  client libraries cost today (see each test). The local read's fallbacks
  (a file longer or shorter than ``fstat`` said) run on real files.

The 100 MB tests are marked ``slow`` (still part of the default run).
"""

from __future__ import annotations

import array
import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names
from vsqs._message import Body
from vsqs.stores._local import _READ_CHUNK, _read_whole
from vsqs.testing import FakeClock

from .support.backends import select, send_modes
from .support.servers import Server

MB = 1 << 20
BIG = 100 * MB

#: ``(id, body)``: every odd body, each sent on its own and in one batch.
ODD_BODIES: list[tuple[str, Body]] = [
    ("empty-bytes", b""),
    ("empty-str", ""),
    ("one-nul", b"\x00"),
    ("all-nul", bytes(1000)),
    ("nul-at-ends-and-middle", b"\x00head\x00\x00middle\x00tail\x00"),
    ("every-byte-value", bytes(range(256))),
    ("every-byte-value-descending", bytes(range(255, -1, -1)) * 3),
    ("not-utf8", b"\xff\xfe\x80"),
    ("not-utf8-truncated-sequence", b"caf\xc3"),
    ("crlf-and-ctrl", b"\r\n\r\n\x1a\x04\x7f"),
    ("str-non-ascii", "h\u00e9llo \u4e16\u754c \U0001f600 \u200b\u0000 end"),
    ("bytearray", bytearray(b"\x00\xff\x80 bytearray \x00")),
    ("memoryview", memoryview(b"\x00\xfe memoryview \x00")),
    ("memoryview-slice", memoryview(bytes(range(256)))[100:140]),
    ("memoryview-strided", memoryview(bytes(range(256)))[::3]),
    ("memoryview-typed", memoryview(array.array("i", [-1, 0, 1, 2**31 - 1]))),
    ("chunk-minus-one-nul", bytes(_READ_CHUNK - 1)),
    ("chunk-exact", b"\xff" * _READ_CHUNK),
    ("chunk-plus-one", bytes(range(256)) * (_READ_CHUNK // 256) + b"\x00"),
    ("four-chunks-random", random.Random(7).randbytes(4 * _READ_CHUNK + 3)),
]


def expected_bytes(body: Body) -> bytes:
    """What a receiver must get: the UTF-8 of a ``str``, the raw bytes of anything else."""
    return body.encode() if isinstance(body, str) else bytes(body)


@pytest.fixture(params=send_modes(select(sweeps=True, variants=False)))
def queue(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[vsqs.Queue]:
    """A fresh, empty queue of every store (local with durable and other sends), on a fake clock."""
    backend, durable = request.param
    place = backend.place(request, tmp_path)
    try:
        with place.queue(clock=clock, durable=durable, visibility_timeout=30) as q:
            yield q
    finally:
        place.close()


def sent_at(clock: FakeClock) -> datetime:
    """``Message.sent_at`` of a message sent at the fake clock's time (whole ms)."""
    return datetime.fromtimestamp(int(clock.now * 1000) / 1000, UTC)


# ------------------------------------------------------------ odd bodies
def test_odd_bodies_come_back_byte_for_byte_through_send_peek_and_receive(
    queue: vsqs.Queue, clock: FakeClock
) -> None:
    """Each body, sent on its own, is peeked and received as exactly its bytes,
    under the id ``send`` returned, in send order, with ``sent_at`` the send time."""
    ids = [queue.send(body) for _, body in ODD_BODIES]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)

    peeked = queue.peek(len(ODD_BODIES))
    assert [m.id for m in peeked] == ids
    for (label, body), msg in zip(ODD_BODIES, peeked, strict=True):
        assert type(msg.body) is bytes and msg.body == expected_bytes(body), label
        assert msg.receipt is None and msg.receive_count == 0, label

    for (label, body), message_id in zip(ODD_BODIES, ids, strict=True):
        msg = queue.receive()
        assert msg is not None, label
        assert msg.id == message_id, label
        assert type(msg.body) is bytes and msg.body == expected_bytes(body), label
        assert msg.sent_at == sent_at(clock) and msg.receive_count == 1, label
        msg.delete()
    assert queue.receive() is None


def test_odd_bodies_come_back_byte_for_byte_through_send_batch_and_receive_batch(
    queue: vsqs.Queue, clock: FakeClock
) -> None:
    """One batch of every body (a generator) comes back in order, byte for byte."""
    ids = queue.send_batch(body for _, body in ODD_BODIES)
    assert len(ids) == len(ODD_BODIES) and ids == sorted(ids) and len(set(ids)) == len(ids)
    got: list[vsqs.Message] = []
    while batch := queue.receive_batch(7):
        got += batch
    assert [m.id for m in got] == ids
    for (label, body), msg in zip(ODD_BODIES, got, strict=True):
        assert type(msg.body) is bytes and msg.body == expected_bytes(body), label
        assert msg.sent_at == sent_at(clock), label
        msg.delete()
    assert queue.peek() == []


def test_a_sent_bytearray_or_memoryview_is_the_bytes_at_send_time(queue: vsqs.Queue) -> None:
    """Mutating a ``bytearray`` (or the buffer under a ``memoryview``) after
    ``send``/``send_batch`` returned changes nothing that was sent."""
    buffer = bytearray(b"\x00" * 64)
    queue.send(buffer)
    queue.send(memoryview(buffer)[8:16])
    queue.send_batch([buffer, memoryview(buffer)])
    buffer[:] = b"\xff" * 64
    got = queue.receive_batch(10)
    assert [m.body for m in got] == [bytes(64), bytes(8), bytes(64), bytes(64)]


@pytest.mark.parametrize("text", ["\ud800", "ok \udcff ok", "\udfff\ud800"])
@pytest.mark.parametrize("how", ["send", "send_batch"])
def test_a_str_body_with_a_lone_surrogate_is_refused_as_invalid_body_and_nothing_is_sent(
    tmp_path: Path, how: str, text: str
) -> None:
    """A lone surrogate has no UTF-8 form: ``InvalidBody`` (a ``VsqsError``), and
    a batch holding one sends none of its bodies, not even those before it."""
    with vsqs.Queue(tmp_path / "q") as q:
        with pytest.raises(vsqs.InvalidBody):
            if how == "send":
                q.send(text)
            else:
                q.send_batch([b"fine", text, b"also fine"])
        assert q.receive() is None and os.listdir(tmp_path / "q") == [names.CONFIG_NAME]


# ----------------------------------------------------------- local reads
@pytest.mark.parametrize(
    "claimed",
    [0, 1, _READ_CHUNK, 199_999, 200_000, 200_001, 10 * MB],
    ids=lambda n: f"fstat-said-{n}",
)
def test_a_local_read_returns_the_whole_file_whatever_size_fstat_gave(
    tmp_path: Path, claimed: int
) -> None:
    """``_read_whole`` (the large-message read of ``LocalStore.read``) returns
    every byte of a real 200 000-byte file whether the size it was given is
    right, short (the file grew since ``fstat``; unknown size 0) or long (it shrank)."""
    content = random.Random(claimed).randbytes(200_000)
    path = tmp_path / "m"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _read_whole(fd, claimed) == content
    finally:
        os.close(fd)


def test_a_local_read_of_an_empty_file_claimed_larger_is_empty(tmp_path: Path) -> None:
    """A file shorter than claimed all the way down to empty reads as ``b""``."""
    (tmp_path / "m").write_bytes(b"")
    fd = os.open(tmp_path / "m", os.O_RDONLY)
    try:
        assert _read_whole(fd, 5 * _READ_CHUNK) == b""
    finally:
        os.close(fd)


# ------------------------------------------------------------ big bodies
@dataclass
class Peak:
    """Bytes allocated at the peak of a block, above what was allocated at its start."""

    bytes: int = 0


@contextmanager
def peak_allocation() -> Iterator[Peak]:
    """Trace Python allocations (every domain, every thread) over the block."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    peak = Peak()
    try:
        yield peak
    finally:
        peak.bytes = tracemalloc.get_traced_memory()[1] - start
        if not was_tracing:
            tracemalloc.stop()


@dataclass
class BigRun:
    """Peaks (bytes) of one big body's trip through a queue."""

    size: int
    send: int
    peek: int
    receive: int


def big_round_trip(q: vsqs.Queue, size: int) -> BigRun:
    """Send one random body of ``size`` bytes, peek it, receive it; check it is exact."""
    body = random.Random(size).randbytes(size)
    digest = hashlib.sha256(body).digest()
    with peak_allocation() as sending:
        message_id = q.send(body)
    with peak_allocation() as peeking:
        peeked = q.peek(1)
    assert [m.id for m in peeked] == [message_id]
    assert len(peeked[0].body) == size and hashlib.sha256(peeked[0].body).digest() == digest
    del peeked
    with peak_allocation() as receiving:
        msg = q.receive()
    assert msg is not None and msg.id == message_id
    assert len(msg.body) == size and hashlib.sha256(msg.body).digest() == digest
    msg.delete()
    assert q.receive() is None
    return BigRun(size, sending.bytes, peeking.bytes, receiving.bytes)


@pytest.mark.slow
@pytest.mark.parametrize("durable", [True, False], ids=["durable", "not-durable"])
def test_a_100_mb_body_round_trips_exactly_and_is_held_once_on_a_local_directory(
    tmp_path: Path, durable: bool
) -> None:
    """``send`` writes the caller's buffer without copying it (< 10 % of the body
    allocated); ``peek`` and ``receive`` read it into one buffer of its size
    (at least 1x, by which tracemalloc shows it sees the read, and under 1.2x)."""
    with vsqs.Queue(tmp_path / "q", durable=durable) as q:
        run = big_round_trip(q, BIG)
    assert run.send < 0.1 * BIG, run
    assert BIG <= run.peek < 1.2 * BIG, run
    assert BIG <= run.receive < 1.2 * BIG, run


_RSS_CHILD = textwrap.dedent(
    """
    import json, os, sys
    import vsqs

    def status(field):
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))

    size = int(sys.argv[2])
    body = os.urandom(size)  # no temporary (randbytes makes an int of the same size)
    with vsqs.Queue(sys.argv[1], durable=False) as q:
        q.send(body)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak RSS (VmHWM) starts again from the current RSS
        before = status("VmRSS")
        msg = q.receive()
        after = status("VmHWM")
        assert msg is not None and msg.body == body
    print(json.dumps({"delta": after - before}))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux /proc only")
def test_a_100_mb_local_receive_raises_peak_rss_by_one_body_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    """Second opinion from the kernel, which sees allocations tracemalloc cannot:
    a receive raises the child's peak RSS by about one body. (``VmHWM`` reset by
    ``clear_refs``, not ``ru_maxrss``: a child inherits pytest's peak in that.)"""
    done = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, str(tmp_path / "q"), str(BIG)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    delta = json.loads(done.stdout)["delta"]
    assert 0.9 * BIG <= delta < 1.2 * BIG, delta


@pytest.mark.slow
def test_a_100_mb_body_is_never_copied_by_a_memory_store() -> None:
    """``MemoryStore`` keeps the sent ``bytes`` object and hands it back: no copy at all."""
    with vsqs.Queue(vsqs.MemoryStore()) as q:
        run = big_round_trip(q, BIG)
    assert max(run.send, run.peek, run.receive) < 0.1 * BIG, run


@pytest.mark.slow
def test_a_100_mb_body_round_trips_on_memory_url_holding_at_most_two_copies(
    memory_server: Server,
) -> None:
    """``memory://``: ``send`` copies nothing; a claim's ``GET`` costs two
    copies, both made by fsspec's memory filesystem: its ``cat_file`` returns
    ``bytes(getbuffer())`` (the body), and ``getbuffer()`` first unshares the
    stored ``BytesIO`` (a copy that stays in the store as the object's content)."""
    with vsqs.Queue(memory_server.url(), storage_options=memory_server.storage_options) as q:
        run = big_round_trip(q, BIG)
    assert run.send < 0.1 * BIG, run
    assert BIG <= run.peek < 2.2 * BIG, run
    assert BIG <= run.receive < 2.2 * BIG, run


@pytest.mark.slow
def test_a_60_mb_body_round_trips_exactly_on_s3_in_one_get(s3_server: Server) -> None:
    """A body above s3fs's 50 MiB block size comes back exactly in one ``GET``
    (newer s3fs would ``HEAD`` first and fetch concurrent ranges, holding the
    body 3x). Copies, from the client libraries: ``send`` 1x (botocore wraps
    the bytes in a ``BytesIO`` that aiohttp unshares with ``getbuffer()``);
    ``receive`` 2x (the body is joined from socket blocks)."""
    with vsqs.Queue(s3_server.url(), storage_options=s3_server.storage_options) as q:
        run = big_round_trip(q, 60 * MB)
    assert run.send < 1.2 * run.size, run
    assert run.size <= run.peek < 2.2 * run.size, run
    assert run.size <= run.receive < 2.2 * run.size, run
