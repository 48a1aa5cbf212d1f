"""Whole-batch encoders against the converters they stand in for: the same bytes for every row they
encode, and every row the converter refuses left to the per-record path (hypothesis-generated
schemas and values)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_copycat.connect import Schema, SchemaBuilder, SourceBatch
from airflow_copycat.connect.converters import ByteArrayConverter, StringConverter
from airflow_copycat.connect.data import Date, Decimal, Time, Timestamp, Type
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.batch_encoders import batch_encoder, side_columns

UTC = dt.timezone.utc


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _float32s():
    return st.one_of(st.floats(width=32, allow_nan=True, allow_infinity=True),
                     st.sampled_from([0.0, -0.0, 1e-3, 9.999999e-4, 1e7, 9999999.0, 0.1, 16777216.0]).map(_f32))


def _float64s():
    return st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from([0.0, -0.0, 1e-3, 0.000999, 1e7, 9999999.999999998, 0.1 + 0.2, 5e-324, 1e23]))


def _texts():
    alphabet = st.one_of(st.characters(codec="utf-8"), st.sampled_from('"\\\n\r\t\b\f\x00\x01\x1f\x7fé€😀'))
    return st.text(alphabet=alphabet, max_size=12)


# (name, a new Connect schema builder, Arrow type, value strategy)
def _scalar_kinds():
    return [
        ("i8", lambda: SchemaBuilder.type(Type.INT8), pa.int8(), st.integers(-(2**7), 2**7 - 1)),
        ("i16", lambda: SchemaBuilder.type(Type.INT16), pa.int16(), st.integers(-(2**15), 2**15 - 1)),
        ("i32", lambda: SchemaBuilder.type(Type.INT32), pa.int32(), st.integers(-(2**31), 2**31 - 1)),
        ("i64", lambda: SchemaBuilder.type(Type.INT64), pa.int64(), st.integers(-(2**63), 2**63 - 1)),
        ("f32", lambda: SchemaBuilder.type(Type.FLOAT32), pa.float32(), _float32s()),
        ("f64", lambda: SchemaBuilder.type(Type.FLOAT64), pa.float64(), _float64s()),
        ("bool", lambda: SchemaBuilder.type(Type.BOOLEAN), pa.bool_(), st.booleans()),
        ("str", lambda: SchemaBuilder.type(Type.STRING), pa.string(), _texts()),
        ("lstr", lambda: SchemaBuilder.type(Type.STRING), pa.large_string(), _texts()),
        ("bytes", lambda: SchemaBuilder.type(Type.BYTES), pa.binary(), st.binary(max_size=10)),
        ("dec0", lambda: Decimal.builder(0), pa.decimal128(38, 0), st.integers(-(10**37), 10**37).map(decimal.Decimal)),
        ("dec2", lambda: Decimal.builder(2), pa.decimal128(12, 2),
         st.integers(-(10**12) + 1, 10**12 - 1).map(lambda n: decimal.Decimal(n).scaleb(-2))),
        ("dec9", lambda: Decimal.builder(9), pa.decimal128(20, 9),
         st.integers(-(10**20) + 1, 10**20 - 1).map(lambda n: decimal.Decimal(n).scaleb(-9))),
        ("ts_us", lambda: Timestamp.builder(), pa.timestamp("us", tz="UTC"),
         st.datetimes(min_value=dt.datetime(1800, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(UTC))),
        ("ts_ms_naive", lambda: Timestamp.builder(), pa.timestamp("ms"),
         st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2100, 1, 1))
         .map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))),
        ("date", lambda: Date.builder(), pa.date32(), st.dates(min_value=dt.date(1, 1, 1))),
        ("time_us", lambda: Time.builder(), pa.time64("us"), st.times()),
        ("time_ms", lambda: Time.builder(), pa.time32("ms"), st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))),
        ("arr", lambda: SchemaBuilder.array(Schema.OPTIONAL_INT32), pa.list_(pa.int32()),
         st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=3)),
        ("map", lambda: SchemaBuilder.map(Schema.STRING, Schema.OPTIONAL_FLOAT64), pa.map_(pa.string(), pa.float64()),
         st.dictionaries(_texts(), st.one_of(st.none(), st.floats()), max_size=3).map(lambda d: list(d.items()))),
    ]


KINDS = _scalar_kinds()


@st.composite
def batches(draw):
    """A batch of a struct schema of 1-6 fields of random kinds, some optional, some with defaults
    (and, rarely, a null in a required field: a row the converter refuses)."""
    picked = draw(st.lists(st.sampled_from(range(len(KINDS))), min_size=1, max_size=6))
    n = draw(st.integers(0, 25))
    schema = SchemaBuilder.struct().name("gen.Row")
    columns = {}
    for i, k in enumerate(picked):
        _, builder, arrow_type, values = KINDS[k]
        b = builder()
        optional = draw(st.booleans())
        if optional:
            b = b.optional()
        field_schema = b.build()
        nulls_allowed = optional or draw(st.integers(0, 9)) == 0
        column = [None if nulls_allowed and draw(st.integers(0, 4)) == 0 else draw(values) for _ in range(n)]
        name = f"f{i}_{KINDS[k][0]}"
        schema = schema.field(name, field_schema)
        columns[name] = pa.array(column, arrow_type)
    value_schema = schema.build()
    table = pa.table(columns) if columns else pa.table({})
    key_field = draw(st.sampled_from([None, *columns]))
    if key_field is None:
        return SourceBatch("gen", table, value_schema, {"p": 1}, {"o": n})
    key_schema = SchemaBuilder.struct().field(key_field, value_schema.field(key_field).schema).build()
    return SourceBatch("gen", table, value_schema, {"p": 1}, {"o": n}, key_fields=(key_field,), key_schema=key_schema)


def _check(converter, batch: SourceBatch, is_key: bool):
    schema, columns = side_columns(batch, is_key)
    encoded = batch_encoder(converter).encode(batch, schema, columns)
    assert encoded is not None, "the JSON encoder takes every batch of the contract's types"
    fast = encoded.data.to_pylist()
    for i, record in enumerate(batch.to_records()):
        s, v = (record.key_schema, record.key) if is_key else (record.value_schema, record.value)
        try:
            want = converter.from_connect_data("gen", s, v)
        except Exception:  # the converter refuses the row: the fast path must leave it to the record path
            assert i in encoded.slow, f"row {i} refused by the converter was encoded: {fast[i]!r}"
            continue
        if i in encoded.slow:
            continue
        got = fast[i]
        got = got.encode() if isinstance(got, str) else got
        assert got == want, f"row {i}: {got!r} != {want!r}"


@pytest.mark.parametrize("schemas_enable", [True, False])
@pytest.mark.parametrize("decimal_format", ["BASE64", "NUMERIC"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches())
def test_json_batches_are_the_converters_bytes(schemas_enable, decimal_format, batch):
    for is_key in (False, True):
        conv = JsonConverter()
        conv.configure({"schemas.enable": schemas_enable, "decimal.format": decimal_format}, is_key)
        _check(conv, batch, is_key)


def test_a_default_fills_a_null_as_the_converter_does():
    schema = (SchemaBuilder.struct().field("n", SchemaBuilder.int32().optional().default_value(7).build())
              .field("s", SchemaBuilder.string().default_value("x").build()).build())
    batch = SourceBatch("t", pa.table({"n": pa.array([None, 3], pa.int32()), "s": pa.array([None, "y"])}), schema,
                        {"p": 1}, {"o": 2})
    for replace in (True, False):
        conv = JsonConverter()
        conv.configure({"schemas.enable": False, "replace.null.with.default": replace}, False)
        _check(conv, batch, False)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), _texts()), max_size=20))
def test_string_and_bytes_batches_are_the_converters_bytes(lines):
    batch = SourceBatch("t", pa.table({"value": pa.array(lines, pa.string())}), Schema.OPTIONAL_STRING,
                        {"p": 1}, {"o": 1})
    conv = StringConverter()
    conv.configure({}, False)
    _check(conv, batch, False)
    raw = [None if s is None else s.encode("utf-8", "surrogatepass") for s in lines]
    batch = SourceBatch("t", pa.table({"value": pa.array(raw, pa.binary())}), Schema.OPTIONAL_BYTES, {"p": 1}, {"o": 1})
    conv = ByteArrayConverter()
    conv.configure({}, False)
    _check(conv, batch, False)


def test_converters_without_a_batch_encoder_go_row_by_row():
    from airflow_copycat.connect.converters import Converter

    conv = StringConverter()
    conv.configure({"converter.encoding": "latin-1"}, False)
    assert batch_encoder(conv) is None  # only UTF-8 strings are their own bytes

    class PluginConverter(Converter):
        pass

    assert batch_encoder(PluginConverter()) is None


@pytest.fixture(scope="module")
def registry_url():
    from tests.support.schema_registry import SchemaRegistryServer

    with SchemaRegistryServer() as registry:
        yield registry.url


@pytest.mark.parametrize("layout", ["framed", "single-object", "registry"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.function_scoped_fixture])
@given(batch=batches())
def test_avro_batches_are_the_converters_bytes(layout, registry_url, batch):
    import dataclasses
    import uuid

    from airflow_copycat.converters.avro.converter import AvroConverter

    batch = dataclasses.replace(batch, topic=f"gen-{uuid.uuid4().hex}")  # a subject of its own: no evolution
    for is_key in (False, True):
        conv = AvroConverter()
        conv.configure({"schema.registry.url": registry_url} if layout == "registry" else
                       {"embedded.schema.format": layout}, is_key)
        schema, columns = side_columns(batch, is_key)
        encoded = batch_encoder(conv).encode(batch, schema, columns)
        if encoded is None:  # a field type not done in columns (a map, an array): row by row, as before
            assert any(f.schema.type in (Type.ARRAY, Type.MAP) for f in schema.fields), schema
            continue
        fast = encoded.data.to_pylist()
        for i, record in enumerate(batch.to_records()):
            s, v = (record.key_schema, record.key) if is_key else (record.value_schema, record.value)
            try:
                want = conv.from_connect_data(batch.topic, s, v)
            except Exception:
                assert i in encoded.slow, f"row {i} refused by the converter was encoded"
                continue
            if i not in encoded.slow:
                assert fast[i] == want, f"row {i}: {fast[i]!r} != {want!r}"
                if layout == "single-object" and want is not None:  # Avro's layout: the marker, then the fingerprint
                    assert fast[i][:2] == b"\xc3\x01" and len(fast[i]) >= 10


def test_non_finite_and_exponent_floats_are_javas_text():
    values = [math.nan, math.inf, -math.inf, 1e7, 1e-4, 1.0e23, -0.0, 123.0]
    schema = SchemaBuilder.struct().field("x", Schema.FLOAT64).build()
    batch = SourceBatch("t", pa.table({"x": pa.array(values, pa.float64())}), schema, {"p": 1}, {"o": 1})
    conv = JsonConverter()
    conv.configure({"schemas.enable": False}, False)
    encoded = batch_encoder(conv).encode(batch, *side_columns(batch, False))
    assert encoded.data.to_pylist() == ['{"x":"NaN"}', '{"x":"Infinity"}', '{"x":"-Infinity"}', '{"x":1.0E7}',
                                        '{"x":1.0E-4}', '{"x":1.0E23}', '{"x":-0.0}', '{"x":123.0}']
    assert Type.FLOAT64 is schema.field("x").schema.type
