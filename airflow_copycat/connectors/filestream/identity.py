"""Which physical file an offset belongs to: the offset fields and :class:`Identity`.

A FileStreamSource offset is ``{"position": <byte after the last line read>}``
plus, since Copycat, the file's identity (inode and a fingerprint of its first
bytes), so that a rotated file is recognised under its new name::

    {"position": 1234, "inode": 5521, "fingerprint": "<sha256 hex>", "fingerprint.length": 1024}

A partition whose file at its path is read by *another* partition (a glob
that matches the live name and the rotated names: ``app.log.1`` now holds what
partition ``app.log`` read) commits a *hand-off* offset that adds
``"read.as": "<that partition's filename>"``: the identity names the file, the
partition reads none of it (see :mod:`.rotation`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

FILENAME_FIELD = "filename"
POSITION_FIELD = "position"
INODE_FIELD = "inode"
FINGERPRINT_FIELD = "fingerprint"
FINGERPRINT_LENGTH_FIELD = "fingerprint.length"
READ_AS_FIELD = "read.as"


@dataclass(frozen=True)
class Identity:
    """Which physical file an offset belongs to: inode plus a fingerprint of its first bytes."""

    inode: int
    fingerprint: str
    length: int

    @classmethod
    def of(cls, fd: int, max_bytes: int) -> "Identity":
        """The identity of the open file ``fd``, fingerprinting ``min(size, max_bytes)`` bytes."""
        st = os.fstat(fd)
        head = os.pread(fd, min(st.st_size, max_bytes), 0)
        return cls(st.st_ino, hashlib.sha256(head).hexdigest(), len(head))

    @classmethod
    def from_offset(cls, offset: dict) -> "Identity | None":
        """The identity stored in ``offset``, or ``None`` for a position-only (Kafka Connect) offset."""
        try:
            return cls(int(offset[INODE_FIELD]), str(offset[FINGERPRINT_FIELD]), int(offset[FINGERPRINT_LENGTH_FIELD]))
        except (KeyError, TypeError, ValueError):
            return None

    def matches_content(self, fd: int) -> bool:
        """Whether the first ``length`` bytes of ``fd`` still hash to ``fingerprint``."""
        head = os.pread(fd, self.length, 0) if self.length else b""
        return len(head) == self.length and hashlib.sha256(head).hexdigest() == self.fingerprint

    def is_file(self, fd: int) -> bool:
        """Whether ``fd`` is this file: the same inode and still the same first bytes."""
        return os.fstat(fd).st_ino == self.inode and self.matches_content(fd)

    def as_offset(self, position: int) -> dict:
        return {POSITION_FIELD: position, INODE_FIELD: self.inode,
                FINGERPRINT_FIELD: self.fingerprint, FINGERPRINT_LENGTH_FIELD: self.length}


def read_as(offset: dict | None) -> str | None:
    """The partition that reads the file of a hand-off ``offset``, ``None`` for an ordinary offset."""
    if not offset:
        return None
    value = offset.get(READ_AS_FIELD)
    return str(value) if value else None
