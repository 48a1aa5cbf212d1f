"""Whole-batch encoders against the converters they stand in for: the same bytes for every row they
encode, and every row the converter refuses left to the per-record path (hypothesis-generated
schemas and values)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
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
def _fields(draw, n: int, name: str, depth: int = 0):
    """(kind, Connect schema, Arrow array of ``n`` rows) of one generated field: a kind of KINDS or (one in
    four, nested twice at most) a struct of 1-3 such fields, its Arrow children sometimes in another
    order or with a child the schema does not have; optional or not, some with a null although
    required (a row the converter refuses); one in four holds the same value, or null, in every row.
    A null struct keeps its children's drawn values."""
    optional = draw(st.booleans())
    nulls_allowed = optional or draw(st.integers(0, 9)) == 0
    nulls = [nulls_allowed and draw(st.integers(0, 4)) == 0 for _ in range(n)]
    constant = draw(st.integers(0, 3)) == 0  # one field in four: the same value (or null) in every row
    if constant:
        nulls = [nulls[0]] * n if n else []
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        b = SchemaBuilder.struct().name("gen." + name.replace(".", "_"))
        children = {}
        for j in range(draw(st.integers(1, 3))):
            kind, child_schema, child = draw(_fields(n, f"{name}.g{j}", depth + 1))
            b = b.field(f"g{j}_{kind}", child_schema)
            children[f"g{j}_{kind}"] = child
        if draw(st.booleans()):
            children = dict(reversed(children.items()))
        if draw(st.booleans()):
            children["extra"] = pa.array(range(n), pa.int64())
        kind = "struct"
        column = pa.StructArray.from_arrays(list(children.values()), names=list(children),
                                            mask=pa.array(nulls, pa.bool_()))
    else:
        kind, builder, arrow_type, values = KINDS[draw(st.sampled_from(range(len(KINDS))))]
        b = builder()
        value = draw(values)
        column = pa.array([None if null else value if constant else draw(values) for null in nulls], arrow_type)
    return kind, (b.optional() if optional else b).build(), column


@st.composite
def batches(draw):
    """A batch of a struct schema of 1-6 fields of random kinds (nested structs among them), some
    optional (and, rarely, a null in a required field: a row the converter refuses)."""
    count = draw(st.integers(1, 6))
    n = draw(st.integers(0, 25))
    schema = SchemaBuilder.struct().name("gen.Row")
    columns = {}
    for i in range(count):
        kind, field_schema, column = draw(_fields(n, f"f{i}"))
        name = f"f{i}_{kind}"
        schema = schema.field(name, field_schema)
        columns[name] = column
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


def test_a_default_the_converter_refuses_leaves_the_null_rows_to_the_record_path():
    # a Struct default made with the schema before the default was set: not the field's schema (which carries
    # the default), so the converter refuses to write it
    from airflow_copycat.connect.data import Struct

    inner = SchemaBuilder.struct().field("a", Schema.INT32).optional().build()
    field = inner.copy(default=Struct(inner, {"a": 1}))
    schema = SchemaBuilder.struct().field("id", Schema.INT32).field("s", field).build()
    data = pa.table({"id": pa.array([1, 2, 3], pa.int32()),
                     "s": pa.array([None, {"a": 5}, None], pa.struct([pa.field("a", pa.int32())]))})
    batch = SourceBatch("t", data, schema, {"p": 1}, {"o": 3})
    conv = JsonConverter()
    conv.configure({"schemas.enable": False, "replace.null.with.default": True}, False)
    encoded = batch_encoder(conv).encode(batch, *side_columns(batch, False))
    assert encoded.slow == [0, 2]  # refused by the converter too: the record path dead-letters or fails them
    assert encoded.data[1].as_py() == '{"id":2,"s":{"a":5}}'
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
            assert _has_array_or_map(schema), schema
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


def _has_array_or_map(schema: Schema) -> bool:
    """Whether an array or a map is among a struct's fields, at any depth (nested records are done in columns)."""
    return any(f.schema.type in (Type.ARRAY, Type.MAP) or f.schema.type is Type.STRUCT and _has_array_or_map(f.schema)
               for f in schema.fields)


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


# ---- nested structs: in columns, not value by value


def _encode_counting(conv: JsonConverter, batch: SourceBatch, columns=None):
    """The value side of ``batch`` encoded (``columns``: its data, by default the batch's own) and the
    paths of the struct values the converter's ``_to_json`` wrote meanwhile, one by one."""
    schema, side = side_columns(batch, False)
    written, to_json = [], conv._to_json

    def counting(s, value, path):
        if s is not None and s.type is Type.STRUCT and value is not None:
            written.append(path)
        return to_json(s, value, path)

    conv._to_json = counting
    try:
        return batch_encoder(conv).encode(batch, schema, side if columns is None else columns), written
    finally:
        del conv._to_json


def _same_as_records(conv: JsonConverter, batch: SourceBatch, encoded) -> list[int]:
    """Asserts every row the converter writes has its bytes and is not a fallback row, and every row it
    refuses is one; returns the refused rows."""
    refused, fast = [], encoded.data.to_pylist()
    for i, record in enumerate(batch.to_records()):
        try:
            want = conv.from_connect_data(batch.topic, record.value_schema, record.value)
        except Exception:  # noqa: BLE001 -- the converter's refusal, whatever it is
            refused.append(i)
            continue
        assert fast[i].encode() == want, f"row {i}: {fast[i]!r} != {want!r}"
    assert encoded.slow == refused
    return refused


def _struct_column(children: dict, nulls: list[bool]) -> pa.StructArray:
    return pa.StructArray.from_arrays(list(children.values()), names=list(children), mask=pa.array(nulls, pa.bool_()))


def _nested_batch(n: int = 60) -> SourceBatch:
    """Two nested structs (one nested twice, optional and null in some rows, with a required child null
    under those) of fields done in columns, with the values the fast paths treat apart: escapes and
    characters beyond U+FFFF, exponent floats, negative decimals and timestamps before 1970."""
    texts = ['plain', 'q"uote\\', 'line\nbreak\t', 'ctl\x01', 'emoji😀', '', 'é€']
    floats = [0.5, -1e-4, 3.5e9, 1e7, -0.0, 123.0, float("nan")]
    utc = dt.datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC)
    b_schema = (SchemaBuilder.struct().name("n.B").field("x", Schema.OPTIONAL_INT64).field("when", Date.builder())
                .field("ok", Schema.OPTIONAL_BOOLEAN).field("y", Schema.FLOAT64).optional().build())
    a_schema = (SchemaBuilder.struct().name("n.A").field("i", Schema.INT32).field("s", Schema.OPTIONAL_STRING)
                .field("d", Decimal.builder(2)).field("f", Schema.OPTIONAL_FLOAT32).field("t", Timestamp.builder())
                .field("b", b_schema).optional().build())
    c_schema = (SchemaBuilder.struct().name("n.C").field("name", Schema.STRING).field("at", Time.builder().optional())
                .build())
    schema = (SchemaBuilder.struct().name("n.Row").field("id", Schema.INT64).field("a", a_schema)
              .field("c", c_schema).field("empty", SchemaBuilder.struct().optional()).build())
    a_null = [i % 7 == 3 for i in range(n)]
    b_null = [i % 5 == 1 for i in range(n)]
    b = _struct_column({
        "y": pa.array([None if b_null[i] else floats[i % 7] for i in range(n)], pa.float64()),  # another order
        "x": pa.array([None if i % 3 == 0 else -(2**62) + i for i in range(n)], pa.int64()),
        "when": pa.array([None if b_null[i] else dt.date(1, 1, 1) + dt.timedelta(days=i * 12_345) for i in range(n)]),
        "ok": pa.array([None if i % 4 == 0 else i % 2 == 0 for i in range(n)]),
        "unused": pa.array([f"not in the schema {i}" for i in range(n)]),
    }, b_null)
    a = _struct_column({
        "i": pa.array([None if a_null[i] else i * 1_000_003 - 2**31 // 3 for i in range(n)], pa.int32()),
        "s": pa.array([None if i % 6 == 0 else texts[i % 7] for i in range(n)]),
        "d": pa.array([None if a_null[i] else decimal.Decimal(-(10**9) + i * 123_457).scaleb(-2) for i in range(n)],
                      pa.decimal128(12, 2)),
        "f": pa.array([None if i % 5 == 0 else _f32(floats[i % 7]) for i in range(n)], pa.float32()),
        "t": pa.array([None if a_null[i] else utc + dt.timedelta(microseconds=i * 333_333) for i in range(n)],
                      pa.timestamp("us", tz="UTC")),
        "b": b,
    }, a_null)
    c = _struct_column({"name": pa.array([texts[i % 7] + str(i) for i in range(n)]),
                        "at": pa.array([None if i % 2 else dt.time(i % 24, i, i, i * 1_001) for i in range(n)])},
                       [False] * n)
    empty = pa.array([None if i % 9 == 0 else {} for i in range(n)], pa.struct([]))
    table = pa.table({"id": pa.array(range(n), pa.int64()), "a": a, "c": c, "empty": empty})
    return SourceBatch("t", table, schema, {"p": 1}, {"o": n})


@pytest.mark.parametrize("schemas_enable", [True, False])
@pytest.mark.parametrize("decimal_format", ["BASE64", "NUMERIC"])
def test_nested_structs_are_encoded_in_columns(schemas_enable, decimal_format):
    conv = JsonConverter()
    conv.configure({"schemas.enable": schemas_enable, "decimal.format": decimal_format}, False)
    batch = _nested_batch()
    encoded, written = _encode_counting(conv, batch)
    assert written == [], "struct values written one by one by the converter"
    assert _same_as_records(conv, batch, encoded) == []
    assert '"a":null' in encoded.data[3].as_py() and '"b":null' in encoded.data[1].as_py()
    assert '"empty":{}' in encoded.data[1].as_py() and '"empty":null' in encoded.data[0].as_py()


def test_a_null_struct_is_the_converters_and_not_its_childrens():
    """A null struct is written as any null (``null`` when optional, the converter's error when
    required); a required child null under it is no error, at any depth."""
    inner = SchemaBuilder.struct().name("n.I").field("x", Schema.INT32).build()
    rows = 4  # 0: values; 1: the struct null, its children too; 2: a required child null; 3: the struct null
    x = pa.array([1, None, None, 5], pa.int32())
    p_arr = _struct_column({"x": x, "s": pa.array(["a", None, "c", "d"])}, [False, True, False, True])
    # q: {inner: {x}} with q null in row 1 (inner and x null there too), inner null (required) in row 3
    q_arr = _struct_column({"inner": _struct_column({"x": pa.array([1, None, 3, None], pa.int32())},
                                                    [False, True, False, True])}, [False, True, False, False])
    for optional, slow in ((True, [2, 3]), (False, [1, 2, 3])):
        p = SchemaBuilder.struct().name("n.P").field("x", Schema.INT32).field("s", Schema.STRING)
        q = SchemaBuilder.struct().name("n.Q").field("inner", inner)
        schema = (SchemaBuilder.struct().field("p", p.optional() if optional else p)
                  .field("q", q.optional()).build())
        batch = SourceBatch("t", pa.table({"p": p_arr, "q": q_arr}), schema, {"p": 1}, {"o": rows})
        for replace in (True, False):
            conv = JsonConverter()
            conv.configure({"schemas.enable": False, "replace.null.with.default": replace}, False)
            encoded, written = _encode_counting(conv, batch)
            assert written == []
            assert _same_as_records(conv, batch, encoded) == slow
            if optional:
                assert encoded.data[1].as_py() == '{"p":null,"q":null}'


def test_columns_of_one_value_and_values_equal_but_written_apart():
    """A column holding one value in every row (a constant field of an envelope, a struct null in every row)
    is written as the converter writes that value; values that compare equal but are written apart (0.0 and
    -0.0, as float64 and float32) are each written their own way."""
    rows = 5
    s = SchemaBuilder.struct().name("n.S").field("c", Schema.STRING).field("t", Schema.INT64).build()
    gone = SchemaBuilder.struct().name("n.G").field("x", Schema.INT32).optional().build()
    schema = (SchemaBuilder.struct().field("k", Schema.STRING).field("i", Schema.INT32).field("d", Schema.FLOAT64)
              .field("f", Schema.FLOAT32).field("s", s).field("gone", gone)
              .field("ts", Timestamp.builder().build()).build())
    data = {
        "k": pa.array(["same \"text\" é"] * rows), "i": pa.array([7] * rows, pa.int32()),
        "d": pa.array([0.0, -0.0, 0.0, -0.0, 0.0]), "f": pa.array([-0.0, 0.0, 0.0, 0.0, 0.0], pa.float32()),
        "s": _struct_column({"c": pa.array(["x"] * rows), "t": pa.array([1, 1, 2, 1, 1], pa.int64())}, [False] * rows),
        "gone": _struct_column({"x": pa.array([1, 2, 3, 4, 5], pa.int32())}, [True] * rows),
        "ts": pa.array([dt.datetime(2026, 1, 1, tzinfo=UTC)] * rows, pa.timestamp("us", "UTC")),
    }
    batch = SourceBatch("t", pa.table(data), schema, {"p": 1}, {"o": rows})
    for schemas_enable in (False, True):
        conv = JsonConverter()
        conv.configure({"schemas.enable": schemas_enable}, False)
        encoded, written = _encode_counting(conv, batch)
        assert written == []
        assert _same_as_records(conv, batch, encoded) == []
    assert [str(json.loads(v)["payload"]["d"]) for v in encoded.data.to_pylist()] == \
        ["0.0", "-0.0", "0.0", "-0.0", "0.0"]


def test_a_column_of_one_value_the_converter_refuses_leaves_every_row_to_the_record_path():
    """One value in every row, which the converter refuses (a bytes field over an Arrow column of another
    type, outside the batch contract): every row is refused, so every row is a fallback row."""
    for column in (pa.array([5, 5, 5], pa.int64()), pa.array(["a", "a", "a"]), pa.array([True] * 3)):
        schema = SchemaBuilder.struct().field("id", Schema.INT32).field("x", SchemaBuilder.type(Type.BYTES).build()).build()
        batch = SourceBatch("t", pa.table({"id": pa.array([1, 2, 3], pa.int32()), "x": column}), schema, {"p": 1},
                            {"o": 3})
        conv = JsonConverter()
        conv.configure({"schemas.enable": False}, False)
        encoded, _ = _encode_counting(conv, batch)
        assert _same_as_records(conv, batch, encoded) == [0, 1, 2]


def test_a_sliced_batch_of_nested_structs():
    """A slice of a batch (and of its Arrow data: children read from the parent's offset)."""
    conv = JsonConverter()
    conv.configure({"schemas.enable": False}, False)
    whole = _nested_batch()
    # a required struct null in some rows: the converter's refusals, which must fall on the slice's rows
    b_schema = SchemaBuilder.struct().name("n.R").field("v", Schema.STRING).build()
    r = _struct_column({"v": pa.array([None if i % 11 == 4 else str(i) for i in range(60)])},
                       [i % 11 == 4 or i % 13 == 0 for i in range(60)])
    builder = SchemaBuilder.struct().name("n.Row")
    for f in whole.value_schema.fields:
        builder = builder.field(f.name, f.schema)
    schema = builder.field("r", b_schema).build()
    table = whole.data.append_column("r", r)
    batch = SourceBatch("t", table.slice(7, 40), schema, {"p": 1}, {"o": 47})
    encoded, written = _encode_counting(conv, batch)
    assert written == []
    refused = _same_as_records(conv, batch, encoded)
    assert refused == [i - 7 for i in range(7, 47) if i % 11 == 4 or i % 13 == 0]
    # the same rows from arrays that keep their offsets (a Table's columns are combined from 0)
    columns = pa.RecordBatch.from_pydict({f.name: table.column(f.name).combine_chunks() for f in schema.fields}) \
        .slice(7, 40)
    assert columns.column(1).offset == 7 and columns.column(1).field(5).offset == 7
    sliced, written = _encode_counting(conv, batch, columns)
    assert written == [] and sliced.slow == encoded.slow
    assert sliced.data.to_pylist() == encoded.data.to_pylist()


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=1500, max_size=3000)),
                       max_size=12),
       start=st.integers(0, 3), large=st.booleans())
def test_byte_list_gives_each_value_as_bytes_copied_or_sliced(values, start, large):
    """Short values come as bytes, long ones as slices of the array's buffer: the same bytes, nulls as None,
    on sliced arrays too."""
    from airflow_copycat.runtime.batch_producer import byte_list

    arr = pa.array(values, pa.large_binary() if large else pa.binary()).slice(start)
    got = byte_list(arr)
    assert [None if v is None else bytes(v) for v in got] == values[start:]
    assert [None if v is None else len(v) for v in got] == [None if v is None else len(v) for v in values[start:]]


# ---- Avro: nested records and fields with defaults, in columns


def _avro_converter(layout: str = "framed", registry_url: str | None = None, is_key: bool = False):
    from airflow_copycat.converters.avro.converter import AvroConverter

    conv = AvroConverter()
    conv.configure({"schema.registry.url": registry_url} if layout == "registry" else
                   {"embedded.schema.format": layout}, is_key)
    return conv


def _avro_encode_counting(conv, batch: SourceBatch, is_key: bool = False, columns=None):
    """One side of ``batch`` encoded (``columns``: its data, by default the batch's own) and the number of
    values the converter's writer converted meanwhile (``AvroWriter.datum``, which its per-record
    ``write`` calls), one by one."""
    from airflow_copycat.converters.avro.codec import AvroWriter

    calls, datum = [], AvroWriter.datum

    def counting(self, value):
        calls.append(value)
        return datum(self, value)

    AvroWriter.datum = counting
    try:
        schema, side = side_columns(batch, is_key)
        return batch_encoder(conv).encode(batch, schema, side if columns is None else columns), len(calls)
    finally:
        AvroWriter.datum = datum


def _avro_same_as_records(conv, batch: SourceBatch, encoded, is_key: bool = False) -> list[int]:
    """Asserts every row the converter writes and the encoder did not leave to the per-record path has the
    converter's bytes, and every row the converter refuses is left to it; returns the refused rows."""
    refused, fast = [], encoded.data.to_pylist()
    for i, record in enumerate(batch.to_records()):
        s, v = (record.key_schema, record.key) if is_key else (record.value_schema, record.value)
        try:
            want = conv.from_connect_data(batch.topic, s, v)
        except Exception:  # noqa: BLE001 -- the converter's refusal, whatever it is
            refused.append(i)
            continue
        if i not in encoded.slow:
            assert fast[i] == want, f"row {i}: {fast[i]!r} != {want!r}"
    assert set(refused) <= set(encoded.slow)
    return refused


@pytest.mark.parametrize("layout", ["framed", "single-object"])
def test_avro_nested_records_are_encoded_in_columns(layout):
    """Records nested once and twice, optional and required, null in some rows with a required child null
    under them, a child the schema does not have, children in another order, a record without fields."""
    conv = _avro_converter(layout)
    batch = _nested_batch()
    encoded, written = _avro_encode_counting(conv, batch)
    assert encoded is not None and written == 0, "records written one by one by the converter"
    assert encoded.slow == [] and _avro_same_as_records(conv, batch, encoded) == []
    # the sliced batch, and its columns keeping their offsets: children read from the parent's offset
    sliced = SourceBatch("t", batch.data.slice(7, 40), batch.value_schema, {"p": 1}, {"o": 47})
    columns = pa.RecordBatch.from_pydict({f.name: batch.data.column(f.name).combine_chunks()
                                          for f in batch.value_schema.fields}).slice(7, 40)
    assert columns.column(1).field(5).offset == 7
    for cols in (None, columns):
        encoded, written = _avro_encode_counting(conv, sliced, columns=cols)
        assert written == 0 and encoded.slow == [] and _avro_same_as_records(conv, sliced, encoded) == []


def test_avro_a_null_record_is_the_converters_and_not_its_childrens():
    """A null record is written as any null (the null branch when optional, the converter's error when
    required); a required child null under it is no error, at any depth."""
    inner = SchemaBuilder.struct().name("n.I").field("x", Schema.INT32).build()
    # 0: values; 1: the record null, its children too; 2: a required child null; 3: the record null
    p_arr = _struct_column({"x": pa.array([1, None, None, 5], pa.int32()), "s": pa.array(["a", None, "c", "d"])},
                           [False, True, False, True])
    q_arr = _struct_column({"inner": _struct_column({"x": pa.array([1, None, 3, None], pa.int32())},
                                                    [False, True, False, True])}, [False, True, False, False])
    for optional, slow in ((True, [2, 3]), (False, [1, 2, 3])):
        p = SchemaBuilder.struct().name("n.P").field("x", Schema.INT32).field("s", Schema.STRING)
        q = SchemaBuilder.struct().name("n.Q").field("inner", inner)
        schema = SchemaBuilder.struct().field("p", p.optional() if optional else p).field("q", q.optional()).build()
        batch = SourceBatch("t", pa.table({"p": p_arr, "q": q_arr}), schema, {"p": 1}, {"o": 4})
        conv = _avro_converter()
        encoded, written = _avro_encode_counting(conv, batch)
        assert written == 0
        assert encoded.slow == slow and _avro_same_as_records(conv, batch, encoded) == slow
        if optional:  # both null branches after the header
            assert encoded.data[1].as_py().endswith(b"\x00\x00")


def _defaults_batch(nulls: bool) -> SourceBatch:
    """Fields with a default: optional (Avro ``[T, "null"]``, a named Debezium string among them) and
    required, at the root and in a nested record (null in rows 1 and 4, with its children null there).
    ``nulls``: a null in each of them in one row (else in none)."""
    inner = (SchemaBuilder.struct().name("d.Inner").field("e", SchemaBuilder.string().name("io.debezium.data.Enum")
                                                          .parameter("allowed", "a,b").default_value("a").optional().build())
             .field("m", SchemaBuilder.int64().default_value(-1).build()).optional().build())
    schema = (SchemaBuilder.struct().name("d.Row")
              .field("o", SchemaBuilder.int32().default_value(7).optional().build())
              .field("r", SchemaBuilder.string().default_value("x").build())
              .field("inner", inner).build())
    n = 6
    null = {name: [nulls and i == row for i in range(n)] for name, row in (("o", 0), ("r", 3), ("e", 5), ("m", 2))}
    inner_null = [i in (1, 4) for i in range(n)]
    data = pa.table({
        "o": pa.array([None if null["o"][i] else i for i in range(n)], pa.int32()),
        "r": pa.array([None if null["r"][i] else f"r{i}" for i in range(n)]),
        "inner": _struct_column({"e": pa.array([None if null["e"][i] or inner_null[i] else "b" for i in range(n)]),
                                 "m": pa.array([None if null["m"][i] or inner_null[i] else i for i in range(n)],
                                               pa.int64())}, inner_null),
    })
    return SourceBatch("t", data, schema, {"p": 1}, {"o": n})


def test_avro_a_field_with_a_default_is_written_as_any_value():
    conv = _avro_converter()
    batch = _defaults_batch(nulls=False)
    encoded, written = _avro_encode_counting(conv, batch)
    assert written == 0 and encoded.slow == [] and _avro_same_as_records(conv, batch, encoded) == []
    assert '"name":"o","type":[{"type":"int"' in conv._data.writer(batch.value_schema).schema_json  # value: branch 0
    # a null in one (o in row 0, inner.m in 2, r in 3, inner.e in 5) is written as its default by the
    # converter: those rows go the per-record way (not rows 1 and 4: a null under a null record is not written)
    batch = _defaults_batch(nulls=True)
    encoded, written = _avro_encode_counting(conv, batch)
    assert written == 0
    assert encoded.slow == [0, 2, 3, 5] and _avro_same_as_records(conv, batch, encoded) == []


def _envelope_batch(n: int = 40) -> SourceBatch:
    """A batch of Debezium envelopes as the PostgreSQL CDC source makes them: ``before``/``after`` of one
    row record (defined once, referred to by name), the connector's ``source`` (its ``snapshot`` an
    ``io.debezium.data.Enum`` with a default), ``transaction`` always null, ``op``, ``ts_*``; a key."""
    from airflow_copycat.connectors.postgres_cdc.change_batches import _struct_type
    from airflow_copycat.connectors.postgres_cdc.envelope import SNAPSHOT_VALUES, SOURCE_SCHEMA, TRANSACTION_SCHEMA

    row = (SchemaBuilder.struct().name("pg.public.t.Value").field("id", Schema.INT64)
           .field("name", Schema.OPTIONAL_STRING).field("amount", Decimal.builder(2).optional().build())
           .field("small", Schema.OPTIONAL_INT16).field("ratio", Schema.OPTIONAL_FLOAT32)
           .field("ok", Schema.OPTIONAL_BOOLEAN).field("blob", Schema.OPTIONAL_BYTES)
           .field("at", SchemaBuilder.string().name("io.debezium.time.ZonedTimestamp").version(1).optional().build())
           .field("doc", SchemaBuilder.string().name("io.debezium.data.Json").version(1).optional().build())
           .optional().build())
    envelope = (SchemaBuilder.struct().name("pg.public.t.Envelope").version(2).field("before", row)
                .field("after", row).field("source", SOURCE_SCHEMA).field("transaction", TRANSACTION_SCHEMA)
                .field("op", Schema.STRING).field("ts_ms", Schema.OPTIONAL_INT64).field("ts_us", Schema.OPTIONAL_INT64)
                .field("ts_ns", Schema.OPTIONAL_INT64).build())
    ops = ["cud"[i % 3] for i in range(n)]

    def rows(side):
        return pa.array([None if (side == "before" and op == "c") or (side == "after" and op == "d") else {
            "id": i - 20, "name": None if i % 5 == 0 else f"n\u00e9 {i} 😀", "amount": decimal.Decimal(i * 7919 - 99_999).scaleb(-2),
            "small": None if i % 4 == 0 else -(2**15) + i, "ratio": _f32(i / 7), "ok": None if i % 6 == 0 else i % 2 == 0,
            "blob": bytes(range(i % 5)), "at": f"2026-11-25T07:{i % 60:02d}:00.5Z", "doc": '{"a": [1, 2]}',
        } for i, op in enumerate(ops)], _struct_type(row))

    source = pa.array([{"version": "copycat-1", "connector": "postgresql", "name": "pg", "ts_ms": 1_764_000_000_000 + i,
                        "snapshot": SNAPSHOT_VALUES[i % len(SNAPSHOT_VALUES)], "db": "db",
                        "sequence": None if i % 7 == 0 else f'["{i}","{i + 1}"]', "ts_us": 1_764_000_000_000_000 + i,
                        "ts_ns": None if i % 2 else 1_764_000_000_000_000_000 + i, "schema": "public", "table": "t",
                        "txId": 700 + i // 3, "lsn": 2**40 + i, "xmin": None} for i in range(n)],
                      _struct_type(SOURCE_SCHEMA))
    data = pa.table({"before": rows("before"), "after": rows("after"), "source": source,
                     "transaction": pa.nulls(n, _struct_type(TRANSACTION_SCHEMA)), "op": pa.array(ops),
                     "ts_ms": pa.array([1_764_000_000_123] * n, pa.int64()),
                     "ts_us": pa.array([1_764_000_000_123_456] * n, pa.int64()),
                     "ts_ns": pa.array([None] * n, pa.int64()),
                     "key.id": pa.array([i - 20 for i in range(n)], pa.int64())})
    key_schema = SchemaBuilder.struct().name("pg.public.t.Key").field("id", Schema.INT64).build()
    return SourceBatch("pg.public.t", data, envelope, {"p": 1}, {"o": n}, key_fields=("key.id",), key_schema=key_schema)


@pytest.mark.parametrize("layout", ["framed", "single-object", "registry"])
def test_avro_debezium_envelopes_are_encoded_in_columns(layout, registry_url):
    import dataclasses
    import uuid

    batch = dataclasses.replace(_envelope_batch(), topic=f"pg-{uuid.uuid4().hex}")
    for is_key in (False, True):
        conv = _avro_converter(layout, registry_url, is_key)
        encoded, written = _avro_encode_counting(conv, batch, is_key)
        assert encoded is not None and written == 0, "envelopes written one by one by the converter"
        assert encoded.slow == [] and _avro_same_as_records(conv, batch, encoded, is_key) == []
        if not is_key:  # ``after`` is the record ``before`` defined, by name
            assert '"name":"after","type":["null","Value"]' in conv._data.writer(batch.value_schema).schema_json
