"""Schemas, structs and logical types: what a connector author sees when a value does not fit."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from airflow_copycat.connect.data import (
    Date, Decimal, Schema, SchemaBuilder, Struct, Time, Timestamp, Type, validate_value,
)
from airflow_copycat.connect.errors import DataException

UTC = dt.timezone.utc


def order_schema() -> Schema:
    return (
        SchemaBuilder.struct().name("com.example.Order").version(2).doc("an order")
        .field("id", Schema.INT64)
        .field("note", Schema.OPTIONAL_STRING)
        .field("status", SchemaBuilder.string().default_value("NEW"))
        .field("customer", SchemaBuilder.struct().name("com.example.Customer").field("name", Schema.STRING))
        .build()
    )


# ----------------------------------------------------------------- required / optional

def test_required_field_rejects_none_and_names_it():
    with pytest.raises(DataException, match="field 'id': null for a required int64"):
        Struct(order_schema()).put("id", None)


def test_optional_field_and_default():
    s = Struct(order_schema()).put("note", None)
    assert s["note"] is None
    assert s["status"] == "NEW"  # unset: the default
    assert s.get_without_default("status") is None
    s.put("status", "PAID")
    assert s["status"] == "PAID"


def test_validate_reports_the_missing_required_field():
    schema = order_schema()
    s = Struct(schema).put("id", 1)
    with pytest.raises(DataException, match="field 'customer'"):
        s.validate()
    s.put("customer", Struct(schema.field("customer").schema).put("name", "Ada"))
    s.validate()  # status has a default, note is optional


# ----------------------------------------------------------------- integers and types

@pytest.mark.parametrize("t,lo,hi", [
    (Type.INT8, -128, 127), (Type.INT16, -32768, 32767),
    (Type.INT32, -(2**31), 2**31 - 1), (Type.INT64, -(2**63), 2**63 - 1),
])
def test_integer_ranges(t, lo, hi):
    schema = Schema(t)
    validate_value(schema, lo)
    validate_value(schema, hi)
    for bad in (lo - 1, hi + 1):
        with pytest.raises(DataException, match=f"out of range for {t.value}"):
            validate_value(schema, bad)


@pytest.mark.parametrize("schema,value", [
    (Schema.INT32, True), (Schema.INT32, 1.0), (Schema.STRING, b"x"), (Schema.BYTES, "x"),
    (Schema.BOOLEAN, 1), (Schema.FLOAT64, "1.0"),
])
def test_wrong_python_type_is_rejected(schema, value):
    with pytest.raises(DataException, match=f"not valid for a {schema.type.value} schema"):
        validate_value(schema, value)


def test_struct_field_errors_name_the_field():
    schema = order_schema()
    with pytest.raises(DataException, match="field 'id': str 'x' is not valid for a int64"):
        Struct(schema).put("id", "x")
    with pytest.raises(DataException, match="'nope' is not a field of com.example.Order"):
        Struct(schema).put("nope", 1)
    with pytest.raises(DataException, match="'nope' is not a field"):
        Struct(schema)["nope"]
    other = SchemaBuilder.struct().field("name", Schema.STRING).build()
    with pytest.raises(DataException, match="field 'customer': Struct schema .* does not match"):
        Struct(schema).put("customer", Struct(other).put("name", "Ada"))


def test_nested_values_are_checked_with_their_position():
    schema = SchemaBuilder.map(Schema.STRING, SchemaBuilder.array(Schema.INT8).build()).build()
    with pytest.raises(DataException, match=r"value\['a'\]\[1\]: 300 is out of range for int8"):
        validate_value(schema, {"a": [1, 300]})
    with pytest.raises(DataException, match="value key 1"):
        validate_value(schema, {1: []})


# ----------------------------------------------------------------- logical types

@pytest.mark.parametrize("day,days", [
    (dt.date(1970, 1, 1), 0), (dt.date(1997, 5, 19), 10000), (dt.date(1969, 12, 31), -1), (dt.date(1, 1, 1), -719162),
])
def test_date_round_trip(day, days):
    assert Date.from_logical(day) == days
    assert Date.to_logical(days) == day


def test_date_rejects_datetime():
    with pytest.raises(DataException, match="datetime.date"):
        Date.from_logical(dt.datetime(2020, 1, 1))
    with pytest.raises(DataException, match="not valid for logical type"):
        validate_value(Date.builder().build(), dt.datetime(2020, 1, 1))


@pytest.mark.parametrize("t,ms", [(dt.time(0), 0), (dt.time(4), 14_400_000), (dt.time(23, 59, 59, 999000), 86_399_999)])
def test_time_round_trip(t, ms):
    assert Time.from_logical(t) == ms
    assert Time.to_logical(ms) == t


def test_time_outside_a_day_is_an_error():
    for ms in (-1, 86_400_000):
        with pytest.raises(DataException, match="outside one day"):
            Time.to_logical(ms)


def test_timestamp_is_utc_milliseconds():
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert Timestamp.from_logical(dt.datetime(2024, 1, 1, 2, tzinfo=plus2)) == 1_704_067_200_000
    assert Timestamp.from_logical(dt.datetime(2024, 1, 1)) == 1_704_067_200_000  # naive is UTC
    assert Timestamp.from_logical(dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)) == -1
    back = Timestamp.to_logical(1_704_067_200_123)
    assert back == dt.datetime(2024, 1, 1, 0, 0, 0, 123000, tzinfo=UTC) and back.tzinfo is not None


@pytest.mark.parametrize("text,scale,raw", [
    ("1.56", 2, b"\x00\x9c"),  # Kafka's JsonConverterTest: 156 unscaled is {0, -100}
    ("-1.56", 2, b"\xff\x64"),
    ("0", 0, b"\x00"),
    ("-1.28", 2, b"\x80"),  # minimal two's complement, as BigInteger.toByteArray
    ("-1.29", 2, b"\xff\x7f"),
    ("1.28", 2, b"\x00\x80"),
    ("15600", -2, b"\x00\x9c"),  # negative scale
])
def test_decimal_round_trip(text, scale, raw):
    schema = Decimal.schema(scale)
    assert Decimal.from_logical(schema, decimal.Decimal(text)) == raw
    assert Decimal.to_logical(schema, raw) == decimal.Decimal(text)


def test_decimal_keeps_every_digit():
    # 38 digits: more than Python's default decimal context (28) would keep
    schema = Decimal.schema(10)
    value = decimal.Decimal("-9999999999999999999999999999.9999999999")
    assert Decimal.to_logical(schema, Decimal.from_logical(schema, value)) == value


def test_decimal_scale_is_applied_or_refused():
    schema = Decimal.schema(2)
    assert Decimal.from_logical(schema, decimal.Decimal("1.5")) == Decimal.from_logical(schema, decimal.Decimal("1.50"))
    assert str(Decimal.to_logical(schema, Decimal.from_logical(schema, decimal.Decimal("1.5")))) == "1.50"
    with pytest.raises(DataException, match="more digits than scale 2"):
        Decimal.from_logical(schema, decimal.Decimal("1.555"))
    with pytest.raises(DataException, match="not a finite number"):
        Decimal.from_logical(schema, decimal.Decimal("NaN"))
    with pytest.raises(DataException, match="no integer 'scale'"):
        Decimal.scale(SchemaBuilder.bytes().name(Decimal.LOGICAL_NAME).build())


def test_logical_values_in_structs():
    schema = (SchemaBuilder.struct()
              .field("d", Date.builder()).field("t", Time.builder()).field("ts", Timestamp.builder())
              .field("amount", Decimal.builder(2)).build())
    s = Struct(schema, {"d": dt.date(2024, 1, 1), "t": dt.time(12), "ts": dt.datetime(2024, 1, 1, tzinfo=UTC),
                        "amount": decimal.Decimal("-3.50")})
    s.validate()
    with pytest.raises(DataException, match="field 'amount'.*expected Decimal"):
        s.put("amount", 3.5)


# ----------------------------------------------------------------- SchemaBuilder

def test_schema_builder_builds_what_was_asked():
    schema = order_schema()
    assert schema.type is Type.STRUCT
    assert (schema.name, schema.version, schema.doc, schema.optional) == ("com.example.Order", 2, "an order", False)
    assert [f.name for f in schema.fields] == ["id", "note", "status", "customer"]
    assert [f.index for f in schema.fields] == [0, 1, 2, 3]
    assert schema.field("status").schema.default == "NEW"
    assert schema.field("missing") is None
    assert schema == order_schema() and hash(schema) == hash(order_schema())
    assert schema != order_schema().copy(optional=True)


def test_schema_builder_rejects_bad_schemas():
    with pytest.raises(DataException, match="duplicate field 'id'"):
        SchemaBuilder.struct().field("id", Schema.INT32).field("id", Schema.INT64)
    with pytest.raises(DataException, match="only struct schemas have fields"):
        SchemaBuilder.int32().field("x", Schema.INT32)
    with pytest.raises(DataException, match="default: 300 is out of range for int8"):
        SchemaBuilder.int8().default_value(300).build()
    with pytest.raises(DataException, match="map schema needs a key schema"):
        Schema(Type.MAP, value_schema=Schema.INT32)
    with pytest.raises(DataException, match="fields of a int32 schema"):
        _ = Schema.INT32.fields


def test_schemas_are_immutable():
    with pytest.raises(AttributeError):
        Schema.INT32.optional = True
    assert Schema.INT32.optional is False


def test_parameters_keep_insertion_order_but_not_for_equality():
    a = Decimal.builder(2).parameter("connect.decimal.precision", "10").build()
    b = (SchemaBuilder.bytes().name(Decimal.LOGICAL_NAME).version(1)
         .parameter("connect.decimal.precision", "10").parameter("scale", "2").build())
    assert list(a.parameters) == ["scale", "connect.decimal.precision"]  # as Kafka's LinkedHashMap
    assert list(b.parameters) == ["connect.decimal.precision", "scale"]
    assert a == b  # as Map.equals


def test_struct_equality_and_dict():
    schema = order_schema()
    customer = Struct(schema.field("customer").schema).put("name", "Ada")
    a = Struct(schema, {"id": 1, "customer": customer})
    b = Struct(schema, {"id": 1, "customer": customer})
    assert a == b and hash(a) == hash(b)
    assert a != Struct(schema, {"id": 2, "customer": customer})
    assert a.to_dict() == {"id": 1, "note": None, "status": "NEW", "customer": {"name": "Ada"}}
