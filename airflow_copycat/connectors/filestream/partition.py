"""One FileStream partition (one path) over time: the file at the path, the rotated-away
files it must finish first, resuming from a committed offset, truncation, and files at the
path that another partition reads (see :mod:`.rotation`)."""

from __future__ import annotations

import logging
import os
from typing import Callable

from airflow_copycat.connect import ConnectException
from airflow_copycat.connect.assignment import canonical

from .files import FilePool, OpenFile
from .identity import FILENAME_FIELD, INODE_FIELD, POSITION_FIELD, READ_AS_FIELD, Identity, read_as
from .rotation import SiblingOffsets, _same_file, find_previous

log = logging.getLogger("airflow_copycat.connectors.filestream.source")

Emit = Callable[[bytes, int, int, int, OpenFile], None]
"""Receives ``(data, start, end, count, file)``: ``count`` lines read from ``file``'s bytes
``start..end``. Line by line, ``data`` is the line without its ``\\n`` and ``count`` is 1; many at
once (:meth:`OpenFile.next_lines`), ``data`` holds each line with its ``\\n``. A last line without
``\\n`` (a finished rotated file) always comes alone, as ``(line, start, end, 0, file)``."""
Mark = Callable[[dict], None]
"""Receives an offset to commit without a line (a hand-off, see :mod:`.rotation`)."""


class TrackedPartition:
    """One partition (one path): the file now at the path, preceded by rotated-away
    files that must be finished first (:attr:`draining`).

    Files are opened when read and closed once caught up, so an idle partition
    holds no descriptor. While no file is open at the path, :attr:`_resume_offset`
    says where to continue (an offset as committed: reopening checks inode and
    fingerprint exactly as a new run does); ``None`` means byte 0 of whatever appears. A
    hand-off offset (``read.as``) there means the file at the path is read by another
    partition: this one reads nothing until another file is at the path."""

    def __init__(self, filename: str, fingerprint_bytes: int, pool: FilePool, grace_ms: int,
                 siblings: SiblingOffsets | None = None):
        self.filename = filename
        self.partition = {FILENAME_FIELD: filename}  # handed out with every record: never mutated
        self.fingerprint_bytes = fingerprint_bytes
        self.pool = pool
        self.grace_ns = grace_ms * 1_000_000
        self.draining: list[OpenFile] = []
        self.current: OpenFile | None = None
        self.caught_up = False
        self._resume_offset: dict | None = None
        self.siblings = siblings
        self._handoff: dict | None = None  # a hand-off to commit once :attr:`draining` is done

    # ---- start

    def resume(self, committed: dict | None) -> None:
        """Continue at the committed offset (``None``: the start of the file). Nothing is
        opened until the partition is read; the offset's position is checked now."""
        if committed is not None:
            self._committed_position(committed)
        self._resume_offset = committed

    def _open_current(self) -> None:
        """Open the file at the path and position it per :attr:`_resume_offset`: if the path
        no longer holds the file of that offset, queue the old file (found by inode and
        fingerprint) in :attr:`draining` and start the one at the path from byte 0."""
        committed = self._resume_offset
        fd = self.pool.open(self.filename)
        if committed is None:
            self._start_new(fd)
            return
        position = self._committed_position(committed)
        if read_as(committed) is not None:  # another partition reads the file of this offset
            handed = Identity.from_offset(committed)
            if fd is not None and handed is not None and handed.is_file(fd):
                self.pool.close(fd)  # still at the path: nothing to read
                return
            self._resume_offset = None  # it moved on: what is at the path now is new
            self._start_new(fd)
            return
        identity = Identity.from_offset(committed)
        if identity is None:  # a position-only offset, as Kafka Connect commits it
            if fd is not None:  # else: keep it until the file appears
                self._resume_offset = None
                self._resume_same(fd, position)
            return
        self._resume_offset = None
        same_inode = fd is not None and os.fstat(fd).st_ino == identity.inode
        if same_inode and identity.matches_content(fd):
            self._resume_same(fd, position)
            return
        self._recover_previous(identity, position, in_place=same_inode)
        self._start_new(fd)

    def _start_new(self, fd: int | None) -> None:
        """Read the file ``fd`` at the path from byte 0, unless another partition reads it
        (:meth:`SiblingOffsets.handoff`): then read nothing of it and commit a hand-off offset
        (after the rotated files queued before it)."""
        handoff = None if fd is None or self.siblings is None else self.siblings.handoff(self.filename, fd)
        if handoff is None:
            self._set_current(fd, 0)
            return
        log.info("%s now holds the file that partition %s read (inode %s) before it was rotated: that "
                 "partition finishes it; it is not read again as %s.", self.filename, handoff[READ_AS_FIELD],
                 handoff[INODE_FIELD], self.filename)
        self.pool.close(fd)
        self.current, self._resume_offset, self._handoff = None, handoff, handoff

    def _resume_same(self, fd: int, position: int) -> None:
        self._set_current(fd, position)
        size = self.current.size()
        if size < position:
            self._restart_truncated(self.current, position, size)

    def _committed_position(self, committed: dict) -> int:
        value = committed.get(POSITION_FIELD)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or int(value) != value:
            raise ConnectException(
                f"{self.filename}: committed offset {committed!r} has no valid 'position' (a byte offset, a "
                f"non-negative integer); delete or correct the committed offset of partition "
                f"{canonical(self.partition)}")
        return int(value)

    def _set_current(self, fd: int | None, position: int) -> None:
        self.current = None if fd is None else OpenFile(
            self.filename, fd, Identity.of(fd, self.fingerprint_bytes), position, self.pool)

    def _locate_previous(self, identity: Identity, position: int, how: str) -> OpenFile | None:
        """The file of ``identity`` (no longer at the path), open and positioned at ``position``;
        ``None`` with a warning that what it held after ``position`` is lost."""
        previous = find_previous(self.filename, identity, position, self.fingerprint_bytes, self.pool)
        if previous is None:
            log.warning(
                "%s: the file read before (inode %d, %d bytes read) %s and no file in %s holds its content; "
                "any bytes it had after byte %d were not read and are lost (how many is unknown: the file is "
                "gone). Continuing with the next file of %s.",
                self.filename, identity.inode, position, how, os.path.dirname(self.filename), position,
                self.filename)
            return None
        size = previous.size()
        if size < position:
            log.warning("%s: its rotated file %s is shorter (%d bytes) than the %d bytes already read; "
                        "not reading it again.", self.filename, previous.path, size, position)
            previous.close()
            return None
        previous.seek(position)
        return previous

    def _recover_previous(self, identity: Identity, position: int, *, in_place: bool) -> None:
        """The committed file is no longer at the path: queue it to be finished from
        ``position``, or warn that what it held after ``position`` is lost."""
        how = "was truncated or rewritten in place" if in_place else "was rotated away"
        previous = self._locate_previous(identity, position, how)
        if previous is not None:
            log.info("%s %s; reading the %d unread bytes of %s (from byte %d) before the file now at the path.",
                     self.filename, how, previous.size() - position, previous.path, position)
            self.draining.append(previous)

    def _restart_truncated(self, f: OpenFile, position: int, size: int) -> None:
        """``f`` (same inode) shrank below ``position`` or its first bytes changed: finish a
        ``copytruncate`` copy of the old content if there is one, and read ``f`` again from 0."""
        log.warning("%s was truncated or rewritten in place (%d bytes now, %d bytes read before); "
                    "reading it again from byte 0.", self.filename, size, position)
        self._recover_previous(f.identity, position, in_place=True)
        f.seek(0)
        f.identity = Identity.of(f.fd, self.fingerprint_bytes)

    def _reopen_rotated(self, f: OpenFile) -> bool:
        """Reopen the closed rotated file ``f`` (``draining[0]``): at its last known path if the
        same inode and fingerprint are still there, else found again in the directory.
        ``False`` (and dropped from :attr:`draining`, with a warning) when it is gone."""
        fd = self.pool.open(f.path)
        if fd is not None:
            if os.fstat(fd).st_ino == f.identity.inode and f.identity.matches_content(fd):
                f.attach(fd)
                return True
            self.pool.close(fd)
        previous = self._locate_previous(f.identity, f.position, "was rotated away")
        if previous is None:
            self.draining.remove(f)
            return False
        self.draining[self.draining.index(f)] = previous
        return True

    # ---- reading

    def _active(self) -> OpenFile | None:
        """The file to read next, open: the oldest rotated one, else the one at the path
        (opened, and checked against :attr:`_resume_offset`, if it is not open)."""
        self.pool.active = None
        while True:
            if self.draining:
                f = self.draining[0]
                if f.fd < 0 and not self._reopen_rotated(f):
                    continue
                f = self.draining[0]
            else:
                if self.current is not None and self.current.fd < 0:
                    self._resume_offset, self.current = self.current.offset(), None
                if self.current is None:
                    self._open_current()
                    if self.draining:
                        continue
                f = self.current
                if f is None:
                    return None
            self.pool.use(f)
            return f

    def read(self, budget: int, emit: Emit, mark: Mark, *, many: bool = False) -> int:
        """Hand up to ``budget`` lines to ``emit`` (one at a time, or as many as are buffered
        when ``many``) and return how many; hand-off offsets go to ``mark``, in order with the
        lines. Sets :attr:`caught_up` (and closes the partition's files) when it stopped
        because every file of the partition is at its end."""
        done, self.caught_up = 0, False
        while done < budget:
            f = self._active()
            if self._handoff is not None and not self.draining:
                mark(self._handoff)
                self._handoff = None
            if f is None:
                break
            got = f.next_lines(budget - done, self.fingerprint_bytes) if many else \
                f.next_line(self.fingerprint_bytes)
            if got is None:
                if f.rotated:
                    if f.has_tail() and f.idle_ns() < self.grace_ns:
                        break  # the writer may still complete the line: hold it, and the files after it
                    tail = f.take_tail()
                    self.draining.remove(f)
                    f.close()
                    if tail is None:
                        continue
                    emit(tail[0], tail[1], tail[2], 0, f)
                    done += 1
                    continue
                elif self._at_end(f):
                    continue
                else:
                    break
            if many:
                emit(got[0], got[1], got[2], got[3], f)
                done += got[3]
            else:
                emit(got[0], got[1], got[2], 1, f)
                done += 1
        else:
            return done
        self.caught_up = True
        self.close()
        return done

    def _at_end(self, f: OpenFile) -> bool:
        """The file at the path is at its end: check whether it was truncated or rotated.
        Returns ``True`` when there is something new to read."""
        size = f.size()
        if size < f.read_pos or not f.identity.matches_content(f.fd):
            self._restart_truncated(f, f.position, size)
            return True
        if _same_file(f.fd, self.filename) is not False:
            return False  # still the file at the path, or nothing at the path yet
        log.info("%s was rotated while being read: finishing the old file, then reading the new one from byte 0.",
                 self.filename)
        f.rotated = True
        self.draining.append(f)
        self.current, self._resume_offset = None, None
        return True

    def close(self) -> None:
        """Close every open file of the partition; each reopens when read again."""
        for f in self.draining + ([self.current] if self.current else []):
            f.close()

