"""Publishing file sets through the write-ahead log (airflow_copycat.distcp.publish).

The crash tests run the publish in a child process (this file, run as a script)
that SIGKILLs itself at a chosen point -- after the k-th rename, after the k-th
logged step, with the log half written, after staging was dropped -- and records
what the published tree looked like after every step; the parent then checks
every recorded state, recovers, and compares the target with the intended result.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import signal
import subprocess
import sys
import types
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from fsspec.implementations.local import LocalFileSystem  # noqa: E402

from airflow_copycat.distcp.model import CopyableFile, Staging, file_set_id  # noqa: E402
from airflow_copycat.distcp.publish import Publisher  # noqa: E402
from airflow_copycat.distcp.publish_log import LOG_FORMAT, PublishError, _Staged  # noqa: E402
from airflow_copycat.storage import AtomicFiles  # noqa: E402

T0 = 1_600_000_000.0


# ---------------------------------------------------------------- helpers
def cfile(dest: str, size: int, *, origin: str | None = None, mtime: float = T0, mode: int | None = 0o644,
          file_set: str = "ds", preserve=("perm", "mtime"), **kw) -> CopyableFile:
    origin = origin or f"/src/{file_set}/{dest}"
    return CopyableFile(origin=origin, relative=origin.removeprefix("/src/"), destination=dest, size=size,
                        mtime=mtime, dataset=file_set, file_set=file_set, mode=mode, preserve=tuple(preserve), **kw)


def stage(fs, staging: Staging, f: CopyableFile, outputs: dict[str, bytes] | None = None, *,
          marker_id: str | None = None, marker: bool = True) -> None:
    """Stage ``f`` as the copier does: its outputs under ``file_dir(f)``, then the done marker."""
    outputs = {f.destination: b"x" * f.size} if outputs is None else outputs
    d = staging.file_dir(f)
    for rel, data in outputs.items():
        fs.makedirs(posixpath.dirname(posixpath.join(d, rel)), exist_ok=True)
        fs.pipe_file(posixpath.join(d, rel), data)
    if marker:
        doc = {"id": marker_id or f.id, "origin": f.origin,
               "outputs": [{"path": rel, "size": len(data)} for rel, data in outputs.items()],
               "checksum": None, "bytes": sum(len(b) for b in outputs.values())}
        fs.pipe_file(staging.done_marker(f), json.dumps(doc).encode())


def tree(root: Path) -> dict[str, bytes]:
    """The published tree: every file below ``root`` but ``_copycat/``, with its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and "_copycat" in dirnames:
            dirnames.remove("_copycat")
        for name in filenames:
            p = Path(dirpath, name)
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def files_below(path: str) -> list[str]:
    return sorted(str(p) for p in Path(path).rglob("*") if p.is_file()) if Path(path).exists() else []


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


@pytest.fixture
def local(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    fs = LocalFileSystem()
    staging = Staging(str(target))
    return target, fs, staging, Publisher(fs, staging)


# ---------------------------------------------------------------- happy path, attributes
def test_publish_local_files_appear_with_modes_and_mtimes(local):
    target, fs, staging, pub = local
    f1 = cfile("a.csv", 10, mode=0o100640, mtime=T0 + 0.25)
    f2 = cfile("sub/dir/b.csv", 7, mode=0o600, mtime=T0 + 100.5)
    f3 = cfile("arch", 20, origin="/src/ds/arch.tar", converters=("untar",))
    stage(fs, staging, f1, {"a.csv": b"0123456789"})
    stage(fs, staging, f2, {"sub/dir/b.csv": b"bbbbbbb"})
    stage(fs, staging, f3, {"arch/x.txt": b"ax", "arch/y/z.txt": b"ayz"})

    res = pub.publish("ds", [f1, f2, f3], [])

    assert res["status"] == "published"
    assert (res["files"], res["outputs"], res["bytes"], res["deleted"], res["missing"]) == (3, 4, 22, 0, [])
    assert tree(target) == {"a.csv": b"0123456789", "sub/dir/b.csv": b"bbbbbbb", "arch/x.txt": b"ax",
                            "arch/y/z.txt": b"ayz"}
    for f in (f1, f2):
        st = os.stat(target / f.destination)
        assert oct(st.st_mode & 0o7777) == oct(f.mode & 0o7777)
        assert st.st_mtime_ns == int(round(f.mtime * 1e9))
    assert any("untar" in n for n in res["notes"])
    assert not Path(staging.file_set_dir("ds")).exists()
    assert files_below(staging.wal_dir()) == []
    assert pub.read_manifest("ds") == {"a.csv": f1.id, "sub/dir/b.csv": f2.id, "arch/x.txt": f3.id,
                                       "arch/y/z.txt": f3.id}
    assert json.loads(Path(pub.manifest_path("ds")).read_text()) == pub.read_manifest("ds")
    assert pub.manifest_path("ds").endswith(f"/_copycat/distcp/manifest/{file_set_id('ds')}.json")


def test_preserve_attrs_false_and_not_preserved_attributes(local):
    target, fs, staging, pub = local
    f1 = cfile("a.csv", 3, mode=0o600, mtime=T0)
    f2 = cfile("b.csv", 3, mode=0o600, mtime=T0, preserve=())
    stage(fs, staging, f1)
    stage(fs, staging, f2)
    pub.publish("ds", [f1, f2], [], preserve_attrs=False)
    for name in ("a.csv", "b.csv"):
        st = os.stat(target / name)
        assert st.st_mode & 0o777 != 0o600 and abs(st.st_mtime - T0) > 1000


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_owner_and_group_preserved_as_root(local):
    import grp
    import pwd

    target, fs, staging, pub = local
    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name
    f = cfile("a.csv", 3, owner="nobody", group=group, preserve=("owner", "group", "perm"), mode=0o640)
    g = cfile("b.csv", 3, owner="no-such-user-xyz", preserve=("owner",))
    stage(fs, staging, f)
    stage(fs, staging, g)
    res = pub.publish("ds", [f, g], [])
    st = os.stat(target / "a.csv")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (nobody.pw_uid, nobody.pw_gid, 0o640)
    assert os.stat(target / "b.csv").st_uid == 0
    assert any("no-such-user-xyz" in n for n in res["notes"])


def test_owner_not_set_when_not_root(local, monkeypatch):
    target, fs, staging, pub = local
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    f = cfile("a.csv", 3, owner="nobody", preserve=("owner", "perm"), mode=0o640)
    stage(fs, staging, f)
    res = pub.publish("ds", [f], [])
    assert res["status"] == "published" and any("only root" in n for n in res["notes"])
    assert os.stat(target / "a.csv").st_mode & 0o777 == 0o640


# ---------------------------------------------------------------- failed copies, reuse, independence
def test_unstaged_file_blocks_its_set_but_not_another_and_is_reused_next_run(local):
    target, fs, staging, pub = local
    a1, a2 = cfile("A/one", 3, file_set="A"), cfile("A/two", 4, file_set="A")
    b1 = cfile("B/one", 5, file_set="B")
    stage(fs, staging, a1)
    stage(fs, staging, a2, marker=False)  # its copy died before the done marker
    stage(fs, staging, b1)
    (target / "A").mkdir()
    (target / "A" / "old").write_bytes(b"old")

    ra = pub.publish("A", [a1, a2], ["A/old"])
    rb = pub.publish("B", [b1], [])

    assert ra["status"] == "not_published" and ra["missing"] == [a2.origin] and ra["files"] == 0
    assert "no done marker" in ra["errors"][a2.origin]
    assert rb["status"] == "published"
    assert tree(target) == {"A/old": b"old", "B/one": b"xxxxx"}  # nothing of A, not even its deletion
    assert Path(staging.done_marker(a1)).exists()  # A's staging kept for the next run
    assert not Path(pub.manifest_path("A")).exists()
    assert files_below(staging.wal_dir()) == []

    # next run: only a2 is copied again; a1's staged bytes are reused by id
    a1_inode = os.stat(Path(staging.file_dir(a1)) / "A/one").st_ino
    stage(fs, staging, a2)
    ra = pub.publish("A", [a1, a2], ["A/old"])
    assert ra["status"] == "published" and ra["deleted"] == 1
    assert tree(target) == {"A/one": b"xxx", "A/two": b"xxxx", "B/one": b"xxxxx"}
    assert os.stat(target / "A/one").st_ino == a1_inode
    assert not Path(staging.file_set_dir("A")).exists()


def test_marker_of_another_version_or_bad_output_is_not_staged(local):
    target, fs, staging, pub = local
    f = cfile("a.csv", 3)
    stage(fs, staging, f, marker_id="0" * 32)
    g = cfile("b.csv", 3)
    stage(fs, staging, g, {"../evil": b"xxx"})
    h = cfile("c.csv", 3)
    stage(fs, staging, h, {"elsewhere.csv": b"xxx"})
    k = cfile("d.csv", 3)
    stage(fs, staging, k)
    os.unlink(Path(staging.file_dir(k)) / "d.csv")  # output gone, marker left
    m = cfile("e.csv", 3)
    stage(fs, staging, m)
    Path(staging.file_dir(m), "e.csv").write_bytes(b"xx")  # truncated after the marker

    res = pub.publish("ds", [f, g, h, k, m], [])

    assert res["status"] == "not_published"
    assert res["missing"] == sorted(x.origin for x in (f, g, h, k, m))
    assert "another version" in res["errors"][f.origin]
    assert "'..'" in res["errors"][g.origin]
    assert "not its destination" in res["errors"][h.origin]
    assert "missing" in res["errors"][k.origin]
    assert "2 bytes" in res["errors"][m.origin]
    assert tree(target) == {}


def test_invalid_requests_are_refused(local):
    target, fs, staging, pub = local
    f = cfile("a.csv", 3)
    stage(fs, staging, f)
    with pytest.raises(ValueError, match="belongs to file set"):
        pub.publish("other", [f], [])
    for bad in ("../x", "/abs", "_copycat/distcp/wal/x.json", "a/./b", ""):
        with pytest.raises(ValueError, match="deletion"):
            pub.publish("ds", [f], [bad])
    with pytest.raises(ValueError, match="both publishes a.csv and deletes a.csv"):
        pub.publish("ds", [f], ["a.csv"])
    assert tree(target) == {} and Path(staging.done_marker(f)).exists()


def test_publish_all_keeps_file_sets_independent(local):
    target, fs, staging, pub = local
    a, b = cfile("A/x", 3, file_set="A"), cfile("B/x", 3, file_set="B")
    stage(fs, staging, a)
    stage(fs, staging, b)
    Path(staging.wal("A")).parent.mkdir(parents=True)
    Path(staging.wal("A")).write_text("{not json")  # A's log was damaged outside copycat

    results = {r["file_set"]: r for r in pub.publish_all({"A": ([a], []), "B": ([b], [])})}

    assert results["A"]["status"] == "failed" and "not valid JSON" in results["A"]["error"]
    assert results["B"]["status"] == "published"
    assert tree(target) == {"B/x": b"xxx"}
    rec = pub.recover()
    assert [r["status"] for r in rec] == ["failed"] and "not valid JSON" in rec[0]["error"]


# ---------------------------------------------------------------- overwrite, deletes, manifest
def test_overwrite_replaces_existing_file_atomically(local):
    target, fs, staging, pub = local
    write_tree(target, {"d/a.csv": b"old contents, longer than the new ones"})
    os.chmod(target / "d/a.csv", 0o666)
    f = cfile("d/a.csv", 3, mode=0o640, mtime=T0)
    stage(fs, staging, f, {"d/a.csv": b"new"})
    staged_inode = os.stat(Path(staging.file_dir(f)) / "d/a.csv").st_ino

    res = pub.publish("ds", [f], [])

    assert res["status"] == "published"
    st = os.stat(target / "d/a.csv")
    assert (target / "d/a.csv").read_bytes() == b"new"
    assert st.st_ino == staged_inode  # renamed into place (os.replace), not copied
    assert (st.st_mode & 0o777, st.st_mtime) == (0o640, T0)


def test_deletes_and_manifest_merge(local):
    target, fs, staging, pub = local
    f1, f2 = cfile("t/a.csv", 1), cfile("t/b.csv", 1)
    f3 = cfile("t/arch", 2, origin="/src/ds/t/arch.tar")
    stage(fs, staging, f1)
    stage(fs, staging, f2)
    stage(fs, staging, f3, {"t/arch/1": b"1", "t/arch/2": b"2"})
    pub.publish("ds", [f1, f2, f3], [])
    write_tree(target, {"t/unknown.csv": b"u"})

    g1 = cfile("t/c.csv", 2, origin="/src/ds/t/c.csv.gz")
    stage(fs, staging, g1, {"t/c.csv": b"cc"})
    res = pub.publish("ds", [g1], ["t/b.csv", "t/arch", "t/unknown.csv", "t/never-there.csv"])

    assert res["status"] == "published" and res["deleted"] == 4
    assert tree(target) == {"t/a.csv": b"x", "t/c.csv": b"cc"}
    assert pub.read_manifest("ds") == {"t/a.csv": f1.id, "t/c.csv": g1.id}
    # deletions only: no files to publish
    res = pub.publish("ds", [], ["t/a.csv"])
    assert res["status"] == "published" and tree(target) == {"t/c.csv": b"cc"}
    assert pub.read_manifest("ds") == {"t/c.csv": g1.id}
    # nothing at all: nothing written, and staging of other runs kept (drop_stale is what drops stale staging)
    stage(fs, staging, cfile("t/stale", 1))
    assert pub.publish("ds", [], [])["status"] == "published"
    assert Path(staging.file_set_dir("ds")).exists()


@pytest.mark.parametrize("listed", [False, True], ids=["update-only", "deletes-listed"])
def test_paths_that_change_type_are_replaced_and_replay_keeps_them(local, monkeypatch, tmp_path, listed):
    target, fs, staging, pub = local
    write_tree(target, {"t/x": b"a file, becomes a directory", "t/y/1": b"y1", "t/y/deep/2": b"y2", "t/z": b"z"})
    fx, fy = cfile("t/x/a", 2), cfile("t/y", 3)
    stage(fs, staging, fx, {"t/x/a": b"xa"})
    stage(fs, staging, fy, {"t/y": b"new"})
    saved = tmp_path / "log.json"
    real_finish = Publisher._finish

    def finish(self, log, wal, *rest):
        shutil.copy(wal, saved)
        real_finish(self, log, wal, *rest)

    monkeypatch.setattr(Publisher, "_finish", finish)
    res = pub.publish("ds", [fx, fy], ["t/x", "t/y/1", "t/y/deep/2"] if listed else [])

    assert res["status"] == "published"
    assert tree(target) == {"t/x/a": b"xa", "t/y": b"new", "t/z": b"z"}
    ops = [(s["op"], s.get("path") or s.get("to"), s.get("unless")) for s in json.loads(saved.read_text())["steps"]]
    first_rename = next(i for i, s in enumerate(ops) if s[0] == "rename")
    assert ("delete", "t/x", "directory") in ops[:first_rename] and ("delete", "t/y", "file") in ops[:first_rename]
    # a crash after the renames: the replay must not delete what they made
    shutil.copy(saved, staging.wal("ds"))
    assert [r["status"] for r in Publisher(fs, staging).recover()] == ["replayed"]
    assert tree(target) == {"t/x/a": b"xa", "t/y": b"new", "t/z": b"z"}


def test_stale_staging(local):
    target, fs, staging, pub = local
    stage(fs, staging, cfile("x", 1, file_set="gone"))
    stage(fs, staging, cfile("y", 1, file_set="kept"))
    stale = pub.stale_staging(["kept"])
    assert stale == [staging.file_set_dir("gone")]
    pub.drop_staging_dir(stale[0])
    assert pub.stale_staging(["kept"]) == [] and Path(staging.file_set_dir("kept")).exists()
    with pytest.raises(ValueError):
        pub.drop_staging_dir(str(target / "x"))


# ---------------------------------------------------------------- retried publish, staging per job and run
def test_a_retried_publish_after_a_crash_publishes_the_set(local, monkeypatch):
    target, fs, staging, pub = local
    # Given plain files, an archive replacing an older tree, deletions
    write_tree(target, {"d/old.csv": b"old", "d/arch/x.txt": b"old x", "d/arch/gone.txt": b"gone"})
    files = [cfile(f"d/{i}.csv", 2) for i in range(4)]
    arch = cfile("d/arch", 5, origin="/src/ds/d/arch.tar", converters=("untar",))
    for f in files:
        stage(fs, staging, f, {f.destination: b"%02d" % int(f.destination[2])})
    stage(fs, staging, arch, {"d/arch/x.txt": b"new x", "d/arch/y/z.txt": b"z"})
    deletes = ["d/old.csv", "d/arch/gone.txt"]
    # When the publishing process dies after its third rename
    real, n = AtomicFiles.rename, [0]

    def rename(*a, **k):
        if "/_copycat/distcp/staging/" in a[1]:
            n[0] += 1
            if n[0] == 3:
                raise KeyboardInterrupt("killed")
        return real(*a, **k)

    monkeypatch.setattr(AtomicFiles, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        pub.publish("ds", files + [arch], deletes)
    monkeypatch.setattr(AtomicFiles, "rename", real)
    # and the same publish is retried (an Airflow retry: same plan, same task results), twice
    expected = {**{f.destination: b"%02d" % int(f.destination[2]) for f in files},
                "d/arch/x.txt": b"new x", "d/arch/y/z.txt": b"z"}
    for attempt in (1, 2):
        res = pub.publish("ds", files + [arch], deletes)
        # Then it finishes the set and reports it published, counting what the crashed attempt had published
        assert res["status"] == "published", (attempt, res)
        assert (res["files"], res["outputs"], res["bytes"]) == (5, 6, 4 * 2 + 5 + 1), attempt
        assert res["replayed_log"] is (attempt == 1) and res["already_published"] == 5
        assert tree(target) == expected
    # a deletion listed below the archive (its old version's x.txt) never removes what the new version published
    assert pub.publish("ds", files + [arch], deletes + ["d/arch/x.txt", "d/arch/y"])["status"] == "published"
    assert tree(target) == expected
    assert pub.read_manifest("ds") == {**{f.destination: f.id for f in files}, "d/arch/x.txt": arch.id,
                                       "d/arch/y/z.txt": arch.id}
    assert files_below(staging.wal_dir()) == [] and not Path(staging.file_set_dir("ds")).exists()
    # a file neither staged nor published still blocks the set
    late = cfile("d/late.csv", 1)
    res = pub.publish("ds", files + [late], [])
    assert res["status"] == "not_published" and res["missing"] == [late.origin]


def test_publishing_drops_only_the_staging_of_the_files_it_published(local):
    # Given a backfill: the window of day 21 failed on one file, its good file stays staged
    target, fs, staging, pub = local
    d21, bad21 = cfile("ev/21/a", 3), cfile("ev/21/b", 3)
    stage(fs, staging, d21)
    assert pub.publish("ds", [d21, bad21], [])["status"] == "not_published"
    # When the window of day 22 publishes the same dataset, then crashes in a replayed publish of day 23
    d22 = cfile("ev/22/a", 3)
    stage(fs, staging, d22)
    assert pub.publish("ds", [d22], [])["status"] == "published"
    d23 = cfile("ev/23/a", 3)
    stage(fs, staging, d23)
    log = pub._plan("ds", [_Staged(d23, [{"path": "ev/23/a", "size": 3}])], [], True)[0]
    Path(staging.wal("ds")).write_text(json.dumps(log))
    assert [r["status"] for r in pub.recover()] == ["replayed"]
    # Then day 21's staged file is still there: its rerun reuses it
    assert Path(staging.done_marker(d21)).exists()
    assert not Path(staging.file_dir(d22)).exists() and not Path(staging.file_dir(d23)).exists()
    stage(fs, staging, bad21)
    assert pub.publish("ds", [d21, bad21], [])["status"] == "published"
    assert tree(target) == {"ev/21/a": b"xxx", "ev/21/b": b"xxx", "ev/22/a": b"xxx", "ev/23/a": b"xxx"}
    assert not Path(staging.file_set_dir("ds")).exists()  # the set's directory goes once empty


def test_jobs_sharing_a_target_never_share_staging_logs_or_manifests(tmp_path):
    target = tmp_path / "target"
    fs = LocalFileSystem()
    sa, sb = Staging(str(target), job="a"), Staging(str(target), job="b")
    pa, pb = Publisher(fs, sa), Publisher(fs, sb)
    # Given both jobs' copies of the same dataset staged, and job b's publish log left by a crash
    fa, fb = cfile("ds/x", 3), cfile("ds/y", 3)
    stage(fs, sa, fa)
    stage(fs, sb, fb)
    log = pb._plan("ds", [_Staged(fb, [{"path": "ds/y", "size": 3}])], [], True)[0]
    Path(sb.wal("ds")).parent.mkdir(parents=True)
    Path(sb.wal("ds")).write_text(json.dumps(log))
    # When job a recovers and publishes
    assert pa.recover() == []  # b's log is b's
    assert pa.publish("ds", [fa], [])["status"] == "published"
    # Then b's staging and log are untouched, and each job has its own manifest
    assert Path(sb.done_marker(fb)).exists() and Path(sb.wal("ds")).exists()
    assert pa.read_manifest("ds") == {"ds/x": fa.id} and pb.read_manifest("ds") == {}
    assert [r["status"] for r in pb.recover()] == ["replayed"]
    assert pb.read_manifest("ds") == {"ds/y": fb.id} and tree(target) == {"ds/x": b"xxx", "ds/y": b"xxx"}
    # a job replays the logs of runs before per-job staging (no job)
    legacy = Staging(str(target))
    fc = cfile("ds/z", 3)
    stage(fs, legacy, fc)
    Path(legacy.wal("ds")).write_text(json.dumps(
        Publisher(fs, legacy)._plan("ds", [_Staged(fc, [{"path": "ds/z", "size": 3}])], [], True)[0]))
    assert [r["file_set"] for r in pa.recover()] == ["ds"] and (target / "ds/z").exists()


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_backslash_is_a_character_of_a_name(tmp_path, where):
    import fsspec

    if where == "local":
        fs, root = LocalFileSystem(), str(tmp_path / "target")
    else:
        fs, root = fsspec.filesystem("memory"), f"/distcp-{uuid.uuid4().hex[:8]}/target"
    staging = Staging(root)
    pub = Publisher(fs, staging)
    try:
        # Given a file whose name holds a backslash (legal on POSIX disks and object stores), staged
        f, g = cfile("ds/weird\\name.csv", 3), cfile("ds\\..\\x/ok.csv", 2)
        stage(fs, staging, f)
        stage(fs, staging, g)
        # Then it is published like any other
        res = pub.publish("ds", [f, g], [])
        assert res["status"] == "published", res
        assert fs.cat_file(f"{root}/ds/weird\\name.csv") == b"xxx"
        assert fs.cat_file(f"{root}/ds\\..\\x/ok.csv") == b"xx"
        # while real traversal stays refused
        for bad in ("ds/../x", "/abs", "a//b"):
            with pytest.raises(ValueError, match="relative path"):
                pub.publish("ds", [cfile(bad, 1)], [])
    finally:
        if where == "memory":
            fs.rm(posixpath.dirname(root), recursive=True)


def test_drop_stale_drops_what_the_plan_does_not_copy(tmp_path):
    target = tmp_path / "target"
    fs = LocalFileSystem()
    staging = Staging(str(target), job="j")
    pub = Publisher(fs, staging)
    # Given staged files: one the plan copies, an old version of a changed file, one now up to date,
    # a file of a vanished dataset, another job's, and a set whose log failed to replay
    keep, old, uptodate = cfile("a/keep", 1), cfile("a/changed", 1), cfile("a/same", 1)
    gone = cfile("g/x", 1, file_set="gone")
    other = cfile("a/keep", 1)
    blocked = cfile("b/x", 1, file_set="blocked")
    for f in (keep, old, uptodate, gone, blocked):
        stage(fs, staging, f)
    other_staging = Staging(str(target), job="other")
    stage(fs, other_staging, other)
    Path(staging.wal("blocked")).parent.mkdir(parents=True)
    Path(staging.wal("blocked")).write_text("{}")
    partial_copy = Path(staging.file_set_dir("ds"), "f" * 32, "a/partial")
    partial_copy.parent.mkdir(parents=True)
    partial_copy.write_bytes(b"half")
    # When the plan of this run copies only `keep` (and a new version of `changed`)
    changed = cfile("a/changed", 1, mtime=T0 + 5)
    dropped = pub.drop_stale({"ds": [keep.id, changed.id], "blocked": []})
    # Then only this job's stale staging goes
    assert dropped == sorted([staging.file_dir(old), staging.file_dir(uptodate), staging.file_set_dir("gone"),
                              str(partial_copy.parents[1])])
    assert Path(staging.done_marker(keep)).exists() and Path(other_staging.done_marker(other)).exists()
    assert Path(staging.done_marker(blocked)).exists()
    assert pub.drop_stale({"ds": [keep.id, changed.id], "blocked": []}) == []


def test_drop_stale_with_a_date_range_keeps_other_windows(tmp_path):
    target = tmp_path / "target"
    fs = LocalFileSystem()
    staging = Staging(str(target), job="j")
    pub = Publisher(fs, staging, config={"partition.date.format": "%Y/%m/%d"})
    # Given a backfill: day 21's files staged by its failed run, day 22 listed now
    d21 = cfile("ev/2026/11/21/a", 1)
    d22_old, d22_same = cfile("ev/2026/11/22/a", 1), cfile("ev/2026/11/22/b", 1)
    for f in (d21, d22_old, d22_same):
        stage(fs, staging, f)
    split21, dead21 = cfile("ev/2026/11/21/big", 8), cfile("ev/2026/11/21/dead", 1)
    stage_parts(fs, staging, split21, {0: b"0123"})  # half of a split file: its rerun reuses the part
    stage(fs, staging, dead21, marker=False)  # a copy that died: nothing to reuse
    d22_new = cfile("ev/2026/11/22/a", 1, mtime=T0 + 5)
    # When day 22's plan copies the new version of a and finds b up to date
    dropped = pub.drop_stale({"ds": [d22_new.id]}, listed={"ds": [d22_new.origin, d22_same.origin]})
    # Then day 22's stale staging goes, and the dead copy; day 21's staged files stay for its rerun
    assert dropped == sorted([staging.file_dir(d22_old), staging.file_dir(d22_same), staging.file_dir(dead21)])
    assert Path(staging.done_marker(d21)).exists() and Path(staging.part_path(split21, 0)).exists()
    # and without the listed origins nothing of a listed set is dropped
    stage(fs, staging, d22_old)
    assert pub.drop_stale({"ds": [d22_new.id]}) == []


# ---------------------------------------------------------------- split files
def stage_parts(fs, staging, f, parts: dict[int, bytes]):
    for k, data in parts.items():
        fs.makedirs(posixpath.dirname(staging.part_path(f, k)), exist_ok=True)
        fs.pipe_file(staging.part_path(f, k), data)


def test_split_file_is_concatenated_by_the_copier_then_published(local):
    target, fs, staging, _ = local
    pub = Publisher(fs, staging, config={"block.split.size": 4, "checksum": "md5"})
    big, small = cfile("big.bin", 10, mode=0o600), cfile("small.bin", 3)
    stage_parts(fs, staging, big, {0: b"0123", 1: b"4567", 2: b"89"})
    stage(fs, staging, small)
    res = pub.publish("ds", [big, small], [])
    assert res["status"] == "published", res
    assert tree(target) == {"big.bin": b"0123456789", "small.bin": b"xxx"}
    assert os.stat(target / "big.bin").st_mode & 0o777 == 0o600
    assert not Path(staging.file_set_dir("ds")).exists()


def test_split_file_with_a_missing_or_short_part_blocks_its_set(local):
    target, fs, staging, _ = local
    pub = Publisher(fs, staging, config={"block.split.size": 4})
    big, small = cfile("big.bin", 10), cfile("small.bin", 3)
    stage(fs, staging, small)
    stage_parts(fs, staging, big, {0: b"0123", 2: b"89"})
    res = pub.publish("ds", [big, small], [])
    assert res["status"] == "not_published" and res["missing"] == [big.origin]
    assert "1 of its 3 parts not staged (part 1 first)" in res["errors"][big.origin]
    stage_parts(fs, staging, big, {1: b"45"})  # all parts there, one of them short: the copier refuses
    res = pub.publish("ds", [big, small], [])
    assert res["status"] == "not_published" and "concatenating its parts failed" in res["errors"][big.origin]
    assert tree(target) == {} and Path(staging.done_marker(small)).exists()
    stage_parts(fs, staging, big, {1: b"4567"})  # the next run copied the part again
    assert pub.publish("ds", [big, small], [])["status"] == "published"
    assert tree(target) == {"big.bin": b"0123456789", "small.bin": b"xxx"}


def test_split_file_whose_copier_raises_blocks_its_set(local, monkeypatch):
    target, fs, staging, pub = local

    def finish_split(f, target_fs, staging, config):
        raise OSError("disk on fire")

    monkeypatch.setitem(sys.modules, "airflow_copycat.distcp.split_copy", types.SimpleNamespace(finish_split=finish_split))
    big = cfile("big.bin", 10)
    stage_parts(fs, staging, big, {0: b"0123456789"})
    res = pub.publish("ds", [big], [])
    assert res["status"] == "not_published"
    assert res["errors"][big.origin] == "split file: concatenating its parts failed: OSError: disk on fire"


# ---------------------------------------------------------------- fsspec (memory://)
@pytest.fixture
def memory():
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/distcp-{uuid.uuid4().hex[:8]}/target"
    yield fs, Staging(root), root
    fs.rm(posixpath.dirname(root), recursive=True)


def test_publish_on_memory_filesystem(memory):
    fs, staging, root = memory
    fs.pipe_file(f"{root}/d/a.csv", b"old")
    fs.pipe_file(f"{root}/d/gone.csv", b"gone")
    f1 = cfile("d/a.csv", 3, mode=0o600)
    f2 = cfile("d/e/b.csv", 2, preserve=())
    stage(fs, staging, f1, {"d/a.csv": b"new"})
    stage(fs, staging, f2, {"d/e/b.csv": b"bb"})
    pub = Publisher(fs, staging)

    res = pub.publish("ds", [f1, f2], ["d/gone.csv"])

    assert res["status"] == "published", res
    assert fs.cat_file(f"{root}/d/a.csv") == b"new" and fs.cat_file(f"{root}/d/e/b.csv") == b"bb"
    assert not fs.exists(f"{root}/d/gone.csv")
    assert pub.read_manifest("ds") == {"d/a.csv": f1.id, "d/e/b.csv": f2.id}
    assert any("fsspec offers no chmod" in n for n in res["notes"])
    assert not fs.exists(staging.file_set_dir("ds"))
    assert [p for p in fs.find(root) if "/_copycat/distcp/wal/" in p] == []


def test_memory_filesystem_crash_mid_publish_is_recovered(memory, monkeypatch):
    fs, staging, root = memory
    files = [cfile(f"d/{i}.csv", 2) for i in range(4)]
    for f in files:
        stage(fs, staging, f, {f.destination: b"%02d" % int(f.destination[2])})
    fs.pipe_file(f"{root}/d/old.csv", b"old")
    pub = Publisher(fs, staging)
    real = Publisher._apply_step
    seen = []

    def crash_after_two(self, step, log, *rest):
        if len(seen) == 2:
            raise KeyboardInterrupt("simulated crash")
        real(self, step, log, *rest)
        seen.append(step["op"])

    monkeypatch.setattr(Publisher, "_apply_step", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        pub.publish("ds", files, ["d/old.csv"])
    monkeypatch.setattr(Publisher, "_apply_step", real)
    assert fs.exists(staging.wal("ds"))

    rec = Publisher(fs, staging).recover()

    assert [(r["file_set"], r["status"], r["renamed"], r["deleted"]) for r in rec] == [("ds", "replayed", 4, 1)]
    assert {p.removeprefix(root + "/"): fs.cat_file(p) for p in fs.find(root) if "/_copycat/" not in p} == {
        f"d/{i}.csv": b"%02d" % i for i in range(4)}
    assert not fs.exists(staging.wal("ds")) and not fs.exists(staging.file_set_dir("ds"))


def test_recover_without_logs(local):
    _, _, _, pub = local
    assert pub.recover() == []


# ---------------------------------------------------------------- crashes at every step (SIGKILL)
BEFORE = {"keep.txt": b"keep", "data/a.csv": b"old a", "old/gone.csv": b"gone", "old2/dir/x": b"x",
          "old2/dir/y": b"y"}
DELETES = ["old/gone.csv", "old2/dir", "never/was.csv"]
STAGED = {  # destination -> (outputs, mode, mtime)
    "data/a.csv": ({"data/a.csv": b"new a" * 100}, 0o640, T0 + 0.25),
    "data/new/b.csv": ({"data/new/b.csv": b"bee" * 50}, 0o600, T0 + 100.5),
    "arch": ({"arch/x.txt": b"ax", "arch/sub/y.txt": b"ay"}, 0o644, T0 + 200),
    "data/c.csv": ({"data/c.csv": b"cee"}, 0o604, T0 + 300.75),
}
PREVIOUS_MANIFEST = {"old/gone.csv": "f" * 32, "old2/dir/x": "e" * 32, "keep.txt": "d" * 32}
N_STEPS = 6 + 5 + 3 + 1  # chmod+utime of 3 single-output files, 5 renames, 3 deletions, the manifest
N_RENAMES = 5


def scenario_files() -> list[CopyableFile]:
    out = []
    for dest, (outputs, mode, mtime) in STAGED.items():
        origin = "/src/ds/c.csv.gz" if dest == "data/c.csv" else "/src/ds/arch.tar" if dest == "arch" else None
        out.append(cfile(dest, sum(len(b) for b in outputs.values()), origin=origin, mode=mode, mtime=mtime))
    return out


def expected_tree() -> dict[str, bytes]:
    exp = {k: v for k, v in BEFORE.items() if not any(k == d or k.startswith(d + "/") for d in DELETES)}
    for outputs, _, _ in STAGED.values():
        exp.update(outputs)
    return exp


def expected_manifest(files) -> dict[str, str]:
    exp = {"keep.txt": "d" * 32}
    for f in files:
        exp.update({rel: f.id for rel in STAGED[f.destination][0]})
    return exp


def snapshot(root: Path) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in tree(root).items()}


def check_visible_state(state: dict[str, str], where: str) -> None:
    """What a reader of the published tree may see at any moment: each file the old or the new
    version (never partial, never a temporary file); a file that exists before and after never absent."""
    before = {k: hashlib.sha256(v).hexdigest() for k, v in BEFORE.items()}
    after = {k: hashlib.sha256(v).hexdigest() for k, v in expected_tree().items()}
    for rel, digest in state.items():
        assert digest in {before.get(rel), after.get(rel)} - {None}, f"{where}: unexpected {rel}"
    for rel in set(before) & set(after):
        assert rel in state, f"{where}: {rel} vanished"


def prepare(tmp_path: Path):
    target = tmp_path / "target"
    write_tree(target, BEFORE)
    fs, staging = LocalFileSystem(), Staging(str(target))
    files = scenario_files()
    for f in files:
        stage(fs, staging, f, STAGED[f.destination][0])
    pub = Publisher(fs, staging)
    Path(pub.manifest_path("ds")).parent.mkdir(parents=True)
    Path(pub.manifest_path("ds")).write_text(json.dumps(PREVIOUS_MANIFEST))
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"target": str(target), "files": [f.to_dict() for f in files],
                                    "deletes": DELETES}))
    return target, fs, staging, pub, files, scenario


def run_child(scenario: Path, kill: str, snapshots: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, __file__, str(scenario), kill, str(snapshots)], capture_output=True,
                          text=True, timeout=60, cwd=str(ROOT))


def assert_final(target: Path, staging: Staging, pub: Publisher, files) -> None:
    assert tree(target) == expected_tree()
    for f in files:
        outputs, mode, mtime = STAGED[f.destination]
        if f.destination in outputs:  # single output: attributes set
            st = os.stat(target / f.destination)
            assert (st.st_mode & 0o7777, st.st_mtime_ns) == (mode, int(round(mtime * 1e9))), f.destination
    assert pub.read_manifest("ds") == expected_manifest(files)
    assert not Path(staging.file_set_dir("ds")).exists()
    assert files_below(staging.wal_dir()) == []
    assert [p for p in files_below(str(target)) if p.endswith(".tmp")] == []


def test_child_run_without_crash_never_shows_a_partial_state(tmp_path):
    target, fs, staging, pub, files, scenario = prepare(tmp_path)
    snaps = tmp_path / "snaps.jsonl"
    proc = run_child(scenario, "none", snaps)
    assert proc.returncode == 0, proc.stderr
    states = [json.loads(line) for line in snaps.read_text().splitlines()]
    assert len(states) == N_STEPS + 1 + len(files)  # after the log, after each step, after dropping each file's staging
    for i, state in enumerate(states):
        check_visible_state(state, f"state {i}")
    assert_final(target, staging, pub, files)
    assert json.loads(proc.stdout)["status"] == "published"


KILLS = (["logtmp", "log"] + [f"rename:{k}" for k in range(1, N_RENAMES + 1)]
         + [f"step:{k}" for k in range(1, N_STEPS + 1)] + ["cleanup"])


@pytest.mark.parametrize("kill", KILLS)
def test_sigkill_during_publish_then_recover(tmp_path, kill):
    target, fs, staging, pub, files, scenario = prepare(tmp_path)
    snaps = tmp_path / "snaps.jsonl"

    proc = run_child(scenario, kill, snaps)

    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)
    states = [json.loads(line) for line in snaps.read_text().splitlines()] if snaps.exists() else []
    states.append(snapshot(target))
    for i, state in enumerate(states):
        check_visible_state(state, f"{kill}, state {i}")
    saved = tmp_path / "saved-log.json"
    if Path(staging.wal("ds")).exists():
        shutil.copy(staging.wal("ds"), saved)
        assert json.loads(saved.read_text())["format"] == LOG_FORMAT

    rec = Publisher(fs, staging).recover()

    if kill == "logtmp":  # the log never existed whole: nothing applied, the set stays staged
        assert [r["status"] for r in rec] == ["discarded"] and not saved.exists()
        assert tree(target) == BEFORE and files_below(staging.wal_dir()) == []
        assert all(Path(staging.done_marker(f)).exists() for f in files)
        res = pub.publish("ds", files, DELETES)  # the next run publishes the reused staged files
        assert res["status"] == "published"
    else:
        assert [(r["file_set"], r["status"]) for r in rec] == [("ds", "replayed")]
        assert rec[0]["steps"] == N_STEPS
    check_visible_state(snapshot(target), f"{kill}, recovered")
    assert_final(target, staging, pub, files)

    if saved.exists():  # the same log replayed a second time changes nothing
        shutil.copy(saved, staging.wal("ds"))
        again = Publisher(fs, staging).recover()
        assert [(r["status"], r["steps"]) for r in again] == [("replayed", N_STEPS)]
        assert_final(target, staging, pub, files)


def test_publish_replays_its_sets_leftover_log_first(tmp_path):
    target, fs, staging, pub, files, scenario = prepare(tmp_path)
    proc = run_child(scenario, "rename:2", tmp_path / "snaps.jsonl")
    assert proc.returncode == -signal.SIGKILL
    late = cfile("late.csv", 4)  # staged by a run that did not call recover() first
    stage(fs, staging, late, {"late.csv": b"late"})

    res = pub.publish("ds", [late], [])

    assert res["status"] == "published" and res["replayed_log"] is True
    assert tree(target) == {**expected_tree(), "late.csv": b"late"}
    assert pub.read_manifest("ds") == {**expected_manifest(files), "late.csv": late.id}
    assert not Path(staging.file_set_dir("ds")).exists() and files_below(staging.wal_dir()) == []


def test_replay_of_a_log_whose_files_vanished_fails_clearly(tmp_path):
    target, fs, staging, pub, files, scenario = prepare(tmp_path)
    assert run_child(scenario, "rename:1", tmp_path / "snaps.jsonl").returncode == -signal.SIGKILL
    shutil.rmtree(staging.file_set_dir("ds"))  # someone deleted the staging by hand
    rec = Publisher(fs, staging).recover()
    assert (rec[0]["file_set"], rec[0]["status"]) == ("ds", "failed") and "neither" in rec[0]["error"]
    assert Path(staging.wal("ds")).exists()  # kept: it blocks this set only
    with pytest.raises(PublishError, match="neither"):
        pub.publish("ds", files, DELETES)


# ---------------------------------------------------------------- the child process
def test_outputs_in_absent_directories_are_not_looked_at_one_by_one(local, monkeypatch):
    """Planning the log looks at the target for paths that change type: once per directory, and per output
    only in a directory that exists -- an output below an absent directory is absent. A directory in the
    way in an existing directory is still found and replaced."""
    target, fs, staging, pub = local
    write_tree(target, {"old/x/keep": b"a directory where a file goes"})
    os.unlink(target / "old/x/keep")
    files = [cfile(f"new/d/{i}.csv", 1) for i in range(5)] + [cfile("old/x", 2), cfile("old/y", 2)]
    for f in files:
        stage(fs, staging, f, {f.destination: b"z" * f.size})
    looked = []
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: looked.append(os.path.relpath(p, target)) or real_isdir(p))
    log, notes = pub._plan("ds", pub._check_staged("ds", files)[0], [], True)
    monkeypatch.setattr(os.path, "isdir", real_isdir)
    assert not [p for p in looked if p.startswith("new/d/")], looked
    assert {"old/x", "old/y"} <= set(looked)
    assert notes == ["the directory old/x becomes a file: replaced"]
    assert pub.publish("ds", files, [])["status"] == "published"
    assert tree(target)["old/x"] == b"zz" and tree(target)["new/d/4.csv"] == b"z"


def _child(scenario_path: str, kill: str, snapshots: str) -> None:
    scenario = json.loads(Path(scenario_path).read_text())
    target = Path(scenario["target"])
    files = [CopyableFile.from_dict(d) for d in scenario["files"]]

    def record():
        with open(snapshots, "a") as fh:
            fh.write(json.dumps(snapshot(target)) + "\n")

    point, _, n = kill.partition(":")
    n = int(n or 0)
    counts = {"step": 0, "rename": 0}

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    real_rename, real_step = AtomicFiles.rename, Publisher._apply_step
    real_after_log, real_finish = Publisher._after_log_written, Publisher._finish

    def rename(files, src, dst):
        if point == "logtmp" and "/_copycat/distcp/wal/" in src and src.endswith(".tmp"):
            die()
        real_rename(files, src, dst)
        if "/_copycat/distcp/staging/" in src:
            counts["rename"] += 1
            if point == "rename" and counts["rename"] == n:
                record()
                die()

    def apply_step(self, step, log, *rest):
        real_step(self, step, log, *rest)
        record()
        counts["step"] += 1
        if point == "step" and counts["step"] == n:
            die()

    def after_log(self, wal):
        real_after_log(self, wal)
        record()
        if point == "log":
            die()

    def finish(self, log, wal, *rest):
        real_drop = self._drop

        def drop(path):
            real_drop(path)
            record()
            if point == "cleanup":
                die()
        self._drop = drop
        real_finish(self, log, wal, *rest)

    AtomicFiles.rename = rename
    Publisher._apply_step = apply_step
    Publisher._after_log_written = after_log
    Publisher._finish = finish
    result = Publisher(LocalFileSystem(), Staging(str(target))).publish("ds", files, scenario["deletes"])
    print(json.dumps(result))


if __name__ == "__main__":
    _child(*sys.argv[1:])
