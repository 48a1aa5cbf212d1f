"""The key material of the ``encrypt``/``decrypt`` converters, and which format each writes or reads.

``encrypt`` writes
  * the **age** format (:mod:`.age`; ``age -d`` and every age library read it) to the X25519
    recipients of ``encryption.recipients`` (``age1...`` public keys, comma-separated), or, without
    recipients, to ``encryption.passphrase`` (scrypt, work factor ``encryption.scrypt.work.factor``);
  * else, with only ``encryption.key``, the earlier **copycat** AES-256-GCM stream
    (``CPYCAT\\x00\\x01``, :mod:`.aes_stream`): kept so existing jobs write what their readers read.

``decrypt`` tells the two formats apart by their first bytes (``age-encryption.org/v1\\n`` /
``CPYCAT``) and reads an age file with the identities of ``encryption.identity`` (the
``AGE-SECRET-KEY-1...`` lines of an age identity file) or ``encryption.passphrase``, a copycat file
with ``encryption.key``; configure the keys for every format the source may hold.

``encryption.identity``, ``encryption.passphrase`` and ``encryption.key`` are secrets (PASSWORD
config keys): never in a message, a ``repr`` or a log. Recipients are public.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from . import age

RECIPIENTS = "encryption.recipients"
IDENTITY = "encryption.identity"
PASSPHRASE = "encryption.passphrase"
KEY = "encryption.key"
WORK_FACTOR = "encryption.scrypt.work.factor"


def _secret(value: Any) -> str | None:
    value = getattr(value, "value", value)
    return None if value in (None, "") else str(value)


def _list(value: Any) -> tuple[str, ...]:
    if value in (None, ""):
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(s.strip() for s in items if s and s.strip())


@dataclass(frozen=True, repr=False)
class EncryptionKeys:
    """The keys of a copy job's ``encryption.*`` settings (raw strings or parsed values, Passwords
    included). Checked when a converter needs them (:meth:`problems`); secrets are held, never shown."""

    key: Any = None
    recipients: tuple[str, ...] = ()
    identity: Any = None
    passphrase: Any = None
    work_factor: int = age.SCRYPT_WORK_FACTOR

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "EncryptionKeys":
        return cls(key=config.get(KEY), recipients=_list(config.get(RECIPIENTS)), identity=config.get(IDENTITY),
                   passphrase=config.get(PASSPHRASE),
                   work_factor=int(config.get(WORK_FACTOR) or age.SCRYPT_WORK_FACTOR))

    def __repr__(self) -> str:
        return (f"EncryptionKeys(recipients={list(self.recipients)}, identity={'[hidden]' if self.identity else None}, "
                f"passphrase={'[hidden]' if self.passphrase else None}, key={'[hidden]' if self.key else None})")

    def writes(self) -> str | None:
        """The format ``encrypt`` writes: ``"age"``, ``"copycat"``, or ``None`` (no key material)."""
        if self.recipients or _secret(self.passphrase):
            return "age"
        return "copycat" if _secret(self.key) else None

    def problems(self, converters) -> list[tuple[str, str | None, str]]:
        """``(key, value to show, problem)`` for what the ``encrypt``/``decrypt`` of ``converters``
        cannot use; secrets are shown as ``[hidden]``."""
        out: list[tuple[str, str | None, str]] = []
        for text in self.recipients:
            try:
                age.parse_recipient(text)
            except ValueError as e:
                out.append((RECIPIENTS, text[:90], str(e)))
        if _secret(self.identity):
            try:
                age.parse_identities(_secret(self.identity))
            except ValueError as e:
                out.append((IDENTITY, "[hidden]", str(e)))
        if _secret(self.key):
            from .aes_stream import parse_key
            from .streams import ConversionError

            try:
                parse_key(self.key)
            except ConversionError:
                out.append((KEY, "[hidden]", "must be 64 hex characters (a 32-byte AES-256 key)"))
        if not 1 <= self.work_factor <= age.SCRYPT_MAX_WORK_FACTOR:
            out.append((WORK_FACTOR, str(self.work_factor), f"must be in [1, {age.SCRYPT_MAX_WORK_FACTOR}]"))
        converters = set(converters or ())
        if "encrypt" in converters:
            if self.writes() is None:
                out.append((RECIPIENTS, None, f"the encrypt converter needs {RECIPIENTS} (age1... public keys; "
                                              f"the age format) or {PASSPHRASE} (age), or {KEY} (64 hex characters; "
                                              "the earlier copycat format)"))
            elif self.recipients and _secret(self.passphrase):
                out.append((PASSPHRASE, "[hidden]", f"age allows a passphrase only as the sole recipient of a file: "
                                                    f"set {RECIPIENTS} or {PASSPHRASE}, not both"))
        if "decrypt" in converters and not (_secret(self.identity) or _secret(self.passphrase) or _secret(self.key)):
            out.append((IDENTITY, None, f"the decrypt converter needs {IDENTITY} (AGE-SECRET-KEY-1... lines) or "
                                        f"{PASSPHRASE} for age files, or {KEY} (64 hex characters) for files of "
                                        "the earlier copycat format"))
        return out

    def check(self, converters) -> None:
        """Raise :class:`~.streams.ConversionError` with every problem of :meth:`problems`."""
        problems = self.problems(converters)
        if problems:
            from .streams import ConversionError

            raise ConversionError("; ".join(f"{k} {p}" if p.startswith("must") else f"{k}: {p}"
                                            for k, _, p in problems))

    def encrypt(self, stream):
        """The encrypted stream of ``stream`` in the format :meth:`writes` names."""
        from .aes_stream import EncryptStream, parse_key

        if self.writes() == "age":
            return age.AgeEncryptStream(stream, [age.parse_recipient(r) for r in self.recipients],
                                        None if self.recipients else _secret(self.passphrase), self.work_factor)
        return EncryptStream(stream, parse_key(self.key))

    def decrypt(self, stream, label: str):
        """The plaintext of ``stream``, an age or a copycat file (told by its first bytes)."""
        from .aes_stream import ENC_MAGIC, DecryptStream, parse_key
        from .streams import ConversionError, _Prefixed, _read_exact

        head = _read_exact(stream, len(age.AGE_MAGIC))
        stream = _Prefixed(head, stream)
        if head.startswith(age.AGE_MAGIC[:-1]) or head.startswith(b"age-encryption.org/"):
            if head != age.AGE_MAGIC:
                raise ConversionError(f"cannot decrypt {label}: an age file of a version other than v1")
            if not (_secret(self.identity) or _secret(self.passphrase)):
                raise ConversionError(f"cannot decrypt {label}: it is an age-encrypted file: set {IDENTITY} (or "
                                      f"{PASSPHRASE} for a passphrase-encrypted file)")
            identities = age.parse_identities(_secret(self.identity)) if _secret(self.identity) else []
            return age.AgeDecryptStream(stream, identities, _secret(self.passphrase), label)
        if len(head) >= 10 and age.ARMOR_MAGIC.startswith(head):
            raise ConversionError(f"cannot decrypt {label}: an ASCII-armored age file (age -a): decode the armor "
                                  "first (age -d reads it), or write it without -a")
        if head.startswith(ENC_MAGIC[:6]) and not _secret(self.key):
            raise ConversionError(f"cannot decrypt {label}: it is in the earlier copycat format "
                                  f"(CPYCAT): set {KEY}")
        if not _secret(self.key):
            raise ConversionError(f"cannot decrypt {label}: not a copycat-encrypted file (no complete CPYCAT header) "
                                  "nor an age-encrypted file (no age-encryption.org/v1 header)")
        try:
            return DecryptStream(stream, parse_key(self.key), label)
        except ConversionError as e:
            if "not a copycat-encrypted file" in str(e):
                raise ConversionError(f"{e} nor an age-encrypted file (no age-encryption.org/v1 header)") from None
            raise
