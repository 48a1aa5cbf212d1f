"""The one atomic-filesystem engine (airflow_copycat.storage.atomic): whole-or-nothing writes, renames that
replace their target on every store, JSON documents, deletes -- and the files sink and Distcp both on it."""

from __future__ import annotations

import json
import os

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_copycat.connectors.files import FilesSinkConnector, FilesSinkTask
from airflow_copycat.connect import SinkRecord, SinkTaskContext
from airflow_copycat.storage import AtomicFiles, is_local, new_token


class NoReplaceFileSystem(MemoryFileSystem):
    """An in-memory store that, like HDFS, refuses to rename over an existing file: the one fault of
    HDFS's rename that cannot be caused here without an HDFS cluster."""

    protocol = ("noreplace",)
    store: dict = {}  # its own objects, apart from memory://
    pseudo_dirs = [""]
    refused = 0

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("noreplace://"))

    def mv(self, path1, path2, **kwargs):
        if self.exists(path2) and not self.isdir(path2):
            type(self).refused += 1
            raise FileExistsError(path2)
        return super().mv(path1, path2, **kwargs)


fsspec.register_implementation("noreplace", NoReplaceFileSystem, clobber=True)


@pytest.fixture(params=["local", "memory", "noreplace"])
def files(request, tmp_path):
    if request.param == "local":
        return AtomicFiles(None), str(tmp_path)
    fs = fsspec.filesystem(request.param)
    return AtomicFiles(fs), f"/atomic-{request.param}-{os.getpid()}-{tmp_path.name}"


def test_json_documents_replace_each_other_whole_and_leave_no_temporary_file(files):
    af, root = files
    path = f"{root}/control/marker.json"
    assert af.read_json(path) is None
    af.write_json(path, {"offset": 1}, new_token())
    af.write_json(path, {"offset": 2, "name": "é"}, new_token(), indent=1)
    assert af.read_json(path) == {"offset": 2, "name": "é"}
    assert sorted(p.rsplit("/", 1)[1] for p in af.find(f"{root}/control")) == ["marker.json"]


def test_a_document_that_is_not_json_is_a_value_error(files):
    af, root = files
    af.write(f"{root}/bad.json", b"{not json")
    with pytest.raises(ValueError):
        af.read_json(f"{root}/bad.json")


def test_rename_replaces_the_target_even_where_the_store_refuses_to(files):
    af, root = files
    af.write(f"{root}/a/new", b"new")
    af.write(f"{root}/a/old", b"old")
    af.rename(f"{root}/a/new", f"{root}/a/old")
    assert af.fs.cat_file(f"{root}/a/old") == b"new"
    assert not af.exists(f"{root}/a/new")


def test_delete_takes_files_and_trees_and_says_when_nothing_was_there(files):
    af, root = files
    af.write(f"{root}/t/x/1", b"1")
    af.write(f"{root}/t/2", b"2")
    assert af.delete(f"{root}/t/2") is True
    assert af.delete(f"{root}/t") is True
    assert af.delete(f"{root}/t") is False
    assert af.find(f"{root}/t") == {}


def test_local_is_told_apart_from_other_stores():
    assert is_local(fsspec.filesystem("file")) and AtomicFiles(None).local
    assert not is_local(fsspec.filesystem("memory"))


def _opened_sink_task(raw: dict):
    """A files sink task started on ``raw`` with topic-partition t/0 opened (the runtime's calls), and its context."""
    connector = FilesSinkConnector()
    connector.start(FilesSinkConnector.parse_config(raw))
    task_config = connector.task_configs(1)[0]
    task = FilesSinkTask()
    context = SinkTaskContext(task_config, [("t", 0)])
    task.initialize(context)
    task.start(task_config)
    task.open([("t", 0)])
    return task, context


def test_files_sink_commits_again_on_a_store_that_refuses_to_rename_over_a_file(tmp_path):
    """Every commit after the first replaces the committed-offset marker: on a store that refuses
    renames over a file (HDFS) the files sink once failed there; Distcp had the fix, now both share it."""
    NoReplaceFileSystem.refused = 0
    url = f"noreplace://sink-{os.getpid()}-{tmp_path.name}"
    task, _ = _opened_sink_task({"topics": "t", "store.url": url, "format.class": "json", "flush.size": "2"})
    for offset in range(6):
        task.put([SinkRecord(topic="t", kafka_partition=0, value={"id": offset}, kafka_offset=offset)])
        committed = task.pre_commit({("t", 0): offset + 1})
    task.stop()
    assert committed == {("t", 0): 6}
    fs = fsspec.filesystem("noreplace")
    base = url[len("noreplace://"):]
    marker = json.loads(fs.cat_file(f"/{base}/topics/_copycat/offsets/t+0.json"))
    assert marker["offset"] == 6
    published = sorted(p.rsplit("/", 1)[1] for p in fs.find(f"/{base}/topics/t"))
    assert published == ["t+0+0000000000.json", "t+0+0000000002.json", "t+0+0000000004.json"]
    assert NoReplaceFileSystem.refused >= 2  # the store did refuse, and the marker moved anyway


def test_a_marker_lost_between_delete_and_rename_is_restored_from_the_publish_log(tmp_path, monkeypatch):
    """On a store that refuses to rename over a file the marker is deleted, then the new one renamed in: a
    process killed between the two leaves no marker. The next open must finish that publish from its log,
    not take the partition as never committed (which would drop the log and start over)."""
    url = f"noreplace://lost-{os.getpid()}-{tmp_path.name}"
    raw = {"topics": "t", "store.url": url, "format.class": "json", "flush.size": "2"}

    def task_at(committed: int | None):
        task, context = _opened_sink_task(raw)
        assert context.take_rewinds().get(("t", 0)) == committed
        return task

    task = task_at(None)
    for offset in range(2):
        task.put([SinkRecord(topic="t", kafka_partition=0, value={"id": offset}, kafka_offset=offset)])
    assert task.pre_commit({("t", 0): 2}) == {("t", 0): 2}
    # the next commit dies after the old marker was deleted, before the new one is renamed in
    real_mv = NoReplaceFileSystem.mv

    def mv(self, path1, path2, **kwargs):
        if "/_copycat/offsets/" in str(path2) and not self.exists(path2) and str(path1).endswith(".tmp"):
            raise KeyboardInterrupt("killed between delete and rename")
        return real_mv(self, path1, path2, **kwargs)

    monkeypatch.setattr(NoReplaceFileSystem, "mv", mv)
    for offset in range(2, 4):
        task.put([SinkRecord(topic="t", kafka_partition=0, value={"id": offset}, kafka_offset=offset)])
    with pytest.raises(KeyboardInterrupt):
        task.pre_commit({("t", 0): 4})
    monkeypatch.setattr(NoReplaceFileSystem, "mv", real_mv)
    fs = fsspec.filesystem("noreplace")
    base = url[len("noreplace://"):]
    assert not fs.exists(f"/{base}/topics/_copycat/offsets/t+0.json")  # the window the test is about
    # When the partition is opened again, it resumes after the interrupted publish: nothing lost, nothing twice
    task_at(4)
    published = sorted(p.rsplit("/", 1)[1] for p in fs.find(f"/{base}/topics/t"))
    assert published == ["t+0+0000000000.json", "t+0+0000000002.json"]


def test_a_rename_failing_for_another_reason_never_deletes_the_target(monkeypatch):
    """Only the store's refusal to overwrite leads to delete-then-rename: a throttled or lost request (an
    OSError too) must leave the old target in place."""
    af = AtomicFiles(fsspec.filesystem("noreplace"))
    root = f"/throttled-{os.getpid()}"
    af.write(f"{root}/marker.json", b"old")
    af.write(f"{root}/marker.json.x.tmp", b"new")

    def mv(self, path1, path2, **kwargs):
        raise OSError("503 Slow Down")

    monkeypatch.setattr(NoReplaceFileSystem, "mv", mv)
    with pytest.raises(OSError, match="Slow Down"):
        af.rename(f"{root}/marker.json.x.tmp", f"{root}/marker.json")
    assert af.fs.cat_file(f"{root}/marker.json") == b"old"


def test_only_the_stores_own_words_for_an_existing_target_count_as_a_refusal():
    from airflow_copycat.storage.atomic import _refused_as_existing

    assert _refused_as_existing(FileExistsError("x"))
    assert _refused_as_existing(OSError("org.apache.hadoop.fs.FileAlreadyExistsException: /t/x already exists"))
    # a throttled request about a file whose name says "exists" is not one
    assert not _refused_as_existing(OSError(5, "SlowDown", "s3://b/topics/_copycat/offsets/account_exists+0.json"))
