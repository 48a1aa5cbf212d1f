"""The distcp model: file set ids and staging paths per copy job."""

from __future__ import annotations

import hashlib

from airflow_copycat.distcp.model import Staging, file_set_id


def test_without_a_job_file_set_ids_and_paths_are_the_dataset_hash():
    staging = Staging("/t/")
    legacy = hashlib.sha256(b"ds").hexdigest()[:24]
    assert file_set_id("ds") == legacy == staging.set_id("ds")
    assert staging.file_set_dir("ds") == f"/t/_copycat/distcp/staging/{legacy}"
    assert staging.wal("ds") == f"/t/_copycat/distcp/wal/{legacy}.json"
    assert staging.manifest("ds") == f"/t/_copycat/distcp/manifest/{legacy}.json"
    assert staging.owns(legacy) and not staging.owns(Staging("/t", job="j").set_id("ds"))


def test_each_job_has_its_own_file_sets():
    # Given two jobs copying the same dataset into one target
    a, a2, b = Staging("/t", job="job-a"), Staging("/t", "job-a"), Staging("/t", job="job-b")
    # Then their staging, logs and manifests are apart, and stable per job
    for path in ("file_set_dir", "wal", "manifest"):
        assert getattr(a, path)("ds") != getattr(b, path)("ds") != getattr(Staging("/t"), path)("ds")
        assert getattr(a, path)("ds") == getattr(a2, path)("ds")
    assert a.set_id("ds") == file_set_id("ds", "job-a") != a.set_id("ds2")
    # and a job tells its own sets from the others'
    assert a.owns(a.set_id("ds")) and a.owns(a.set_id("other"))
    assert not a.owns(b.set_id("ds")) and not a.owns(file_set_id("ds"))
    assert not b.owns(a.set_id("ds"))
    # the job and dataset names are not confused with each other
    assert file_set_id("b", "a") != file_set_id("", "ab") and file_set_id("a/b", "j") != file_set_id("b", "j/a")
