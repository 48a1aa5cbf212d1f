"""Connect <-> Avro schemas and values, as Confluent's AvroData maps them.

fastavro, reading with the Avro schema as it is (logical types included), is the
independent reader of the bytes the writer produces.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json

import fastavro
import pytest

from airflow_copycat.connect import DataException, Date, Decimal, Schema, SchemaBuilder, Struct, Time, Timestamp
from airflow_copycat.connect.avro_data import ANYTHING_SCHEMA, AvroData, compatibility_problems, schema_json
from tests.support.avro_connectors import CUSTOMER, ORDER_V1, ORDER_V2, order

UTC = dt.timezone.utc


def avro(schema):
    return AvroData().from_connect_schema(schema)


def fastavro_read(avro_schema, data: bytes):
    """What an Avro library makes of the bytes, with nothing of ours in between."""
    return fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(avro_schema))


# ---------------------------------------------------------------- schemas: Connect -> Avro, as Confluent writes them

@pytest.mark.parametrize("schema, expected", [
    (Schema.INT8, {"type": "int", "connect.type": "int8"}),
    (Schema.INT16, {"type": "int", "connect.type": "int16"}),
    (Schema.INT32, "int"),
    (Schema.INT64, "long"),
    (Schema.FLOAT32, "float"),
    (Schema.FLOAT64, "double"),
    (Schema.BOOLEAN, "boolean"),
    (Schema.STRING, "string"),
    (Schema.BYTES, "bytes"),
    (Schema.OPTIONAL_STRING, ["null", "string"]),
    (Date.builder().build(),
     {"type": "int", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Date", "logicalType": "date"}),
    (Time.builder().build(),
     {"type": "int", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Time",
      "logicalType": "time-millis"}),
    (Timestamp.builder().build(),
     {"type": "long", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Timestamp",
      "logicalType": "timestamp-millis"}),
    (Decimal.schema(2),
     {"type": "bytes", "scale": 2, "precision": 64, "connect.version": 1, "connect.parameters": {"scale": "2"},
      "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}),
    (Decimal.builder(3).parameter("connect.decimal.precision", "12").build(),
     {"type": "bytes", "scale": 3, "precision": 12, "connect.version": 1,
      "connect.parameters": {"scale": "3", "connect.decimal.precision": "12"},
      "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}),
    (SchemaBuilder.array(Schema.INT32).build(), {"type": "array", "items": "int"}),
    (SchemaBuilder.map(Schema.STRING, Schema.INT64).build(), {"type": "map", "values": "long"}),
    (SchemaBuilder.map(Schema.INT32, Schema.STRING).build(),
     {"type": "array", "items": {"type": "record", "name": "MapEntry", "namespace": "io.confluent.connect.avro",
                                 "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "string"}]}}),
])
def test_each_connect_schema_maps_to_the_avro_schema_confluent_writes(schema, expected):
    assert avro(schema) == expected
    # and back to the same Connect schema
    assert AvroData().to_connect_schema(expected) == schema


def test_struct_becomes_a_named_record_with_connect_metadata_and_optional_fields_default_to_null():
    schema = (SchemaBuilder.struct().name("com.example.Order").version(3).doc("an order").parameter("owner", "sales")
              .field("id", Schema.INT64)
              .field("note", Schema.OPTIONAL_STRING)
              .field("qty", SchemaBuilder.int32().default_value(1).build())
              .field("customer", CUSTOMER)
              .build())

    assert avro(schema) == {
        "type": "record", "name": "Order", "namespace": "com.example",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "qty", "type": {"type": "int", "connect.default": 1}, "default": 1},
            {"name": "customer", "type": {"type": "record", "name": "Customer",
                                          "fields": [{"name": "name", "type": "string"},
                                                     {"name": "vip", "type": "boolean"}],
                                          "connect.name": "com.example.Customer"}},
        ],
        "connect.doc": "an order", "connect.version": 3, "connect.parameters": {"owner": "sales"},
        "connect.name": "com.example.Order",
    }


def test_every_type_round_trips_connect_to_avro_to_connect_keeping_names_versions_and_parameters():
    for schema in (ORDER_V1, ORDER_V2):
        back = AvroData().to_connect_schema(schema_json(avro(schema)))
        assert back == schema
        assert back.field("amount").schema.parameters == {"scale": "2", "connect.decimal.precision": "10"}
        assert back.field("customer").schema.name == "com.example.Customer"


def test_optional_struct_and_optional_with_default_and_defaults_of_every_kind_round_trip():
    schema = (SchemaBuilder.struct().name("d.Defaults")
              .field("opt_struct", CUSTOMER.copy(optional=True))
              .field("opt_with_default", SchemaBuilder.string().optional().default_value("x").build())
              .field("day", Date.builder().default_value(dt.date(2024, 1, 2)).build())
              .field("amount", Decimal.builder(2).default_value(decimal.Decimal("1.50")).build())
              .field("blob", SchemaBuilder.bytes().default_value(b"\x00\xff").build())
              .field("tags", SchemaBuilder.array(Schema.STRING).default_value(["a"]).build())
              .field("ids", SchemaBuilder.map(Schema.INT32, Schema.STRING).default_value({1: "a"}).build())
              .build())
    a = avro(schema)
    fields = {f["name"]: f for f in a["fields"]}
    assert fields["opt_struct"]["type"][0] == "null" and fields["opt_struct"]["default"] is None
    assert fields["opt_with_default"]["type"] == [{"type": "string", "connect.default": "x"}, "null"]
    assert fields["opt_with_default"]["default"] == "x"
    assert fields["day"]["default"] == 19724  # days since the epoch, as Avro's date
    assert fields["ids"]["default"] == [{"key": 1, "value": "a"}]  # valid Avro for an array of MapEntry
    fastavro.parse_schema(a)  # every default is valid Avro
    back = AvroData().to_connect_schema(a)
    assert back == schema
    assert back.field("amount").schema.default == decimal.Decimal("1.50")


def test_a_struct_used_twice_is_defined_once_and_different_unnamed_structs_get_numbered_names():
    inner = SchemaBuilder.struct().field("x", Schema.INT32).build()
    other = SchemaBuilder.struct().field("y", Schema.STRING).build()
    schema = (SchemaBuilder.struct().name("n.Outer")
              .field("a", CUSTOMER).field("b", CUSTOMER.copy(optional=True))
              .field("p", inner).field("q", other).field("r", inner).build())
    a = avro(schema)
    types = {f["name"]: f["type"] for f in a["fields"]}
    assert types["b"] == ["null", "com.example.Customer"]  # a reference: Avro defines a name once
    assert types["p"]["name"] == "ConnectDefault" and types["q"]["name"] == "ConnectDefault2"
    assert types["r"] == "io.confluent.connect.avro.ConnectDefault"
    fastavro.parse_schema(a)
    back = AvroData().to_connect_schema(a)
    assert back == schema and back.field("q").schema.name is None


def test_two_different_schemas_with_one_name_cannot_be_one_avro_schema():
    a = SchemaBuilder.struct().name("x.Same").field("a", Schema.INT32).build()
    b = SchemaBuilder.struct().name("x.Same").field("b", Schema.INT32).build()
    schema = SchemaBuilder.struct().name("x.Outer").field("a", a).field("b", b).build()
    with pytest.raises(DataException, match="both named 'x.Same'"):
        avro(schema)


def test_a_named_map_with_non_string_keys_is_a_record_of_its_name_marked_as_map_entry():
    schema = SchemaBuilder.map(Schema.INT64, Schema.STRING).name("com.example.Lookup").build()
    a = avro(schema)
    assert a["items"]["name"] == "Lookup" and a["items"]["connect.internal.type"] == "MapEntry"
    assert a["connect.name"] == "com.example.Lookup"
    assert AvroData().to_connect_schema(a) == schema


# ---------------------------------------------------------------- schemas: Avro written elsewhere -> Connect

def test_avro_from_other_writers_becomes_connect_as_confluent_reads_it():
    foreign = {
        "type": "record", "name": "Event", "namespace": "org.acme", "doc": "an event",
        "fields": [
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}, "doc": "what"},
            {"name": "hash", "type": {"type": "fixed", "name": "Md5", "size": 16}},
            {"name": "amount", "type": {"type": "fixed", "name": "Amt", "size": 8, "logicalType": "decimal",
                                        "precision": 18, "scale": 4}},
            {"name": "micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "count", "type": "int", "default": 7},
            {"name": "choice", "type": ["null", "int", "string", "org.acme.Kind"], "default": None},
        ],
    }
    schema = AvroData().to_connect_schema(foreign, version=4)
    assert schema.name == "org.acme.Event" and schema.version == 4  # the registry's version
    assert schema.parameters["io.confluent.connect.avro.record.doc"] == "an event"
    assert schema.parameters["io.confluent.connect.avro.field.doc.kind"] == "what"
    kind = schema.field("kind").schema
    assert kind.type.value == "string" and kind.parameters["io.confluent.connect.avro.Enum"] == "org.acme.Kind"
    assert kind.parameters["io.confluent.connect.avro.Enum.B"] == "B"
    assert schema.field("hash").schema.type.value == "bytes"
    amount = schema.field("amount").schema
    assert amount.name == Decimal.LOGICAL_NAME and amount.parameters["connect.decimal.precision"] == "18"
    assert schema.field("micros").schema == Schema.INT64  # other logical types stay their primitive
    assert schema.field("id").schema == Schema.STRING
    count = schema.field("count").schema
    assert count.default == 7 and count.parameters == {"io.confluent.connect.avro.field.default": "true"}
    choice = schema.field("choice").schema
    assert choice.name == "io.confluent.connect.avro.Union" and choice.optional
    assert [f.name for f in choice.fields] == ["int", "string", "Kind"]


def test_values_of_foreign_avro_including_general_unions_read_into_connect():
    foreign = {"type": "record", "name": "U", "fields": [
        {"name": "choice", "type": ["null", "int", "string", {"type": "record", "name": "P", "fields": [
            {"name": "x", "type": "int"}]}]},
        {"name": "hash", "type": {"type": "fixed", "name": "F", "size": 2}},
    ]}
    data = AvroData()
    text = schema_json(foreign)
    out = io.BytesIO()
    for choice in (5, "five", {"x": 1}, None):
        out.seek(0)
        out.truncate()
        fastavro.schemaless_writer(out, fastavro.parse_schema(foreign), {"choice": choice, "hash": b"ab"})
        value = data.reader(text).read(out.getvalue())
        union = value.get("choice")
        if choice is None:
            assert union is None
        elif isinstance(choice, dict):
            assert union.get("P").get("x") == 1
        else:
            assert union.get("int" if isinstance(choice, int) else "string") == choice
        assert value.get("hash") == b"ab"


def test_recursive_avro_schemas_are_refused_with_a_clear_error():
    recursive = {"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"], "default": None}]}
    with pytest.raises(DataException, match="refers to itself"):
        AvroData().to_connect_schema(recursive)


# ---------------------------------------------------------------- values

def test_every_value_round_trips_and_an_avro_library_reads_the_logical_types():
    value = order(2, 2)
    data = AvroData()
    writer = data.writer(ORDER_V2)
    body = writer.write(value)

    # Our reader gives back the same Struct
    back = data.reader(writer.schema_json).read(body)
    assert back == value
    assert back.get("amount") == decimal.Decimal("2.25") and back.get("counts") == {2: "n", -1: "minus"}
    # fastavro, from the Avro schema alone, sees Avro's logical types and Confluent's map entries
    plain = fastavro_read(writer.avro_schema, body)
    assert plain["created"] == dt.datetime(2024, 5, 1, 12, 0, 2, tzinfo=UTC)
    assert plain["day"] == dt.date(2024, 5, 3) and plain["at"] == dt.time(12, 0, 2)
    assert plain["amount"] == decimal.Decimal("2.25")
    assert plain["counts"] == [{"key": 2, "value": "n"}, {"key": -1, "value": "minus"}]
    assert plain["customer"] == {"name": "c2", "vip": True} and plain["email"] == "u2@example.com"
    assert plain["qty"] == 2 and plain["seq"] == 10**12 + 2


def test_optional_fields_may_be_null_and_defaults_fill_unset_fields():
    schema = (SchemaBuilder.struct().name("v.Opt").field("a", Schema.OPTIONAL_INT32)
              .field("b", SchemaBuilder.string().default_value("dflt").build())
              .field("c", SchemaBuilder.array(Schema.OPTIONAL_STRING).build()).build())
    data = AvroData()
    writer = data.writer(schema)
    body = writer.write(Struct(schema, {"c": ["x", None]}))
    assert fastavro_read(writer.avro_schema, body) == {"a": None, "b": "dflt", "c": ["x", None]}
    assert data.reader(writer.schema_json).read(body) == Struct(schema, {"b": "dflt", "c": ["x", None]})


def test_values_without_a_schema_use_confluents_anything_record():
    data = AvroData()
    writer = data.writer(None)
    assert writer.avro_schema == ANYTHING_SCHEMA
    value = {"a": [1, 2.5, "s", True, b"\x01", None], "b": {"nested": "map"}}
    body = writer.write(value)
    reader = data.reader(writer.schema_json)
    assert reader.connect_schema is None
    assert reader.read(body) == value


def test_a_value_that_does_not_fit_names_the_field():
    schema = SchemaBuilder.struct().name("v.Req").field("id", Schema.INT32).field("name", Schema.STRING).build()
    struct = Struct(schema, {"id": 1})  # name is required but unset
    with pytest.raises(DataException, match="field 'name'"):
        AvroData().writer(schema).write(struct)
    with pytest.raises(DataException, match="out of range for int32"):
        AvroData().writer(Schema.INT32).write(2**40)


def test_writers_and_readers_are_cached_per_schema():
    data = AvroData()
    assert data.writer(ORDER_V1) is data.writer(ORDER_V1)
    text = data.writer(ORDER_V1).schema_json
    assert data.reader(text) is data.reader(text)


# ---------------------------------------------------------------- evolution rules

def test_adding_an_optional_field_is_compatible_both_ways_and_a_required_one_is_not():
    v1, v2 = avro(ORDER_V1), avro(ORDER_V2)
    assert compatibility_problems(reader=v2, writer=v1) == []  # backward: new reads old
    assert compatibility_problems(reader=v1, writer=v2) == []  # forward: old reads new
    v3 = dict(v1, fields=v1["fields"] + [{"name": "age", "type": "int"}])
    (problem,) = compatibility_problems(reader=v3, writer=v1)
    assert "age" in problem and "no default" in problem
    assert compatibility_problems(reader={"type": "long"}, writer="int") == []  # promotion
    assert compatibility_problems(reader="int", writer="long")


def test_reading_old_data_with_the_new_schema_and_new_data_with_the_old_schema():
    data = AvroData()
    w1, w2 = data.writer(ORDER_V1), data.writer(ORDER_V2)
    old_as_new = data.reader(w1.schema_json, w2.schema_json).read(w1.write(order(1, 1)))
    assert old_as_new.schema == ORDER_V2 and old_as_new.get("email") is None
    new_as_old = data.reader(w2.schema_json, w1.schema_json).read(w2.write(order(2, 2)))
    assert new_as_old == order(2, 1)
    v3 = json.loads(w1.schema_json)
    v3["fields"].append({"name": "age", "type": "int"})
    with pytest.raises(DataException, match="'age' is missing from the writer's schema and has no default"):
        data.reader(w1.schema_json, json.dumps(v3))


def test_a_decimal_scale_avro_forbids_still_round_trips_as_confluent_writes_it():
    schema = Decimal.schema(-2)  # a negative scale: Avro's decimal forbids it, Connect allows it
    a = avro(schema)
    assert a["logicalType"] == "decimal" and a["scale"] == -2
    assert AvroData().to_connect_schema(a) == schema
    data = AvroData()
    writer = data.writer(schema)
    assert data.reader(writer.schema_json).read(writer.write(decimal.Decimal("1.2E+3"))) == decimal.Decimal("1200")


def test_unnamed_structs_nested_in_unnamed_structs_get_distinct_names():
    inner = SchemaBuilder.struct().field("x", Schema.INT32).build()
    middle = SchemaBuilder.struct().field("inner", inner).field("m", SchemaBuilder.map(Schema.INT8, inner).build()).build()
    schema = SchemaBuilder.struct().field("middle", middle).build()
    a = avro(schema)
    assert a["name"] == "ConnectDefault"
    assert a["fields"][0]["type"]["name"] == "ConnectDefault2"
    fastavro.parse_schema(a)
    assert AvroData().to_connect_schema(a) == schema
    data = AvroData()
    writer = data.writer(schema)
    value = Struct(schema, {"middle": Struct(middle, {"inner": Struct(inner, {"x": 1}), "m": {3: Struct(inner, {"x": 2})}})})
    assert data.reader(writer.schema_json).read(writer.write(value)) == value


def test_enums_and_unions_written_back_with_enhanced_support_keep_their_avro_types():
    foreign = {"type": "record", "name": "E", "namespace": "org.acme", "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "either", "type": ["int", "string"]}]}
    enhanced = AvroData(enhanced_schema_support=True)
    schema = enhanced.to_connect_schema(foreign)
    again = enhanced.from_connect_schema(schema)
    kind = again["fields"][0]["type"]
    assert (kind["type"], kind["name"], kind["symbols"]) == ("enum", "Kind", ["A", "B"])
    assert again["fields"][1]["type"] == ["int", "string"]
    union = schema.field("either").schema
    value = Struct(schema, {"kind": "B", "either": Struct(union, {"string": "s"})})
    writer = enhanced.writer(schema)
    body = writer.write(value)
    assert fastavro_read(foreign, body) == {"kind": "B", "either": "s"}
    assert enhanced.reader(writer.schema_json).read(body) == value
    # without enhanced support the enum is written as a string, as Confluent does by default
    assert AvroData().from_connect_schema(schema)["fields"][0]["type"]["type"] == "string"
