"""Debezium's change events: checked field by field against Debezium's documented PostgreSQL examples,
through the JsonConverter with schemas and through Avro, as a consumer written for Debezium reads them.

The reference is Debezium's PostgreSQL connector documentation ("Data change events": the
``customers`` table with ``topic.prefix=PostgreSQL_server``) and, where that page lags its code,
Debezium's source (``source.snapshot`` is an ``io.debezium.data.Enum`` string since 1.x; the page
still shows a boolean).
"""

from __future__ import annotations

import json

import pytest

from airflow_copycat.connectors.postgres_cdc.config import CdcConfig
from airflow_copycat.connectors.postgres_cdc.envelope import NEW_KEY_HEADER, OLD_KEY_HEADER, EventBuilder, SourceInfo
from airflow_copycat.connectors.postgres_cdc.model import UNCHANGED_TOAST, Change, Column, Relation, Truncate
from airflow_copycat.converters.avro.converter import AvroConverter
from airflow_copycat.converters.json_converter import JsonConverter

CONFIG = {"database.hostname": "h", "database.dbname": "postgres", "database.user": "u",
          "topic.prefix": "PostgreSQL_server"}
NOW_NS = 1559033904863841257


def customers(*extra: Column, identity: str = "d") -> Relation:
    return Relation(16384, "inventory", "customers", (
        Column("id", 23, -1, "integer", key=True, optional=False),
        Column("first_name", 1043, 259, "character varying", optional=False),
        Column("last_name", 1043, 259, "character varying", optional=False),
        Column("email", 1043, 259, "character varying", optional=False),
    ) + extra, identity)


def builder(**keys) -> EventBuilder:
    return EventBuilder(CdcConfig.parse(dict(CONFIG, **keys)), clock=lambda: NOW_NS, version="2.7.0.Final")


def as_json(schema, value, is_key=False) -> dict | None:
    c = JsonConverter()
    c.configure({}, is_key)
    data = c.from_connect_data("t", schema, value)
    return None if data is None else json.loads(data)


ANNE = ("1", "Anne", "Kretchmar", "annek@noanswer.org")
SOURCE = SourceInfo(commit_ts_us=1559033904863123, tx_id=555, lsn=24023128, last_commit_lsn=24023119)


def test_create_event_matches_debeziums_documented_example_field_by_field():
    b = builder()
    (event,) = b.events(Change(customers(), "c", None, ANNE), SOURCE)

    assert event.topic == "PostgreSQL_server.inventory.customers"
    key = as_json(event.key_schema, event.key, is_key=True)
    assert key["schema"] == {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "id"}],
                             "optional": False, "name": "PostgreSQL_server.inventory.customers.Key"}
    assert key["payload"] == {"id": 1}

    value = as_json(event.value_schema, event.value)
    schema, payload = value["schema"], value["payload"]
    assert schema["name"] == "PostgreSQL_server.inventory.customers.Envelope" and schema["optional"] is False
    fields = {f["field"]: f for f in schema["fields"]}
    assert list(fields) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    for side in ("before", "after"):
        assert fields[side]["name"] == "PostgreSQL_server.inventory.customers.Value"
        assert fields[side]["optional"] is True
        assert [(f["field"], f["type"], f["optional"]) for f in fields[side]["fields"]] == [
            ("id", "int32", False), ("first_name", "string", False), ("last_name", "string", False),
            ("email", "string", False)]
    source = fields["source"]
    assert source["name"] == "io.debezium.connector.postgresql.Source" and source["optional"] is False
    documented = {"version": ("string", False), "connector": ("string", False), "name": ("string", False),
                  "ts_ms": ("int64", False), "db": ("string", False), "schema": ("string", False),
                  "table": ("string", False), "txId": ("int64", True), "lsn": ("int64", True),
                  "xmin": ("int64", True)}
    got = {f["field"]: (f["type"], f["optional"]) for f in source["fields"]}
    assert {k: got[k] for k in documented} == documented
    snapshot = next(f for f in source["fields"] if f["field"] == "snapshot")
    assert snapshot["name"] == "io.debezium.data.Enum" and snapshot["default"] == "false"
    assert (fields["op"]["type"], fields["op"]["optional"]) == ("string", False)
    assert (fields["ts_ms"]["type"], fields["ts_ms"]["optional"]) == ("int64", True)

    assert payload["before"] is None
    assert payload["after"] == {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
    assert payload["source"] == {
        "version": "2.7.0.Final", "connector": "postgresql", "name": "PostgreSQL_server",
        "ts_ms": 1559033904863, "ts_us": 1559033904863123, "ts_ns": 1559033904863123000, "snapshot": "false",
        "db": "postgres", "sequence": '["24023119","24023128"]', "schema": "inventory", "table": "customers",
        "txId": 555, "lsn": 24023128, "xmin": None}
    assert payload["op"] == "c"
    assert (payload["ts_ms"], payload["ts_us"], payload["ts_ns"]) == (1559033904863, 1559033904863841, NOW_NS)
    assert payload["transaction"] is None


def test_update_with_default_replica_identity_has_no_before_and_with_full_has_the_old_row():
    b = builder()
    (update,) = b.events(Change(customers(), "u", None, ("1", "Anne Marie", "Kretchmar", "annek@noanswer.org")),
                         SOURCE)
    payload = as_json(update.value_schema, update.value)["payload"]
    assert payload["op"] == "u" and payload["before"] is None and payload["after"]["first_name"] == "Anne Marie"
    assert as_json(update.key_schema, update.key, True)["payload"] == {"id": 1}

    full = customers(identity="f")
    (update,) = b.events(Change(full, "u", ANNE, ("1", "Anne Marie", "Kretchmar", "annek@noanswer.org")), SOURCE)
    payload = as_json(update.value_schema, update.value)["payload"]
    assert payload["before"]["first_name"] == "Anne" and payload["after"]["first_name"] == "Anne Marie"


def test_delete_then_tombstone_and_the_documented_before_image():
    b = builder()
    delete, tombstone = b.events(Change(customers(), "d", ("1", None, None, None), None), SOURCE)

    payload = as_json(delete.value_schema, delete.value)["payload"]
    assert payload["op"] == "d" and payload["after"] is None
    # only the key is in the WAL; NOT NULL columns get Debezium's fallback values, never a null
    assert payload["before"] == {"id": 1, "first_name": "", "last_name": "", "email": ""}
    assert tombstone.value is None and tombstone.key == delete.key and tombstone.topic == delete.topic
    assert as_json(tombstone.value_schema, tombstone.value) is None  # a Kafka tombstone: null bytes

    assert len(builder(**{"tombstones.on.delete": "false"}).events(
        Change(customers(), "d", ("1", None, None, None), None), SOURCE)) == 1


def test_an_update_of_the_key_is_a_delete_tombstone_and_create_with_debeziums_headers():
    b = builder()
    events = b.events(Change(customers(), "u", ("1", None, None, None), ("2",) + ANNE[1:]), SOURCE)

    assert [(e.op, e.value is None) for e in events] == [("d", False), ("", True), ("c", False)]
    delete, tombstone, create = events
    assert delete.key["id"] == 1 and tombstone.key["id"] == 1 and create.key["id"] == 2
    assert dict(delete.headers) == {NEW_KEY_HEADER: b'{"id":2}'}
    assert dict(create.headers) == {OLD_KEY_HEADER: b'{"id":1}'}
    assert as_json(create.value_schema, create.value)["payload"]["after"]["id"] == 2


def test_truncate_is_skipped_by_default_and_otherwise_one_keyless_event_per_table():
    orders = Relation(16390, "inventory", "orders", (Column("id", 20, key=True, optional=False),))
    truncate = Truncate((customers(), orders))
    assert builder().truncate_events(truncate, SOURCE) == []  # Debezium's skipped.operations=t

    events = builder(**{"skipped.operations": "none"}).truncate_events(truncate, SOURCE)
    assert [e.topic for e in events] == ["PostgreSQL_server.inventory.customers", "PostgreSQL_server.inventory.orders"]
    for event in events:
        assert event.key is None and event.key_schema is None
        payload = as_json(event.value_schema, event.value)["payload"]
        assert payload["op"] == "t" and payload["before"] is None and payload["after"] is None
        assert payload["source"]["table"] in ("customers", "orders")


def test_skipped_operations_drop_their_events():
    b = builder(**{"skipped.operations": "u,d"})
    assert b.events(Change(customers(), "u", None, ANNE), SOURCE) == []
    assert b.events(Change(customers(), "d", ANNE, None), SOURCE) == []
    assert len(b.events(Change(customers(), "c", None, ANNE), SOURCE)) == 1


def test_unchanged_toast_values_carry_the_placeholder():
    relation = customers(Column("bio", 25, -1, "text"), Column("photo", 17, -1, "bytea"))
    (event,) = builder().events(Change(relation, "u", None, ANNE + (UNCHANGED_TOAST, UNCHANGED_TOAST)), SOURCE)
    after = event.value["after"]
    assert after["bio"] == "__debezium_unavailable_value"
    assert after["photo"] == b"__debezium_unavailable_value"
    assert as_json(event.value_schema, event.value)["payload"]["after"]["bio"] == "__debezium_unavailable_value"


def test_column_filters_shape_the_value_but_never_the_key():
    b = builder(**{"column.exclude.list": r"inventory\.customers\.(email|id)"})
    (event,) = b.events(Change(customers(), "c", None, ANNE), SOURCE)
    assert [f.name for f in event.value_schema.field("after").schema.fields] == ["first_name", "last_name"]
    assert event.key["id"] == 1


def test_a_new_relation_after_alter_table_gives_new_schemas():
    b = builder()
    before_alter = customers()
    after_alter = Relation(before_alter.oid, "inventory", "customers",
                           tuple(c for c in before_alter.columns if c.name != "email")
                           + (Column("phone", 25, -1, "text"),))
    (old,) = b.events(Change(before_alter, "c", None, ANNE), SOURCE)
    (new,) = b.events(Change(after_alter, "c", None, ("2", "Bo", "Li", "555")), SOURCE)

    assert [f.name for f in old.value_schema.field("after").schema.fields][-1] == "email"
    assert [f.name for f in new.value_schema.field("after").schema.fields][-1] == "phone"
    assert as_json(new.value_schema, new.value)["payload"]["after"] == {"id": 2, "first_name": "Bo",
                                                                       "last_name": "Li", "phone": "555"}
    assert b.value_schema(before_alter) is old.value_schema  # built once per relation definition


def test_a_table_without_key_has_null_keys():
    log = Relation(1, "public", "log", (Column("line", 25, -1, "text"),), "d")
    (event,) = builder().events(Change(log, "c", None, ("hello",)), SOURCE)
    assert event.key is None and event.key_schema is None


def test_snapshot_reads_are_op_r_with_the_snapshot_marker():
    b = builder()
    first = b.read_event(customers(), ANNE, SourceInfo(commit_ts_us=1, lsn=100, snapshot="first"))
    last = b.read_event(customers(), ANNE, SourceInfo(commit_ts_us=1, lsn=100, snapshot="last"))
    p = as_json(first.value_schema, first.value)["payload"]
    assert p["op"] == "r" and p["before"] is None and p["source"]["snapshot"] == "first"
    assert as_json(last.value_schema, last.value)["payload"]["source"]["snapshot"] == "last"


def test_events_round_trip_through_avro_with_debeziums_names():
    b = builder()
    relation = customers(Column("balance", 1700, (10 << 16 | 2) + 4, "numeric"), Column("score", 1700, -1, "numeric"))
    (event,) = b.events(Change(relation, "c", None, ANNE + ("12.50", "3.14159")), SOURCE)
    conv = AvroConverter()
    conv.configure({}, False)

    back = conv.to_connect_data(event.topic, conv.from_connect_data(event.topic, event.value_schema, event.value))

    assert back.schema.name == "PostgreSQL_server.inventory.customers.Envelope"
    assert back.value["after"]["email"] == "annek@noanswer.org"
    assert str(back.value["after"]["balance"]) == "12.50"
    assert back.value["after"]["score"]["scale"] == 5
    assert back.value["source"]["lsn"] == 24023128 and back.value["op"] == "c"


def test_avro_name_adjustment_for_names_avro_cannot_hold():
    relation = Relation(1, "my-schema", "order-items", (Column("item-id", 23, key=True, optional=False),))
    b = builder(**{"schema.name.adjustment.mode": "avro", "field.name.adjustment.mode": "avro"})
    (event,) = b.events(Change(relation, "c", None, ("1",)), SOURCE)
    assert event.topic == "PostgreSQL_server.my-schema.order-items"  # topics keep the names
    assert event.value_schema.name == "PostgreSQL_server.my_schema.order_items.Envelope"
    assert event.key_schema.fields[0].name == "item_id"


@pytest.mark.parametrize("op", ["c", "r"])
def test_a_value_that_does_not_parse_names_the_column(op):
    relation = Relation(1, "public", "t", (Column("id", 23, key=True, optional=False), Column("d", 1082)))
    with pytest.raises(Exception, match="column 'd'"):
        builder().events(Change(relation, op, None, ("1", "not a date")), SOURCE)


def test_debeziums_flattening_transform_reads_these_events_as_rows():
    from airflow_copycat.connect.records import SourceRecord
    from airflow_copycat.transforms.debezium import ExtractNewRecordState

    unwrap = ExtractNewRecordState()
    unwrap.configure({"delete.tombstone.handling.mode": "rewrite", "add.fields": "op,table,lsn"})
    b = builder()
    events = (b.events(Change(customers(), "c", None, ANNE), SOURCE)
              + b.events(Change(customers(), "d", ("1", None, None, None), None), SOURCE))

    rows = [unwrap.apply(SourceRecord(e.topic, None, e.key_schema, e.key, e.value_schema, e.value)) for e in events]

    created, deleted, tombstone = rows
    assert created.value.to_dict() == {"id": 1, "first_name": "Anne", "last_name": "Kretchmar",
                                       "email": "annek@noanswer.org", "__op": "c", "__table": "customers",
                                       "__lsn": 24023128, "__deleted": "false"}
    assert deleted.value["__deleted"] == "true" and deleted.value["id"] == 1 and deleted.key["id"] == 1
    assert tombstone is None


def test_message_key_columns_give_a_table_without_primary_key_its_event_keys():
    log = Relation(1, "public", "visits", (Column("site", 25, -1, "text", optional=False),
                                           Column("day", 1082, -1, "date", optional=False),
                                           Column("n", 23)), "f")
    b = builder(**{"message.key.columns": r"public\.visits:day,site"})
    delete, tombstone = b.events(Change(log, "d", ("a", "2024-01-02", "3"), None), SOURCE)

    assert as_json(delete.key_schema, delete.key, True)["payload"] == {"day": 19724, "site": "a"}
    assert tombstone.key == delete.key and tombstone.value is None
