"""The encrypt/decrypt converters speak age (age-encryption.org/v1): checked against the real ``age`` CLI.

Files the converters encrypt decrypt with ``age -d -i key.txt``; files ``age -e -r age1...`` and
``age -p`` (typed into a pseudo-terminal: age reads passphrases from the terminal only) encrypt
decrypt with the converters -- empty, shorter than a chunk, exactly one 64 KiB chunk, and many
chunks, read in small pieces. Tampering fails with a clear error and nothing is staged. The earlier
copycat format stays readable beside age. ``make test`` installs age (scripts/ensure_age.sh); a
missing ``age`` fails these tests, it does not skip them.
"""

from __future__ import annotations

import io
import os
import posixpath
import pty
import select
import shutil
import subprocess
import time

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_copycat.connect.config import Password
from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.distcp import aes_stream, age
from airflow_copycat.distcp.config import parse_copy_config
from airflow_copycat.distcp.converters import open_outputs
from airflow_copycat.distcp.copier import copy_unit
from airflow_copycat.distcp.encryption import EncryptionKeys
from airflow_copycat.distcp.model import Staging, WorkUnit
from airflow_copycat.distcp.streams import ConversionError
from tests.distcp.test_copier import put, staged_files

CHUNK = age.CHUNK
SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5]
LEGACY_KEY = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"


def _age() -> str:
    path = shutil.which("age")
    assert path and shutil.which("age-keygen"), "the age CLI is missing: run `make age` (scripts/ensure_age.sh)"
    return path


@pytest.fixture
def keys(tmp_path):
    """An identity made by age-keygen: (key file, its AGE-SECRET-KEY line(s) as the file holds them, recipient)."""
    _age()
    key_file = tmp_path / "key.txt"
    subprocess.run(["age-keygen", "-o", str(key_file)], check=True, capture_output=True, timeout=30)
    recipient = subprocess.run(["age-keygen", "-y", str(key_file)], check=True, capture_output=True, text=True,
                               timeout=30).stdout.strip()
    return key_file, key_file.read_text(), recipient


def read_all(stream, n: int = 1000) -> bytes:
    out = bytearray()
    while True:
        b = stream.read(n)
        if not b:
            return bytes(out)
        out += b


def encrypt(data: bytes, **keys) -> bytes:
    [(_, out)] = open_outputs(io.BytesIO(data), "f", ["encrypt"], EncryptionKeys(**keys))
    return read_all(out, 4097)


def decrypt(data: bytes, label: str = "secret.bin.age", **keys) -> bytes:
    [(_, out)] = open_outputs(io.BytesIO(data), label, ["decrypt"], EncryptionKeys(**keys))
    return read_all(out, 777)


def age_cli(*args: str, data: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([_age(), *args], input=data, capture_output=True, timeout=120)


def age_tty(args: list[str], passphrase: str) -> tuple[int, bytes]:
    """Run age in a pseudo-terminal, typing ``passphrase`` at each passphrase prompt: (exit status, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execv(_age(), [_age(), *args])
    out, typed, deadline = b"", 0, time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
                if out.lower().count(b"passphrase") > typed:
                    typed = out.lower().count(b"passphrase")
                    os.write(fd, passphrase.encode() + b"\n")
            elif os.waitpid(pid, os.WNOHANG)[0]:
                return 0, out
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), out
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- keys as age-keygen makes them

def test_identities_and_recipients_are_age_keygens(keys, tmp_path):
    key_file, identity, recipient = keys
    assert age.parse_identities(identity)  # the comments of age-keygen's file are skipped
    secret, public = age.generate_identity()
    assert secret.startswith("AGE-SECRET-KEY-1") and public.startswith("age1")
    (tmp_path / "ours.txt").write_text(secret + "\n")
    derived = subprocess.run(["age-keygen", "-y", str(tmp_path / "ours.txt")], capture_output=True, text=True,
                             check=True, timeout=30).stdout.strip()
    assert derived == public
    assert age.parse_recipient(recipient) and age.bech32_encode("age", age.parse_recipient(recipient)) == recipient


# --------------------------------------------------------------------------- ours -> age, age -> ours

@pytest.mark.parametrize("size", SIZES)
def test_age_decrypts_what_encrypt_writes(keys, tmp_path, size):
    key_file, _, recipient = keys
    data = os.urandom(size)
    sealed = encrypt(data, recipients=(recipient,))
    assert sealed.startswith(b"age-encryption.org/v1\n-> X25519 ")
    chunks = max(1, -(-size // CHUNK))
    assert len(sealed) == sealed.index(b"\n---") + 49 + 16 + size + 16 * chunks  # header, nonce, tags
    (tmp_path / "f.age").write_bytes(sealed)
    proc = age_cli("-d", "-i", str(key_file), str(tmp_path / "f.age"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == data


@pytest.mark.parametrize("size", SIZES)
def test_decrypt_reads_what_age_writes(keys, tmp_path, size):
    _, identity, recipient = keys
    data = os.urandom(size)
    other, other_recipient = age.generate_identity()
    proc = age_cli("-e", "-r", other_recipient, "-r", recipient, data=data)  # we are its second recipient
    assert proc.returncode == 0, proc.stderr
    assert decrypt(proc.stdout, identity=Password(identity)) == data
    assert decrypt(proc.stdout, identity=other) == data


def test_passphrases_both_ways(tmp_path):
    data = os.urandom(CHUNK + 17)
    (tmp_path / "plain").write_bytes(data)
    # age -p writes, decrypt reads
    status, out = age_tty(["-p", "-o", str(tmp_path / "p.age"), str(tmp_path / "plain")], "correct horse")
    assert status == 0, out
    assert decrypt((tmp_path / "p.age").read_bytes(), passphrase=Password("correct horse")) == data
    with pytest.raises(ConversionError, match="wrong encryption.passphrase") as e:
        decrypt((tmp_path / "p.age").read_bytes(), passphrase="battery staple")
    assert "battery" not in str(e.value)
    # encrypt writes (a lower work factor: quicker), age -d reads
    (tmp_path / "ours.age").write_bytes(encrypt(data, passphrase=Password("correct horse"), work_factor=12))
    status, out = age_tty(["-d", "-o", str(tmp_path / "back"), str(tmp_path / "ours.age")], "correct horse")
    assert status == 0, out
    assert (tmp_path / "back").read_bytes() == data


def test_encryption_streams_in_chunks():
    """A source of 4 chunks: the first output bytes need no more than two chunks of it read."""
    class Counting(io.BytesIO):
        read_bytes = 0

        def read(self, n=-1):
            b = super().read(n)
            Counting.read_bytes += len(b)
            return b

    _, recipient = age.generate_identity()
    [(_, out)] = open_outputs(Counting(os.urandom(4 * CHUNK)), "f", ["encrypt"], EncryptionKeys(recipients=(recipient,)))
    assert out.read(100) and Counting.read_bytes <= 2 * CHUNK


# --------------------------------------------------------------------------- tampering

_IDENTITY = age.generate_identity()


@settings(max_examples=60, deadline=None)
@given(size=st.sampled_from([0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK]) | st.integers(0, 3 * CHUNK),
       read=st.integers(1, CHUNK + 100), flip=st.integers(0, 10**9), bit=st.integers(0, 7))
def test_any_size_round_trips_and_any_flipped_bit_fails(size, read, flip, bit):
    secret, recipient = _IDENTITY
    data = os.urandom(size)
    sealed = encrypt(data, recipients=(recipient,))
    [(_, out)] = open_outputs(io.BytesIO(sealed), "f", ["decrypt"], EncryptionKeys(identity=secret))
    assert read_all(out, read) == data
    bad = bytearray(sealed)
    bad[flip % len(bad)] ^= 1 << bit
    with pytest.raises(ConversionError, match="cannot decrypt f"):
        [(_, out)] = open_outputs(io.BytesIO(bytes(bad)), "f", ["decrypt"], EncryptionKeys(identity=secret))
        read_all(out, read)

def test_tampering_is_detected_by_us_and_by_age(keys, tmp_path):
    key_file, identity, recipient = keys
    data = os.urandom(3 * CHUNK + 100)
    sealed = encrypt(data, recipients=(recipient,))
    payload = sealed.index(b"\n---") + 49 + 16
    c = CHUNK + 16
    chunks = [sealed[payload + i * c: payload + (i + 1) * c] for i in range(4)]
    mac_at = sealed.index(b"\n--- ") + 5
    cases = {
        "flipped ciphertext byte": (sealed[:payload + 10] + bytes([sealed[payload + 10] ^ 1]) + sealed[payload + 11:],
                                    "authentication failed at chunk 0"),
        "flipped last tag byte": (sealed[:-1] + bytes([sealed[-1] ^ 1]), "authentication failed at chunk 3"),
        "flipped header MAC": (sealed[:mac_at] + (b"A" if sealed[mac_at:mac_at + 1] != b"A" else b"B")
                               + sealed[mac_at + 1:], "header MAC|malformed header MAC"),
        "flipped payload nonce": (sealed[:payload - 1] + bytes([sealed[payload - 1] ^ 1]) + sealed[payload:],
                                  "authentication failed at chunk 0"),
        "cut at a chunk boundary": (sealed[:payload + 2 * c], "authentication failed at chunk 1"),
        "cut inside a chunk": (sealed[:payload + c + 100], "authentication failed at chunk 1"),
        "chunks swapped": (sealed[:payload] + chunks[1] + chunks[0] + chunks[2] + chunks[3], "authentication failed"),
        "chunk appended": (sealed + chunks[1], "authentication failed"),
        "header cut": (sealed[:40], "truncated"),
    }
    for what, (bad, problem) in cases.items():
        with pytest.raises(ConversionError, match=problem) as e:
            decrypt(bad, identity=identity)
        assert "cannot decrypt secret.bin.age" in str(e.value), what
        (tmp_path / "bad.age").write_bytes(bad)
        assert age_cli("-d", "-i", str(key_file), str(tmp_path / "bad.age")).returncode != 0, what
    other, _ = age.generate_identity()
    with pytest.raises(ConversionError, match="none of the encryption.identity keys") as e:
        decrypt(sealed, identity=other)
    assert other not in str(e.value) and identity.strip().splitlines()[-1] not in str(e.value)


def test_both_formats_are_read_by_one_decrypt_and_told_apart_by_their_magic(keys):
    _, identity, recipient = keys
    legacy = read_all(aes_stream.EncryptStream(io.BytesIO(b"old"), bytes.fromhex(LEGACY_KEY), 1000))
    new = encrypt(b"new", recipients=(recipient,))
    both = {"identity": Password(identity), "key": Password(LEGACY_KEY)}
    assert decrypt(legacy, **both) == b"old" and decrypt(new, **both) == b"new"
    with pytest.raises(ConversionError, match="earlier copycat format .*encryption.key"):
        decrypt(legacy, identity=identity)
    with pytest.raises(ConversionError, match="age-encrypted file: set encryption.identity"):
        decrypt(new, key=LEGACY_KEY)
    with pytest.raises(ConversionError, match="not a copycat-encrypted file .* nor an age-encrypted file"):
        decrypt(b"plain text, not encrypted at all", **both)
    armored = age_cli("-e", "-a", "-r", recipient, data=b"x").stdout
    with pytest.raises(ConversionError, match="ASCII-armored"):
        decrypt(armored, **both)
    # encryption.key alone still writes the earlier format (existing jobs keep their readers)
    assert encrypt(b"x", key=LEGACY_KEY).startswith(aes_stream.ENC_MAGIC)


# --------------------------------------------------------------------------- config and the copier

def test_config_checks_keys_without_showing_secrets(keys):
    _, identity, recipient = keys
    base = {"name": "c", "source.url": "/s", "target.url": "/t"}
    values = parse_copy_config({**base, "converters": "encrypt", "encryption.recipients": recipient,
                                "encryption.identity": identity})
    assert isinstance(values["encryption.identity"], Password) and identity not in repr(values)
    assert identity not in repr(EncryptionKeys.from_config(values))
    from airflow_copycat.runtime.copy_job import secret_keys  # hidden in plans and XCom, as every secret

    assert {"encryption.identity", "encryption.passphrase", "encryption.key"} <= secret_keys(
        {"encryption.identity": "x", "encryption.passphrase": "y", "encryption.key": "z", "encryption.recipients": "r"})
    secret_line = identity.strip().splitlines()[-1]
    with pytest.raises(ConfigException) as e:
        parse_copy_config({**base, "converters": "encrypt", "encryption.recipients": "age1notakey",
                           "encryption.identity": secret_line[:-3] + "QQQ"})
    message = str(e.value)
    assert "encryption.recipients" in message and "age1notakey" in message
    assert "encryption.identity" in message and secret_line[:-3] not in message
    with pytest.raises(ConfigException, match="encryption.passphrase.*not both"):
        parse_copy_config({**base, "converters": "encrypt", "encryption.recipients": recipient,
                           "encryption.passphrase": "pw"})
    with pytest.raises(ConfigException, match="encrypt converter needs encryption.recipients"):
        parse_copy_config({**base, "converters": "encrypt", "encryption.identity": identity})
    with pytest.raises(ConfigException, match="decrypt converter needs encryption.identity"):
        parse_copy_config({**base, "converters": "decrypt", "encryption.recipients": recipient})


def test_copier_encrypts_for_age_and_publishes_nothing_of_a_tampered_file(keys, tmp_path):
    key_file, identity, recipient = keys
    fs = fsspec.filesystem("file")
    src, tgt = str(tmp_path / "src"), str(tmp_path / "tgt")
    data = os.urandom(2 * CHUNK + 3)

    fs.makedirs(src, exist_ok=True)

    staging = Staging(tgt)
    config = {"encryption.recipients": recipient, "encryption.identity": Password(identity)}
    f = put(fs, src, "d/data.bin", data, converters=("encrypt",))
    assert copy_unit(WorkUnit(f), fs, fs, staging, config)["status"] == "ok"
    sealed = fs.cat_file(posixpath.join(staging.file_dir(f), f.destination))
    (tmp_path / "staged.age").write_bytes(sealed)
    proc = age_cli("-d", "-i", str(key_file), str(tmp_path / "staged.age"))
    assert proc.returncode == 0 and proc.stdout == data
    # an age file named .age decrypts to its name without .age
    g = put(fs, src + "2", "data.bin.age", age_cli("-r", recipient, data=data).stdout, converters=("decrypt",))
    assert g.destination == "data.bin"
    assert copy_unit(WorkUnit(g), fs, fs, staging, config)["status"] == "ok"
    assert fs.cat_file(posixpath.join(staging.file_dir(g), "data.bin")) == data
    tampered = bytearray(sealed)
    tampered[-CHUNK // 2] ^= 1
    h = put(fs, src + "3", "data.bin.enc", bytes(tampered), converters=("decrypt",))
    r = copy_unit(WorkUnit(h), fs, fs, staging, config)
    assert r["status"] == "failed" and h.origin in r["error"] and "authentication failed at chunk 1" in r["error"]
    assert staged_files(fs, staging, h) == {}
