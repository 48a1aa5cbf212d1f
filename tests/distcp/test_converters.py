"""Streaming converters: decompressors, untar (with its refusals), AES-256-GCM streams, chains."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import tarfile
import tracemalloc
import zlib

import pytest

from airflow_copycat.distcp import aes_stream, decompress, streams
from airflow_copycat.distcp import converters as conv
from airflow_copycat.distcp.converters import open_outputs
from airflow_copycat.distcp.limits import Limits
from airflow_copycat.distcp.streams import ConversionError
from airflow_copycat.distcp.untar import Link

KEY = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"


def zstd_compress(data: bytes) -> bytes:
    return decompress._zstd().compress(data)


def read_all(stream, n: int = 1000) -> bytes:
    """Read in small pieces, as a copy does (never read())."""
    parts = []
    while True:
        b = stream.read(n)
        if not b:
            return b"".join(parts)
        parts.append(b)


def outputs(data: bytes, name: str, converters, key=None) -> list[tuple[str, object]]:
    """(path, bytes or Link) of every output, each stream read before the next is asked for."""
    out = []
    for path, item in open_outputs(io.BytesIO(data), name, converters, key):
        out.append((path, item if isinstance(item, Link) else read_all(item)))
    return out


def make_tar(entries) -> bytes:
    """entries: (name, bytes) for files, (name, "dir"), (name, ("sym"|"hard", target))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data == "dir":
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            elif isinstance(data, tuple):
                info.type = tarfile.SYMTYPE if data[0] == "sym" else tarfile.LNKTYPE
                info.linkname = data[1]
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


DATA = os.urandom(50_000) + b"text " * 20_000


# --------------------------------------------------------------------------- decompressors


@pytest.mark.parametrize("converter,compress", [
    ("gunzip", gzip.compress), ("bunzip2", bz2.compress), ("unxz", lzma.compress), ("unzstd", zstd_compress)])
def test_each_decompressor(converter, compress):
    assert outputs(compress(DATA), "x/f.bin", [converter]) == [("", DATA)]


def test_multi_member_gzip_and_multi_frame_zstd():
    assert outputs(gzip.compress(b"one ") + gzip.compress(b"two"), "f.gz", ["gunzip"]) == [("", b"one two")]
    assert outputs(zstd_compress(b"one ") + zstd_compress(b"two"), "f.zst", ["unzstd"]) == [("", b"one two")]
    assert outputs(bz2.compress(b"one ") + bz2.compress(b"two"), "f.bz2", ["bunzip2"]) == [("", b"one two")]


@pytest.mark.parametrize("name,compress", [
    ("a.csv.gz", gzip.compress), ("a.csv.GZ", gzip.compress), ("a.csv.bz2", bz2.compress),
    ("a.csv.xz", lzma.compress), ("a.csv.zst", zstd_compress), ("a.csv", lambda d: d)])
def test_decompress_by_extension(name, compress):
    assert outputs(compress(DATA), "dir/" + name, ["decompress"]) == [("", DATA)]


def test_names_and_destinations():
    name = conv.converted_name
    assert name("a.csv.gz", "gunzip") == "a.csv"
    assert name("a.tgz", "gunzip") == "a.tar"
    assert name("a.tgz", "decompress") == "a.tar"
    assert name("a.tar.bz2", "decompress") == "a.tar"
    assert name("a.txz", "decompress") == "a.tar"
    assert name("a.json.zst", "decompress") == "a.json"
    assert name("a.csv", "decompress") == "a.csv"
    assert name("a.csv", "gunzip") == "a.csv"
    assert name(".gz", "gunzip") == ".gz"
    assert name("b.tar", "untar") == "b"
    assert name("b", "untar") == "b"
    assert name("b.tar.gz", "untar") == "b" and name("b.tbz2", "untar") == "b" and name(".tar", "untar") == ".tar"
    assert name("a.csv", "encrypt") == "a.csv.enc"
    assert name("a.csv.enc", "decrypt") == "a.csv"
    dest = conv.destination_for
    assert dest("logs/2026/a.csv.gz", ["decompress"]) == "logs/2026/a.csv"
    assert dest("x/b.tar.gz", ["gunzip", "untar"]) == "x/b"
    assert dest("x/b.tgz", ["decompress", "untar", "decompress"]) == "x/b"
    assert dest("a.csv.gz.enc", ["decrypt", "decompress"]) == "a.csv"
    assert dest("a.csv", []) == "a.csv"


def test_streams_are_read_piecewise_with_bounded_memory():
    """A 96 MiB gzip of zeros (a ~100 KB file) decompresses without ever holding much of it."""
    size = 96 << 20
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    gz = b"".join(comp.compress(block) for _ in range(size >> 20)) + comp.flush()
    assert len(gz) < 1 << 20
    tracemalloc.start()
    try:
        total = 0
        for path, stream in open_outputs(io.BytesIO(gz), "zeros.gz", ["decompress"]):
            while True:
                b = stream.read(streams.CHUNK)
                if not b:
                    break
                total += len(b)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == size
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB"


# --------------------------------------------------------------------------- corrupt input


def test_corrupt_gzip_names_the_file():
    good = gzip.compress(DATA)
    bad_crc = bytearray(good)
    bad_crc[-8] ^= 0xFF
    cases = {"truncated": good[:-20], "cut header": good[:5], "not gzip": b"plain text, not gzip" * 10,
             "bad crc": bytes(bad_crc)}
    for what, data in cases.items():
        with pytest.raises(ConversionError, match=r"corrupt or truncated gzip data in src/bad\.csv\.gz") as e:
            outputs(data, "src/bad.csv.gz", ["decompress"])
        assert "bad.csv.gz" in str(e.value), what


@pytest.mark.parametrize("converter,compress,label", [
    ("bunzip2", bz2.compress, "bzip2"), ("unxz", lzma.compress, "xz"), ("unzstd", zstd_compress, "zstd")])
def test_truncated_other_codecs(converter, compress, label):
    data = compress(DATA)
    with pytest.raises(ConversionError, match=rf"corrupt or truncated {label} data in f\.bin"):
        outputs(data[: len(data) // 2], "f.bin", [converter])
    with pytest.raises(ConversionError, match=rf"{label} data in f\.bin"):
        outputs(b"garbage" * 100, "f.bin", [converter])


def test_source_errors_pass_through():
    class Boom(Exception):
        pass

    class Failing(io.RawIOBase):
        def readable(self):
            return True

        def read(self, n=-1):
            raise Boom("network down")

    with pytest.raises(Boom):
        for _, s in open_outputs(Failing(), "f.gz", ["gunzip"]):
            read_all(s)


# --------------------------------------------------------------------------- untar


def test_untar_regular_files_in_order():
    tar = make_tar([("top", "dir"), ("top/a.txt", b"alpha"), ("./top/sub/b.bin", DATA), ("top//c", b""),
                    ("top/empty", "dir")])
    assert outputs(tar, "arch.tar", ["untar"]) == [("top/a.txt", b"alpha"), ("top/sub/b.bin", DATA),
                                                   ("top/c", b"")]


def test_gunzip_untar_chain_and_decompress_inside():
    inner = gzip.compress(b"inside")
    tgz = gzip.compress(make_tar([("d/x.csv.gz", inner), ("d/y.txt", b"plain")]))
    assert outputs(tgz, "a.tar.gz", ["gunzip", "untar"]) == [("d/x.csv.gz", inner), ("d/y.txt", b"plain")]
    assert outputs(tgz, "a.tgz", ["decompress", "untar", "decompress"]) == [("d/x.csv", b"inside"),
                                                                             ("d/y.txt", b"plain")]


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress, zstd_compress])
def test_untar_alone_reads_a_compressed_tar(compress):
    tar = make_tar([("a", b"alpha"), ("b/c", DATA)])
    assert outputs(compress(tar), "x.tgz", ["untar"]) == [("a", b"alpha"), ("b/c", DATA)]
    cut = compress(tar)
    with pytest.raises(ConversionError, match=r"x\.tgz"):
        outputs(cut[: len(cut) // 2], "x.tgz", ["untar"])


def test_nested_untar():
    inner = make_tar([("f1", b"one"), ("g/f2", b"two")])
    assert outputs(make_tar([("in.tar", inner), ("p/in2.tar", inner)]), "o.tar", ["untar", "untar"]) == [
        ("in/f1", b"one"), ("in/g/f2", b"two"), ("p/in2/f1", b"one"), ("p/in2/g/f2", b"two")]
    # untar,untar expands every entry: one that is not a tar is an error naming it
    with pytest.raises(ConversionError, match=r"o\.tar\[z\] is not a tar archive"):
        outputs(make_tar([("in.tar", inner), ("z", b"zzz")]), "o.tar", ["untar", "untar"])


def test_links_inside_the_root_are_yielded_as_links():
    tar = make_tar([("d/a", b"A"), ("d/s", ("sym", "a")), ("d/up", ("sym", "../d/a")), ("h", ("hard", "d/a")),
                    ("dirlink", ("sym", "d"))])
    got = outputs(tar, "l.tar", ["untar"])
    assert got == [("d/a", b"A"), ("d/s", Link("d/a", "symlink", "d/s")), ("d/up", Link("d/a", "symlink", "d/up")),
                   ("h", Link("d/a", "hardlink", "h")), ("dirlink", Link("d", "symlink", "dirlink"))]


def test_link_paths_follow_renames():
    tar = make_tar([("x.csv.gz", gzip.compress(b"c")), ("y.csv.gz", ("sym", "x.csv.gz"))])
    assert outputs(tar, "t.tar", ["untar", "decompress"]) == [("x.csv", b"c"),
                                                              ("y.csv", Link("x.csv", "symlink", "y.csv.gz"))]


@pytest.mark.parametrize("entries,match", [
    ([("ok", b"1"), ("../evil", b"x")], r"archive bad\.tar: entry '\.\./evil' has a '\.\.' component"),
    ([("a/../../evil", b"x")], r"entry 'a/\.\./\.\./evil' has a '\.\.' component"),
    ([("a/../b", b"x")], r"entry 'a/\.\./b' has a '\.\.' component"),
    ([("/etc/passwd", b"x")], r"archive bad\.tar: entry '/etc/passwd' has an absolute path"),
    ([("C:/x", b"x")], r"entry 'C:/x' has an absolute path"),
    ([("d/link", ("sym", "../../etc/passwd"))], r"symlink entry 'd/link' -> '\.\./\.\./etc/passwd' points outside"),
    ([("link", ("sym", "/etc/passwd"))], r"symlink entry 'link' -> '/etc/passwd' points outside"),
    ([("link", ("hard", "../x"))], r"hard link entry 'link' -> '\.\./x' points outside"),
    ([("link", ("sym", "."))], r"points at the archive root"),
])
def test_untar_refuses_escaping_entries(entries, match):
    with pytest.raises(ConversionError, match=match):
        outputs(make_tar(entries), "bad.tar", ["untar"])


def test_refusal_inside_a_compressed_archive_names_origin():
    tgz = gzip.compress(make_tar([("../x", b"1")]))
    with pytest.raises(ConversionError, match=r"archive data/a\.tar\.gz: entry '\.\./x'"):
        outputs(tgz, "data/a.tar.gz", ["gunzip", "untar"])


def test_truncated_or_corrupt_tar_names_the_file():
    tar = make_tar([("a", b"a" * 5000), ("b", b"b" * 3000)])
    # a: header 512 + 5120 data; b: header 512 + 3072 data; end blocks at 9216
    for cut, match in [(9216, r"ends without its end-of-archive blocks.* after entry 'b'"),
                       (5632, r"ends without its end-of-archive blocks.* after entry 'a'"),
                       (2000, r"t\.tar\[a\]"),
                       (100, r"t\.tar is not a tar archive")]:
        with pytest.raises(ConversionError, match=match):
            outputs(tar[:cut], "t.tar", ["untar"])
    corrupt = bytearray(tar)
    corrupt[5632 + 10] ^= 0xFF  # b's header: bad checksum
    with pytest.raises(ConversionError, match=r"corrupt or truncated tar archive t\.tar: invalid tar header"):
        outputs(bytes(corrupt), "t.tar", ["untar"])
    with pytest.raises(ConversionError, match=r"g\.tar is not a tar archive"):
        outputs(b"BZh9 is not enough to be bzip2" * 30, "g.tar", ["untar"])
    # a cut .tar.gz: the gzip error names the file
    tgz = gzip.compress(tar)
    with pytest.raises(ConversionError, match=r"t\.tar\.gz"):
        outputs(tgz[: len(tgz) // 2], "t.tar.gz", ["gunzip", "untar"])


def test_tar_gz_trailer_is_verified_after_the_last_entry():
    """The tar ends before the gzip does: its trailing CRC is still checked."""
    tgz = bytearray(gzip.compress(make_tar([("a", b"x" * 100)])))
    tgz[-8] ^= 0xFF
    with pytest.raises(ConversionError, match="CRC check failed"):
        outputs(bytes(tgz), "a.tgz", ["gunzip", "untar"])


def test_empty_archive_has_no_outputs():
    assert outputs(make_tar([]), "e.tar", ["untar"]) == []


def test_corrupt_entry_inside_archive_names_entry():
    tar = make_tar([("ok.gz", gzip.compress(b"fine")), ("bad.gz", b"not gzip at all" * 3)])
    with pytest.raises(ConversionError, match=r"gzip data in a\.tar\[bad\.gz\]"):
        outputs(tar, "a.tar", ["untar", "decompress"])


# --------------------------------------------------------------------------- encryption


def encrypt(data: bytes, chunk: int = 1000, key: str = KEY) -> bytes:
    return read_all(aes_stream.EncryptStream(io.BytesIO(data), bytes.fromhex(key), chunk), 777)


def decrypt(data: bytes, key: str = KEY) -> bytes:
    return read_all(aes_stream.DecryptStream(io.BytesIO(data), bytes.fromhex(key), "secret.bin.enc"), 555)


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 3000, 3500])
def test_encrypt_decrypt_round_trip(size):
    data = os.urandom(size)
    sealed = encrypt(data)
    chunks = max(1, -(-size // 1000))
    assert len(sealed) == aes_stream.ENC_HEADER + size + aes_stream.ENC_TAG * chunks
    assert sealed.startswith(aes_stream.ENC_MAGIC)
    assert decrypt(sealed) == data


def test_encrypt_is_randomised_and_hides_plaintext():
    data = b"attack at dawn " * 100
    a, b = encrypt(data), encrypt(data)
    assert a != b and b"attack" not in a


def test_round_trip_through_open_outputs_with_default_chunks():
    data = os.urandom(3 * aes_stream.ENC_CHUNK + 5)
    [(path, sealed)] = outputs(data, "x.bin", ["encrypt"], KEY)
    assert path == ""
    assert outputs(sealed, "x.bin.enc", ["decrypt"], KEY) == [("", data)]
    gz = gzip.compress(data)
    [(_, sealed_gz)] = outputs(gz, "x.bin.gz", ["encrypt"], KEY)
    assert outputs(sealed_gz, "x.bin.gz.enc", ["decrypt", "decompress"], KEY) == [("", data)]


def test_tampering_and_truncation_are_detected():
    data = os.urandom(3500)
    sealed = encrypt(data)  # header 35, chunks of 1016 bytes: 3 full + one of 516
    h, c = aes_stream.ENC_HEADER, 1000 + aes_stream.ENC_TAG
    chunks = [sealed[h + i * c: h + (i + 1) * c] for i in range(4)]
    cases = {
        "flipped ciphertext byte": sealed[:h + 10] + bytes([sealed[h + 10] ^ 1]) + sealed[h + 11:],
        "flipped tag byte": sealed[:-1] + bytes([sealed[-1] ^ 1]),
        "flipped salt": sealed[:15] + bytes([sealed[15] ^ 1]) + sealed[16:],
        "cut at a chunk boundary": sealed[:h + 3 * c],
        "cut inside a chunk": sealed[:h + 2 * c + 100],
        "first chunk dropped": sealed[:h] + chunks[1] + chunks[2] + chunks[3],
        "chunk appended": sealed + chunks[1],
        "chunks swapped": sealed[:h] + chunks[1] + chunks[0] + chunks[2] + chunks[3],
        "chunk duplicated": sealed[:h] + chunks[0] + chunks[0] + chunks[2] + chunks[3],
    }
    for what, bad in cases.items():
        with pytest.raises(ConversionError, match=r"cannot decrypt secret\.bin\.enc"):
            decrypt(bad)
            pytest.fail(what)
    with pytest.raises(ConversionError, match="authentication failed at chunk 0"):
        decrypt(sealed, key="ff" * 32)
    with pytest.raises(ConversionError, match="truncated"):
        decrypt(sealed[:h])
    with pytest.raises(ConversionError, match="not a copycat-encrypted file"):
        decrypt(b"just some plain bytes, long enough for a header....")
    with pytest.raises(ConversionError, match="not a copycat-encrypted file"):
        decrypt(sealed[:20])


def test_nothing_of_a_bad_chunk_is_released():
    data = os.urandom(2500)
    sealed = bytearray(encrypt(data))
    sealed[aes_stream.ENC_HEADER + 1016 + 5] ^= 1  # second chunk
    s = aes_stream.DecryptStream(io.BytesIO(bytes(sealed)), bytes.fromhex(KEY), "f")
    assert s.read(1000) == data[:1000]
    with pytest.raises(ConversionError):
        s.read(1000)


def test_key_is_validated_and_never_shown():
    with pytest.raises(ConversionError, match="64 hex characters") as e:
        open_outputs(io.BytesIO(b""), "f", ["encrypt"], "zz" + KEY[2:])
    assert KEY[2:] not in str(e.value)
    with pytest.raises(ConversionError, match="64 hex characters"):
        open_outputs(io.BytesIO(b""), "f", ["decrypt"], None)

    class Password(str):
        value = KEY

    [(_, sealed)] = outputs(b"hi", "f", ["encrypt"], Password("[hidden]"))
    assert outputs(sealed, "f.enc", ["decrypt"], KEY) == [("", b"hi")]


def test_unknown_converter_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown converter"):
        open_outputs(io.BytesIO(b""), "f", ["unrar"])


def test_encryption_key_format_is_checked_with_the_config():
    from airflow_copycat.connect.errors import ConfigException
    from airflow_copycat.distcp.config import parse_copy_config

    base = {"name": "c", "source.url": "/s", "target.url": "/t", "converters": "encrypt"}
    for bad in ("zz" + KEY[2:], KEY[:-2], "secret"):
        with pytest.raises(ConfigException, match="encryption.key.*64 hex characters") as e:
            parse_copy_config({**base, "encryption.key": bad})
        assert bad not in str(e.value)
    assert parse_copy_config({**base, "encryption.key": KEY.upper()})["encryption.key"].value == KEY.upper()
    with pytest.raises(ConfigException, match="encryption.key"):  # checked also without a converter using it
        parse_copy_config({"name": "c", "source.url": "/s", "target.url": "/t", "encryption.key": "short"})


# --------------------------------------------------------------------------- bounds


def _header(name: bytes, size: int, kind: bytes) -> bytes:
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108], h[108:116], h[116:124] = b"0000644\0", b"0000000\0", b"0000000\0"
    h[124:136], h[136:148] = b"%011o\0" % size, b"00000000000\0"
    h[156:157], h[257:265] = kind, b"ustar  \0"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def _consume(data: bytes, name: str, converters, limits=None) -> None:
    for _, item in open_outputs(io.BytesIO(data), name, converters, limits=limits):
        if not isinstance(item, Link):
            streams.drain(item, 1 << 20)


def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_long_name_and_pax_headers_over_1_mib_are_refused_unread():
    """tarfile reads a GNU long-name or pax header whole into memory: a 510 KB .tgz grew a task
    by 1.5 GiB. Its size field is checked first."""
    end = _header(b"x", 1, b"0") + _padded(b"1") + b"\0" * 1024
    long_name = _header(b"././@LongLink", 4 << 20, b"L") + _padded(b"a" * (4 << 20)) + end
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("p")
        info.size, info.pax_headers = 1, {"comment": "c" * (4 << 20)}
        tf.addfile(info, io.BytesIO(b"1"))
    for data, kind in ((gzip.compress(long_name), "GNU long-name header"), (buf.getvalue(), "pax header")):
        def run():
            with pytest.raises(ConversionError) as e:
                _consume(data, "bomb.tgz", ["untar"])
            assert "archive bomb.tgz" in str(e.value) and kind in str(e.value) and "1 MiB" in str(e.value)
        assert _peak_while(run) < 1 << 20
    # a long name of a sane length still works
    assert outputs(make_tar([("d/" + "n" * 300, b"ok")]), "t.tar", ["untar"]) == [("d/" + "n" * 300, b"ok")]


def test_chained_extension_headers_and_sparse_maps_are_bounded():
    end = _header(b"x", 1, b"0") + _padded(b"1") + b"\0" * 1024
    chain = b"".join(_header(b"././@LongLink", 4, b"L") + _padded(b"abc\0") for _ in range(400))
    with pytest.raises(ConversionError, match="more than 16 extension headers"):  # was a RecursionError
        _consume(chain + end, "c.tar", ["untar"])
    # an old GNU sparse entry with 3,000 extension blocks (tarfile keeps every entry of its map)
    sparse = bytearray(_header(b"s", 1, b"S"))
    sparse[386:398], sparse[398:410], sparse[482], sparse[483:495] = b"%011o\0" % 1, b"%011o\0" % 1, 1, b"%011o\0" % 9
    sparse[148:156] = b" " * 8
    sparse[148:156] = b"%06o\0 " % sum(sparse)
    block = bytearray(512)
    for i in range(21):
        block[i * 24:i * 24 + 24] = b"%011o\0%011o\0" % (i + 2, 1)
    block[504] = 1
    data = bytes(sparse) + bytes(block) * 3000 + bytes(512) + _padded(b"z") + end
    with pytest.raises(ConversionError, match="headers of one entry take more than 1048576 bytes"):
        _consume(data, "s.tar", ["untar"])
    with pytest.raises(ConversionError, match="s.tar"):  # cut in its map: was an IndexError
        _consume(bytes(sparse) + bytes(block) * 3, "s.tar", ["untar"])


@pytest.mark.parametrize("converters, compress, name", [
    (["gunzip"], gzip.compress, "z.gz"), (["bunzip2"], bz2.compress, "z.bz2"),
    (["decompress"], zstd_compress, "z.zst"), (["decompress"], lzma.compress, "z.xz"),
    (["untar"], gzip.compress, "z.tgz")])  # untar's own decompression of a .tgz
def test_decompression_bombs_are_refused_as_bytes_come_out(converters, compress, name):
    def bomb(size: int) -> bytes:
        payload = b"\0" * size
        return compress(make_tar([("z", payload)]) if converters == ["untar"] else payload)

    data = bomb(64 << 20)
    with pytest.raises(ConversionError) as e:
        _consume(data, name, converters, Limits(max_ratio=100))
    assert name in str(e.value) and "decompress.max.ratio = 100 times" in str(e.value)
    assert re.search(r"\((16|17)\.0 MiB from", str(e.value)), str(e.value)  # refused as bytes come out
    _consume(data, name, converters, Limits(max_ratio=0))  # 0: no bound
    # the default (1000) with a tiny file: 8 MiB of zeros from a few KiB is allowed (the 16 MiB floor)
    _consume(bomb(8 << 20), name, converters)


def test_untar_entry_and_byte_bounds_name_the_entry_and_the_key():
    tar = make_tar([(f"f{k}", b"x" * 100) for k in range(30)])
    with pytest.raises(ConversionError) as e:
        _consume(tar, "many.tar", ["untar"], Limits(max_entries=10))
    assert "archive many.tar: entry 'f10' is past untar.max.entries = 10" in str(e.value)
    with pytest.raises(ConversionError) as e:
        _consume(tar, "many.tar", ["untar"], Limits(max_bytes=1050))
    assert "archive many.tar: entry 'f10' takes its expanded size past untar.max.bytes = 1050" in str(e.value)
    _consume(tar, "many.tar", ["untar"], Limits(max_bytes=3000, max_entries=30))
    # an entry whose header claims too much fails before any of it is read
    big = make_tar([("huge", os.urandom(3 << 20))])
    limits = Limits(max_bytes=1 << 20)
    with pytest.raises(ConversionError, match="entry 'huge' takes its expanded size past untar.max.bytes"):
        _consume(big, "big.tar", ["untar"], limits)
    assert limits.bytes == 0
    # nested archives: the bytes of the inner archive's outputs count, not the inner archive twice
    inner = make_tar([("a", b"a" * 600), ("b", b"b" * 600)])
    outer = make_tar([("in.tar", inner)])
    limits = Limits(max_bytes=1200)
    _consume(outer, "outer.tar", ["untar", "untar"], limits)
    assert limits.bytes == 1200 and limits.entries == 3
    with pytest.raises(ConversionError, match=r"archive outer.tar\[in.tar\]: entry 'b'"):
        _consume(outer, "outer.tar", ["untar", "untar"], Limits(max_bytes=1199))


def test_limits_from_config():
    limits = Limits.from_config({})
    assert (limits.max_bytes, limits.max_entries, limits.max_ratio) == (100 << 30, 1_000_000, 1000)
    limits = Limits.from_config({"untar.max.bytes": 5, "untar.max.entries": 0, "decompress.max.ratio": 2.5})
    assert (limits.max_bytes, limits.max_entries, limits.max_ratio) == (5, 0, 2.5)
