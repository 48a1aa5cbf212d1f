"""The readable streams every converter of a copy is built of, and the error they raise.

Contract: :class:`ConversionError` is what any converter raises for data it cannot convert
(corrupt or truncated input, a refused archive entry, a failed decryption), its message naming
the file (and entry); exceptions of the source stream itself pass through unchanged. ``_Reader``
is the base of the converters' streams (a subclass implements ``_read(n)``: up to ``n > 0``
bytes, ``b""`` at the end); ``_Chunked`` serves one refilled a chunk at a time, ``_Prefixed``
puts back bytes already read, ``_Counter`` counts (and optionally bounds) what is read.
:func:`drain` and :func:`copy_stream` read a stream to its end in ``CHUNK`` pieces.
"""

from __future__ import annotations

import io
from typing import Any, Callable

CHUNK = 4 << 20
"""Read size used when this module copies or drains a stream."""


class ConversionError(Exception):
    """The data of a file cannot be converted: corrupt or truncated input, an archive entry
    that is refused, a failed decryption. The message names the file (and entry)."""


# --------------------------------------------------------------------------- streams


class _Reader(io.RawIOBase):
    """Base of this module's streams: subclasses implement ``_read(n)`` (n > 0, returns up to
    n bytes, b"" at the end)."""

    def readable(self) -> bool:
        return True

    def _read(self, n: int) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            return self.readall()
        return self._read(n) if n else b""

    def readall(self) -> bytes:
        parts = []
        while True:
            b = self._read(CHUNK)
            if not b:
                return b"".join(parts)
            parts.append(b)

    def readinto(self, buffer) -> int:
        b = self._read(len(buffer))
        buffer[: len(b)] = b
        return len(b)


class _Counter(_Reader):
    """Counts the bytes read from ``inner``; past ``limit`` (when set) raises ``error()``."""

    def __init__(self, inner):
        super().__init__()
        self._inner = inner
        self.count = 0
        self.limit: int | None = None
        self.error: Callable[[], ConversionError] | None = None

    def _read(self, n: int) -> bytes:
        b = self._inner.read(n)
        self.count += len(b)
        if self.limit is not None and self.count > self.limit:
            raise self.error()
        return b


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if type(e).__name__ in text else f"{type(e).__name__}: {text}"


def _read_exact(stream, n: int) -> bytes:
    """Up to ``n`` bytes: fewer only at the end of ``stream``."""
    parts, left = [], n
    while left:
        b = stream.read(left)
        if not b:
            break
        parts.append(b)
        left -= len(b)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class _Chunked(_Reader):
    """A stream served from ``_buf``, refilled a chunk at a time by ``_fill()`` until ``_done``."""

    def _read(self, n: int) -> bytes:
        while self._pos >= len(self._buf):
            if self._done:
                return b""
            self._fill()
        b = self._buf[self._pos:self._pos + n]
        self._pos += len(b)
        return b


class _Prefixed(_Reader):
    """``head`` (bytes already read from ``stream``), then the rest of ``stream``."""

    def __init__(self, head: bytes, stream):
        super().__init__()
        self._head, self._stream = head, stream

    def _read(self, n: int) -> bytes:
        if self._head:
            b, self._head = self._head[:n], self._head[n:]
            return b
        return self._stream.read(n)


def drain(stream, chunk: int = CHUNK) -> int:
    """Read ``stream`` to its end; the number of bytes read."""
    n = 0
    while True:
        b = stream.read(chunk)
        if not b:
            return n
        n += len(b)


def copy_stream(src, write: Callable[[bytes], Any], chunk: int = CHUNK) -> int:
    """Copy ``src`` to ``write`` in chunks; the number of bytes."""
    n = 0
    while True:
        b = src.read(chunk)
        if not b:
            return n
        write(b)
        n += len(b)
