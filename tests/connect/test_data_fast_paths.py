"""Schema's name index and Struct's positional access give what the scans by name gave.

``Schema.field`` looks names up in a dict built once, ``Struct.get``/``put``/``values`` use
it (or the field positions when names and indices allow), ``Struct._trusted`` builds a
Struct without checks. Schemas built by hand may have odd fields (names repeated, indices
that are not positions, names that are not str): for those the scans still decide. Each
case is compared with ``slow_paths()`` (the scans) over random operations, fixed seed.
"""

from __future__ import annotations

import random

import pytest

from airflow_copycat.connect.data import Field, Schema, SchemaBuilder, Struct, Type
from airflow_copycat.connect.errors import DataException
from tests.support.slow_paths import slow_paths


class OddName(str):
    """A str subclass whose hash differs from the str's (equal, but a dict would not find it)."""

    def __hash__(self):
        return 1


ODD_SCHEMAS = {
    "builder": SchemaBuilder.struct().field("a", Schema.INT32).field("b", Schema.OPTIONAL_STRING)
    .field("c", SchemaBuilder.int64().default_value(5).build()).build(),
    "repeated name": Schema(Type.STRUCT, fields=[Field("a", 0, Schema.INT32), Field("a", 1, Schema.OPTIONAL_STRING),
                                                 Field("b", 2, SchemaBuilder.int32().optional().default_value(3).build())]),
    "index not position": Schema(Type.STRUCT, fields=[Field("a", 1, Schema.OPTIONAL_INT32),
                                                      Field("b", 0, Schema.OPTIONAL_STRING)]),
    "non-str names": Schema(Type.STRUCT, fields=[Field(1, 0, Schema.OPTIONAL_INT32), Field("1", 1, Schema.OPTIONAL_STRING)]),
    "str subclass name": Schema(Type.STRUCT, fields=[Field(OddName("a"), 0, Schema.OPTIONAL_INT32),
                                                     Field("b", 1, Schema.OPTIONAL_STRING)]),
}
NAMES = ["a", "b", "c", "d", 1, "1", OddName("a"), OddName("b"), 1.0, None]
VALUES = [None, 0, 1, 2**40, "x", "", True, 2.5, b"x"]


def outcome(fn, *args):
    try:
        result = fn(*args)
        return ("ok", result if not isinstance(result, Struct) else "self")
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever happens
        return ("error", type(e).__name__, str(e))


def apply(s: Struct, op: str, name, value):
    if op == "put":
        return s.put(name, value)
    if op == "field":
        return s.schema.field(name)
    if op == "getitem":
        return s[name]
    return getattr(s, op)(name)


def snapshot(s: Struct):
    return (list(s._values), outcome(s.values), outcome(s.to_dict), outcome(repr, s), outcome(s.validate))


@pytest.mark.parametrize("kind", list(ODD_SCHEMAS))
def test_struct_operations_match_the_scans_by_name(kind):
    schema = ODD_SCHEMAS[kind]
    rng = random.Random(7)
    fast, slow = Struct(schema), None
    with slow_paths():
        slow = Struct(schema)
    for _ in range(400):
        op, name, value = rng.choice(["put", "get", "get_without_default", "field", "getitem"]), \
            rng.choice(NAMES), rng.choice(VALUES)
        got = outcome(apply, fast, op, name, value)
        got_state = snapshot(fast)
        with slow_paths():
            want = outcome(apply, slow, op, name, value)
            want_state = snapshot(slow)
        assert got == want, (op, name, value)
        assert got_state == want_state, (op, name, value)
    with slow_paths():
        assert (fast == slow) is True and hash(fast) == hash(slow)


def test_positional_only_for_plain_fields():
    assert ODD_SCHEMAS["builder"]._positional
    assert not any(ODD_SCHEMAS[k]._positional for k in ODD_SCHEMAS if k != "builder")
    assert ODD_SCHEMAS["non-str names"]._by_name is None and ODD_SCHEMAS["str subclass name"]._by_name is None
    assert ODD_SCHEMAS["repeated name"].field("a").index == 0  # the first, as the scan finds


def test_trusted_struct_is_a_plain_struct():
    schema = ODD_SCHEMAS["builder"]
    s = Struct._trusted(schema, [1, None, None])
    assert s == Struct(schema, {"a": 1}) and s.get("c") == 5 and s.get_without_default("c") is None
    with pytest.raises(DataException, match="required"):
        Struct._trusted(schema, [None, None, None]).validate()


def test_schema_hash_and_equality_unchanged():
    a = SchemaBuilder.struct().field("a", Schema.INT32).build()
    b = SchemaBuilder.struct().field("a", Schema.INT32).build()
    assert a == b and hash(a) == hash(b) and a is not b
    assert hash(a) == hash((a.type, a.optional, a.name, a.version, 1))
    assert a != SchemaBuilder.struct().field("b", Schema.INT32).build()
    assert a.field("a") is a.fields[0] and a.field("zz") is None
    with pytest.raises(DataException, match="cannot look up field"):
        Schema.INT32.field("a")
