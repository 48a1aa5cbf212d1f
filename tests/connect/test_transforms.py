"""Single message transforms and predicates, one at a time.

The cases follow Kafka Connect's own unit tests (connect/transforms/src/test in
apache/kafka: InsertFieldTest, ReplaceFieldTest, MaskFieldTest, CastTest, ...) and
the before/after examples of its documentation, on schema'd and schemaless data.
"""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from airflow_copycat.connect.data import Date, Decimal, Schema, SchemaBuilder, Struct, Time, Timestamp, Type
from airflow_copycat.connect.errors import ConfigException, DataException
from airflow_copycat.connect.records import SinkRecord, SourceRecord
from airflow_copycat.connect.transforms import Predicate, Transformation
from airflow_copycat.transforms.cast import Cast, java_double_string, java_float_string
from airflow_copycat.transforms.extract_hoist import ExtractField, HoistField, _parse_path_v2
from airflow_copycat.transforms.fields import InsertField, ReplaceField, ValueToKey
from airflow_copycat.transforms.filter import Filter
from airflow_copycat.transforms.flatten import Flatten
from airflow_copycat.transforms.headers import DropHeaders, HeaderFrom, InsertHeader, header_bytes
from airflow_copycat.transforms.mask import MaskField
from airflow_copycat.transforms.metadata import SetSchemaMetadata
from airflow_copycat.transforms.predicates import HasHeaderKey, RecordIsTombstone, TopicNameMatches
from airflow_copycat.transforms.routing import RegexRouter, TimestampRouter
from airflow_copycat.transforms.timestamps import TimestampConverter

UTC = dt.timezone.utc


def configured(cls, **configs):
    """A transform or predicate configured with ``configs`` (``a_b`` keys mean ``a.b``)."""
    obj = cls()
    obj.configure({k.replace("_", "."): v for k, v in configs.items()})
    return obj


def source(value=None, value_schema=None, key=None, key_schema=None, *, topic="topic", partition=0,
           timestamp=None, headers=()):
    return SourceRecord(topic, partition, key_schema, key, value_schema, value, timestamp, headers)


def optional_int32_default_42() -> Schema:
    return SchemaBuilder.int32().optional().default_value(42).build()


# ------------------------------------------------------------------------------------ contracts


def test_every_builtin_names_its_kafka_connect_class_and_keeps_the_contract():
    # Given every built-in, When inspected, Then each is a Transformation or Predicate with a Kafka Connect name
    builtins = [InsertField.Key, InsertField.Value, ReplaceField.Value, MaskField.Value, ValueToKey, ExtractField.Key,
                HoistField.Value, Flatten.Value, Cast.Key, TimestampConverter.Value, RegexRouter, TimestampRouter,
                HeaderFrom.Value, InsertHeader, DropHeaders, SetSchemaMetadata.Value, Filter]
    for cls in builtins:
        assert issubclass(cls, Transformation)
        assert cls.kafka_class.startswith("org.apache.kafka.connect.transforms.")
    assert InsertField.Value.kafka_class == "org.apache.kafka.connect.transforms.InsertField$Value"
    assert InsertField.Key.__qualname__ == "InsertField.Key"
    for cls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone):
        assert issubclass(cls, Predicate)
        assert cls.kafka_class == "org.apache.kafka.connect.transforms.predicates." + cls.__name__


# ---------------------------------------------------------------------------------- InsertField

_INSERT = dict(topic_field="topic_field!", partition_field="partition_field", timestamp_field="timestamp_field?",
               static_field="instance_id", static_value="my-instance-id")


def _insert(cls=InsertField.Value, **extra):
    configs = {"topic.field": "topic_field!", "partition.field": "partition_field",
               "timestamp.field": "timestamp_field?", "static.field": "instance_id",
               "static.value": "my-instance-id"}
    configs.update(extra)
    xform = cls()
    xform.configure(configs)
    return xform


def test_insert_field_needs_a_struct_when_the_value_has_a_schema():
    with pytest.raises(DataException, match="Struct"):
        _insert().apply(source(42, Schema.INT32))


def test_insert_field_copies_the_schema_and_inserts_the_configured_fields():
    # Given a struct with name, version and doc
    schema = SchemaBuilder.struct().name("name").version(1).doc("doc").field("magic", Schema.OPTIONAL_INT64).build()
    xform = _insert()
    # When the fields are inserted
    out = xform.apply(source(Struct(schema, {"magic": 42}), schema, timestamp=789))
    # Then the schema keeps its metadata and gains the fields, with the optionality asked for
    s = out.value_schema
    assert (s.name, s.version, s.doc) == ("name", 1, "doc")
    assert s.field("magic").schema == Schema.OPTIONAL_INT64
    assert s.field("topic_field").schema == Schema.STRING
    assert s.field("partition_field").schema == Schema.OPTIONAL_INT32
    assert s.field("timestamp_field").schema == Timestamp.builder().optional().build()
    assert s.field("instance_id").schema == Schema.OPTIONAL_STRING
    v = out.value
    assert (v["magic"], v["topic_field"], v["partition_field"], v["instance_id"]) == (42, "topic", 0, "my-instance-id")
    assert v["timestamp_field"] == Timestamp.to_logical(789)
    # And the updated schema is built once per input schema
    again = xform.apply(source(Struct(schema), schema, partition=1))
    assert again.value_schema is out.value_schema


def test_insert_field_schemaless():
    out = _insert().apply(source({"magic": 42}, timestamp=123))
    assert out.value == {"magic": 42, "topic_field": "topic", "partition_field": 0, "timestamp_field": 123,
                         "instance_id": "my-instance-id"}
    assert out.value_schema is None


def test_insert_field_leaves_tombstones_unchanged():
    schema = SchemaBuilder.struct().name("name").version(1).doc("doc").field("magic", Schema.OPTIONAL_INT64).build()
    for record in (source(None), source(None, schema)):
        out = _insert().apply(record)
        assert out.value is None and out.value_schema == record.value_schema


def test_insert_field_into_the_key_of_a_tombstone():
    out = _insert(InsertField.Key).apply(source(None, key={"magic": 42}))
    assert out.key == {"magic": 42, "topic_field": "topic", "partition_field": 0, "instance_id": "my-instance-id"}
    assert out.value is None


def test_insert_field_into_a_null_key_returns_the_record_itself():
    record = source({"magic": 42})
    assert _insert(InsertField.Key).apply(record) is record


@pytest.mark.parametrize("with_default, expected", [(False, None), (True, 42)])
def test_insert_field_replace_null_with_default(with_default, expected):
    schema = SchemaBuilder.struct().field("optional_with_default", optional_int32_default_42()).build()
    xform = configured(InsertField.Value, topic_field="topic_field", replace_null_with_default=with_default)
    out = xform.apply(source(Struct(schema, {"optional_with_default": None}), schema))
    assert out.value.get_without_default("optional_with_default") == expected


def test_insert_field_offset_is_for_sink_records_only():
    xform = configured(InsertField.Value, offset_field="offset!")
    sink = SinkRecord("t", 3, value={"a": 1}, kafka_offset=1234)
    assert xform.apply(sink).value == {"a": 1, "offset": 1234}
    with pytest.raises(DataException, match="SinkRecord"):
        xform.apply(source({"a": 1}))


def test_insert_field_required_field_without_a_value_is_a_data_error():
    schema = SchemaBuilder.struct().field("a", Schema.INT32).build()
    xform = configured(InsertField.Value, partition_field="p!")
    with pytest.raises(DataException, match="'p' is required"):
        xform.apply(source(Struct(schema, {"a": 1}), schema, partition=None))


def test_insert_field_field_already_in_the_schema_is_named():
    schema = SchemaBuilder.struct().field("topic", Schema.STRING).build()
    with pytest.raises(DataException, match="two fields named 'topic'"):
        configured(InsertField.Value, topic_field="topic").apply(source(Struct(schema, {"topic": "x"}), schema))


def test_insert_field_config_problems():
    with pytest.raises(ConfigException, match="no field to insert"):
        configured(InsertField.Value)
    with pytest.raises(ConfigException, match="static.value"):
        configured(InsertField.Value, static_field="origin")


# --------------------------------------------------------------------------------- ReplaceField


def test_replace_field_passes_tombstones():
    schema = SchemaBuilder.struct().field("dont", Schema.STRING).build()
    xform = configured(ReplaceField.Value, exclude="dont")
    for record in (source(None), source(None, schema)):
        assert xform.apply(record) is record


def test_replace_field_schemaless_excludes_and_renames():
    xform = configured(ReplaceField.Value, exclude="dont", renames="abc:xyz,foo:bar")
    out = xform.apply(source({"dont": "whatever", "abc": 42, "foo": True, "etc": "etc"}))
    assert out.value == {"xyz": 42, "bar": True, "etc": "etc"}


def test_replace_field_with_schema_includes_and_renames():
    schema = (SchemaBuilder.struct().field("dont", Schema.STRING).field("abc", Schema.INT32)
              .field("foo", Schema.BOOLEAN).field("etc", Schema.STRING).build())
    value = Struct(schema, {"dont": "whatever", "abc": 42, "foo": True, "etc": "etc"})
    out = configured(ReplaceField.Value, include="abc,foo", renames="abc:xyz,foo:bar").apply(source(value, schema))
    assert [f.name for f in out.value_schema.fields] == ["xyz", "bar"]
    assert out.value_schema.field("xyz").schema == Schema.INT32
    assert (out.value["xyz"], out.value["bar"]) == (42, True)


@pytest.mark.parametrize("cls", [ReplaceField.Value, ReplaceField.Key])
@pytest.mark.parametrize("with_default, expected", [(False, None), (True, 42)])
def test_replace_field_replace_null_with_default(cls, with_default, expected):
    schema = SchemaBuilder.struct().field("abc", optional_int32_default_42()).build()
    struct = Struct(schema, {"abc": None})
    record = source(struct, schema) if cls is ReplaceField.Value else source(None, key=struct, key_schema=schema)
    xform = configured(cls, include="abc", renames="abc:optional_with_default", replace_null_with_default=with_default)
    out = xform.apply(record)
    updated = out.value if cls is ReplaceField.Value else out.key
    assert len(updated.schema.fields) == 1
    assert updated.get_without_default("optional_with_default") == expected


def test_replace_field_accepts_the_deprecated_whitelist_and_blacklist():
    assert configured(ReplaceField.Value, whitelist="a,b").apply(source({"a": 1, "b": 2, "c": 3})).value == \
        {"a": 1, "b": 2}
    assert configured(ReplaceField.Value, blacklist="a").apply(source({"a": 1, "b": 2})).value == {"b": 2}


def test_replace_field_rejects_bad_renames():
    with pytest.raises(ConfigException, match="renames.*old:new"):
        configured(ReplaceField.Value, renames="abc:xyz,foo")


# ------------------------------------------------------------------------------------ MaskField

MASK_SCHEMA = (
    SchemaBuilder.struct()
    .field("magic", Schema.INT32).field("bool", Schema.BOOLEAN).field("byte", Schema.INT8)
    .field("short", Schema.INT16).field("int", Schema.INT32).field("long", Schema.INT64)
    .field("float", Schema.FLOAT32).field("double", Schema.FLOAT64).field("string", Schema.STRING)
    .field("bytes", Schema.BYTES)
    .field("date", Schema.DATE).field("time", Schema.TIME).field("timestamp", Schema.TIMESTAMP)
    .field("decimal", Decimal.schema(0))
    .field("array", SchemaBuilder.array(Schema.INT32)).field("map", SchemaBuilder.map(Schema.STRING, Schema.STRING))
    .field("withDefault", SchemaBuilder.string().optional().default_value("default").build())
    .build()
)
NOW = dt.datetime(2024, 5, 1, 13, 5, tzinfo=UTC)


def _mask_struct() -> Struct:
    return Struct(MASK_SCHEMA, {
        "magic": 42, "bool": True, "byte": 42, "short": 42, "int": 42, "long": 42, "float": 42.0, "double": 42.0,
        "string": "hmm", "bytes": b"\x01", "date": NOW.date(), "time": NOW.time(), "timestamp": NOW,
        "decimal": decimal.Decimal(42), "array": [1, 2, 3], "map": {"what": "what"}, "withDefault": None})


def _mask_map() -> dict:
    return {"magic": 42, "bool": True, "int": 42, "float": 42.0, "string": "55.121.20.20", "bytes": b"\x01",
            "date": NOW.date(), "timestamp": NOW, "time": NOW.time(), "bigdec": decimal.Decimal("42.0"),
            "list": [42], "map": {"key": "value"}}


def _mask(fields, replacement=None):
    configs = {"fields": fields, "replace.null.with.default": False}
    if replacement is not None:
        configs["replacement"] = replacement
    xform = MaskField.Value()
    xform.configure(configs)
    return xform


def test_mask_field_schemaless_masks_with_empty_values():
    fields = [k for k in _mask_map() if k != "magic"]
    out = _mask(fields).apply(SinkRecord("", 0, value=_mask_map(), kafka_offset=0)).value
    assert out == {"magic": 42, "bool": False, "int": 0, "float": 0.0, "string": "", "bytes": b"",
                   "date": dt.date(1970, 1, 1), "timestamp": dt.datetime(1970, 1, 1, tzinfo=UTC), "time": dt.time(0),
                   "bigdec": decimal.Decimal(0), "list": [], "map": {}}
    assert type(out["bool"]) is bool and type(out["int"]) is int and type(out["float"]) is float


def test_mask_field_with_schema_masks_with_the_empty_value_of_each_type():
    fields = [f.name for f in MASK_SCHEMA.fields if f.name != "magic"]
    out = _mask(fields).apply(SinkRecord("", 0, value_schema=MASK_SCHEMA, value=_mask_struct())).value
    assert out.schema is MASK_SCHEMA
    expected = {"magic": 42, "bool": False, "byte": 0, "short": 0, "int": 0, "long": 0, "float": 0.0, "double": 0.0,
                "string": "", "bytes": b"", "date": dt.date(1970, 1, 1), "time": dt.time(0),
                "timestamp": dt.datetime(1970, 1, 1, tzinfo=UTC), "decimal": decimal.Decimal(0), "array": [],
                "map": {}}
    for name, value in expected.items():
        assert out[name] == value, name
    assert out.get_without_default("withDefault") is None
    out.validate()


@pytest.mark.parametrize("field, replacement, expected", [
    ("int", "123", 123), ("float", "123.0", 123.0), ("string", "123", "123"),
    ("bigdec", "123.0", decimal.Decimal("123.0")),
])
def test_mask_field_schemaless_with_replacement(field, replacement, expected):
    out = _mask([field], replacement).apply(SinkRecord("", 0, value=_mask_map())).value
    assert out[field] == expected and type(out[field]) is type(expected)


@pytest.mark.parametrize("field, replacement, expected", [
    ("short", "123", 123), ("byte", "123", 123), ("int", "123", 123), ("long", "123", 123),
    ("float", "123.0", 123.0), ("double", "123.0", 123.0), ("string", "123", "123"),
    ("decimal", "123", decimal.Decimal(123)),
])
def test_mask_field_with_schema_and_replacement(field, replacement, expected):
    out = _mask([field], replacement).apply(SinkRecord("", 0, value_schema=MASK_SCHEMA, value=_mask_struct())).value
    assert out[field] == expected


@pytest.mark.parametrize("field", ["date", "bool", "list", "map", "timestamp"])
def test_mask_field_schemaless_replacement_only_for_numbers_and_strings(field):
    with pytest.raises(DataException, match="cannot mask"):
        _mask([field], "123").apply(SinkRecord("", 0, value=_mask_map()))


@pytest.mark.parametrize("field", ["time", "timestamp", "array", "bool"])
def test_mask_field_with_schema_replacement_only_for_numbers_and_strings(field):
    with pytest.raises(DataException, match=f"field '{field}'"):
        _mask([field], "123").apply(SinkRecord("", 0, value_schema=MASK_SCHEMA, value=_mask_struct()))


@pytest.mark.parametrize("fields", [["int"], ["float"], ["bigdec"], ["string", "int"]])
def test_mask_field_replacement_of_the_wrong_type(fields):
    with pytest.raises(DataException, match="not a valid"):
        _mask(fields, "foo").apply(SinkRecord("", 0, value=_mask_map()))


def test_mask_field_replacement_out_of_range_names_the_field():
    with pytest.raises(DataException, match="'byte'.*out of range"):
        _mask(["byte"], "1000").apply(SinkRecord("", 0, value_schema=MASK_SCHEMA, value=_mask_struct()))


def test_mask_field_decimal_replacement_must_fit_the_scale():
    with pytest.raises(DataException, match="'decimal'.*scale 0"):
        _mask(["decimal"], "1.5").apply(SinkRecord("", 0, value_schema=MASK_SCHEMA, value=_mask_struct()))


def test_mask_field_rejects_an_empty_replacement():
    with pytest.raises(ConfigException, match="replacement"):
        _mask(["short"], "")


def test_mask_field_empty_lists_and_maps_are_fresh_per_record():
    xform = _mask(["array", "map"])
    first = xform.apply(SinkRecord("", 0, value_schema=MASK_SCHEMA, value=_mask_struct())).value
    first["array"].append(0)
    first["map"]["k"] = "v"
    second = xform.apply(SinkRecord("", 0, value_schema=MASK_SCHEMA, value=_mask_struct())).value
    assert second["array"] == [] and second["map"] == {}


def test_mask_field_requires_fields():
    with pytest.raises(ConfigException, match="fields"):
        MaskField.Value().configure({})


# ----------------------------------------------------------------------------------- ValueToKey


def test_value_to_key_schemaless():
    out = configured(ValueToKey, fields="a,b").apply(source({"a": 1, "b": 2, "c": 3}))
    assert out.key == {"a": 1, "b": 2} and out.key_schema is None


def test_value_to_key_with_schema():
    schema = SchemaBuilder.struct().field("a", Schema.INT32).field("b", Schema.INT32).field("c", Schema.INT32).build()
    out = configured(ValueToKey, fields="a,b").apply(source(Struct(schema, {"a": 1, "b": 2, "c": 3}), schema))
    assert out.key_schema == SchemaBuilder.struct().field("a", Schema.INT32).field("b", Schema.INT32).build()
    assert out.key == Struct(out.key_schema, {"a": 1, "b": 2})
    assert out.value_schema is schema


def test_value_to_key_missing_field_is_a_data_error():
    schema = SchemaBuilder.struct().field("a", Schema.INT32).build()
    with pytest.raises(DataException, match="'not_exist' does not exist"):
        configured(ValueToKey, fields="not_exist").apply(source(Struct(schema, {"a": 1}), schema))


@pytest.mark.parametrize("with_default, expected", [(False, None), (True, 42)])
def test_value_to_key_replace_null_with_default(with_default, expected):
    schema = SchemaBuilder.struct().field("optional_with_default", optional_int32_default_42()).build()
    xform = configured(ValueToKey, fields="optional_with_default", replace_null_with_default=with_default)
    out = xform.apply(source(Struct(schema, {"optional_with_default": None}), schema))
    assert out.key.get_without_default("optional_with_default") == expected


# --------------------------------------------------------------------------------- ExtractField


def _extract(cls=ExtractField.Value, **configs):
    xform = cls()
    xform.configure(configs)
    return xform


def test_extract_field_schemaless():
    assert _extract(ExtractField.Key, field="magic").apply(source(None, key={"magic": 42})).key == 42


def test_extract_field_schemaless_nested_path():
    xform = _extract(ExtractField.Key, **{"field": "magic.foo", "field.syntax.version": "v2"})
    assert xform.apply(source(None, key={"magic": {"foo": 42}})).key == 42


def test_extract_field_null_schemaless():
    out = _extract(ExtractField.Key, field="magic").apply(source(None, key=None))
    assert out.key is None and out.key_schema is None


def test_extract_field_with_schema():
    schema = SchemaBuilder.struct().field("magic", Schema.INT32).build()
    out = _extract(ExtractField.Key, field="magic").apply(source(None, key=Struct(schema, {"magic": 42}),
                                                                 key_schema=schema))
    assert out.key_schema == Schema.INT32 and out.key == 42


def test_extract_field_with_schema_and_nested_path():
    inner = SchemaBuilder.struct().field("foo", Schema.INT32).build()
    schema = SchemaBuilder.struct().field("magic", inner).build()
    xform = _extract(ExtractField.Key, **{"field": "magic.foo", "field.syntax.version": "V2"})
    out = xform.apply(source(None, key=Struct(schema, {"magic": Struct(inner, {"foo": 42})}), key_schema=schema))
    assert out.key_schema == Schema.INT32 and out.key == 42


def test_extract_field_null_with_schema():
    schema = SchemaBuilder.struct().field("magic", Schema.INT32).optional().build()
    out = _extract(ExtractField.Key, field="magic").apply(source(None, key=None, key_schema=schema))
    assert out.key_schema == Schema.INT32 and out.key is None


def test_extract_field_missing_schemaless_gives_null():
    assert _extract(ExtractField.Key, field="nonexistent").apply(source(None, key={"magic": 42})).key is None
    nested = _extract(ExtractField.Key, **{"field": "magic.nonexistent", "field.syntax.version": "V2"})
    assert nested.apply(source(None, key={"magic": {"foo": 42}})).key is None


def test_extract_field_missing_with_schema_is_a_data_error():
    inner = SchemaBuilder.struct().field("foo", Schema.INT32).build()
    schema = SchemaBuilder.struct().field("magic", inner).build()
    key = Struct(schema, {"magic": Struct(inner, {"foo": 42})})
    with pytest.raises(DataException, match="unknown field 'nonexistent'"):
        _extract(ExtractField.Key, field="nonexistent").apply(source(None, key=key, key_schema=schema))
    with pytest.raises(DataException, match="'magic' has no field 'nonexistent'"):
        _extract(ExtractField.Key, **{"field": "magic.nonexistent", "field.syntax.version": "V2"}).apply(
            source(None, key=key, key_schema=schema))


@pytest.mark.parametrize("cls", [ExtractField.Key, ExtractField.Value])
@pytest.mark.parametrize("with_default, expected", [(False, None), (True, 42)])
def test_extract_field_unset_optional(cls, with_default, expected):
    schema = SchemaBuilder.struct().field("optional_with_default", optional_int32_default_42()).build()
    struct = Struct(schema, {"optional_with_default": None})
    record = source(struct, schema) if cls is ExtractField.Value else source(None, key=struct, key_schema=schema)
    out = _extract(cls, field="optional_with_default", **{"replace.null.with.default": with_default}).apply(record)
    assert (out.value if cls is ExtractField.Value else out.key) == expected


@pytest.mark.parametrize("path, steps", [
    ("..", ["", "", ""]), ("foo..", ["foo", "", ""]), (".bar.", ["", "bar", ""]), ("foobarbaz", ["foobarbaz"]),
    ("foo.bar.baz", ["foo", "bar", "baz"]), ("foo`bar`baz", ["foo`bar`baz"]), ("`foo.bar.baz`", ["foo.bar.baz"]),
    ("foo.`bar.baz`", ["foo", "bar.baz"]), ("`foo.bar`.baz", ["foo.bar", "baz"]),
    ("foo.`bar`.baz", ["foo", "bar", "baz"]), ("foo.``bar.baz`", ["foo", "`bar.baz"]),
    ("foo.`bar.baz``", ["foo", "bar.baz`"]), ("foo.`ba`r.baz`", ["foo", "ba`r.baz"]),
    ("foo.ba`r.baz", ["foo", "ba`r", "baz"]), ("foo.``bar``.baz", ["foo", "`bar`", "baz"]),
    ("``foo.bar.baz``", ["`foo.bar.baz`"]), ("foo.`bar\\`.baz`", ["foo", "bar`.baz"]),
    ("foo.`bar.`baz`", ["foo", "bar.`baz"]), ("foo.`bar\\`.`baz`", ["foo", "bar`.`baz"]),
])
def test_field_path_v2_notation(path, steps):
    assert _parse_path_v2(path) == steps


@pytest.mark.parametrize("path, position", [("`foo.bar.baz", 0), ("foo.`bar.baz", 4), ("foo.bar.`baz", 8),
                                            ("foo.bar.`baz\\`", 8)])
def test_field_path_v2_incomplete_backticks_are_config_errors(path, position):
    with pytest.raises(ConfigException, match=f"backtick at position {position}"):
        _extract(field=path, **{"field.syntax.version": "V2"})


# ----------------------------------------------------------------------------------- HoistField


def test_hoist_field_schemaless():
    out = configured(HoistField.Key, field="magic").apply(source(None, key=42))
    assert out.key == {"magic": 42} and out.key_schema is None


def test_hoist_field_with_schema():
    out = configured(HoistField.Key, field="magic").apply(source(None, key=42, key_schema=Schema.INT32))
    assert out.key_schema == SchemaBuilder.struct().field("magic", Schema.INT32).build()
    assert out.key["magic"] == 42


def test_hoist_field_schemaless_map_is_a_new_dict():
    xform = configured(HoistField.Value, field="k")
    first = xform.apply(source({"a": 1})).value
    first["b"] = 2
    assert xform.apply(source({"a": 1})).value == {"k": {"a": 1}}


# -------------------------------------------------------------------------------------- Flatten

_SUPPORTED = (SchemaBuilder.struct().field("int8", Schema.INT8).field("int16", Schema.INT16)
              .field("int32", Schema.INT32).field("int64", Schema.INT64).field("float32", Schema.FLOAT32)
              .field("float64", Schema.FLOAT64).field("boolean", Schema.BOOLEAN).field("string", Schema.STRING)
              .field("bytes", Schema.BYTES).build())
_SUPPORTED_VALUES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "float32": 32.0, "float64": 64.0,
                     "boolean": True, "string": "stringy", "bytes": b"bytes"}


def test_flatten_needs_a_struct_or_a_map():
    with pytest.raises(DataException):
        configured(Flatten.Value).apply(source(42, Schema.INT32))
    with pytest.raises(DataException, match="map"):
        configured(Flatten.Value).apply(source(42))


def test_flatten_nested_struct():
    one = SchemaBuilder.struct().field("B", _SUPPORTED).build()
    two = SchemaBuilder.struct().field("A", one).build()
    value = Struct(two, {"A": Struct(one, {"B": Struct(_SUPPORTED, _SUPPORTED_VALUES)})})
    out = configured(Flatten.Value).apply(source(value, two))
    assert out.value_schema.type is Type.STRUCT
    assert len(out.value_schema.fields) == 9
    assert {f.name: out.value[f.name] for f in out.value_schema.fields} == \
        {"A.B." + k: v for k, v in _SUPPORTED_VALUES.items()}


def test_flatten_nested_map_with_delimiter():
    out = configured(Flatten.Value, delimiter="#").apply(source({"A": {"B": dict(_SUPPORTED_VALUES)}}))
    assert out.value_schema is None
    assert out.value == {"A#B#" + k: v for k, v in _SUPPORTED_VALUES.items()}


def test_flatten_optional_field_struct():
    inner = SchemaBuilder.struct().field("opt_int32", Schema.OPTIONAL_INT32).build()
    outer = SchemaBuilder.struct().field("B", inner).build()
    out = configured(Flatten.Value).apply(source(Struct(outer, {"B": Struct(inner, {"opt_int32": None})}), outer))
    assert out.value["B.opt_int32"] is None


def test_flatten_optional_struct_with_null_value():
    schema = SchemaBuilder.struct().optional().field("opt_int32", Schema.OPTIONAL_INT32).build()
    out = configured(Flatten.Value).apply(source(None, schema))
    assert out.value_schema.type is Type.STRUCT and out.value is None


def test_flatten_null_optional_nested_struct_and_optionality_from_the_parent():
    inner = SchemaBuilder.struct().optional().field("req", Schema.INT32).field("opt", Schema.OPTIONAL_INT32).build()
    outer = SchemaBuilder.struct().field("B", inner).build()
    out = configured(Flatten.Value).apply(source(Struct(outer, {"B": None}), outer))
    assert out.value["B.req"] is None and out.value["B.opt"] is None
    # a required field under an optional struct becomes optional
    assert out.value_schema.field("B.req").schema == Schema.OPTIONAL_INT32
    out.value.validate()


def test_flatten_keeps_the_default_of_a_nested_field():
    inner = (SchemaBuilder.struct().optional()
             .field("opt_field", SchemaBuilder.string().optional().default_value("child_default").build()).build())
    outer = SchemaBuilder.struct().field("c", inner).build()
    out = configured(Flatten.Value).apply(source(Struct(outer, {"c": None}), outer))
    assert out.value_schema.field("c.opt_field").schema == \
        SchemaBuilder.string().optional().default_value("child_default").build()


def test_flatten_optional_field_map():
    out = configured(Flatten.Value).apply(source({"B": {"opt_int32": None}}))
    assert out.value == {"B.opt_int32": None}


def test_flatten_key():
    out = configured(Flatten.Key).apply(source(None, key={"A": {"B": 12}}))
    assert out.key == {"A.B": 12} and out.key_schema is None


def test_flatten_keeps_arrays_as_they_are():
    value = {"foo": ["bar", {"baz": {"lfg": "lfg"}}]}
    assert configured(Flatten.Value).apply(source(value)).value == value
    nested = SchemaBuilder.struct().field("lfg", Schema.STRING).build()
    inner = SchemaBuilder.struct().field("baz", nested).build()
    schema = SchemaBuilder.struct().field("foo", SchemaBuilder.array(inner).doc("durk").build()).build()
    struct = Struct(schema, {"foo": [Struct(inner, {"baz": Struct(nested, {"lfg": "lfg"})})]})
    out = configured(Flatten.Value).apply(source(struct, schema))
    assert out.value == struct and out.value_schema == schema


def test_flatten_passes_tombstones():
    assert configured(Flatten.Value).apply(source(None)).value is None
    schema = SchemaBuilder.struct().name("name").version(1).doc("doc").field("magic", Schema.OPTIONAL_INT64).build()
    out = configured(Flatten.Value).apply(source(None, schema))
    assert out.value is None and out.value_schema == schema


def test_flatten_keeps_null_fields_in_order():
    value = {"firstNull": None, "firstNonNull": "nonNull", "secondNull": None, "secondNonNull": "alsoNonNull",
             "thirdNonNull": None}
    assert list(configured(Flatten.Value).apply(source(value)).value.items()) == list(value.items())
    builder = SchemaBuilder.struct()
    for name in value:
        builder.field(name, Schema.OPTIONAL_STRING)
    schema = builder.build()
    struct = Struct(schema, value)
    assert configured(Flatten.Value).apply(source(struct, schema)).value == struct


def test_flatten_refuses_maps_with_a_schema():
    schema = SchemaBuilder.struct().field("m", SchemaBuilder.map(Schema.STRING, Schema.STRING).build()).build()
    with pytest.raises(DataException, match="field 'm'"):
        configured(Flatten.Value).apply(source(Struct(schema, {"m": {}}), schema))


# ----------------------------------------------------------------------------------------- Cast


@pytest.mark.parametrize("spec, match", [
    ("", "spec"), ("foo:faketype", "faketype"), ("foo:array", "array"), ("foo:bytes", "bytes"),
    ("foo:int8:extra", "field:type"), ("foo:int8,int32", "only entry"),
])
def test_cast_config_problems(spec, match):
    with pytest.raises(ConfigException, match=match):
        configured(Cast.Value, spec=spec)


def test_cast_passes_null_values_and_keys():
    for xform, record in [(configured(Cast.Value, spec="foo:int64"), source(None, Schema.STRING, "key", Schema.STRING)),
                          (configured(Cast.Value, spec="foo:int64"), source(None, None, "key", Schema.STRING)),
                          (configured(Cast.Key, spec="foo:int64"), source("value", Schema.STRING, None, Schema.STRING)),
                          (configured(Cast.Key, spec="foo:int64"), source("value", Schema.STRING))]:
        assert xform.apply(record) is record


@pytest.mark.parametrize("with_default, expected", [(False, None), (True, "10")])
def test_cast_field_with_default_value(with_default, expected):
    schema = SchemaBuilder.struct().field("magic", SchemaBuilder.int32().optional().default_value(10).build()).build()
    xform = configured(Cast.Value, spec="magic:string", replace_null_with_default=with_default)
    out = xform.apply(source(Struct(schema, {"magic": None}), schema))
    assert out.value_schema.field("magic").schema.type is Type.STRING
    assert out.value_schema.field("magic").schema.default == "10"
    assert out.value.get_without_default("magic") == expected


def test_cast_whole_key_with_schema():
    out = configured(Cast.Key, spec="int8").apply(source("bogus", Schema.STRING, 42, Schema.INT32))
    assert out.key_schema.type is Type.INT8 and out.key == 42


@pytest.mark.parametrize("target, value, expected", [
    ("int8", 42, 42), ("int16", 42, 42), ("int32", 42, 42), ("int64", 42, 42), ("float32", 42, 42.0),
    ("float64", 42, 42.0), ("boolean", 42, True), ("boolean", 0, False), ("string", 42, "42"),
])
def test_cast_whole_value(target, value, expected):
    out = configured(Cast.Value, spec=target).apply(source(value, Schema.INT32))
    assert out.value_schema.type is Type(target)
    assert out.value == expected and type(out.value) is type(expected)
    schemaless = configured(Cast.Value, spec=target).apply(source(value))
    assert schemaless.value_schema is None
    assert schemaless.value == expected and type(schemaless.value) is type(expected)


def test_cast_whole_decimal_and_timestamp_to_string():
    out = configured(Cast.Value, spec="string").apply(source(decimal.Decimal(42), Decimal.schema(0)))
    assert out.value_schema.type is Type.STRING and out.value_schema.name is None and out.value == "42"
    ts = Timestamp.to_logical(86_400_000 + 1)
    out = configured(Cast.Value, spec="string").apply(source(ts, Schema.TIMESTAMP))
    assert out.value == "1970-01-02T00:00:00.001Z"


def test_cast_whole_value_casts_the_schema_default():
    schema = SchemaBuilder.float32().default_value(-42.125).build()
    out = configured(Cast.Value, spec="int32").apply(source(42.125, schema))
    assert out.value_schema.type is Type.INT32 and out.value == 42 and out.value_schema.default == -42


def test_cast_whole_key_schemaless():
    out = configured(Cast.Key, spec="int8").apply(source("bogus", Schema.STRING, 42))
    assert out.key_schema is None and out.key == 42


def test_cast_whole_value_of_an_unsupported_type_is_a_data_error():
    with pytest.raises(DataException, match="list"):
        configured(Cast.Value, spec="int8").apply(source(["foo"]))


def test_cast_logical_to_primitive():
    schema = (SchemaBuilder.struct().field("date_to_int32", Schema.DATE).field("timestamp_to_int64", Schema.TIMESTAMP)
              .field("time_to_int64", Schema.TIME).field("decimal_to_int32", Decimal.schema(0))
              .field("timestamp_to_float64", Schema.TIMESTAMP)
              .field("null_timestamp_to_int32", Schema.OPTIONAL_TIMESTAMP).build())
    value = Struct(schema, {"date_to_int32": dt.date(1970, 1, 2), "timestamp_to_int64": Timestamp.to_logical(0),
                            "time_to_int64": Time.to_logical(1), "decimal_to_int32": decimal.Decimal(2**31),
                            "timestamp_to_float64": Timestamp.to_logical(253402300799999), "null_timestamp_to_int32": None})
    xform = configured(Cast.Value, spec="date_to_int32:int32,timestamp_to_int64:int64,time_to_int64:int64,"
                                        "decimal_to_int32:int32,timestamp_to_float64:float64,null_timestamp_to_int32:int32")
    out = xform.apply(source(value, schema)).value
    assert out["date_to_int32"] == 1
    assert out["timestamp_to_int64"] == 0
    assert out["time_to_int64"] == 1
    assert out["decimal_to_int32"] == -(2**31)  # narrowing keeps the low 32 bits, as Java's intValue
    assert out["timestamp_to_float64"] == 253402300799999.0
    assert out["null_timestamp_to_int32"] is None
    types = {f.name: f.schema.type for f in out.schema.fields}
    assert types == {"date_to_int32": Type.INT32, "timestamp_to_int64": Type.INT64, "time_to_int64": Type.INT64,
                     "decimal_to_int32": Type.INT32, "timestamp_to_float64": Type.FLOAT64,
                     "null_timestamp_to_int32": Type.INT32}
    assert all(f.schema.name is None for f in out.schema.fields)


def test_cast_logical_to_string():
    schema = (SchemaBuilder.struct().field("date", Schema.DATE).field("decimal", Decimal.schema(0))
              .field("time", Schema.TIME).field("timestamp", Schema.TIMESTAMP).build())
    value = Struct(schema, {"date": dt.date(1970, 1, 2), "decimal": decimal.Decimal(1982),
                            "time": dt.time(1, 0), "timestamp": dt.datetime(2024, 5, 1, 13, 5, 0, 42000, tzinfo=UTC)})
    out = configured(Cast.Value, spec="date:string,decimal:string,time:string,timestamp:string").apply(
        source(value, schema)).value
    assert (out["date"], out["decimal"], out["time"], out["timestamp"]) == \
        ("1970-01-02", "1982", "01:00:00.000Z", "2024-05-01T13:05:00.042Z")
    assert all(f.schema.type is Type.STRING for f in out.schema.fields)


def test_cast_fields_with_schema():
    schema = (SchemaBuilder.struct().field("int8", Schema.INT8).field("int16", Schema.OPTIONAL_INT16)
              .field("int32", SchemaBuilder.int32().default_value(2).build()).field("int64", Schema.INT64)
              .field("float32", Schema.FLOAT32).field("float64", SchemaBuilder.float64().default_value(-1.125).build())
              .field("boolean", Schema.BOOLEAN).field("string", Schema.STRING).field("bigdecimal", Decimal.schema(0))
              .field("date", Schema.DATE).field("optional", Schema.OPTIONAL_FLOAT32).field("timestamp", Schema.TIMESTAMP)
              .field("bytes", Schema.BYTES).build())
    value = Struct(schema, {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "float32": 32.0, "float64": -64.0,
                            "boolean": True, "bigdecimal": decimal.Decimal(42), "date": dt.date(1970, 1, 2),
                            "string": "42", "timestamp": Timestamp.to_logical(0),
                            "bytes": bytes([0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10])})
    xform = configured(Cast.Value, spec="int8:int16,int16:int32,int32:int64,int64:boolean,float32:float64,"
                                        "float64:boolean,boolean:int8,string:int32,bigdecimal:string,date:string,"
                                        "optional:int32,bytes:string")
    out = xform.apply(source(value, schema)).value
    s = out.schema
    assert out["int8"] == 8 and s.field("int8").schema.type is Type.INT16
    assert out["int16"] == 16 and s.field("int16").schema.optional
    assert out["int32"] == 32 and s.field("int32").schema.default == 2 and s.field("int32").schema.type is Type.INT64
    assert out["int64"] is True
    assert out["float32"] == 32.0 and s.field("float32").schema.type is Type.FLOAT64
    assert out["float64"] is True and s.field("float64").schema.default is True
    assert out["boolean"] == 1 and s.field("boolean").schema.type is Type.INT8
    assert out["string"] == 42 and s.field("string").schema.type is Type.INT32
    assert out["bigdecimal"] == "42"
    assert out["date"] == "1970-01-02"
    assert out["timestamp"] == Timestamp.to_logical(0) and s.field("timestamp").schema == Schema.TIMESTAMP
    assert out["bytes"] == "/ty6mHZUMhA="
    assert out["optional"] is None and s.field("optional").schema == Schema.OPTIONAL_INT32


def test_cast_fields_schemaless():
    value = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "float32": 32.0, "float64": -64.0, "boolean": True,
             "string": "42"}
    out = configured(Cast.Value, spec="int8:int16,int16:int32,int32:int64,int64:boolean,float32:float64,"
                                      "float64:boolean,boolean:int8,string:int32").apply(source(value)).value
    assert out == {"int8": 8, "int16": 16, "int32": 32, "int64": True, "float32": 32.0, "float64": True,
                   "boolean": 1, "string": 42}


@pytest.mark.parametrize("spec, value, expected", [
    ("int8", 300, 44), ("int8", 42.9, 42), ("int8", -42.9, -42), ("int16", 70000, 4464),
    ("int32", 1e20, 2**31 - 1), ("int64", float("nan"), 0), ("boolean", "TRUE", True), ("boolean", "yes", False),
    ("boolean", 0.5, False), ("float64", "1e3", 1000.0), ("string", True, "true"), ("string", 1e10, "1.0E10"),
    ("string", 0.001, "0.001"), ("string", 1234567.0, "1234567.0"), ("string", b"\x00\x01", "AAE="),
])
def test_cast_follows_java_conversions(spec, value, expected):
    assert configured(Cast.Value, spec=spec).apply(source(value)).value == expected


@pytest.mark.parametrize("spec, value", [("age:int8", "128"), ("age:int32", "4x"), ("age:int32", "4.0"),
                                         ("age:float64", "abc"), ("age:int32", b"\x01")])
def test_cast_of_bad_data_names_the_field(spec, value):
    with pytest.raises(DataException, match="field 'age'"):
        configured(Cast.Value, spec=spec).apply(source({"age": value}))


def test_cast_updated_schema_is_cached():
    schema = SchemaBuilder.struct().field("a", Schema.INT32).build()
    xform = configured(Cast.Value, spec="a:string")
    first = xform.apply(source(Struct(schema, {"a": 1}), schema))
    second = xform.apply(source(Struct(schema, {"a": 2}), schema))
    assert first.value_schema is second.value_schema and second.value["a"] == "2"


def test_java_number_text():
    assert [java_double_string(x) for x in (42.0, -0.0, 1e-4, 1.234e-5, 1e7, 123.456, float("inf"))] == \
        ["42.0", "-0.0", "1.0E-4", "1.234E-5", "1.0E7", "123.456", "Infinity"]
    assert java_float_string(0.10000000149011612) == "0.1"


# --------------------------------------------------------------------------- TimestampConverter

EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
TIME = dt.time(0, 0, 1, 234000)
DATE = dt.date(1970, 1, 2)
DATE_PLUS_TIME = dt.datetime(1970, 1, 2, 0, 0, 1, 234000, tzinfo=UTC)
DATE_PLUS_TIME_UNIX = 86_401_234
DATE_PLUS_TIME_UNIX_MICROS = DATE_PLUS_TIME_UNIX * 1000 + 123
DATE_PLUS_TIME_UNIX_NANOS = DATE_PLUS_TIME_UNIX_MICROS * 1000 + 456
DATE_PLUS_TIME_UNIX_SECONDS = 86_401
STRING_DATE_FMT = "yyyy MM dd HH mm ss SSS z"
DATE_PLUS_TIME_STRING = "1970 01 02 00 00 01 234 UTC"


def _ts(cls=TimestampConverter.Value, **configs):
    xform = cls()
    xform.configure(configs)
    return xform


@pytest.mark.parametrize("configs", [{}, {"target.type": "invalid"},
                                     {"target.type": "unix", "unix.precision": "invalid"},
                                     {"target.type": "string"}, {"target.type": "unix", "format": "bad-format"}])
def test_timestamp_converter_config_problems(configs):
    with pytest.raises(ConfigException):
        _ts(**configs)


def test_timestamp_converter_valid_unix_precision():
    _ts(**{"target.type": "unix", "unix.precision": "seconds"})


@pytest.mark.parametrize("target, given, expected", [
    ("Timestamp", DATE_PLUS_TIME, DATE_PLUS_TIME),
    ("Date", DATE_PLUS_TIME, DATE),
    ("Time", DATE_PLUS_TIME, TIME),
    ("unix", DATE_PLUS_TIME, DATE_PLUS_TIME_UNIX),
    ("Timestamp", DATE, dt.datetime(1970, 1, 2, tzinfo=UTC)),
    ("Timestamp", TIME, dt.datetime(1970, 1, 1, 0, 0, 1, 234000, tzinfo=UTC)),
    ("Timestamp", DATE_PLUS_TIME_UNIX, DATE_PLUS_TIME),
    ("Timestamp", DATE_PLUS_TIME_STRING, DATE_PLUS_TIME),
    ("string", DATE_PLUS_TIME, DATE_PLUS_TIME_STRING),
])
def test_timestamp_converter_schemaless(target, given, expected):
    out = _ts(**{"target.type": target, "format": STRING_DATE_FMT}).apply(source(given))
    assert out.value_schema is None and out.value == expected and type(out.value) is type(expected)


@pytest.mark.parametrize("target, schema, given, expected_schema, expected", [
    ("Timestamp", Schema.TIMESTAMP, DATE_PLUS_TIME, Schema.TIMESTAMP, DATE_PLUS_TIME),
    ("Date", Schema.TIMESTAMP, DATE_PLUS_TIME, Schema.DATE, DATE),
    ("Time", Schema.TIMESTAMP, DATE_PLUS_TIME, Schema.TIME, TIME),
    ("unix", Schema.TIMESTAMP, DATE_PLUS_TIME, Schema.INT64, DATE_PLUS_TIME_UNIX),
    ("string", Schema.TIMESTAMP, DATE_PLUS_TIME, Schema.STRING, DATE_PLUS_TIME_STRING),
    ("Timestamp", Schema.DATE, DATE, Schema.TIMESTAMP, dt.datetime(1970, 1, 2, tzinfo=UTC)),
    ("Timestamp", Schema.TIME, TIME, Schema.TIMESTAMP, dt.datetime(1970, 1, 1, 0, 0, 1, 234000, tzinfo=UTC)),
    ("Timestamp", Schema.INT64, DATE_PLUS_TIME_UNIX, Schema.TIMESTAMP, DATE_PLUS_TIME),
    ("Timestamp", Schema.STRING, DATE_PLUS_TIME_STRING, Schema.TIMESTAMP, DATE_PLUS_TIME),
])
def test_timestamp_converter_with_schema(target, schema, given, expected_schema, expected):
    out = _ts(**{"target.type": target, "format": STRING_DATE_FMT}).apply(source(given, schema))
    assert out.value_schema == expected_schema and out.value == expected


@pytest.mark.parametrize("target", ["string", "unix", "Date", "Time", "Timestamp"])
def test_timestamp_converter_nulls(target):
    xform = _ts(**{"target.type": target, "format": STRING_DATE_FMT})
    assert xform.apply(source(None)).value is None
    out = xform.apply(source(None, Schema.OPTIONAL_TIMESTAMP))
    assert out.value is None and out.value_schema.optional
    field = _ts(**{"target.type": target, "format": STRING_DATE_FMT, "field": "ts"})
    assert field.apply(source({"ts": None})).value == {"ts": None}
    schema = SchemaBuilder.struct().field("ts", Schema.OPTIONAL_TIMESTAMP).field("other", Schema.STRING).build()
    out = field.apply(source(Struct(schema, {"ts": None, "other": "test"}), schema))
    assert out.value["ts"] is None and out.value["other"] == "test"
    assert out.value_schema.field("ts").schema.optional
    out = field.apply(source(None, schema.copy(optional=True)))
    assert out.value is None


def test_timestamp_converter_schemaless_field():
    out = _ts(**{"target.type": "Date", "field": "ts"}).apply(source({"ts": DATE_PLUS_TIME, "other": "test"}))
    assert out.value == {"ts": DATE, "other": "test"}


def test_timestamp_converter_with_schema_field():
    schema = SchemaBuilder.struct().field("ts", Schema.TIMESTAMP).field("other", Schema.STRING).build()
    out = _ts(**{"target.type": "Date", "field": "ts"}).apply(
        source(Struct(schema, {"ts": DATE_PLUS_TIME, "other": "test"}), schema))
    assert out.value_schema == SchemaBuilder.struct().field("ts", Schema.DATE).field("other", Schema.STRING).build()
    assert (out.value["ts"], out.value["other"]) == (DATE, "test")


@pytest.mark.parametrize("with_default, expected", [(False, None), (True, EPOCH)])
def test_timestamp_converter_null_field_with_default(with_default, expected):
    schema = SchemaBuilder.struct().field(
        "ts", Timestamp.builder().optional().default_value(EPOCH).build()).build()
    xform = _ts(**{"target.type": "Timestamp", "field": "ts", "replace.null.with.default": with_default})
    out = xform.apply(source(Struct(schema, {"ts": None}), schema))
    assert out.value.get_without_default("ts") == expected


@pytest.mark.parametrize("precision, given, expected", [
    ("microseconds", DATE_PLUS_TIME_UNIX_MICROS, DATE_PLUS_TIME),
    ("nanoseconds", DATE_PLUS_TIME_UNIX_NANOS, DATE_PLUS_TIME),
    ("seconds", DATE_PLUS_TIME_UNIX_SECONDS, dt.datetime(1970, 1, 2, 0, 0, 1, tzinfo=UTC)),
])
def test_timestamp_converter_unix_precision_in(precision, given, expected):
    schema = SchemaBuilder.struct().field("ts", Schema.INT64).build()
    out = _ts(**{"target.type": "Timestamp", "field": "ts", "unix.precision": precision}).apply(
        source(Struct(schema, {"ts": given}), schema))
    assert out.value_schema.field("ts").schema == Schema.TIMESTAMP and out.value["ts"] == expected


@pytest.mark.parametrize("precision, expected", [("microseconds", DATE_PLUS_TIME_UNIX * 1000),
                                                 ("nanoseconds", DATE_PLUS_TIME_UNIX * 1_000_000),
                                                 ("seconds", DATE_PLUS_TIME_UNIX_SECONDS)])
def test_timestamp_converter_string_to_unix_precision(precision, expected):
    out = _ts(**{"target.type": "unix", "unix.precision": precision, "format": STRING_DATE_FMT}).apply(
        source(DATE_PLUS_TIME_STRING))
    assert out.value == expected


def test_timestamp_converter_key():
    out = _ts(TimestampConverter.Key, **{"target.type": "Timestamp"}).apply(source(None, key=DATE_PLUS_TIME_UNIX))
    assert out.key == DATE_PLUS_TIME and out.key_schema is None


def test_timestamp_converter_bad_data():
    with pytest.raises(DataException, match="could not parse field 'ts'"):
        _ts(**{"target.type": "unix", "field": "ts", "format": "yyyy-MM-dd"}).apply(source({"ts": "May 1st"}))
    with pytest.raises(DataException, match="not a timestamp"):
        _ts(**{"target.type": "unix"}).apply(source(1.5))
    with pytest.raises(DataException, match="not a timestamp"):
        _ts(**{"target.type": "unix"}).apply(source(1, Schema.INT32))


def test_timestamp_converter_documented_example():
    # Kafka Connect docs: a string field in yyyy-MM-dd to a Date, and a Timestamp to text
    out = _ts(**{"target.type": "Date", "field": "day", "format": "yyyy-MM-dd"}).apply(source({"day": "2024-05-01"}))
    assert out.value == {"day": dt.date(2024, 5, 1)}
    out = _ts(**{"target.type": "string", "format": "yyyy-MM-dd HH:mm:ss.SSS"}).apply(
        source(dt.datetime(2024, 5, 1, 13, 5, 7, 42000, tzinfo=UTC)))
    assert out.value == "2024-05-01 13:05:07.042"


# ---------------------------------------------------------------------------------- RegexRouter


@pytest.mark.parametrize("regex, replacement, topic, expected", [
    ("foo", "bar", "foo", "bar"),
    ("foo", "bar", "orig", "orig"),
    ("(.*)", "$1", "orig", "orig"),
    ("(.*)", "prefix-$1", "orig", "prefix-orig"),
    ("(.*)", "$1-suffix", "orig", "orig-suffix"),
    ("(.*)-(\\d\\d\\d\\d\\d\\d\\d\\d)", "$1", "index-20160117", "index"),
    ("(?<db>[a-z]+)\\.(?<table>.*)", "${table}_from_${db}", "sales.orders", "orders_from_sales"),
    ("(.*)", "\\$1", "orig", "$1"),
])
def test_regex_router(regex, replacement, topic, expected):
    assert configured(RegexRouter, regex=regex, replacement=replacement).apply(source(1, topic=topic)).topic == \
        expected


@pytest.mark.parametrize("regex, replacement", [("(", "x"), ("(.*)", "$2"), ("(.*)", "cost$"), ("(.*)", "${nope}")])
def test_regex_router_config_problems(regex, replacement):
    with pytest.raises(ConfigException):
        configured(RegexRouter, regex=regex, replacement=replacement)


# ------------------------------------------------------------------------------ TimestampRouter


def test_timestamp_router_default_configuration():
    out = configured(TimestampRouter).apply(source(1, topic="test", timestamp=1483425001864))
    assert out.topic == "test-20170103"


def test_timestamp_router_formats():
    xform = configured(TimestampRouter, topic_format="${timestamp}/${topic}", timestamp_format="yyyy-MM-dd'T'HH")
    assert xform.apply(source(1, topic="t", timestamp=1483425001864)).topic == "2017-01-03T06/t"


def test_timestamp_router_needs_a_timestamp():
    with pytest.raises(DataException, match="no timestamp"):
        configured(TimestampRouter).apply(source(1, topic="test"))


# ---------------------------------------------------------------------------- SetSchemaMetadata


def test_set_schema_metadata_name_and_version():
    schema = SchemaBuilder.struct().build()
    out = configured(SetSchemaMetadata.Value, schema_name="foo").apply(source(None, schema))
    assert out.value_schema.name == "foo"
    out = configured(SetSchemaMetadata.Value, schema_version=42).apply(source(None, schema))
    assert out.value_schema.version == 42
    out = configured(SetSchemaMetadata.Value, schema_name="foo", schema_version="42").apply(source(None, schema))
    assert (out.value_schema.name, out.value_schema.version) == ("foo", 42)


def test_set_schema_metadata_reattaches_the_struct():
    schema = (SchemaBuilder.struct().name("my.orig.SchemaDefn").field("stringField", Schema.STRING)
              .field("intField", Schema.INT32).build())
    value = Struct(schema, {"stringField": "value", "intField": 1})
    out = configured(SetSchemaMetadata.Value, schema_name="foo", schema_version=42).apply(source(value, schema))
    assert out.value.schema is out.value_schema
    assert (out.value_schema.name, out.value_schema.version) == ("foo", 42)
    assert (out.value["stringField"], out.value["intField"]) == ("value", 1)
    out.value.validate()


@pytest.mark.parametrize("with_default, expected", [(False, None), (True, 42)])
def test_set_schema_metadata_with_null_field(with_default, expected):
    schema = SchemaBuilder.struct().field("f", optional_int32_default_42()).build()
    xform = configured(SetSchemaMetadata.Value, schema_name="foo", replace_null_with_default=with_default)
    assert xform.apply(source(Struct(schema, {"f": None}), schema)).value.get_without_default("f") == expected


def test_set_schema_metadata_needs_a_schema_unless_null():
    xform = configured(SetSchemaMetadata.Value, schema_name="foo")
    with pytest.raises(DataException, match="schema"):
        xform.apply(source({"a": 1}))
    record = source(None)
    assert xform.apply(record) is record


def test_set_schema_metadata_of_a_non_struct_keeps_the_value():
    out = configured(SetSchemaMetadata.Value, schema_name="foo").apply(source(1, Schema.INT32))
    assert out.value == 1 and out.value_schema.name == "foo" and out.value_schema.type is Type.INT32


def test_set_schema_metadata_needs_a_name_or_version():
    with pytest.raises(ConfigException, match="neither"):
        configured(SetSchemaMetadata.Value)


# ----------------------------------------------------------------------------------- HeaderFrom

STRUCT_FOO = SchemaBuilder.struct().field("foo", Schema.STRING).build()
OPTIONAL_WITH_DEFAULT = SchemaBuilder.string().default_value("default").optional().build()

# (description, fields [(name, schema, value)], headers before, fields cfg, headers cfg, operation,
#  replace.null.with.default, fields after, headers after)
HEADER_FROM_CASES = [
    ("basic copy", [("field1", Schema.STRING, "field1-value"), ("field2", Schema.STRING, "field2-value")],
     [("header1", b"existing-value")], ["field1"], ["inserted1"], "copy", True,
     ["field1", "field2"], [("header1", b"existing-value"), ("inserted1", b"field1-value")]),
    ("basic move", [("field1", Schema.STRING, "field1-value"), ("field2", Schema.STRING, "field2-value")],
     [("header1", b"existing-value")], ["field1"], ["inserted1"], "move", True,
     ["field2"], [("header1", b"existing-value"), ("inserted1", b"field1-value")]),
    ("copy with preexisting header", [("field1", Schema.STRING, "field1-value"), ("field2", Schema.STRING, "f2")],
     [("inserted1", b"existing-value")], ["field1"], ["inserted1"], "copy", True,
     ["field1", "field2"], [("inserted1", b"existing-value"), ("inserted1", b"field1-value")]),
    ("move with preexisting header", [("field1", Schema.STRING, "field1-value"), ("field2", Schema.STRING, "f2")],
     [("inserted1", b"existing-value")], ["field1"], ["inserted1"], "move", True,
     ["field2"], [("inserted1", b"existing-value"), ("inserted1", b"field1-value")]),
    ("copy with struct value", [("field1", STRUCT_FOO, Struct(STRUCT_FOO, {"foo": "foo-value"})),
                                ("field2", Schema.STRING, "field2-value")],
     [("header1", b"existing-value")], ["field1"], ["inserted1"], "copy", True,
     ["field1", "field2"], [("header1", b"existing-value"), ("inserted1", b'{"foo":"foo-value"}')]),
    ("move with struct value", [("field1", STRUCT_FOO, Struct(STRUCT_FOO, {"foo": "foo-value"})),
                                ("field2", Schema.STRING, "field2-value")],
     [("header1", b"existing-value")], ["field1"], ["inserted1"], "move", True,
     ["field2"], [("header1", b"existing-value"), ("inserted1", b'{"foo":"foo-value"}')]),
    ("two headers from same field", [("field1", Schema.STRING, "field1-value"), ("field2", Schema.STRING, "f2")],
     [("header1", b"existing-value")], ["field1", "field1"], ["inserted1", "inserted2"], "move", True,
     ["field2"], [("header1", b"existing-value"), ("inserted1", b"field1-value"), ("inserted2", b"field1-value")]),
    ("two fields to same header", [("field1", Schema.STRING, "field1-value"), ("field2", Schema.STRING, "field2-value")],
     [("header1", b"existing-value")], ["field1", "field2"], ["inserted1", "inserted1"], "move", True,
     [], [("header1", b"existing-value"), ("inserted1", b"field1-value"), ("inserted1", b"field2-value")]),
    ("copy null field without default", [("field1", OPTIONAL_WITH_DEFAULT, "field1-value"),
                                         ("field2", OPTIONAL_WITH_DEFAULT, None)],
     [("header1", b"existing-value")], ["field1", "field2"], ["inserted1", "inserted2"], "copy", False,
     ["field1", "field2"], [("header1", b"existing-value"), ("inserted1", b"field1-value"), ("inserted2", None)]),
    ("move null field without default", [("field1", OPTIONAL_WITH_DEFAULT, "field1-value"),
                                         ("field2", OPTIONAL_WITH_DEFAULT, None)],
     [("header1", b"existing-value")], ["field1", "field2"], ["inserted1", "inserted2"], "move", False,
     [], [("header1", b"existing-value"), ("inserted1", b"field1-value"), ("inserted2", None)]),
]


@pytest.mark.parametrize("is_key", [True, False], ids=["key", "value"])
@pytest.mark.parametrize("with_schema", [True, False], ids=["schema", "schemaless"])
@pytest.mark.parametrize("case", HEADER_FROM_CASES, ids=[c[0] for c in HEADER_FROM_CASES])
def test_header_from(case, with_schema, is_key):
    _, fields, headers, field_cfg, header_cfg, operation, with_default, fields_after, headers_after = case
    if with_schema:
        builder = SchemaBuilder.struct()
        for name, schema, _ in fields:
            builder.field(name, schema)
        schema = builder.build()
        operand = Struct(schema, {name: v for name, _, v in fields})
    else:
        schema, operand = None, {name: v for name, _, v in fields}
    record = (source("value", None, operand, schema, headers=headers) if is_key
              else source(operand, schema, "key", None, headers=headers))
    xform = configured(HeaderFrom.Key if is_key else HeaderFrom.Value, fields=field_cfg, headers=header_cfg,
                       operation=operation, replace_null_with_default=with_default)
    out = xform.apply(record)
    assert list(out.headers) == headers_after
    updated = out.key if is_key else out.value
    if with_schema:
        assert [f.name for f in updated.schema.fields] == fields_after
        assert (out.key_schema if is_key else out.value_schema) is updated.schema
    else:
        assert list(updated) == fields_after
    assert (out.value if is_key else out.key) == (record.value if is_key else record.key)


@pytest.mark.parametrize("fields, headers", [("foo", "foo,bar"), ("foo,bar", "foo"), ("", "")])
def test_header_from_config_problems(fields, headers):
    with pytest.raises(ConfigException):
        configured(HeaderFrom.Value, fields=fields, headers=headers, operation="copy")


def test_header_bytes_follow_the_simple_header_converter():
    assert header_bytes("é") == "é".encode()
    assert header_bytes(42) == b"42" and header_bytes(True) == b"true" and header_bytes(1.5) == b"1.5"
    assert header_bytes(b"\x01") == b"AQ=="
    assert header_bytes({"a": [1, "x", None], "b": 'q"'}) == b'{"a":[1,"x",null],"b":"q\\""}'
    assert header_bytes(dt.date(2024, 5, 1)) == b"2024-05-01"


# ------------------------------------------------------------------------- InsertHeader, DropHeaders


def test_insert_header_appends_after_existing_headers():
    xform = configured(InsertHeader, header="inserted", value_literal="inserted-value")
    out = xform.apply(source(1, headers=[("existing", b"existing-value")]))
    assert out.headers == (("existing", b"existing-value"), ("inserted", b"inserted-value"))
    out = xform.apply(source(1, headers=[("inserted", b"existing-value")]))
    assert out.headers == (("inserted", b"existing-value"), ("inserted", b"inserted-value"))


@pytest.mark.parametrize("configs", [{"value.literal": "x"}, {"header": "h"}])
def test_insert_header_needs_a_name_and_a_value(configs):
    with pytest.raises(ConfigException):
        InsertHeader().configure(configs)


def test_drop_headers():
    xform = configured(DropHeaders, headers="dropped")
    record = source(1, headers=[("keep", b"1"), ("dropped", b"2"), ("dropped", b"3"), ("keep", b"4")])
    assert xform.apply(record).headers == (("keep", b"1"), ("keep", b"4"))
    unchanged = source(1, headers=[("keep", b"1")])
    assert xform.apply(unchanged) is unchanged
    with pytest.raises(ConfigException):
        configured(DropHeaders, headers="")


# ------------------------------------------------------------------------------ Filter, predicates


def test_filter_drops_every_record():
    assert Filter().apply(source(1)) is None


def test_has_header_key():
    with pytest.raises(ConfigException):
        HasHeaderKey().configure({})
    with pytest.raises(ConfigException):
        HasHeaderKey().configure({"name": ""})
    predicate = configured(HasHeaderKey, name="foo")
    assert predicate.test(source(1, headers=[("foo", b"x")]))
    assert predicate.test(source(1, headers=[("bar", b"x"), ("foo", None)]))
    assert not predicate.test(source(1, headers=[("bar", b"x")]))
    assert not predicate.test(source(1))


def test_topic_name_matches():
    for configs in ({}, {"pattern": ""}, {"pattern": "-)"}):
        with pytest.raises(ConfigException):
            TopicNameMatches().configure(configs)
    predicate = configured(TopicNameMatches, pattern="my-prefix-.*")
    assert predicate.test(source(1, topic="my-prefix-"))
    assert predicate.test(source(1, topic="my-prefix-foo"))
    assert not predicate.test(source(1, topic="x-my-prefix-"))
    assert not predicate.test(source(1, topic="your-prefix-"))


def test_record_is_tombstone():
    assert configured(RecordIsTombstone).test(source(None, key="k"))
    assert not configured(RecordIsTombstone).test(source(0))


def test_date_schema_constants_hold():
    # the logical schemas the transforms produce are Connect's
    assert Schema.DATE.name == Date.LOGICAL_NAME and Schema.TIME.name == Time.LOGICAL_NAME
