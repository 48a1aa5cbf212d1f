"""PostgreSQL -> Kafka: the JDBC source against ``psql \\copy`` and a raw confluent-kafka producer.

Input: the shared generator's table (``../shared/bench/gen_pg_table.sql``, ~150 B
per row, 10 columns: bigint id, timestamptz, text, int, numeric(12,2), real,
a nullable text) with ``--rows`` rows (default 2M) in the database ``test`` on
127.0.0.1, named ``bench_orders`` (``bench_orders_<rows>`` for other sizes, so a
quick run never replaces the full-size table). It is generated only when it is
missing or holds another row count. Kafka: the embedded broker, or
``KAFKA_BOOTSTRAP``.

* baseline ``psql_copy_binary``: ``psql -c "\\copy (SELECT * FROM t) TO STDOUT
  (FORMAT binary)" > /dev/null``, the whole process (after one untimed warm-up
  read, so every contender finds the table in the page cache).
* baseline ``raw_producer_json``: the rows read once with psycopg and encoded
  (untimed) exactly as the connector's JsonConverter writes them with
  ``schemas.enable=false`` (key ``{"id":n}``, value an object of the 10 columns:
  timestamps as epoch ms, the decimal as base64 of its unscaled value, the real
  as Java's ``Float.toString``); timed: a plain confluent-kafka program that
  produces those key/value bytes (``WorkerConfig.producer_config()``, delivery
  error callback with ``delivery.report.only.error``, ``poll(0)`` every 1,000 records: see
  ``_common.produce_all``) and flushes. Verified byte-identical to what
  the connector wrote (same count and same order-independent checksum of
  key+value).
* ``jdbc_<mode>_1task``: JdbcSource (``--mode``, default incrementing on ``id``;
  ``batch.max.rows`` from ``--batch-rows``), tasks.max=1, key and value
  JsonConverter with ``schemas.enable=false``, planned with ``make_plan`` and run
  in this process with ``executor.run_group`` (what a Spark task runs); timed:
  ``run_group`` (planning on stderr).
* ``jdbc_<mode>_1task_schemas``: the same with ``schemas.enable=true`` (Kafka Connect's default
  worker), against ``raw_producer_json_schemas``: the raw producer of the same envelopes (the
  schema texts from the JsonConverter, the payloads encoded independently as above).
* ``jdbc_<mode>_1task_avro_registry``: the value through the AvroConverter with the stand-in
  schema registry, against ``raw_producer_avro_registry``: a raw producer of Confluent-framed
  Avro written per row by fastavro from psycopg's rows (the same schema, registered first).
* ``jdbc_<mode>_1task_peak_rss``: the 1-task import run again in a process of its own; its
  peak resident memory (``VmHWM``) against the 500 MB target.
* ``raw_producer_json_cpu`` and ``jdbc_<mode>_1task_cpu``: CPU microseconds per row of the raw producer
  and of the 1-task run, counting this process (every thread), the embedded broker and the local
  PostgreSQL server (``_common.cpu_used``; stderr splits them). The raw producer reads nothing: the
  difference is what reading from PostgreSQL, building batches and encoding cost. On a machine whose
  cores all of them share, the run's rate cannot pass ``cores / its CPU per row``.
* ``jdbc_<mode>_split4_inprocess``: the same with ``copycat.split.column=id``,
  ``copycat.split.count=4``, tasks.max=4, its four tasks run one after the
  other in this process (the split's overhead without parallelism).
* ``jdbc_<mode>_split4_spark``: the same plan's group submitted as the run
  operator does (``spark-submit --master local[2]``, see bench_spark_startup):
  two tasks at a time; process start to exit. ``spark_startup`` is a trivial
  PySpark application with the same settings, and
  ``jdbc_<mode>_split4_spark_minus_startup`` the throughput without it.
* ``jdbc_incremental_10k_*``: a copy of the table (unique name, dropped at the
  end) read in timestamp+incrementing mode (``updated_at``, ``id``): the
  connector's offset is set to the last row (what a caught-up run commits;
  ``--catch-up-run`` instead runs the connector over the whole copy), then 10k
  rows are inserted and one incremental run is timed end to end (plan + run) in
  this process; 10k more rows are inserted and one run is timed through
  spark-submit (plan + submit). Baseline ``psql_copy_binary_10k``: ``\\copy`` of
  those new rows (``WHERE id > last``). ``jdbc_incremental_10k_spark_connect``:
  a Spark Connect server (``local[2]``, started untimed) serves one untimed run,
  then 10k more rows are copied through it (plan + ``run_group_over_connect``: a
  new client attaching to the session the untimed run left, as the next scheduled
  run of the same build does, the package artifact checked, the job), against the
  spark-submit run.

Every connector run writes a fresh topic of ``--partitions`` partitions
(default 4) and is verified: the topic holds exactly the table's (or the
increment's) row count, and the full-table runs hold the same records as the
raw producer's (checksum). The split figures print "split: not available yet"
(stderr) when the connector does not know ``copycat.split.*``.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (cpu_note, cpu_used, create_topic, delete_topic, fail, kafka, note, produce_all, report,
                     timed, uid)
from bench_spark_startup import TRIVIAL_APP, spark_submit
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from airflow_copycat.converters.java_numbers import _java_float_json
from airflow_copycat.runtime import submit
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.offsets import offset_store
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig
from airflow_copycat.testing.spark_connect import EmbeddedSparkConnect
from spark_apps.connect import run_group_over_connect

ROOT = Path(__file__).resolve().parents[1]
GEN_SQL = ROOT.parent / "shared" / "bench" / "gen_pg_table.sql"
PG_HOST, PG_DB = "127.0.0.1", "test"
PG_URL = f"postgresql+psycopg://{PG_HOST}:5432/{PG_DB}"
DEFAULT_ROWS = 2_000_000
INCREMENT = 10_000
SPLIT_KEYS = ("copycat.split.column", "copycat.split.count")
NO_SCHEMAS = {"key.converter": "org.apache.kafka.connect.json.JsonConverter",
              "key.converter.schemas.enable": "false",
              "value.converter": "org.apache.kafka.connect.json.JsonConverter",
              "value.converter.schemas.enable": "false"}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_F32 = struct.Struct("<f")


# ------------------------------------------------------------------ the database


def psql(*args: str, capture: bool = True) -> str:
    r = subprocess.run(["psql", "-h", PG_HOST, "-d", PG_DB, "-X", "-q", "-v", "ON_ERROR_STOP=1", *args],
                       capture_output=capture, text=True)
    if r.returncode != 0:
        fail(f"psql {' '.join(args)[:200]} exited {r.returncode}: {(r.stderr or '')[-2000:]}")
    return (r.stdout or "").strip()


def sql(query: str) -> str:
    return psql("-Atc", query)


def ensure_table(table: str, rows: int) -> None:
    """Generate ``table`` with the shared generator unless it already holds exactly ``rows`` rows."""
    if sql(f"SELECT to_regclass('{table}') IS NOT NULL") == "t":
        have = int(sql(f"SELECT count(*) FROM {table}"))
        if have == rows:
            note(f"table {table} exists with {rows} rows: not regenerated")
            return
        note(f"table {table} holds {have} rows, not {rows}: regenerating")
    with timed() as t:
        out = psql("-v", f"rows={rows}", "-v", f"table={table}", "-f", str(GEN_SQL))
    note(f"generated {table} in {t[0]:.1f} s: {' '.join(out.split())}")


def copy_binary(query: str) -> float:
    """``psql \\copy (query) TO STDOUT (FORMAT binary)`` into /dev/null; the process's wall time."""
    with open(os.devnull, "wb") as devnull, timed() as t:
        r = subprocess.run(["psql", "-h", PG_HOST, "-d", PG_DB, "-X", "-c",
                            f"\\copy ({query}) TO STDOUT (FORMAT binary)"], stdout=devnull,
                           stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail(f"psql \\copy exited {r.returncode}: {r.stderr[-2000:]}")
    return t[0]


# ------------------------------------------------------------------ the raw producer's payload


def _decimal_base64(v) -> str:
    """Kafka's Decimal as JSON (decimal.format=BASE64): BigInteger.toByteArray of the unscaled value."""
    sign, digits, exp = v.quantize(type(v)("0.01")).as_tuple()
    n = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    length = (n if n >= 0 else ~n).bit_length() // 8 + 1
    return '"' + base64.b64encode(n.to_bytes(length, "big", signed=True)).decode("ascii") + '"'


def _float32_json(x: float) -> str:
    """Java's ``Float.toString`` of a REAL as the JsonConverter writes it (psycopg gives a REAL as
    the double of its shortest text: round it to float32 first, as the connector does)."""
    return _java_float_json(_F32.unpack(_F32.pack(x))[0])


def encode_row(row) -> tuple[bytes, bytes]:
    """One row of the generator's table as the (key, value) bytes the JsonConverter writes without schemas."""
    id_, ts, customer, email, category, qty, amount, score, status, note_ = row
    dumps = json.dumps
    ms = (ts - EPOCH) // dt.timedelta(milliseconds=1)
    value = (f'{{"id":{id_},"updated_at":{ms},"customer":{dumps(customer, ensure_ascii=False)},'
             f'"email":{dumps(email, ensure_ascii=False)},"category":{category},"qty":{qty},'
             f'"amount":{_decimal_base64(amount)},"score":{_float32_json(score)},'
             f'"status":{dumps(status, ensure_ascii=False)},'
             f'"note":{"null" if note_ is None else dumps(note_, ensure_ascii=False)}}}')
    return f'{{"id":{id_}}}'.encode(), value.encode()


COLUMNS = "id, updated_at, customer, email, category, qty, amount, score, status, note"


def table_schemas(table: str):
    """(key schema, value schema) the connector gives ``table``'s rows: the JDBC source's own column mapping."""
    import sqlalchemy as sa

    from airflow_copycat.connectors.jdbc.schema import ColumnMapping, map_column, struct_schema

    engine = sa.create_engine(PG_URL)
    try:
        t = sa.Table(table, sa.MetaData(), autoload_with=engine)
    finally:
        engine.dispose()
    from zoneinfo import ZoneInfo

    mappings = [map_column(c.name, c.type, c.nullable, "none", ZoneInfo("UTC")) for c in t.columns]
    pk = [m for m in mappings if m.name in {c.name for c in t.primary_key.columns}]
    key = struct_schema(None, [ColumnMapping(m.name, m.schema.copy(optional=False), m.convert) for m in pk])
    return key, struct_schema(table, mappings)


def with_envelopes(payload: list[tuple[bytes, bytes]], table: str) -> list[tuple[bytes, bytes]]:
    """The raw payload as the JsonConverter writes it with ``schemas.enable=true``: each key and value
    inside ``{"schema":<its schema>,"payload":...}`` (the schema texts from the converter, the payloads
    as encoded independently by :func:`encode_row`)."""
    from airflow_copycat.converters.json_converter import JsonConverter

    key_schema, value_schema = table_schemas(table)
    conv = JsonConverter()
    conv.configure({"schemas.enable": True}, False)
    kp = b'{"schema":' + conv.as_json_schema(key_schema).encode() + b',"payload":'
    vp = b'{"schema":' + conv.as_json_schema(value_schema).encode() + b',"payload":'
    return [(kp + k + b"}", vp + v + b"}") for k, v in payload]


def avro_rows(table: str, registry_url: str, subject: str) -> list[tuple[bytes, bytes]]:
    """Every row of ``table`` as (JSON key, Confluent-framed Avro value): the value's Avro schema as the
    converter derives it, registered under ``subject``; the bodies written by fastavro from the rows
    psycopg reads (independent of the connector's encoder)."""
    import io

    import fastavro
    import psycopg
    from confluent_kafka.schema_registry import Schema as RegistrySchema
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from airflow_copycat.converters.avro.converter import AvroConverter

    _, value_schema = table_schemas(table)
    conv = AvroConverter()
    conv.configure({"schema.registry.url": registry_url}, False)
    writer = conv._data.writer(value_schema)
    schema_id = SchemaRegistryClient({"url": registry_url}).register_schema(
        subject, RegistrySchema(writer.schema_json, "AVRO"))
    parsed = fastavro.parse_schema(writer.avro_schema)
    header = struct.pack(">bI", 0, schema_id)
    names = [f.name for f in value_schema.fields]
    out = []
    with psycopg.connect(f"host={PG_HOST} dbname={PG_DB}") as c, c.cursor(name="bench-avro") as cur:
        cur.itersize = 10_000
        cur.execute(f"SELECT {COLUMNS} FROM {table}")
        for row in cur:
            buf = io.BytesIO()
            record = dict(zip(names, row))
            record["amount"] = record["amount"].quantize(type(record["amount"])("0.01"))
            record["score"] = _F32.unpack(_F32.pack(record["score"]))[0]
            fastavro.schemaless_writer(buf, parsed, record)
            out.append((f'{{"id":{row[0]}}}'.encode(), header + buf.getvalue()))
    return out


# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child of this
# (large) benchmark process would report the parent's peak
RSS_SCRIPT = """
import json, sys
from airflow_copycat.runtime.executor import run_group
group, props = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
result = run_group(group, props)
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print(json.dumps({"records": result.get("records"), "status": [t["status"] for t in result["tasks"]],
                  "maxrss_kb": int(hwm.split()[1])}))
"""


def encode_rows(table: str) -> list[tuple[bytes, bytes]]:
    """Every row of ``table`` as the (key, value) bytes the JsonConverter writes without schemas."""
    import psycopg

    with psycopg.connect(f"host={PG_HOST} dbname={PG_DB}") as conn, conn.cursor(name="bench") as cur:
        cur.itersize = 10_000
        cur.execute(f"SELECT {COLUMNS} FROM {table}")
        return [encode_row(row) for row in cur]


def checksum(pairs) -> int:
    """Order-independent checksum of (key, value) pairs: the sum of their 64-bit blake2b hashes."""
    total = 0
    for k, v in pairs:
        h = hashlib.blake2b(digest_size=8)
        h.update(len(k or b"").to_bytes(4, "big"))
        h.update(k or b"")
        h.update(v or b"")
        total += int.from_bytes(h.digest(), "big")
    return total % (1 << 64)


# ------------------------------------------------------------------ Kafka read-back


def read_back(bootstrap: str, topic: str, partitions: int) -> tuple[int, int]:
    """(record count, checksum) of ``topic`` from the beginning to the end of every partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{uid()}",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        msgs = read_to_end(c, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)],
                           timeout_s=600)
        n = [0]

        def pairs():
            for m in msgs:
                n[0] += 1
                yield m.key(), m.value()

        total = checksum(pairs())
    finally:
        c.close()
    return n[0], total


def differences(bootstrap: str, topic: str, partitions: int, table: str, show: int = 3) -> list[str]:
    """Up to ``show`` records of ``topic`` that differ from the table's expected encoding (diagnosis)."""
    expected = dict(encode_rows(table))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-diff-{uid()}",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    out = []
    try:
        for m in read_to_end(c, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)],
                             timeout_s=600):
            want = expected.pop(m.key(), None)
            if want != m.value() and len(out) < show:
                out.append(f"key {m.key()!r}: got {m.value()!r}, expected {want!r}")
    finally:
        c.close()
    if expected:
        out.append(f"{len(expected)} keys missing, e.g. {list(expected)[:3]}")
    return out


# ------------------------------------------------------------------ the connector


def split_available() -> bool:
    """Whether the JDBC connector knows ``copycat.split.*`` (helper "jdbc-splits" built it for issue 4)."""
    from airflow_copycat.connectors.jdbc import config as jdbc_config

    return all(k in jdbc_config.CONFIG_DEF.keys for k in SPLIT_KEYS)


def connector_config(name: str, table: str, prefix: str, mode: str, batch_rows: int | None, **extra) -> dict:
    config = {"name": name, "connector.class": "JdbcSource", "connection.url": PG_URL,
              "table.whitelist": table, "topic.prefix": prefix, "mode": mode, "tasks.max": 1, **NO_SCHEMAS}
    if mode in ("incrementing", "timestamp+incrementing"):
        config["incrementing.column.name"] = "id"
    if mode in ("timestamp", "timestamp+incrementing"):
        config["timestamp.column.name"] = "updated_at"
    if batch_rows:
        config["batch.max.rows"] = batch_rows
    config.update(extra)
    return config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    ap.add_argument("--table", help="default bench_orders (bench_orders_<rows> unless --rows is 2M)")
    ap.add_argument("--mode", default="incrementing", choices=["bulk", "incrementing"],
                    help="mode of the full-table runs (default incrementing on id)")
    ap.add_argument("--batch-rows", type=int, default=10000,
                    help="batch.max.rows of every connector run (default 10000, what a bulk import sets; the "
                         "connector's default is Confluent's 100, one query per 100 rows)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--catch-up-run", action="store_true",
                    help="incremental: catch up by running the connector over the whole copy instead of setting "
                         "its offset to the last row")
    ap.add_argument("--skip-incremental", action="store_true")
    args = ap.parse_args()
    n, parts, mode = args.rows, args.partitions, args.mode
    table = args.table or ("bench_orders" if n == DEFAULT_ROWS else f"bench_orders_{n}")

    ensure_table(table, n)
    with tempfile.TemporaryDirectory(prefix="copycat-bench-jdbc-") as tmp, kafka() as bootstrap:
        run_id = uid()
        worker_props = {"bootstrap.servers": bootstrap, "offset.storage.topic": f"bench-offsets-{run_id}",
                        "offset.storage.partitions": 1}
        worker = WorkerConfig(worker_props, env={})
        env = dict(os.environ)
        env.update(submit.submit_env(worker_props, {}))
        py_files = submit.package_zip(os.path.join(tmp, "zip"))
        figures: list[tuple[str, float, str]] = []  # (name, value, unit) of the connector runs
        other_figures: list[tuple[str, float, float, str]] = []  # (name, rows/s, baseline rows/s, baseline)

        # ---- baseline A: psql \copy binary
        copy_binary(f"SELECT * FROM {table}")  # warm-up: the table into the page cache
        t_copy = copy_binary(f"SELECT * FROM {table}")
        note(f"psql \\copy binary: {t_copy:.2f} s")

        # ---- baseline B: the raw producer of the connector's bytes
        with timed() as t:
            payload = encode_rows(table)
        if len(payload) != n:
            fail(f"read {len(payload)} rows of {table}, expected {n}")
        expected_sum = checksum(payload)
        note(f"read and encoded {n} rows ({sum(len(k) + len(v) for k, v in payload) / n:.0f} B/record) "
             f"in {t[0]:.1f} s (untimed)")
        topic_raw = f"bench-jdbc-raw-{run_id}"
        create_topic(bootstrap, topic_raw, parts)
        producer_cfg = worker.producer_config()

        def produce_pairs(pairs: list[tuple[bytes, bytes]]) -> int:
            return produce_all(producer_cfg, topic_raw, pairs)

        with timed() as t_raw, cpu_used() as cpu_raw:
            produce_pairs(payload)
        note(f"raw producer: {t_raw[0]:.2f} s")
        cpu_raw_row = cpu_note("raw producer", cpu_raw, n)
        del payload
        count, total = read_back(bootstrap, topic_raw, parts)
        if count != n or total != expected_sum:
            fail(f"{topic_raw}: {count} records (expected {n}), checksum match {total == expected_sum}")
        delete_topic(bootstrap, topic_raw)

        def verify(topic: str, what: str, expect_n: int, expect_sum: int | None) -> None:
            with timed() as t:
                count, total = read_back(bootstrap, topic, parts)
            note(f"{what}: read back {count} records in {t[0]:.1f} s")
            if count != expect_n:
                fail(f"{what}: {topic} holds {count} records, the table {expect_n}")
            if expect_sum is not None and total != expect_sum:
                fail(f"{what}: {topic} holds other records than the raw producer's payload (checksum differs); "
                     f"first differences: {differences(bootstrap, topic, parts, table)}")
            delete_topic(bootstrap, topic)

        def plan(kind: str, table_: str, mode_: str, **extra) -> tuple[dict, str, str]:
            prefix = f"bench-jdbc-{kind}-{run_id}-"
            config = connector_config(f"bench-jdbc-{kind}-{run_id}", table_, prefix, mode_, args.batch_rows,
                                      **extra)
            create_topic(bootstrap, prefix + table_, parts)
            with timed() as t:
                p = make_plan(config, worker)
            if len(p["groups"]) != 1:
                fail(f"{kind}: expected one group, got {len(p['groups'])}")
            note(f"{kind}: plan {t[0]:.2f} s, {len(p['groups'][0]['tasks'])} task(s), "
                 f"partitions {[t_['partitions'] for t_ in p['groups'][0]['tasks']]}")
            return p, prefix + table_, config["name"]

        def check_result(what: str, result: dict, expect: int) -> None:
            if result.get("status") != "ok" or result.get("records") != expect:
                fail(f"{what}: {json.dumps(result, default=str)[:3000]}")

        def in_process(what: str, group: dict, expect: int) -> float:
            with timed() as t:
                result = run_group(group, worker_props)
            note(f"{what}: run_group {t[0]:.2f} s, {result.get('records')} records, "
                 f"tasks {[round(x.get('duration_s') or 0, 2) for x in result['tasks']]} s")
            check_result(what, result, expect)
            return t[0]

        def on_spark(what: str, group: dict, expect: int) -> float:
            group_path = submit.write_json(group, os.path.join(tmp, f"{what}.group.json"))
            result_path = os.path.join(tmp, f"{what}.result.json")
            secs = spark_submit(submit.application_path(), ["--group", group_path, "--result", result_path],
                                env, py_files, os.path.join(tmp, f"{what}.log"))
            with open(result_path, encoding="utf-8") as f:
                result = json.load(f)
            note(f"{what}: spark-submit {secs:.2f} s, {result.get('records')} records, task time inside Spark "
                 f"{[round(x.get('duration_s') or 0, 2) for x in result['tasks']]} s")
            check_result(what, result, expect)
            return secs

        # ---- the connector, one task
        p, topic, _ = plan("1task", table, mode)
        with cpu_used() as cpu_one:
            t_one = in_process("1task", p["groups"][0], n)
        cpu_one_row = cpu_note("1task", cpu_one, n)
        verify(topic, "1task", n, expected_sum)
        figures.append((f"jdbc_{mode}_1task", n / t_one, "rows/s"))

        def against_own_raw_producer(kind: str, payload: list, baseline: str, **extra) -> None:
            """A raw producer of ``payload`` (what the connector must write with ``extra``), then the 1-task
            run with ``extra``, verified to hold the same records; both rates go to ``other_figures``."""
            expect_sum = checksum(payload)
            create_topic(bootstrap, topic_raw, parts)
            with timed() as t_raw_:
                produce_pairs(payload)
            payload.clear()
            note(f"{baseline}: {t_raw_[0]:.2f} s")
            delete_topic(bootstrap, topic_raw)
            p_, topic_, _ = plan(f"1task-{kind}", table, mode, **extra)
            t_run = in_process(f"1task {kind}", p_["groups"][0], n)
            verify(topic_, f"1task {kind}", n, expect_sum)
            other_figures.append((f"jdbc_{mode}_1task_{kind}", n / t_run, n / t_raw_[0], baseline))

        # ---- the same with schemas.enable=true (Kafka Connect's default worker)
        against_own_raw_producer("schemas", with_envelopes(encode_rows(table), table), "raw_producer_json_schemas",
                                 **{k: "true" for k in NO_SCHEMAS if k.endswith("schemas.enable")})

        # ---- AvroConverter with a schema registry
        from tests.support.schema_registry import SchemaRegistryServer

        with SchemaRegistryServer() as registry:
            subject = f"bench-jdbc-1task-avro_registry-{run_id}-{table}-value"  # the connector's topic + -value
            against_own_raw_producer("avro_registry", avro_rows(table, registry.url, subject),
                                     "raw_producer_avro_registry",
                                     **{"value.converter": "io.confluent.connect.avro.AvroConverter",
                                        "value.converter.schema.registry.url": registry.url})

        # ---- peak memory of the 1-task import, in a process of its own
        p, topic, _ = plan("rss", table, mode)
        group_path = submit.write_json(p["groups"][0], os.path.join(tmp, "rss.group.json"))
        props_path = submit.write_json(worker_props, os.path.join(tmp, "rss.props.json"))
        r = subprocess.run([sys.executable, "-c", RSS_SCRIPT, group_path, props_path], capture_output=True,
                           text=True, env=env)
        if r.returncode != 0:
            fail(f"the memory run exited {r.returncode}: {r.stderr[-2000:]}")
        rss = json.loads(r.stdout.strip().splitlines()[-1])
        if rss["records"] != n or set(rss["status"]) != {"ok"}:
            fail(f"the memory run: {rss}")
        verify(topic, "1task (memory run)", n, expected_sum)
        peak_mb = rss["maxrss_kb"] / 1024

        # ---- the connector, split into 4 key ranges
        t_trivial = None
        if split_available():
            split = {"copycat.split.column": "id", "copycat.split.count": 4, "tasks.max": 4}
            p, topic, _ = plan("split-inproc", table, mode, **split)
            t_split = in_process("split4 in process", p["groups"][0], n)
            verify(topic, "split4 in process", n, expected_sum)
            figures.append((f"jdbc_{mode}_split4_inprocess", n / t_split, "rows/s"))
            p, topic, _ = plan("split-spark", table, mode, **split)
            t_split_spark = on_spark("split4-spark", p["groups"][0], n)
            verify(topic, "split4 on Spark", n, expected_sum)
            trivial = os.path.join(tmp, "trivial.py")
            Path(trivial).write_text(TRIVIAL_APP, encoding="utf-8")
            t_trivial = spark_submit(trivial, [], env, None, os.path.join(tmp, "trivial.log"))
            note(f"spark-submit trivial: {t_trivial:.2f} s")
            figures.append((f"jdbc_{mode}_split4_spark", n / t_split_spark, "rows/s"))
            if t_split_spark > t_trivial:
                figures.append((f"jdbc_{mode}_split4_spark_minus_startup", n / (t_split_spark - t_trivial),
                                "rows/s"))
        else:
            note("split: not available yet (the JDBC connector has no copycat.split.column)")

        base_copy, base_raw = n / t_copy, n / t_raw[0]
        report("psql_copy_binary", base_copy, "rows/s", 1.0, "itself")
        report("raw_producer_json", base_raw, "rows/s", 1.0, "itself")
        for name, value, unit in figures:
            report(name, value, unit, value / base_copy, "psql_copy_binary")
            report(name, value, unit, value / base_raw, "raw_producer_json")
        for name, value, base, base_name in other_figures:
            report(base_name, base, "rows/s", 1.0, "itself")
            report(name, value, "rows/s", value / base, base_name)
        report(f"jdbc_{mode}_1task_peak_rss", peak_mb, "MB", peak_mb / 500, "the 500 MB target")
        # CPU of every process the run keeps busy (this one, the broker, PostgreSQL): where the cores that
        # all of them share go, per row
        report("raw_producer_json_cpu", cpu_raw_row, "us/row", 1.0, "itself")
        report(f"jdbc_{mode}_1task_cpu", cpu_one_row, "us/row", cpu_one_row / cpu_raw_row, "raw_producer_json_cpu")

        if args.skip_incremental:
            return 0

        # ---- a 10k-row incremental run, in process and on Spark
        inc_table = f"bench_orders_inc_{run_id}"
        try:
            with timed() as t:
                sql(f"CREATE TABLE {inc_table} (LIKE {table} INCLUDING CONSTRAINTS INCLUDING INDEXES)")
                sql(f"INSERT INTO {inc_table} SELECT * FROM {table}")
                sql(f"VACUUM ANALYZE {inc_table}")
            note(f"copied {table} to {inc_table} in {t[0]:.1f} s")
            kind = "inc"
            prefix = f"bench-jdbc-{kind}-{run_id}-"
            topic = prefix + inc_table
            create_topic(bootstrap, topic, parts)
            config = connector_config(f"bench-jdbc-{kind}-{run_id}", inc_table, prefix, "timestamp+incrementing",
                                      args.batch_rows)
            first = make_plan(config, worker)
            if args.catch_up_run:
                with timed() as t:
                    result = run_group(first["groups"][0], worker_props)
                check_result("catch-up run", result, n)
                note(f"catch-up run over {n} rows: {t[0]:.1f} s")
            else:
                last_id, last_ts = sql(f"SELECT id, (extract(epoch FROM updated_at) * 1000000)::bigint "
                                       f"FROM {inc_table} ORDER BY updated_at DESC, id DESC LIMIT 1").split("|")
                micros = int(last_ts)
                offset = {"timestamp": micros // 1000, "timestamp_nanos": (micros % 1_000_000) * 1000,
                          "incrementing": int(last_id)}
                store = offset_store(worker)
                try:
                    store.write(config["name"], [(first["partitions"][0], offset)])
                finally:
                    store.close()
                note(f"offset of {first['partitions'][0]} set to the last row {offset} (as a caught-up run)")
            verify_n = n if args.catch_up_run else 0
            count, _ = read_back(bootstrap, topic, parts)
            if count != verify_n:
                fail(f"after catch-up {topic} holds {count} records, expected {verify_n}")

            def insert_increment() -> int:
                """10k new rows (ids after the last, updated now); returns the last id before them."""
                last = int(sql(f"SELECT max(id) FROM {inc_table}"))
                sql(f"INSERT INTO {inc_table} (id, updated_at, customer, email, category, qty, amount, score, "
                    f"status, note) SELECT {last} + g, clock_timestamp(), 'customer_new_' || g, "
                    f"'new' || g || '@example.com', g % 50, g % 1000, (g % 10000) / 100.0, (g % 97) / 97.0, "
                    f"'NEW', NULL FROM generate_series(1, {INCREMENT}) g")
                return last

            def incremental(what: str, runner) -> tuple[float, float]:
                nonlocal verify_n
                last = insert_increment()
                t_base = copy_binary(f"SELECT * FROM {inc_table} WHERE id > {last}")
                with timed() as t:
                    p = make_plan(config, worker)
                    runner(what, p["groups"][0], INCREMENT)
                verify_n += INCREMENT
                count, _ = read_back(bootstrap, topic, parts)
                if count != verify_n:
                    fail(f"{what}: {topic} holds {count} records, expected {verify_n} (an increment of {INCREMENT})")
                note(f"{what}: end to end (plan + run) {t[0]:.2f} s; psql \\copy of the increment {t_base:.2f} s")
                return t[0], t_base

            t_inc_local, t_copy_10k = incremental("incremental in process", in_process)
            t_inc_spark, _ = incremental("incremental on Spark", on_spark)
            with EmbeddedSparkConnect(master=args.master, log_path=os.path.join(tmp, "connect.log")) as server:
                note(f"Spark Connect server at {server.url} (started untimed)")

                def over_connect(what: str, group: dict, expect: int) -> float:
                    with timed() as t:
                        result = run_group_over_connect(server.url, group, worker_props)
                    note(f"{what}: run_group_over_connect {t[0]:.2f} s, {result.get('records')} records")
                    check_result(what, result, expect)
                    return t[0]

                incremental("incremental over Spark Connect, warm-up (untimed figure)", over_connect)
                t_inc_connect, _ = incremental("incremental over Spark Connect", over_connect)
            if t_trivial is None:
                trivial = os.path.join(tmp, "trivial.py")
                Path(trivial).write_text(TRIVIAL_APP, encoding="utf-8")
                t_trivial = spark_submit(trivial, [], env, None, os.path.join(tmp, "trivial.log"))
            delete_topic(bootstrap, topic)
        finally:
            sql(f"DROP TABLE IF EXISTS {inc_table}")

        label = f"{INCREMENT // 1000}k"
        report(f"psql_copy_binary_{label}", t_copy_10k, "s", 1.0, "itself")
        report(f"jdbc_incremental_{label}_inprocess", t_inc_local, "s", t_inc_local / t_copy_10k,
               f"psql_copy_binary_{label}")
        report(f"jdbc_incremental_{label}_spark", t_inc_spark, "s", t_inc_spark / t_inc_local,
               f"jdbc_incremental_{label}_inprocess")
        report(f"jdbc_incremental_{label}_spark_minus_startup", t_inc_spark - t_trivial, "s",
               (t_inc_spark - t_trivial) / t_inc_local, f"jdbc_incremental_{label}_inprocess")
        report(f"jdbc_incremental_{label}_spark_connect", t_inc_connect, "s", t_inc_connect / t_inc_spark,
               f"jdbc_incremental_{label}_spark")
        report("spark_startup", t_trivial, "s", t_trivial / t_inc_local, f"jdbc_incremental_{label}_inprocess")
    return 0


if __name__ == "__main__":
    sys.exit(main())
