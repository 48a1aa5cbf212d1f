"""Finding a file again after rotation, and which partition reads a rotated file.

Rotation moves the file a partition was reading away from its path
(``app.log`` -> ``app.log.1``, a new ``app.log``; or ``copytruncate``: a copy,
then the file truncated in place). :func:`find_previous` finds the moved file
in the same directory so that its partition finishes it.

When the connector's globs also match the rotated names, the rotated file is
at the path of *another* partition too. Exactly one partition must read it:
the one whose committed offset names it (by inode and fingerprint), which
finishes it from its committed position. :class:`SiblingOffsets` answers, for
a file a partition is about to read from byte 0, which other partition's
committed offset names it; the partition then reads none of it and commits a
hand-off offset (``read.as``, see :mod:`.identity`), which in turn names the
file for the next rotation (``app.log.1`` -> ``app.log.2``).
"""

from __future__ import annotations

import os
import stat

from .files import FilePool, OpenFile
from .identity import FILENAME_FIELD, POSITION_FIELD, READ_AS_FIELD, Identity, read_as


def _same_file(fd: int, path: str) -> bool | None:
    """Whether ``path`` still names the file open as ``fd``; ``None`` when nothing is at ``path``."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def find_previous(path: str, identity: Identity, position: int, fingerprint_bytes: int,
                  pool: FilePool) -> "OpenFile | None":
    """Open the file that was read as ``path`` before it was rotated away, or ``None``.

    Looks in ``path``'s directory, first for the same inode with a matching
    fingerprint (rename rotation), then -- for ``copytruncate`` rotation -- for
    another file at least ``position`` bytes long whose first bytes match the
    fingerprint (newest first). Fingerprint-only matching needs a non-empty fingerprint.
    """
    directory = os.path.dirname(path) or "."
    listed = pool.list_dir(directory)
    if listed is None:
        return None
    entries = [e for e in listed if os.path.join(directory, e.name) != path]
    by_inode, by_content = [], []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if st.st_ino == identity.inode:
            by_inode.append(entry.path)
        elif identity.length and st.st_size >= max(position, identity.length):
            by_content.append((st.st_mtime, entry.path))
    candidates = by_inode + [p for _, p in sorted(by_content, reverse=True)]
    for candidate in candidates:
        fd = pool.open(candidate)
        if fd is None:
            continue
        if identity.matches_content(fd):
            return OpenFile(candidate, fd, Identity.of(fd, fingerprint_bytes), 0, pool, rotated=True)
        pool.close(fd)
    return None


def _holds(path: str, identity: Identity, pool: FilePool) -> bool:
    """Whether the file at ``path`` is (still) the file of ``identity``."""
    fd = pool.open(path)
    if fd is None:
        return False
    try:
        return identity.is_file(fd)
    finally:
        pool.close(fd)


class SiblingOffsets:
    """The committed offsets of the files beside a task's partitions, read once at the start of a run.

    ``offsets`` maps each filename (any partition of the connector: the task's own, and every
    file in their directories) to its committed offset; only offsets with an identity count.
    """

    def __init__(self, offsets: dict[str, dict], fingerprint_bytes: int, pool: FilePool):
        self.fingerprint_bytes = fingerprint_bytes
        self.pool = pool
        self.by_dir: dict[str, list[tuple[str, dict, Identity]]] = {}
        for filename, offset in sorted(offsets.items()):
            identity = Identity.from_offset(offset) if isinstance(offset, dict) else None
            if identity is not None:
                self.by_dir.setdefault(os.path.dirname(filename), []).append((filename, offset, identity))

    @staticmethod
    def partitions_near(filenames: list[str], pool: FilePool) -> list[dict]:
        """The partitions whose offsets :class:`SiblingOffsets` needs: ``filenames`` and every
        regular file in their directories."""
        names = set(filenames)
        for directory in sorted({os.path.dirname(f) for f in filenames}):
            for entry in pool.list_dir(directory or ".") or []:
                try:
                    if entry.is_file(follow_symlinks=False):
                        names.add(os.path.join(directory, entry.name))
                except OSError:
                    continue
        return [{FILENAME_FIELD: n} for n in sorted(names)]

    def handoff(self, path: str, fd: int) -> dict | None:
        """The hand-off offset for the file open as ``fd`` at ``path`` if another partition reads it,
        else ``None`` (``path``'s partition reads it from byte 0).

        Another partition reads it when its committed offset names this file: the same inode
        and first bytes (rename rotation; also a hand-off offset of its own, the file having
        moved on since), or, for an ordinary offset whose file is no longer at its path, the
        file :func:`find_previous` recovers for it (``copytruncate`` rotation: a copy)."""
        siblings = [s for s in self.by_dir.get(os.path.dirname(path), ()) if s[0] != path]
        if not siblings:
            return None
        inode = os.fstat(fd).st_ino
        for filename, offset, identity in siblings:
            if identity.inode == inode and identity.matches_content(fd):
                return self._handoff(filename, offset, identity, inode)
        size = os.fstat(fd).st_size
        for filename, offset, identity in siblings:
            position = offset.get(POSITION_FIELD)
            if (read_as(offset) is None and identity.length and isinstance(position, int)
                    and size >= max(position, identity.length) and identity.matches_content(fd)
                    and not _holds(filename, identity, self.pool)):
                copy = find_previous(filename, identity, position, self.fingerprint_bytes, self.pool)
                if copy is not None:
                    same = os.fstat(copy.fd).st_ino == inode
                    copy.close()
                    if same:
                        return self._handoff(filename, offset, identity, inode)
        return None

    @staticmethod
    def _handoff(filename: str, offset: dict, identity: Identity, inode: int) -> dict:
        """The hand-off offset of the file ``inode`` (whose first bytes are ``identity``'s) to the
        partition ``filename`` (or to the one it handed off to), at that partition's position."""
        own = Identity(inode, identity.fingerprint, identity.length)
        return {**own.as_offset(offset.get(POSITION_FIELD, 0)), READ_AS_FIELD: read_as(offset) or filename}
