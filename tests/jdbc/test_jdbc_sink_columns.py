"""The JDBC sink's columnar path on PostgreSQL equals its records path: same rows, offsets, dead letters, failures.

Generated records (every integer width with its bounds, float32 and float64 including values that round
differently through a double, decimals with a scale, dates, times, timestamps across Europe/Berlin's
daylight-saving changes, strings with quotes, line breaks and unicode, bytes, nulls, repeated keys, rows
the database refuses, tombstones, a schema change) are written to Kafka with the JsonConverter
(``schemas.enable=true``), then copied twice by plan + run_group into two tables: once with
``copycat.batch.enabled=false`` (records), once with it true (columns). Both tables, both connectors'
offsets, both dead-letter queues and both failures must be the same.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import re
import struct

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect import Schema, SchemaBuilder, Struct
from airflow_copycat.connect.data import Date, Decimal, Time, Timestamp
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime import sink as sink_runtime
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

PARTITIONS = 3
KEY = SchemaBuilder.struct().name("k").field("id", Schema.INT64).build()
FIELDS = [  # name, schema, column type (as auto.create makes it on PostgreSQL)
    ("i8", Schema.OPTIONAL_INT8, "SMALLINT"), ("i16", Schema.OPTIONAL_INT16, "SMALLINT"),
    ("i32", Schema.OPTIONAL_INT32, "INTEGER"), ("i64", Schema.OPTIONAL_INT64, "BIGINT"),
    ("f32", Schema.OPTIONAL_FLOAT32, "REAL"), ("f64", Schema.OPTIONAL_FLOAT64, "DOUBLE PRECISION"),
    ("dec", Decimal.builder(3).optional().build(), "NUMERIC"), ("day", Date.builder().optional().build(), "DATE"),
    ("tod", Time.builder().optional().build(), "TIME"), ("ts", Timestamp.builder().optional().build(), "TIMESTAMP"),
    ("s", Schema.OPTIONAL_STRING, "TEXT"), ("b", Schema.OPTIONAL_BYTES, "BYTEA"),
    ("flag", Schema.OPTIONAL_BOOLEAN, "BOOLEAN"),
]


def _value_schema(extra: bool) -> Schema:
    b = SchemaBuilder.struct().name("v").field("id", Schema.INT64)
    for name, schema, _ in FIELDS:
        b = b.field(name, schema)
    if extra:
        b = b.field("extra", Schema.OPTIONAL_STRING)
    return b.build()


VALUE, VALUE_EXTRA = _value_schema(False), _value_schema(True)
UTC = dt.timezone.utc
EDGE_TIMES = [dt.datetime(2024, 3, 31, 0, 59, 59, 999000, UTC), dt.datetime(2024, 3, 31, 1, 0, tzinfo=UTC),
              dt.datetime(2024, 10, 27, 0, 30, tzinfo=UTC), dt.datetime(2024, 10, 27, 1, 30, tzinfo=UTC),
              dt.datetime(2024, 10, 27, 0, 59, 59, 999000, UTC), dt.datetime(1, 1, 1, tzinfo=UTC),
              dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 22, 0, tzinfo=UTC)]
TEXTS = ["", "plain", "it's \"quoted\"", "back\\slash", "line\nbreak\r\n", "tab\there", "ünïcødé €", "😀 emoji",
         "NULL", "\\N", "comma, separated"]
LATIN1_TEXTS = [t for t in TEXTS if t.isascii()] + ["ünïcødé ½ ©", "Ærø ß ÿ ¿¡"]
"""For a LATIN1 database: texts it holds."""
LATIN1_LACKS = ["price €5", "😀 emoji"]
"""Texts a LATIN1 database refuses (SQLSTATE 22P05), as rows it refuses."""


def _float32(rnd: random.Random) -> float:
    pick = rnd.random()
    if pick < 0.3:  # a float32 as it is
        return struct.unpack("f", struct.pack("f", rnd.uniform(-1e6, 1e6)))[0]
    if pick < 0.5:  # halfway between two float32s: rounding a double and rounding the text may differ
        f = struct.unpack("f", struct.pack("f", rnd.uniform(-1e3, 1e3)))[0]
        bits = struct.unpack("I", struct.pack("f", f))[0]
        g = struct.unpack("f", struct.pack("I", bits + 1))[0]
        return (f + g) / 2
    return rnd.choice([0.0, 1.0, -1.5, 3.4028234663852886e38, 1.1754943508222875e-38, 0.1, 1e-45, 16777217.0,
                       rnd.uniform(-1e10, 1e10)])


def _value(rnd: random.Random, i: int, schema: Schema, refused: bool, latin1: bool = False,
           lacks: bool = False) -> Struct:
    """Generated values (texts of :data:`LATIN1_TEXTS` with ``latin1``); ``refused``: one the database
    refuses (an ``i32`` of 13 against a CHECK constraint, or a NUL character in a string; with ``lacks``,
    a string LATIN1 lacks)."""
    def maybe(v):
        return None if rnd.random() < 0.1 else v

    values = {
        "id": i,
        "i8": maybe(rnd.choice([-128, 127, 0, rnd.randint(-128, 127)])),
        "i16": maybe(rnd.choice([-32768, 32767, rnd.randint(-32768, 32767)])),
        "i32": maybe(rnd.choice([-2 ** 31, 2 ** 31 - 1, rnd.choice([-99, -1, 0, 12, 14, 99])])),  # not 13
        "i64": maybe(rnd.choice([-2 ** 63, 2 ** 63 - 1, rnd.randint(-2 ** 62, 2 ** 62)])),
        "f32": maybe(_float32(rnd)),
        "f64": maybe(rnd.choice([0.1, -0.0, 1e308, 5e-324, 1 / 3, rnd.uniform(-1e300, 1e300), rnd.random()])),
        "dec": maybe(decimal.Decimal(rnd.choice([0, 1, -1, 10 ** 20, rnd.randint(-10 ** 12, 10 ** 12)])).scaleb(-3)),
        "day": maybe(rnd.choice([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)])
                     if rnd.random() < 0.2 else dt.date(2000, 1, 1) + dt.timedelta(days=rnd.randint(-9000, 9000))),
        "tod": maybe(dt.time(rnd.randint(0, 23), rnd.randint(0, 59), rnd.randint(0, 59), rnd.randint(0, 999) * 1000)),
        "ts": maybe(rnd.choice(EDGE_TIMES) if rnd.random() < 0.3 else
                    dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=rnd.randint(0, 10 ** 11))),
        "s": maybe(rnd.choice(LATIN1_TEXTS if latin1 else TEXTS) + str(rnd.randint(0, 9))),
        "b": maybe(bytes(rnd.randint(0, 255) for _ in range(rnd.randint(0, 8)))),
        "flag": maybe(rnd.random() < 0.5),
    }
    if schema is VALUE_EXTRA:
        values["extra"] = maybe(f"extra {i}")
    if refused:
        if lacks:
            values["s"] = rnd.choice(LATIN1_LACKS)
        else:
            values.update({"i32": 13} if rnd.random() < 0.5 else {"s": "nul\x00"})
    return Struct(schema, values)


def produce(bootstrap: str, topic: str, n: int, seed: int, partitions: int = PARTITIONS, new_keys: bool = False,
            latin1: bool = False) -> None:
    """``n`` generated records: keys ``0..n/2`` (so keys repeat; with ``new_keys`` each key once, in
    order: upserts that only insert), partition ``key % 3``; tombstones in
    partition 2 only, a second value schema (one more field) in a stretch of partition 1; every 500th
    value one the database refuses, with a key of its own (in upsert mode a refused last row of a
    key leaves the key's earlier rows of that write unwritten, so where the writes are cut would matter).
    ``latin1``: texts a LATIN1 database holds, but in every other refused row (:data:`LATIN1_LACKS`)."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()
    values, keys = JsonConverter(), JsonConverter()
    values.configure({"schemas.enable": True}, is_key=False)
    keys.configure({"schemas.enable": True}, is_key=True)
    rnd = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for n_ in range(n):
        refused = n_ % 500 == 250
        lacks = latin1 and refused and n_ // 500 % 2 == 0  # every other refused row, the first among them
        i = n + n_ if refused else n_ if new_keys else rnd.randint(0, n // 2)
        part = i % partitions
        key = keys.from_connect_data(topic, KEY, Struct(KEY, {"id": i}))
        if part == 2 and rnd.random() < 0.01:
            p.produce(topic, None, key, partition=part)
            continue
        schema = VALUE_EXTRA if part == 1 and n // 3 < n_ < n // 2 else VALUE
        p.produce(topic, values.from_connect_data(topic, schema, _value(rnd, i, schema, refused, latin1, lacks)), key,
                  partition=part)
    assert p.flush(30) == 0


def create_table(engine, table: str, key_columns: list[tuple[str, str]]) -> None:
    cols = [f'"{n}" {t} NOT NULL' for n, t in key_columns]
    cols += [f'"{n}" {t}' for n, _, t in [("id", None, "BIGINT")] + FIELDS if n not in dict(key_columns)]
    cols.append("CONSTRAINT i32_not_13 CHECK (i32 <> 13)")
    cols.append(f"PRIMARY KEY ({', '.join(f'{chr(34)}{n}{chr(34)}' for n, _ in key_columns)})")
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{table}" ({", ".join(cols)})'))


def run(config: dict, worker_props: dict) -> dict:
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    (group,) = plan["groups"]
    return run_group(group, worker_props)


def contents(engine, table: str, order: str) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.text(f'SELECT t::text FROM "{table}" t ORDER BY {order}'))]


def offsets(engine, connector: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT topic, kafka_partition, next_offset FROM copycat_sink_offsets WHERE connector = :c "
            "ORDER BY topic, kafka_partition"), {"c": connector})]


def dead_letters(worker_props: dict, topic: str, group: str) -> list[tuple]:
    c = Consumer(WorkerConfig(worker_props, env={}).consumer_config(group))
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        parts = sorted(md.partitions) if md is not None and not md.error else []
        messages = list(read_to_end(c, [TopicPartition(topic, p, 0) for p in parts], timeout_s=30))
    finally:
        c.close()
    out = []
    for m in messages:
        h = dict(m.headers() or [])
        out.append((h["__connect.errors.partition"], int(h["__connect.errors.offset"]), m.key(), m.value(),
                    h["__connect.errors.exception.message"].decode()))
    return sorted(out)


@pytest.fixture(autouse=True)
def small_rounds(monkeypatch):
    """Consume rounds of 300 messages: many batches and runs, some written in columns, some as records."""
    monkeypatch.setattr(sink_runtime, "CONSUME_BATCH_COLUMNS", 300)


MODES = {
    "upsert-record_key": ({"insert.mode": "upsert", "pk.mode": "record_key"}, [("id", "BIGINT")]),
    # every key new: the upserts are copied straight into the table (appends.py), but for the refused rows
    "upsert-new-keys": ({"insert.mode": "upsert", "pk.mode": "record_key"}, [("id", "BIGINT")]),
    # the same into a LATIN1 database (legacy_pg): its text converted from UTF-8 by the server on every path,
    # and the strings with characters LATIN1 lacks ("€", "😀") refused by it the same way (SQLSTATE 22P05)
    "upsert-new-keys-latin1": ({"insert.mode": "upsert", "pk.mode": "record_key"}, [("id", "BIGINT")]),
    "insert-kafka": ({"insert.mode": "insert", "pk.mode": "kafka"},
                     [("__connect_topic", "TEXT"), ("__connect_partition", "INTEGER"),
                      ("__connect_offset", "BIGINT")]),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_columns_write_what_records_write(kafka_bootstrap, worker_props, unique, request, mode):
    """Given generated records (some refused, some tombstones, a schema change) and tolerance, when the
    sink copies them once through records and once through columns, then both tables, offsets and
    dead letters are the same, and the columnar run wrote most rows through columns."""
    engine, made = request.getfixturevalue("legacy_pg" if mode.endswith("-latin1") else "pg")
    keys_config, key_columns = MODES[mode]
    topic = f"cols_{unique}"
    seed = int(unique, 16)  # a failure names it: produce(..., seed=...) makes the same records again
    produce(kafka_bootstrap, topic, 3000, seed=seed, new_keys=mode.startswith("upsert-new-keys"),
            latin1=mode.endswith("-latin1"))
    results, tables, connectors = {}, {}, {}
    for batch in ("false", "true"):
        table = tables[batch] = f"cols_{unique}_{batch}"
        made.append(table)
        create_table(engine, table, key_columns)
        connectors[batch] = f"jdbc-cols-{unique}-{batch}"
        config = {"name": connectors[batch], "connector.class": "JdbcSink", "topics": topic,
                  "connection.url": engine.url.render_as_string(hide_password=False), "table.name.format": table,
                  "auto.evolve": "true", "db.timezone": "Europe/Berlin", "copycat.batch.enabled": batch,
                  "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"dlq-{unique}-{batch}",
                  "errors.deadletterqueue.context.headers.enable": "true", **keys_config}
        results[batch] = run(config, worker_props)
        assert results[batch]["status"] == "ok", results[batch]
    order = ", ".join(f'"{n}"' for n, _ in key_columns)
    records, columns = (contents(engine, tables[b], order) for b in ("false", "true"))
    assert len(records) > 1000 and columns == records, f"seed {seed}"
    assert offsets(engine, connectors["true"]) == offsets(engine, connectors["false"]), f"seed {seed}"
    assert sum(o for _, _, o in offsets(engine, connectors["true"])) > 2900
    dead = {b: [(p, o, k, v, m.replace(tables[b], "T")) for p, o, k, v, m in
                dead_letters(worker_props, f"dlq-{unique}-{b}", f"check-{unique}-{b}")] for b in ("false", "true")}
    assert dead["true"] == dead["false"] and dead["true"], f"seed {seed} (the generator makes a few refused rows)"
    metrics = {b: results[b]["tasks"][0]["metrics"] for b in results}
    assert metrics["false"].get("rows_columnar", 0) == 0
    assert metrics["true"]["rows_columnar"] > 300, metrics["true"]
    straight, columnar = metrics["true"].get("rows_copied_straight", 0), metrics["true"]["rows_columnar"]
    if mode.startswith("upsert-new-keys"):  # every row written in columns was copied straight into the table
        assert straight == columnar, metrics["true"]
    if mode == "upsert-new-keys-latin1":
        lacking = [m for *_, m in dead["true"] if "has no equivalent in encoding" in m]
        assert lacking, f"seed {seed}: no string LATIN1 lacks was refused {dead['true']}"
        with engine.connect() as conn:  # the text is LATIN1's own, not UTF-8 bytes read as LATIN1
            stored = {r[0] for r in conn.execute(sa.text(f'SELECT s FROM "{tables["true"]}" WHERE s IS NOT NULL'))}
        assert {t.rstrip("0123456789") for t in stored} <= set(LATIN1_TEXTS), f"seed {seed}"
    elif mode == "upsert-record_key":  # keys repeat: batches merged through the staging table, updating rows
        assert straight < columnar and metrics["true"]["tables"][tables["true"]]["updated"] > 0, metrics["true"]
    assert metrics["true"]["columns_added"] == metrics["false"]["columns_added"] == 1


def test_without_tolerance_columns_fail_as_records_fail(kafka_bootstrap, worker_props, unique, pg):
    """Given refused records and no tolerance, when the sink runs through records and through columns,
    then both fail with the same message naming the same record, having committed nothing past it."""
    engine, made = pg
    topic = f"cols_fail_{unique}"
    # one partition: which refused record comes first must not depend on how the consumer interleaves partitions
    produce(kafka_bootstrap, topic, 1500, seed=7, partitions=1)
    errors, committed = {}, {}
    for batch in ("false", "true"):
        table = f"cols_fail_{unique}_{batch}"
        made.append(table)
        create_table(engine, table, [("id", "BIGINT")])
        name = f"jdbc-cols-fail-{unique}-{batch}"
        config = {"name": name, "connector.class": "JdbcSink", "topics": topic,
                  "connection.url": engine.url.render_as_string(hide_password=False), "table.name.format": table,
                  "auto.evolve": "true", "insert.mode": "upsert", "pk.mode": "record_key",
                  "db.timezone": "Europe/Berlin", "copycat.batch.enabled": batch}
        result = run(config, worker_props)
        assert result["status"] == "failed"
        errors[batch] = result["tasks"][0]["error"].replace(table, "T").replace(name, "C")
        committed[batch] = offsets(engine, name)
    assert errors["true"] == errors["false"]
    failed = re.search(r"topic (\S+) partition (\d+) offset (\d+)", errors["true"])
    assert failed, errors["true"]
    for b in committed:  # nothing past the failed record in its partition
        assert all(o <= int(failed.group(3)) for t, p, o in committed[b] if p == int(failed.group(2)))
