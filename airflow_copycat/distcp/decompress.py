"""The decompressors of a copy: gzip, bzip2, xz and Zstandard, streamed and bounded.

Contract: ``_decompress(stream, converter, label, limits)`` returns a readable stream of the
decompressed bytes of ``stream`` for ``converter`` (``gunzip``, ``bunzip2``, ``unxz``,
``unzstd``; every member, stream or frame of a multi-part file). Corrupt or truncated data
raises :class:`~.streams.ConversionError` naming ``label`` (``_Guard``, which also turns any
codec's exceptions into one; ``_CODEC_ERRORS`` lists them); with ``limits.max_ratio`` the
output is refused past ``max(DECOMPRESS_RATIO_FLOOR, ratio * compressed bytes read)``
(``_Ratio``). ``_sniff_compression`` tells a compressed stream by its magic bytes.
"""

from __future__ import annotations

import lzma
import struct
import tarfile
import zlib

from ..extras import require
from .limits import DECOMPRESS_RATIO_FLOOR, Limits, _size
from .streams import ConversionError, _Counter, _describe, _Reader


def _codec_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, EOFError, zlib.error, lzma.LZMAError, tarfile.TarError,
                                         struct.error]
    try:
        errors.append(_zstd().ZstdError)
    except ImportError:  # pragma: no cover - a dependency
        pass
    return tuple(errors)


class _Guard(_Reader):
    """Reads ``inner`` and turns a codec's exceptions into a :class:`ConversionError` naming
    ``label``; exceptions of the source (anything else) pass through."""

    def __init__(self, inner, label: str, what: str):
        super().__init__()
        self._inner, self._label, self._what = inner, label, what

    def _read(self, n: int) -> bytes:
        try:
            return self._inner.read(n)
        except ConversionError:
            raise
        except _CODEC_ERRORS as e:
            raise ConversionError(f"corrupt or truncated {self._what} data in {self._label}: {_describe(e)}") from e

    def close(self) -> None:
        try:
            self._inner.close()
        except Exception:  # noqa: BLE001 - closing a broken codec
            pass
        super().close()


class _Ratio(_Reader):
    """The output of a decompressor, refused past ``max(DECOMPRESS_RATIO_FLOOR, ratio * input)``
    (``input``: the compressed bytes it has read so far)."""

    def __init__(self, inner, compressed: _Counter, ratio: float, label: str, what: str):
        super().__init__()
        self._inner, self._compressed, self._ratio = inner, compressed, ratio
        self._label, self._what = label, what
        self.count = 0

    def _read(self, n: int) -> bytes:
        b = self._inner.read(n)
        self.count += len(b)
        if self.count > DECOMPRESS_RATIO_FLOOR and self.count > self._ratio * self._compressed.count:
            raise ConversionError(
                f"{self._label}: {self._what} data expands more than decompress.max.ratio = {self._ratio:g} times "
                f"({_size(self.count)} from {_size(self._compressed.count)}); refused as a likely decompression "
                "bomb -- raise decompress.max.ratio to allow it")
        return b

    def close(self) -> None:
        self._inner.close()
        super().close()


def _zstd():
    try:
        from compression import zstd  # Python >= 3.14
    except ImportError:
        zstd = require("backports.zstd", "distcp", "the unzstd converter")
    return zstd


def _decompress(stream, converter: str, label: str, limits: Limits | None = None):
    if limits is not None and limits.max_ratio:
        compressed = stream = _Counter(stream)
    if converter == "gunzip":
        import gzip

        inner = gzip.GzipFile(fileobj=stream, mode="rb")
        what = "gzip"
    elif converter == "bunzip2":
        import bz2

        inner = bz2.BZ2File(stream, mode="rb")
        what = "bzip2"
    elif converter == "unxz":
        inner = lzma.LZMAFile(stream, mode="rb")
        what = "xz"
    elif converter == "unzstd":
        inner = _zstd().ZstdFile(stream, mode="rb")
        what = "zstd"
    else:  # pragma: no cover - callers pass known names
        raise ValueError(converter)
    out = _Guard(inner, label, what)
    if limits is not None and limits.max_ratio:
        out = _Ratio(out, compressed, limits.max_ratio, label, what)
    return out


def _sniff_compression(head: bytes) -> str | None:
    """The decompressor of a stream starting with ``head`` (10 bytes), from its magic bytes. Tar
    headers start with a file name, which never begins with these bytes."""
    if head.startswith(b"\x1f\x8b"):
        return "gunzip"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "unxz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "unzstd"
    if head.startswith(b"BZh") and head[3:4] in (b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9") \
            and head[4:10] in (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90"):
        return "bunzip2"
    return None


_CODEC_ERRORS = _codec_errors()
