"""FileStreamSink against a real file: one line per record value, JSON for structured values."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest

from airflow_copycat.connect import (
    ConfigException,
    ConnectException,
    Decimal,
    Schema,
    SchemaBuilder,
    SinkRecord,
    SinkTaskContext,
    Struct,
)
from airflow_copycat.connectors.filestream import FileStreamSinkConnector, FileStreamSinkTask


def start_sink(config: dict, assignment=(("t", 0),)) -> FileStreamSinkTask:
    connector = FileStreamSinkConnector()
    connector.start(FileStreamSinkConnector.parse_config(config))
    [task_config] = connector.task_configs(1)
    task = FileStreamSinkTask()
    task.initialize(SinkTaskContext(task_config, list(assignment)))
    task.start(task_config)
    task.open(list(assignment))
    return task


def records(*values, topic="t", partition=0, first_offset=0):
    return [SinkRecord(topic=topic, kafka_partition=partition, value=v, kafka_offset=first_offset + i)
            for i, v in enumerate(values)]


def test_lines_are_appended_one_per_record(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("already here\n")
    task = start_sink({"file": str(path), "topics": "t"})
    task.put(records("a", "b"))
    task.put(records("c", first_offset=2))
    committed = task.pre_commit({("t", 0): 3}, final=True)
    task.close([("t", 0)])
    task.stop()
    task.stop()  # stop twice is fine
    assert committed == {("t", 0): 3}
    assert path.read_text() == "already here\na\nb\nc\n"


def test_values_are_written_like_kafka_connect_and_structured_ones_as_json(tmp_path):
    path = tmp_path / "out.txt"
    schema = (SchemaBuilder.struct().name("Order")
              .field("id", Schema.INT64)
              .field("day", Schema.DATE)
              .field("amount", Decimal.schema(2))
              .build())
    order = Struct(schema, {"id": 7, "day": dt.date(2024, 1, 2), "amount": decimal.Decimal("1.50")})
    task = start_sink({"file": str(path), "topics.regex": "t.*"})
    task.put(records("plain", None, True, 42, 1.5, {"a": 1, "b": ["x", None], "é": "ü"}, [1, 2], order, b"raw\x01"))
    task.flush({("t", 0): 9})
    task.stop()
    lines = path.read_bytes().split(b"\n")
    assert lines[:5] == [b"plain", b"null", b"true", b"42", b"1.5"]
    assert json.loads(lines[5]) == {"a": 1, "b": ["x", None], "é": "ü"}
    assert lines[5] == '{"a":1,"b":["x",null],"é":"ü"}'.encode()
    assert lines[6] == b"[1,2]"
    assert json.loads(lines[7]) == {"id": 7, "day": "2024-01-02", "amount": "1.50"}
    assert lines[8:] == [b"raw\x01", b""]


def test_two_tasks_append_to_the_same_file_without_mixing_lines(tmp_path):
    path = tmp_path / "out.txt"
    a = start_sink({"file": str(path), "topics": "t"}, assignment=[("t", 0)])
    b = start_sink({"file": str(path), "topics": "t"}, assignment=[("t", 1)])
    for i in range(50):
        a.put(records(f"a{i}" * 100))
        b.put(records(f"b{i}" * 100, partition=1))
    for task in (a, b):
        task.flush({})
        task.stop()
    lines = path.read_text().splitlines()
    assert len(lines) == 100
    assert all(line == line[: len(line) // 100] * 100 for line in lines)


def test_task_configs_are_copies_for_max_tasks(tmp_path):
    connector = FileStreamSinkConnector()
    connector.start(FileStreamSinkConnector.parse_config({"file": str(tmp_path / "o"), "topics": "a,b"}))
    configs = connector.task_configs(3)
    assert len(configs) == 3 and all(c["file"] == str(tmp_path / "o") and c["topics"] == "a,b" for c in configs)


def test_missing_directory_fails_at_start_naming_the_file(tmp_path):
    path = tmp_path / "nope" / "out.txt"
    with pytest.raises(ConnectException, match=f"{path}.*directory exists"):
        start_sink({"file": str(path), "topics": "t"})


def test_value_that_cannot_be_encoded_names_the_record(tmp_path):
    task = start_sink({"file": str(tmp_path / "o"), "topics": "t", "encoding": "ascii"})
    with pytest.raises(ConnectException, match=r"t-0@0.*ascii"):
        task.put(records("ünicode"))
    task.stop()


def test_config_validation_lists_every_problem(tmp_path):
    with pytest.raises(ConfigException) as info:
        FileStreamSinkConnector.parse_config({"topics.regex": "(", "encoding": "nope"})
    assert sorted(p.key for p in info.value.problems) == ["encoding", "file", "topics.regex"]
    with pytest.raises(ConfigException) as info:
        FileStreamSinkConnector.parse_config({"file": str(tmp_path), "topics": "a", "topics.regex": "b"})
    assert sorted(p.key for p in info.value.problems) == ["file", "topics.regex"]
    with pytest.raises(ConfigException, match="set 'topics'"):
        FileStreamSinkConnector.parse_config({"file": str(tmp_path / "o")})
    assert all(row["doc"] for row in FileStreamSinkConnector.config_def.describe())
