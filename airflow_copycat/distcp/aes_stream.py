"""The earlier copycat encrypted format: an AES-256-GCM stream (``encrypt`` with only
``encryption.key``; ``decrypt`` reads it as well as age, see :mod:`.encryption`).

Contract: :class:`EncryptStream` reads plaintext and serves the ciphertext below;
:class:`DecryptStream` does the reverse, authenticating every chunk before returning any of its
bytes, and raises :class:`~.streams.ConversionError` for a wrong key or a changed, truncated or
extended file. :func:`parse_key` reads ``encryption.key`` without ever showing it.

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
"""

from __future__ import annotations

import os
import re
import struct
from typing import Any

from ..extras import require
from .streams import ConversionError, _Chunked, _read_exact

ENC_MAGIC = b"CPYCAT\x00\x01"
ENC_CHUNK = 1 << 20
"""Plaintext bytes per encrypted chunk written by ``encrypt``."""
ENC_MAX_CHUNK = 16 << 20
"""Largest chunk size ``decrypt`` accepts (bounds its memory)."""
ENC_HEADER = len(ENC_MAGIC) + 4 + 16 + 7
ENC_TAG = 16
_ENC_INFO = b"copycat distcp AES-256-GCM stream" + ENC_MAGIC


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


def _file_key(key: bytes, salt: bytes) -> bytes:
    require("cryptography", "distcp", "the encrypt and decrypt converters")
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_ENC_INFO).derive(key)


def _nonce(prefix: bytes, counter: int, last: bool) -> bytes:
    if counter >= 1 << 32:
        raise ConversionError("file too large for one encrypted stream (2**32 chunks)")
    return prefix + struct.pack(">IB", counter, 1 if last else 0)


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
