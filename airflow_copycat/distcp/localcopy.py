"""The local fast copy: one byte range of a file on a local disk into a new local file.

:mod:`.copier` streams every file through its converters in 4 MiB reads. When
there is nothing to convert and both filesystems are the local disk, the same
bytes can move with far fewer copies through Python:

* ``os.copy_file_range`` -- the kernel copies the range from the source to the
  target file, the bytes never pass through a buffer of this process (falling
  back to ``read``/``write`` from where it stopped after any error of it:
  another filesystem (``EXDEV`` on old kernels), no such system call, or a real
  I/O error, which read/write then reports as its own);
* with a checksum, each block (:data:`BLOCK`, 8 MiB) the kernel copied is then
  read back *from the target* (from the page cache) into one buffer and hashed:
  the hash is of exactly the bytes staged. For a file of more than one block the
  hash of one block runs in a helper thread while the kernel copies the next
  (hashlib releases the GIL for large buffers). This moves each byte twice
  (kernel copy, read back) instead of three times (read into the buffer, write
  from it -- the read/write fallback, which hashes the buffer it writes): a
  plain loop of these system calls over 2 GB with md5 and 2-4 files in flight
  took 2.5-3.3 s instead of 4.2-4.9 s on the benchmark machine.

**Contract** (what makes it a drop-in for the streaming path, proven by
``tests/distcp/test_fast_copy.py``; the kernel copy with its read-back hash against
the read/write path by ``tests/distcp/test_kernel_copy.py``): :class:`RangeCopy` copies the same bytes the
streaming path's source reader would hand out -- at most ``limit`` bytes from
``offset`` -- feeds them to the same hash objects, counts them in
:attr:`RangeCopy.count`, calls ``progress(count)`` at the same thresholds, and
fails the same way:

* more bytes than ``limit`` where the range ends at the end of the file
  (``strict_end``): :class:`SourceChanged` "... has more than the N bytes listed";
* fewer: no error here; the caller compares :attr:`RangeCopy.count` with what it
  expected, as it does for the streaming path;
* the source cannot be opened: the ``OSError`` of ``open`` (``FileNotFoundError``
  for a file that vanished), as fsspec's local ``open`` raises it;
* reading it fails: :class:`SourceError` "reading ORIGIN failed: ..."; writing
  the target (or reading back what was written) fails: the ``OSError`` of it.
"""

from __future__ import annotations

import errno
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from .streams import _describe

BLOCK = 8 << 20
"""Bytes per read and write of the fast copy (and per ``copy_file_range`` call without progress)."""

PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, AssertionError, KeyError, IndexError, ImportError,
                      NotImplementedError, RecursionError)
"""Exceptions that mean a bug, not bad data or a failing filesystem: raised, never reported as a failed file."""


class SourceChanged(Exception):
    """The source has more or fewer bytes than the listing said."""


class SourceError(Exception):
    """Reading the source failed (kept apart from codec errors, which are OSErrors too)."""


def more_than_listed(origin: str, limit: int) -> SourceChanged:
    """The error of a source with bytes past the ``limit`` it was listed with."""
    return SourceChanged(f"{origin} changed during the copy: it has more than the {limit} bytes listed")


class RangeCopy:
    """Copies at most ``limit`` bytes of the local file ``origin`` (from ``offset``) into a new file
    (see the module docstring for the contract): hashes them into ``hashers``, counts them in
    :attr:`count`, calls ``progress(count)`` each time about ``progress_every`` more bytes were
    copied, and with ``strict_end`` (the range ends at the end of the file) raises
    :class:`SourceChanged` when the file has a byte more."""

    def __init__(self, origin: str, limit: int, hashers: Iterable, progress: Callable[[int], Any] | None,
                 progress_every: int, strict_end: bool = True):
        self.origin, self.limit = origin, limit
        self.hashers = list(hashers)
        self.progress, self.progress_every = progress, max(1, progress_every)
        self.strict_end = strict_end
        self.count = 0
        self._next_progress = self.progress_every

    def run(self, path: str, offset: int, target: str) -> int:
        """Copy from the local file ``path`` (the source, ``origin`` in errors) at ``offset`` into a new
        file ``target`` (created with mode ``0o666`` less the umask, or truncated); returns the bytes
        copied (:attr:`count`)."""
        with open(path, "rb", buffering=0) as src:
            # os.open: the target is a new temporary name, so the fstat that open() adds to refuse a directory
            # is not needed
            d = os.open(target, (os.O_RDWR if self.hashers else os.O_WRONLY) | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                        0o666)
            try:
                s = src.fileno()
                if not self._kernel_copy(s, d, offset):
                    self._buffered_copy(s, d, offset + self.count)
                if self.strict_end and self.count >= self.limit:
                    if self._pread(s, 1, offset + self.count):
                        raise more_than_listed(self.origin, self.limit)
            finally:
                os.close(d)
        return self.count

    # ---------------------------------------------------------------- helpers
    def _advance(self, n: int) -> None:
        self.count += n
        if self.progress is not None and self.count >= self._next_progress:
            self._next_progress = self.count + self.progress_every
            self.progress(self.count)

    def _pread(self, fd: int, n: int, at: int) -> bytes:
        try:
            return os.pread(fd, n, at)
        except OSError as e:
            raise SourceError(f"reading {self.origin} failed: {_describe(e)}") from e

    def _kernel_copy(self, s: int, d: int, offset: int) -> bool:
        """``copy_file_range`` the whole range, hashing each block from the target after it is copied
        (see the module docstring); ``False`` after an error of ``copy_file_range`` -- the kernel cannot
        copy between these files (``EXDEV``, ``ENOSYS``, ``EINVAL``...), or reading or writing failed:
        what was copied stays counted (and hashed) and read/write goes on from there (and reports a real
        error as the streaming path does, a read error as :class:`SourceError`, a write error as itself)."""
        if not hasattr(os, "copy_file_range"):
            return False
        if self.hashers:
            step = min(BLOCK, self.progress_every) if self.progress is not None else BLOCK
        else:
            step = self.progress_every if self.progress is not None else 1 << 30
        buffer = None  # the block read back from the target, hashed (one hash runs at a time)
        pending = None  # the hash of the previous block, running
        pool = None
        try:
            while self.count < self.limit:
                try:
                    n = os.copy_file_range(s, d, min(step, self.limit - self.count), offset + self.count)
                except OSError:
                    return False
                if n == 0:
                    break  # the end of the source: fewer bytes than listed (the caller tells)
                if self.hashers:
                    if buffer is None:
                        buffer = memoryview(bytearray(min(step, self.limit)))
                    if pending is not None:
                        pending.result()
                        pending = None
                    if pool is None and n < self.limit - self.count:  # more blocks follow: hash beside them
                        pool = _hash_pool()
                    if pool is not None:
                        pending = pool.submit(self._hash_written, d, self.count, n, buffer)
                    else:
                        self._hash_written(d, self.count, n, buffer)
                self._advance(n)
        finally:
            if pending is not None:
                pending.result()
        return True

    def _hash_written(self, d: int, at: int, n: int, buffer: memoryview) -> None:
        """Hash the ``n`` bytes of the target ``d`` from ``at`` (just copied there), read into ``buffer``."""
        end = at + n
        while at < end:
            view = buffer[:min(len(buffer), end - at)]
            got = os.preadv(d, [view], at)
            if got == 0:
                raise OSError(errno.EIO, f"the copy of {self.origin} has fewer bytes than were written to it")
            _update(self.hashers, view[:got])
            at += got

    def _buffered_copy(self, s: int, d: int, at: int) -> None:
        """Read each block once, write it and hash it (in a helper thread when there is more than one
        block, while the next one is read and written)."""
        os.lseek(d, self.count, os.SEEK_SET)
        block = min(BLOCK, self.progress_every) if self.progress is not None else BLOCK
        size = min(block, max(self.limit - self.count, 1))
        buffers = [memoryview(bytearray(size)), memoryview(bytearray(size))] if self.hashers else \
            [memoryview(bytearray(size))]
        pending = None  # the hash of the previous block, running
        pool = None
        k = 0
        try:
            while self.count < self.limit:
                view = buffers[k][:min(size, self.limit - self.count)]
                try:
                    n = os.preadv(s, [view], at)
                except OSError as e:
                    raise SourceError(f"reading {self.origin} failed: {_describe(e)}") from e
                if n == 0:
                    break
                block = view[:n]
                _write_all(d, block)
                at += n
                if self.hashers:
                    if pending is not None:
                        pending.result()
                    if pool is None and n < self.limit - self.count:  # more blocks follow: hash beside them
                        pool = _hash_pool()
                    if pool is not None:
                        pending = pool.submit(_update, self.hashers, block)
                    else:
                        _update(self.hashers, block)
                    k = (k + 1) % len(buffers)
                self._advance(n)
        finally:
            if pending is not None:
                pending.result()


def _update(hashers: list, block) -> None:
    for h in hashers:
        h.update(block)


def _write_all(fd: int, block) -> None:
    while block:
        n = os.write(fd, block)
        block = block[n:]


_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _hash_pool() -> ThreadPoolExecutor:
    """The helper threads hashing blocks beside the copy (shared by the files in flight)."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=4, thread_name_prefix="copycat-hash"))
        return _POOL[0]
