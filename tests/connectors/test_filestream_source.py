"""FileStreamSource against real files: offsets, partial lines, globs, rotation, truncation, errors.

No Kafka here: the tests drive the connector and task as the runtime does
(parse, start, task_configs, initialize, start, poll until ``None``) and keep
"committed" offsets in a dict, the last offset of each partition of a run
(a batch's ``source_offset``, also of a batch of no rows). Every test runs
twice: with the task's batches (the default) and with its records, the
batches read through their meaning, ``SourceBatch.to_records()``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_copycat.connect import (
    ConfigException,
    ConnectException,
    OffsetStorageReader,
    Schema,
    SourceBatch,
    SourceTaskContext,
    task_partitions,
)
from airflow_copycat.connect.assignment import canonical
from airflow_copycat.connectors.filestream import FileStreamSourceConnector, FileStreamSourceTask


class DictOffsetReader(OffsetStorageReader):
    """Committed offsets held in a dict keyed by canonical partition JSON."""

    def __init__(self, committed: dict | None = None):
        self.committed = dict(committed or {})

    def offsets(self, partitions):
        keys = [canonical(p) for p in partitions]
        return {k: self.committed[k] for k in keys if k in self.committed}


class RecordingContext(SourceTaskContext):
    """errors.tolerance=all: remember every reported error and carry on."""

    def __init__(self, config, reader):
        super().__init__(config, reader)
        self.errors = []

    def report_error(self, error, *, source_partition, source_offset, raw=None, location=""):
        self.errors.append(dict(error=error, partition=source_partition, offset=source_offset, raw=raw,
                                location=location))


@pytest.fixture(autouse=True, params=[True, False], ids=["batches", "records"])
def batches(request, monkeypatch):
    """Run the test with the task returning batches, then records."""
    monkeypatch.setattr(FileStreamSourceTask, "batches", request.param)
    return request.param


def poll(task, committed: dict | None = None) -> list | None:
    """One ``task.poll()`` as records (batches expanded); records the offsets in ``committed``."""
    out = task.poll()
    if out is None:
        return None
    records = []
    for item in out:
        if isinstance(item, SourceBatch):
            assert len({r.source_offset["position"] for r in item.to_records()}) == len(item)
            records += item.to_records()
        else:
            records.append(item)
        if committed is not None:
            committed[canonical(item.source_partition)] = item.source_offset
    return records


def plan(config: dict, max_tasks: int = 1) -> list[dict]:
    connector = FileStreamSourceConnector()
    connector.start(FileStreamSourceConnector.parse_config(config))
    try:
        return connector.task_configs(max_tasks)
    finally:
        connector.stop()


def start_task(task_config: dict, committed: dict | None = None, context_class=SourceTaskContext):
    task = FileStreamSourceTask()
    task.initialize(context_class(task_config, DictOffsetReader(committed)))
    task.start(task_config)
    return task


def drain(task, committed: dict | None = None, limit: int = 10_000) -> list:
    """Poll until the task is caught up; record each partition's last offset in ``committed``."""
    records = []
    for _ in range(limit):
        batch = poll(task, committed)
        if batch is None:
            break
        records += batch
    else:
        pytest.fail("task never reported being caught up")
    return records


def run(config: dict, committed: dict | None = None, context_class=SourceTaskContext) -> list:
    """One bounded run of every task of a fresh plan; returns the records."""
    records = []
    for tc in plan(config):
        task = start_task(tc, committed, context_class)
        try:
            records += drain(task, committed)
        finally:
            task.stop()
    return records


def values(records) -> list[str]:
    return [r.value for r in records]


def config_for(path, **extra) -> dict:
    return {"file": str(path), "topic": "lines", **extra}


def age(path, seconds: float = 60) -> None:
    """Set ``path``'s mtime ``seconds`` into the past: its writer stopped writing long ago."""
    then = time.time() - seconds
    os.utime(path, (then, then))


# ------------------------------------------------------------------ records and offsets


def test_records_match_kafka_connect_filestream_source(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes("first\nsécond\r\nthird\n".encode())
    records = run(config_for(path))
    assert values(records) == ["first", "sécond", "third"]
    r = records[1]
    assert r.topic == "lines" and r.key is None and r.key_schema is None
    assert r.value_schema == Schema.STRING and r.kafka_partition is None
    assert r.source_partition == {"filename": str(path)}
    # byte offsets after each line; "é" is two bytes in utf-8
    assert [x.source_offset["position"] for x in records] == [6, 15, 21]
    assert set(r.source_offset) == {"position", "inode", "fingerprint", "fingerprint.length"}
    assert r.source_offset["inode"] == os.stat(path).st_ino


def test_partial_last_line_is_held_back_until_complete(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"one\ntw")
    tc = plan(config_for(path))[0]
    task = start_task(tc)
    first = drain(task)
    assert values(first) == ["one"]
    assert first[-1].source_offset["position"] == 4
    with open(path, "ab") as f:
        f.write(b"o\nthr")
    second = drain(task)
    assert values(second) == ["two"]
    assert second[-1].source_offset["position"] == 8
    task.stop()


def test_restart_from_committed_offset_emits_nothing_before_it(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("1\n2\n3\n")
    committed = {}
    assert values(run(config_for(path), committed)) == ["1", "2", "3"]
    assert values(run(config_for(path), committed)) == []
    with open(path, "a") as f:
        f.write("4\n5\n")
    assert values(run(config_for(path), committed)) == ["4", "5"]


def test_position_only_offset_from_kafka_connect_is_resumed(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("1\n2\n3\n")
    committed = {canonical({"filename": str(path)}): {"position": 4}}
    assert values(run(config_for(path), committed)) == ["3"]


def test_poll_returns_at_most_batch_size_records(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("".join(f"{i}\n" for i in range(10)))
    task = start_task(plan(config_for(path, **{"batch.size": 3}))[0])
    sizes = []
    while (batch := poll(task)) is not None:
        sizes.append(len(batch))
    assert sizes == [3, 3, 3, 1]
    task.stop()


def test_other_encoding(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes("café\nnaïve\n".encode("latin-1"))
    records = run(config_for(path, encoding="latin-1"))
    assert values(records) == ["café", "naïve"]
    assert records[-1].source_offset["position"] == 11


def test_fingerprint_widens_as_the_file_grows(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("short\n")
    committed = {}
    first = run(config_for(path), committed)
    assert first[-1].source_offset["fingerprint.length"] == 6
    with open(path, "a") as f:
        f.write("x" * 2000 + "\n")
    second = run(config_for(path), committed)
    assert second[-1].source_offset["fingerprint.length"] == 1024


# ------------------------------------------------------------------ globs, partitions, tasks


def test_glob_gives_one_partition_per_file_spread_over_tasks(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.log").write_text(f"{name}1\n{name}2\n")
    (tmp_path / "ignored.txt").write_text("no\n")
    (tmp_path / "dir.log").mkdir()
    config = config_for(tmp_path / "*.log")
    connector = FileStreamSourceConnector()
    connector.start(FileStreamSourceConnector.parse_config(config))
    assert connector.partitions() == [{"filename": str(tmp_path / f"{n}.log")} for n in "abc"]

    task_configs = plan(config, max_tasks=2)
    assert len(task_configs) == 2
    assigned = [[p["filename"] for p in task_partitions(tc)] for tc in task_configs]
    assert sorted(sum(assigned, [])) == [str(tmp_path / f"{n}.log") for n in "abc"]
    for tc, files in zip(task_configs, assigned):
        task = start_task(tc)
        records = drain(task)
        task.stop()
        assert {r.source_partition["filename"] for r in records} == set(files)
        assert len(records) == 2 * len(files)


def test_files_list_and_file_are_combined(tmp_path):
    for name in ("a.log", "b.log", "c.txt"):
        (tmp_path / name).write_text(name + "\n")
    config = {"file": str(tmp_path / "a.log"), "files": f"{tmp_path}/b.log, {tmp_path}/*.txt", "topic": "t"}
    assert sorted(values(run(config))) == ["a.log", "b.log", "c.txt"]


def test_new_file_is_found_by_the_next_plan_not_by_a_running_task(tmp_path):
    (tmp_path / "a.log").write_text("a\n")
    config = config_for(tmp_path / "*.log")
    task = start_task(plan(config)[0])
    (tmp_path / "b.log").write_text("b\n")
    assert values(drain(task)) == ["a"]
    task.stop()
    connector = FileStreamSourceConnector()
    connector.start(FileStreamSourceConnector.parse_config(config))
    assert len(connector.partitions()) == 2


def test_glob_matching_nothing_is_valid_but_has_no_partitions(tmp_path):
    config = config_for(tmp_path / "*.log")
    values_ = FileStreamSourceConnector.parse_config(config)
    connector = FileStreamSourceConnector()
    connector.start(values_)
    assert connector.partitions() == []
    assert connector.task_configs(3) == []


def test_missing_literal_file_is_read_once_it_appears(tmp_path):
    path = tmp_path / "later.log"
    tc = plan(config_for(path))[0]
    task = start_task(tc)
    assert poll(task) is None
    path.write_text("hello\n")
    assert values(drain(task)) == ["hello"]
    task.stop()


# ------------------------------------------------------------------ rotation and truncation


def test_rotation_between_runs_loses_and_duplicates_nothing(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("1\n2\n")
    committed = {}
    assert values(run(config_for(path), committed)) == ["1", "2"]
    with open(path, "a") as f:
        f.write("3\n")  # written after the run, before rotation
    os.rename(path, tmp_path / "app.log.1")
    with open(tmp_path / "app.log.1", "a") as f:
        f.write("4\n")  # the writer still had the old file open
    path.write_text("5\n6\n")
    records = run(config_for(path), committed)
    assert values(records) == ["3", "4", "5", "6"]
    assert values(run(config_for(path), committed)) == []


def test_rotation_between_runs_resumed_half_way_through_the_old_file(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("1\n")
    committed = {}
    run(config_for(path), committed)
    with open(path, "a") as f:
        f.write("2\n3\n4\n")
    os.rename(path, tmp_path / "app.log.1")
    path.write_text("5\n")
    task = start_task(plan(config_for(path, **{"batch.size": 2}))[0], committed)
    batch = poll(task)
    task.stop()  # the run dies after one batch: only that batch is committed
    assert values(batch) == ["2", "3"]
    for r in batch:
        committed[canonical(r.source_partition)] = r.source_offset
    assert values(run(config_for(path), committed)) == ["4", "5"]


def run_tasks_at_once(config: dict, committed: dict, max_tasks: int) -> list:
    """One run whose tasks all start (and read their committed offsets) before any of them reads."""
    tasks = [start_task(tc, dict(committed)) for tc in plan(config, max_tasks)]
    records = []
    for task in tasks:
        try:
            records += drain(task, committed)
        finally:
            task.stop()
    return records


def _rotate(directory: Path, keep: int = 5) -> None:
    """logrotate's rename scheme: app.log.(n) -> app.log.(n+1), ..., app.log -> app.log.1."""
    for n in range(keep, 0, -1):
        if (directory / f"app.log.{n}").exists():
            os.rename(directory / f"app.log.{n}", directory / f"app.log.{n + 1}")
    os.rename(directory / "app.log", directory / "app.log.1")


@pytest.mark.parametrize("max_tasks", [1, 3])
@pytest.mark.parametrize("pattern", ["app.log*", "*.log*", "*"])
def test_glob_matching_rotated_names_reads_each_rotated_file_once(tmp_path, pattern, max_tasks):
    config = config_for(tmp_path / pattern)
    committed, got = {}, []

    def append(name: str, *lines: str) -> None:
        with open(tmp_path / name, "a") as f:
            f.write("".join(f"{line}\n" for line in lines))

    def one_run() -> None:
        got.extend(values(run_tasks_at_once(config, committed, max_tasks)))

    (tmp_path / "app.log").write_text("1\n2\n")
    one_run()
    append("app.log", "3")  # the tail written before the rename
    _rotate(tmp_path)
    append("app.log.1", "4")  # the writer still had it open
    append("app.log", "5")
    one_run()
    handed = committed[canonical({"filename": str(tmp_path / "app.log.1")})]
    assert handed["read.as"] == str(tmp_path / "app.log")  # app.log.1 read none of it: a hand-off
    assert handed["inode"] == os.stat(tmp_path / "app.log.1").st_ino
    one_run()  # nothing new: nothing read
    append("app.log", "6")
    _rotate(tmp_path)  # app.log.1 -> app.log.2: read by nobody again
    append("app.log", "7")
    one_run()
    _rotate(tmp_path)  # two rotations between runs
    append("app.log", "8")
    _rotate(tmp_path)
    append("app.log", "9")
    one_run()
    one_run()
    assert sorted(got) == [str(i) for i in range(1, 10)], got  # each line once (tasks: in any order)


def test_glob_matching_rotated_names_from_a_fresh_start(tmp_path):
    """Rotated files never read before are read once (as their own partitions), then followed
    through later rotations like the others."""
    (tmp_path / "app.log.2").write_text("old-2\n")
    (tmp_path / "app.log.1").write_text("old-1\n")
    (tmp_path / "app.log").write_text("live\n")
    config, committed = config_for(tmp_path / "app.log*"), {}
    assert sorted(values(run(config, committed))) == ["live", "old-1", "old-2"]
    with open(tmp_path / "app.log", "a") as f:
        f.write("live-tail\n")
    _rotate(tmp_path)
    (tmp_path / "app.log").write_text("new\n")
    assert sorted(values(run(config, committed))) == ["live-tail", "new"]
    assert values(run(config, committed)) == []


def test_glob_matching_copytruncate_copies_reads_each_line_once(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("1\n2\n")
    config, committed = config_for(tmp_path / "app.log*"), {}
    assert values(run(config, committed)) == ["1", "2"]
    with open(path, "a") as f:
        f.write("3\n")
    (tmp_path / "app.log.1").write_bytes(path.read_bytes())  # copytruncate: copy, then truncate in place
    with open(path, "r+") as f:
        f.truncate(0)
    path.write_text("4\n")
    assert sorted(values(run(config, committed))) == ["3", "4"]
    assert values(run(config, committed)) == []


def test_offsets_committed_before_the_fix_still_resume(tmp_path):
    """A rotated name that already has an offset of its own (read as a partition before hand-offs
    existed) resumes from it, as does the live file."""
    (tmp_path / "app.log.1").write_text("a\nb\n")
    (tmp_path / "app.log").write_text("c\n")
    config, committed = config_for(tmp_path / "app.log*"), {}
    run(config, committed)
    with open(tmp_path / "app.log.1", "a") as f:
        f.write("b2\n")
    with open(tmp_path / "app.log", "a") as f:
        f.write("d\n")
    assert sorted(values(run(config, committed))) == ["b2", "d"]


def test_rotated_file_that_was_deleted_is_reported(tmp_path, caplog):
    path = tmp_path / "app.log"
    path.write_text("1\n2\n")
    committed = {}
    run(config_for(path), committed)
    os.rename(path, tmp_path / "app.log.1")
    os.remove(tmp_path / "app.log.1")
    path.write_text("new\n")
    with caplog.at_level(logging.WARNING):
        assert values(run(config_for(path), committed)) == ["new"]
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert str(path) in warning and "after byte 4" in warning


def test_rotation_during_a_run_drains_the_old_file_first(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("1\n2\n3\n")
    task = start_task(plan(config_for(path, **{"batch.size": 2}))[0])
    first = poll(task)
    assert values(first) == ["1", "2"]
    os.rename(path, tmp_path / "app.log.1")
    with open(tmp_path / "app.log.1", "a") as f:
        f.write("4\n5")  # late writes to the old file, the last one without newline
    age(tmp_path / "app.log.1")  # ... and the writer is done with it (older than rotation.grace.ms)
    path.write_text("6\n7\n")
    rest = drain(task)
    task.stop()
    assert values(first + rest) == ["1", "2", "3", "4", "5", "6", "7"]
    old, new = rest[2], rest[3]
    assert old.source_offset["position"] == 9 and new.source_offset["position"] == 2
    assert old.source_offset["inode"] != new.source_offset["inode"]


def test_rotation_during_a_run_before_the_new_file_exists(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("1\n")
    task = start_task(plan(config_for(path))[0])
    assert values(drain(task)) == ["1"]
    os.rename(path, tmp_path / "app.log.1")
    with open(tmp_path / "app.log.1", "a") as f:
        f.write("2\n")
    assert values(drain(task)) == ["2"]
    path.write_text("3\n")
    assert values(drain(task)) == ["3"]
    task.stop()


def test_copytruncate_rotation_between_runs_reads_the_copy(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("1\n2\n")
    committed = {}
    run(config_for(path), committed)
    with open(path, "a") as f:
        f.write("3\n")
    (tmp_path / "app.log.1").write_bytes(path.read_bytes())  # logrotate copytruncate: copy ...
    with open(path, "r+b") as f:
        f.truncate(0)  # ... then truncate in place (same inode)
    with open(path, "ab") as f:
        f.write(b"4\n")
    assert values(run(config_for(path), committed)) == ["3", "4"]


def test_truncated_file_restarts_at_zero_with_a_warning(tmp_path, caplog):
    path = tmp_path / "app.log"
    path.write_text("a long first line\nsecond\n")
    committed = {}
    run(config_for(path), committed)
    inode = os.stat(path).st_ino
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(b"x\n")
    assert os.stat(path).st_ino == inode
    with caplog.at_level(logging.WARNING):
        assert values(run(config_for(path), committed)) == ["x"]
    assert any("truncated" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)


def test_truncation_during_a_run(tmp_path, caplog):
    path = tmp_path / "app.log"
    path.write_text("one\ntwo\n")
    task = start_task(plan(config_for(path))[0])
    assert values(drain(task)) == ["one", "two"]
    with open(path, "r+b") as f:
        f.truncate(0)
    with open(path, "ab") as f:
        f.write(b"three\n")
    with caplog.at_level(logging.WARNING):
        assert values(drain(task)) == ["three"]
    task.stop()
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_position_beyond_end_of_file_restarts_at_zero(tmp_path, caplog):
    path = tmp_path / "app.log"
    path.write_text("1\n2\n")
    committed = {canonical({"filename": str(path)}): {"position": 100}}
    with caplog.at_level(logging.WARNING):
        assert values(run(config_for(path), committed)) == ["1", "2"]
    assert any("100 bytes read" in r.getMessage() for r in caplog.records)


def test_invalid_committed_position_fails_with_what_to_do(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("1\n")
    committed = {canonical({"filename": str(path)}): {"position": "x"}}
    with pytest.raises(ConnectException, match="delete or correct the committed offset"):
        run(config_for(path), committed)


def test_rotated_file_with_a_partial_line_is_finished_when_the_writer_completes_it(tmp_path):
    """A writer still appending to a file renamed away: its partial last line is not cut in two."""
    path, old = tmp_path / "a.log", tmp_path / "a.log.1"
    path.write_bytes(b"l1\nl2\npart")
    committed = {}
    task = start_task(plan(config_for(path))[0], committed)
    first = drain(task, committed)
    assert values(first) == ["l1", "l2"]
    os.rename(path, old)  # mv a.log a.log.1; the writer keeps its descriptor
    path.write_bytes(b"new1\n")
    assert values(drain(task, committed)) == []  # "part" may still grow: held, and the new file waits
    task.stop()
    key = canonical({"filename": str(path)})
    assert committed[key]["position"] == 6 and committed[key]["inode"] == os.stat(old).st_ino
    with open(old, "ab") as f:
        f.write(b"ial\nl3\n")  # the writer completes its line in the old inode
    second = run(config_for(path), committed)
    assert values(first + second) == ["l1", "l2", "partial", "l3", "new1"]
    assert values(run(config_for(path), committed)) == []


def test_rotated_partial_line_completed_during_the_same_run(tmp_path):
    path, old = tmp_path / "a.log", tmp_path / "a.log.1"
    path.write_bytes(b"l1\npart")
    task = start_task(plan(config_for(path))[0])
    assert values(drain(task)) == ["l1"]
    os.rename(path, old)
    path.write_bytes(b"new1\n")
    assert values(drain(task)) == []
    with open(old, "ab") as f:
        f.write(b"ial\nl3\n")
    assert values(drain(task)) == ["partial", "l3", "new1"]
    task.stop()


def test_rotated_partial_line_is_emitted_once_the_grace_period_is_over(tmp_path):
    path, old = tmp_path / "a.log", tmp_path / "a.log.1"
    path.write_bytes(b"l1\npart")
    task = start_task(plan(config_for(path, **{"rotation.grace.ms": 60_000}))[0])
    assert values(drain(task)) == ["l1"]
    os.rename(path, old)
    path.write_bytes(b"new1\n")
    age(old, 30)
    assert values(drain(task)) == []  # written 30 s ago: within the 60 s grace period
    age(old, 90)
    rest = drain(task)
    task.stop()
    assert values(rest) == ["part", "new1"]
    assert rest[0].source_offset["position"] == 7 and rest[0].source_offset["inode"] == os.stat(old).st_ino


def test_rotated_partial_line_between_runs_is_held_until_the_grace_period_is_over(tmp_path):
    path, old = tmp_path / "a.log", tmp_path / "a.log.1"
    path.write_bytes(b"l1\n")
    committed = {}
    assert values(run(config_for(path), committed)) == ["l1"]
    with open(path, "ab") as f:
        f.write(b"l2\npart")
    os.rename(path, old)
    path.write_bytes(b"new1\n")
    assert values(run(config_for(path), committed)) == ["l2"]  # "part" and the new file wait
    assert values(run(config_for(path), committed)) == []
    age(old)
    assert values(run(config_for(path), committed)) == ["part", "new1"]
    assert values(run(config_for(path), committed)) == []


# ------------------------------------------------------------------ open files


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")
def test_files_are_opened_when_read_closed_at_end_and_bounded(tmp_path):
    for i in range(20):
        (tmp_path / f"f{i:02d}.log").write_text(f"{i}a\n{i}b\n{i}c\n")
    base = _open_fds()
    task = start_task(plan(config_for(tmp_path / "*.log", **{"batch.size": 1, "max.open.files": 4}))[0])
    assert _open_fds() == base  # nothing opened before it is read
    records, most = [], 0
    while (batch := poll(task)) is not None:  # one line per poll leaves files open half-read
        records += batch
        most = max(most, _open_fds() - base)
    assert 0 < most <= 4
    assert _open_fds() == base  # every file was read to its end and closed
    task.stop()
    assert sorted(values(records)) == sorted(f"{i}{c}" for i in range(20) for c in "abc")
    for i in range(20):  # each file still in order despite being closed and reopened
        assert [v for v in values(records) if v[:-1] == str(i)] == [f"{i}a", f"{i}b", f"{i}c"]


def test_file_closed_half_read_and_rotated_meanwhile_loses_and_duplicates_nothing(tmp_path):
    names = [tmp_path / f"{n}.log" for n in "abc"]
    for p in names:
        p.write_text("".join(f"{p.stem}{j}\n" for j in range(3)))
    task = start_task(plan(config_for(tmp_path / "*.log", **{"batch.size": 1, "max.open.files": 2}))[0])
    records = [r for _ in range(3) for r in poll(task)]  # a0, b0, c0: a.log evicted for c.log
    os.rename(names[0], tmp_path / "a.log.1")
    with open(tmp_path / "a.log.1", "a") as f:
        f.write("a3\n")
    names[0].write_text("a-new\n")
    records += drain(task)
    task.stop()
    got = values(records)
    assert [v for v in got if v.startswith("a")] == ["a0", "a1", "a2", "a3", "a-new"]
    assert sorted(got) == sorted(["a0", "a1", "a2", "a3", "a-new"] + [f"{n}{j}" for n in "bc" for j in range(3)])


_LOW_LIMIT_SCRIPT = textwrap.dedent("""
    import json, os, resource, sys
    from airflow_copycat.connect import OffsetStorageReader, SourceTaskContext
    from airflow_copycat.connect.assignment import canonical
    from airflow_copycat.connectors.filestream import FileStreamSourceConnector, FileStreamSourceTask

    directory, limit, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    config = {"file": os.path.join(directory, "*.log"), "topic": "t", **extra}
    connector = FileStreamSourceConnector()
    connector.start(FileStreamSourceConnector.parse_config(config))
    [task_config] = connector.task_configs(1)
    if limit == "none":  # no descriptor can be opened at all
        fd = os.open(os.devnull, os.O_RDONLY)
        os.close(fd)
        limit = fd
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    class Reader(OffsetStorageReader):
        def __init__(self, committed):
            self.committed = committed
        def offsets(self, partitions):
            return {canonical(p): self.committed[canonical(p)] for p in partitions if canonical(p) in self.committed}

    committed, runs = {}, []
    try:
        for run in range(2):
            if run:
                for name in sorted(os.listdir(directory)):
                    with open(os.path.join(directory, name), "a") as f:
                        f.write(name + "-more\\n")
            task = FileStreamSourceTask()
            task.initialize(SourceTaskContext(task_config, Reader(committed)))
            task.start(task_config)
            lines = []
            try:
                while (batch := task.poll()) is not None:
                    for item in batch:
                        records = item.to_records() if hasattr(item, "to_records") else [item]
                        lines += [r.value for r in records]
                        committed[canonical(item.source_partition)] = item.source_offset
            finally:
                task.stop()
            runs.append(lines)
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
    else:
        print(json.dumps({"runs": runs}))
""")


def _run_with_fd_limit(directory, limit, extra=None) -> dict:
    """Run the source in a child process whose soft RLIMIT_NOFILE is ``limit``."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _LOW_LIMIT_SCRIPT, str(directory), str(limit),
                           json.dumps(extra or {})], capture_output=True, text=True, cwd=root, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("batch_size", [2000, 1])
def test_many_more_files_than_the_open_file_limit(tmp_path, batch_size):
    pytest.importorskip("resource")
    for i in range(300):
        (tmp_path / f"f{i:03d}.log").write_text("".join(f"{i}-{j}\n" for j in range(3)))
    result = _run_with_fd_limit(tmp_path, 128, {"batch.size": batch_size})
    assert "error" not in result, result
    first, second = result["runs"]
    assert sorted(first) == sorted(f"{i}-{j}" for i in range(300) for j in range(3))
    assert sorted(second) == sorted(f"f{i:03d}.log-more" for i in range(300))


def test_running_out_of_descriptors_names_the_limit(tmp_path):
    pytest.importorskip("resource")
    (tmp_path / "a.log").write_text("x\n")
    result = _run_with_fd_limit(tmp_path, "none")
    error = result.get("error", "")
    assert "too many open files" in error and "ulimit -n" in error and "max.open.files" in error, result
    assert "check that the file is readable" not in error


# ------------------------------------------------------------------ partitions handed out


def test_source_partition_is_one_unchanged_object_per_file(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.log").write_text("".join(f"{name}{j}\n" for j in range(5)))
    (tmp_path / "b.log").write_bytes(b"b0\nbad \xff\nb2\n")
    contexts = []

    class Recording(RecordingContext):
        def __init__(self, config, reader):
            super().__init__(config, reader)
            contexts.append(self)

    tc = plan(config_for(tmp_path / "*.log", **{"batch.size": 2}))[0]
    task = start_task(tc, context_class=Recording)
    records = drain(task)
    task.stop()
    by_file = {}
    for r in records:
        by_file.setdefault(r.source_partition["filename"], set()).add(id(r.source_partition))
    assert all(len(ids) == 1 for ids in by_file.values()) and len(by_file) == 2
    [error] = contexts[0].errors
    b_records = [r for r in records if r.source_partition["filename"].endswith("b.log")]
    assert error["partition"] is b_records[0].source_partition
    for r in records:
        assert r.source_partition == {"filename": r.source_partition["filename"]}


# ------------------------------------------------------------------ undecodable lines


def test_undecodable_line_fails_by_default_naming_file_and_bytes(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"ok\nbad \xff here\nfine\n")
    with pytest.raises(ConnectException) as info:
        run(config_for(path))
    message = str(info.value)
    assert str(path) in message and "bytes 3..14" in message and "byte 7" in message
    assert "errors.tolerance" in message


def test_undecodable_line_is_reported_and_skipped_when_tolerated(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"ok\nbad \xff here\r\nfine\n")
    contexts = []

    class Recording(RecordingContext):
        def __init__(self, config, reader):
            super().__init__(config, reader)
            contexts.append(self)

    records = run(config_for(path), context_class=Recording)
    assert values(records) == ["ok", "fine"]
    [error] = contexts[0].errors
    assert error["location"] == f"{path}, bytes 3..15"
    assert error["raw"] == b"bad \xff here\r"
    assert error["partition"] == {"filename": str(path)}
    assert error["offset"]["position"] == 15
    assert "utf-8" in str(error["error"])


# ------------------------------------------------------------------ configuration


def test_config_validation_lists_every_problem():
    with pytest.raises(ConfigException) as info:
        FileStreamSourceConnector.parse_config({"batch.size": "0", "encoding": "utf-16", "fingerprint.bytes": "x"})
    keys = sorted(p.key for p in info.value.problems)
    assert keys == ["batch.size", "encoding", "file", "fingerprint.bytes", "topic"]
    assert "standard input is not supported" in str(info.value)


def test_validate_reports_cross_key_problems(tmp_path):
    problems = FileStreamSourceConnector().validate({"file": "", "files": [], "topic": ""})
    assert sorted(p.key for p in problems) == ["file", "topic"]
    problems = FileStreamSourceConnector().validate({"file": str(tmp_path), "topic": "t"})
    assert [p.key for p in problems] == ["file"] and "is a directory" in problems[0].message
    assert FileStreamSourceConnector().validate({"files": [str(tmp_path / "*.nothing")], "topic": "t"}) == []


def test_config_def_documents_every_key():
    rows = FileStreamSourceConnector.config_def.describe()
    assert {r["name"] for r in rows} >= {"file", "files", "topic", "batch.size", "encoding", "rotation.grace.ms",
                                         "max.open.files"}
    assert all(r["doc"] for r in rows)
    assert next(r for r in rows if r["name"] == "batch.size")["default"] == 2000
    assert next(r for r in rows if r["name"] == "rotation.grace.ms")["default"] == 5000
    assert next(r for r in rows if r["name"] == "max.open.files")["default"] == 64
