"""Reading a source file for a copy: its bytes counted, hashed and checked against the listing.

Contract: ``_SourceReader`` reads at most the listed size of a file (or of a part's byte range),
feeds every byte to the hashers, reports progress about every ``PROGRESS_EVERY`` bytes, and
raises ``SourceChanged`` as soon as the file has more bytes than listed (``SourceError`` when
reading fails). ``_hashers`` / ``_verify`` compute the configured ``checksum`` (md5, sha256 or
none) over the source bytes and check it, and the size, against the listing;
:func:`parse_checksum` reads a listed checksum. ``_result`` is the dict every copy of a unit
returns (see :func:`~.copier.copy_unit`), ``_message`` the error it carries for a failure.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any, Callable, Iterable

from ..storage import is_local
from . import localcopy
from .localcopy import PROGRAMMING_ERRORS as _PROGRAMMING_ERRORS
from .localcopy import SourceChanged as _SourceChanged
from .localcopy import SourceError as _SourceError
from .model import CopyableFile, WorkUnit
from .streams import ConversionError, _describe, _Reader

CHUNK = 4 << 20
"""Bytes per read and write."""
PROGRESS_EVERY = 64 << 20
"""``progress(bytes_so_far)`` is called after about this many source bytes (and at the end)."""
CHECKSUMS = ("md5", "sha256", "none")


class _SourceReader(_Reader):
    """Reads at most ``limit`` bytes of ``f`` (the listed size): hashes them, counts them, reports
    progress, and raises :class:`_SourceChanged` as soon as there are more bytes than expected."""

    def __init__(self, f, origin: str, limit: int, hashers: Iterable, progress: Callable[[int], Any] | None,
                 strict_end: bool = True):
        super().__init__()
        self._f, self._origin, self._limit = f, origin, limit
        self._hashers = list(hashers)
        self._progress, self._next_progress = progress, PROGRESS_EVERY
        self._strict_end = strict_end  # the range ends at the end of the file: a byte more means it grew
        self.count = 0
        self._eof = False

    def _read(self, n: int) -> bytes:
        if self._eof:
            return b""
        left = self._limit - self.count
        if left <= 0 and not self._strict_end:
            self._eof = True
            return b""
        try:
            b = self._f.read(min(n, left) if left > 0 else 1)
        except Exception as e:
            if isinstance(e, _PROGRAMMING_ERRORS):
                raise
            raise _SourceError(f"reading {self._origin} failed: {_describe(e)}") from e
        if left <= 0:
            if b:
                raise localcopy.more_than_listed(self._origin, self._limit)
            self._eof = True
            return b""
        if not b:
            self._eof = True
            return b""
        for h in self._hashers:
            h.update(b)
        self.count += len(b)
        if self._progress is not None and self.count >= self._next_progress:
            self._next_progress = self.count + PROGRESS_EVERY
            self._progress(self.count)
        return b


def _result(unit_or_file, part: int, parts: int) -> dict[str, Any]:
    f = unit_or_file.file if isinstance(unit_or_file, WorkUnit) else unit_or_file
    return {"file": f.id, "origin": f.origin, "destination": f.destination, "dataset": f.dataset,
            "file_set": f.file_set, "part": part, "parts": parts, "status": "ok", "error": None,
            "bytes_read": 0, "bytes_written": 0, "bytes_reused": 0, "seconds": 0.0}


def _checksum_algorithm(config: dict) -> str | None:
    algo = str(config.get("checksum") or "md5").lower()
    if algo not in CHECKSUMS:
        raise ValueError(f"checksum must be one of {CHECKSUMS}, not {algo!r}")
    return None if algo == "none" else algo


def parse_checksum(value: str | None) -> tuple[str, str] | None:
    """``"md5:<hex>"`` -> ``("md5", "<hex>")``; a bare hex digest of 32 / 64 characters is taken as
    md5 / sha256; ``None`` (or anything else) -> ``None`` (nothing to verify against)."""
    if not value:
        return None
    algo, sep, digest = str(value).partition(":")
    if not sep:
        algo, digest = {32: "md5", 64: "sha256"}.get(len(value), ""), value
    algo, digest = algo.strip().lower(), digest.strip().lower()
    if algo not in hashlib.algorithms_available or not digest or any(c not in "0123456789abcdef" for c in digest):
        return None
    return algo, digest


def _hashers(config: dict, f: CopyableFile) -> tuple[dict[str, Any], str | None, tuple[str, str] | None]:
    """The hash objects to feed, the configured algorithm, and what to verify (algorithm, digest)."""
    algo = _checksum_algorithm(config)
    if algo is None:
        return {}, None, None
    hashers = {algo: hashlib.new(algo)}
    expected = parse_checksum(f.checksum)
    if expected and expected[0] not in hashers:
        hashers[expected[0]] = hashlib.new(expected[0])
    return hashers, algo, expected


def _verify(f: CopyableFile, bytes_read: int, hashers: dict, algo: str | None,
            expected: tuple[str, str] | None) -> str | None:
    """The computed checksum ("algo:hex", None without one); raises when the size or the
    checksum is not the source's."""
    if bytes_read != f.size:
        raise _SourceChanged(f"{f.origin} changed during the copy: read {bytes_read} bytes, "
                             f"the listing said {f.size}")
    computed = f"{algo}:{hashers[algo].hexdigest()}" if algo else None
    if expected:
        got = hashers[expected[0]].hexdigest()
        if got != expected[1]:
            raise ConversionError(f"checksum mismatch for {f.origin}: the source's is "
                                  f"{expected[0]}:{expected[1]}, the bytes read give {expected[0]}:{got}")
    return computed


def _output_path(destination: str, relative: str) -> str:
    return posixpath.join(destination, relative) if relative else destination


def _is_failure(e: BaseException) -> bool:
    return not isinstance(e, _PROGRAMMING_ERRORS)


def _message(e: BaseException, f: CopyableFile) -> str:
    if isinstance(e, (ConversionError, _SourceChanged, _SourceError)):
        return str(e)
    if isinstance(e, FileNotFoundError):
        return f"{f.origin}: file not found ({e})"
    return f"{f.origin}: {_describe(e)}"


def record_failure(result: dict[str, Any], e: BaseException, reader, f: CopyableFile) -> bool:
    """Fill a copy's ``result`` after it raised ``e``: the bytes its ``reader`` (or ``None``) had read,
    and for a failure of the file (:func:`_is_failure`) ``status`` failed with the message naming it.
    Returns ``False`` for anything else (a programming error, an interrupt): the caller re-raises it."""
    if reader is not None:
        result["bytes_read"] = reader.count
    if not _is_failure(e) or not isinstance(e, Exception):
        return False
    result.update(status="failed", error=_message(e, f), bytes_written=0)
    return True


def _both_local(source_fs, target_fs) -> bool:
    """Whether the fast path (:mod:`.localcopy`) can copy between these filesystems: both the local disk."""
    return is_local(source_fs) and is_local(target_fs)
