"""Kafka -> Parquet: the FilesSink connector against a raw confluent-kafka consumer + pyarrow.

Kafka: the embedded broker, or ``KAFKA_BOOTSTRAP``. Two topics of ``--partitions``
partitions (default 4) are filled (untimed) with what the upstream connector
would have written there with the default JsonConverter (schemas.enable=true):

* ``string`` (``--records``, default 1M): what FileStreamSource writes -- the
  envelope ``{"schema":{"type":"string","optional":false},"payload":"<log line>"}``
  (~200 bytes), one Parquet column ``value``;
* ``struct`` (``--struct-records``, default 300k to stay within ~3 min; 0 skips it): the same log lines
  parsed into an 11-field struct (Timestamp, strings, int32/int64, float64) in
  its envelope (~900 bytes, most of it the schema) -- what a JDBC/Debezium-like
  source writes; one Parquet column per field.

For each topic:

* baseline ``raw_consumer_pyarrow_<variant>``: a plain program assigns every
  partition (``WorkerConfig.consumer_config()``: EOF events on), consumes in
  batches of 1000 to the end of each partition, ``json.loads`` each value and
  takes its ``payload``, and writes a snappy Parquet file per 100,000 rows of a
  partition with pyarrow (``pa.array`` / ``Table.from_pylist`` with the target
  Arrow schema). No staging, no publish log, no schema handling.
* ``kafka_to_parquet_<variant>``: FilesSink (``format.class=parquet``,
  ``flush.size=100000``, tasks.max=1), planned with ``make_plan`` and run in
  this process with ``executor.run_group``: JsonConverter -> SinkRecord ->
  buffered batches -> Parquet -> staging -> publish log -> rename -> offset
  marker, consumer-group offsets mirrored.

Both sides read with the same consumer settings, ``WorkerConfig.consumer_config()``
(among them ``fetch.queue.backoff.ms=10``: librdkafka's 1 s default idles the
fetcher while a round is processed, which had halved both rates).

Times cover the read and write (for ours: ``run_group``, including consumer
start-up and recovery of the destination); planning is timed separately
(stderr). Verification: both outputs hold exactly the number of records
produced, and the same data (total string length of ``value``, resp. sum of
the ``bytes`` column and total length of ``path``).

``--profile`` additionally runs the string variant of ours under cProfile (on
``--profile-records`` records) and prints the hot spots to stderr.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq
from _common import (
    create_topic,
    delete_topic,
    fail,
    kafka,
    log_lines,
    note,
    produce_all,
    profiled,
    report,
    timed,
    uid,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from airflow_copycat.connect import Schema, SchemaBuilder, Struct, Timestamp
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

FLUSH_SIZE = 100_000

LOG_SCHEMA = (
    SchemaBuilder.struct().name("bench.AccessLog")
    .field("ts", Timestamp.builder().build())
    .field("host", Schema.STRING)
    .field("pid", Schema.INT32)
    .field("client", Schema.STRING)
    .field("method", Schema.STRING)
    .field("path", Schema.STRING)
    .field("status", Schema.INT32)
    .field("bytes", Schema.INT64)
    .field("duration_ms", Schema.FLOAT64)
    .field("agent", Schema.STRING)
    .field("request_id", Schema.STRING)
    .build()
)
ARROW_LOG_SCHEMA = pa.schema([
    pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),
    pa.field("host", pa.string(), nullable=False),
    pa.field("pid", pa.int32(), nullable=False),
    pa.field("client", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),
    pa.field("path", pa.string(), nullable=False),
    pa.field("status", pa.int32(), nullable=False),
    pa.field("bytes", pa.int64(), nullable=False),
    pa.field("duration_ms", pa.float64(), nullable=False),
    pa.field("agent", pa.string(), nullable=False),
    pa.field("request_id", pa.string(), nullable=False),
])


def _converter() -> JsonConverter:
    conv = JsonConverter()
    conv.configure({}, False)
    return conv


def fill_string(bootstrap_cfg: dict, topic: str, n: int) -> dict:
    """Produce ``n`` FileStreamSource-style envelopes; return the expected checksums."""
    conv, total = _converter(), [0]

    def values():
        for _, line in log_lines(n):
            total[0] += len(line)
            yield conv.from_connect_data(topic, Schema.STRING, line)

    produce_all(bootstrap_cfg, topic, values())
    return {"value_chars": total[0]}


def fill_struct(bootstrap_cfg: dict, topic: str, n: int) -> dict:
    conv, sums = _converter(), {"bytes": 0, "path_chars": 0}

    def values():
        for f, _ in log_lines(n):
            sums["bytes"] += f["bytes"]
            sums["path_chars"] += len(f["path"])
            s = Struct(LOG_SCHEMA, dict(f, ts=Timestamp.to_logical(f["ts"])))
            yield conv.from_connect_data(topic, LOG_SCHEMA, s)

    produce_all(bootstrap_cfg, topic, values())
    return sums


def baseline(worker: WorkerConfig, topic: str, partitions: int, out_dir: str, variant: str) -> None:
    """Raw consumer + json.loads + pyarrow, one snappy Parquet file per FLUSH_SIZE rows of a partition."""
    consumer = Consumer(worker.consumer_config(f"bench-baseline-{uid()}"))
    buffers: dict[int, list] = {p: [] for p in range(partitions)}
    starts: dict[int, int] = {}
    loads = json.loads

    def write(p: int) -> None:
        rows = buffers[p]
        if variant == "string":
            table = pa.table({"value": pa.array(rows, pa.string())})
        else:
            table = pa.Table.from_pylist(rows, schema=ARROW_LOG_SCHEMA)
        pq.write_table(table, os.path.join(out_dir, f"{topic}+{p}+{starts[p]:010d}.snappy.parquet"),
                       compression="snappy")
        buffers[p] = []

    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        pending = set(range(partitions))
        while pending:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        consumer.pause([TopicPartition(topic, msg.partition())])
                        continue
                    fail(f"consumer error: {err}")
                p = msg.partition()
                rows = buffers[p]
                if not rows:
                    starts[p] = msg.offset()
                rows.append(loads(msg.value())["payload"])
                if len(rows) >= FLUSH_SIZE:
                    write(p)
        for p in range(partitions):
            if buffers[p]:
                write(p)
    finally:
        consumer.close()


PAYLOAD_KEY = b',"payload":'


def fast_baseline(worker: WorkerConfig, topic: str, partitions: int, out_dir: str, variant: str) -> None:
    """The fastest plain program we could write: raw consumer in large batches, no per-record
    parsing in Python. Per partition, the values' envelope heads ``{"schema":...,`` are cut off,
    the rest (``"payload":...}``) joined with newlines into one JSON-lines buffer, parsed by
    ``pyarrow.json.read_json`` with the target schema, and written as one snappy Parquet file
    per FLUSH_SIZE rows."""
    consumer = Consumer(worker.consumer_config(f"bench-fast-{uid()}"))
    buffers: dict[int, list] = {p: [] for p in range(partitions)}
    starts: dict[int, int] = {}
    payload_type = pa.string() if variant == "string" else pa.struct(
        [pa.field("ts", pa.int64())] + [f for f in ARROW_LOG_SCHEMA if f.name != "ts"])
    options = pj.ParseOptions(explicit_schema=pa.schema([pa.field("payload", payload_type)]))
    head: list[int] = []  # length of '{"schema":<schema>' -- the same for every value of the topic

    def write(p: int) -> None:
        rows = buffers[p]
        if not head:
            head.append(rows[0].index(PAYLOAD_KEY) + 1)
        cut = head[0]
        lines = b"{" + b"\n{".join([v[cut:] for v in rows])
        payload = pj.read_json(pa.py_buffer(lines), parse_options=options).column("payload")
        if variant == "string":
            table = pa.table({"value": payload}, schema=pa.schema([pa.field("value", pa.string(), nullable=False)]))
        else:
            struct = payload.combine_chunks()
            columns = [struct.field(i) for i in range(struct.type.num_fields)]
            columns[0] = columns[0].cast(pa.timestamp("ms", tz="UTC"))
            table = pa.Table.from_arrays(columns, schema=ARROW_LOG_SCHEMA)
        pq.write_table(table, os.path.join(out_dir, f"{topic}+{p}+{starts[p]:010d}.snappy.parquet"),
                       compression="snappy")
        buffers[p] = []

    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        pending = set(range(partitions))
        while pending:
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        consumer.pause([TopicPartition(topic, msg.partition())])
                        continue
                    fail(f"consumer error: {msg.error()}")
                p = msg.partition()
                rows = buffers[p]
                if not rows:
                    starts[p] = msg.offset()
                rows.append(msg.value())
                if len(rows) >= FLUSH_SIZE:
                    write(p)
        for p in range(partitions):
            if buffers[p]:
                write(p)
    finally:
        consumer.close()


def ours(worker_props: dict, topic: str, store: str) -> dict:
    config = {"name": f"bench-sink-{topic}", "connector.class": "FilesSink", "topics": topic,
              "store.url": store, "format.class": "parquet", "flush.size": FLUSH_SIZE, "tasks.max": 1}
    with timed() as t_plan:
        plan = make_plan(config, WorkerConfig(worker_props, env={}))
    if len(plan["groups"]) != 1 or len(plan["groups"][0]["tasks"]) != 1:
        fail(f"expected one group with one task, got {plan['groups']}")
    with timed() as t_run:
        result = run_group(plan["groups"][0], worker_props)
    note(f"{topic}: plan {t_plan[0]:.2f} s, run_group {t_run[0]:.2f} s, status {result['status']}, "
         f"{result['records']} records")
    if result["status"] != "ok":
        fail(f"{topic}: group failed: {json.dumps(result)[:2000]}")
    return {"seconds": t_run[0], "result": result}


def check(files: list[str], n: int, variant: str, expect: dict, who: str) -> None:
    if not files:
        fail(f"{who}: no Parquet files")
    table = pq.ParquetDataset(files).read()
    if table.num_rows != n:
        fail(f"{who}: {table.num_rows} rows in {len(files)} Parquet files, expected {n}")
    if variant == "string":
        got = {"value_chars": pc.sum(pc.utf8_length(table["value"])).as_py()}
    else:
        got = {"bytes": pc.sum(table["bytes"]).as_py(), "path_chars": pc.sum(pc.utf8_length(table["path"])).as_py()}
    if got != expect:
        fail(f"{who}: checksums {got} != expected {expect}")
    note(f"{who}: {table.num_rows} rows in {len(files)} files, checksums {got} as expected")


def run_variant(variant: str, n: int, parts: int, bootstrap: str, worker_props: dict, tmp: str,
                profile_records: int | None = None) -> None:
    worker = WorkerConfig(worker_props, env={})
    topic = f"bench-{variant}-{uid()}"
    create_topic(bootstrap, topic, parts)
    with timed() as t:
        expect = (fill_string if variant == "string" else fill_struct)(worker.producer_config(), topic, n)
    note(f"{topic}: filled with {n} {variant} envelopes in {t[0]:.1f} s")

    base_dir = os.path.join(tmp, f"baseline-{variant}")
    os.makedirs(base_dir)
    with timed() as t_base:
        baseline(worker, topic, parts, base_dir, variant)
    note(f"{topic}: baseline {t_base[0]:.2f} s")
    check(glob.glob(os.path.join(base_dir, "*.parquet")), n, variant, expect, f"baseline {variant}")

    fast_dir = os.path.join(tmp, f"fast-{variant}")
    os.makedirs(fast_dir)
    with timed() as t_fast:
        fast_baseline(worker, topic, parts, fast_dir, variant)
    note(f"{topic}: fast baseline {t_fast[0]:.2f} s")
    check(glob.glob(os.path.join(fast_dir, "*.parquet")), n, variant, expect, f"fast baseline {variant}")

    store = os.path.join(tmp, f"store-{variant}")
    run = ours(worker_props, topic, store)
    check(glob.glob(os.path.join(store, "topics", topic, "**", "*.parquet"), recursive=True), n, variant, expect,
          f"FilesSink {variant}")

    fast_rate, base_rate, our_rate = n / t_fast[0], n / t_base[0], n / run["seconds"]
    fast = f"raw_consumer_pyarrow_json_{variant}"
    report(fast, fast_rate, "msg/s", 1.0, "itself")
    report(f"raw_consumer_pyarrow_{variant}", base_rate, "msg/s", base_rate / fast_rate, fast)
    report(f"kafka_to_parquet_{variant}", our_rate, "msg/s", our_rate / fast_rate, fast)

    if profile_records:
        ptopic = f"bench-prof-{uid()}"
        create_topic(bootstrap, ptopic, parts)
        (fill_string if variant == "string" else fill_struct)(worker.producer_config(), ptopic, profile_records)
        profiled(lambda: ours(worker_props, ptopic, os.path.join(tmp, f"store-prof-{variant}")),
                 f"the sink loop (Kafka -> JsonConverter -> FilesSink Parquet, {variant}, {profile_records} records)")
        delete_topic(bootstrap, ptopic)
    delete_topic(bootstrap, topic)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--struct-records", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--profile", action="store_true", help="also profile our side with cProfile (stderr)")
    ap.add_argument("--profile-records", type=int, default=200_000)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="copycat-bench-") as tmp, kafka() as bootstrap:
        worker_props = {"bootstrap.servers": bootstrap, "offset.storage.topic": f"bench-offsets-{uid()}",
                        "offset.storage.partitions": 1}
        prof = args.profile_records if args.profile else None
        run_variant("string", args.records, args.partitions, bootstrap, worker_props, tmp, prof)
        if args.struct_records > 0:
            run_variant("struct", args.struct_records, args.partitions, bootstrap, worker_props, tmp, prof)
    return 0


if __name__ == "__main__":
    sys.exit(main())
