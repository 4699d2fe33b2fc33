"""Arrival feeds for local directories: Linux ``inotify`` through ``ctypes``.

A :class:`DirectoryFeed` reports, in the order they happened, the names that
appeared in (created, renamed into) or were renamed away from one directory
after the feed started (deletions are not reported: a queue deletes only names
it holds). It is complete only for changes made by this kernel, so
:func:`open_feed` offers one only on filesystems that no other host can write
to (ext4, xfs, btrfs, tmpfs, ...). A feed that overflowed reports ``None``
once: the caller must list.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import math
import os
import select
import struct
import sys

_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ISDIR = 0x40000000
_IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_APPEARED = _IN_CREATE | _IN_MOVED_TO
_MASK = _APPEARED | _IN_MOVED_FROM | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR
_LOST = _IN_Q_OVERFLOW | _IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF
_HEADER = struct.Struct("iIII")
_READ_SIZE = 1 << 16

#: statfs ``f_type`` of filesystems that only this kernel writes to, so that
#: inotify sees every change: ext2/3/4, xfs, btrfs, tmpfs, f2fs, zfs, overlay.
_LOCAL_FILESYSTEMS = frozenset(
    {0xEF53, 0x58465342, 0x9123683E, 0x01021994, 0xF2F52010, 0x2FC12FC1, 0x794C7630}
)

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_available = sys.platform.startswith("linux") and hasattr(_libc, "inotify_init1")
#: Bumped in a forked child: a feed opened before the fork shares its events
#: with the parent, so the child must not trust it.
_forks = [0]
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


def _filesystem_type(dir_fd: int) -> int | None:
    buf = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes on x86_64
    if _libc.fstatfs(dir_fd, buf) != 0:
        return None
    return int(struct.unpack_from("l", buf.raw)[0])


class DirectoryFeed:
    """Names that arrive in one directory, read without blocking."""

    def __init__(self, inotify_fd: int) -> None:
        self._fd = inotify_fd
        #: Readable once :meth:`wake` was called: it ends the waits under way.
        self._wake_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._forks = _forks[0]
        self._poll = select.poll()
        self._poll.register(inotify_fd, select.POLLIN)

    @property
    def inherited(self) -> bool:
        """Whether this process is a fork of the one that opened the feed."""
        return self._forks != _forks[0]

    def changes(self, name_length: int) -> list[tuple[str, bool]] | None:
        """``(name, appeared)`` since the previous call, oldest first; ``None`` if some were lost.

        One caller at a time (the queue calls it under its lock).

        Only names of at most ``name_length`` characters without a dot (the
        grammar's ready names) are reported; the others are skipped without
        decoding them.
        """
        out: list[tuple[str, bool]] = []
        if not self._poll.poll(0):  # cheaper than a read that fails with EAGAIN
            return out
        padded = (name_length + 16) & ~15  # the kernel NUL-pads names to 16 bytes
        lost = False
        while True:
            try:
                buf = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                break
            pos, end = 0, len(buf)
            while pos < end:
                _, mask, _, length = _HEADER.unpack_from(buf, pos)
                start = pos + _HEADER.size
                pos = start + length
                if mask & _LOST:
                    lost = True
                elif length <= padded and not mask & _IN_ISDIR:
                    size = buf.find(0, start, pos)
                    size = (pos if size < 0 else size) - start
                    if 0 < size <= name_length and buf.find(b".", start, start + size) < 0:
                        name = buf[start : start + size].decode("utf-8", "replace")
                        out.append((name, bool(mask & _APPEARED)))
            if end < _READ_SIZE // 2:
                break  # the kernel had no more queued
        return None if lost else out

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until something arrives.

        Any number of threads may wait at once (each on its own poll object:
        one poll object refuses concurrent use).
        """
        waiter = select.poll()
        waiter.register(self._fd, select.POLLIN)
        waiter.register(self._wake_fd, select.POLLIN)
        ready = waiter.poll(max(0, math.ceil(timeout * 1000)))
        if any(fd == self._wake_fd for fd, _ in ready):
            with contextlib.suppress(BlockingIOError):  # another waiter took it first
                os.eventfd_read(self._wake_fd)
        return bool(ready)

    def wake(self) -> None:
        """End the :meth:`wait` calls under way now (they return ``True``)."""
        fd = self._wake_fd
        if fd >= 0:
            os.eventfd_write(fd, 1)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        wake_fd, self._wake_fd = self._wake_fd, -1
        if wake_fd >= 0:
            os.close(wake_fd)

    def __del__(self) -> None:
        # Instances are scarce (often 128 per user): a store dropped unclosed frees its own.
        self.close()


def open_feed(dir_fd: int) -> DirectoryFeed | None:
    """A feed for the directory open as ``dir_fd``, or ``None`` where none can be complete."""
    if not _available or _filesystem_type(dir_fd) not in _LOCAL_FILESYSTEMS:
        return None
    fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:  # EMFILE: the per-user limit of inotify instances (often 128)
        return None
    path = f"/proc/self/fd/{dir_fd}".encode()
    if _libc.inotify_add_watch(fd, path, _MASK) < 0:
        err = ctypes.get_errno()
        os.close(fd)
        if err in (errno.ENOENT, errno.ENOSPC, errno.EACCES, errno.ENOTDIR):
            return None
        raise OSError(err, os.strerror(err))
    return DirectoryFeed(fd)
