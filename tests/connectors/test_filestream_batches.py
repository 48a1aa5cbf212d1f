"""FileStreamSource: its batches mean exactly its records (a differential test over generated files).

The same files, appended to between polls in the same way, are read once by a task
returning batches (the default) and once by a task returning records; every poll must
give the same records (topic, value, source partition, source offset, in order; a batch
read through ``SourceBatch.to_records()``), the same offsets to commit without a line, and
the same reported errors (message, location, raw bytes, offset) at the same places between
them. Chunks are made small (and the fingerprint short) so that lines straddle chunk
boundaries and the fingerprint widens while lines are read.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_copycat.connect import OffsetStorageReader, SourceBatch, SourceTaskContext
from airflow_copycat.connect.records import next_sequence
from airflow_copycat.connectors.filestream import FileStreamSourceConnector, FileStreamSourceTask
from airflow_copycat.connectors.filestream import files as filestream_files
from airflow_copycat.connectors.filestream.lines import split_lines


class NoOffsets(OffsetStorageReader):
    def offsets(self, partitions):
        return {}


class Recording(SourceTaskContext):
    """errors.tolerance=all: keep each reported error with the sequence number of its report."""

    def __init__(self, config):
        super().__init__(config, NoOffsets())
        self.events = []

    def report_error(self, error, *, source_partition, source_offset, raw=None, location=""):
        self.events.append((next_sequence(), ("error", str(error), location, raw, source_partition, source_offset)))


VALID = [b"a", b"xyz", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b" ", b"\r", b"\r\n", b"\n", b"\n\n",
         b"\xef\xbb\xbf", b"0123456789" * 3]
INVALID = [b"\xff", b"\xe2\x82", b"\xed\xa0\x80", b"\xc3"]  # not utf-8 (nor ascii); every byte is latin-1
content = st.one_of(st.lists(st.sampled_from(VALID), max_size=40),
                    st.lists(st.sampled_from(VALID + INVALID), max_size=40)).map(b"".join)


def read_all(paths, writes, *, batches: bool, encoding: str, batch_size: int) -> list:
    """Poll until caught up, applying ``writes[i]`` (bytes per file) before poll ``i``; the
    events of every poll, in the order the task made them."""
    config = {"files": ",".join(str(p) for p in paths), "topic": "t", "batch.size": str(batch_size),
              "encoding": encoding, "fingerprint.bytes": "8"}
    connector = FileStreamSourceConnector()
    connector.start(FileStreamSourceConnector.parse_config(config))
    [task_config] = connector.task_configs(1)
    task = FileStreamSourceTask()
    task.batches = batches
    context = Recording(task_config)
    task.initialize(context)
    task.start(task_config)
    polls, idle = [], 0
    try:
        for i in range(200):
            for path, data in zip(paths, writes[i] if i < len(writes) else ()):
                with open(path, "ab") as f:
                    f.write(data)
            out = task.poll()
            events = context.events
            context.events = []
            for item in out or ():
                if isinstance(item, SourceBatch):
                    assert item.data.schema.field("value").type in (pa.string(), pa.large_string())
                    rows = [("record", r.topic, r.value, r.source_partition, r.source_offset)
                            for r in item.to_records()] or [("offset", item.source_partition, item.source_offset)]
                    events.append((item.sequence, tuple(rows)))
                else:
                    events.append((item.sequence, (("record", item.topic, item.value, item.source_partition,
                                                     item.source_offset),)))
            flat = []
            for _, e in sorted(events, key=lambda e: e[0]):
                flat += list(e) if isinstance(e[0], tuple) else [e]
            polls.append([_portable(e, paths) for e in flat])
            if out is None:
                idle += 1
                if i >= len(writes) and idle:
                    break
    finally:
        task.stop()
    return polls


def _portable(event: tuple, paths) -> tuple:
    """``event`` without what differs between two copies of the same files: the directory, inodes."""
    inodes = {os.stat(p).st_ino: p.name for p in paths}
    directory = str(paths[0].parent) + os.sep

    def plain(v):
        if isinstance(v, dict):
            return {k: (inodes[x] if k == "inode" else plain(x)) for k, x in v.items()}
        return v.replace(directory, "") if isinstance(v, str) else v

    return tuple(plain(v) for v in event)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.lists(content, min_size=2, max_size=2), appends=st.lists(st.lists(content, min_size=2, max_size=2),
                                                                         max_size=4),
       chunk=st.sampled_from([3, 7, 64, 64 * 1024]), batch_size=st.sampled_from([1, 3, 1000]),
       encoding=st.sampled_from(["utf-8", "latin-1", "ascii"]))
# a file shorter than the fingerprint, still open (batch.size reached) when it grows: the
# fingerprint widens between two lines of one read
@example(first=[b"\n\n\n", b"x\n"], appends=[[b"abcdefghij\nk\n", b""]], chunk=3, batch_size=1, encoding="utf-8")
def test_batches_mean_the_records(tmp_path_factory, monkeypatch, first, appends, chunk, batch_size, encoding):
    monkeypatch.setattr(filestream_files, "CHUNK", chunk)
    results = []
    for batches in (False, True):
        directory = tmp_path_factory.mktemp("files")
        paths = [directory / "a.log", directory / "b.log"]
        for path, data in zip(paths, first):
            path.write_bytes(data)
        results.append(read_all(paths, appends, batches=batches, encoding=encoding, batch_size=batch_size))
    records, batches = results
    assert batches == records


def _started_task(config: dict) -> FileStreamSourceTask:
    """A FileStreamSource task of ``config`` (one task), started without committed offsets."""
    connector = FileStreamSourceConnector()
    connector.start(FileStreamSourceConnector.parse_config(config))
    [task_config] = connector.task_configs(1)
    task = FileStreamSourceTask()
    task.initialize(SourceTaskContext(task_config, NoOffsets()))
    task.start(task_config)
    return task


def test_batch_of_a_poll_is_one_per_file_with_lazy_offsets(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"".join(b"line %d\r\n" % i for i in range(1000)) + b"partial")
    task = _started_task({"file": str(path), "topic": "t", "batch.size": "600"})
    [first] = task.poll()
    [second] = task.poll()
    assert task.poll() is None
    task.stop()
    assert (len(first), len(second)) == (600, 400)
    assert first.data.column("value").to_pylist()[:2] == ["line 0", "line 1"]
    assert first.source_offset["position"] == sum(len(b"line %d\r\n" % i) for i in range(600))
    assert second.row_offsets[-1] == second.source_offset and second.offset_of(0)["position"] == \
        first.source_offset["position"] + len(b"line 600\r\n")


def test_a_batch_dropped_frees_its_lines_at_once(tmp_path):
    """A poll's batch holds the bytes it read (its lazy offsets come from them): once the framework drops it,
    reference counting frees it, without waiting for the garbage collector (which a running task calls
    rarely): no reference cycle."""
    import gc
    import weakref

    path = tmp_path / "a.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(100)))
    task = _started_task({"file": str(path), "topic": "t"})
    [batch] = task.poll()
    task.stop()
    assert batch.row_offsets[99]["position"] == path.stat().st_size
    offsets = weakref.ref(batch.row_offsets)
    gc.disable()
    try:
        del batch
        assert offsets() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("data", [b"\n", b"a\n", b"\r\n", b"a\r\r\n\r\n", b"x\ry\n\n\xc3\xa9\r\n", b"\r\r\n"])
def test_split_lines_drops_the_newline_and_one_carriage_return(data):
    expected = [(raw[:-1] if raw.endswith(b"\r") else raw).decode() for raw in data.split(b"\n")[:-1]]
    assert split_lines(data).to_pylist() == expected
