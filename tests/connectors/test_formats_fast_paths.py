"""The Parquet format's column-at-a-time path builds the very tables of the row path.

``to_arrow_table`` builds a struct schema's columns a field at a time (and passes plain
values to pyarrow as they are) instead of turning each row into a dict for
``Table.from_pylist``; anything it does not handle exactly (values that are not Structs of
the file's schema, conversions that fail) goes the row way. Compared with
``slow_paths()`` (the row path) over random schemas and values, fixed seed: equal tables,
byte-identical Parquet files, the same errors.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct

import pytest

from airflow_copycat.connect.data import Schema, SchemaBuilder, Struct, Type
from airflow_copycat.connectors.files.formats import ParquetFormat, to_arrow_table
from tests.connect.test_json_converter_fast_paths import (
    FIELD_NAMES,
    rand_schema,
    rand_value,
)
from tests.support.slow_paths import slow_paths


def canon(v):
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, dict):
        return ("dict", tuple((k, canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(canon(x) for x in v))
    return (type(v).__name__, repr(v))


def outcome(rows):
    try:
        table = to_arrow_table(rows)
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever happens
        return ("error", type(e).__name__, str(e))
    try:
        data = ParquetFormat("snappy").encode("t", rows)
    except Exception as e:  # noqa: BLE001 - (a value pyarrow converted but Parquet refuses)
        data = ("error", type(e).__name__, str(e))
    return ("ok", table, data)


def assert_same(rows):
    got = outcome(rows)
    with slow_paths():
        want = outcome(rows)
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        assert got[1].schema.equals(want[1].schema, check_metadata=True)
        assert canon(got[1].to_pylist()) == canon(want[1].to_pylist())  # Table.equals: nan != nan
        assert [c.num_chunks for c in got[1].columns] == [c.num_chunks for c in want[1].columns]
        assert got[2] == want[2]  # the same Parquet bytes
    else:
        assert got == want
    return got


def rand_struct_schema(rng: random.Random) -> Schema:
    b = SchemaBuilder.struct().name("Row")
    for name in rng.sample(FIELD_NAMES, rng.randint(1, 6)):
        b.field(name, rand_schema(rng, rng.choice([0, 0, 1, 2])))
    return b.build()


def test_random_struct_rows_give_the_same_tables():
    rng = random.Random(3)
    ok = 0
    for _ in range(150):
        schema = rand_struct_schema(rng)
        rows = [(schema, rand_value(rng, schema, allow_none=False)) for _ in range(rng.randint(1, 12))]
        ok += assert_same(rows)[0] == "ok"
    assert ok > 50  # most random files are valid Parquet


def test_random_primitive_and_container_rows_give_the_same_tables():
    rng = random.Random(4)
    for _ in range(150):
        schema = rand_schema(rng, rng.choice([0, 1, 2]))
        assert_same([(schema, rand_value(rng, schema, allow_none=False)) for _ in range(rng.randint(1, 8))])


FLAT = (SchemaBuilder.struct().name("Flat")
        .field("id", Schema.INT64).field("note", Schema.OPTIONAL_STRING)
        .field("n", SchemaBuilder.int32().optional().default_value(7).build())
        .field("raw", Schema.OPTIONAL_BYTES).field("ok", Schema.BOOLEAN).field("score", Schema.FLOAT64)
        .field("inner", SchemaBuilder.struct().field("x", Schema.INT32).optional().build())
        .field("tags", SchemaBuilder.array(Schema.STRING).optional().build())
        .build())


def flat(i, **changes):
    values = {"id": i, "note": None if i % 3 else f"n{i}", "n": None if i % 2 else i, "raw": bytes([i % 256]),
              "ok": i % 2 == 0, "score": i / 4, "inner": None, "tags": ["a", str(i)]}
    values.update(changes)
    return Struct(FLAT, values)


class SubStruct(Struct):
    __slots__ = ()


@pytest.mark.parametrize("case", [
    "plain", "bytearray", "memoryview", "nested struct", "equal schema", "dict row", "none row", "subclass",
    "bad map", "empty", "wrong type", "out of range", "default applied", "foreign schema",
])
def test_edge_rows_give_the_same_tables_or_errors(case):
    rows = [(FLAT, flat(i)) for i in range(20)]
    inner = FLAT.field("inner").schema
    if case == "bytearray":
        rows[3] = (FLAT, flat(3, raw=bytearray(b"xy")))
    elif case == "memoryview":
        rows[4] = (FLAT, flat(4, raw=memoryview(b"zz")))
    elif case == "nested struct":
        rows[5] = (FLAT, flat(5, inner=Struct(inner, {"x": 5})))
    elif case == "equal schema":
        other = SchemaBuilder.struct().name("Flat").build()  # not equal: the file check refuses it
        copy = Schema(Type.STRUCT, name="Flat", fields=FLAT.fields)  # equal, another object
        rows[6] = (FLAT, Struct(copy, {"id": 6, "ok": True, "score": 1.0}))
        rows[7] = (copy, flat(7))
        assert other != FLAT
    elif case == "dict row":
        rows[8] = (FLAT, {"id": 8, "ok": True, "score": 0.5})
    elif case == "none row":
        rows[9] = (FLAT, None)
    elif case == "subclass":
        s = SubStruct(FLAT, {"id": 10, "ok": True, "score": 0.5})
        rows[10] = (FLAT, s)
    elif case == "bad map":
        rows[11] = (FLAT, flat(11, tags=None))
        rows[11][1]._values[7] = {"not": "a list"}  # as a careless transform might leave it
    elif case == "empty":
        rows = []
    elif case == "wrong type":
        rows[12][1]._values[1] = 12  # an int in the string column
    elif case == "out of range":
        rows[13][1]._values[0] = 2**70
    elif case == "foreign schema":
        # a value whose own schema is not the record's (the row path reads the value's fields by name)
        foreign = SchemaBuilder.struct().name("Flat")
        for f in reversed(FLAT.fields):
            foreign.field(f.name, f.schema)
        reordered = foreign.build()
        rows[14] = (FLAT, Struct(reordered, {f.name: flat(14).get_without_default(f.name) for f in FLAT.fields}))
    elif case == "default applied":
        assert all(r[1].get("n") == 7 for r in rows[1::2])
    assert_same(rows)


def test_a_value_with_its_own_schema_is_read_by_name():
    ab = SchemaBuilder.struct().field("a", Schema.STRING).field("b", Schema.STRING).build()
    ba = SchemaBuilder.struct().field("b", Schema.STRING).field("a", Schema.STRING).build()
    rows = [(ab, Struct(ab, {"a": "a0", "b": "b0"})), (ab, Struct(ba, {"a": "a1", "b": "b1"}))]
    assert assert_same(rows)[1].to_pylist() == [{"a": "a0", "b": "b0"}, {"a": "a1", "b": "b1"}]


def test_primitive_values_with_odd_types():
    rows = [(Schema.OPTIONAL_BYTES, v) for v in (b"a", bytearray(b"b"), memoryview(b"c"), None)]
    assert assert_same(rows)[0] == "ok"
    rows = [(Schema.STRING, v) for v in ("a", "b", Struct(FLAT, {"id": 1}), "c")]
    assert assert_same(rows)[0] == "error"
    rows = [(None, v) for v in ({"a": 1}, {"b": dt.date(2024, 1, 1)}, {"a": decimal.Decimal("1.5")})]
    assert_same(rows)
    rows = [(None, v) for v in (1, 2, bytearray(b"x"))]
    assert_same(rows)
