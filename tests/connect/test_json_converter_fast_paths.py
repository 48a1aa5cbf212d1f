"""JsonConverter's fast paths give exactly what the slow paths give.

The fast paths (see ``tests/support/slow_paths.py`` for the switch): strings quoted by
Python's C encoder when that writes what Jackson writes; an envelope whose bytes up to the
payload are those of one read lately parsed from its payload on, with the cached schema;
other envelopes parsed as schema and payload; one module-level JSON decoder; Structs read
without ``put``'s re-validation; struct fields written and read through a per-schema plan.
Each is compared with the slow path over random schemas, values and messages (fixed seeds):
the same bytes, the same values (types, digits, which schema objects are shared), the same
errors, the same LRU cache contents in the same order.
"""

from __future__ import annotations

import datetime as dt
import decimal
import gc
import json
import math
import random
import struct
import sys

import pytest

from airflow_copycat.connect.converters import SchemaAndValue
from airflow_copycat.connect.data import (
    Date,
    Decimal,
    Schema,
    SchemaBuilder,
    Struct,
    Time,
    Timestamp,
    Type,
)
from airflow_copycat.converters import json_decoding, json_text
from airflow_copycat.converters.json_converter import JsonConverter
from tests.support.slow_paths import slow_paths

UTC = dt.timezone.utc

# every kind of character that matters to the escaping: controls (short and \u escapes),
# quote, backslash, slash, DEL, Latin-1, BMP up to U+FFFF, line separators, lone and paired
# surrogates, characters beyond U+FFFF, and a backslash followed by u
ALPHABET = (
    [chr(c) for c in range(0x80)]
    + ["\x7f", "\x80", "\xa0", "é", "ß", "\u2028", "\u2029", "\ufeff", "\uffff", "€", "中"]
    + ["\ud800", "\udbff", "\udc00", "\udfff", "\U0001f600", "\U00010000", "\U0010ffff"]
    + ["\\u", "\\u00e9", '\\"', "/", "</script>"]
)


def rand_text(rng: random.Random, n: int | None = None) -> str:
    n = rng.choice([0, 1, 2, 5, 12, 40]) if n is None else n
    if rng.random() < 0.4:  # mostly printable ASCII, as most real strings
        return "".join(rng.choice(ALPHABET[32:127]) for _ in range(n))
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def converter(configs=None) -> JsonConverter:
    c = JsonConverter()
    c.configure(configs or {}, False)
    return c


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever happens
        return ("error", type(e).__name__, str(e))


# ---------------------------------------------------------------------- quoting

def test_quote_matches_the_jackson_escaper_on_random_strings():
    rng = random.Random(20261122)
    strings = [rand_text(rng) for _ in range(30000)]
    strings += ["", "\\u", "a\\ub", "\x7f", "\ud83d\ude00", "\U0001f600", "\x00", "\x1f", "\x0b", "\b\t\n\f\r"]
    strings += [chr(c) for c in range(0x10000)] + ["\U00010000", "\U0010ffff"]
    for s in strings:
        assert json_text._quote(s) == json_text._jackson_quote(s), repr(s)


def test_quote_fast_path_is_taken_for_plain_text():
    line = '2026-11-22T00:00:00.036Z web-06 nginx[6638]: 10.171.9.160 "POST /api/v1/items/497903" 200 "a\\b"'
    assert json_text._quote(line) == json.dumps(line, ensure_ascii=False) == json_text._jackson_quote(line)
    assert json_text._quote("tab\there") == '"tab\\there"'
    assert json_text._quote("\x01") == '"\\u0001"'  # upper-case hex from the Jackson escaper
    assert json_text._quote("\x1f") == '"\\u001F"'
    assert json_text._quote("\U0001f600") == '"\\uD83D\\uDE00"'


# ---------------------------------------------------------------------- random schemas and values

FIELD_NAMES = ["id", "name", "a\"b", "back\\slash", "é", "\U0001f600", "x y", "", "ts", "n", "\x01"]


def rand_schema(rng: random.Random, depth: int = 3) -> Schema:
    r = rng.random()
    if depth > 0 and r < 0.25:
        b = SchemaBuilder.struct()
        if rng.random() < 0.5:
            b.name(rng.choice(["com.example.Row", "r\u00e9", "x\"y"]))
        for name in rng.sample(FIELD_NAMES, rng.randint(1, 5)):
            b.field(name, rand_schema(rng, depth - 1))
    elif depth > 0 and r < 0.35:
        b = SchemaBuilder.array(rand_schema(rng, depth - 1))
    elif depth > 0 and r < 0.45:
        key = Schema.STRING if rng.random() < 0.6 else rng.choice([Schema.INT32, Schema.OPTIONAL_INT64, Schema.BOOLEAN])
        b = SchemaBuilder.map(key, rand_schema(rng, depth - 1))
    elif r < 0.6:
        b = rng.choice([Date.builder(), Time.builder(), Timestamp.builder(), Decimal.builder(rng.choice([0, 2, 5]))])
    else:
        b = SchemaBuilder.type(rng.choice([Type.INT8, Type.INT16, Type.INT32, Type.INT64, Type.FLOAT32,
                                           Type.FLOAT64, Type.BOOLEAN, Type.STRING, Type.STRING, Type.BYTES]))
    if rng.random() < 0.4:
        b.optional()
    if rng.random() < 0.15:
        b.doc(rand_text(rng, 4))
    if rng.random() < 0.1:
        b.version(rng.randint(1, 3))
    if rng.random() < 0.1:
        b.parameter(rand_text(rng, 2), rand_text(rng, 3))
    schema = b.build()
    if rng.random() < 0.2 and schema.type is not Type.STRUCT:
        default = rand_value(rng, schema, allow_none=False)
        schema = schema.copy(default=default)
    return schema


def rand_value(rng: random.Random, schema: Schema, allow_none: bool = True):
    if allow_none and (schema.optional or schema.default is not None) and rng.random() < 0.2:
        return None
    name, t = schema.name, schema.type
    if name == Date.LOGICAL_NAME:
        return dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-100000, 100000))
    if name == Time.LOGICAL_NAME:
        return dt.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999) * 1000)
    if name == Timestamp.LOGICAL_NAME:
        return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=rng.randint(-10**12, 10**13))
    if name == Decimal.LOGICAL_NAME:
        scale = Decimal.scale(schema)
        return decimal.Decimal(rng.randint(-10**12, 10**12)).scaleb(-scale)
    if t in (Type.INT8, Type.INT16, Type.INT32, Type.INT64):
        bits = {Type.INT8: 8, Type.INT16: 16, Type.INT32: 32, Type.INT64: 64}[t]
        return rng.choice([0, 1, -1, 2 ** (bits - 1) - 1, -(2 ** (bits - 1)), rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)])
    if t is Type.FLOAT64:
        return rng.choice([0.0, -0.0, 1.0, 1e23, 5e-324, math.inf, -math.inf, math.nan, rng.uniform(-1e6, 1e6),
                           struct.unpack("<d", rng.randbytes(8))[0]])
    if t is Type.FLOAT32:
        x = rng.choice([0.0, 1.5, -2.25, math.inf, rng.uniform(-1e6, 1e6)])
        return struct.unpack("<f", struct.pack("<f", x))[0]
    if t is Type.BOOLEAN:
        return rng.random() < 0.5
    if t is Type.STRING:
        return rand_text(rng)
    if t is Type.BYTES:
        return rng.randbytes(rng.randint(0, 6))
    if t is Type.ARRAY:
        return [rand_value(rng, schema.value_schema) for _ in range(rng.randint(0, 3))]
    if t is Type.MAP:
        out = {}
        for _ in range(rng.randint(0, 3)):
            k = rand_value(rng, schema.key_schema)
            try:
                out[k] = rand_value(rng, schema.value_schema)
            except TypeError:
                pass
        return out
    s = Struct(schema)
    for f in schema.fields:
        s.put(f.name, rand_value(rng, f.schema))
    return s


def canon(v):
    """A value with everything the comparison must see: types, float bits, Decimal digits, schemas."""
    if isinstance(v, Schema):
        return ("Schema", v.type, v.optional, v.name, v.version, v.doc, v._parameters, canon(v.default),
                tuple((f.name, f.index, canon(f.schema)) for f in v._fields) if v.type is Type.STRUCT else (),
                canon(v.key_schema) if v.key_schema is not None else None,
                canon(v.value_schema) if v.value_schema is not None else None)
    if isinstance(v, Struct):
        return ("Struct", canon(v.schema), tuple(canon(x) for x in v._values))
    if isinstance(v, dict):
        return ("dict", tuple((canon(k), canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(canon(x) for x in v))
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, SchemaAndValue):
        return ("SchemaAndValue", canon(v.schema), canon(v.value))
    return (type(v).__name__, repr(v))


CONFIGS = [
    {},
    {"schemas.enable": "false"},
    {"decimal.format": "NUMERIC"},
    {"replace.null.with.default": "false"},
    {"schemas.cache.size": "0"},
    {"schemas.cache.size": "1"},
    {"schemas.cache.size": "3"},
]


def written_cases(seed: int, n: int):
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        schema = rand_schema(rng)
        for _ in range(rng.randint(1, 3)):
            cases.append((schema, rand_value(rng, schema)))
    # schemas the converter gets as Structs' own (schemaless writes), and plain values without schema
    cases += [(None, v) for _, v in cases[:30]] + [(None, {"a": [1, 2.5, "x"], "b": None}), (None, "\U0001f600")]
    return cases


@pytest.mark.parametrize("configs", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "defaults")
def test_writing_random_values_gives_the_bytes_of_the_slow_path(configs):
    fast, slow = converter(configs), converter(configs)
    for schema, value in written_cases(1, 150):
        got = outcome(fast.from_connect_data, "t", schema, value)
        with slow_paths():
            want = outcome(slow.from_connect_data, "t", schema, value)
        assert got == want, (schema, value)
    assert [canon(k) for k in fast._schema_cache] == [canon(k) for k in slow._schema_cache]
    assert list(fast._schema_cache.values()) == list(slow._schema_cache.values())


@pytest.mark.parametrize("size", ["0", "1", "2", "3"])
def test_writing_keeps_the_schema_cache_order(size):
    # the envelope's schema text is reused while the schema is the cache's most recent entry;
    # nested schemas (array items, struct fields) are entries too and take that place
    item = SchemaBuilder.struct().field("x", Schema.INT32).build()
    a = SchemaBuilder.struct().field("items", SchemaBuilder.array(item).build()).build()
    b = SchemaBuilder.array(item).build()
    c = SchemaBuilder.map(Schema.STRING, item).build()
    d = SchemaBuilder.struct().field("n", Schema.INT64).field("items", SchemaBuilder.array(item).build()).build()
    equal_a = SchemaBuilder.struct().field("items", SchemaBuilder.array(item).build()).build()
    values = {id(a): Struct(a, {"items": [Struct(item, {"x": 1})]}), id(b): [Struct(item, {"x": 2})],
              id(c): {"k": Struct(item, {"x": 3})}, id(item): Struct(item, {"x": 4}),
              id(d): Struct(d, {"n": 1, "items": []}), id(equal_a): Struct(equal_a, {"items": []})}
    rng = random.Random(5)
    sequence = [rng.choice([a, a, b, c, d, item, item, equal_a]) for _ in range(300)]
    fast, slow = converter({"schemas.cache.size": size}), converter({"schemas.cache.size": size})
    for schema in sequence:
        got = outcome(fast.from_connect_data, "t", schema, values[id(schema)])
        with slow_paths():
            want = outcome(slow.from_connect_data, "t", schema, values[id(schema)])
        assert got == want
        assert [id(k) for k in fast._schema_cache] == [id(k) for k in slow._schema_cache]


def mutations(rng: random.Random, data: bytes, other: bytes) -> list[bytes]:
    """Variants of an envelope: whitespace, damage, other encodings, other payloads."""
    text = data.decode("utf-8")
    head, sep, payload = text.partition(',"payload":')
    out = [data, data, data]
    if sep:
        out += [
            (head + sep + " " + payload).encode(),  # whitespace before the payload: slow path
            (head + sep + payload[:-1] + " \n}\t").encode(),  # whitespace after it: fast path still
            (head + sep + payload[:-1] + ',"x":1}').encode(),  # another key
            (head + sep + payload[:-1] + ',"schema":null}').encode(),  # the schema again (last one wins)
            (head + sep + payload[:-1] + ',"payload":1}').encode(),
            (head + sep + payload[:-1] + "}}").encode(),  # extra data
            (head + sep + payload[:-1]).encode(),  # truncated
            (head + sep + "null}").encode(),
            (head + sep + "NaN}").encode(),
            (head + sep + "007}").encode(),  # leading zeros (Kafka's parser allows them)
            (head + sep + '"\\ud83d\\ude00"}').encode(),
            (head + sep + '"a"}').encode(),
            (head + sep + "[1,2,[3]]}").encode(),
            (head + sep + '{"id":1,"name":"x"}}').encode(),
            (head + sep + "1.50}").encode(),
            (head + sep + "-0}").encode(),
            (head + sep + '"' + "\U0001f600" + '"}').encode(),
            (head + sep).encode() + b'"\xed\xa0\x80"}',  # an encoded surrogate (json.loads accepts it)
            (head + sep).encode() + b'"\xff"}',  # not UTF-8
            b"\xef\xbb\xbf" + data,  # UTF-8 BOM
            text.encode("utf-16"),
            text.encode("utf-32-le"),
            ("{" + sep[1:] + payload[:-1] + "," + head[1:] + "}").encode(),  # payload first
            other[: len(other) // 2] + data[len(data) // 2:],
        ]
    out.append(b'{"schema":null,"payload":' + data + b"}")
    out.append(b" " + data)
    rng.shuffle(out)
    return out


def read_inputs(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    writer = converter()
    envelopes = []
    for schema, value in written_cases(seed, n):
        result = outcome(writer.from_connect_data, "t", schema, value)
        if result[0] == "ok":  # (not the values the random generator made unwritable)
            envelopes.append(result[1])
    envelopes = [e for e in envelopes if e is not None]
    inputs = []
    for i, data in enumerate(envelopes):
        inputs += mutations(rng, data, envelopes[i - 1])
        # the same schema again and again (what a topic holds), and an earlier one now and then
        inputs += [data] * rng.randint(0, 3) + [rng.choice(envelopes)]
    return inputs


@pytest.mark.parametrize("configs", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "defaults")
def test_reading_random_messages_gives_the_values_of_the_slow_path(configs):
    fast, slow = converter(configs), converter(configs)
    got_schemas, want_schemas = [], []
    for data in read_inputs(2, 70):
        got = outcome(fast.to_connect_data, "t", data)
        with slow_paths():
            want = outcome(slow.to_connect_data, "t", data)
        assert canon(got) == canon(want), data
        if got[0] == "ok":
            got_schemas.append(got[1].schema)
            want_schemas.append(want[1].schema)
    # the same schema objects are shared between results (the LRU cache behaves the same)
    assert [next(i for i, s in enumerate(got_schemas) if s is x) for x in got_schemas] == \
        [next(i for i, s in enumerate(want_schemas) if s is x) for x in want_schemas]
    assert list(fast._connect_schema_cache) == list(slow._connect_schema_cache)
    if configs.get("schemas.cache.size") != "0" and configs.get("schemas.enable") != "false":
        assert fast._envelopes, "the envelope fast path was never taken"


def test_reading_captured_records_learns_their_envelopes():
    c = converter()
    writer = converter()
    schema = SchemaBuilder.struct().name("r").field("id", Schema.INT64).field("s", Schema.OPTIONAL_STRING).build()
    messages = [writer.from_connect_data("t", schema, Struct(schema, {"id": i, "s": f"é{i}" if i % 2 else None}))
                for i in range(5)]
    values = [c.to_connect_data("t", m) for m in messages]
    assert len(c._envelopes) == 1 and messages[3].startswith(c._envelopes[0][0])
    assert all(v.schema is values[0].schema for v in values)
    assert [v.value.get("id") for v in values] == list(range(5))
    with slow_paths():
        assert [converter().to_connect_data("t", m) for m in messages] == values


def test_messages_that_are_not_json_leave_the_lru_order_alone():
    schemas = [SchemaBuilder.struct().field(name, Schema.INT32).build() for name in "abc"]
    msgs = [converter().from_connect_data("t", s, Struct(s, {s.fields[0].name: 1})) for s in schemas]
    broken = msgs[0][:-3] + b"}"  # schema a's bytes, then a broken payload
    sequence = [msgs[0], msgs[1], broken, msgs[2], msgs[0], msgs[1], broken, msgs[0], msgs[2]]
    fast, slow = converter({"schemas.cache.size": "2"}), converter({"schemas.cache.size": "2"})
    for data in sequence:
        got = outcome(fast.to_connect_data, "t", data)
        with slow_paths():
            want = outcome(slow.to_connect_data, "t", data)
        assert canon(got) == canon(want)
        assert list(fast._connect_schema_cache) == list(slow._connect_schema_cache)


def test_reading_map_keys_of_a_logical_string_schema_still_fails_in_put():
    # put() refuses the raw string keys of a map whose key schema is a logical type over string:
    # the unchecked Struct path must not take such a schema
    key = SchemaBuilder.string().name(Date.LOGICAL_NAME).build()
    schema = SchemaBuilder.struct().field("m", SchemaBuilder.map(key, Schema.INT32).build()).build()
    data = b'{"schema":' + converter().as_json_schema(schema).encode() + b',"payload":{"m":{"k":1}}}'
    for _ in range(2):
        got = outcome(converter().to_connect_data, "t", data)
        with slow_paths():
            want = outcome(converter().to_connect_data, "t", data)
        assert got == want and got[0] == "error" and "logical type" in got[2]
    assert json_decoding._fits_unchecked(schema) is False


def test_reading_a_null_struct_field_with_a_struct_default_still_fails_in_put():
    # (the default's Struct has the schema without the default: put() finds they differ)
    data = (b'{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,'
            b'"field":"x"}],"optional":false,"default":{"x":7},"field":"inner"}],"optional":false},'
            b'"payload":{"inner":null}}')
    for _ in range(2):
        got = outcome(converter().to_connect_data, "t", data)
        with slow_paths():
            want = outcome(converter().to_connect_data, "t", data)
        assert got == want and got[0] == "error" and "does not match" in got[2]


# ---------------------------------------------------------------------- the recursion limit

def _at_depth(n: int, fn, *args):
    return _at_depth(n - 1, fn, *args) if n else fn(*args)


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


@pytest.fixture
def no_collection_at_depth():
    """The garbage of earlier tests collected now, and no collection while this test runs near the recursion
    limit: a finalizer run there (a client of another test) raises RecursionError, an unraisable exception
    pytest fails the test on (seen once in a CI run)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("stack", [0, 300])
@pytest.mark.parametrize("kind", ["envelope", "learned envelope", "plain"])
def test_payloads_nested_up_to_the_recursion_limit_fail_where_they_did(stack, kind, no_collection_at_depth):
    # the fast paths parse a few Python frames deeper than json.loads did: never deep enough to
    # succeed where it failed; when they fail themselves, the slow path decides
    envelope = b'{"schema":{"type":"int32","optional":false},"payload":'
    configs = {"schemas.enable": "false"} if kind == "plain" else {}

    def message(depth):
        return _nested(depth) if kind == "plain" else envelope + _nested(depth) + b"}"

    def run(slow: bool, depth: int):
        c = converter(configs)
        if kind == "learned envelope":
            c.to_connect_data("t", envelope + b"1}")
        if slow:
            with slow_paths():
                return _at_depth(stack, outcome, c.to_connect_data, "t", message(depth))
        return _at_depth(stack, outcome, c.to_connect_data, "t", message(depth))

    # the first depth the slow path refuses as too deep
    lo, hi = 1, sys.getrecursionlimit()
    while lo < hi:
        mid = (lo + hi) // 2
        if "recursion" in str(run(True, mid)):
            hi = mid
        else:
            lo = mid + 1
    assert "recursion" in str(run(True, lo)) and "recursion" not in str(run(True, lo - 1))
    for depth in range(lo - 6, lo + 6):
        assert run(False, depth) == run(True, depth), depth


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_F32_NEAR = st.integers(min_value=0, max_value=0x7F7FFFFF)


@given(bits=_F32_NEAR, offset=st.integers(min_value=-3, max_value=3), digits=st.integers(min_value=6, max_value=40),
       sign=st.sampled_from([1, -1]))
def test_float32_fast_path_reads_the_value_of_the_exact_path(bits, offset, digits, sign):
    """Decimal texts at and around float32 values and the midpoints between them (where rounding twice
    could go wrong) read to the float32 the exact path reads."""
    import decimal
    import struct
    from fractions import Fraction

    from airflow_copycat.converters.java_numbers import _round_f32, _to_f32

    lo = struct.unpack("<f", struct.pack("<I", bits))[0]
    hi = struct.unpack("<f", struct.pack("<I", min(bits + 1, 0x7F7FFFFF)))[0]
    mid = (Fraction(lo) + Fraction(hi)) / 2
    ulp = (Fraction(hi) - Fraction(lo)) or Fraction(1, 2 ** 149)
    exact = mid + offset * ulp / 2 ** 30  # at the midpoint, or within a hair of it on either side
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        text = decimal.Decimal(exact.numerator) / decimal.Decimal(exact.denominator)
    node = sign * text
    assert _to_f32(node) == _round_f32(Fraction(node))
    assert _to_f32(sign * decimal.Decimal(repr(lo))) == _round_f32(Fraction(sign * decimal.Decimal(repr(lo))))
