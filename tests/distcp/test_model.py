"""The distcp model: file set ids and staging paths per copy job, and a file read back from its plan dict."""

from __future__ import annotations

import hashlib
import json

import pytest

from airflow_copycat.distcp.model import CopyableFile, Staging, file_set_id


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


def _file(**kw) -> CopyableFile:
    return CopyableFile(**{"origin": "/s/d/a.csv.gz", "relative": "d/a.csv.gz", "destination": "d/a.csv", "size": 10,
                           "mtime": 1.5, "dataset": "d", "file_set": "d", **kw})


@pytest.mark.parametrize("f", [_file(), _file(checksum="md5:" + "0" * 32, mode=0o640, owner="u", group="g",
                                         preserve=("perm", "mtime"), converters=("gunzip",))])
def test_a_file_read_back_from_its_dict_is_the_one_constructed(f):
    d = json.loads(json.dumps(f.to_dict()))  # as a plan file holds it
    back = CopyableFile.from_dict(d)
    assert back == f and hash(back) == hash(f) and back.id == f.id
    assert list(back.__dict__.items()) == list(f.__dict__.items())  # same fields, same order, same types
    assert back.to_dict() == f.to_dict() and list(back.to_dict()) == list(f.to_dict())
    # the dataclass constructor on the same dict gives the same file
    assert CopyableFile(**{**d, "preserve": tuple(d["preserve"]), "converters": tuple(d["converters"])}) == back


def test_a_dict_without_an_id_or_with_optional_fields_left_out_is_read_as_the_constructor_reads_it():
    f = _file(converters=("gunzip",))
    d = {k: v for k, v in f.to_dict().items() if k not in ("id", "mode", "preserve")}
    back = CopyableFile.from_dict(d)
    assert back == f and back.id == f.id and back.preserve == () and back.mode is None
    partial = {**f.to_dict(), "preserve": None}
    del partial["checksum"]
    assert CopyableFile.from_dict(partial) == f
    with pytest.raises(TypeError):
        CopyableFile.from_dict({**f.to_dict(), "colour": "red"})
    with pytest.raises(TypeError):
        CopyableFile.from_dict({k: v for k, v in f.to_dict().items() if k != "size"})
