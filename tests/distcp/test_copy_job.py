"""The whole copy job (plan -> copy -> publish) through ``copycat copy --in-process``: bad inputs fail their
file set by name and publish nothing of it; other file sets publish; configs are checked first."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import pytest

from airflow_copycat import cli


def run(capsys, *argv):
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def tar_bytes(*entries) -> bytes:
    """A tar of ``(name, data)`` regular files and ``(name, "->", target)`` symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry[0])
            if len(entry) == 3:
                info.type, info.linkname = tarfile.SYMTYPE, entry[2]
                tar.addfile(info)
            else:
                info.size = len(entry[1])
                tar.addfile(info, io.BytesIO(entry[1]))
    return buf.getvalue()


def make_bad(src, case):
    """The ``bad`` dataset holding one bad file for ``case``; returns (its path, what the error must say)."""
    bad = src / "bad"
    bad.mkdir(parents=True)
    (bad / "fine.txt").write_text("fine\n")
    if case == "tar_dotdot":
        path = bad / "x.tar"
        path.write_bytes(tar_bytes(("ok.txt", b"ok"), ("../escape.txt", b"evil")))
        return path, "../escape.txt"
    if case == "tar_link_escape":
        path = bad / "x.tar"
        path.write_bytes(tar_bytes(("ok.txt", b"ok"), ("link", "->", "../../etc/passwd")))
        return path, "link"
    if case == "corrupt_gzip":
        path = bad / "x.txt.gz"
        path.write_bytes(gzip.compress(b"x" * 1000)[:-8] + b"\0" * 8)
        return path, ""
    path = bad / "x.bin"
    path.write_bytes(b"data that was changed after its checksum was taken")
    (bad / "x.bin.md5").write_text(hashlib.md5(b"the original data").hexdigest() + "  x.bin\n")
    return path, "md5"


@pytest.mark.parametrize("case", ["tar_dotdot", "tar_link_escape", "corrupt_gzip", "checksum_mismatch"])
def test_a_bad_file_fails_its_file_set_by_name_and_publishes_nothing_of_it(capsys, tmp_path, case):
    # Given a good dataset and a bad one
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "good").mkdir(parents=True)
    (src / "good" / "g.txt").write_text("good\n")
    bad_file, detail = make_bad(src, case)
    converters = {"tar_dotdot": "untar", "tar_link_escape": "untar", "corrupt_gzip": "decompress"}.get(case, "")
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"name": "bad", "source.url": str(src), "target.url": str(dst),
                                  "dataset.pattern": "*", "converters": converters,
                                  "checksum.sidecar": case == "checksum_mismatch"}))
    # When it is copied
    rc, out, err = run(capsys, "copy", config, "--in-process")
    # Then the run fails, naming the file (and the entry), the good dataset is published and nothing of the bad one
    assert rc == 1, out + err
    assert str(bad_file) in out and detail in out
    assert (dst / "good" / "g.txt").read_text() == "good\n"
    assert not (dst / "bad").exists() and not (dst / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()
    # And the bad dataset's good file stays staged: a rerun reuses it, and fails the same way
    rc, out, err = run(capsys, "copy", config, "--in-process", "--json")
    summary = json.loads(out)
    assert rc == 1 and summary["files_reused"] == 1 and summary["not_published"] == ["bad"]


def test_every_bad_key_is_named_before_anything_is_listed(capsys, tmp_path):
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"name": "x", "target.url": str(tmp_path / "dst"), "converters": "gunzip,zip",
                                  "block.split.size": 1000, "tasks.max": 0, "preserve": "perm,colour"}))
    rc, out, err = run(capsys, "copy", config, "--in-process")
    assert rc == 1
    for key in ("source.url", "converters", "tasks.max", "preserve"):
        assert key in err, err
    assert not (tmp_path / "dst").exists()


def test_copy_then_rerun_copies_only_what_changed_and_deletes_what_went(capsys, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    for name in ("a", "b", "c"):
        (src / "t" / name).parent.mkdir(parents=True, exist_ok=True)
        (src / "t" / name).write_text(name * 100)
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"name": "sync", "source.url": str(src), "target.url": str(dst),
                                  "dataset.pattern": "*", "delete": True}))
    rc, out, _ = run(capsys, "copy", config, "--in-process", "--json")
    assert rc == 0 and json.loads(out)["files_copied"] == 3
    # When one file changes and one is deleted at the source
    (src / "t" / "a").write_text("changed")
    (src / "t" / "c").unlink()
    rc, out, _ = run(capsys, "copy", config, "--in-process", "--json")
    summary = json.loads(out)
    # Then only the changed file is copied, the deleted one is deleted, and the target equals the source
    assert rc == 0 and (summary["files_copied"], summary["files_skipped"], summary["deleted"]) == (1, 1, 1)
    assert sorted(p.name for p in (dst / "t").iterdir()) == ["a", "b"] and (dst / "t" / "a").read_text() == "changed"


def test_a_large_file_is_copied_as_byte_ranges_by_several_tasks_and_concatenated_at_publish(capsys, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "big").mkdir(parents=True)
    data = hashlib.sha256(b"x").digest() * 40000  # 1.28 MB
    (src / "big" / "blob.bin").write_bytes(data)
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"name": "split", "source.url": str(src), "target.url": str(dst),
                                  "dataset.pattern": "*", "block.split.size": 300000, "tasks.max": 3}))
    rc, out, err = run(capsys, "copy", config, "--in-process", "--json")
    summary = json.loads(out)
    # Then the 5 ranges were spread over the 3 tasks, and the published file is the source, byte for byte
    assert rc == 0, out + err
    assert len(summary["tasks"]) == 3 and all(t["bytes"] > 0 for t in summary["tasks"])
    assert sum(t["bytes"] for t in summary["tasks"]) == len(data)
    assert (dst / "big" / "blob.bin").read_bytes() == data
    assert not list((dst / "_copycat" / "distcp" / "staging").rglob("*.bin"))


def test_a_source_inside_the_target_is_refused_when_deleting(capsys, tmp_path):
    # Given a source that lies inside the target, and another team's file in the target
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "x.csv").write_text("x\n")
    (tmp_path / "data" / "other-team.parquet").write_text("keep me")
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"name": "inside", "source.url": str(tmp_path / "data" / "raw"),
                                  "target.url": str(tmp_path / "data"), "delete": True}))
    # When it is run, Then it is refused before anything is touched
    rc, out, err = run(capsys, "copy", config, "--in-process")
    assert rc == 1 and "target.url" in err and "delete" in err
    assert (tmp_path / "data" / "raw" / "x.csv").exists() and (tmp_path / "data" / "other-team.parquet").exists()


def test_plans_are_kept_per_job_and_pruned_to_the_newest(capsys, tmp_path):
    from airflow_copycat.runtime.copy_job import KEEP_PLANS

    (tmp_path / "src" / "d").mkdir(parents=True)
    (tmp_path / "src" / "d" / "f").write_text("f")
    for name in ("orders", "orders-eu"):
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps({"name": name, "source.url": str(tmp_path / "src"),
                                      "target.url": str(tmp_path / "dst")}))
    for _ in range(KEEP_PLANS + 2):
        assert run(capsys, "copy", tmp_path / "orders-eu.json", "--in-process")[0] == 0
    # planning one job never removes another job's plans, and keeps its own newest ones
    assert run(capsys, "copy", tmp_path / "orders.json", "--in-process")[0] == 0
    plans = tmp_path / "dst" / "_copycat" / "distcp" / "plans"
    per_job = {p.name.rsplit("-", 1)[0]: len(list(p.iterdir())) for p in plans.iterdir()}
    assert per_job == {"orders-eu": KEEP_PLANS, "orders": 1}


class CopyEverything:
    """A diff policy for the test below: copy every file, whatever the target holds."""

    def diff(self, dataset, files, target, config):
        from airflow_copycat.distcp.diff import DatasetDiff

        return DatasetDiff(to_copy=list(files), skipped=[], deletes=[])


def test_a_diff_policy_is_chosen_by_name(capsys, tmp_path):
    (tmp_path / "src" / "d").mkdir(parents=True)
    (tmp_path / "src" / "d" / "f").write_text("f")
    config = tmp_path / "job.json"
    base = {"name": "pol", "source.url": str(tmp_path / "src"), "target.url": str(tmp_path / "dst")}
    config.write_text(json.dumps(base))
    assert run(capsys, "copy", config, "--in-process")[0] == 0
    # the default policy finds the file up to date; a policy that copies everything copies it again
    config.write_text(json.dumps(dict(base, **{"diff.policy": f"{__name__}:CopyEverything"})))
    rc, out, err = run(capsys, "copy", config, "--in-process", "--json")
    assert rc == 0 and json.loads(out)["files_copied"] == 1
    config.write_text(json.dumps(dict(base, **{"diff.policy": "nope"})))
    rc, out, err = run(capsys, "copy", config, "--in-process")
    assert rc == 1 and "diff.policy" in err


def test_the_process_that_made_the_plan_takes_it_from_memory_others_read_its_files(tmp_path, monkeypatch):
    """``copycat copy --in-process`` runs the tasks and the publish in the process that wrote the plan:
    they take the units and file sets from memory -- equal to what the files hold -- and read no plan
    file; in any other process (here: the memory cleared) the files are read, to the same result."""
    from airflow_copycat.distcp.model import CopyableFile, WorkUnit
    from airflow_copycat.runtime import copy_job

    src = tmp_path / "src"
    for rel, data in {"a/x.txt": "x", "a/deep/z.txt": "zzz", "b/y.txt": "yy"}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(data)
    reads = []
    real_load = copy_job._load_plan
    monkeypatch.setattr(copy_job, "_load_plan", lambda url, options: (reads.append(url), real_load(url, options))[1])

    def job(target, forget):
        raw = {"name": "j", "source.url": str(src), "target.url": str(tmp_path / target), "dataset.pattern": "*",
               "tasks.max": 2}
        plan = copy_job.make_copy_plan(dict(raw))
        urls = [t["config"][copy_job.PLAN_URL_KEY] for g in plan["groups"] for t in g["tasks"]]
        assert len(urls) == 2
        for url in urls:  # what memory holds is what the file says
            with open(url.removeprefix("file://")) as fh:
                assert copy_job._WRITTEN[url] == [WorkUnit.from_dict(u) for u in json.load(fh)["units"]]
        with open(plan["plan_url"].removeprefix("file://")) as fh:
            on_disk = json.load(fh)["file_sets"]
        assert copy_job._WRITTEN[plan["plan_url"]] == {
            k: {**e, "files": [CopyableFile.from_dict(f) for f in e["files"]]} for k, e in on_disk.items()}
        if forget:
            copy_job._WRITTEN.clear()
        results = [{"tasks": [copy_job.run_copy_task(t) for t in g["tasks"]]} for g in plan["groups"]]
        summary = copy_job.publish_copy(plan, results, dict(raw))
        assert (summary["status"], summary["files_copied"], sorted(summary["published"])) == ("ok", 3, ["a", "b"])
        assert (tmp_path / target / "a/deep/z.txt").read_text() == "zzz"
        return urls + [plan["plan_url"]]

    job("t1", forget=False)
    assert reads == [] and copy_job._WRITTEN == {}  # nothing read; each part taken once
    urls = job("t2", forget=True)
    assert sorted(reads) == sorted(urls)  # every task file and plan.json, read once


def test_options_that_are_no_json_object_are_named_with_the_other_problems_and_never_shown(tmp_path):
    from airflow_copycat.connect.errors import ConfigException
    from airflow_copycat.runtime.copy_job import make_copy_plan

    (tmp_path / "src").mkdir()
    config = {"name": "opts", "source.url": str(tmp_path / "src"), "target.url": str(tmp_path / "dst"),
              "source.options": '{"secret": "OptSecret-12345", ', "target.options": "[1, 2]", "tasks.max": 0}
    with pytest.raises(ConfigException) as raised:
        make_copy_plan(config)
    assert sorted(p.key for p in raised.value.problems) == ["source.options", "target.options", "tasks.max"]
    assert "OptSecret-12345" not in str(raised.value) and "source.options='[hidden]': is not valid JSON" in \
        str(raised.value)


def test_an_unknown_diff_policy_fails_before_the_target_is_touched(tmp_path):
    from airflow_copycat.connect.errors import ConfigException
    from airflow_copycat.runtime.copy_job import make_copy_plan

    config = {"name": "policy", "source.url": str(tmp_path / "no-such-source"), "target.url": str(tmp_path / "dst"),
              "diff.policy": "nope"}
    with pytest.raises(ConfigException) as raised:  # not FileNotFoundError of the missing source
        make_copy_plan(config)
    assert [p.key for p in raised.value.problems] == ["diff.policy"]
    assert not (tmp_path / "dst").exists()
