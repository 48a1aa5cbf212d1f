"""Files sink against real files: naming, formats, rotation, partitioners, recovery, crashes.

No Kafka here: the tests drive the connector and task as the sink runtime does
(parse, start, task_configs, initialize, start, open, take the rewinds, put,
pre_commit, final pre_commit) with records built in the test. The crash tests
run the sink in a child process that SIGKILLs itself in the middle of the
commit protocol (tests/connectors/files_sink_crash_helper.py), then rerun it
here and read every published file back.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from airflow_copycat.connect import (ConfigException, ConnectException, DataException, Decimal, Password, Schema,
                                     SchemaBuilder, SinkRecord, SinkTaskContext, Struct, Time)
from airflow_copycat.connect.connector import SinkConnector
from airflow_copycat.connectors.files import FilesSinkConnector, FilesSinkTask
from airflow_copycat.connectors.files.config import store_location, validate_config
from airflow_copycat.connectors.files.timeformat import compile_pattern

HELPER = Path(__file__).with_name("files_sink_crash_helper.py")
TP = ("t", 0)
BASE_TS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def config(tmp_path, **over) -> dict:
    raw = {"topics": "t", "store.url": str(tmp_path / "store"), "format.class": "json", "flush.size": "3"}
    raw.update({k.replace("_", "."): v for k, v in over.items()})
    return raw


def start(raw: dict, assignment=(TP,)):
    """Plan with the connector, start one task on its task config, open the assignment.
    Returns ``(task, rewinds)``."""
    connector = FilesSinkConnector()
    connector.start(FilesSinkConnector.parse_config(raw))
    task_config = connector.task_configs(1)[0]
    task = FilesSinkTask()
    context = SinkTaskContext(task_config, list(assignment))
    task.initialize(context)
    task.start(task_config)
    task.open(list(assignment))
    return task, context.take_rewinds()


def rec(offset, value, *, schema=None, ts=None, topic="t", partition=0) -> SinkRecord:
    return SinkRecord(topic=topic, kafka_partition=partition, value_schema=schema, value=value,
                      timestamp=BASE_TS + offset * 1000 if ts is None else ts, kafka_offset=offset)


def run(raw, records, *, chunk=None, assignment=(TP,)):
    """One bounded run: put ``records`` (in chunks, each followed by a non-final
    pre_commit), then the final pre_commit. Returns ``(task, committed)``."""
    task, _ = start(raw, assignment)
    chunk = chunk or max(1, len(records))
    for i in range(0, len(records), chunk):
        part = records[i:i + chunk]
        task.put(part)
        task.pre_commit({(r.topic, r.kafka_partition): r.kafka_offset + 1 for r in part})
    end = {}
    for r in records:
        end[(r.topic, r.kafka_partition)] = r.kafka_offset + 1
    committed = task.pre_commit(end, final=True)
    task.close(list(assignment))
    task.stop()
    return task, committed


def root(tmp_path) -> Path:
    return tmp_path / "store" / "topics"


def published(tmp_path) -> list[str]:
    """Published files, relative to <store>/topics, without the _copycat control tree."""
    base = root(tmp_path)
    return sorted(str(p.relative_to(base)) for p in base.rglob("*")
                  if p.is_file() and not str(p.relative_to(base)).startswith("_copycat"))


def staged_files(tmp_path) -> list[Path]:
    staging = root(tmp_path) / "_copycat" / "staging"
    return [p for p in staging.rglob("*") if p.is_file()] if staging.exists() else []


def json_lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def all_json_ids(tmp_path) -> list[int]:
    ids = []
    for rel in published(tmp_path):
        ids += [doc["id"] for doc in json_lines(root(tmp_path) / rel)]
    return ids


# ---------------------------------------------------------------- naming, JSON, batches

def test_json_files_named_like_confluent_with_one_document_per_line(tmp_path):
    records = [rec(o, {"id": o, "name": f"n{o}"}) for o in range(7)]
    task, committed = run(config(tmp_path), records)

    assert committed == {TP: 7}
    assert published(tmp_path) == [
        "t/partition=0/t+0+0000000000.json",
        "t/partition=0/t+0+0000000003.json",
        "t/partition=0/t+0+0000000006.json",
    ]
    first = root(tmp_path) / "t/partition=0/t+0+0000000000.json"
    assert first.read_bytes().endswith(b"\n")
    assert json_lines(first) == [{"id": 0, "name": "n0"}, {"id": 1, "name": "n1"}, {"id": 2, "name": "n2"}]
    marker = json.loads((root(tmp_path) / "_copycat/offsets/t+0.json").read_text())
    attempt = marker.pop("attempt")
    assert isinstance(attempt, str) and attempt  # the attempt that committed (fencing)
    assert marker == {"topic": "t", "partition": 0, "offset": 7, "files": ["t/partition=0/t+0+0000000006.json"]}
    assert not (root(tmp_path) / "_copycat/wal/t+0.json").exists()
    assert task.metrics["records_written"] == 7 and task.metrics["files_published"] == 3


def test_json_struct_values_are_written_without_schema_envelope(tmp_path):
    schema = SchemaBuilder.struct().field("id", Schema.INT64).field("note", Schema.OPTIONAL_STRING).build()
    records = [rec(o, Struct(schema, {"id": o, "note": None if o % 2 else "x"}), schema=schema) for o in range(3)]
    run(config(tmp_path), records)
    docs = json_lines(root(tmp_path) / "t/partition=0/t+0+0000000000.json")
    assert docs == [{"id": 0, "note": "x"}, {"id": 1, "note": None}, {"id": 2, "note": "x"}]


def test_pad_width_and_topics_dir_are_configurable(tmp_path):
    run(config(tmp_path, topics_dir="lake/raw", **{"filename.offset.zero.pad.width": "4"}),
        [rec(o, {"id": o}) for o in range(2)])
    assert (tmp_path / "store/lake/raw/t/partition=0/t+0+0000.json").exists()
    assert (tmp_path / "store/lake/raw/_copycat/offsets/t+0.json").exists()


def test_gzip_json_is_byte_identical_across_runs(tmp_path):
    import gzip

    records = [rec(o, {"id": o}) for o in range(2)]
    for name in ("a", "b"):
        run(config(tmp_path / name, **{"s3.compression.type": "gzip"}), records)
    rel = "t/partition=0/t+0+0000000000.json.gz"
    assert published(tmp_path / "a") == [rel]
    data = (root(tmp_path / "a") / rel).read_bytes()
    assert data == (root(tmp_path / "b") / rel).read_bytes()
    assert gzip.decompress(data) == b'{"id":0}\n{"id":1}\n'


def test_pre_commit_returns_only_what_was_published(tmp_path):
    task, rewinds = start(config(tmp_path))
    assert rewinds == {}
    task.put([rec(o, {"id": o}) for o in range(2)])
    assert task.pre_commit({TP: 2}) == {}  # batch still open: nothing durable, nothing to commit
    assert published(tmp_path) == []
    task.put([rec(o, {"id": o}) for o in range(2, 5)])
    assert task.pre_commit({TP: 5}) == {TP: 3}  # the batch 0..2 closed at flush.size
    assert published(tmp_path) == ["t/partition=0/t+0+0000000000.json"]
    assert task.pre_commit({TP: 5}, final=True) == {TP: 5}
    assert published(tmp_path)[-1] == "t/partition=0/t+0+0000000003.json"
    assert staged_files(tmp_path) == []


def test_flush_size_counts_records_of_the_whole_partition_batch(tmp_path):
    # Confluent's rule: all files of a topic-partition's batch close together, so one offset commits them.
    raw = config(tmp_path, partitioner_class="field", **{"partition.field.name": "k", "flush.size": "4"})
    records = [rec(o, {"id": o, "k": "a" if o % 2 == 0 else "b"}) for o in range(6)]
    _, committed = run(raw, records)
    assert committed == {TP: 6}
    assert published(tmp_path) == [
        "t/k=a/t+0+0000000000.json", "t/k=a/t+0+0000000004.json",
        "t/k=b/t+0+0000000001.json", "t/k=b/t+0+0000000005.json",
    ]
    assert [d["id"] for d in json_lines(root(tmp_path) / "t/k=b/t+0+0000000001.json")] == [1, 3]


def test_several_partitions_commit_independently(tmp_path):
    raw = config(tmp_path, topics="t,u")
    assignment = (("t", 0), ("t", 1), ("u", 0))
    records = [rec(o, {"id": o}, topic=t, partition=p) for (t, p) in assignment for o in range(4)]
    _, committed = run(raw, records, assignment=assignment)
    assert committed == {("t", 0): 4, ("t", 1): 4, ("u", 0): 4}
    assert "t/partition=1/t+1+0000000003.json" in published(tmp_path)
    assert "u/partition=0/u+0+0000000000.json" in published(tmp_path)
    task, rewinds = start(raw, assignment)
    assert rewinds == {("t", 0): 4, ("t", 1): 4, ("u", 0): 4}


# ---------------------------------------------------------------- Parquet

ROW = SchemaBuilder.struct().name("Row") \
    .field("id", Schema.INT64) \
    .field("small", Schema.INT8) \
    .field("note", Schema.OPTIONAL_STRING) \
    .field("ok", Schema.BOOLEAN) \
    .field("score", Schema.FLOAT64) \
    .field("raw", Schema.OPTIONAL_BYTES) \
    .field("day", Schema.DATE) \
    .field("at", Time.builder().build()) \
    .field("ts", Schema.TIMESTAMP) \
    .field("price", Decimal.builder(2).parameter("connect.decimal.precision", "10").build()) \
    .field("big", Decimal.builder(3).optional().build()) \
    .field("tags", SchemaBuilder.array(Schema.STRING).build()) \
    .field("attrs", SchemaBuilder.map(Schema.STRING, Schema.INT32).optional().build()) \
    .field("inner", SchemaBuilder.struct().field("x", Schema.INT32).optional().build()) \
    .build()


def _row(o):
    inner = Struct(ROW.field("inner").schema, {"x": o}) if o % 2 == 0 else None
    return Struct(ROW, {
        "id": o, "small": o, "note": None if o == 1 else f"n{o}", "ok": o % 2 == 0, "score": o / 2,
        "raw": bytes([o]), "day": dt.date(2024, 5, 1 + o), "at": dt.time(13, 5, o, 42000),
        "ts": dt.datetime(2024, 5, 1, 12, 0, o, 123000, tzinfo=dt.timezone.utc),
        "price": decimal.Decimal(f"{o}.25"), "big": decimal.Decimal("-12345.678") if o == 0 else None,
        "tags": ["a", str(o)], "attrs": {"k": o}, "inner": inner,
    })


def test_parquet_columns_types_and_values_follow_the_value_schema(tmp_path):
    _, committed = run(config(tmp_path, format_class="parquet"), [rec(o, _row(o), schema=ROW) for o in range(3)])
    assert committed == {TP: 3}
    assert published(tmp_path) == ["t/partition=0/t+0+0000000000.snappy.parquet"]
    path = root(tmp_path) / published(tmp_path)[0]
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "SNAPPY"
    table = pq.read_table(path)
    s = table.schema
    assert s.field("id").type == pa.int64() and not s.field("id").nullable
    assert s.field("small").type == pa.int8()
    assert s.field("note").type == pa.string() and s.field("note").nullable
    assert s.field("raw").type == pa.binary()
    assert s.field("day").type == pa.date32()
    assert s.field("at").type == pa.time32("ms")
    assert s.field("ts").type == pa.timestamp("ms", tz="UTC")
    assert s.field("price").type == pa.decimal128(10, 2)
    assert s.field("big").type == pa.decimal128(38, 3)
    assert s.field("tags").type.value_type == pa.string()
    assert (s.field("attrs").type.key_type, s.field("attrs").type.item_type) == (pa.string(), pa.int32())
    assert s.field("inner").type == pa.struct([pa.field("x", pa.int32(), nullable=False)])
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [0, 1, 2]
    assert rows[1]["note"] is None and rows[2]["note"] == "n2"
    assert rows[2]["day"] == dt.date(2024, 5, 3)
    assert rows[2]["at"] == dt.time(13, 5, 2, 42000)
    assert rows[2]["ts"] == dt.datetime(2024, 5, 1, 12, 0, 2, 123000, tzinfo=dt.timezone.utc)
    assert rows[2]["price"] == decimal.Decimal("2.25")
    assert rows[0]["big"] == decimal.Decimal("-12345.678") and rows[1]["big"] is None
    assert rows[1]["tags"] == ["a", "1"] and rows[1]["attrs"] == [("k", 1)]
    assert rows[0]["inner"] == {"x": 0} and rows[1]["inner"] is None
    assert rows[0]["raw"] == b"\x00" and rows[0]["ok"] is True


def test_parquet_schemaless_and_primitive_values(tmp_path):
    records = [rec(0, {"id": 0, "a": "x"}), rec(1, {"id": 1, "b": 2.5}), rec(2, {"id": 2})]
    run(config(tmp_path, format_class="parquet"), records)
    table = pq.read_table(root(tmp_path) / "t/partition=0/t+0+0000000000.snappy.parquet")
    assert table.column_names == ["id", "a", "b"]  # every key of the file, not only the first record's
    assert table.to_pylist()[1] == {"id": 1, "a": None, "b": 2.5}

    other = tmp_path / "prim"
    run(config(other, format_class="parquet"), [rec(o, f"v{o}", schema=Schema.STRING) for o in range(2)])
    table = pq.read_table(root(other) / "t/partition=0/t+0+0000000000.snappy.parquet")
    assert table.schema == pa.schema([pa.field("value", pa.string(), nullable=False)])
    assert table.column("value").to_pylist() == ["v0", "v1"]


@pytest.mark.parametrize("format_class, codec, name", [
    ("io.confluent.connect.s3.format.parquet.ParquetFormat", "gzip", "t+0+0000000000.gz.parquet"),
    ("io.confluent.connect.hdfs.parquet.ParquetFormat", "snappy", "t+0+0000000000.parquet"),
    ("parquet", "none", "t+0+0000000000.parquet"),
    ("io.confluent.connect.hdfs.json.JsonFormat", "snappy", "t+0+0000000000.json"),
    ("io.confluent.connect.s3.format.json.JsonFormat", "snappy", "t+0+0000000000.json"),
])
def test_confluent_format_classes_and_extensions(tmp_path, format_class, codec, name):
    run(config(tmp_path, format_class=format_class, parquet_codec=codec), [rec(0, {"id": 0})])
    assert published(tmp_path) == [f"t/partition=0/{name}"]


def test_schema_change_starts_a_new_file(tmp_path):
    v1 = SchemaBuilder.struct().field("id", Schema.INT64).build()
    v2 = SchemaBuilder.struct().field("id", Schema.INT64).field("extra", Schema.OPTIONAL_STRING).build()
    records = [rec(0, Struct(v1, {"id": 0}), schema=v1), rec(1, Struct(v2, {"id": 1, "extra": "e"}), schema=v2),
               rec(2, Struct(v2, {"id": 2}), schema=v2)]
    _, committed = run(config(tmp_path, format_class="parquet", flush_size="10"), records)
    assert committed == {TP: 3}
    names = published(tmp_path)
    assert names == ["t/partition=0/t+0+0000000000.snappy.parquet", "t/partition=0/t+0+0000000001.snappy.parquet"]
    assert pq.read_table(root(tmp_path) / names[1]).column_names == ["id", "extra"]


def test_readers_never_see_staged_files(tmp_path):
    task, _ = start(config(tmp_path, format_class="parquet"))
    task.put([rec(o, {"id": o}) for o in range(3)])
    task.pre_commit({TP: 3})
    task.put([rec(o, {"id": o}) for o in range(3, 6)])  # batch 3..5 is now staged, not published
    assert staged_files(tmp_path)
    dataset = ds.dataset(str(root(tmp_path)), format="parquet", partitioning="hive")
    assert sorted(dataset.to_table().column("id").to_pylist()) == [0, 1, 2]
    task.pre_commit({TP: 6})
    dataset = ds.dataset(str(root(tmp_path)), format="parquet", partitioning="hive")
    assert sorted(dataset.to_table().column("id").to_pylist()) == [0, 1, 2, 3, 4, 5]


# ---------------------------------------------------------------- rotation by record time

def _timed(offsets_and_seconds):
    return [rec(o, {"id": o}, ts=BASE_TS + s * 1000) for o, s in offsets_and_seconds]


def test_rotate_interval_uses_record_time_and_reruns_write_the_same_files(tmp_path):
    # seconds per record; interval 10 s: batches start at 0 (0..9 s), then 12 s, then 30 s
    seconds = [0, 3, 9, 12, 15, 21, 30, 31, 32, 33]
    records = _timed(enumerate(seconds))
    raw_a = config(tmp_path / "a", **{"rotate.interval.ms": "10000", "flush.size": "100"})
    raw_b = config(tmp_path / "b", **{"rotate.interval.ms": "10000", "flush.size": "100"})
    run(raw_a, records)
    run(raw_b, records, chunk=1)  # other put sizes, a pre_commit after every record, later wall-clock
    a, b = published(tmp_path / "a"), published(tmp_path / "b")
    assert a == ["t/partition=0/t+0+0000000000.json", "t/partition=0/t+0+0000000003.json",
                 "t/partition=0/t+0+0000000006.json"]
    assert a == b
    for rel in a:
        assert (root(tmp_path / "a") / rel).read_bytes() == (root(tmp_path / "b") / rel).read_bytes()
    assert [d["id"] for d in json_lines(root(tmp_path / "a") / a[1])] == [3, 4, 5]


def test_rotation_needs_record_timestamps(tmp_path):
    task, _ = start(config(tmp_path, **{"rotate.interval.ms": "1000"}))
    with pytest.raises(DataException, match="no timestamp"):
        task.put([SinkRecord(topic="t", kafka_partition=0, value={"id": 0}, kafka_offset=0)])


# ---------------------------------------------------------------- partitioners

def test_field_partitioner_paths_for_structs_and_maps(tmp_path):
    schema = SchemaBuilder.struct().field("country", Schema.STRING).field("n", Schema.INT32) \
        .field("flag", Schema.BOOLEAN).build()
    records = [rec(0, Struct(schema, {"country": "NL", "n": 1, "flag": True}), schema=schema),
               rec(1, Struct(schema, {"country": "DE", "n": 2, "flag": False}), schema=schema),
               rec(2, Struct(schema, {"country": "NL", "n": 1, "flag": True}), schema=schema)]
    raw = config(tmp_path, partitioner_class="io.confluent.connect.storage.partitioner.FieldPartitioner",
                 **{"partition.field.name": "country,flag", "flush.size": "10"})
    run(raw, records)
    assert published(tmp_path) == ["t/country=DE/flag=false/t+0+0000000001.json",
                                   "t/country=NL/flag=true/t+0+0000000000.json"]
    assert [d["n"] for d in json_lines(root(tmp_path) / published(tmp_path)[1])] == [1, 1]

    nested = tmp_path / "nested"
    run(config(nested, partitioner_class="field", **{"partition.field.name": "meta.kind"}),
        [rec(0, {"meta": {"kind": "order"}})])
    assert published(nested) == ["t/meta.kind=order/t+0+0000000000.json"]


def test_field_partitioner_rejects_null_field(tmp_path):
    task, _ = start(config(tmp_path, partitioner_class="field", **{"partition.field.name": "k"}))
    with pytest.raises(DataException, match="'k' is null"):
        task.put([rec(0, {"k": None})])


def test_time_partitioners_paths(tmp_path):
    ts = int(dt.datetime(2024, 5, 1, 13, 45, tzinfo=dt.timezone.utc).timestamp() * 1000)
    hourly = tmp_path / "hourly"
    run(config(hourly, partitioner_class="io.confluent.connect.storage.partitioner.HourlyPartitioner"),
        [rec(7, {"id": 7}, ts=ts)])
    assert published(hourly) == ["t/year=2024/month=05/day=01/hour=13/t+0+0000000007.json"]

    daily = tmp_path / "daily"
    run(config(daily, partitioner_class="daily", timezone="America/New_York"), [rec(0, {"id": 0}, ts=ts)])
    assert published(daily) == ["t/year=2024/month=05/day=01/t+0+0000000000.json"]

    # TimeBasedPartitioner, RecordField extractor (ISO string), 6-hour buckets in Amsterdam (UTC+2 in May)
    field = tmp_path / "field"
    raw = config(field, partitioner_class="time", **{
        "path.format": "'dt'=YYYY-MM-dd/'h'=HH", "partition.duration.ms": str(6 * 3600 * 1000),
        "timezone": "Europe/Amsterdam", "timestamp.extractor": "RecordField", "timestamp.field": "event.at",
        "flush.size": "10"})
    records = [rec(0, {"id": 0, "event": {"at": "2024-05-01T13:45:00Z"}}, ts=0),   # 15:45 local -> 12h bucket
               rec(1, {"id": 1, "event": {"at": "2024-04-30T22:30:00Z"}}, ts=0),   # 00:30 local May 1 -> 00h
               rec(2, {"id": 2, "event": {"at": 1714571100000}}, ts=0)]            # 2024-05-01T13:45Z again
    run(raw, records)
    assert published(field) == ["t/dt=2024-05-01/h=00/t+0+0000000001.json",
                                "t/dt=2024-05-01/h=12/t+0+0000000000.json"]
    assert [d["id"] for d in json_lines(root(field) / published(field)[1])] == [0, 2]


def test_time_partitioner_with_rotation_closes_on_bucket_change(tmp_path):
    hour = 3_600_000
    start_ts = int(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
    records = [rec(o, {"id": o}, ts=start_ts + t) for o, t in [(0, 0), (1, hour), (2, 10), (3, hour + 5)]]
    run(config(tmp_path, partitioner_class="hourly", **{"rotate.interval.ms": str(10 * hour),
                                                        "flush.size": "100"}), records)
    # late record 2 goes back to hour 00: a new file there, as Confluent's S3 sink does
    assert published(tmp_path) == ["t/year=2024/month=05/day=01/hour=00/t+0+0000000000.json",
                                   "t/year=2024/month=05/day=01/hour=00/t+0+0000000002.json",
                                   "t/year=2024/month=05/day=01/hour=01/t+0+0000000001.json",
                                   "t/year=2024/month=05/day=01/hour=01/t+0+0000000003.json"]


def test_joda_patterns():
    when = dt.datetime(2024, 1, 7, 5, 4, 3, 21000, tzinfo=dt.timezone.utc)
    assert compile_pattern("'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH")(when) == "year=2024/month=01/day=07/hour=05"
    assert compile_pattern("yy-M-d H:m:s.SSS")(when) == "24-1-7 5:4:3.021"
    assert compile_pattern("MMM/MMMM/EEE/EEEE/D/ww/e/a/hh")(when) == "Jan/January/Sun/Sunday/7/01/7/AM/05"
    assert compile_pattern("'it''s' xxxx-'W'ww Z ZZ")(when) == "it's 2024-W01 +0000 +00:00"
    with pytest.raises(ValueError, match="not a Joda-Time pattern letter"):
        compile_pattern("year=YYYY")
    with pytest.raises(ValueError, match="English only"):
        compile_pattern("MMMM", "nl_NL")


# ---------------------------------------------------------------- tombstones

def test_tombstones_fail_by_default_and_are_counted_when_ignored(tmp_path):
    task, _ = start(config(tmp_path))
    with pytest.raises(DataException, match="behavior.on.null.values=ignore"):
        task.put([rec(0, None)])

    other = tmp_path / "ignore"
    records = [rec(0, {"id": 0}), rec(1, None), rec(2, {"id": 2}), rec(3, None)]
    task, committed = run(config(other, **{"behavior.on.null.values": "ignore"}), records)
    assert committed == {TP: 4}  # past the trailing tombstone too
    assert task.metrics["tombstones_skipped"] == 2
    assert [d["id"] for d in json_lines(root(other) / "t/partition=0/t+0+0000000000.json")] == [0, 2]


# ---------------------------------------------------------------- recovery from the destination

def test_new_task_resumes_from_the_offset_stored_in_the_destination(tmp_path):
    raw = config(tmp_path)
    _, committed = run(raw, [rec(o, {"id": o}) for o in range(5)])
    assert committed == {TP: 5}

    task, rewinds = start(raw)
    assert rewinds == {TP: 5}
    task.put([rec(o, {"id": o}) for o in range(3, 9)])  # the framework gave 3 and 4 again: skipped
    assert task.pre_commit({TP: 9}, final=True) == {TP: 9}
    assert task.metrics["records_skipped_committed"] == 2
    assert all_json_ids(tmp_path) == list(range(9))
    assert published(tmp_path)[-2:] == ["t/partition=0/t+0+0000000005.json", "t/partition=0/t+0+0000000008.json"]


def test_unpublished_batch_of_a_closed_task_is_written_again(tmp_path):
    raw = config(tmp_path)
    task, _ = start(raw)
    task.put([rec(o, {"id": o}) for o in range(5)])
    task.pre_commit({TP: 5})
    task.put([rec(5, {"id": 5})])  # batch 3..5 staged, never published: the task dies here
    task.close([TP])

    task, rewinds = start(raw)
    assert rewinds == {TP: 3}
    assert task.metrics["stale_staging_files_deleted"] == 1
    task.put([rec(o, {"id": o}) for o in range(3, 7)])
    task.pre_commit({TP: 7}, final=True)
    assert all_json_ids(tmp_path) == list(range(7))


def _helper(store, kill, span, chunk=5, *overrides):
    return subprocess.run([sys.executable, str(HELPER), str(store), kill, span, str(chunk), *overrides],
                          capture_output=True, text=True, timeout=120, cwd=str(HELPER.parents[2]))


@pytest.mark.parametrize("kill, expect", [
    # publish of the 2nd commit (files 3 and 6) dies after renaming file 3: the log finishes it
    ("rename:2", {"log": True, "published_before_rerun": 2, "resume": 9}),
    # dies after staging files 3 and 6, before the publish log: they are dropped and written again
    ("stage:3", {"log": False, "published_before_rerun": 1, "resume": 3}),
    # dies right after the log of the 2nd commit is in place, before any rename
    ("wal:2", {"log": True, "published_before_rerun": 1, "resume": 9}),
    # dies after renaming the 2nd commit's marker into place, before deleting the log
    ("marker:2", {"log": True, "published_before_rerun": 3, "resume": 9}),
])
def test_sigkill_in_the_commit_protocol_then_rerun_is_exactly_once(tmp_path, kill, expect):
    store = tmp_path / "store"
    # batches of 3 records, closed by record time (records are 1 s apart), not by flush.size
    overrides = ["rotate.interval.ms=2500", "flush.size=5"]
    crashed = _helper(store, kill, "0:15", 5, *overrides)
    assert crashed.returncode == -9, crashed.stderr
    assert (root(tmp_path) / "_copycat/wal/t+0.json").exists() == expect["log"]
    assert len(published(tmp_path)) == expect["published_before_rerun"]

    raw = config(tmp_path, **{"rotate.interval.ms": "2500", "flush.size": "5"})
    task, rewinds = start(raw)
    assert rewinds == {TP: expect["resume"]}
    assert not (root(tmp_path) / "_copycat/wal/t+0.json").exists()
    assert staged_files(tmp_path) == []
    for lo in range(rewinds[TP], 17, 4):
        task.put([rec(o, {"id": o, "ts": BASE_TS + o * 1000}) for o in range(lo, min(lo + 4, 17))])
        task.pre_commit({TP: min(lo + 4, 17)})
    assert task.pre_commit({TP: 17}, final=True) == {TP: 17}

    assert sorted(all_json_ids(tmp_path)) == list(range(17))  # each record exactly once
    assert len(all_json_ids(tmp_path)) == 17
    starts = [int(p.rsplit("+", 1)[1].split(".")[0]) for p in published(tmp_path)]
    assert starts == [0, 3, 6, 9, 12, 15]


def test_uninterrupted_subprocess_run_matches_a_crashed_and_rerun_one(tmp_path):
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    ok = _helper(clean / "store", "none", "0:15")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"t-0": 15}
    assert _helper(crashed / "store", "rename:2", "0:15").returncode == -9
    rerun = _helper(crashed / "store", "none", "0:15")
    assert rerun.returncode == 0, rerun.stderr
    assert published(clean) == published(crashed)
    for rel in published(clean):
        assert (root(clean) / rel).read_bytes() == (root(crashed) / rel).read_bytes()


# ---------------------------------------------------------------- overlapping attempts (fencing)

def marker_doc(tmp_path) -> dict:
    return json.loads((root(tmp_path) / "_copycat/offsets/t+0.json").read_text())


def file_starts(tmp_path) -> list[int]:
    return [int(p.rsplit("+", 1)[1].split(".")[0]) for p in published(tmp_path)]


def assert_exactly_once(tmp_path, n):
    ids = all_json_ids(tmp_path)
    assert sorted(ids) == list(range(n)), "a gap or a duplicate"
    assert len(ids) == n


def test_stale_attempt_is_fenced_and_cannot_roll_the_marker_back(tmp_path):
    # The review's repro: committed up to 10; attempt A stages 10..14 and stalls; attempt B (a Spark
    # speculative copy, the retry of an Airflow zombie) opens the same partition, publishes 10..24;
    # A wakes up. Before fencing A "skipped" the rename whose target B had published and wrote
    # marker 17, so the next run rewrote 17..24 next to B's files: duplicates.
    raw = config(tmp_path, flush_size="5")
    run(raw, [rec(o, {"id": o}) for o in range(10)])
    a, rewinds_a = start(raw)
    assert rewinds_a == {TP: 10}
    a.put([rec(o, {"id": o}) for o in range(10, 17)])  # 10..14 staged, 15..16 buffered; A stalls here
    assert len(staged_files(tmp_path)) == 1

    b, rewinds_b = start(raw)
    assert rewinds_b == {TP: 10}
    assert b.metrics["stale_staging_files_deleted"] == 1  # A's staging (B cannot tell a stall from a death)
    b.put([rec(o, {"id": o}) for o in range(10, 25)])
    assert b.pre_commit({TP: 25}, final=True) == {TP: 25}
    committed_by_b = marker_doc(tmp_path)
    assert committed_by_b["offset"] == 25

    with pytest.raises(ConnectException, match="fenced") as err:
        a.pre_commit({TP: 17}, final=True)
    assert "offset 25" in str(err.value) and "continues from offset 10" in str(err.value)
    assert marker_doc(tmp_path) == committed_by_b  # not moved back
    assert not (root(tmp_path) / "_copycat/wal/t+0.json").exists()
    assert file_starts(tmp_path) == [0, 5, 10, 15, 20]
    assert_exactly_once(tmp_path, 25)
    with pytest.raises(ConnectException, match="fenced"):  # A stays fenced
        a.pre_commit({TP: 17}, final=True)

    c, rewinds_c = start(raw)  # the next run resumes at B's offset and drops A's leftover staging
    assert rewinds_c == {TP: 25}
    assert c.metrics["stale_staging_files_deleted"] == 1
    c.put([rec(o, {"id": o}) for o in range(25, 30)])
    assert c.pre_commit({TP: 30}, final=True) == {TP: 30}
    assert_exactly_once(tmp_path, 30)
    assert file_starts(tmp_path) == [0, 5, 10, 15, 20, 25]


def test_stale_attempt_publishing_before_the_new_one_commits_is_fenced_and_leaves_nothing(tmp_path):
    raw = config(tmp_path, flush_size="5")
    run(raw, [rec(o, {"id": o}) for o in range(10)])
    a, _ = start(raw)
    a.put([rec(o, {"id": o}) for o in range(10, 15)])  # staged
    b, _ = start(raw)  # opens: A's staged file is dropped
    with pytest.raises(ConnectException, match="fenced") as err:
        a.pre_commit({TP: 15})  # the marker is still 10, but A's staged file is gone
    assert "was deleted" in str(err.value)
    assert not (root(tmp_path) / "_copycat/wal/t+0.json").exists()  # no log left to replay
    assert marker_doc(tmp_path)["offset"] == 10
    assert file_starts(tmp_path) == [0, 5]

    b.put([rec(o, {"id": o}) for o in range(10, 20)])
    assert b.pre_commit({TP: 20}, final=True) == {TP: 20}
    assert_exactly_once(tmp_path, 20)


def test_stale_attempt_is_fenced_at_the_end_even_with_nothing_to_publish(tmp_path):
    raw = config(tmp_path, flush_size="5")
    run(raw, [rec(o, {"id": o}) for o in range(10)])
    a, _ = start(raw)
    b, _ = start(raw)
    b.put([rec(o, {"id": o}) for o in range(10, 15)])
    assert b.pre_commit({TP: 15}, final=True) == {TP: 15}
    with pytest.raises(ConnectException, match="fenced"):  # else the run would report offset 10 as committed
        a.pre_commit({TP: 10}, final=True)


class _Killed(BaseException):
    pass


def test_publish_log_of_a_fenced_attempt_is_deleted_unapplied(tmp_path, monkeypatch):
    # The one interleaving the marker check cannot see: A checked the marker just before B committed,
    # then died right after writing its publish log. Replaying that log would publish A's file
    # t+0+10 (records 10..12) over B's t+0+10 (10..14) and move the marker back to 13.
    raw = config(tmp_path, flush_size="5")
    run(raw, [rec(o, {"id": o}) for o in range(10)])
    a, _ = start(raw)
    b, _ = start(raw)
    b.put([rec(o, {"id": o}) for o in range(10, 25)])
    assert b.pre_commit({TP: 25}, final=True) == {TP: 25}
    a.put([rec(o, {"id": o}) for o in range(10, 13)])
    monkeypatch.setattr(a.store, "check_fence", lambda tp: None)

    def die(*args, **kwargs):
        raise _Killed()
    monkeypatch.setattr(a.store, "_apply", die)
    with pytest.raises(_Killed):
        a.pre_commit({TP: 13}, final=True)
    wal = json.loads((root(tmp_path) / "_copycat/wal/t+0.json").read_text())
    assert wal["base"]["offset"] == 10 and wal["offset"] == 13

    c, rewinds = start(raw)
    assert rewinds == {TP: 25}
    assert c.metrics["stale_publish_logs_deleted"] == 1 and c.metrics["publish_logs_replayed"] == 0
    assert not (root(tmp_path) / "_copycat/wal/t+0.json").exists()
    assert staged_files(tmp_path) == []
    assert [d["id"] for d in json_lines(root(tmp_path) / "t/partition=0/t+0+0000000010.json")] == list(range(10, 15))
    assert marker_doc(tmp_path)["offset"] == 25
    assert_exactly_once(tmp_path, 25)


def test_attempts_stage_in_their_own_directories(tmp_path):
    raw = config(tmp_path)
    task, _ = start(raw)
    task.put([rec(o, {"id": o}) for o in range(3)])
    (staged,) = staged_files(tmp_path)
    attempt = task.store.attempt(TP).id
    assert staged.relative_to(root(tmp_path)).as_posix() == \
        f"_copycat/staging/t+0/{attempt}/t/partition=0/t+0+0000000000.json"
    task.pre_commit({TP: 3})
    assert marker_doc(tmp_path)["attempt"] == attempt


def test_open_deletes_half_written_control_files_of_any_attempt_of_its_partition(tmp_path):
    raw = config(tmp_path)
    run(raw, [rec(o, {"id": o}) for o in range(3)])
    control = root(tmp_path) / "_copycat"
    (control / "wal").mkdir(exist_ok=True)
    leftovers = [control / "wal/t+0.json.20240101T000000Z-0123456789ab.tmp", control / "wal/t+0.json.tmp",
                 control / "offsets/t+0.json.20240101T000000Z-0123456789ab.tmp"]
    other = control / "offsets/t+1.json.20240101T000000Z-0123456789ab.tmp"
    for path in leftovers + [other]:
        path.write_text("{")
    _, rewinds = start(raw)
    assert rewinds == {TP: 3}
    assert not any(path.exists() for path in leftovers)
    assert other.exists()  # another partition's: its own open cleans it


def test_stalled_attempt_in_another_process_is_fenced_when_it_resumes(tmp_path):
    # A real process stalls (SIGSTOP) right after staging its first file, as an executor declared lost
    # or an Airflow zombie does; its retry runs to the end; then the stalled one resumes (SIGCONT).
    store = tmp_path / "store"
    zombie = subprocess.Popen([sys.executable, str(HELPER), str(store), "stage:1:stop", "0:15", "5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(HELPER.parents[2]))
    try:
        _, status = os.waitpid(zombie.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        retry = _helper(store, "none", "0:15")
        assert retry.returncode == 0, retry.stderr
        assert json.loads(retry.stdout) == {"t-0": 15}
        os.kill(zombie.pid, signal.SIGCONT)
        _, err = zombie.communicate(timeout=120)
    finally:
        if zombie.poll() is None:
            zombie.kill()
            zombie.wait()
    assert zombie.returncode == 1, err
    assert "is fenced" in err
    assert marker_doc(tmp_path)["offset"] == 15
    assert_exactly_once(tmp_path, 15)

    rerun = _helper(store, "none", "0:20")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout) == {"t-0": 20}
    assert_exactly_once(tmp_path, 20)
    assert staged_files(tmp_path) == []


# ---------------------------------------------------------------- configuration

def test_invalid_config_lists_every_problem_at_once():
    raw = {
        "format.class": "avro",
        "flush.size": "0",
        "rotate.interval.ms": "0",
        "partitioner.class": "field",
        "parquet.codec": "lzo",
        "behavior.on.null.values": "write",
        "timezone": "Mars/Olympus",
        "store.kafka.keys": "true",
        "filename.offset.zero.pad.width": "x",
        "rotate.schedule.interval.ms": "60000",
    }
    with pytest.raises(ConfigException) as err:
        FilesSinkConnector.parse_config(raw)
    keys = {p.key for p in err.value.problems}
    assert keys == {"format.class", "flush.size", "rotate.interval.ms", "parquet.codec", "behavior.on.null.values",
                    "timezone", "store.kafka.keys", "filename.offset.zero.pad.width", "rotate.schedule.interval.ms",
                    "topics", "store.url",
                    "partition.field.name"}
    text = str(err.value)
    assert "give topics" in text and "no store" in text and "unknown format" in text


def test_invalid_time_partitioner_configs():
    base = {"topics": "t", "store.url": "/tmp/x", "format.class": "json", "partitioner.class": "time"}
    with pytest.raises(ConfigException) as err:
        FilesSinkConnector.parse_config(dict(base, **{"timestamp.extractor": "Wallclock"}))
    assert {p.key for p in err.value.problems} == {"path.format", "partition.duration.ms", "timestamp.extractor"}
    with pytest.raises(ConfigException, match="not a Joda-Time pattern letter"):
        FilesSinkConnector.parse_config(dict(base, **{"path.format": "year=YYYY", "partition.duration.ms": "1"}))
    with pytest.raises(ConfigException, match="give topics or topics.regex, not both"):
        FilesSinkConnector.parse_config(dict(base, **{"topics.regex": "t.*", "partitioner.class": "default"}))


def test_confluent_store_keys_map_onto_store_url():
    parse = FilesSinkConnector.parse_config
    base = {"topics": "t", "format.class": "json"}
    assert store_location(parse(dict(base, **{"s3.bucket.name": "lake"}))) == ("s3://lake", {})
    url, opts = store_location(parse(dict(base, **{"s3.bucket.name": "lake", "store.url": "http://minio:9000",
                                                   "s3.region": "eu-west-1"})))
    assert url == "s3://lake"
    assert opts == {"client_kwargs": {"endpoint_url": "http://minio:9000", "region_name": "eu-west-1"}}
    assert store_location(parse(dict(base, **{"hdfs.url": "hdfs://nn:8020/lake"})))[0] == "hdfs://nn:8020/lake"
    with pytest.raises(ConfigException, match="give one"):
        parse(dict(base, **{"s3.bucket.name": "lake", "store.url": "/data"}))
    with pytest.raises(ConfigException, match="not an fsspec filesystem"):
        parse(dict(base, **{"store.url": "nosuchfs://x"}))
    regex = parse({"topics.regex": "orders-.*", "store.url": "memory://lake", "format.class": "parquet"})
    assert regex["topics.regex"] == "orders-.*"


def test_task_rejects_records_of_partitions_it_did_not_open(tmp_path):
    task, _ = start(config(tmp_path))
    with pytest.raises(Exception, match="not opened"):
        task.put([rec(0, {"id": 0}, partition=1)])


def test_memory_filesystem_store(tmp_path):
    import fsspec

    url = f"memory://copycat-{os.getpid()}-{tmp_path.name}"
    raw = {"topics": "t", "store.url": url, "format.class": "json", "flush.size": "2"}
    _, committed = run(raw, [rec(o, {"id": o}) for o in range(3)])
    assert committed == {TP: 3}
    fs = fsspec.filesystem("memory")
    base = url[len("memory://"):]
    assert fs.exists(f"/{base}/topics/t/partition=0/t+0+0000000002.json")
    assert json.loads(fs.cat_file(f"/{base}/topics/_copycat/offsets/t+0.json"))["offset"] == 3
    _, rewinds = start(raw)
    assert rewinds == {TP: 3}


def test_files_sink_declares_that_its_offsets_live_in_the_destination():
    assert SinkConnector.offsets_in_destination is False
    assert FilesSinkConnector.offsets_in_destination is True


def test_store_options_is_a_secret_that_still_reaches_the_filesystem(tmp_path):
    from airflow_copycat.runtime import connector_config

    raw = config(tmp_path, **{"store.options": json.dumps({"auto_mkdir": True})})
    assert "store.options" in FilesSinkConnector.config_def.secret_keys()
    assert "store.options" in connector_config.secret_keys(raw, FilesSinkConnector)  # hidden in plans, XCom
    parsed = FilesSinkConnector.parse_config(raw)
    assert isinstance(parsed["store.options"], Password)
    assert "auto_mkdir" not in repr(parsed) and "auto_mkdir" not in str(parsed["store.options"])
    assert store_location(parsed)[1] == {"auto_mkdir": True}
    task, _ = start(raw)  # through the connector's task config: plain strings
    assert task.store.fs.auto_mkdir is True
    # a mapping given in a YAML/JSON connector config
    as_mapping = FilesSinkConnector.parse_config(dict(raw, **{"store.options": {"auto_mkdir": True}}))
    assert store_location(as_mapping)[1] == {"auto_mkdir": True}


@pytest.mark.parametrize("bad", ['{"key": "s3cr3t-value"', '["s3cr3t-value"]', "s3cr3t-value"])
def test_store_options_problems_never_echo_the_value(bad):
    raw = {"topics": "t", "store.url": "/tmp/x", "format.class": "json", "store.options": bad}
    with pytest.raises(ConfigException) as err:
        FilesSinkConnector.parse_config(raw)
    (problem,) = err.value.problems
    assert problem.key == "store.options" and problem.value == "[hidden]"
    assert "s3cr3t" not in str(err.value) and "s3cr3t" not in repr(err.value.problems)
    (problem,) = validate_config(raw)  # a raw config, not yet wrapped in Password
    assert problem.value == "[hidden]" and "s3cr3t" not in str(problem)
