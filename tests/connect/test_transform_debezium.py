"""Debezium's ExtractNewRecordState (event flattening) on change events as Debezium's PostgreSQL
connector writes them: creates, updates, snapshot reads, deletes with their tombstones and
truncates, in every delete/tombstone mode, schema'd and schemaless; on batches of change events
against the same transform record by record; and end to end through the source and sink loops.

The cases follow Debezium's ExtractNewRecordStateTest and its event flattening documentation.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_copycat.connect import SourceBatch
from airflow_copycat.connect.data import Schema, SchemaBuilder, Struct
from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.connect.records import SinkRecord, SourceRecord
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.batch_transforms import apply_chain
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.transforms import build_chain, resolve
from airflow_copycat.runtime.worker import WorkerConfig
from airflow_copycat.transforms.debezium import ExtractNewRecordState

DEBEZIUM = "io.debezium.transforms.ExtractNewRecordState"
TOPIC = "dbserver1.inventory.customers"

# ------------------------------------------------------------ change events as Debezium writes them

MICRO_TS = SchemaBuilder.int64().name("io.debezium.time.MicroTimestamp").version(1).optional().build()
ROW = (SchemaBuilder.struct().name(TOPIC + ".Value").optional()
       .field("id", Schema.INT32).field("first_name", Schema.STRING).field("email", Schema.OPTIONAL_STRING)
       .field("created_at", MICRO_TS).build())
KEY = SchemaBuilder.struct().name(TOPIC + ".Key").field("id", Schema.INT32).build()
SOURCE = (SchemaBuilder.struct().name("io.debezium.connector.postgresql.Source")
          .field("version", Schema.STRING).field("connector", Schema.STRING).field("name", Schema.STRING)
          .field("ts_ms", Schema.INT64)
          .field("snapshot", SchemaBuilder.string().name("io.debezium.data.Enum").version(1)
                 .parameter("allowed", "true,last,false,incremental").optional().default_value("false").build())
          .field("db", Schema.STRING).field("schema", Schema.STRING).field("table", Schema.STRING)
          .field("txId", Schema.OPTIONAL_INT64).field("lsn", Schema.OPTIONAL_INT64).build())
TRANSACTION = (SchemaBuilder.struct().name("event.block").version(1).optional().field("id", Schema.STRING)
               .field("total_order", Schema.INT64).field("data_collection_order", Schema.INT64).build())
ENVELOPE = (SchemaBuilder.struct().name(TOPIC + ".Envelope").version(2)
            .field("before", ROW).field("after", ROW).field("source", SOURCE).field("transaction", TRANSACTION)
            .field("op", Schema.STRING).field("ts_ms", Schema.OPTIONAL_INT64).build())

ALICE = {"id": 1001, "first_name": "Sally", "email": "sally@example.com", "created_at": 1_700_000_000_000_000}
ALICE2 = dict(ALICE, email="sally.t@example.com")


def _source(lsn=33_000_000, table="customers", snapshot="false") -> Struct:
    return Struct(SOURCE, {"version": "3.0.0.Final", "connector": "postgresql", "name": "dbserver1",
                           "ts_ms": 1_700_000_001_000, "snapshot": snapshot, "db": "postgres",
                           "schema": "inventory", "table": table, "txId": 777, "lsn": lsn})


def event(op: str, before: dict | None = None, after: dict | None = None, *, tx: dict | None = None,
          lsn: int = 33_000_000, key: int | None = None) -> SourceRecord:
    """A change event of the customers table, keyed by the row's id (a truncate has no key)."""
    row_id = key if key is not None else (after or before or {}).get("id")
    value = Struct(ENVELOPE, {
        "before": None if before is None else Struct(ROW, before), "after": None if after is None else Struct(ROW, after),
        "source": _source(lsn, snapshot="true" if op == "r" else "false"),
        "transaction": None if tx is None else Struct(TRANSACTION, tx), "op": op, "ts_ms": 1_700_000_002_000})
    return SourceRecord(TOPIC, 0, None if row_id is None else KEY, None if row_id is None else Struct(KEY, {"id": row_id}),
                        ENVELOPE, value, 1_700_000_002_000, source_partition={"server": "dbserver1"},
                        source_offset={"lsn": lsn})


def create(row=ALICE, **kw):
    return event("c", after=row, **kw)


def update(old=ALICE, new=ALICE2, **kw):
    return event("u", before=old, after=new, **kw)


def read(row=ALICE, **kw):
    return event("r", after=row, **kw)


def delete(row=ALICE2, **kw):
    return event("d", before=row, **kw)


def truncate():
    return event("t")


def tombstone(row_id=1001):
    return SourceRecord(TOPIC, 0, KEY, Struct(KEY, {"id": row_id}), None, None, 1_700_000_002_000)


def schemaless(record: SourceRecord) -> SourceRecord:
    """``record`` as JsonConverter with schemas.enable=false reads it back: maps, no schemas."""
    return record.new_record(key_schema=None, key=None if record.key is None else record.key.to_dict(),
                             value_schema=None, value=None if record.value is None else record.value.to_dict())


def unwrap(**configs) -> ExtractNewRecordState:
    t = ExtractNewRecordState()
    t.configure(configs)
    return t


def mode(name: str) -> ExtractNewRecordState:
    return unwrap(**{"delete.tombstone.handling.mode": name})


def row_of(record):
    """The row a sink would write: a map of the value (None for a null value)."""
    if record is None or record.value is None:
        return None
    return record.value.to_dict() if isinstance(record.value, Struct) else record.value


def with_deleted(schema: Schema) -> Schema:
    b = SchemaBuilder.struct().name(schema.name).optional()
    for f in schema.fields:
        b.field(f.name, f.schema)
    return b.field("__deleted", Schema.OPTIONAL_STRING).build()


BOTH = pytest.mark.parametrize("shape", ["schema", "schemaless"])


def shaped(record, shape):
    return record if shape == "schema" else schemaless(record)


# ------------------------------------------------------------------------------------ the basics


def test_both_names_resolve_to_the_transform():
    assert resolve(DEBEZIUM) is ExtractNewRecordState
    assert resolve("ExtractNewRecordState") is ExtractNewRecordState
    assert ExtractNewRecordState.kafka_class == DEBEZIUM


@BOTH
@pytest.mark.parametrize("make, row", [(create, ALICE), (update, ALICE2), (read, ALICE)])
def test_create_update_and_read_become_the_after_row(shape, make, row):
    # Given a change event, When it is flattened with the defaults
    given = shaped(make(), shape)
    out = unwrap().apply(given)
    # Then the value is the after row, with the after field's schema, and the key, topic and offset stay
    assert row_of(out) == row
    assert out.value_schema == (ROW if shape == "schema" else None)
    assert (out.topic, out.key, out.source_offset, out.timestamp) == (TOPIC, given.key, given.source_offset,
                                                                      given.timestamp)


@BOTH
def test_default_mode_is_tombstone_a_delete_keeps_its_key_with_a_null_value(shape):
    t = unwrap()
    # When a delete and its tombstone are flattened
    out = t.apply(shaped(delete(), shape))
    # Then the delete is a null value under the row's key (a JDBC sink's delete), its schema still the row's
    assert out.value is None and out.key == shaped(delete(), shape).key
    assert out.value_schema == (ROW if shape == "schema" else None)
    # and the tombstone and a truncate are dropped
    assert t.apply(shaped(tombstone(), shape)) is None
    assert t.apply(shaped(truncate(), shape)) is None


@BOTH
def test_drop_mode_drops_deletes_tombstones_and_truncates_but_keeps_the_rest(shape):
    t = mode("drop")
    assert [t.apply(shaped(r, shape)) for r in (delete(), tombstone(), truncate())] == [None, None, None]
    assert row_of(t.apply(shaped(update(), shape))) == ALICE2


@BOTH
@pytest.mark.parametrize("name", ["rewrite", "rewrite-with-tombstone"])
def test_rewrite_marks_every_row_with_deleted(shape, name):
    t = mode(name)
    # When a create, an update and a delete are flattened in a rewrite mode
    created, updated, deleted = (t.apply(shaped(r, shape)) for r in (create(), update(), delete()))
    # Then inserts and updates say __deleted "false" and the delete is its before row with "true"
    assert row_of(created) == dict(ALICE, __deleted="false")
    assert row_of(updated) == dict(ALICE2, __deleted="false")
    assert row_of(deleted) == dict(ALICE2, __deleted="true")
    if shape == "schema":  # the after schema plus an optional string, as Debezium's
        assert created.value_schema == deleted.value_schema == with_deleted(ROW)
    # and only rewrite-with-tombstone keeps the tombstone, as it was
    tomb = shaped(tombstone(), shape)
    assert t.apply(tomb) == (tomb if name == "rewrite-with-tombstone" else None)
    assert t.apply(shaped(truncate(), shape)) is None


@BOTH
def test_delete_to_tombstone_turns_the_delete_into_a_real_tombstone(shape):
    t = mode("delete-to-tombstone")
    out = t.apply(shaped(delete(), shape))
    assert out.value is None and out.value_schema is None and out.key == shaped(delete(), shape).key
    assert t.apply(shaped(tombstone(), shape)) is None
    assert row_of(t.apply(shaped(create(), shape))) == ALICE


def test_legacy_keys_apply_when_the_new_one_is_not_set():
    # Given the keys of Debezium before 3.1
    keep_none = unwrap(**{"drop.tombstones": "false", "delete.handling.mode": "none"})
    assert keep_none.apply(delete()).value is None and keep_none.apply(tombstone()) == tombstone()
    legacy_default = unwrap(**{"drop.tombstones": "true"})  # delete.handling.mode defaults to drop
    assert legacy_default.apply(delete()) is None and legacy_default.apply(tombstone()) is None
    rewrite = unwrap(**{"delete.handling.mode": "rewrite"})
    assert row_of(rewrite.apply(delete())) == dict(ALICE2, __deleted="true")
    assert rewrite.apply(tombstone()) is None
    # When the new key is set too, Then it wins
    both = unwrap(**{"delete.tombstone.handling.mode": "rewrite-with-tombstone", "delete.handling.mode": "drop",
                     "drop.tombstones": "true"})
    assert row_of(both.apply(delete()))["__deleted"] == "true" and both.apply(tombstone()) == tombstone()


@pytest.mark.parametrize("configs, key", [
    ({"delete.tombstone.handling.mode": "delete"}, "delete.tombstone.handling.mode"),
    ({"delete.handling.mode": "rewrite-with-tombstone"}, "delete.handling.mode"),
    ({"add.fields": "source.ts_ms:a:b"}, "add.fields"),
    ({"drop.tombstones": "maybe"}, "drop.tombstones"),
])
def test_a_bad_key_is_reported_with_its_name(configs, key):
    with pytest.raises(ConfigException) as e:
        unwrap(**configs)
    assert key in str(e.value)


HEARTBEAT = SchemaBuilder.struct().name("io.debezium.connector.common.Heartbeat").field("ts_ms", Schema.INT64).build()
MESSAGE = (SchemaBuilder.struct().name("io.debezium.connector.postgresql.MessageValue").field("op", Schema.STRING)
           .field("ts_ms", Schema.INT64).build())
UNNAMED = SchemaBuilder.struct().field("op", Schema.STRING).field("before", Schema.OPTIONAL_STRING).build()


@pytest.mark.parametrize("schema, value", [
    (HEARTBEAT, Struct(HEARTBEAT, {"ts_ms": 1})),
    (MESSAGE, Struct(MESSAGE, {"op": "m", "ts_ms": 1})),
    (UNNAMED, Struct(UNNAMED, {"op": "c"})),
    (Schema.STRING, "a line"),
    (None, {"op": "c", "id": 3}),
    (None, "schemaless text"),
], ids=["heartbeat", "logical-decoding-message", "unnamed-struct", "string", "map-without-before-after", "text"])
def test_records_that_are_not_change_events_pass_through_unchanged(schema, value):
    record = SourceRecord("t", 0, None, None, schema, value)
    t = unwrap(**{"delete.tombstone.handling.mode": "rewrite", "add.fields": "op", "add.headers": "op",
                  "route.by.field": "first_name"})
    assert t.apply(record) is record


# ----------------------------------------------------------------------------- fields and headers


@BOTH
def test_add_fields_appends_envelope_metadata_after_the_row(shape):
    # Given Debezium's documented example plus an envelope field, a renamed one and a missing one
    t = unwrap(**{"delete.tombstone.handling.mode": "rewrite",
                  "add.fields": "op,table,lsn,source.ts_ms,ts_ms,source.ts_ms:event_ts,no_such_field,id"})
    out = t.apply(shaped(update(tx={"id": "571", "total_order": 1, "data_collection_order": 1}), shape))
    # Then each field the envelope has comes after the row and __deleted, named as Debezium names it
    assert row_of(out) == dict(ALICE2, __deleted="false", __op="u", __table="customers", __lsn=33_000_000,
                               __source_ts_ms=1_700_000_001_000, __ts_ms=1_700_000_002_000,
                               __event_ts=1_700_000_001_000, __id="571")
    if shape == "schema":
        added = {f.name: f.schema for f in out.value_schema.fields[len(ROW.fields) + 1:]}
        assert added == {"__op": Schema.OPTIONAL_STRING, "__table": Schema.OPTIONAL_STRING,
                         "__lsn": Schema.OPTIONAL_INT64, "__source_ts_ms": Schema.OPTIONAL_INT64,
                         "__ts_ms": Schema.OPTIONAL_INT64, "__event_ts": Schema.OPTIONAL_INT64,
                         "__id": Schema.OPTIONAL_STRING}
    # and a transaction-less event (a snapshot) has a null transaction id, not a missing field
    assert row_of(t.apply(shaped(read(), shape)))["__id"] is None


@BOTH
def test_add_fields_on_deletes_only_in_the_rewrite_modes(shape):
    fields = {"add.fields": "op,lsn", "add.fields.prefix": "_dbz_"}
    rewritten = unwrap(**{"delete.tombstone.handling.mode": "rewrite", **fields}).apply(shaped(delete(), shape))
    assert row_of(rewritten) == dict(ALICE2, __deleted="true", _dbz_op="d", _dbz_lsn=33_000_000)
    nulled = unwrap(**fields).apply(shaped(delete(), shape))
    assert nulled.value is None


@BOTH
def test_add_headers_carries_metadata_and_a_tombstone_gets_op_d(shape):
    t = unwrap(**{"delete.tombstone.handling.mode": "rewrite-with-tombstone", "add.headers": "op,lsn,db,txId,nope",
                  "add.headers.prefix": "dbz."})
    given = shaped(create(), shape).new_record(headers=(("trace", b"t-1"),))
    out = t.apply(given)
    # Then the record keeps its headers and gains one per field the envelope has, as text
    assert out.headers == (("trace", b"t-1"), ("dbz.op", b"c"), ("dbz.lsn", b"33000000"),
                           ("dbz.db", b"postgres"), ("dbz.txId", b"777"))
    assert t.apply(shaped(tombstone(), shape)).headers == (("dbz.op", b"d"),)


@BOTH
def test_route_by_field_sends_rows_to_the_topic_a_column_names(shape):
    t = unwrap(**{"delete.tombstone.handling.mode": "rewrite", "route.by.field": "first_name"})
    assert t.apply(shaped(update(), shape)).topic == "Sally"
    assert t.apply(shaped(delete(dict(ALICE2, first_name="Gone")), shape)).topic == "Gone"
    assert t.apply(shaped(create(dict(ALICE, first_name="")), shape)).topic == TOPIC  # empty: the topic stays


def test_replace_null_with_default_applies_to_rewritten_rows_only():
    # Given a row whose nullable column has a default, and an event where it is null
    row = (SchemaBuilder.struct().name("s.t.Value").optional().field("id", Schema.INT32)
           .field("status", SchemaBuilder.string().optional().default_value("new").build()).build())
    envelope = (SchemaBuilder.struct().name("s.t.Envelope").field("before", row).field("after", row)
                .field("op", Schema.STRING).build())
    record = SinkRecord("s.t", 0, None, None, envelope,
                        Struct(envelope, {"after": Struct(row, {"id": 1}), "op": "c"}), kafka_offset=5)
    # Then the rewrite modes read the null as its default unless told not to, as Debezium's InsertField does
    assert unwrap().apply(record).value.get_without_default("status") is None
    assert mode("rewrite").apply(record).value.get_without_default("status") == "new"
    off = unwrap(**{"delete.tombstone.handling.mode": "rewrite", "replace.null.with.default": "false"})
    assert off.apply(record).value.get_without_default("status") is None
    assert off.apply(record).kafka_offset == 5


# --------------------------------------------------------------------------------------- batches

_ARROW_ROW = pa.struct([("id", pa.int32()), ("first_name", pa.string()), ("email", pa.string()),
                        ("created_at", pa.int64())])
_ARROW = {
    "before": _ARROW_ROW, "after": _ARROW_ROW,
    "source": pa.struct([(f.name, pa.int64() if f.schema.type.value == "int64" else pa.string())
                         for f in SOURCE.fields]),
    "transaction": pa.struct([("id", pa.string()), ("total_order", pa.int64()),
                              ("data_collection_order", pa.int64())]),
    "op": pa.string(), "ts_ms": pa.int64(),
}


def batch_of(records: list[SourceRecord]) -> SourceBatch:
    """The records as one batch of change events (the key's id a column beside the envelope's)."""
    rows = [r.value.to_dict() for r in records]
    columns = {name: pa.array([row[name] for row in rows], arrow) for name, arrow in _ARROW.items()}
    columns["key_id"] = pa.array([r.key.get("id") for r in records], pa.int32())
    key = SchemaBuilder.struct().name(KEY.name).field("key_id", Schema.INT32).build()
    return SourceBatch(TOPIC, pa.table(columns), ENVELOPE, {"server": "dbserver1"}, {"lsn": len(records)},
                       key_fields=("key_id",), key_schema=key,
                       row_offsets=[{"lsn": i + 1} for i in range(len(records))], timestamp=1_700_000_002_000)


_ROWS = st.fixed_dictionaries({
    "id": st.integers(-2**31, 2**31 - 1), "first_name": st.text(max_size=8),
    "email": st.one_of(st.none(), st.text(max_size=8)), "created_at": st.one_of(st.none(), st.integers(0, 2**53))})
_EVENTS = st.one_of(
    st.builds(lambda r, lsn: create(r, lsn=lsn), _ROWS, st.integers(0, 2**40)),
    st.builds(lambda a, b: update(a, b), _ROWS, _ROWS),
    st.builds(lambda r, tx: read(r, tx=tx), _ROWS, st.one_of(st.none(), st.fixed_dictionaries(
        {"id": st.text(max_size=4), "total_order": st.integers(0, 9), "data_collection_order": st.integers(0, 9)}))),
    st.builds(lambda r: delete(r), _ROWS),
)
_CONFIGS = st.fixed_dictionaries({
    "delete.tombstone.handling.mode": st.sampled_from(["tombstone", "drop", "rewrite", "rewrite-with-tombstone",
                                                       "delete-to-tombstone"]),
    "add.fields": st.sampled_from(["", "op", "op,table,lsn,source.ts_ms,ts_ms", "id,total_order,nope",
                                   "source.ts_ms:event_ts,ts_ms"]),
})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_EVENTS, min_size=1, max_size=12), configs=_CONFIGS)
def test_a_batch_of_change_events_gives_what_each_record_gives(events, configs):
    # Given a batch of change events and a chain flattening them
    chain = build_chain({"name": "cdc", "connector.class": "x", "transforms": "unwrap",
                         "transforms.unwrap.type": DEBEZIUM,
                         **{f"transforms.unwrap.{k}": v for k, v in configs.items()}})
    batch = batch_of(events)
    # When the chain runs on the batch
    out = apply_chain(chain, batch)
    expected = [r for r in (chain.apply(x) for x in batch.to_records()) if r is not None]
    # Then a batch of creates, updates and reads (and deletes, when rewritten) runs in columns
    deletes = any(e.value.get("op") == "d" for e in events)
    if not deletes or configs["delete.tombstone.handling.mode"].startswith("rewrite"):
        assert out is not None, "should run in columns"
    # and whenever it ran in columns, its records are the record path's, row for row
    if out is not None:
        assert repr(out.to_records()) == repr(expected)


def test_a_batch_that_is_not_change_events_passes_through_and_truncates_go_row_by_row():
    chain = build_chain({"name": "cdc", "connector.class": "x", "transforms": "u", "transforms.u.type": DEBEZIUM})
    plain = SchemaBuilder.struct().name("gen.Order").field("id", Schema.INT64).build()
    rows = SourceBatch("orders", pa.table({"id": pa.array([1, 2], pa.int64())}), plain, {"p": 1}, {"row": 2})
    assert apply_chain(chain, rows) is rows
    assert apply_chain(chain, batch_of([create(), truncate().new_record(key=Struct(KEY, {"id": 0}))])) is None


# ------------------------------------------------------------------------------------ end to end


def _run(config: dict, worker_props: dict) -> dict:
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    (task,) = [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]
    return task


def _messages(bootstrap: str, topic: str) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.partition.eof": True})
    try:
        return list(read_to_end(c, [TopicPartition(topic, 0, 0)], timeout_s=30))
    finally:
        c.close()


def _with_schema(schema: Schema, value) -> bytes:
    conv = JsonConverter()
    conv.configure({"schemas.enable": "true"}, is_key=False)
    return conv.from_connect_data(TOPIC, schema, value)


def test_a_source_flattens_debezium_events_on_their_way_into_kafka(worker_props, kafka_bootstrap, unique):
    # Given a source emitting a create, an update, a delete and its tombstone as Debezium writes them
    topic = f"{TOPIC}-{unique}"
    given = [create(), update(), delete(), tombstone()]
    described = [{"topic": topic, "key_schema": json.loads(_with_schema(KEY, r.key))["schema"],
                  "key": r.key.to_dict(), "value_schema": json.loads(_with_schema(ENVELOPE, r.value))["schema"]
                  if r.value is not None else None, "value": None if r.value is None else
                  json.loads(_with_schema(ENVELOPE, r.value))["payload"]} for r in given]
    # When it runs with the transform under Debezium's class name, rewriting deletes and adding op and table
    config = {"name": f"cdc-{unique}", "connector.class": "tests.support.record_sources:FixedRecordsSource",
              "records": json.dumps(described), "transforms": "unwrap", "transforms.unwrap.type": DEBEZIUM,
              "transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
              "transforms.unwrap.add.fields": "op,table"}
    task = _run(config, worker_props)
    # Then Kafka holds three plain rows (the tombstone dropped) with the flattened schema
    assert task["status"] == "ok"
    conv = JsonConverter()
    conv.configure({"schemas.enable": "true"}, is_key=False)
    landed = [conv.to_connect_data(topic, m.value()) for m in _messages(kafka_bootstrap, topic)]
    assert [v.value.to_dict() for v in landed] == [
        dict(ALICE, __deleted="false", __op="c", __table="customers"),
        dict(ALICE2, __deleted="false", __op="u", __table="customers"),
        dict(ALICE2, __deleted="true", __op="d", __table="customers")]
    assert [f.name for f in landed[0].schema.fields] == [f.name for f in ROW.fields] + ["__deleted", "__op",
                                                                                        "__table"]


def test_a_sink_reads_schemaless_debezium_json_as_rows_and_null_deletes(worker_props, kafka_bootstrap, unique,
                                                                         tmp_path):
    # Given Debezium JSON without schemas in a topic: a snapshot read, an update, a delete and its tombstone
    topic = f"{TOPIC}-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for r in (read(), update(), delete(), tombstone()):
        plain = schemaless(r)
        producer.produce(topic, key=json.dumps(plain.key).encode(),
                         value=None if plain.value is None else json.dumps(plain.value).encode())
    producer.flush(10)
    # When a sink reads it with the transform's defaults (its short name)
    config = {"name": f"cdc-sink-{unique}", "connector.class": "tests.support.connectors:JsonFileSink",
              "topics": topic, "dir": str(tmp_path), "tasks.max": 1,
              "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "false",
              "value.converter": "org.apache.kafka.connect.json.JsonConverter",
              "value.converter.schemas.enable": "false",
              "transforms": "unwrap", "transforms.unwrap.type": "ExtractNewRecordState"}
    task = _run(config, worker_props)
    # Then the sink got the rows, the delete as a null value at its offset, and the tombstone was dropped
    assert task["status"] == "ok"
    rows = [json.loads(line) for f in sorted(tmp_path.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert rows == [[topic, 0, 0, ALICE], [topic, 0, 1, ALICE2], [topic, 0, 2, None]]
