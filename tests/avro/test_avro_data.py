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
from airflow_copycat.converters.avro.data import AvroData
from airflow_copycat.converters.avro.names import ANYTHING_SCHEMA, schema_json
from airflow_copycat.converters.avro.resolution import compatibility_problems
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
    # and written back (enums as enums), the same Avro types: a registry holding the foreign schema accepts it
    again = AvroData(enhanced_schema_support=True).from_connect_schema(schema)
    assert compatibility_problems(reader=again, writer=foreign) == []
    assert compatibility_problems(reader=foreign, writer=again) == []


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
        assert data.writer(value.schema).write(value) == out.getvalue()  # written back: the same bytes


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


# ---------------------------------------------------------------- fixed, decimals, unions, names: read, rewrite, read again

def fastavro_bytes(avro_schema, datum) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(avro_schema), datum)
    return out.getvalue()


FOREIGN_FIXED = {"type": "record", "name": "Ev", "namespace": "org.acme", "fields": [
    {"name": "h", "type": {"type": "fixed", "name": "Md5", "size": 4}},
    {"name": "amt", "type": {"type": "fixed", "name": "Amt", "size": 8, "logicalType": "decimal",
                             "precision": 18, "scale": 4}},
    {"name": "again", "type": "Md5"},
]}


def test_fixed_and_decimals_on_fixed_read_then_rewrite_as_the_same_fixed_types():
    data = AvroData()
    body = fastavro_bytes(FOREIGN_FIXED, {"h": b"\x00\x01\x02\x03", "amt": decimal.Decimal("-1.2345"), "again": b"abcd"})
    value = data.reader(schema_json(FOREIGN_FIXED)).read(body)
    h, amt = value.schema.field("h").schema, value.schema.field("amt").schema
    assert (h.type.value, h.name, h.parameters) == ("bytes", "org.acme.Md5", {"connect.fixed.size": "4"})
    assert amt.name == Decimal.LOGICAL_NAME
    assert amt.parameters == {"scale": "4", "connect.decimal.precision": "18", "connect.fixed.size": "8",
                              "connect.fixed.name": "org.acme.Amt"}
    assert value.get("amt") == decimal.Decimal("-1.2345") and value.get("again") == b"abcd"

    writer = data.writer(value.schema)
    fields = {f["name"]: f["type"] for f in writer.avro_schema["fields"]}
    assert (fields["h"]["type"], fields["h"]["name"], fields["h"]["size"]) == ("fixed", "Md5", 4)
    assert (fields["amt"]["type"], fields["amt"]["name"], fields["amt"]["size"]) == ("fixed", "Amt", 8)
    assert fields["amt"]["logicalType"] == "decimal" and fields["amt"]["scale"] == 4
    assert fields["again"] == "Md5"
    assert writer.write(value) == body  # the decimal sign-extended to the fixed's 8 bytes, as Avro writes it
    # the rewritten schema is the same Avro types: compatible both ways, as a registry checks
    assert compatibility_problems(reader=writer.avro_schema, writer=FOREIGN_FIXED) == []
    assert compatibility_problems(reader=FOREIGN_FIXED, writer=writer.avro_schema) == []
    assert fastavro_read(writer.avro_schema, body)["amt"] == decimal.Decimal("-1.2345")
    assert data.to_connect_schema(writer.avro_schema) == value.schema

    with pytest.raises(DataException, match="3 bytes for the Avro fixed 'org.acme.Md5' of 4"):
        writer.write(Struct(value.schema, {"h": b"abc", "amt": decimal.Decimal(1), "again": b"abcd"}))
    with pytest.raises(DataException, match="does not fit the 8 bytes"):
        writer.write(Struct(value.schema, {"h": b"abcd", "amt": decimal.Decimal(10**20), "again": b"abcd"}))


def test_a_decimal_without_scale_has_scale_zero_as_the_spec_says():
    for avro_type in ({"type": "bytes", "logicalType": "decimal", "precision": 5},
                      {"type": "fixed", "name": "D", "size": 3, "logicalType": "decimal", "precision": 5}):
        schema = AvroData().to_connect_schema(avro_type)
        assert schema.name == Decimal.LOGICAL_NAME and schema.parameters["scale"] == "0"
    with pytest.raises(DataException, match="scale must be a JSON integer"):
        AvroData().to_connect_schema({"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": "2"})


UNION = {"type": "record", "name": "U", "namespace": "org.acme", "fields": [
    {"name": "u", "type": [
        "null", "int", "long", "float", "double", "string",
        {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]},
        "bytes",
        {"type": "fixed", "name": "F2", "size": 2},
        {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]},
        {"type": "record", "name": "ConnectDefault2", "namespace": "io.confluent.connect.avro",
         "fields": [{"name": "y", "type": "string"}]},
        {"type": "array", "items": "int"},
    ]},
]}
BRANCHES = [  # fastavro's tuple notation names the branch written, the Connect union field that must hold it
    (("int", 7), "int", 7),
    (("long", 7), "long", 7),
    (("float", 0.5), "float", 0.5),
    (("double", 0.5), "double", 0.5),
    (("string", "GREEN"), "string", "GREEN"),
    (("org.acme.Color", "GREEN"), "Color", "GREEN"),
    (("bytes", b"ab"), "bytes", b"ab"),
    (("org.acme.F2", b"ab"), "F2", b"ab"),
    (("org.acme.P", {"x": 1}), "P", {"x": 1}),
    (("io.confluent.connect.avro.ConnectDefault2", {"y": "z"}), "ConnectDefault2", {"y": "z"}),
    (("array", [1, 2]), "array", [1, 2]),
]


@pytest.mark.parametrize("datum, field, plain", BRANCHES, ids=[b[1] for b in BRANCHES])
def test_a_union_value_reads_into_its_branch_and_is_rewritten_in_that_branch(datum, field, plain):
    data = AvroData()
    body = fastavro_bytes(UNION, {"u": datum})
    value = data.reader(schema_json(UNION)).read(body)
    union = value.get("u")
    assert union.schema.name == "io.confluent.connect.avro.Union"
    set_fields = {f.name: union.get(f.name) for f in union.schema.fields if union.get(f.name) is not None}
    assert list(set_fields) == [field]
    got = set_fields[field]
    assert (got.to_dict() if isinstance(got, Struct) else got) == plain

    writer = data.writer(value.schema)
    rewritten = writer.write(value)
    assert rewritten == body  # same branch index, same bytes
    again = fastavro.schemaless_reader(io.BytesIO(rewritten), fastavro.parse_schema(writer.avro_schema),
                                       return_named_type=True)
    assert again["u"] == fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(UNION),
                                                    return_named_type=True)["u"]
    assert data.reader(writer.schema_json).read(rewritten) == value
    assert compatibility_problems(reader=writer.avro_schema, writer=UNION) == []


def test_a_union_read_with_a_reader_schema_takes_the_branch_avro_resolution_picks():
    writer = {"type": "record", "name": "R", "fields": [
        {"name": "n", "type": ["int", "string", {"type": "enum", "name": "E", "symbols": ["A"]}]}]}
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "n", "type": ["null", "string", "double", "long", {"type": "enum", "name": "E", "symbols": ["A", "B"]}],
         "default": None},
        {"name": "added", "type": ["long", "string"], "default": 5}]}
    data = AvroData()
    for datum, field, expected in ((("int", 3), "double", 3.0), (("string", "s"), "string", "s"), (("E", "A"), "E", "A")):
        value = data.reader(schema_json(writer), schema_json(reader)).read(fastavro_bytes(writer, {"n": datum}))
        n = value.get("n")
        assert [f.name for f in n.schema.fields if n.get(f.name) is not None] == [field] and n.get(field) == expected
        added = value.get("added")  # a reader field's default: its first branch
        assert (added.get("long"), added.get("string")) == (5, None)


def test_a_union_written_from_connect_takes_the_branch_of_its_field():
    inner = SchemaBuilder.struct().field("x", Schema.INT32).optional().build()
    other = SchemaBuilder.struct().field("y", Schema.INT32).build()
    union = (SchemaBuilder.struct().name("io.confluent.connect.avro.Union").optional()
             .field("int", Schema.OPTIONAL_INT32).field("long", Schema.OPTIONAL_INT64)
             .field("ConnectDefault2", inner).field("Other", other.copy(optional=True)).build())
    schema = SchemaBuilder.struct().field("first", other).field("u", union).build()
    data = AvroData()
    writer = data.writer(schema)
    assert writer.avro_schema["fields"][1]["type"][3]["name"] == "ConnectDefault3"  # names as they were given
    for field, v in (("long", 5), ("ConnectDefault2", Struct(inner, {"x": 1})), ("Other", Struct(other.copy(optional=True), {"y": 2}))):
        value = Struct(schema, {"first": Struct(other, {"y": 0}), "u": Struct(union, {field: v})})
        back = data.reader(writer.schema_json).read(writer.write(value)).get("u")
        # read back, the union's fields are named by the Avro branches: the one set is the one written
        index = union.field(field).index
        assert [i for i, x in enumerate(back.values()) if x is not None] == [index]
        got = back.values()[index]
        assert (got.to_dict() if isinstance(got, Struct) else got) == (v.to_dict() if isinstance(v, Struct) else v)
    with pytest.raises(DataException, match="'a' and 'b' are both Avro 'int'"):
        data.writer(SchemaBuilder.struct().name("io.confluent.connect.avro.Union")
                    .field("a", Schema.OPTIONAL_INT32).field("b", Schema.OPTIONAL_INT16).build())


def test_a_struct_without_namespace_used_twice_in_a_namespaced_struct_is_written_and_read():
    foo = SchemaBuilder.struct().name("Foo").field("x", Schema.INT32).build()
    outer = SchemaBuilder.struct().name("a.b.Outer").field("f1", foo).field("f2", foo).build()
    data = AvroData()
    writer = data.writer(outer)
    assert writer.avro_schema["fields"][1]["type"] == "Foo"  # as Confluent's Java converter writes it
    value = Struct(outer, {"f1": Struct(foo, {"x": 1}), "f2": Struct(foo, {"x": 2})})
    body = writer.write(value)
    assert body == b"\x02\x04"
    back = data.reader(writer.schema_json).read(body)
    assert back == value and back.schema.field("f2").schema.name == "Foo"


@pytest.mark.parametrize("schema, bad", [
    (SchemaBuilder.struct().name("com.ex.Rec").field("my-field", Schema.INT32).build(), "'my-field'"),
    (SchemaBuilder.struct().name("com.ex.Rec").field("1st", Schema.INT32).build(), "'1st'"),
    (SchemaBuilder.struct().name("com.ex.my-record").field("ok", Schema.INT32).build(), "'com.ex.my-record'"),
    (SchemaBuilder.struct().name("com.ex.Rec").field("ok", Schema.INT32)
     .field("e", SchemaBuilder.string().parameter("io.confluent.connect.avro.Enum", "com.ex.E")
            .parameter("io.confluent.connect.avro.Enum.A-B", "A-B").build()).build(), "symbol 'A-B'"),
])
def test_names_avro_does_not_allow_raise_naming_the_name(schema, bad):
    with pytest.raises(DataException, match=bad):
        AvroData(enhanced_schema_support=True).writer(schema)


def test_names_java_avro_accepts_are_accepted():
    # Java's Avro checks names, not namespaces (Debezium's "my-server.inventory..."), and takes any letter
    schema = SchemaBuilder.struct().name("my-server.inventory.Cliënt").field("naïve", Schema.INT32).build()
    writer = AvroData().writer(schema)
    assert writer.avro_schema["namespace"] == "my-server.inventory"
    assert AvroData().reader(writer.schema_json).read(writer.write(Struct(schema, {"naïve": 1}))).get("naïve") == 1


def test_scrub_invalid_names_replaces_invalid_characters_as_confluent_does():
    schema = (SchemaBuilder.struct().name("com.ex.my-record").field("my-field", Schema.INT32)
              .field("1st", SchemaBuilder.string().default_value("d").build()).field("a b", Schema.BOOLEAN).build())
    data = AvroData(scrub_invalid_names=True)
    writer = data.writer(schema)
    a = writer.avro_schema
    assert (a["name"], a["namespace"], a["connect.name"]) == ("my_record", "com.ex", "com.ex.my-record")
    assert [f["name"] for f in a["fields"]] == ["my_field", "x1st", "a_b"]
    body = writer.write(Struct(schema, {"my-field": 1, "a b": True}))
    assert fastavro_read(a, body) == {"my_field": 1, "x1st": "d", "a_b": True}
    with pytest.raises(DataException, match="'a-b' and 'a_b' .* are both 'a_b'"):
        data.writer(SchemaBuilder.struct().field("a-b", Schema.INT32).field("a_b", Schema.INT32).build())


def test_bad_decimal_precision_and_float32_overflow_are_data_exceptions():
    bad = SchemaBuilder.struct().name("v.D").field(
        "d", Decimal.builder(2).parameter("connect.decimal.precision", "ten").build()).build()
    with pytest.raises(DataException, match="'connect.decimal.precision' must be an integer, not 'ten'"):
        AvroData().from_connect_schema(bad)
    schema = SchemaBuilder.struct().name("v.F").field("f", Schema.FLOAT32).build()
    writer = AvroData().writer(schema)
    with pytest.raises(DataException, match="out of range for float32"):
        writer.write(Struct(schema, {"f": 1e300}))
    for ok in (3.4e38, float("inf"), -1.5):
        assert fastavro_read(writer.avro_schema, writer.write(Struct(schema, {"f": ok})))["f"] == pytest.approx(ok)
