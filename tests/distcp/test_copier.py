"""copy_unit / finish_split: staging with done markers, reuse, checksums, converters, split files,
on the local filesystem and fsspec's memory filesystem."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import tarfile
import threading
import tracemalloc
import uuid

import fsspec
import pytest

from airflow_copycat.distcp import aes_stream, reading, split_copy, whole_copy
from airflow_copycat.distcp import converters as conv
from airflow_copycat.distcp.copier import copy_unit
from airflow_copycat.distcp.done_markers import read_done_marker
from airflow_copycat.distcp.model import CopyableFile, Staging, WorkUnit
from airflow_copycat.distcp.publish import Publisher
from airflow_copycat.distcp.split_copy import finish_split
from airflow_copycat.distcp.staged import SetDir, data_name, flat_layout

KEY = "ab" * 32
RESULT_KEYS = {"file", "origin", "destination", "dataset", "file_set", "part", "parts", "status", "error",
               "bytes_read", "bytes_written", "seconds"}


@pytest.fixture(params=["file", "memory"])
def env(request, tmp_path):
    """(fs, source root, target root) on a local directory or a fresh memory:// prefix."""
    if request.param == "file":
        fs = fsspec.filesystem("file")
        src, tgt = str(tmp_path / "src"), str(tmp_path / "tgt")
        fs.makedirs(src, exist_ok=True)
        yield fs, src, tgt
    else:
        fs = fsspec.filesystem("memory")
        root = f"/copier-{uuid.uuid4().hex[:8]}"
        yield fs, root + "/src", root + "/tgt"
        fs.rm(root, recursive=True)


@pytest.fixture
def local(tmp_path):
    fs = fsspec.filesystem("file")
    src, tgt = str(tmp_path / "src"), str(tmp_path / "tgt")
    fs.makedirs(src, exist_ok=True)
    return fs, src, tgt


def put(fs, root: str, relative: str, data: bytes, *, converters=(), destination=None, checksum=None,
        file_set="ds") -> CopyableFile:
    path = posixpath.join(root, relative)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    fs.pipe_file(path, data)
    return CopyableFile(origin=path, relative=relative,
                        destination=destination or conv.destination_for(relative, converters), size=len(data),
                        mtime=1_700_000_000.0, dataset=file_set, file_set=file_set, checksum=checksum,
                        converters=tuple(converters))


def md5(data: bytes) -> str:
    return "md5:" + hashlib.md5(data).hexdigest()


def make_tar(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if isinstance(data, tuple):
                info.type = tarfile.SYMTYPE if data[0] == "sym" else tarfile.LNKTYPE
                info.linkname = data[1]
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def staged_files(fs, staging: Staging, f: CopyableFile) -> dict[str, bytes]:
    """What is staged for ``f``, named as in its file dir whatever the layout: a file staged flat
    (:mod:`airflow_copycat.distcp.staged`) shows as its destination and ``_done.json`` (its journal
    record), beside the attempt temporaries in its set dir and anything in its file dir."""
    d = staging.file_dir(f)
    out = {p[len(d) + 1:]: fs.cat_file(p) for p in fs.find(d)} if fs.exists(d) else {}
    if flat_layout(fs, f):
        scan = SetDir.scan(staging.file_set_dir(f.file_set))
        if f.id in scan.data:
            out[f.destination] = fs.cat_file(staged_output(fs, staging, f))
        if f.id in scan.records:
            out["_done.json"] = json.dumps(scan.records[f.id]).encode()
        out.update({posixpath.basename(t): fs.cat_file(t) for t in scan.temps})
    return out


def staged_output(fs, staging: Staging, f: CopyableFile) -> str:
    """Where the single output of ``f`` is staged: flat, or in its file dir."""
    if flat_layout(fs, f):
        return posixpath.join(staging.file_set_dir(f.file_set), data_name(f))
    return posixpath.join(staging.file_dir(f), f.destination)


# --------------------------------------------------------------------------- whole files


def test_whole_file_is_staged_with_done_marker(env):
    fs, src, tgt = env
    data = os.urandom(300_000)
    f = put(fs, src, "d/a.bin", data, checksum=md5(data))
    staging = Staging(tgt)
    r = copy_unit(WorkUnit(f), fs, fs, staging, {"checksum": "md5"})
    assert RESULT_KEYS <= set(r)
    assert r["status"] == "ok" and r["error"] is None, r
    assert (r["file"], r["origin"], r["destination"], r["dataset"], r["file_set"], r["part"], r["parts"]) == (
        f.id, f.origin, "d/a.bin", "ds", "ds", 0, 1)
    assert r["bytes_read"] == r["bytes_written"] == len(data)
    assert staged_files(fs, staging, f).keys() == {"d/a.bin", "_done.json"}  # no temporary file left
    assert fs.cat_file(staged_output(fs, staging, f)) == data
    marker = json.loads(staged_files(fs, staging, f)["_done.json"])
    assert marker["id"] == f.id and marker["origin"] == f.origin
    if flat_layout(fs, f):  # a plain file on the local disk: staged flat, its record in a done journal
        assert marker["format"] == "copycat.distcp.done/2" and marker["staged"] == f.id + ".data"
        assert not fs.exists(staging.file_dir(f))
    else:
        assert marker["format"] == "copycat.distcp.done/1"
    assert marker["outputs"] == [{"path": "d/a.bin", "size": len(data)}]
    assert marker["checksum"] == md5(data) and marker["bytes_read"] == len(data)
    assert read_done_marker(fs, staging, f) == marker


def test_staged_file_is_reused_not_copied_again(env):
    fs, src, tgt = env
    f = put(fs, src, "a.txt", b"hello" * 1000)
    staging = Staging(tgt)
    assert copy_unit(WorkUnit(f), fs, fs, staging, {})["status"] == "ok"
    fs.rm(f.origin)  # reading it again would fail: the second call must not read
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "reused" and r["error"] is None
    assert r["bytes_read"] == 0 and r["bytes_written"] == 0 and r["bytes_reused"] == f.size


def test_rerun_after_a_failure_copies_only_what_is_not_staged(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    good = put(fs, src, "good.bin", b"g" * 5000)
    bad = put(fs, src, "bad.bin", b"b" * 5000, checksum=md5(b"something else"))
    first = [copy_unit(WorkUnit(f), fs, fs, staging, {}) for f in (good, bad)]
    assert [r["status"] for r in first] == ["ok", "failed"]
    assert read_done_marker(fs, staging, bad) is None
    second = [copy_unit(WorkUnit(f), fs, fs, staging, {}) for f in (good, bad)]
    assert second[0]["status"] == "reused" and second[0]["bytes_read"] == 0
    assert second[1]["status"] == "failed" and second[1]["bytes_read"] == 5000


def test_marker_of_another_file_version_is_not_reused(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "a.txt", b"v1")
    fs.makedirs(staging.file_dir(f), exist_ok=True)
    fs.pipe_file(staging.done_marker(f), json.dumps({"id": "someone-else"}).encode())
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "ok" and read_done_marker(fs, staging, f)["id"] == f.id


def test_leftovers_of_a_dead_attempt_are_replaced(env):
    """A dead attempt's temporaries are not touched (another attempt may still be running: the
    publisher drops them with the file's directory); a stale output is replaced whole."""
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "a.txt", b"complete content")
    d = staging.file_dir(f)
    fs.makedirs(posixpath.join(d, "_attempts/1-dead"), exist_ok=True)  # (where older copycats kept them)
    fs.pipe_file(posixpath.join(d, "_attempts/1-dead/1"), b"part")
    fs.pipe_file(posixpath.join(d, "_attempt-1-dead-1"), b"part")
    fs.pipe_file(posixpath.join(d, "a.txt"), b"half")
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "ok"
    assert staged_files(fs, staging, f).keys() == {"a.txt", "_done.json", "_attempts/1-dead/1", "_attempt-1-dead-1"}
    assert fs.cat_file(staged_output(fs, staging, f)) == b"complete content"
    assert read_done_marker(fs, staging, f)["outputs"] == [{"path": "a.txt", "size": 16}]
    if flat_layout(fs, f):  # staged flat: the file dir (an older copycat's, unfinished) is left as it was ...
        assert fs.cat_file(posixpath.join(d, "a.txt")) == b"half"
        # ... until the publisher drops it with the file
        assert Publisher(fs, staging).publish("ds", [f])["status"] == "published"
        assert not fs.exists(d) and fs.cat_file(staging.final("a.txt")) == b"complete content"


def test_checksum_mismatch_fails_naming_file_and_digests(env):
    fs, src, tgt = env
    data = b"payload" * 100
    wrong = md5(b"not the payload")
    f = put(fs, src, "x/data.csv", data, checksum=wrong)
    staging = Staging(tgt)
    r = copy_unit(WorkUnit(f), fs, fs, staging, {"checksum": "md5"})
    assert r["status"] == "failed"
    assert f.origin in r["error"] and "checksum mismatch" in r["error"]
    assert wrong in r["error"] and md5(data) in r["error"]
    assert staged_files(fs, staging, f) == {}


def test_sha256_and_no_checksum(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    data = b"abc" * 1000
    f = put(fs, src, "s.bin", data, checksum="sha256:" + hashlib.sha256(data).hexdigest())
    r = copy_unit(WorkUnit(f), fs, fs, staging, {"checksum": "sha256"})
    assert r["status"] == "ok"
    assert read_done_marker(fs, staging, f)["checksum"] == "sha256:" + hashlib.sha256(data).hexdigest()
    # the source's checksum is verified even when another algorithm is configured
    g = put(fs, src, "t.bin", data, checksum="sha256:" + "0" * 64)
    r = copy_unit(WorkUnit(g), fs, fs, staging, {"checksum": "md5"})
    assert r["status"] == "failed" and "sha256:" + "0" * 64 in r["error"]
    # checksum none: nothing computed, nothing compared
    h = put(fs, src, "u.bin", data, checksum=md5(b"other"))
    r = copy_unit(WorkUnit(h), fs, fs, staging, {"checksum": "none"})
    assert r["status"] == "ok" and read_done_marker(fs, staging, h)["checksum"] is None


def test_file_that_grows_during_the_copy_fails(local, monkeypatch):
    fs, src, tgt = local
    staging = Staging(tgt)
    data = os.urandom(3 << 20)
    f = put(fs, src, "growing.log", data)
    monkeypatch.setattr(reading, "PROGRESS_EVERY", 1 << 20)
    monkeypatch.setattr(whole_copy, "PROGRESS_EVERY", 1 << 20)
    monkeypatch.setattr(whole_copy, "CHUNK", 1 << 20)
    seen = []

    def progress(n):
        seen.append(n)
        if len(seen) == 1:
            with open(f.origin, "ab") as out:  # a writer appends while we copy
                out.write(b"more lines\n" * 100)

    r = copy_unit(WorkUnit(f), fs, fs, staging, {}, progress=progress)
    assert seen
    assert r["status"] == "failed" and "growing.log changed during the copy" in r["error"], r
    assert read_done_marker(fs, staging, f) is None and staged_files(fs, staging, f) == {}


def test_file_that_shrank_fails(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "a.bin", b"x" * 1000)
    fs.pipe_file(f.origin, b"x" * 600)
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "failed" and "read 600 bytes, the listing said 1000" in r["error"]
    assert read_done_marker(fs, staging, f) is None


def test_missing_source_fails_without_raising(env):
    fs, src, tgt = env
    f = put(fs, src, "gone.bin", b"x")
    fs.rm(f.origin)
    r = copy_unit(WorkUnit(f), fs, fs, Staging(tgt), {})
    assert r["status"] == "failed" and "gone.bin" in r["error"]


def test_progress_is_reported(local, monkeypatch):
    fs, src, tgt = local
    monkeypatch.setattr(reading, "PROGRESS_EVERY", 1 << 20)
    monkeypatch.setattr(whole_copy, "PROGRESS_EVERY", 1 << 20)
    f = put(fs, src, "big.bin", os.urandom(5 << 20))
    seen = []
    assert copy_unit(WorkUnit(f), fs, fs, Staging(tgt), {}, progress=seen.append)["status"] == "ok"
    assert seen[-1] == 5 << 20 and len(seen) >= 3 and seen == sorted(seen)


# --------------------------------------------------------------------------- converters


def test_gunzip_untar_expands_under_the_destination(env):
    fs, src, tgt = env
    tgz = gzip.compress(make_tar([("top/a.csv", b"a,b\n1,2\n"), ("top/sub/b.bin", b"\x00" * 2000)]))
    f = put(fs, src, "in/arch.tar.gz", tgz, converters=("gunzip", "untar"), checksum=md5(tgz))
    assert f.destination == "in/arch"
    staging = Staging(tgt)
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "ok", r
    assert r["bytes_read"] == len(tgz) and r["bytes_written"] == 8 + 2000
    assert staged_files(fs, staging, f) == {"in/arch/top/a.csv": b"a,b\n1,2\n", "in/arch/top/sub/b.bin": b"\0" * 2000,
                                            "_done.json": fs.cat_file(staging.done_marker(f))}
    marker = read_done_marker(fs, staging, f)
    assert marker["outputs"] == [{"path": "in/arch/top/a.csv", "size": 8},
                                 {"path": "in/arch/top/sub/b.bin", "size": 2000}]
    assert marker["checksum"] == md5(tgz)


def test_decompress_by_extension(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "l/a.json.gz", gzip.compress(b'{"a": 1}\n' * 500), converters=("decompress",))
    assert f.destination == "l/a.json"
    assert copy_unit(WorkUnit(f), fs, fs, staging, {})["status"] == "ok"
    assert fs.cat_file(posixpath.join(staging.file_dir(f), "l/a.json")) == b'{"a": 1}\n' * 500


@pytest.mark.parametrize("entries,match", [
    ([("fine.txt", b"ok"), ("../../escape.txt", b"x")], r"entry '\.\./\.\./escape\.txt' has a '\.\.' component"),
    ([("/etc/cron.d/evil", b"x")], r"entry '/etc/cron\.d/evil' has an absolute path"),
    ([("fine.txt", b"ok"), ("lnk", ("sym", "../../../etc/passwd"))],
     r"symlink entry 'lnk' -> '\.\./\.\./\.\./etc/passwd' points outside"),
    ([("fine.txt", b"ok"), ("hl", ("hard", "../outside"))], r"hard link entry 'hl' -> '\.\./outside' points outside"),
])
def test_hostile_archives_fail_and_stage_nothing(env, entries, match):
    fs, src, tgt = env
    staging = Staging(tgt)
    tgz = gzip.compress(make_tar(entries))
    f = put(fs, src, "drop/evil.tar.gz", tgz, converters=("gunzip", "untar"))
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "failed"
    assert f.origin in r["error"]
    assert re.search(match, r["error"]), r["error"]
    assert read_done_marker(fs, staging, f) is None
    assert staged_files(fs, staging, f) == {}  # not even the entries before the bad one
    written = [p for p in fs.find(posixpath.dirname(tgt)) if not p.startswith(src + "/")]
    assert not [p for p in written if any(w in p for w in ("escape", "outside", "cron", "fine"))], written


def test_corrupt_gzip_fails_naming_the_file(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    good = gzip.compress(b"line\n" * 10_000)
    f = put(fs, src, "logs/day.log.gz", good[: len(good) // 2], converters=("decompress",))
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "failed" and "corrupt or truncated gzip data in" in r["error"]
    assert f.origin in r["error"]
    assert staged_files(fs, staging, f) == {}
    g = put(fs, src, "logs/not.tar.gz", gzip.compress(b"not a tar at all" * 100), converters=("gunzip", "untar"))
    r = copy_unit(WorkUnit(g), fs, fs, staging, {})
    assert r["status"] == "failed" and g.origin in r["error"] and "not a tar archive" in r["error"]


def test_links_in_archives_become_copies(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    tar = make_tar([("d/a", b"A" * 10), ("d/b", b"B"), ("s", ("sym", "d/a")), ("h", ("hard", "d/b")),
                    ("dl", ("sym", "d")), ("ll", ("sym", "s"))])
    f = put(fs, src, "l.tar", tar, converters=("untar",))
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "ok", r
    files = staged_files(fs, staging, f)
    files.pop("_done.json")
    assert files == {"l/d/a": b"A" * 10, "l/d/b": b"B", "l/s": b"A" * 10, "l/h": b"B", "l/dl/a": b"A" * 10,
                     "l/dl/b": b"B", "l/ll": b"A" * 10}
    assert {o["path"] for o in read_done_marker(fs, staging, f)["outputs"]} == set(files)


def test_dangling_link_fails(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "l.tar", make_tar([("a", b"1"), ("s", ("sym", "missing"))]), converters=("untar",))
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "failed" and "symlink entry 's' -> 'missing'" in r["error"] and f.origin in r["error"]
    assert read_done_marker(fs, staging, f) is None


def test_file_and_directory_of_the_same_name_fails(env):
    fs, src, tgt = env
    f = put(fs, src, "c.tar", make_tar([("x", b"file"), ("x/y", b"below a file")]), converters=("untar",))
    r = copy_unit(WorkUnit(f), fs, fs, Staging(tgt), {})
    assert r["status"] == "failed" and "both a file and a directory" in r["error"]


def link_bomb(levels: int, payload: int) -> bytes:
    """A .tar.gz of one file and ``levels`` levels of two links each to the level below: its
    links stand for 2**levels copies of the file."""
    entries = [("d0/f", b"\0" * payload)]
    for level in range(1, levels + 1):
        entries += [(f"d{level}/{n}", ("sym", f"../d{level - 1}")) for n in "ab"]
    return gzip.compress(make_tar(entries))


@pytest.mark.parametrize("config, key", [
    ({}, "decompress.max.ratio"),  # the defaults: 16 MiB from a 1 KiB archive is past 1000 times
    ({"decompress.max.ratio": 0, "untar.max.bytes": 4 << 20}, "untar.max.bytes"),
    ({"decompress.max.ratio": 0, "untar.max.entries": 100}, "untar.max.entries"),  # 25 entries, 4095 copies
])
def test_link_bomb_is_refused_before_filling_the_disk(local, config, key):
    fs, src, tgt = local
    staging = Staging(tgt)
    f = put(fs, src, "bomb.tar.gz", link_bomb(12, 64 << 10), converters=("gunzip", "untar"))  # 256 MiB of copies
    assert f.size < 2000
    r = copy_unit(WorkUnit(f), fs, fs, staging, config)
    assert r["status"] == "failed", r
    assert f.origin in r["error"] and key in r["error"] and "symlink entry 'd" in r["error"]
    assert staged_files(fs, staging, f) == {}  # nothing staged, no temporary left
    assert r["bytes_written"] == 0


def test_link_copies_within_the_bounds_are_made(env):
    fs, src, tgt = env
    f = put(fs, src, "b.tar.gz", link_bomb(4, 1000), converters=("gunzip", "untar"))
    r = copy_unit(WorkUnit(f), fs, fs, Staging(tgt), {"untar.max.entries": 9 + 30, "untar.max.bytes": 31_000})
    assert r["status"] == "ok", r
    assert r["bytes_written"] == 31_000  # 1 + 2 + 4 + 8 + 16 copies of the file


def test_link_pass_is_linear_in_the_outputs(local, monkeypatch):
    """Materialising directory links looks at the outputs a bounded number of times in all (it
    sorted and scanned every output once per link: O(links x outputs))."""
    fs, src, tgt = local
    looked_at = [0]

    class CountingDict(dict):
        def __iter__(self):
            for key in super().__iter__():
                looked_at[0] += 1
                yield key

    real_init = whole_copy._Tree.__init__

    def init(self, origin):
        real_init(self, origin)
        self.files = CountingDict()

    monkeypatch.setattr(whole_copy._Tree, "__init__", init)
    n_files, n_links = 2000, 300
    tar = make_tar([("one/f", b"1"), ("two/g", b"2")] + [(f"many/{k}", b"") for k in range(n_files)]
                   + [(f"links/{k}", ("sym", "../one" if k % 2 else "../two")) for k in range(n_links)])
    f = put(fs, src, "t.tar", tar, converters=("untar",))
    r = copy_unit(WorkUnit(f), fs, fs, Staging(tgt), {})
    assert r["status"] == "ok", r
    outputs = n_files + 2 + n_links
    assert len(read_done_marker(fs, Staging(tgt), f)["outputs"]) == outputs
    assert looked_at[0] <= 3 * outputs, f"{n_links} links: the outputs were looked at {looked_at[0]} times"


@pytest.mark.parametrize("config", [{}, {"decompress.max.ratio": 100}])
def test_decompression_bomb_fails_the_file_naming_the_key(local, config):
    fs, src, tgt = local
    staging = Staging(tgt)
    compress = bz2.compress if not config else gzip.compress  # bzip2 of zeros: 1:500,000; gzip: 1:1000
    f = put(fs, src, "zeros.bin.bz2" if not config else "zeros.bin.gz", compress(b"\0" * (64 << 20)),
            converters=("decompress",))
    r = copy_unit(WorkUnit(f), fs, fs, staging, config)
    assert r["status"] == "failed", r
    assert f.origin in r["error"] and "decompress.max.ratio" in r["error"] and "bomb" in r["error"]
    assert staged_files(fs, staging, f) == {}
    ok = put(fs, src, "small.gz", gzip.compress(b"\0" * (8 << 20)), converters=("decompress",))  # the 16 MiB floor
    assert copy_unit(WorkUnit(ok), fs, fs, staging, config)["status"] == "ok"


def test_encrypt_then_decrypt_round_trip(env):
    fs, src, tgt = env
    data = os.urandom((2 << 20) + 123)
    f = put(fs, src, "secret/data.bin", data, converters=("encrypt",))
    assert f.destination == "secret/data.bin.enc"
    staging = Staging(tgt)
    config = {"encryption.key": KEY}
    r = copy_unit(WorkUnit(f), fs, fs, staging, config)
    assert r["status"] == "ok" and r["bytes_written"] > len(data)
    sealed = fs.cat_file(posixpath.join(staging.file_dir(f), f.destination))
    assert data[:64] not in sealed
    # the encrypted file is the source of a second copy that decrypts it
    g = put(fs, src + "2", "data.bin.enc", sealed, converters=("decrypt",))
    assert g.destination == "data.bin"
    r = copy_unit(WorkUnit(g), fs, fs, staging, config)
    assert r["status"] == "ok"
    assert fs.cat_file(posixpath.join(staging.file_dir(g), "data.bin")) == data
    # tampered: fails by name, nothing staged
    tampered = bytearray(sealed)
    tampered[len(tampered) // 2] ^= 1
    h = put(fs, src + "3", "data.bin.enc", bytes(tampered), converters=("decrypt",))
    r = copy_unit(WorkUnit(h), fs, fs, staging, config)
    assert r["status"] == "failed" and h.origin in r["error"] and "authentication failed" in r["error"]
    assert staged_files(fs, staging, h) == {}
    # truncated at a chunk boundary
    cut = put(fs, src + "4", "data.bin.enc", sealed[: aes_stream.ENC_HEADER + 2 * (aes_stream.ENC_CHUNK + 16)],
              converters=("decrypt",))
    r = copy_unit(WorkUnit(cut), fs, fs, staging, config)
    assert r["status"] == "failed" and "authentication failed" in r["error"]
    # a bad key is a clear error that does not show the key
    r = copy_unit(WorkUnit(g), fs, fs, Staging(tgt + "x"), {"encryption.key": "12" * 31})
    assert r["status"] == "failed" and "64 hex characters" in r["error"] and "12" * 31 not in r["error"]


# --------------------------------------------------------------------------- split files


def split_units(f: CopyableFile, block: int) -> list[WorkUnit]:
    n = -(-f.size // block)
    return [WorkUnit(f, k, n, k * block, min(block, f.size - k * block)) for k in range(n)]


def test_split_parts_and_finish_reproduce_the_bytes(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    data = os.urandom(1_000_003)
    f = put(fs, src, "big/blob.bin", data, checksum=md5(data))
    units = split_units(f, 300_000)
    assert len(units) == 4
    results = [copy_unit(u, fs, fs, staging, {"block.split.size": 300_000}) for u in reversed(units)]
    assert [r["status"] for r in results] == ["ok"] * 4
    assert [r["part"] for r in results] == [3, 2, 1, 0] and {r["parts"] for r in results} == {4}
    assert sum(r["bytes_written"] for r in results) == len(data)
    assert read_done_marker(fs, staging, f) is None  # not staged before it is assembled
    again = copy_unit(units[1], fs, fs, staging, {})
    assert again["status"] == "reused" and again["bytes_read"] == 0 and again["bytes_reused"] == 300_000
    r = finish_split(f, fs, staging, {"block.split.size": 300_000})
    assert r["status"] == "ok", r
    assert r["bytes_written"] == len(data) and r["parts"] == 4
    assert fs.cat_file(posixpath.join(staging.file_dir(f), "big/blob.bin")) == data
    assert staged_files(fs, staging, f).keys() == {"big/blob.bin", "_done.json"}  # _parts removed
    marker = read_done_marker(fs, staging, f)
    assert marker["checksum"] == md5(data) and marker["outputs"] == [{"path": "big/blob.bin", "size": len(data)}]
    # afterwards: every unit and the finish are no-ops
    assert copy_unit(units[0], fs, fs, staging, {})["status"] == "reused"
    assert finish_split(f, fs, staging, {}, parts=4)["status"] == "reused"


def test_finish_split_with_missing_parts_names_them(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "b.bin", os.urandom(1000))
    units = split_units(f, 250)
    for u in (units[0], units[2]):
        assert copy_unit(u, fs, fs, staging, {})["status"] == "ok"
    r = finish_split(f, fs, staging, {}, parts=4)
    assert r["status"] == "failed" and f.origin in r["error"] and "part(s) 1, 3 of 4" in r["error"]
    assert read_done_marker(fs, staging, f) is None
    # the rerun copies the missing parts only
    reruns = [copy_unit(u, fs, fs, staging, {}) for u in units]
    assert [r["status"] for r in reruns] == ["reused", "ok", "reused", "ok"]
    assert finish_split(f, fs, staging, {}, parts=4)["status"] == "ok"


def test_finish_split_checksum_mismatch(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    data = os.urandom(1000)
    f = put(fs, src, "b.bin", data, checksum=md5(b"different"))
    for u in split_units(f, 400):
        copy_unit(u, fs, fs, staging, {})
    r = finish_split(f, fs, staging, {"block.split.size": 400})
    assert r["status"] == "failed" and "checksum mismatch" in r["error"] and md5(data) in r["error"]
    assert read_done_marker(fs, staging, f) is None


def test_split_source_that_changed_fails(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "b.bin", b"x" * 1000)
    units = split_units(f, 400)
    fs.pipe_file(f.origin, b"x" * 1100)  # grew: the last part sees a byte more
    r = copy_unit(units[2], fs, fs, staging, {})
    assert r["status"] == "failed" and "changed during the copy" in r["error"]
    fs.pipe_file(f.origin, b"x" * 700)  # shrank: the middle part is short
    r = copy_unit(units[1], fs, fs, staging, {})
    assert r["status"] == "failed" and "part 1 of 3" in r["error"] and "has only 300 bytes" in r["error"]
    assert not fs.exists(staging.part_path(f, 1)) and not fs.exists(staging.part_path(f, 2))


def test_parts_of_another_block_split_size_are_not_reused(env):
    """A part is reused only when it holds the same byte range: after an interrupted run cut at
    10 bytes, a rerun cut at 5 must not take the old part 2 (bytes 20-25) for its part 2
    (bytes 10-15), though it has the right length -- there is no source checksum to catch it."""
    fs, src, tgt = env
    staging = Staging(tgt)
    data = bytes(range(65, 90))  # 25 bytes
    f = put(fs, src, "big.bin", data)
    old = split_units(f, 10)
    for u in (old[0], old[2]):
        assert copy_unit(u, fs, fs, staging, {"block.split.size": 10})["status"] == "ok"
    results = [copy_unit(u, fs, fs, staging, {"block.split.size": 5}) for u in split_units(f, 5)]
    assert [r["status"] for r in results] == ["ok"] * 5
    r = finish_split(f, fs, staging, {"block.split.size": 5})
    assert r["status"] == "ok", r
    assert fs.cat_file(posixpath.join(staging.file_dir(f), "big.bin")) == data


def test_finish_split_checks_each_part_against_its_range_and_digest(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    data = os.urandom(1000)
    f = put(fs, src, "b.bin", data)  # no source checksum: only the parts' own digests can tell
    units = split_units(f, 250)
    config = {"block.split.size": 250}
    for u in units:
        assert copy_unit(u, fs, fs, staging, config)["status"] == "ok"
    # a part whose bytes changed after its copy: refused by its digest, removed, copied again
    p1 = staging.part_path(f, 1)
    fs.pipe_file(p1, b"x" * 250)
    r = finish_split(f, fs, staging, config)
    assert r["status"] == "failed" and f.origin in r["error"] and "part 1 of 4" in r["error"]
    assert "digest" in r["error"] and read_done_marker(fs, staging, f) is None
    assert not fs.exists(p1)
    assert [copy_unit(u, fs, fs, staging, config)["status"] for u in units] == ["reused", "ok", "reused", "reused"]
    # parts swapped with their records: each is whole, but not at its place
    p0, p2 = staging.part_path(f, 0), staging.part_path(f, 2)
    for a, b in ((p0, p2), (p0 + ".json", p2 + ".json")):
        x, y = fs.cat_file(a), fs.cat_file(b)
        fs.pipe_file(a, y)
        fs.pipe_file(b, x)
    r = finish_split(f, fs, staging, config)
    assert r["status"] == "failed" and "part 0 of 4 holds bytes 500-750" in r["error"]
    # the next run copies the misplaced parts again, and the file assembles right
    assert [copy_unit(u, fs, fs, staging, config)["status"] for u in units] == ["ok", "reused", "ok", "reused"]
    assert finish_split(f, fs, staging, config)["status"] == "ok"
    assert fs.cat_file(posixpath.join(staging.file_dir(f), "b.bin")) == data


def test_part_whose_record_was_not_written_is_copied_again(env, monkeypatch):
    """A crash after a part is renamed into place but before its record is written leaves a
    "pending" record: the part is neither reused nor assembled."""
    fs, src, tgt = env
    staging = Staging(tgt)
    data = os.urandom(100)
    f = put(fs, src, "b.bin", data)
    units = split_units(f, 60)
    real = split_copy._Attempt.put_bytes

    def crash_at_the_final_record(self, final, payload):
        if final.endswith(".json") and b'"pending"' not in payload:
            raise OSError("killed")
        return real(self, final, payload)

    monkeypatch.setattr(split_copy._Attempt, "put_bytes", crash_at_the_final_record)
    assert copy_unit(units[0], fs, fs, staging, {})["status"] == "failed"
    monkeypatch.undo()
    assert fs.exists(staging.part_path(f, 0))
    assert copy_unit(units[1], fs, fs, staging, {})["status"] == "ok"
    r = finish_split(f, fs, staging, {}, parts=2)
    assert r["status"] == "failed" and "part 0 of 2 has no record" in r["error"]
    assert [copy_unit(u, fs, fs, staging, {})["status"] for u in units] == ["ok", "reused"]
    assert finish_split(f, fs, staging, {}, parts=2)["status"] == "ok"


def test_parts_without_records_are_taken_only_with_the_planned_lengths(env):
    """Parts staged before part records existed: assembled when block.split.size is known and
    every part has its planned length, else refused (and copied again by the next run)."""
    fs, src, tgt = env
    staging = Staging(tgt)
    data = b"0123456789"
    f = put(fs, src, "b.bin", data)
    for k, chunk in enumerate((b"0123", b"45", b"89")):  # part 1 is short
        fs.makedirs(posixpath.dirname(staging.part_path(f, k)), exist_ok=True)
        fs.pipe_file(staging.part_path(f, k), chunk)
    r = finish_split(f, fs, staging, {"block.split.size": 4})
    assert r["status"] == "failed" and "no records of their byte ranges" in r["error"]
    assert copy_unit(split_units(f, 4)[1], fs, fs, staging, {})["status"] == "ok"  # no record: never reused
    assert finish_split(f, fs, staging, {"block.split.size": 4})["status"] == "failed"  # one record: all need one
    fs.rm(staging.part_path(f, 1) + ".json")
    assert finish_split(f, fs, staging, {"block.split.size": 4})["status"] == "ok"
    assert fs.cat_file(posixpath.join(staging.file_dir(f), "b.bin")) == data


# --------------------------------------------------------------------------- concurrent attempts


class _StallingSource:
    """A source filesystem whose files return their first read, then (second read) signal
    ``stalled`` and wait for ``go``; then fail (``fail``: a slow attempt that dies late) or go on."""

    def __init__(self, fs, fail: bool = True):
        self.fs, self.fail, self.stalled, self.go = fs, fail, threading.Event(), threading.Event()

    def open(self, path, mode="rb", **kwargs):
        raw, outer = self.fs.open(path, mode, **kwargs), self

        class Stalling:
            reads = 0

            def read(self, n=-1):
                if self.reads == 1:
                    outer.stalled.set()
                    assert outer.go.wait(30)
                    if outer.fail:
                        raise OSError("connection reset by peer")
                self.reads += 1
                return raw.read(n)

            def seek(self, *args):
                return raw.seek(*args)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                raw.close()

        return Stalling()


def _race(fs, staging, unit, fail: bool) -> tuple[dict, dict]:
    """The results of a slow attempt of ``unit`` and of one run while the slow one waits."""
    slow_source = _StallingSource(fs, fail)
    slow: dict = {}
    thread = threading.Thread(target=lambda: slow.update(copy_unit(unit, slow_source, fs, staging, {})))
    thread.start()
    try:
        assert slow_source.stalled.wait(30)  # the slow attempt has begun writing
        fast = copy_unit(unit, fs, fs, staging, {})
    finally:
        slow_source.go.set()
        thread.join(30)
    return slow, fast


@pytest.mark.parametrize("kind", ["whole", "untar", "part"])
def test_a_failing_concurrent_attempt_leaves_what_the_other_staged(env, kind):
    """A slow first attempt (a zombie, or a speculative copy) and its retry copy the same unit;
    the retry stages it; then the slow one fails. Its cleanup touches its own temporaries only:
    the retry's outputs, marker (or part and record) stay, and the file publishes whole."""
    fs, src, tgt = env
    staging = Staging(tgt)
    data = os.urandom(5 << 20)
    if kind == "untar":
        f = put(fs, src, "t.tar", make_tar([("a.bin", data), ("b.txt", b"b" * 100)]), converters=("untar",))
    elif kind == "part":
        f = put(fs, src, "a.bin", data + b"tail")
    else:
        f = put(fs, src, "a.bin", data)
    unit = split_units(f, 5 << 20)[0] if kind == "part" else WorkUnit(f)
    slow, fast = _race(fs, staging, unit, fail=True)
    assert fast["status"] == "ok", fast
    assert slow["status"] == "failed" and "connection reset" in slow["error"], slow
    left = staged_files(fs, staging, f)
    assert not [p for p in left if p.startswith("_attempt")], left  # each attempt removed its temporaries
    if kind == "part":
        assert left.keys() == {"_parts/00000", "_parts/00000.json"} and left["_parts/00000"] == data
        assert copy_unit(split_units(f, 5 << 20)[1], fs, fs, staging, {})["status"] == "ok"
        assert finish_split(f, fs, staging, {"block.split.size": 5 << 20})["status"] == "ok"
        assert fs.cat_file(posixpath.join(staging.file_dir(f), "a.bin")) == data + b"tail"  # split: never flat
        return
    if kind == "untar":
        assert left == {"t/a.bin": data, "t/b.txt": b"b" * 100, "_done.json": left["_done.json"]}
    else:
        assert left == {"a.bin": data, "_done.json": left["_done.json"]}
    assert read_done_marker(fs, staging, f) is not None


def test_a_late_concurrent_attempt_that_succeeds_changes_nothing(local):
    # (local only: fsspec's memory filesystem shares one read position between the opens of a file)
    fs, src, tgt = local
    staging = Staging(tgt)
    data = os.urandom(5 << 20)
    f = put(fs, src, "a.bin", data)
    slow, fast = _race(fs, staging, WorkUnit(f), fail=False)
    assert slow["status"] == fast["status"] == "ok", (slow, fast)
    assert staged_files(fs, staging, f).keys() == {"a.bin", "_done.json"}
    assert fs.cat_file(staged_output(fs, staging, f)) == data


def test_programming_errors_raise(env):
    fs, src, tgt = env
    f = put(fs, src, "a.gz", gzip.compress(b"a"), converters=("gunzip",))
    with pytest.raises(ValueError, match="cannot have converters"):
        copy_unit(WorkUnit(f, 0, 2, 0, 10), fs, fs, Staging(tgt), {})
    with pytest.raises(TypeError):
        copy_unit(f, fs, fs, Staging(tgt), {})
    with pytest.raises(ValueError, match="checksum"):
        copy_unit(WorkUnit(f), fs, fs, Staging(tgt), {"checksum": "crc32"})


# --------------------------------------------------------------------------- memory


def test_memory_stays_bounded_for_a_large_file(local):
    fs, src, tgt = local
    size = 200 << 20
    path = os.path.join(src, "huge.bin")
    with open(path, "wb") as out:  # sparse: quick to make, read like any other file
        out.truncate(size)
    f = CopyableFile(origin=path, relative="huge.bin", destination="huge.bin", size=size, mtime=1.0, dataset="ds",
                     file_set="ds")
    staging = Staging(tgt)
    tracemalloc.start()
    try:
        r = copy_unit(WorkUnit(f), fs, fs, staging, {"checksum": "md5"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r["status"] == "ok" and r["bytes_written"] == size
    assert peak < 24 << 20, f"peak Python allocations {peak / 2**20:.1f} MiB for a {size >> 20} MiB file"
    assert os.path.getsize(staged_output(fs, staging, f)) == size


def test_empty_file(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "empty.txt", b"", checksum=md5(b""))
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "ok" and r["bytes_read"] == 0
    assert fs.cat_file(staged_output(fs, staging, f)) == b""
    assert read_done_marker(fs, staging, f)["outputs"] == [{"path": "empty.txt", "size": 0}]


def test_memory_source_to_local_target(tmp_path):
    mem = fsspec.filesystem("memory")
    root = f"/cross-{uuid.uuid4().hex[:8]}"
    try:
        tgz = gzip.compress(make_tar([("a.txt", b"A" * 100), ("b/c.txt", b"C")]))
        f = put(mem, root, "t.tgz", tgz, converters=("gunzip", "untar"), checksum=md5(tgz))
        assert f.destination == "t"
        local = fsspec.filesystem("file")
        staging = Staging(str(tmp_path / "tgt"))
        r = copy_unit(WorkUnit(f), mem, local, staging, {})
        assert r["status"] == "ok", r
        d = tmp_path / "tgt" / staging.file_dir(f)[len(str(tmp_path / "tgt")) + 1:] / "t"
        assert (d / "a.txt").read_bytes() == b"A" * 100 and (d / "b" / "c.txt").read_bytes() == b"C"
    finally:
        mem.rm(root, recursive=True)
