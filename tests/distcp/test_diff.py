"""Diff of a copy listing with the target: update semantics, deletions and their limits, the manifest."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import fsspec
import pytest

from airflow_copycat.distcp.config import parse_copy_config
from airflow_copycat.distcp.diff import (
    DatasetDiff, DiffPolicy, TargetFile, TargetState, UpdatePolicy, diff, manifest_path, policy_for, read_manifest,
)
from airflow_copycat.distcp.listing import filesystem, find_datasets, list_files
from airflow_copycat.distcp.model import CopyableFile, Staging, file_set_id

T0 = 1_700_000_000.0


def write(root, files: dict[str, str], mtime: float | None = T0) -> None:
    for rel, data in files.items():
        path = os.path.join(str(root), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(data)
        if mtime is not None:
            os.utime(path, (mtime, mtime))


def plan(src, dst, pattern="*", **keys):
    """(datasets, files, DiffResult) of copying src to dst with the given config keys."""
    raw = {"name": "t", "source.url": str(src), "target.url": str(dst), "dataset.pattern": pattern}
    raw.update({k.replace("_", "."): v for k, v in keys.items()})
    cfg = parse_copy_config(raw)
    fs, root = filesystem(cfg["source.url"], None)
    datasets = find_datasets(fs, root, cfg["dataset.pattern"])
    files = [f for d in datasets for f in list_files(fs, root, d, cfg)]
    tfs, troot = filesystem(cfg["target.url"], None)
    return datasets, files, diff(files, tfs, troot, datasets, cfg)


def names(files) -> list[str]:
    return sorted(f.relative for f in files)


@pytest.fixture
def trees(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    return src, dst


# ------------------------------------------------------------------ update


def test_update_skips_files_with_same_size_and_mtime(trees):
    src, dst = trees
    # Given a target with an identical copy, one with another size, one 5 s older, one 0.4 s off, one missing
    write(src, {"d/same": "abc", "d/size": "abc", "d/older": "abc", "d/close": "abc", "d/new": "abc"})
    write(dst, {"d/same": "abc", "d/size": "abcd", "d/older": "abc"})
    write(dst, {"d/close": "abc"}, mtime=T0 + 0.4)
    os.utime(dst / "d/older", (T0 - 5, T0 - 5))
    # When diffed with update
    _, files, result = plan(src, dst)
    # Then only the up-to-date ones are skipped
    assert names(result.skipped) == ["d/close", "d/same"]
    assert names(result.to_copy) == ["d/new", "d/older", "d/size"]
    assert result.deletes == {}


def test_update_false_copies_everything(trees):
    src, dst = trees
    write(src, {"d/a": "1", "d/b": "2"})
    write(dst, {"d/a": "1", "d/b": "2"})
    _, files, result = plan(src, dst, update="false")
    assert names(result.to_copy) == ["d/a", "d/b"] and result.skipped == []


def test_without_preserved_mtime_a_newer_target_is_up_to_date(trees):
    src, dst = trees
    write(src, {"d/a": "1", "d/b": "2"})
    write(dst, {"d/a": "1"}, mtime=T0 + 3600)  # copied an hour later, mtime not preserved
    write(dst, {"d/b": "2"}, mtime=T0 - 3600)  # older than the source: the source changed since
    _, _, result = plan(src, dst, preserve="perm")
    assert names(result.skipped) == ["d/a"] and names(result.to_copy) == ["d/b"]


def _file(dest: str, size: int = 3, mtime: float = T0, checksum: str | None = None, converters=(), preserve=("mtime",)):
    return CopyableFile(origin=f"/src/{dest}", relative=dest, destination=dest, size=size, mtime=mtime, dataset="d",
                        file_set="d", checksum=checksum, converters=tuple(converters), preserve=tuple(preserve))


def test_checksums_decide_when_both_sides_know_one():
    md5a, md5b = "md5:" + "a" * 32, "md5:" + "b" * 32
    f = _file("d/x", checksum=md5a)
    # equal checksums: up to date even with another mtime
    assert UpdatePolicy.up_to_date(f, TargetState({"d/x": TargetFile("d/x", 3, T0 + 99, md5a)}))
    # different checksums: copied even with the same size and mtime
    assert not UpdatePolicy.up_to_date(f, TargetState({"d/x": TargetFile("d/x", 3, T0, md5b)}))
    # a checksum of another algorithm on one side: size and mtime decide
    sha = "sha256:" + "c" * 64
    assert UpdatePolicy.up_to_date(f, TargetState({"d/x": TargetFile("d/x", 3, T0, sha)}))


def test_target_on_a_second_filesystem(trees):
    src, _ = trees
    write(src, {"d/a": "abc", "d/b": "xyz"})
    root = f"/diff-{uuid.uuid4().hex[:8]}"
    mem = fsspec.filesystem("memory")
    try:
        mem.pipe(f"{root}/d/a", b"abc")  # memory:// keeps no mtime we can set: the manifest vouches for it
        _, files, _ = plan(src, f"memory://{root}")
        a = next(f for f in files if f.relative == "d/a")
        mem.pipe(manifest_path(Staging(root), "d"), json.dumps({"d/a": a.id}).encode())
        mem.pipe(f"{root}/d/stale", b"old")
        _, _, result = plan(src, f"memory://{root}", delete="true")
        assert names(result.skipped) == ["d/a"] and names(result.to_copy) == ["d/b"]
        assert result.deletes == {"d": ["d/stale"]}
    finally:
        mem.rm(root, recursive=True)


# ------------------------------------------------------------------ delete


def test_delete_removes_target_files_missing_from_the_source(trees):
    src, dst = trees
    write(src, {"d/keep": "1", "e/keep": "2"})
    write(dst, {"d/keep": "1", "d/gone": "x", "d/sub/gone2": "y", "e/gone": "z"})
    _, _, result = plan(src, dst, delete="true")
    assert result.deletes == {"d": ["d/gone", "d/sub/gone2"], "e": ["e/gone"]}
    # without delete=true nothing is deleted
    assert plan(src, dst)[2].deletes == {}


def test_delete_never_touches_control_hidden_sidecar_or_other_datasets(trees):
    src, dst = trees
    # Given the whole source as one dataset, and a target with control files, hidden names and sidecars
    write(src, {"a/x": "1", "a/x.md5": "c4ca4238a0b923820dcc509a6f75849b"})
    write(dst, {"a/x": "1", "a/old": "o", "_copycat/distcp/manifest/m.json": "{}",
                "_copycat/distcp/staging/s/f/a/x": "1", "_copycat/distcp/wal/w.json": "{}", "a/_SUCCESS": "",
                "a/.part.crc": "", "a/_temporary/0/p": "", "a/y.sha256": "c" * 64})
    # When diffed with delete over the whole root
    _, _, result = plan(src, dst, pattern="", delete="true", checksum_sidecar="true")
    # Then only the real stale file goes
    assert result.deletes == {"": ["a/old"]}


def test_delete_stays_within_each_dataset_prefix(trees):
    src, dst = trees
    write(src, {"tables/a/x": "1", "tables/b/y": "2"})
    write(dst, {"tables/a/x": "1", "tables/ab/z": "3", "tables/c/w": "4", "other/v": "5", "tables/top": "6"})
    _, _, result = plan(src, dst, pattern="tables/*", delete="true")
    assert result.deletes == {}  # tables/ab, tables/c, other: not datasets of this run


class _GreedyPolicy:
    """A policy that copies everything and asks to delete every path it has heard of."""

    name = "greedy"

    def diff(self, dataset, files, target, config):
        return DatasetDiff(to_copy=list(files), deletes=["../outside", "_copycat/distcp/wal/x.json", "other/z",
                                                          f"{dataset.name}/stale", f"{dataset.name}/keep"])


def test_a_policy_cannot_delete_outside_its_dataset(trees):
    src, dst = trees
    write(src, {"d/keep": "1"})
    raw = {"name": "t", "source.url": str(src), "target.url": str(dst), "dataset.pattern": "*", "delete": "true"}
    cfg = parse_copy_config(raw)
    fs, root = filesystem(str(src), None)
    datasets = find_datasets(fs, root, "*")
    files = [f for d in datasets for f in list_files(fs, root, d, cfg)]
    policy = _GreedyPolicy()
    assert isinstance(policy, DiffPolicy)
    result = diff(files, fs, str(dst), datasets, cfg, policy=lambda dataset: policy)
    assert names(result.to_copy) == ["d/keep"]
    assert result.deletes == {"d": ["d/stale"]}  # "d/keep" is written by this copy: never deleted


def test_delete_respects_the_date_range_and_file_pattern(trees):
    src, dst = trees
    # Given a backfill of one day, with converters renaming the outputs
    write(src, {"ev/2026/11/21/a.json.gz": "a", "ev/2026/11/21/notes.txt": "n"})
    write(dst, {"ev/2026/11/20/old.json": "x", "ev/2026/11/21/a.json": "a", "ev/2026/11/21/gone.json": "g",
                "ev/2026/11/21/readme.md": "r"})
    _, files, result = plan(src, dst, delete="true", file_pattern="**/*.json.gz", converters="gunzip",
                            partition_date_format="%Y/%m/%d", date_range_start="2026-11-21",
                            date_range_end="2026-11-22")
    assert names(files) == ["ev/2026/11/21/a.json.gz"]
    # Then other days and files the pattern would never have produced are left alone
    assert result.deletes == {"ev": ["ev/2026/11/21/gone.json"]}


def test_one_target_listing_per_dataset(trees, monkeypatch):
    src, dst = trees
    write(src, {f"t{i}/f{j}": "x" for i in range(3) for j in range(50)})
    write(dst, {f"t{i}/f{j}": "x" for i in range(3) for j in range(50)})
    raw = {"name": "t", "source.url": str(src), "target.url": str(dst), "dataset.pattern": "*", "delete": "true"}
    cfg = parse_copy_config(raw)
    fs, root = filesystem(str(src), None)
    datasets = find_datasets(fs, root, "*")
    files = [f for d in datasets for f in list_files(fs, root, d, cfg)]
    tfs, troot = filesystem(str(dst), None)
    calls = {"find": 0, "cat_file": 0}
    real_find, real_cat = tfs.find, tfs.cat_file
    monkeypatch.setattr(tfs, "find", lambda *a, **k: calls.__setitem__("find", calls["find"] + 1) or real_find(*a, **k))
    monkeypatch.setattr(tfs, "cat_file",
                        lambda *a, **k: calls.__setitem__("cat_file", calls["cat_file"] + 1) or real_cat(*a, **k))
    result = diff(files, tfs, troot, datasets, cfg)
    assert len(result.skipped) == 150
    assert calls == {"find": 3, "cat_file": 3}  # one listing and one manifest read per dataset


# ------------------------------------------------------------------ converted files and the manifest


def test_converted_files_are_up_to_date_only_by_the_manifest(trees):
    src, dst = trees
    write(src, {"d/a.csv.gz": "gz-bytes", "d/b.csv.gz": "gz-bytes"})
    write(dst, {"d/a.csv": "decompressed", "d/b.csv": "decompressed"})
    _, files, result = plan(src, dst, converters="decompress")
    assert names(result.to_copy) == ["d/a.csv.gz", "d/b.csv.gz"]  # no manifest: sizes say nothing
    ids = {f.destination: f.id for f in files}
    # Given the publisher's manifest recording a's current version and an older version of b
    path = manifest_path(Staging(str(dst)), "d")
    assert path == f"{dst}/_copycat/distcp/manifest/{file_set_id('d')}.json"
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump({"d/a.csv": ids["d/a.csv"], "d/b.csv": "0" * 32}, f)
    _, _, result = plan(src, dst, converters="decompress", delete="true")
    assert names(result.skipped) == ["d/a.csv.gz"] and names(result.to_copy) == ["d/b.csv.gz"]
    assert result.deletes == {}
    # and when the output vanished, it is copied again despite the manifest
    os.remove(dst / "d/a.csv")
    assert names(plan(src, dst, converters="decompress")[2].to_copy) == ["d/a.csv.gz", "d/b.csv.gz"]


def test_untarred_trees_are_recognised_and_hold_what_their_archive_holds(trees):
    src, dst = trees
    write(src, {"d/bundle.tar": "tar-bytes"})
    write(dst, {"d/bundle/x/1.txt": "1", "d/bundle/2.txt": "2", "d/stale.txt": "s"})
    _, files, result = plan(src, dst, converters="untar", delete="true")
    assert [f.destination for f in files] == ["d/bundle"]
    assert names(result.to_copy) == ["d/bundle.tar"]
    # the archive is expanded again: with delete, what is below its destination goes unless the new version
    # writes it (the publisher leaves those deletions out)
    assert result.deletes == {"d": ["d/bundle/2.txt", "d/bundle/x/1.txt", "d/stale.txt"]}
    assert plan(src, dst, converters="untar")[2].deletes == {}  # without delete: nothing
    tid = files[0].id
    staging = Staging(str(dst))
    fs, _ = filesystem(str(dst), None)
    fs.makedirs(os.path.dirname(manifest_path(staging, "d")))
    fs.pipe(manifest_path(staging, "d"), json.dumps({"d/bundle/x/1.txt": tid, "d/bundle/2.txt": tid}).encode())
    assert read_manifest(fs, staging, "d") == {"d/bundle/x/1.txt": tid, "d/bundle/2.txt": tid}
    assert names(plan(src, dst, converters="untar")[2].skipped) == ["d/bundle.tar"]
    # an up-to-date archive keeps the entries the manifest records; a stray file below it goes (with delete)
    write(dst, {"d/bundle/x/stray.txt": "?", "d/bundle/.hidden": "h"})
    _, _, result = plan(src, dst, converters="untar", delete="true", file_pattern="bundle*")
    assert names(result.skipped) == ["d/bundle.tar"]
    assert result.deletes == {"d": ["d/bundle/x/stray.txt"]}  # in the archive's scope; hidden names stay
    # one expanded file missing: the archive is expanded again
    os.remove(dst / "d/bundle/2.txt")
    assert names(plan(src, dst, converters="untar")[2].to_copy) == ["d/bundle.tar"]


@pytest.mark.parametrize("delete", ["false", "true"])
def test_a_republished_archive_replaces_its_whole_tree_and_is_then_up_to_date(trees, delete):
    from airflow_copycat.distcp.publish import Publisher

    src, dst = trees
    fs, _ = filesystem(str(dst), None)
    staging = Staging(str(dst))
    pub = Publisher(fs, staging)

    def run(outputs: dict[str, bytes]):
        """Plan, stage ``outputs`` for every file to copy (as the copier would), publish; the diff."""
        datasets, files, result = plan(src, dst, converters="untar", delete=delete)
        for f in result.to_copy:
            d = staging.file_dir(f)
            for rel, data in outputs.items():
                fs.makedirs(os.path.dirname(f"{d}/{rel}"), exist_ok=True)
                fs.pipe_file(f"{d}/{rel}", data)
            fs.pipe_file(staging.done_marker(f), json.dumps({
                "id": f.id, "origin": f.origin, "outputs": [{"path": r, "size": len(b)} for r, b in outputs.items()],
                "checksum": None, "bytes": 0}).encode())
        res = pub.publish("d", result.to_copy, result.deletes.get("d", []))
        assert res["status"] == "published", res
        return result

    # Given an archive of a.txt, b.txt and sub/c.txt, published
    write(src, {"d/bundle.tar": "v1"})
    v1 = run({"d/bundle/a.txt": b"v1-a", "d/bundle/b.txt": b"v1-b", "d/bundle/sub/c.txt": b"v1-c"})
    assert names(v1.to_copy) == ["d/bundle.tar"]
    write(dst, {"d/bundle/stray.txt": "not from any archive"})
    # When a new version without b.txt and sub/c.txt is published
    write(src, {"d/bundle.tar": "v2"}, mtime=T0 + 100)
    v2 = run({"d/bundle/a.txt": b"v2-a", "d/bundle/new.txt": b"v2-n"})
    assert names(v2.to_copy) == ["d/bundle.tar"]
    # Then the destination holds the new version only (a stray file only goes with delete)
    expected = {"d/bundle/a.txt", "d/bundle/new.txt"} | ({"d/bundle/stray.txt"} if delete == "false" else set())
    assert {str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file() and "_copycat" not in p.parts} == expected
    assert (dst / "d/bundle/a.txt").read_bytes() == b"v2-a"
    (f,) = v2.to_copy
    assert read_manifest(fs, staging, "d") == {"d/bundle/a.txt": f.id, "d/bundle/new.txt": f.id}
    # and a rerun with the source unchanged copies and deletes nothing
    _, _, again = plan(src, dst, converters="untar", delete=delete)
    assert names(again.skipped) == ["d/bundle.tar"] and again.to_copy == [] and again.deletes == {}


def test_the_manifest_decides_a_same_size_change_whatever_the_times():
    # Given a plain file whose target has the same size, and a manifest recording another version there
    f = _file("d/x", mtime=T0 + 0.9)
    close = TargetState({"d/x": TargetFile("d/x", 3, T0 + 0.2)}, manifest={"d/x": "0" * 32})
    # Then it is copied, though its mtime is within a second
    assert not UpdatePolicy.up_to_date(f, close)
    # also without a preserved mtime, for a replacement older than the target
    g = _file("d/x", mtime=T0 - 3600, preserve=("perm",))
    newer = TargetState({"d/x": TargetFile("d/x", 3, T0)}, manifest={"d/x": "0" * 32})
    assert not UpdatePolicy.up_to_date(g, newer)
    # and even with equal checksums (another version: the manifest is rewritten with its id)
    md5 = "md5:" + "a" * 32
    h = _file("d/x", checksum=md5)
    other = TargetState({"d/x": TargetFile("d/x", 3, T0, md5)}, manifest={"d/x": "0" * 32})
    assert not UpdatePolicy.up_to_date(h, other)
    # while the file's own id there means up to date, whatever the times
    assert UpdatePolicy.up_to_date(f, TargetState({"d/x": TargetFile("d/x", 3, T0 - 99)}, manifest={"d/x": f.id}))


def test_the_one_second_tolerance_is_only_for_whole_second_times():
    # Given no manifest entry: times that both have fractions of a second are compared to the millisecond
    f = _file("d/x", mtime=T0 + 0.9)
    assert not UpdatePolicy.up_to_date(f, TargetState({"d/x": TargetFile("d/x", 3, T0 + 0.2)}))
    assert UpdatePolicy.up_to_date(f, TargetState({"d/x": TargetFile("d/x", 3, T0 + 0.9000004)}))
    # a filesystem keeping whole seconds (S3) gets a second
    assert UpdatePolicy.up_to_date(f, TargetState({"d/x": TargetFile("d/x", 3, T0)}))
    assert UpdatePolicy.up_to_date(_file("d/x", mtime=T0), TargetState({"d/x": TargetFile("d/x", 3, T0 + 0.4)}))


def test_end_to_end_a_same_size_rewrite_within_a_second_is_copied(trees):
    from airflow_copycat.distcp.publish import Publisher

    src, dst = trees
    write(src, {"d/state.json": '{"v": 1}'}, mtime=T0 + 0.2)
    fs, _ = filesystem(str(dst), None)
    pub = Publisher(fs, Staging(str(dst)))
    for version, mtime, preserve in ((1, T0 + 0.2, "perm,mtime"), (2, T0 + 0.9, "perm,mtime"), (3, T0 - 3600, "perm")):
        write(src, {"d/state.json": f'{{"v": {version}}}'}, mtime=mtime)
        _, _, result = plan(src, dst, preserve=preserve)
        assert names(result.to_copy) == ["d/state.json"], version
        (f,) = result.to_copy
        d = Staging(str(dst)).file_dir(f)
        os.makedirs(f"{d}/d")
        with open(f"{d}/d/state.json", "w") as fh:
            fh.write(f'{{"v": {version}}}')
        fs.pipe_file(Staging(str(dst)).done_marker(f), json.dumps(
            {"id": f.id, "origin": f.origin, "outputs": [{"path": "d/state.json", "size": 8}]}).encode())
        assert pub.publish("d", [f], [])["status"] == "published"
        assert (dst / "d/state.json").read_text() == f'{{"v": {version}}}'


def test_the_diff_reads_the_manifest_of_the_jobs_file_set(trees):
    src, dst = trees
    write(src, {"d/a.csv.gz": "gz"})
    write(dst, {"d/a.csv": "decompressed"})
    datasets, files, _ = plan(src, dst, converters="decompress")
    job = Staging(str(dst), job="nightly")
    os.makedirs(os.path.dirname(job.manifest("d")))
    with open(job.manifest("d"), "w") as fh:
        json.dump({"d/a.csv": files[0].id}, fh)
    cfg = parse_copy_config({"name": "nightly", "source.url": str(src), "target.url": str(dst),
                             "dataset.pattern": "*", "converters": "decompress"})
    fs, _ = filesystem(str(dst), None)
    assert names(diff(files, fs, str(dst), datasets, cfg, staging=job).skipped) == ["d/a.csv.gz"]
    assert names(diff(files, fs, str(dst), datasets, cfg).to_copy) == ["d/a.csv.gz"]  # another job's manifest
    assert names(diff(files, fs, str(dst), datasets, cfg, staging=Staging(str(dst), job="other")).to_copy) == [
        "d/a.csv.gz"]


def test_an_unreadable_manifest_means_nothing_is_known(trees, caplog):
    src, dst = trees
    staging = Staging(str(dst))
    fs, _ = filesystem(str(dst), None)
    assert read_manifest(fs, staging, "d") == {}
    fs.makedirs(os.path.dirname(manifest_path(staging, "d")))
    fs.pipe(manifest_path(staging, "d"), b"{not json")
    assert read_manifest(fs, staging, "d") == {}
    assert "unreadable manifest" in caplog.text


def test_policy_names():
    assert isinstance(policy_for("update"), UpdatePolicy)
    with pytest.raises(ValueError, match="unknown diff policy 'nope'; known: update"):
        policy_for("nope")


def test_files_of_unknown_datasets_are_an_error(trees):
    src, dst = trees
    write(src, {"d/a": "1"})
    datasets, files, _ = plan(src, dst)
    fs, _ = filesystem(str(dst), None)
    with pytest.raises(ValueError, match="not among the datasets"):
        diff(files, fs, str(dst), [], {})


def test_copying_into_itself_is_a_no_op(trees):
    src, _ = trees
    write(src, {"d/a": "1"})
    shutil.copytree(src, src / "copy")
    _, _, result = plan(src, src, pattern="d", delete="true")
    assert names(result.skipped) == ["d/a"] and result.to_copy == [] and result.deletes == {}
