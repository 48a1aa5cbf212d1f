"""The local fast copy (:mod:`airflow_copycat.distcp.localcopy`) is proven equal to the streaming path
it replaces: for generated files -- 0 and 1 byte, sizes around the block size, split files --
``copy_unit(..., fast=True)`` and ``fast=False`` give the same results, the same staged names and
bytes, the same done markers and part records (checksums included), the same published tree and
manifest, and the same errors when the source vanishes, shrinks or grows (before or during the
copy)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from pathlib import Path

import fsspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_copycat.distcp import done_markers, localcopy, reading, split_copy, whole_copy
from airflow_copycat.distcp.copier import copy_unit
from airflow_copycat.distcp.inflight import copy_units
from airflow_copycat.distcp.model import CopyableFile, Staging, WorkUnit
from airflow_copycat.distcp.publish import Publisher
from airflow_copycat.distcp.split_copy import finish_split
from airflow_copycat.distcp.staged import is_journal, parse_journal
from airflow_copycat.distcp.workunits import work_units
from airflow_copycat.storage.atomic import AtomicFiles, find_local

B = 4096
"""The block size the tests give both paths (streaming reads, fast blocks, progress steps), so that
a source changed from the progress callback changes at the same byte in both."""

LOCAL = fsspec.filesystem("file")
SIZES = [0, 1, B - 1, B, B + 1, 2 * B, 3 * B + 5, 5 * B - 1]


@pytest.fixture
def small_blocks(monkeypatch):
    for module, name in ((whole_copy, "CHUNK"), (whole_copy, "PROGRESS_EVERY"), (split_copy, "CHUNK"),
                         (split_copy, "PROGRESS_EVERY"), (reading, "PROGRESS_EVERY"), (localcopy, "BLOCK")):
        monkeypatch.setattr(module, name, B)


@pytest.fixture
def fast_calls(monkeypatch):
    """How many times the fast path ran (so that no comparison is of the streaming path with itself)."""
    calls = []
    real = localcopy.RangeCopy.run

    def run(self, *args):
        calls.append(args)
        return real(self, *args)

    monkeypatch.setattr(localcopy.RangeCopy, "run", run)
    return calls


def data_of(size: int, seed: int = 0) -> bytes:
    return random.Random(size * 7919 + seed).randbytes(size)


def make_file(root: Path, data: bytes, *, checksum: str | None = None, name: str = "d/sub/f.bin") -> CopyableFile:
    path = root / "src" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return CopyableFile(origin=str(path), relative=name, destination=name, size=len(data), mtime=1_700_000_000.0,
                        dataset="ds", file_set="ds", checksum=checksum)


def tree(root: Path) -> dict[str, object]:
    """Every file below ``root``: bytes, or (done markers, part records) the JSON without its time; the
    done journals of a directory (named by their session) as one ``<dir>/_done-*.jsonl``: their records,
    without their times, by file id."""
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            rel = str(p.relative_to(root))
            if is_journal(p.name):
                records = out.setdefault(str(p.parent.relative_to(root) / "_done-*.jsonl"), {})
                for doc in parse_journal(p.read_bytes()):
                    doc.pop("staged_at", None)
                    records[doc["id"]] = doc
            elif p.name == "_done.json" or p.name.endswith(".json") and "/_parts/" in rel:
                doc = json.loads(p.read_bytes())
                doc.pop("staged_at", None)
                out[rel] = doc
            else:
                out[rel] = p.read_bytes()
    return out


def without_time(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "seconds"}


def copy_both(base: Path, data: bytes, units_of, config: dict, *, checksum: str | None = None,
              mutate=None, before=None) -> dict[bool, dict]:
    """Copy the same source file (same origin, so the same file id) into two targets, once by the
    streaming path and once by the fast path: results, staged trees, then (when every unit is
    staged) what finishing and publishing leave. ``before(path)`` changes the source after it was
    listed; ``mutate(path)`` changes it from the first progress call."""
    seen: dict[bool, dict] = {}
    for fast in (False, True):
        f = make_file(base, data, checksum=checksum)
        if before is not None:
            before(f.origin)
        target = base / ("fast" if fast else "simple")
        staging = Staging(str(target))
        changed = []

        def progress(n, path=f.origin):
            if mutate is not None and not changed:
                changed.append(n)
                mutate(path)

        results = [without_time(copy_unit(u, LOCAL, LOCAL, staging, config, progress=progress, fast=fast))
                   for u in units_of(f)]
        out = {"results": results, "staged": tree(target), "changed_at": changed}
        if all(r["status"] in ("ok", "reused") for r in results):
            if results[0]["parts"] > 1:
                out["finish"] = without_time(finish_split(f, LOCAL, staging, config, parts=results[0]["parts"]))
                out["finished"] = tree(target)
            out["publish"] = {k: v for k, v in Publisher(LOCAL, staging, config=config).publish("ds", [f]).items()
                              if k != "seconds"}
            out["published"] = tree(target)
        seen[fast] = out
    return seen


def assert_same(seen: dict[bool, dict]) -> None:
    simple, fast = seen[False], seen[True]
    assert fast["results"] == simple["results"]
    assert fast["staged"] == simple["staged"]
    assert fast.get("finished") == simple.get("finished") and fast.get("finish") == simple.get("finish")
    assert fast.get("published") == simple.get("published") and fast.get("publish") == simple.get("publish")
    assert fast["changed_at"] == simple["changed_at"]


def whole(f: CopyableFile) -> list[WorkUnit]:
    return [WorkUnit(f)]


def split_by(size: int):
    return lambda f: work_units([f], size)


# --------------------------------------------------------------------------- same bytes, names, checksums


@pytest.mark.parametrize("checksum", ["none", "md5", "sha256"])
@pytest.mark.parametrize("size", SIZES)
def test_whole_files_are_the_same(tmp_path, small_blocks, fast_calls, size, checksum):
    data = data_of(size)
    seen = copy_both(tmp_path, data, whole, {"checksum": checksum})
    assert_same(seen)
    assert fast_calls, "the fast path did not run"
    assert seen[True]["published"]["d/sub/f.bin"] == data
    marker = next(v for k, v in seen[True]["staged"].items() if k.endswith("/_done-*.jsonl"))
    marker = next(iter(marker.values()))
    expected = None if checksum == "none" else f"{checksum}:{hashlib.new(checksum, data).hexdigest()}"
    assert marker["checksum"] == expected


@pytest.mark.parametrize("size", [localcopy.BLOCK - 1, localcopy.BLOCK, localcopy.BLOCK + 1, 2 * localcopy.BLOCK + 7])
def test_sizes_around_the_real_block_are_the_same(tmp_path, fast_calls, size):
    """With the real block size (8 MiB) and a hash: the helper thread hashes blocks while the next ones copy."""
    seen = copy_both(tmp_path, data_of(size), whole, {"checksum": "md5"})
    assert_same(seen)
    assert fast_calls


@pytest.mark.parametrize("checksum", ["none", "md5"])
@pytest.mark.parametrize("size,split", [(3 * B + 5, B), (2 * B, B), (B + 1, B), (5 * B - 1, 2 * B + 1)])
def test_split_files_are_the_same(tmp_path, small_blocks, fast_calls, size, split, checksum):
    config = {"checksum": checksum, "block.split.size": split}
    seen = copy_both(tmp_path, data_of(size), split_by(split), config)
    assert_same(seen)
    assert len(fast_calls) == len(seen[True]["results"]) > 1
    records = {k: v for k, v in seen[True]["staged"].items() if k.endswith(".json") and "/_parts/" in k}
    assert len(records) == len(seen[True]["results"])
    assert all((r["digest"] is None) == (checksum == "none") for r in records.values())


def test_a_source_checksum_that_does_not_match_fails_alike(tmp_path, small_blocks, fast_calls):
    data = data_of(3 * B)
    seen = copy_both(tmp_path, data, whole, {"checksum": "md5"}, checksum="md5:" + "0" * 32)
    assert_same(seen)
    assert seen[True]["results"][0]["status"] == "failed" and "checksum mismatch" in seen[True]["results"][0]["error"]
    seen = copy_both(tmp_path / "ok", data, whole, {"checksum": "none"},
                     checksum="sha256:" + hashlib.sha256(data).hexdigest())
    assert_same(seen)  # the source's own algorithm is verified even with checksum=none
    assert seen[True]["results"][0]["status"] == "ok"


# --------------------------------------------------------------------------- same errors


def _truncate(size: int):
    def change(path):
        with open(path, "r+b") as fh:
            fh.truncate(size)
    return change


def _append(path):
    with open(path, "ab") as fh:
        fh.write(b"more\n" * 10)


@pytest.mark.parametrize("checksum", ["none", "md5"])
@pytest.mark.parametrize("case", ["vanished", "shrunk", "grown", "emptied", "shrinks", "grows", "grows_split",
                                  "shrinks_split"])
def test_a_source_that_changes_fails_alike(tmp_path, small_blocks, fast_calls, case, checksum):
    config = {"checksum": checksum}
    data = data_of(4 * B + 3)
    units, kw = whole, {}
    if case == "vanished":
        kw["before"] = os.unlink
    elif case == "shrunk":
        kw["before"] = _truncate(2 * B + 1)
    elif case == "grown":
        kw["before"] = _append
    elif case == "emptied":
        kw["before"] = _truncate(0)
    elif case == "shrinks":
        kw["mutate"] = _truncate(B // 2)
    elif case == "grows":
        kw["mutate"] = _append
    else:
        config["block.split.size"] = 2 * B
        units = split_by(2 * B)
        kw["mutate"] = _append if case == "grows_split" else _truncate(3 * B)
    seen = copy_both(tmp_path, data, units, config, **kw)
    assert_same(seen)
    results = seen[True]["results"]
    failed = [r for r in results if r["status"] == "failed"]
    assert failed, results
    if case == "vanished":
        assert "file not found" in failed[0]["error"]
    else:
        assert "changed during the copy" in failed[0]["error"]
    if case != "vanished":
        assert fast_calls


# --------------------------------------------------------------------------- generated inputs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(0, 6 * B + 3), split=st.sampled_from([0, B, B + 1, 3 * B - 1]),
       checksum=st.sampled_from(["none", "md5", "sha256"]), seed=st.integers(0, 2**16))
@example(size=0, split=0, checksum="md5", seed=0)
@example(size=1, split=0, checksum="none", seed=0)
@example(size=B + 1, split=B, checksum="md5", seed=1)
def test_generated_files_are_the_same(small_blocks, size, split, checksum, seed):
    config = {"checksum": checksum, "block.split.size": split}
    with tempfile.TemporaryDirectory() as tmp:
        seen = copy_both(Path(tmp), data_of(size, seed), split_by(split) if split else whole, config)
    assert_same(seen)
    assert all(r["status"] == "ok" for r in seen[True]["results"])


# --------------------------------------------------------------------------- the publisher's local listing


def test_the_local_listing_is_fsspecs(tmp_path):
    """The publisher lists local staging with one scandir walk: the same paths, sizes, types and
    links as fsspec's ``find(detail=True)``, in the same order."""
    root = tmp_path / "t"
    (root / "a" / "b" / "empty").mkdir(parents=True)
    (root / "a" / "b" / "f").write_bytes(b"x")
    (root / "top").write_bytes(b"abc")
    os.symlink(root / "a" / "b" / "f", root / "a" / "link")
    os.symlink(root / "a" / "b", root / "a" / "dirlink")
    os.symlink(root / "nowhere", root / "dangling")
    os.mkfifo(root / "fifo")
    keys = ("name", "size", "type", "islink")
    expected = {p: {k: info[k] for k in keys} for p, info in LOCAL.find(str(root), detail=True).items()}
    found = find_local(str(root))
    assert {p: {k: info[k] for k in keys} for p, info in found.items()} == expected and list(found) == list(expected)
    for path, info in found.items():  # the walk's own stat of each entry (of a link itself), for its mode and times
        assert info["stat"].st_ino == os.lstat(path).st_ino and info["stat"].st_mode == os.lstat(path).st_mode
    assert find_local(str(root / "missing")) == {}
    with pytest.raises(NotADirectoryError):
        find_local(str(root / "top"))


# --------------------------------------------------------------------------- the flat layout and the old one


def _job_files(base: Path) -> tuple[list[CopyableFile], dict]:
    """A file set of plain files in several directories (one empty, one kept as the old version of a
    published path), a gzipped file (converted: staged in its file dir in both layouts) and a file
    split in parts; attributes preserved. The source tree is written under ``base/src``."""
    import gzip

    files = []
    for i, size in enumerate([0, 1, B - 1, 3 * B + 5, 2 * B, 17, 5 * B]):
        f = make_file(base, data_of(size, i), name=f"d{i % 3}/s{i % 2}/f{i}.bin")
        files.append(CopyableFile(**{**f.to_dict(), "preserve": ("perm", "mtime"), "mode": 0o640,
                                     "converters": (), "id": ""}))
    gz = make_file(base, gzip.compress(b"csv,rows\n" * 500, mtime=0), name="d1/t.csv.gz")
    files.append(CopyableFile(**{**gz.to_dict(), "destination": "d1/t.csv", "converters": ("gunzip",), "id": "",
                                 "preserve": ("perm", "mtime"), "mode": 0o600}))
    big = make_file(base, data_of(7 * B + 3, 99), name="big/split.bin")
    files.append(CopyableFile(**{**big.to_dict(), "preserve": ("mtime",), "id": ""}))
    return files, {"checksum": "md5", "block.split.size": 2 * B}


def _stage_and_publish(base: Path, target: Path, files, config, *, layout: str, monkeypatch,
                       deletes=("gone.txt",)) -> dict:
    """Stage ``files`` into ``target`` with the given layout ("flat": this version; "old": every file in
    its file dir with a ``_done.json``, as the version before wrote it), publish; what it left."""
    from airflow_copycat.distcp import staged as staged_mod

    with monkeypatch.context() as m:
        if layout == "old":
            m.setattr(whole_copy, "flat_layout", lambda *a, **k: False)
            m.setattr(done_markers, "flat_layout", lambda *a, **k: False)
        staging = Staging(str(target), job="j")
        results = [r for _, r in copy_units(work_units(files, config["block.split.size"]), LOCAL, LOCAL, staging,
                                            config)]
    assert all(r["status"] == "ok" for r in results), results
    set_dir = Path(staging.file_set_dir("ds"))
    flat = sorted(p.name for p in set_dir.iterdir() if p.name.endswith(staged_mod.DATA_SUFFIX))
    logs = []

    class Recording(Publisher):
        def _after_log_written(self, wal):
            logs.append(json.loads(Path(wal).read_bytes()))

    result = Recording(LOCAL, staging, config=config).publish("ds", files, list(deletes))
    return {"result": {k: v for k, v in result.items() if k != "seconds"}, "flat": flat, "log": logs[0],
            "tree": published_tree(target), "staging_left": sorted(str(p.relative_to(target)) for p in
                                                                    (target / "_copycat/distcp/staging").rglob("*"))}


def published_tree(target: Path) -> dict[str, object]:
    """The published files (bytes, mode, mtime) and the manifests, without the plan/staging/log area."""
    out: dict[str, object] = {}
    for p in sorted(target.rglob("*")):
        rel = str(p.relative_to(target))
        if p.is_file() and (not rel.startswith("_copycat/") or rel.startswith("_copycat/distcp/manifest/")):
            st = p.stat()
            out[rel] = p.read_bytes() if rel.startswith("_copycat/") else (p.read_bytes(), oct(st.st_mode & 0o777),
                                                                           st.st_mtime)
    return out


def _normalised(log: dict, staging_dir: str) -> dict:
    """A publish log without its token and time, each staged path named by its file id only (the
    layouts stage a file at ``<file id>/<destination>`` or ``<file id>.data``)."""
    def staged(path: str) -> str:
        assert path.startswith(staging_dir + "/"), path
        return path[len(staging_dir) + 1:].split("/")[1].split(".")[0]
    steps = [{k: staged(v) if k in ("from", "staged") else v for k, v in step.items()} for step in log["steps"]]
    return {**{k: v for k, v in log.items() if k not in ("token", "created", "drop", "steps")}, "steps": steps}


def test_the_flat_layout_publishes_what_the_old_layout_does(tmp_path, small_blocks, monkeypatch):
    """Plain files staged flat (a journal record each) and the same files staged in their file dirs
    (``_done.json``, the layout of the version before) publish the same tree -- bytes, modes, times --,
    the same manifest and the same log steps, and both leave no staging behind."""
    files, config = _job_files(tmp_path)
    seen = {}
    for layout in ("old", "flat"):
        target = tmp_path / layout
        (target / "gone.txt").parent.mkdir(parents=True, exist_ok=True)
        (target / "gone.txt").write_bytes(b"deleted by the publish")
        seen[layout] = _stage_and_publish(tmp_path, target, files, config, layout=layout, monkeypatch=monkeypatch)
    old, flat = seen["old"], seen["flat"]
    plain = [f for f in files if not f.converters and f.size <= 2 * B]
    assert old["flat"] == [] and flat["flat"] == sorted(f.id + ".data" for f in plain)
    assert flat["result"] == old["result"] and flat["result"]["status"] == "published"
    assert flat["tree"] == old["tree"] and "gone.txt" not in flat["tree"]
    assert any(k.startswith("_copycat/distcp/manifest/") for k in flat["tree"])
    staging_dir = Staging(str(tmp_path / "x"), job="j").staging_dir()
    assert (_normalised(flat["log"], staging_dir[len(str(tmp_path / "x")) + 1:])
            == _normalised(old["log"], staging_dir[len(str(tmp_path / "x")) + 1:]))
    # the old log drops every file's directory, the new one only those of the converted and the split file
    assert len(old["log"]["drop"]) == len(files) and len(flat["log"]["drop"]) == len(files) - len(plain)
    assert flat["staging_left"] == old["staging_left"] == []


def test_a_job_staged_by_the_old_layout_is_resumed_and_published(tmp_path, small_blocks, monkeypatch):
    """The version before staged half of a job (file dirs with ``_done.json``) and died; this version
    reuses those files (not copied again), stages the rest flat, and publishes the same tree and
    manifest as a run of this version alone."""
    files, config = _job_files(tmp_path)
    units = work_units(files, config["block.split.size"])
    target = tmp_path / "resumed"
    staging = Staging(str(target), job="j")
    with monkeypatch.context() as m:  # the version before: half the units, then a crash
        m.setattr(whole_copy, "flat_layout", lambda *a, **k: False)
        m.setattr(done_markers, "flat_layout", lambda *a, **k: False)
        first = [r for _, r in copy_units(units[::2], LOCAL, LOCAL, staging, config)]
    assert all(r["status"] == "ok" for r in first)
    assert list(Path(staging.file_set_dir("ds")).rglob("_done.json"))
    second = [r["status"] for _, r in copy_units(units, LOCAL, LOCAL, staging, config)]
    assert second[::2] == ["reused"] * len(units[::2]) and second[1::2] == ["ok"] * len(units[1::2])
    assert Publisher(LOCAL, staging, config=config).publish("ds", files, [])["status"] == "published"
    alone = tmp_path / "alone"
    _stage_and_publish(tmp_path, alone, files, config, layout="flat", monkeypatch=monkeypatch, deletes=())
    assert published_tree(target) == published_tree(alone)
    assert not list((target / "_copycat/distcp/staging").rglob("*"))


def test_a_log_left_by_the_old_layout_is_replayed(tmp_path, small_blocks, monkeypatch):
    """The version before died in the middle of a publish (its log renames from file dirs): this
    version's recover() finishes it -- the same tree as an uninterrupted publish -- and drops the file dirs."""

    files, config = _job_files(tmp_path)
    target = tmp_path / "crashed"
    staging = Staging(str(target), job="j")
    with monkeypatch.context() as m:
        m.setattr(whole_copy, "flat_layout", lambda *a, **k: False)
        m.setattr(done_markers, "flat_layout", lambda *a, **k: False)
        assert all(r["status"] == "ok" for _, r in copy_units(work_units(files, config["block.split.size"]), LOCAL,
                                                             LOCAL, staging, config))
        real, n = AtomicFiles.rename, [0]

        def rename(*a, **k):
            n[0] += 1
            if n[0] == 4:  # the log, then two files
                raise KeyboardInterrupt("killed")
            return real(*a, **k)

        m.setattr(AtomicFiles, "rename", rename)
        with pytest.raises(KeyboardInterrupt):
            Publisher(LOCAL, staging, config=config).publish("ds", files, [])
    assert Path(staging.wal("ds")).exists()
    replayed = Publisher(LOCAL, staging, config=config).recover()
    assert [r["status"] for r in replayed] == ["replayed"]
    alone = tmp_path / "alone"
    _stage_and_publish(tmp_path, alone, files, config, layout="flat", monkeypatch=monkeypatch, deletes=())
    assert published_tree(target) == published_tree(alone)
    assert not list((target / "_copycat/distcp/staging").rglob("*"))


def test_journal_records_cut_short_or_without_their_data_are_not_staged(tmp_path):
    """A journal line cut short (a crash of the machine mid-write), a record whose data file is gone
    or has another size: the file is not staged; copying it again stages it, the publisher publishes it."""
    from airflow_copycat.distcp.staged import SetDir

    f = make_file(tmp_path, data_of(300))
    g = make_file(tmp_path, data_of(500, 1), name="d/g.bin")
    staging = Staging(str(tmp_path / "t"))
    assert [r["status"] for _, r in copy_units([WorkUnit(f), WorkUnit(g)], LOCAL, LOCAL, staging, {})] == ["ok"] * 2
    set_dir = Path(staging.file_set_dir("ds"))
    (journal,) = set_dir.glob("_done-*.jsonl")
    raw = journal.read_bytes()
    journal.write_bytes(raw[:-10])  # the last record cut short
    scan = SetDir.scan(str(set_dir))
    assert len(scan.records) == 1
    last = (set(f.id for f in (f, g)) - set(scan.records)).pop()
    cut = f if f.id == last else g
    kept = g if cut is f else f
    (set_dir / f"{kept.id}.data").write_bytes(b"short")  # the data of the other one changed size
    assert done_markers.read_done_marker(LOCAL, staging, cut) is None
    assert done_markers.read_done_marker(LOCAL, staging, kept) is None
    pub = Publisher(LOCAL, staging).publish("ds", [f, g])
    assert pub["status"] == "not_published" and sorted(pub["missing"]) == sorted([f.origin, g.origin])
    again = [r["status"] for _, r in copy_units([WorkUnit(f), WorkUnit(g)], LOCAL, LOCAL, staging, {})]
    assert again == ["ok", "ok"]
    assert Publisher(LOCAL, staging).publish("ds", [f, g])["status"] == "published"
    assert (tmp_path / "t" / "d/sub/f.bin").read_bytes() == data_of(300)
    assert (tmp_path / "t" / "d/g.bin").read_bytes() == data_of(500, 1)
    assert not set_dir.exists()


def test_drop_stale_drops_flat_files_journals_and_dead_temporaries(tmp_path):
    """At plan time: a flat file the plan no longer copies is dropped (with a dead attempt's temporary
    in the set dir); its journal goes once no record in it names a staged file; with a date range
    (``partition.date.format``) only the files of origins this run listed, and unrecorded data."""
    f = make_file(tmp_path, data_of(30))
    g = make_file(tmp_path, data_of(40, 1), name="d/g.bin")
    h = make_file(tmp_path, data_of(50, 2), name="d/h.bin")
    staging = Staging(str(tmp_path / "t"), job="j")
    assert all(r["status"] == "ok" for _, r in copy_units([WorkUnit(x) for x in (f, g, h)], LOCAL, LOCAL, staging,
                                                          {}))
    set_dir = Path(staging.file_set_dir("ds"))
    (set_dir / "_attempt-1-dead-1").write_bytes(b"half")
    (set_dir / ("0" * 32 + ".data")).write_bytes(b"never recorded")
    partial = Publisher(LOCAL, staging, config={"partition.date.format": "yyyy"})
    dropped = partial.drop_stale({"ds": [f.id]}, listed={"ds": [g.origin]})
    assert sorted(Path(p).name for p in dropped) == sorted(["0" * 32 + ".data", g.id + ".data"])
    assert sorted(p.name for p in set_dir.iterdir() if not p.name.startswith("_done-")) == sorted(
        [f.id + ".data", h.id + ".data"])
    dropped = Publisher(LOCAL, staging).drop_stale({"ds": [f.id]})
    assert [Path(p).name for p in dropped] == [h.id + ".data"]
    assert len(list(set_dir.glob("_done-*.jsonl"))) == 1 and done_markers.read_done_marker(LOCAL, staging, f)
    assert Publisher(LOCAL, staging).drop_stale({"ds": []}) and not set_dir.exists()


def test_a_copy_leaves_the_modification_time_to_the_publish(tmp_path):
    """The copy sets no attribute: a file copied with ``mtime`` preserved and published without attributes
    (``preserve_attrs=False``, or a later run under another ``preserve`` that reuses the staged copy) keeps
    the time of its copy, not the source's; published with them, it has the source's."""
    f = make_file(tmp_path, data_of(3 * B + 5), name="d/f.bin")
    f = CopyableFile(**{**f.to_dict(), "mtime": 1_600_000_000.123456, "preserve": ("mtime",), "id": ""})
    g = make_file(tmp_path, data_of(7), name="e/g.bin")
    g = CopyableFile(**{**g.to_dict(), "mtime": 1_600_000_000.5, "preserve": ("mtime",), "id": "", "dataset": "e",
                        "file_set": "e"})
    staging = Staging(str(tmp_path / "t"), job="j")
    assert [r["status"] for _, r in copy_units(work_units([f, g]), LOCAL, LOCAL, staging, {"checksum": "none"})] == \
        ["ok", "ok"]
    assert Publisher(LOCAL, staging).publish("ds", [f], [], preserve_attrs=False)["status"] == "published"
    assert abs((tmp_path / "t/d/f.bin").stat().st_mtime - f.mtime) > 1000
    assert Publisher(LOCAL, staging).publish("e", [g], [])["status"] == "published"
    assert (tmp_path / "t/e/g.bin").stat().st_mtime_ns == int(round(g.mtime * 1e9))


def test_the_attempts_of_a_session_take_its_random_token_with_a_count(tmp_path, monkeypatch):
    """No random draw per attempt: the attempts of one copy session are named by the session's token and a
    count (``_attempt-<time>-<random>-<k>-<n>``), each its own."""
    from airflow_copycat.distcp import attempt as attempt_mod
    from airflow_copycat.distcp.staged import Session

    files = [make_file(tmp_path, data_of(n), name=f"d/f{n}.bin") for n in (1, 5, 9)]
    staging = Staging(str(tmp_path / "t"), job="j")
    names = []
    real_tmp = attempt_mod.Attempt.tmp
    monkeypatch.setattr(attempt_mod.Attempt, "tmp", lambda self: names.append(real_tmp(self)) or names[-1])
    session = Session(LOCAL, staging)  # its one random token
    monkeypatch.setattr(attempt_mod.secrets, "token_hex", lambda n: pytest.fail("a random draw per attempt"))
    with session:
        for f in files:
            assert copy_unit(WorkUnit(f), LOCAL, LOCAL, staging, {"checksum": "none"}, session=session)["status"] == "ok"
    assert [os.path.basename(n) for n in names] == [f"_attempt-{session.token}-{k}-1" for k in (1, 2, 3)]


def test_a_session_reads_no_journal_nor_size_of_files_it_does_not_copy(tmp_path, monkeypatch):
    """The scan of a set dir reads the directory only: a session copying files that are not staged yet
    (another task staged the others) reads no journal and looks at no data file's size; asking whether a
    staged file is staged reads them, and finds it."""
    from airflow_copycat.distcp import staged as staged_mod
    from airflow_copycat.distcp.staged import SetDir

    f, g = make_file(tmp_path, data_of(300)), make_file(tmp_path, data_of(500, 1), name="d/g.bin")
    staging = Staging(str(tmp_path / "t"))
    assert [r["status"] for _, r in copy_units([WorkUnit(f), WorkUnit(g)], LOCAL, LOCAL, staging, {})] == ["ok"] * 2
    reads, sizes = [], []
    real_read, real_lstat = staged_mod._read_local, os.lstat
    monkeypatch.setattr(staged_mod, "_read_local", lambda p: reads.append(p) or real_read(p))
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: sizes.append(p) or real_lstat(p, *a, **k))
    h = make_file(tmp_path, data_of(700, 2), name="d/h.bin")
    assert [r["status"] for _, r in copy_units([WorkUnit(h)], LOCAL, LOCAL, staging, {})] == ["ok"]
    assert reads == [] and not [p for p in sizes if str(p).endswith(".data")]
    scan = SetDir.scan(staging.file_set_dir("ds"))
    assert reads == [] and set(scan.data) == {f.id, g.id, h.id}
    assert scan.staged(f)["id"] == f.id and reads and [p for p in sizes if str(p).endswith(f"{f.id}.data")]
