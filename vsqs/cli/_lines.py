"""``vsqs send --file``: the lines of a file or a pipe in batches, a batch as
soon as it is full or as soon as the input pauses, so that a pipe fed slowly
(``tail -f log | vsqs send q --file -``) is sent as it comes, not once a
batch has filled."""

from __future__ import annotations

import select
from typing import BinaryIO

from ._interrupt import interruptible

#: Seconds without new input after which the lines read so far form a batch.
LINGER = 0.1
#: Bytes asked of the input per read (more than a ``BufferedReader`` buffers,
#: so that nothing is left in its buffer where ``poll`` cannot see it).
_CHUNK = 1 << 16


class LineBatches:
    """Lines of ``stream`` (each with its ``\\n``; the last one may lack it),
    ``size`` at a time, or fewer once the input paused for ``linger`` seconds.

    Only the wait for input is :func:`interruptible`: a signal that comes
    while bytes are read and split is acted on at the next wait, so what
    :meth:`next` raises on a signal leaves every whole line read in
    :attr:`held`, and a batch it returned is whole.
    """

    def __init__(self, stream: BinaryIO, size: int, linger: float = LINGER) -> None:
        self._stream, self._size, self._linger = stream, size, linger
        self.held: list[bytes] = []
        self._partial: list[bytes] = []  # the pieces of a line not ended yet
        self._ended = False
        self._poll = select.poll()  # not epoll: a regular file is always readable
        self._poll.register(stream.fileno(), select.POLLIN)

    def next(self) -> list[bytes]:
        """The next batch; ``[]`` once the input has ended and every line was handed out."""
        while len(self.held) < self._size and not self._ended:
            with interruptible():
                ready = self._poll.poll(int(self._linger * 1000) if self.held else None)
            if not ready:
                break  # a pause: send what came
            self._read()  # at once: the input is readable (or at its end)
        batch, self.held = self.held[: self._size], self.held[self._size :]
        return batch

    def _read(self) -> None:
        data = self._stream.read1(_CHUNK)  # type: ignore[attr-defined]
        if not data:
            self._ended = True
            if self._partial:
                self.held.append(b"".join(self._partial))
            return
        first, *lines = data.split(b"\n")
        self._partial.append(first)
        if not lines:  # a long line goes on
            return
        self.held.append(b"".join(self._partial) + b"\n")
        self.held.extend(line + b"\n" for line in lines[:-1])
        self._partial = [lines[-1]] if lines[-1] else []
