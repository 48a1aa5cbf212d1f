"""The age file format (age-encryption.org/v1, the C2SP specification), streamed: what the ``encrypt``
converter writes for ``encryption.recipients`` / ``encryption.passphrase``, and what ``decrypt`` reads
with ``encryption.identity`` / ``encryption.passphrase``. The ``age`` CLI and every age library read
and write the same files (``age -d -i key.txt``, ``age -e -r age1...``, ``age -p``).

The bytes::

    header   "age-encryption.org/v1\\n"
             one stanza per recipient:
               "-> X25519 " base64(ephemeral share) "\\n" base64(wrapped file key) "\\n"
               or "-> scrypt " base64(salt) " " log2(N) "\\n" base64(wrapped file key) "\\n"
                  (a passphrase: the only stanza of its file)
             "--- " base64(HMAC-SHA256(HKDF-SHA256(file key, "", "header"), header up to "---")) "\\n"
    payload  nonce (16 random bytes)
             ChaCha20-Poly1305 STREAM under HKDF-SHA256(file key, nonce, "payload"): chunks of 64 KiB
             of plaintext + a 16-byte tag, chunk nonce = 11-byte big-endian counter | 0x01 for the
             last chunk, 0x00 before; the last chunk is short (or full), empty only for an empty file

The file key is 16 random bytes per file. An X25519 recipient wraps it with ChaCha20-Poly1305 under
HKDF-SHA256(X25519(ephemeral, recipient), ephemeral share | recipient, "age-encryption.org/v1/X25519");
a passphrase under scrypt(passphrase, "age-encryption.org/v1/scrypt" | salt, N=2**log2N, r=8, p=1).
base64 is the standard alphabet without padding, canonical, bodies wrapped at 64 columns. Recipients
are Bech32 ``age1...`` strings, identities ``AGE-SECRET-KEY-1...``.

Decryption authenticates the header (its MAC) before any payload, and every chunk before any of its
bytes is returned; a wrong identity, a changed, truncated, reordered or extended file raises
:class:`~.streams.ConversionError` naming the file and never showing a key. Stanzas of other types
(other recipient kinds, "grease") are skipped, as age does. ASCII-armored files (``age -a``) are
refused with a message saying so. Secrets are never in an exception or a ``repr``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re

from ..extras import require
from .streams import ConversionError, _Chunked, _read_exact

AGE_MAGIC = b"age-encryption.org/v1\n"
ARMOR_MAGIC = b"-----BEGIN AGE ENCRYPTED FILE-----"
CHUNK = 64 << 10
"""Plaintext bytes per payload chunk (fixed by the format)."""
TAG = 16
SCRYPT_WORK_FACTOR = 18
"""log2(N) of scrypt written for a passphrase: age's own default (about 1 s and 256 MiB per file)."""
SCRYPT_MAX_WORK_FACTOR = 22
"""The largest log2(N) read (age's own bound)."""
HEADER_MAX = 1 << 20
"""Most header bytes read before the payload (a header of a few recipients is a few hundred)."""

_X25519_INFO = b"age-encryption.org/v1/X25519"
_SCRYPT_LABEL = b"age-encryption.org/v1/scrypt"
_ZERO_NONCE = bytes(12)
_B64 = re.compile(rb"[A-Za-z0-9+/]*")

# ---------------------------------------------------------------------------------------------- Bech32

_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def _polymod(values) -> int:
    gen = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i in range(5):
            chk ^= gen[i] if (top >> i) & 1 else 0
    return chk


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _convert(data, frm: int, to: int, pad: bool) -> list[int] | None:
    acc = bits = 0
    out = []
    for v in data:
        acc = (acc << frm) | v
        bits += frm
        while bits >= to:
            bits -= to
            out.append((acc >> bits) & ((1 << to) - 1))
    if pad and bits:
        out.append((acc << (to - bits)) & ((1 << to) - 1))
    elif not pad and (bits >= frm or (acc << (to - bits)) & ((1 << to) - 1)):
        return None
    return out


def bech32_encode(hrp: str, data: bytes) -> str:
    """Bech32 (BIP 173, no length limit, as age uses it) of ``data`` under ``hrp``, lower case."""
    words = _convert(data, 8, 5, True)
    check = _polymod(_hrp_expand(hrp) + words + [0] * 6) ^ 1
    words += [(check >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[w] for w in words)


def bech32_decode(text: str) -> tuple[str, bytes] | None:
    """``(hrp, data)`` of a Bech32 string (all lower or all upper case), ``None`` if it is not one."""
    if text.lower() != text and text.upper() != text:
        return None
    text = text.lower()
    pos = text.rfind("1")
    if pos < 1 or pos + 7 > len(text) or any(c not in _CHARSET for c in text[pos + 1:]):
        return None
    hrp, words = text[:pos], [_CHARSET.index(c) for c in text[pos + 1:]]
    if any(not 33 <= ord(c) <= 126 for c in hrp) or _polymod(_hrp_expand(hrp) + words) != 1:
        return None
    data = _convert(words[:-6], 5, 8, False)
    return None if data is None else (hrp, bytes(data))


# ---------------------------------------------------------------------------------------------- keys


def parse_recipient(text: str) -> bytes:
    """The 32-byte X25519 public key of an ``age1...`` recipient; ``ValueError`` naming it when it is not
    one (a recipient is public: it may be shown)."""
    decoded = bech32_decode(text.strip())
    if decoded is None or decoded[0] != "age" or len(decoded[1]) != 32:
        raise ValueError(f"{text.strip()[:90]!r} is not an age X25519 recipient (age1... as age-keygen prints it)")
    return decoded[1]


def parse_identities(text: str) -> list[bytes]:
    """The 32-byte X25519 secret keys of ``AGE-SECRET-KEY-1...`` identities: the contents of an age
    identity file (``#`` comments and blank lines skipped), or keys separated by commas or spaces.
    ``ValueError`` naming the position of a bad one, never its text."""
    keys = []
    words = [w for line in text.splitlines() if not line.strip().startswith("#") for w in re.split(r"[\s,]+", line)]
    for n, word in enumerate((w for w in words if w), 1):
        decoded = bech32_decode(word)
        if decoded is None or decoded[0] != "age-secret-key-" or len(decoded[1]) != 32 or word != word.upper():
            raise ValueError(f"identity {n} is not an age X25519 identity (AGE-SECRET-KEY-1... as age-keygen "
                             "writes it)")
        keys.append(decoded[1])
    if not keys:
        raise ValueError("holds no age identity (AGE-SECRET-KEY-1... as age-keygen writes it)")
    return keys


def generate_identity() -> tuple[str, str]:
    """A new X25519 identity: ``(AGE-SECRET-KEY-1..., age1...)``, as ``age-keygen`` makes them."""
    require("cryptography", "distcp", "the encrypt and decrypt converters")
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    secret = X25519PrivateKey.generate()
    return (bech32_encode("age-secret-key-", secret.private_bytes_raw()).upper(),
            bech32_encode("age", secret.public_key().public_bytes_raw()))


# ---------------------------------------------------------------------------------------------- crypto


def _hkdf(ikm: bytes, salt: bytes, info: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(ikm)


def _scrypt(passphrase: str, salt: bytes, log_n: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return Scrypt(salt=_SCRYPT_LABEL + salt, length=32, n=1 << log_n, r=8, p=1).derive(passphrase.encode("utf-8"))


def _b64(data: bytes) -> bytes:
    return base64.b64encode(data).rstrip(b"=")


def _unb64(text: bytes) -> bytes:
    """Canonical unpadded base64, else ``ValueError``."""
    if not _B64.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("bad base64")
    data = base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    if _b64(data) != text:
        raise ValueError("non-canonical base64")
    return data


def _stanza(kind: str, args: list[bytes], body: bytes) -> bytes:
    text = _b64(body)
    lines = [text[i:i + 64] for i in range(0, len(text), 64)]
    if not lines or len(lines[-1]) == 64:
        lines.append(b"")
    return b"-> " + b" ".join([kind.encode()] + args) + b"\n" + b"".join(line + b"\n" for line in lines)


def _header_mac(file_key: bytes, header: bytes) -> bytes:
    return hmac.new(_hkdf(file_key, b"", b"header"), header, hashlib.sha256).digest()


def _payload_nonce(counter: int, last: bool) -> bytes:
    if counter >= 1 << 88:
        raise ConversionError("file too large for one age stream")
    return counter.to_bytes(11, "big") + (b"\x01" if last else b"\x00")


# ---------------------------------------------------------------------------------------------- streams


class AgeEncryptStream(_Chunked):
    """The age file of the plaintext read from ``stream``: to X25519 ``recipients`` (32-byte public keys),
    or to ``passphrase`` (scrypt, work factor ``work_factor``; then no recipients)."""

    def __init__(self, stream, recipients: list[bytes] = (), passphrase: str | None = None,
                 work_factor: int = SCRYPT_WORK_FACTOR):
        super().__init__()
        require("cryptography", "distcp", "the encrypt and decrypt converters")
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        if bool(recipients) == bool(passphrase):
            raise ValueError("age: either X25519 recipients or one passphrase (a passphrase is alone in its file)")
        file_key = os.urandom(16)
        head = bytearray(AGE_MAGIC)
        for public in recipients:
            ephemeral = X25519PrivateKey.generate()
            share = ephemeral.public_key().public_bytes_raw()
            try:
                shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(public))
            except ValueError:  # a low-order point: no recipient has it
                raise ConversionError(f"age recipient {bech32_encode('age', public)} is not a usable X25519 "
                                      "key") from None
            wrap = _hkdf(shared, share + public, _X25519_INFO)
            head += _stanza("X25519", [_b64(share)], ChaCha20Poly1305(wrap).encrypt(_ZERO_NONCE, file_key, None))
        if passphrase:
            salt = os.urandom(16)
            wrap = _scrypt(passphrase, salt, work_factor)
            head += _stanza("scrypt", [_b64(salt), str(work_factor).encode()],
                            ChaCha20Poly1305(wrap).encrypt(_ZERO_NONCE, file_key, None))
        head += b"---"
        nonce = os.urandom(16)
        self._aead = ChaCha20Poly1305(_hkdf(file_key, nonce, b"payload"))
        self._stream, self._counter = stream, 0
        self._next = _read_exact(stream, CHUNK)
        self._buf = bytes(head) + b" " + _b64(_header_mac(file_key, bytes(head))) + b"\n" + nonce
        self._pos, self._done = 0, False

    def _fill(self) -> None:
        plain = self._next
        self._next = _read_exact(self._stream, CHUNK) if len(plain) == CHUNK else b""
        last = not self._next
        self._buf = self._aead.encrypt(_payload_nonce(self._counter, last), plain, None)
        self._pos, self._counter, self._done = 0, self._counter + 1, last


class AgeDecryptStream(_Chunked):
    """The plaintext of the age file read from ``stream``, unlocked by one of ``identities`` (32-byte
    X25519 secret keys) or ``passphrase``. See the module docstring for what is checked."""

    def __init__(self, stream, identities: list[bytes] = (), passphrase: str | None = None,
                 label: str = "<stream>"):
        super().__init__()
        require("cryptography", "distcp", "the encrypt and decrypt converters")
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        self._label = label
        stanzas, header, mac, rest = self._read_header(stream)
        file_key = self._unwrap(stanzas, list(identities), passphrase)
        if not hmac.compare_digest(_header_mac(file_key, header), mac):
            raise self._error("its header MAC does not match (the header was changed)")
        nonce = rest[:16]
        if len(nonce) < 16:
            nonce += _read_exact(stream, 16 - len(nonce))
            rest = b""
            if len(nonce) < 16:
                raise self._error("truncated (the payload nonce is cut)")
        else:
            rest = rest[16:]
        self._aead = ChaCha20Poly1305(_hkdf(file_key, nonce, b"payload"))
        self._stream, self._counter = stream, 0
        self._next = rest + _read_exact(stream, CHUNK + TAG - len(rest)) if len(rest) < CHUNK + TAG else rest
        self._spill = b""
        if len(self._next) > CHUNK + TAG:
            self._next, self._spill = self._next[:CHUNK + TAG], self._next[CHUNK + TAG:]
        self._buf, self._pos, self._done = b"", 0, False

    def _error(self, what: str) -> ConversionError:
        return ConversionError(f"cannot decrypt {self._label}: age-encrypted file: {what}")

    def _read_header(self, stream):
        """``(stanzas, header bytes up to "---", MAC, bytes read past the header)``."""
        data = bytearray()
        while len(data) < len(AGE_MAGIC):
            more = stream.read(len(AGE_MAGIC) - len(data))
            if not more:
                break
            data += more
        if not data.startswith(AGE_MAGIC):
            raise self._error("no age-encryption.org/v1 header")
        while b"\n---" not in data or not data[data.index(b"\n---") + 1:].count(b"\n"):
            more = stream.read(4096)
            if not more:
                raise self._error("truncated (its header does not end)")
            data += more
            if len(data) > HEADER_MAX:
                raise self._error(f"its header is longer than {HEADER_MAX} bytes; refused")
        end = data.index(b"\n---") + 1
        line_end = data.index(b"\n", end)
        header, last, rest = bytes(data[:end + 3]), bytes(data[end:line_end]), bytes(data[line_end + 1:])
        if not last.startswith(b"--- "):
            raise self._error("malformed header (no '--- ' MAC line)")
        try:
            mac = _unb64(last[4:])
        except ValueError:
            mac = b""
        if len(mac) != 32:
            raise self._error("malformed header MAC")
        lines = header[len(AGE_MAGIC):end].split(b"\n")[:-1]
        stanzas, i = [], 0
        while i < len(lines):
            line = lines[i]
            parts = line.split(b" ")
            if parts[0] != b"->" or len(parts) < 2 or any(not p or not all(33 <= c <= 126 for c in p)
                                                          for p in parts[1:]):
                raise self._error(f"malformed header (line {i + 2} is not a stanza)")
            body, i = bytearray(), i + 1
            while True:
                if i >= len(lines) or len(lines[i]) > 64:
                    raise self._error("malformed header (a stanza body does not end)")
                try:
                    body += _unb64(lines[i])
                except ValueError:
                    raise self._error(f"malformed header (line {i + 2} is not canonical base64)") from None
                i += 1
                if len(lines[i - 1]) < 64:
                    break
            stanzas.append((parts[1].decode("ascii"), parts[2:], bytes(body)))
        return stanzas, header, mac, rest

    def _unwrap(self, stanzas, identities: list[bytes], passphrase: str | None) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        kinds = [kind for kind, _, _ in stanzas]
        if "scrypt" in kinds and len(stanzas) != 1:
            raise self._error("a scrypt (passphrase) stanza must be the only one of its header")
        for kind, args, body in stanzas:
            if kind == "X25519":
                if len(args) != 1 or len(body) != 32:
                    raise self._error("malformed X25519 stanza")
                try:
                    share = _unb64(args[0])
                except ValueError:
                    share = b""
                if len(share) != 32:
                    raise self._error("malformed X25519 stanza")
                for secret in identities:
                    key = X25519PrivateKey.from_private_bytes(secret)
                    try:
                        shared = key.exchange(X25519PublicKey.from_public_bytes(share))
                    except ValueError:
                        raise self._error("an X25519 stanza has a low-order share") from None
                    wrap = _hkdf(shared, share + key.public_key().public_bytes_raw(), _X25519_INFO)
                    try:
                        return ChaCha20Poly1305(wrap).decrypt(_ZERO_NONCE, body, None)
                    except InvalidTag:
                        continue
            elif kind == "scrypt" and passphrase:
                if len(args) != 2 or len(body) != 32 or not re.fullmatch(rb"[1-9][0-9]*", args[1]):
                    raise self._error("malformed scrypt stanza")
                try:
                    salt = _unb64(args[0])
                except ValueError:
                    salt = b""
                log_n = int(args[1])
                if len(salt) != 16:
                    raise self._error("malformed scrypt stanza")
                if log_n > SCRYPT_MAX_WORK_FACTOR:
                    raise self._error(f"its scrypt work factor {log_n} is over {SCRYPT_MAX_WORK_FACTOR}; refused")
                try:
                    return ChaCha20Poly1305(_scrypt(passphrase, salt, log_n)).decrypt(_ZERO_NONCE, body, None)
                except InvalidTag:
                    raise self._error("wrong encryption.passphrase (or the header was changed)") from None
        if "scrypt" in kinds:
            raise self._error("it is encrypted with a passphrase: set encryption.passphrase")
        if "X25519" in kinds:
            raise self._error("none of the encryption.identity keys is one of its X25519 recipients "
                              "(or the header was changed)")
        raise self._error(f"no recipient stanza this converter can open (stanza types: {', '.join(kinds) or 'none'}); "
                          "X25519 identities and passphrases are supported")

    def _fill(self) -> None:
        from cryptography.exceptions import InvalidTag

        sealed = self._next
        if len(sealed) < TAG:
            raise self._error("truncated (its last chunk is missing or cut)")
        if len(sealed) == CHUNK + TAG:
            self._next = self._spill + _read_exact(self._stream, CHUNK + TAG - len(self._spill))
            self._spill = b""
            if len(self._next) > CHUNK + TAG:
                self._next, self._spill = self._next[:CHUNK + TAG], self._next[CHUNK + TAG:]
        else:
            self._next = b""
        last = not self._next
        if last and len(sealed) == TAG and self._counter:
            raise self._error(f"an empty last chunk {self._counter} after a full one (not written by age)")
        try:
            self._buf = self._aead.decrypt(_payload_nonce(self._counter, last), sealed, None)
        except InvalidTag:
            raise self._error(f"authentication failed at chunk {self._counter} (the file was changed, truncated "
                              "or extended)") from None
        self._pos, self._counter, self._done = 0, self._counter + 1, last
