"""Local (and shared, non-NFS) POSIX directories.

Every operation is relative to a directory file descriptor opened once, so a
name is always a single component inside the queue directory. Renames use
``renameat2(RENAME_NOREPLACE)`` on Linux: atomic, and never replacing an
existing name. Durability: file ``fsync`` before the publishing rename and a
directory ``fsync`` after it; a batch flushes its files with one ``syncfs``.

A create that need not be durable writes an unnamed ``O_TMPFILE`` inode and
links it under its final name (``linkat``, which never replaces): readers see
the whole message or no name, with one directory operation instead of two.
On local filesystems a receiver learns new names from ``inotify``
(:mod:`vsqs.stores._inotify`) instead of listing the directory again.

The descriptor outlives the path: a directory removed, replaced or moved
away under a client would be listed and written through it for ever, unseen
by every client that opens the path. So each listing first checks that the
path still names the directory open, and so do writes, at most every
:data:`CHECK_EVERY` seconds and whenever one fails with ``ENOENT``: a client
whose directory left its path gets :class:`vsqs.QueueNotFound`
(docs/guarantees.md, "A queue directory removed, replaced or moved").

A split (:meth:`LocalStore.split`) commits by renaming its source to a
transitional name that encodes both targets (:mod:`vsqs.stores._splits`),
links the targets, then unlinks it. Listings hide the transitional name and
its targets while it is there, and finish one older than ``FINISH_AFTER``
(its splitter was killed). Two windows remain: a lister finishes a split
whose splitter stopped for more than ``FINISH_AFTER`` between its links and
its unlink (harmless: every link and unlink tolerates the other's), and a
directory listing that raced the commit may show a target beside its
source's absence, as a listing may miss a renamed name (docs/format.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Hashable, Iterable

from .. import _meter as meter
from .._errors import QueueClosed, QueueNotFound
from .._names import NEW_SUFFIX, validate_queue_name
from . import _moves
from ._base import Changes, Names, Store, TooLarge
from ._inotify import DirectoryFeed, open_feed
from ._splits import SPLIT_SUFFIX, split_targets, transitional

_RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None) if sys.platform.startswith("linux") else None
_syncfs = getattr(_libc, "syncfs", None) if sys.platform.startswith("linux") else None
if _renameat2 is not None:
    _renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    _renameat2.restype = ctypes.c_int

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: Never follows a symlink; never blocks on a FIFO.
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: What opening (a symlink: ``O_NOFOLLOW``; a socket) or reading (a directory) raises.
_NOT_A_FILE = frozenset({errno.ELOOP, errno.EISDIR, errno.ENXIO})
_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_O_TMPFILE = os.O_WRONLY | getattr(os, "O_TMPFILE", 0) | os.O_CLOEXEC
#: O_TMPFILE files are linked through their /proc/self/fd entry.
_TMPFILE_USABLE = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
#: Message files are created 0o666 minus the umask: never wider than what the
#: process would give any file, and never executable.
FILE_MODE = 0o666
_READ_CHUNK = 1 << 16
#: The filesystem stamps a directory's mtime from a coarse clock (one tick,
#: up to 10 ms): two changes within one tick leave the same mtime. A token
#: taken within this window of its mtime is ambiguous, and earns one more
#: look once the window has passed.
_TICK_NS = 20_000_000
#: Writes check at most this often (seconds) that the path still names the
#: directory open (listings check every time: a stat beside a whole scan).
CHECK_EVERY = 1.0


class LocalStore(Store):
    """A queue in a local directory. See the module docstring for guarantees."""

    atomic_rename = True
    durable = True

    def __init__(self, path: str, *, notifications: bool = True) -> None:
        """``notifications=False`` never uses ``inotify`` (receivers list instead)."""
        self.path = path
        self.url = path
        self._fd: int | None = None
        self._noreplace = _renameat2 is not None
        self._tmpfile = _TMPFILE_USABLE  # until this filesystem refuses O_TMPFILE
        self._feed: DirectoryFeed | None = None
        self._notifications = notifications
        self._feed_tried = not notifications
        #: The absolute path, device and inode of the directory open as ``_fd``.
        self._opened: tuple[str, int, int] | None = None
        self._checked_at = -math.inf
        self._gone: str | None = None  # why the directory open is no longer the queue
        #: The wall clock that ages a split left by a killed splitter (its
        #: transitional name's ``ctime``); tests inject one.
        self.clock: Callable[[], float] = time.time
        self._repaired: Names = []  # splits that listings finished

    # -- container -------------------------------------------------------
    def ensure(self, create: bool) -> bool:
        if self._fd is not None:
            return True
        if create:
            try:
                os.makedirs(self.path, exist_ok=True)
            except FileExistsError:  # a file, or a symlink to one, is in the way
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", self.path) from None
            except RecursionError:  # os.makedirs recurses once per missing parent
                raise OSError(errno.ENAMETOOLONG, "too many missing parents", self.path) from None
        try:
            self._fd = os.open(self.path, _O_DIR)
        except FileNotFoundError:
            return False
        opened = os.fstat(self._fd)
        self._opened = (os.path.abspath(self.path), opened.st_dev, opened.st_ino)
        self._checked_at = time.monotonic()
        return True

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise QueueClosed(f"{self.url}: the queue is closed (or was never opened)")
        return self._fd

    def sibling(self, name: str) -> LocalStore:
        parent = os.path.dirname(self.path)
        return LocalStore(
            os.path.join(parent, validate_queue_name(name)), notifications=self._notifications
        )

    def close(self) -> None:
        self._close_feed()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        """A store dropped without :meth:`close` frees its directory's descriptor
        (as a file object does): a program that opens queues and drops them
        does not run out of descriptors. (``os.close`` is bound early: at
        interpreter exit the module may be gone.)"""
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            try:  # noqa: SIM105 - contextlib may be gone at interpreter exit too
                _close(fd)
            except OSError:
                pass

    # -- names -----------------------------------------------------------
    def check_place(self) -> None:
        """Raise :class:`vsqs.QueueNotFound` unless the path still names the
        directory open: one ``stat`` (and an ``fstat`` to say what happened).
        Once it found the directory removed, or another at the path, it
        raises for good: this store is not the queue's any more."""
        fd, opened = self.fd, self._opened
        assert opened is not None
        if self._gone is not None:
            raise QueueNotFound(self._gone)
        path, dev, ino = opened
        self._checked_at = time.monotonic()
        try:
            there = os.stat(path)
        except FileNotFoundError:
            there = None
        if there is not None and (there.st_dev, there.st_ino) == (dev, ino):
            return
        removed = os.fstat(fd).st_nlink == 0
        how = ("removed" if removed else "moved away") + (" and replaced" if there else "")
        gone = f"{self.path}: the queue directory was {how} while open: reopen it"
        if removed or there is not None:
            self._gone = gone
        else:  # nothing at the path (yet, or a failed look): the next write looks again
            self._checked_at = -math.inf
        raise QueueNotFound(gone)

    @meter.metered("list")
    def list(self, *, prefix: str = "", settle: bool = False) -> list[str]:
        """One ``scandir`` of the directory, read whole (the files' types come
        with the entries: no ``stat``).

        A split under way is hidden with its targets (its transitional name is
        never shown); one older than ``FINISH_AFTER`` is finished and its
        targets shown. With ``settle`` nothing is finished and the targets of
        every split are shown once each, linked yet or not."""
        self.check_place()
        with os.scandir(self.fd) as entries:
            files = [e.name for e in entries if e.is_file(follow_symlinks=False)]
        splits = {
            name: found
            for name in files
            if name.endswith(SPLIT_SUFFIX) and (found := split_targets(name))
        }
        if splits:
            files = self._settle_splits(files, splits, settle)
        return [name for name in files if name.startswith(prefix)]

    def _settle_splits(
        self, files: Names, splits: dict[str, tuple[str, str]], settle: bool
    ) -> Names:
        """``files`` without the splits' transitional names, and their targets
        hidden, shown (``settle``) or finished (split older than ``FINISH_AFTER``)."""
        hidden, shown = set(splits), set[str]()
        for name, targets in splits.items():
            if settle:
                shown.update(targets)
            elif self._abandoned(name) and self._finish_split(name, targets):
                self._repaired.append(name)
                shown.update(targets)
            else:
                hidden.update(targets)
        kept = [name for name in files if name not in hidden and name not in shown]
        return kept + sorted(shown)

    def _abandoned(self, transitional_name: str) -> bool:
        """Whether a split's last link is older than ``FINISH_AFTER`` (gone: no)."""
        try:
            changed = os.stat(transitional_name, dir_fd=self.fd, follow_symlinks=False).st_ctime
        except FileNotFoundError:
            return False
        return self.clock() - changed > _moves.FINISH_AFTER

    def _finish_split(self, transitional_name: str, targets: tuple[str, str]) -> bool:
        """Link the targets and unlink the transitional name; whether this did it."""
        fd = self.fd
        for target in targets:
            try:
                os.link(
                    transitional_name, target, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False
                )
            except FileExistsError:
                pass  # linked by a finisher
            except FileNotFoundError:
                if self._file(transitional_name):
                    raise  # not a finisher's unlink: the split stays for a lister to finish
                return False  # a finisher linked both and unlinked it
        try:
            os.unlink(transitional_name, dir_fd=fd)
        except FileNotFoundError:
            return False  # finished by its splitter or another lister: the next listing shows it
        return True

    def splits(self) -> Names:
        """The transitional names of the splits in the directory (for deleting a queue)."""
        self.check_place()
        return [name for name in os.listdir(self.fd) if split_targets(name)]

    def take_repairs(self) -> Names:
        """The transitional names of killed splitters' splits that listings finished."""
        repaired, self._repaired = self._repaired, []
        return repaired

    @meter.metered("read")
    def read(self, name: str) -> bytes:
        """The file's bytes; ``FileNotFoundError`` if it is missing or no
        message file (a symlink, a directory or a socket planted under a
        message name: a forged receipt reads nothing through it)."""
        return self._read(name, None)

    @meter.metered("read")
    def read_limited(self, name: str, limit: int) -> bytes:
        """The size comes from the ``fstat`` a file larger than one read
        takes anyway: no system call more than :meth:`read`."""
        return self._read(name, limit)

    def _read(self, name: str, limit: int | None) -> bytes:
        try:
            fd = os.open(name, _O_READ, dir_fd=self.fd)
            try:
                data = os.read(fd, _READ_CHUNK if limit is None else min(_READ_CHUNK, limit + 1))
                if limit is not None and len(data) > limit:
                    raise TooLarge(name, None, limit)
                if len(data) < _READ_CHUNK:
                    return data  # small messages: one read, no fstat
                size = os.fstat(fd).st_size
                if limit is not None and size > limit:
                    raise TooLarge(name, size, limit)
                return _read_whole(fd, size)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno in _NOT_A_FILE:
                raise FileNotFoundError(errno.ENOENT, "not a message file", name) from exc
            raise

    def creates_atomically(self, fsync: bool) -> bool:
        # A linked O_TMPFILE inode's new link count is not made durable by a
        # directory fsync (ext4 without a journal): durable creates stage.
        return not fsync and self._tmpfile

    @meter.metered("write")
    def write_new(self, name: str, data: bytes, *, fsync: bool) -> None:
        if self._gone is not None or time.monotonic() - self._checked_at >= CHECK_EVERY:
            self.check_place()
        try:
            self._write_new(name, data, fsync)
        except OSError:  # ENOENT (EPERM for O_TMPFILE) where the directory was removed
            self.check_place()
            raise

    def _write_new(self, name: str, data: bytes, fsync: bool) -> None:
        if not fsync and self._tmpfile:
            try:
                fd = os.open(".", _O_TMPFILE, FILE_MODE, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    raise
                self._tmpfile = False  # this filesystem has no O_TMPFILE
            else:
                try:
                    _write_all(fd, data)
                    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=self.fd)
                finally:
                    os.close(fd)
                return
        fd = os.open(name, _O_CREATE, FILE_MODE, dir_fd=self.fd)
        try:
            _write_all(fd, data)
            if fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(name, self.fd)
            raise
        os.close(fd)

    @meter.metered("rename")
    def rename(self, src: str, dst: str) -> None:
        self._check_source(src)
        self._rename(src, dst)

    @meter.metered("rename")
    def split(self, src: str, first: str, second: str) -> None:
        """A rename to the transitional name (the commit), two links, an unlink;
        a link or unlink that finds a finisher got there first is done."""
        self._check_source(src)
        middle = transitional(first, second)
        self._rename(src, middle)
        self._finish_split(middle, (first, second))

    def _check_source(self, src: str) -> None:
        if "." in src and not src.endswith(NEW_SUFFIX):  # a held name, maybe from a receipt
            self._check_file(src)

    def _rename(self, src: str, dst: str) -> None:
        if self._noreplace:
            fd = self.fd
            if _renameat2(fd, src.encode(), fd, dst.encode(), _RENAME_NOREPLACE) == 0:  # type: ignore[misc]
                return
            err = ctypes.get_errno()
            if err not in (errno.ENOSYS, errno.EINVAL):
                raise OSError(err, os.strerror(err), src, None, dst)
            self._noreplace = False  # this filesystem has no RENAME_NOREPLACE
        # Fallback: plain rename(2) is still atomic and exactly-once on the
        # source; it would replace dst, which ids make unique (docs/format.md).
        os.rename(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    @meter.metered("delete")
    def delete(self, name: str, *, known: bool = False) -> None:
        self._check_file(name)
        os.unlink(name, dir_fd=self.fd)

    def sync_files(self, names: Iterable[str]) -> None:
        if _syncfs is not None and _syncfs(self.fd) == 0:  # one flush for the whole batch
            return
        for name in names:
            fd = os.open(name, _O_READ, dir_fd=self.fd)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def sync_names(self) -> None:
        os.fsync(self.fd)

    # -- change notification --------------------------------------------
    def changes(self, name_length: int) -> Changes | None:
        feed = self._feed
        if feed is not None and feed.inherited:
            # Inherited over fork: the parent reads the same events. A new
            # watch knows nothing of what happened before it: list again.
            self._close_feed()
            self._feed = open_feed(self.fd)
            return None
        if feed is None:
            if self._feed_tried:
                return None
            self._feed_tried = True
            self._feed = open_feed(self.fd)
            return None if self._feed is None else []
        changes = feed.changes(name_length)
        if changes:  # only regular files are messages (list() says the same)
            changes = [(n, appeared) for n, appeared in changes if not appeared or self._file(n)]
        return changes

    def _file(self, name: str) -> bool:
        """Whether ``name`` is a regular file (not a symlink, directory, FIFO...)."""
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def _check_file(self, name: str) -> None:
        """``FileNotFoundError`` unless ``name`` is a regular file: a name from an
        untrusted receipt never renames or unlinks anything else."""
        if not self._file(name):
            raise FileNotFoundError(errno.ENOENT, "no message file", name)

    def wait_for_change(self, token: Hashable, timeout: float) -> bool:
        if self._feed is not None:
            return self._feed.wait(timeout)
        return super().wait_for_change(token, timeout)

    def wake(self) -> None:
        super().wake()  # a wait without a feed
        feed = self._feed
        if feed is not None:
            feed.wake()

    def _close_feed(self) -> None:
        feed, self._feed = self._feed, None
        if feed is not None:
            feed.close()

    def change_token(self) -> Hashable:
        return os.stat(self.fd).st_mtime_ns, time.time_ns()

    def changed_since(self, token: Hashable) -> bool:
        assert isinstance(token, tuple)
        mtime, taken = token
        if os.stat(self.fd).st_mtime_ns != mtime:
            return True
        # Same mtime: a change in the same clock tick as the token would not show.
        return bool(taken - mtime < _TICK_NS <= time.time_ns() - mtime)


def _read_whole(fd: int, size: int) -> bytes:
    """The whole content of the open file ``fd``, whose size ``fstat`` gave as ``size``.

    One ``pread`` from the start into a buffer of ``size + 1`` bytes, which
    becomes the returned bytes object (trimmed by ``realloc``): a large body
    is held once, never as chunks plus their join. A file longer than ``size``
    (the extra byte shows it), a short read (Linux reads at most 2 GiB at
    once) or a file of unknown size (``size`` 0) reads on to the end.
    """
    data = os.pread(fd, size + 1, 0)
    if len(data) == size:
        return data
    chunks, offset = [data], len(data)
    while data := os.pread(fd, max(size + 1 - offset, _READ_CHUNK), offset):
        chunks.append(data)
        offset += len(data)
    return b"".join(chunks)  # one chunk (the file is shorter than ``size``): itself, no copy


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)  # all of it, but for huge or interrupted writes
    if written == len(data):
        return
    view = memoryview(data)[written:]
    while view:
        view = view[os.write(fd, view) :]


def _unlink_quietly(name: str, dir_fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
