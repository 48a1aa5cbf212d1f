"""Publishing many file sets at once (:meth:`Publisher.publish_all`): the same published tree,
manifests and results as publishing one set after another, with the directory syncs shared -- and
still each log durable before its first step, and every manifest durable before any log is removed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fsspec.implementations.local import LocalFileSystem

from airflow_copycat.distcp.model import Staging
from airflow_copycat.distcp.publish import Publisher
from tests.distcp.test_publish import T0, cfile, stage, tree, write_tree

SETS = ("A", "B", "C")


def _staged_target(root: Path) -> tuple[Publisher, dict]:
    """A target with an old file to delete, and three file sets of three files each staged."""
    root.mkdir()
    write_tree(root, {"A/old.csv": b"old"})
    fs, staging = LocalFileSystem(), Staging(str(root), job="j")
    work = {}
    for s in SETS:
        files = [cfile(f"{s}/d{i}/f.csv", 3 + i, file_set=s, mode=0o640, mtime=T0 + i) for i in range(3)]
        for f in files:
            stage(fs, staging, f)
        work[s] = (files, ["A/old.csv"] if s == "A" else [])
    return Publisher(fs, staging), work


def _state(root: Path) -> dict:
    published = {p: (data, os.stat(root / p).st_mode, os.stat(root / p).st_mtime_ns) for p, data in tree(root).items()}
    control = root / "_copycat" / "distcp"
    manifests = {p.name: json.loads(p.read_bytes()) for p in sorted((control / "manifest").glob("*.json"))}
    left = sorted(str(p.relative_to(control)) for p in control.rglob("*") if p.is_file() and "manifest" not in p.parts)
    return {"published": published, "manifests": manifests, "left": left}


def test_publish_all_gives_what_publishing_one_set_after_another_gives(tmp_path):
    pub, work = _staged_target(tmp_path / "all")
    together = pub.publish_all(work)
    pub1, work1 = _staged_target(tmp_path / "one")
    one_by_one = [pub1.publish(s, files, deletes) for s, (files, deletes) in work1.items()]
    assert [r["status"] for r in together] == ["published"] * 3
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in together] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in one_by_one]
    assert _state(tmp_path / "all") == _state(tmp_path / "one")
    assert "A/old.csv" not in _state(tmp_path / "all")["published"]


def test_each_log_is_durable_before_its_steps_and_every_manifest_before_a_log_goes(tmp_path, monkeypatch):
    pub, work = _staged_target(tmp_path / "t")
    control = str(tmp_path / "t" / "_copycat" / "distcp")
    events: list[tuple[str, str]] = []
    real_fsync, real_replace, real_unlink = os.fsync, os.replace, os.unlink

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst, *args, **kwargs):
        events.append(("rename", str(dst)))
        return real_replace(src, dst, *args, **kwargs)

    def unlink(path, *args, **kwargs):
        events.append(("unlink", str(path)))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    assert [r["status"] for r in pub.publish_all(work)] == ["published"] * 3

    def first(kind: str, path: str, after: int = 0) -> int:
        return next(i for i, e in enumerate(events) if i >= after and e == (kind, path))

    wal_dir, manifest_dir = f"{control}/wal", f"{control}/manifest"
    for s in SETS:
        wal = pub.staging.wal(s)
        logged = first("rename", wal)
        assert events[logged - 1][0] == "fsync" and events[logged - 1][1].startswith(wal + ".")  # its bytes
        assert events[logged + 1] == ("fsync", wal_dir)  # its name
        data = first("rename", str(tmp_path / "t" / s / "d0" / "f.csv"))
        assert logged < data  # then the steps
    manifests_durable = first("fsync", manifest_dir)
    last_manifest = max(i for i, e in enumerate(events) if e[0] == "rename" and e[1].startswith(manifest_dir + "/"))
    logs_removed = [i for i, e in enumerate(events) if e[0] == "unlink" and e[1].startswith(wal_dir + "/")]
    assert len(logs_removed) == 3
    assert last_manifest < manifests_durable < min(logs_removed)
    assert max(logs_removed) < first("fsync", wal_dir, after=max(logs_removed))
    directory_syncs = [e for e in events if e[0] == "fsync" and e[1] in (wal_dir, manifest_dir)]
    assert len(directory_syncs) == 3 + 2  # each log's, then the manifests' and the logs' once
