"""copy_unit / finish_split: staging with done markers, reuse, checksums, converters, split files,
on the local filesystem and fsspec's memory filesystem."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import tarfile
import tracemalloc
import uuid

import fsspec
import pytest

from airflow_copycat.distcp import converters as conv
from airflow_copycat.distcp import copier
from airflow_copycat.distcp.copier import copy_unit, finish_split, read_done_marker
from airflow_copycat.distcp.model import CopyableFile, Staging, WorkUnit

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
    d = staging.file_dir(f)
    if not fs.exists(d):
        return {}
    return {p[len(d) + 1:]: fs.cat_file(p) for p in fs.find(d)}


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
    assert fs.cat_file(posixpath.join(staging.file_dir(f), "d/a.bin")) == data
    marker = json.loads(fs.cat_file(staging.done_marker(f)))
    assert marker["id"] == f.id and marker["origin"] == f.origin
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
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "a.txt", b"complete content")
    d = staging.file_dir(f)
    fs.makedirs(d, exist_ok=True)
    fs.pipe_file(posixpath.join(d, ".a.txt.dead.tmp"), b"part")
    fs.pipe_file(posixpath.join(d, "a.txt"), b"half")
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "ok"
    assert staged_files(fs, staging, f).keys() == {"a.txt", "_done.json"}
    assert fs.cat_file(posixpath.join(d, "a.txt")) == b"complete content"


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
    monkeypatch.setattr(copier, "PROGRESS_EVERY", 1 << 20)
    monkeypatch.setattr(copier, "CHUNK", 1 << 20)
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
    monkeypatch.setattr(copier, "PROGRESS_EVERY", 1 << 20)
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
    cut = put(fs, src + "4", "data.bin.enc", sealed[: conv.ENC_HEADER + 2 * (conv.ENC_CHUNK + 16)],
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
    assert os.path.getsize(os.path.join(staging.file_dir(f), "huge.bin")) == size


def test_empty_file(env):
    fs, src, tgt = env
    staging = Staging(tgt)
    f = put(fs, src, "empty.txt", b"", checksum=md5(b""))
    r = copy_unit(WorkUnit(f), fs, fs, staging, {})
    assert r["status"] == "ok" and r["bytes_read"] == 0
    assert fs.cat_file(posixpath.join(staging.file_dir(f), "empty.txt")) == b""
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
