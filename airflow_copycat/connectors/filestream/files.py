"""Open files of a FileStream source task: the descriptor budget (:class:`FilePool`) and
:class:`OpenFile`, one physical file read from a byte position, line by line or many
complete lines at a time (both reading the same chunks, so offsets are identical)."""

from __future__ import annotations

import errno
import os
import resource
import stat
import time
from collections import OrderedDict
from typing import Any, Callable

from airflow_copycat.connect import ConnectException

from .identity import Identity

MAX_OPEN_FILES_CONFIG = "max.open.files"
CHUNK = 64 * 1024
"""Bytes read from a file at once (both reading paths: see :meth:`OpenFile.next_lines`)."""


def _open(path: str) -> int | None:
    """A read-only descriptor of the regular file at ``path``, or ``None`` when there is none.
    Other errors are raised as :class:`OSError` (see :meth:`FilePool.open`)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _too_many_open_files(path: str, error: OSError, limit: int) -> ConnectException:
    """The error for EMFILE/ENFILE: say what is exhausted and which knob to turn."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        now = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    except (OSError, ValueError):  # pragma: no cover - getrlimit does not fail on Linux
        now = "unknown"
    if error.errno == errno.ENFILE:
        what = ("too many open files in the whole system (ENFILE): raise the system's limit "
                "(sysctl fs.file-max) or lower")
    else:
        what = f"too many open files (EMFILE): raise ulimit -n (the process limit, now {now}) or lower"
    return ConnectException(
        f"cannot open {path}: {what} '{MAX_OPEN_FILES_CONFIG}' (now {limit}, the most files this task keeps "
        f"open at once)")


class FilePool:
    """The task's budget of open descriptors: at most ``limit`` at once.

    Every :class:`OpenFile` registers here. Before a new descriptor is opened the
    least recently used files are closed (they reopen lazily, re-checking their
    identity). The file being read (:attr:`active`) is never closed that way.
    """

    def __init__(self, limit: int):
        self.limit = max(2, int(limit))
        self.count = 0  # descriptors open now, owned by an OpenFile or not yet
        self.active: OpenFile | None = None
        self._lru: OrderedDict[OpenFile, None] = OrderedDict()

    def _evict(self, keep_below: int) -> None:
        for f in list(self._lru):
            if self.count < keep_below:
                return
            if f is not self.active:
                f.close()

    def _call(self, path: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` after making room for one more descriptor; on EMFILE/ENFILE retry once with
        every evictable file closed, then fail naming the limit."""
        self._evict(self.limit)
        try:
            return fn()
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            self._evict(1)
            try:
                return fn()
            except OSError as again:
                if again.errno in (errno.EMFILE, errno.ENFILE):
                    raise _too_many_open_files(path, again, self.limit) from again
                raise

    def open(self, path: str) -> int | None:
        """:func:`_open` within the budget; other errors become a :class:`ConnectException`."""
        try:
            fd = self._call(path, lambda: _open(path))
        except ConnectException:
            raise
        except OSError as e:
            raise ConnectException(f"cannot open {path} for reading: {e.strerror}; check that the file is "
                                   f"readable by the user running the task") from e
        if fd is not None:
            self.count += 1
        return fd

    def close(self, fd: int) -> None:
        try:
            os.close(fd)
        except OSError:
            pass
        self.count -= 1

    def list_dir(self, directory: str) -> list[os.DirEntry] | None:
        """The entries of ``directory`` (its descriptor counted while listing), ``None`` if unreadable."""
        def scan() -> list[os.DirEntry]:
            with os.scandir(directory) as it:
                return list(it)
        try:  # made room for one descriptor, closed again before returning
            return self._call(directory, scan)
        except ConnectException:
            raise
        except OSError:
            return None

    def track(self, f: "OpenFile") -> None:
        self._lru[f] = None

    def use(self, f: "OpenFile") -> None:
        """``f`` is read now: the most recently used, and not to be evicted."""
        self._lru.move_to_end(f)
        self.active = f

    def untrack(self, f: "OpenFile") -> None:
        self._lru.pop(f, None)
        if self.active is f:
            self.active = None

    @property
    def open_files(self) -> int:
        return len(self._lru)


class OpenFile:
    """One physical file being read: descriptor, identity, and ``position`` (the byte
    after the last line handed out). Bytes read past ``position`` that do not end
    in ``\\n`` yet are held back. A ``rotated`` file is no longer at its path and
    is finished to its end (its unterminated last line once the writer is done).

    The descriptor may be closed (``fd == -1``: caught up, or evicted by the
    :class:`FilePool`); the owner reopens it after checking its identity."""

    def __init__(self, path: str, fd: int, identity: Identity, position: int, pool: FilePool, *,
                 rotated: bool = False):
        self.path = path
        self.fd = fd
        self.identity = identity
        self.rotated = rotated
        self.pool = pool
        pool.track(self)
        self.seek(position)

    def seek(self, position: int) -> None:
        """Continue at byte ``position``, dropping held-back bytes."""
        self.position = position
        self._buf, self._start, self._scanned = b"", 0, 0

    def attach(self, fd: int) -> None:
        """Reopened as ``fd`` (the caller checked it is this file): continue at :attr:`position`."""
        self.fd = fd
        self.pool.track(self)
        self.seek(self.position)

    def offset(self) -> dict:
        return self.identity.as_offset(self.position)

    @property
    def read_pos(self) -> int:
        """Offset of the next byte to read from the file."""
        return self.position + len(self._buf) - self._start

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def next_line(self, fingerprint_bytes: int) -> tuple[bytes, int, int] | None:
        """The next complete line as ``(bytes without \\n, start, end)``, or ``None`` at end of file.

        Also widens the fingerprint once the file has grown past the bytes it covers.
        """
        while True:
            i = self._buf.find(b"\n", max(self._start, self._scanned))
            if i >= 0:
                line, start = self._buf[self._start:i], self.position
                self.position += i + 1 - self._start
                self._start = i + 1
                return line, start, self.position
            self._scanned = len(self._buf)
            chunk = os.pread(self.fd, CHUNK, self.read_pos)
            if not chunk:
                return None
            self._buf = self._buf[self._start:] + chunk
            self._scanned -= self._start
            self._start = 0
            if self.identity.length < fingerprint_bytes and self.read_pos > self.identity.length:
                self.identity = Identity.of(self.fd, fingerprint_bytes)

    def next_lines(self, most: int, fingerprint_bytes: int) -> tuple[bytes, int, int, int] | None:
        """Up to ``most`` (>= 1) complete lines at once as ``(bytes, start, end, count)``: the bytes
        from ``start`` to ``end`` are ``count`` lines, each with its ``\\n``. ``None`` at end of file.

        Reads exactly the chunks :meth:`next_line` would (a chunk only when no complete line is
        buffered), so the fingerprint widens at the same lines and every line's offset is the
        one :meth:`next_line` gives it."""
        while True:
            buf, begin = self._buf, self._start
            last = buf.rfind(b"\n", max(begin, self._scanned))
            if last >= 0:
                count = buf.count(b"\n", begin, last + 1)
                if count > most:  # stop after the most-th line
                    last, count = begin - 1, most
                    for _ in range(most):
                        last = buf.find(b"\n", last + 1)
                data, start = buf[begin:last + 1], self.position
                self.position += len(data)
                self._start = last + 1
                return data, start, self.position, count
            self._scanned = len(buf)
            chunk = os.pread(self.fd, CHUNK, self.read_pos)
            if not chunk:
                return None
            self._buf = buf[begin:] + chunk
            self._scanned -= begin
            self._start = 0
            if self.identity.length < fingerprint_bytes and self.read_pos > self.identity.length:
                self.identity = Identity.of(self.fd, fingerprint_bytes)

    def has_tail(self) -> bool:
        """Whether bytes after the last ``\\n`` are held back (call at end of file)."""
        return len(self._buf) > self._start

    def idle_ns(self) -> int:
        """Nanoseconds since the file was last written (its mtime)."""
        return time.time_ns() - os.fstat(self.fd).st_mtime_ns

    def take_tail(self) -> tuple[bytes, int, int] | None:
        """The held-back bytes after the last ``\\n`` as a final line, or ``None`` if there are none."""
        line, start = self._buf[self._start:], self.position
        if not line:
            return None
        self.seek(start + len(line))
        return line, start, self.position

    def close(self) -> None:
        """Close the descriptor and drop held-back bytes (they are read again on reopen); safe to call twice."""
        if self.fd >= 0:
            self.pool.close(self.fd)
            self.fd = -1
        self.pool.untrack(self)
        self.seek(self.position)


