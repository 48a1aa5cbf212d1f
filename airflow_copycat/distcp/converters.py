"""Streaming converters of a copy: decompress, untar, encrypt and decrypt -- chained, in order,
without ever holding a whole file in memory.

Gobblin Distcp decorates the input stream of a copied file (``UnGzipConverter``,
``DecryptConverter``) and has a special writer expand a tar
(``TarArchiveInputStreamDataWriter``). Here every converter is a function of
a readable binary stream to another, and ``untar`` turns one stream into many:

======================  ========================================================  =================================
converter               what it does to the bytes                                 what it does to the name
======================  ========================================================  =================================
``gunzip``              gzip (every member of a multi-member file)                drops ``.gz``/``.gzip``;
                                                                                  ``.tgz`` -> ``.tar``
``bunzip2``             bzip2 (multi-stream)                                      drops ``.bz2``; ``.tbz2``/``.tbz``
                                                                                  -> ``.tar``
``unxz``                xz / lzma                                                 drops ``.xz``/``.lzma``;
                                                                                  ``.txz`` -> ``.tar``
``unzstd``              Zstandard (multi-frame)                                   drops ``.zst``/``.zstd``;
                                                                                  ``.tzst`` -> ``.tar``
``decompress``          one of the four above, picked by the current name's       as the converter it picks; a name
                        extension (``.gz .tgz .bz2 .xz .zst``...); a name          without a known extension passes
                        without a known extension passes through unchanged         through
``untar``               expands a tar into its regular files; a compressed tar    the archive becomes a directory:
                        (gzip, bzip2, xz, zstd: told by its magic bytes) is       drops ``.tar`` (or ``.tar.gz``,
                        decompressed first, so ``untar`` alone reads a ``.tgz``   ``.tgz``, ``.tar.xz``...)
``encrypt``/``decrypt``  the age format, or the earlier AES-256-GCM stream (see     adds ``.enc`` / drops ``.enc``
                        below and :mod:`.encryption`)                              or ``.age``
======================  ========================================================  =================================

The listing decides a file's destination (``listing.destination_name``); this
module only produces the bytes, and names the outputs *inside* an archive with
:func:`converted_name` (:func:`destination_for` applies the same rules to a
relative path). The entry point is :func:`open_outputs`::

    for path, out in open_outputs(stream, origin, ("gunzip", "untar"), key):
        ...  # path: relative to the file's destination ("" = the destination itself)
             # out: a readable binary stream, or a Link (an archive link to another output)

Contract of :func:`open_outputs`
--------------------------------
* It yields ``(path, stream)`` pairs lazily; each ``stream`` must be read to its
  end (``read(n)`` until ``b""``) *before* the next pair is asked for (the
  outputs of an archive come one after the other from a single pass over its
  bytes). Without ``untar`` there is exactly one output, with path ``""``.
* With ``untar`` there is one output per regular file of the archive, its path
  the entry's path inside the archive (normalised: no ``./``, no ``//``), in
  archive order; directories produce nothing (empty ones are not kept); device
  and FIFO entries are skipped. Converters after ``untar`` apply to every
  entry (``untar,decompress`` decompresses the ``*.gz`` files of an archive;
  ``untar,untar`` expands the archives inside an archive into directories).
* A symbolic or hard link whose target stays inside the archive is yielded as
  ``(path, Link(target=...))``, ``target`` being the path of the output (file, or
  directory of outputs) it points to, relative to the same destination; the
  caller materialises it as a copy (object stores have no links).
* **Refused, with a** :class:`ConversionError` **naming the archive and the entry**:
  an absolute entry path (``/etc/passwd``, ``C:...``), a path with a ``..``
  component, and a symlink or hard link whose target is absolute or leaves the
  archive root. The error is raised when the entry is reached (outputs before
  it may already have been yielded: the caller discards them).
* Corrupt or truncated input of any converter -- a bad gzip header or CRC, a gzip
  or bzip2/xz/zstd stream that ends early, a tar that ends without its
  end-of-archive blocks or with a bad header, an encrypted file that fails
  authentication -- raises :class:`ConversionError` naming the file (and the
  entry, for a file inside an archive). After the last output of an archive
  the rest of its input is read (so a compressor's trailing checksum is
  verified and every source byte is seen).
* Exceptions raised by ``stream`` itself (the source) pass through unchanged,
  so a caller can tell a failing source from corrupt data.

Bounds (:class:`Limits`, one per source file; keys of the copy job)
--------------------------------------------------------------------
A small hostile file must not fill the disk or the memory of a task, so the
expansion is bounded, each bound raising a :class:`ConversionError` that names the
file, the entry and the key to raise:

* ``decompress.max.ratio`` (default 1000; 0: no bound): every decompressor
  (explicit, or the one ``untar`` picks for a compressed tar) may produce at most
  ``max(16 MiB, ratio * compressed bytes read so far)`` bytes -- checked as
  bytes come out, so a gzip/bzip2/xz/zstd bomb stops after at most a few MiB
  more than the bound. (gzip's own limit is about 1032:1; only long runs of one
  byte get near 1000.)
* ``untar.max.bytes`` (default 100 GiB; 0: no bound): the bytes of all outputs
  of the archives of one file (nested ones included), counted as they are
  produced (an entry whose header already claims too much fails at once); the
  copier adds the bytes of the copies it makes for links
  (:meth:`Limits.add_bytes`). When the size of the source file is known
  (``Limits.input_bytes``, set by the copier) the same bytes are also bounded by
  ``max(16 MiB, decompress.max.ratio * that size)``: links cost no bytes in an
  archive, so a few KiB of links to links would otherwise expand to the whole
  ``untar.max.bytes``.
* ``untar.max.entries`` (default 1,000,000; 0: no bound): the entries (headers) of
  the archives of one file; the copier adds one per copy made for a link.
* Not configurable: a GNU long-name/long-link or pax header larger than
  ``TAR_MAX_HEADER`` (1 MiB) is refused before tarfile reads it (tarfile reads it
  whole into memory), as is an entry whose headers take more than that in all
  (GNU sparse maps) or are chained more than ``TAR_MAX_CHAINED_HEADERS`` deep.

Encrypted formats (``encrypt`` writes one, ``decrypt`` reads both)
--------------------------------------------------------------------
With ``encryption.recipients`` (``age1...`` keys) or ``encryption.passphrase``, ``encrypt``
writes the standard age format (:mod:`.age`: X25519 or scrypt recipients, ChaCha20-Poly1305
STREAM in 64 KiB chunks), which ``age -d`` and every age library decrypt; ``decrypt`` reads it
with ``encryption.identity`` or ``encryption.passphrase``. With only ``encryption.key``, the
earlier copycat format below is written; ``decrypt`` reads either, told apart by the first
bytes (:mod:`.encryption` holds the keys and the choice).

The earlier copycat format is the online authenticated-encryption "STREAM"
construction (Hoang, Reyhanitabar, Rogaway, Vizár 2015; the design of Tink's
AES-GCM-HKDF streaming AEAD), so a file
is encrypted and decrypted chunk by chunk and any truncation, extension,
reordering or change is detected::

    header  = MAGIC (8 bytes: b"CPYCAT\\x00\\x01")
            | chunk size (4 bytes, big-endian: plaintext bytes per chunk, at most 16 MiB)
            | salt (16 random bytes)
            | nonce prefix (7 random bytes)                       -- 35 bytes in all
    file key = HKDF-SHA256(encryption.key, salt, info=b"copycat distcp AES-256-GCM stream" + MAGIC), 32 bytes
    chunk i  = AES-256-GCM(file key).encrypt(nonce_i, plaintext_i, associated data = header)
               (ciphertext || 16-byte tag), i = 0, 1, ...
    nonce_i  = nonce prefix (7) | i (4 bytes, big-endian) | 0x01 for the last chunk, 0x00 otherwise

Every chunk but the last holds exactly ``chunk size`` plaintext bytes; the last
holds 0 to ``chunk size`` (an empty file is one empty final chunk), so a
ciphertext is ``35 + size + 16 * max(1, ceil(size / chunk size))`` bytes. A file
cut at a chunk boundary ends in a chunk sealed as "not last", and a chunk
moved, dropped or appended carries the wrong counter or flag: all fail
authentication. A fresh salt per file gives every file its own key, so
random nonces never repeat under one key. ``encryption.key`` is the 32-byte
master key as 64 hex characters. At most 2**32 chunks per file (4 PiB with
1 MiB chunks).

Why over 500 lines: the streaming readers every converter is built from (decompression, untar with
its limits, the counters and guards) and the earlier encryption format they share; the age format
and the choice of format live apart (:mod:`.age`, :mod:`.encryption`).
"""

from __future__ import annotations

import io
import lzma
import os
import posixpath
import re
import struct
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Union

from ..extras import require

CHUNK = 4 << 20
"""Read size used when this module copies or drains a stream."""

UNTAR_MAX_BYTES = 100 << 30
"""Default of ``untar.max.bytes``: the bytes the archives of one file may expand to (100 GiB)."""
UNTAR_MAX_ENTRIES = 1_000_000
"""Default of ``untar.max.entries``: the entries of the archives of one file, link copies included."""
DECOMPRESS_MAX_RATIO = 1000
"""Default of ``decompress.max.ratio``: output bytes per compressed byte read."""
DECOMPRESS_RATIO_FLOOR = 16 << 20
"""Any stream may decompress to this many bytes whatever the ratio (a tiny file is not refused)."""
TAR_MAX_HEADER = 1 << 20
"""Largest GNU long-name/long-link or pax header accepted (tarfile holds it in memory)."""
TAR_MAX_CHAINED_HEADERS = 16
"""Most extension headers (pax, long names) before one entry."""

ENC_MAGIC = b"CPYCAT\x00\x01"
ENC_CHUNK = 1 << 20
"""Plaintext bytes per encrypted chunk written by ``encrypt``."""
ENC_MAX_CHUNK = 16 << 20
"""Largest chunk size ``decrypt`` accepts (bounds its memory)."""
ENC_HEADER = len(ENC_MAGIC) + 4 + 16 + 7
ENC_TAG = 16
_ENC_INFO = b"copycat distcp AES-256-GCM stream" + ENC_MAGIC

_TAR_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".tbz", ".txz", ".tzst", ".tar")
STREAM_CONVERTERS = ("gunzip", "bunzip2", "unxz", "unzstd", "decompress", "encrypt", "decrypt")

# (suffix, replacement) per decompressor: the name a decompressed file gets.
_SUFFIXES = {
    "gunzip": ((".tgz", ".tar"), (".gz", ""), (".gzip", "")),
    "bunzip2": ((".tbz2", ".tar"), (".tbz", ".tar"), (".bz2", "")),
    "unxz": ((".txz", ".tar"), (".xz", ""), (".lzma", "")),
    "unzstd": ((".tzst", ".tar"), (".zst", ""), (".zstd", "")),
}


class ConversionError(Exception):
    """The data of a file cannot be converted: corrupt or truncated input, an archive entry
    that is refused, a failed decryption. The message names the file (and entry)."""


@dataclass(frozen=True)
class Link:
    """An archive entry that is a link to another output of the same archive.

    ``target``: the path of the output it points to -- a file, or a directory whose
    outputs it stands for -- relative to the same destination as the link's own
    path (never absolute, never outside). ``kind``: ``"symlink"`` or ``"hardlink"``.
    ``entry``: the entry as named in the archive, for messages."""

    target: str
    kind: str
    entry: str


Output = Union[BinaryIO, Link]


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


class Limits:
    """The bounds of what one source file may expand to, and the counts so far (see the module
    docstring). One object per file: nested archives and link copies add to the same counts.
    A bound of 0 (or None) is no bound."""

    def __init__(self, max_bytes: int | None = UNTAR_MAX_BYTES, max_entries: int | None = UNTAR_MAX_ENTRIES,
                 max_ratio: float | None = DECOMPRESS_MAX_RATIO, input_bytes: int | None = None):
        self.max_bytes = int(max_bytes or 0)
        self.max_entries = int(max_entries or 0)
        self.max_ratio = float(max_ratio or 0)
        self.input_bytes = input_bytes  # the source file's size, when known: bounds archive outputs by the ratio
        self.bytes = 0
        self.entries = 0

    @classmethod
    def from_config(cls, config: Any, input_bytes: int | None = None) -> "Limits":
        """From the keys ``untar.max.bytes``, ``untar.max.entries``, ``decompress.max.ratio`` (defaults
        when absent); ``input_bytes``: the size of the source file."""
        def get(key, default):
            value = config.get(key) if config is not None else None
            return default if value is None or value == "" else value
        return cls(int(get("untar.max.bytes", UNTAR_MAX_BYTES)), int(get("untar.max.entries", UNTAR_MAX_ENTRIES)),
                   float(get("decompress.max.ratio", DECOMPRESS_MAX_RATIO)), input_bytes)

    def add_entry(self, archive: str, entry: str, what: str = "entry") -> None:
        """Count one entry (or link copy) of ``archive``; a :class:`ConversionError` past the bound."""
        self.entries += 1
        if self.max_entries and self.entries > self.max_entries:
            raise ConversionError(f"archive {archive}: {what} {entry!r} is past untar.max.entries = "
                                  f"{self.max_entries} entries (link copies included); refused -- raise "
                                  "untar.max.entries to expand larger archives")

    def check_bytes(self, n: int, archive: str, entry: str, what: str = "entry") -> None:
        """Fail now when ``n`` more bytes would be past ``untar.max.bytes``."""
        if self.max_bytes and self.bytes + n > self.max_bytes:
            raise ConversionError(f"archive {archive}: {what} {entry!r} takes its expanded size past "
                                  f"untar.max.bytes = {self.max_bytes} bytes ({_size(self.max_bytes)}, link copies "
                                  "included); refused -- raise untar.max.bytes to expand larger archives")
        if self.max_ratio and self.input_bytes is not None \
                and self.bytes + n > max(DECOMPRESS_RATIO_FLOOR, self.max_ratio * self.input_bytes):
            raise ConversionError(f"archive {archive}: {what} {entry!r} takes its expanded size past "
                                  f"decompress.max.ratio = {self.max_ratio:g} times the archive's "
                                  f"{_size(self.input_bytes)} (16 MiB at least; link copies included); refused as a likely archive "
                                  "bomb -- raise decompress.max.ratio to allow it")

    def add_bytes(self, n: int, archive: str, entry: str, what: str = "entry") -> None:
        """Count ``n`` output bytes of ``archive``; a :class:`ConversionError` past the bound."""
        self.check_bytes(n, archive, entry, what)
        self.bytes += n


# --------------------------------------------------------------------------- names


def _decompressor_for(name: str) -> str | None:
    lower = name.lower()
    for conv, suffixes in _SUFFIXES.items():
        if any(lower.endswith(s) for s, _ in suffixes):
            return conv
    return None


def converted_name(name: str, converter: str) -> str:
    """The name a file called ``name`` has after ``converter`` (see the module's table).
    A name is never made empty: ``.gz`` stays ``.gz``."""
    if converter == "decompress":
        conv = _decompressor_for(name)
        return converted_name(name, conv) if conv else name
    if converter in _SUFFIXES:
        lower = name.lower()
        for suffix, replacement in _SUFFIXES[converter]:
            if lower.endswith(suffix) and len(name) > len(suffix):
                return name[: -len(suffix)] + replacement
        return name
    if converter == "untar":
        lower = name.lower()
        for suffix in _TAR_SUFFIXES:
            if lower.endswith(suffix) and len(name) > len(suffix):
                return name[: -len(suffix)]
        return name
    if converter == "encrypt":
        return name + ".enc"
    if converter == "decrypt":
        return name[:-4] if name.lower().endswith((".enc", ".age")) and len(name) > 4 else name
    raise ValueError(f"unknown converter {converter!r}")


def destination_for(relative: str, converters: Iterable[str]) -> str:
    """The destination (relative path) of a source file at ``relative`` after ``converters``:
    only its last component changes (``logs/a.csv.gz`` + decompress -> ``logs/a.csv``;
    ``x/b.tar.gz`` + gunzip,untar -> ``x/b``, a directory). Converters after ``untar``
    rename the entries inside, not the directory."""
    head, name = posixpath.split(relative)
    for conv in converters:
        name = converted_name(name, conv)
        if conv == "untar":
            break
    return posixpath.join(head, name) if head else name


def _rename(path: str, converter: str) -> str:
    head, name = posixpath.split(path)
    name = converted_name(name, converter)
    return posixpath.join(head, name) if head else name


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


class _Counted(_Reader):
    """An output of an archive: its bytes count against ``untar.max.bytes``."""

    def __init__(self, inner, limits: "Limits", archive: str, entry: str):
        super().__init__()
        self._inner, self._limits, self._archive, self._entry = inner, limits, archive, entry

    def _read(self, n: int) -> bytes:
        b = self._inner.read(n)
        if b:
            self._limits.add_bytes(len(b), self._archive, self._entry)
        return b


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if type(e).__name__ in text else f"{type(e).__name__}: {text}"


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


# --------------------------------------------------------------------------- encryption


def parse_key(value: Any) -> bytes:
    """``encryption.key`` (64 hex characters; a :class:`~airflow_copycat.connect.config.Password`
    or a str) as 32 bytes. Raises :class:`ConversionError` without showing the key."""
    value = getattr(value, "value", value)
    if isinstance(value, (bytes, bytearray)) and len(value) == 32:
        return bytes(value)
    text = str(value or "").strip()
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
        raise ConversionError("encryption.key must be 64 hex characters (a 32-byte AES-256 key)")
    return bytes.fromhex(text)


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


def _file_key(key: bytes, salt: bytes) -> bytes:
    require("cryptography", "distcp", "the encrypt and decrypt converters")
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_ENC_INFO).derive(key)


def _nonce(prefix: bytes, counter: int, last: bool) -> bytes:
    if counter >= 1 << 32:
        raise ConversionError("file too large for one encrypted stream (2**32 chunks)")
    return prefix + struct.pack(">IB", counter, 1 if last else 0)


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


class EncryptStream(_Chunked):
    """Ciphertext (the module's format) of the plaintext read from ``stream``."""

    def __init__(self, stream, key: bytes, chunk_size: int = ENC_CHUNK):
        super().__init__()
        require("cryptography", "distcp", "the encrypt and decrypt converters")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not 0 < chunk_size <= ENC_MAX_CHUNK:
            raise ValueError(f"chunk size must be in (0, {ENC_MAX_CHUNK}]")
        salt, self._prefix = os.urandom(16), os.urandom(7)
        self._header = ENC_MAGIC + struct.pack(">I", chunk_size) + salt + self._prefix
        self._aead = AESGCM(_file_key(key, salt))
        self._stream, self._chunk = stream, chunk_size
        self._counter = 0
        self._next = _read_exact(stream, chunk_size)  # one chunk ahead: tells whether a chunk is the last
        self._buf, self._pos, self._done = self._header, 0, False

    def _fill(self) -> None:
        plain = self._next
        self._next = _read_exact(self._stream, self._chunk) if len(plain) == self._chunk else b""
        last = not self._next
        self._buf = self._aead.encrypt(_nonce(self._prefix, self._counter, last), plain, self._header)
        self._pos, self._counter, self._done = 0, self._counter + 1, last

class DecryptStream(_Chunked):
    """Plaintext of the module's format read from ``stream``; every chunk is authenticated
    before any of its bytes is returned. Raises :class:`ConversionError` (naming ``label``)
    for a wrong key, a changed, truncated or extended file, or a file not in the format."""

    def __init__(self, stream, key: bytes, label: str = "<stream>"):
        super().__init__()
        require("cryptography", "distcp", "the encrypt and decrypt converters")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._label = label
        header = _read_exact(stream, ENC_HEADER)
        if len(header) < ENC_HEADER or not header.startswith(ENC_MAGIC[:6]):
            raise ConversionError(f"cannot decrypt {label}: not a copycat-encrypted file (no complete "
                                  f"{ENC_MAGIC[:6].decode()} header)")
        if not header.startswith(ENC_MAGIC):
            raise ConversionError(f"cannot decrypt {label}: unsupported encrypted format version {header[6:8]!r}")
        (chunk,) = struct.unpack(">I", header[8:12])
        if not 0 < chunk <= ENC_MAX_CHUNK:
            raise ConversionError(f"cannot decrypt {label}: bad chunk size {chunk} in its header")
        self._header, self._prefix = header, header[28:35]
        self._aead = AESGCM(_file_key(key, header[12:28]))
        self._stream, self._size = stream, chunk + ENC_TAG
        self._counter = 0
        self._next = _read_exact(stream, self._size)
        self._buf, self._pos, self._done = b"", 0, False

    def _fill(self) -> None:
        from cryptography.exceptions import InvalidTag

        sealed = self._next
        if len(sealed) < ENC_TAG:
            raise ConversionError(f"cannot decrypt {self._label}: truncated (its last chunk is missing or cut)")
        self._next = _read_exact(self._stream, self._size) if len(sealed) == self._size else b""
        last = not self._next
        try:
            self._buf = self._aead.decrypt(_nonce(self._prefix, self._counter, last), sealed, self._header)
        except InvalidTag:
            raise ConversionError(
                f"cannot decrypt {self._label}: authentication failed at chunk {self._counter} "
                "(wrong encryption.key, or the file was changed, truncated or extended)") from None
        self._pos, self._counter, self._done = 0, self._counter + 1, last


# --------------------------------------------------------------------------- tar


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


_EXTENSION_HEADERS = {tarfile.GNUTYPE_LONGNAME: "GNU long-name", tarfile.GNUTYPE_LONGLINK: "GNU long-link",
                      tarfile.XHDTYPE: "pax", tarfile.XGLTYPE: "pax global", tarfile.SOLARIS_XHDTYPE: "pax"}


class _CheckedTarInfo(tarfile.TarInfo):
    """Records how a tar ended: tarfile takes a missing, cut or invalid header after the first
    one for the end of the archive; only the zero block of a real end is accepted here.

    Also bounds what tarfile reads into memory for one entry's headers: an extension header
    (GNU long name/link, pax) whose size field is over ``TAR_MAX_HEADER`` is refused before it is
    read, the bytes read for one entry's headers in all (GNU sparse maps) are bounded by
    ``_budget`` (a :class:`_Counter` under the tar stream), and extension headers are chained at
    most ``TAR_MAX_CHAINED_HEADERS`` deep. :func:`_untar` makes a subclass per archive setting
    ``_label`` and ``_budget``."""

    _label = "<archive>"
    _budget: _Counter | None = None

    def _proc_member(self, tf):
        kind = _EXTENSION_HEADERS.get(self.type)
        if kind is not None and self.size > TAR_MAX_HEADER:
            raise ConversionError(f"archive {self._label}: entry {self.name!r} is a {kind} header of {self.size} "
                                  f"bytes, more than {TAR_MAX_HEADER} (1 MiB); refused (this bound is fixed: "
                                  "no archive needs such a header)")
        return super()._proc_member(tf)

    @classmethod
    def fromtarfile(cls, tf):
        depth = getattr(tf, "_copycat_depth", 0)
        if depth >= TAR_MAX_CHAINED_HEADERS:
            raise ConversionError(f"archive {cls._label}: more than {TAR_MAX_CHAINED_HEADERS} extension headers "
                                  "(pax, GNU long names) before one entry; refused")
        budget = cls._budget
        if depth == 0 and budget is not None:
            budget.limit = budget.count + TAR_MAX_HEADER + 2 * tarfile.RECORDSIZE
            budget.error = lambda: ConversionError(
                f"archive {cls._label}: the headers of one entry take more than {TAR_MAX_HEADER} bytes (1 MiB); "
                "refused (this bound is fixed)")
        tf._copycat_depth = depth + 1
        try:
            return cls._fromtarfile(tf)
        finally:
            tf._copycat_depth = depth
            if depth == 0 and budget is not None:
                budget.limit = None

    @classmethod
    def _fromtarfile(cls, tf):
        try:
            return super().fromtarfile(tf)
        except (IndexError, OverflowError) as e:  # tarfile's parsing of a cut GNU sparse header
            tf._copycat_end = f"invalid tar header ({type(e).__name__}: {e})"
            raise tarfile.InvalidHeaderError(str(e)) from e
        except tarfile.EOFHeaderError:
            tf._copycat_end = None
            raise
        except (tarfile.EmptyHeaderError, tarfile.TruncatedHeaderError) as e:
            tf._copycat_end = f"the archive ends without its end-of-archive blocks ({e})"
            raise
        except tarfile.InvalidHeaderError as e:
            tf._copycat_end = f"invalid tar header ({e})"
            raise


_DRIVE = re.compile(r"^[A-Za-z]:")


def _entry_path(name: str, archive: str, what: str = "entry") -> str:
    """The normalised relative path of an entry, or a ConversionError."""
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise ConversionError(f"archive {archive}: {what} {name!r} has an absolute path; refused")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ConversionError(f"archive {archive}: {what} {name!r} has a '..' component "
                              "(it would be written outside the destination); refused")
    return "/".join(parts)


def _link_target(member: tarfile.TarInfo, path: str, archive: str) -> str:
    kind = "symlink" if member.issym() else "hard link"
    target = member.linkname
    if not target or target.startswith(("/", "\\")) or _DRIVE.match(target):
        raise ConversionError(f"archive {archive}: {kind} entry {member.name!r} -> {target!r} points outside the "
                              "archive root (absolute target); refused")
    # a symlink resolves against its own directory, a hard link against the archive root
    joined = posixpath.join(posixpath.dirname(path), target) if member.issym() else target
    resolved = posixpath.normpath(joined)
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise ConversionError(f"archive {archive}: {kind} entry {member.name!r} -> {target!r} points outside the "
                              "archive root; refused")
    if resolved == ".":
        raise ConversionError(f"archive {archive}: {kind} entry {member.name!r} -> {target!r} points at the "
                              "archive root itself; refused")
    return resolved


def _untar(stream, label: str, limits: Limits | None = None) -> Iterator[tuple[str, Output]]:
    """The regular files and (checked) links of the tar read from ``stream``, in order. Each
    entry counts against ``limits`` (entries); a regular file's stream has its size as
    ``.size``."""
    limits = limits if limits is not None else Limits()

    def fail(e: BaseException, where: str) -> ConversionError:
        return ConversionError(f"corrupt or truncated tar archive {label}{where}: {_describe(e)}")

    head = _read_exact(stream, 10)
    stream = _Prefixed(head, stream)
    codec = _sniff_compression(head)
    if codec:  # a compressed tar given to untar alone
        stream = _decompress(stream, codec, label, limits)
    budget = stream = _Counter(stream)
    info = type("_ArchiveTarInfo", (_CheckedTarInfo,), {"_label": label, "_budget": budget})
    try:
        tf = tarfile.open(fileobj=stream, mode="r|", tarinfo=info)
    except ConversionError:
        raise
    except tarfile.ReadError as e:
        raise ConversionError(f"{label} is not a tar archive ({e})") from e
    except _CODEC_ERRORS as e:
        raise fail(e, "") from e
    if not hasattr(tf, "_copycat_end"):  # (opening read the first header, which may have been the end)
        tf._copycat_end = "no end"
    last = ""
    while True:
        try:
            member = tf.next()
        except ConversionError:
            raise
        except _CODEC_ERRORS as e:
            raise fail(e, f" after entry {last!r}" if last else "") from e
        tf.members = []  # tarfile keeps every member it read; an archive can hold millions
        if member is None:
            break
        last = member.name
        limits.add_entry(label, member.name)
        path = _entry_path(member.name, label)
        if member.isdir() or not path:
            continue
        if member.issym() or member.islnk():
            yield path, Link(_link_target(member, path, label), "symlink" if member.issym() else "hardlink",
                             member.name)
        elif member.isreg():
            data = _Guard(tf.extractfile(member), f"{label}[{member.name}]", "tar")
            data.size = member.size
            yield path, data
        # character and block devices, FIFOs: no data to copy
    if tf._copycat_end is not None:
        raise ConversionError(f"corrupt or truncated tar archive {label}: {tf._copycat_end}"
                              + (f" after entry {last!r}" if last else ""))
    # read the rest (the padding after the end-of-archive blocks): a compressor verifies its checksum at its end
    drain(stream)
    stream.close()


# --------------------------------------------------------------------------- chain


def drain(stream, chunk: int = CHUNK) -> int:
    """Read ``stream`` to its end; the number of bytes read."""
    n = 0
    while True:
        b = stream.read(chunk)
        if not b:
            return n
        n += len(b)


def _apply(converter: str, stream, name: str, label: str, key, limits: Limits):
    """One stream converter: the new stream and name."""
    if converter == "decompress":
        conv = _decompressor_for(name)
        if conv is None:
            return stream, name
        return _decompress(stream, conv, label, limits), converted_name(name, conv)
    if converter in _SUFFIXES:
        return _decompress(stream, converter, label, limits), converted_name(name, converter)
    if converter in ("encrypt", "decrypt"):  # key: the EncryptionKeys open_outputs checked
        if key is None:
            raise ConversionError(f"{converter} of {label} needs encryption.recipients, encryption.identity, "
                                  "encryption.passphrase or encryption.key")
        if converter == "encrypt":
            return key.encrypt(stream), converted_name(name, converter)
        return key.decrypt(stream, label), converted_name(name, converter)
    raise ValueError(f"unknown converter {converter!r}")


def _chain(stream, path: str, name: str, label: str, converters: tuple[str, ...], key,
           limits: Limits, archive: tuple[str, str] | None = None) -> Iterator[tuple[str, Output]]:
    """``archive``: (archive, entry) when ``stream`` is an entry of an archive: its output counts
    against ``untar.max.bytes``."""
    for i, conv in enumerate(converters):
        if conv == "untar":
            rest = converters[i + 1:]
            path = _rename(path, "untar") if path else path  # an archive inside an archive: its directory
            for entry, item in _untar(stream, label, limits):
                out = posixpath.join(path, entry) if path else entry
                if isinstance(item, Link):
                    target = posixpath.join(path, item.target) if path else item.target
                    for later in rest:
                        out, target = _rename(out, later), _rename(target, later)
                    yield out, Link(target, item.kind, item.entry)
                else:
                    if not rest:  # the entry is an output: fail before writing what its header claims
                        limits.check_bytes(getattr(item, "size", 0), label, entry)
                    yield from _chain(item, out, posixpath.basename(entry), f"{label}[{entry}]", rest, key,
                                      limits, (label, entry))
            return
        stream, new_name = _apply(conv, stream, name, label, key, limits)
        if path and new_name != name:
            path = posixpath.join(posixpath.dirname(path), new_name)
        name = new_name
    if archive is not None and limits.max_bytes:
        stream = _Counted(stream, limits, *archive)
    yield path, stream


def open_outputs(stream: BinaryIO, origin_name: str, converters: Iterable[str],
                 key: Any = None, limits: Limits | None = None) -> Iterator[tuple[str, Output]]:
    """The outputs of the bytes read from ``stream`` through ``converters`` (names, in order).

    ``origin_name``: the source path; its base name picks the codec of ``decompress``,
    and it names the file in errors. ``key``: the job's key material, an
    :class:`~.encryption.EncryptionKeys` (``EncryptionKeys.from_config(config)``), or just
    ``encryption.key`` (64 hex characters, or a Password holding them); needed by
    ``encrypt``/``decrypt`` only, and checked before any byte is read (a
    :class:`ConversionError` that shows no secret). ``limits``: the
    bounds of the expansion (default: :class:`Limits` with the default bounds); pass the
    same object to count link copies. See the module docstring for the contract (lazy,
    one stream at a time, paths relative to the destination, :class:`Link` for links,
    :class:`ConversionError`, bounds)."""
    converters = tuple(converters)
    unknown = [c for c in converters if c not in STREAM_CONVERTERS and c != "untar"]
    if unknown:
        raise ValueError(f"unknown converter(s) {unknown}")
    raw_key = None
    if {"encrypt", "decrypt"} & set(converters):
        from .encryption import EncryptionKeys

        raw_key = key if isinstance(key, EncryptionKeys) else EncryptionKeys(key=key)
        if not isinstance(key, EncryptionKeys) and getattr(key, "value", key) not in (None, ""):
            parse_key(key)  # a bad encryption.key: the message it always had
        raw_key.check(converters)
    limits = limits if limits is not None else Limits()
    return _chain(stream, "", posixpath.basename(origin_name.rstrip("/")), origin_name, converters, raw_key, limits)


def copy_stream(src, write: Callable[[bytes], Any], chunk: int = CHUNK) -> int:
    """Copy ``src`` to ``write`` in chunks; the number of bytes."""
    n = 0
    while True:
        b = src.read(chunk)
        if not b:
            return n
        write(b)
        n += len(b)


_CODEC_ERRORS = _codec_errors()
