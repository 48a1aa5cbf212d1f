"""FilesSink's batch path (put_batch: JSON values decoded in columns) against its record path.

Differential: the same messages, generated from random Connect schemas and
payloads (integers of each width at and past their edges, float32/float64 text
edges, decimals in base64, dates/times/timestamps in and out of range, strings
with escapes, non-ASCII and lone surrogates, nulls, nested structs, arrays and
maps, and bad rows), go once through ``put_batch`` and once through
``put(batch.to_records())`` into real files; both must write the same files
byte for byte (Parquet included: pyarrow's writer is deterministic), the same
committed offsets, hand the same messages to ``errors.*`` and fail the same way.
One test runs both through the real broker and the real sink loop, dead-letter
queues included.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_copycat.connect import Date, Decimal, Schema, SchemaBuilder, SinkTaskContext, Struct, Time, Timestamp
from airflow_copycat.connect.sink_batch import SinkBatch
from airflow_copycat.connectors.files import FilesSinkConnector, FilesSinkTask
from airflow_copycat.converters.json_converter import JsonConverter

TOPIC = "t"


# ---------------------------------------------------------------- schemas and payloads

class Raw(str):
    """JSON text written as it is (numbers with edges the generator chose)."""


def dump(node) -> str:
    if isinstance(node, Raw):
        return str(node)
    if isinstance(node, dict):
        return "{" + ",".join(json.dumps(k) + ":" + dump(v) for k, v in node.items()) + "}"
    if isinstance(node, list):
        return "[" + ",".join(dump(v) for v in node) + "]"
    if isinstance(node, Escaped):
        return node.text
    return json.dumps(node)


class Escaped:
    """A JSON string with a chosen escaping (ensure_ascii or raw UTF-8)."""

    def __init__(self, value: str, ascii_only: bool):
        self.text = json.dumps(value, ensure_ascii=ascii_only)


PRIMITIVES = ["int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string", "bytes", "decimal",
              "date", "time", "timestamp"]
BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def primitive_schema(kind: str, optional: bool, draw) -> Schema:
    if kind == "decimal":
        b = Decimal.builder(draw(st.integers(0, 4)))
        if draw(st.booleans()):
            b = b.parameter("connect.decimal.precision", str(draw(st.integers(3, 20))))
    elif kind == "date":
        b = Date.builder()
    elif kind == "time":
        b = Time.builder()
    elif kind == "timestamp":
        b = Timestamp.builder()
    else:
        b = SchemaBuilder.type(kind)
    if optional:
        b = b.optional()
    if draw(st.integers(0, 15)) == 0 and kind in ("int32", "string"):
        b = b.default_value(7 if kind == "int32" else "dflt")
    return b.build()


@st.composite
def schemas(draw, depth=0):
    kinds = PRIMITIVES + (["struct", "array", "map"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    optional = draw(st.booleans())
    if kind == "struct":
        b = SchemaBuilder.struct().name(f"s{depth}")
        names = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "é", "x y", "n"]), min_size=1, max_size=5,
                              unique=True))
        for name in names:
            b = b.field(name, draw(schemas(depth + 1)))
    elif kind == "array":
        b = SchemaBuilder.array(draw(schemas(depth + 1)))
    elif kind == "map":
        key = draw(st.sampled_from([Schema.STRING, Schema.INT32]))
        b = SchemaBuilder.map(key, draw(schemas(depth + 1)))
    else:
        return primitive_schema(kind, optional, draw)
    return (b.optional() if optional else b).build()


def float_text(draw, kind, defects):
    f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
    choice = draw(st.integers(0, 9 if defects else 5))
    if choice <= 3:
        x = draw(f32 if kind == "float32" else st.floats(allow_nan=False, allow_infinity=False))
        return Raw(repr(float(x)))
    if choice <= 5:  # decimal text that needs rounding to float32/float64
        return Raw(f"{draw(st.integers(-10**20, 10**20))}e{draw(st.integers(-50, 40))}")
    if choice == 6:
        return Raw(draw(st.sampled_from(["-0", "-0.0", "0", "1e400", "-1e-400", "3.4028235677973366e38",
                                         "3.4028234663852886e38", "1.401298464324817e-45", "7.006492321624085e-46",
                                         "1.1754943508222875e-38", "16777217", "9007199254740993", "0.1"])))
    if choice == 7:  # quoted, as Jackson writes them (the records take them); bare, or out of a double's range
        return draw(st.sampled_from(["NaN", "Infinity", "-Infinity", Raw("NaN"), Raw("-Infinity"), Raw("Inf"),
                                     Raw(str(2**1024 - 2**970)), Raw("1" + "0" * 4300),
                                     Raw("1e-1999999999999999998")]))
    return draw(st.integers(-2**70, 2**70))


@st.composite
def payloads(draw, schema: Schema, defects: bool, depth=0):
    """A JSON payload for ``schema``: with ``defects`` sometimes null, out of range or not valid for it
    at all; else null only where optional and default-less, and in range."""
    if (defects or (schema.optional and schema.default is None)) and draw(st.integers(0, 12)) == 0:
        return None
    if defects and draw(st.integers(0, 40)) == 0:  # the wrong JSON type
        return draw(st.sampled_from(["text", 12, 1.5, True, [], {}]))
    name, t = schema.name, schema.type.value
    if name == Date.LOGICAL_NAME:
        return draw(st.integers(-719_162, 2_932_896) | st.sampled_from([2_932_897, -719_163, 2**31] if defects else [0]))
    if name == Time.LOGICAL_NAME:
        return draw(st.integers(0, 86_399_999) | st.sampled_from([-1, 86_400_000] if defects else [0]))
    if name == Timestamp.LOGICAL_NAME:
        return draw(st.integers(-62_135_596_800_000, 253_402_300_799_999)
                    | st.sampled_from([253_402_300_800_000, -62_135_596_800_001, 2**63] if defects else [0]))
    if name == Decimal.LOGICAL_NAME:
        if defects and draw(st.integers(0, 15)) == 0:
            return draw(st.sampled_from(["", "!!", "AA=", Raw("1.5")]))
        unscaled = draw(st.integers(-10**25, 10**25) if defects else st.integers(-999, 999))
        bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
        return base64.b64encode(unscaled.to_bytes(bits // 8 + 1, "big", signed=True)).decode()
    if t in BITS:
        lo, hi = -(2 ** (BITS[t] - 1)), 2 ** (BITS[t] - 1) - 1
        return draw(st.integers(lo, hi) | st.sampled_from([lo - 1, hi + 1, Raw("1.0"), Raw("-0"), Raw("007")] if defects
                                                          else [lo, hi]))
    if t in ("float32", "float64"):
        return float_text(draw, t, defects)
    if t == "boolean":
        return draw(st.booleans())
    if t == "string":
        text = draw(st.text(max_size=12) | st.sampled_from((["\ud800", "a\udc00"] if defects else [])
                                                           + ["\U0001f600", "\x00\x1f\"\\/", "line\nbreak", "é\u2028"]))
        return Escaped(text, draw(st.booleans()))
    if t == "bytes":
        if defects and draw(st.integers(0, 15)) == 0:
            return "not base64!"
        return base64.b64encode(draw(st.binary(max_size=10))).decode()
    if t == "array":
        return draw(st.lists(payloads(schema.value_schema, defects, depth + 1), max_size=3))
    if t == "map":
        entries = draw(st.lists(payloads(schema.value_schema, defects, depth + 1), max_size=2))
        if schema.key_schema.type.value == "string":
            return {f"k{i}": v for i, v in enumerate(entries)}
        return [[i, v] for i, v in enumerate(entries)]
    node = {}
    for f in schema.fields:
        if draw(st.integers(0, 10)) > 0 or not defects and not (f.schema.optional and f.schema.default is None):
            node[f.name] = draw(payloads(f.schema, defects, depth + 1))
    if defects and draw(st.integers(0, 30)) == 0:
        node["extra"] = 1
    return node


def envelope(schema: Schema, payload) -> bytes:
    conv = JsonConverter()
    conv.configure({}, False)
    return ('{"schema":' + conv.as_json_schema(schema) + ',"payload":' + dump(payload) + "}").encode(
        "utf-8", "surrogatepass")


BAD = [b"{not json", b'{"schema":null,"payload":1}', b'{"schema":{"type":"string","optional":false},"payload":"x"}',
       b"\xff\xfe", b"null", b"", None, b'{"schema":{"type":"int32","optional":false},"payload":1,"x":2}']


@st.composite
def topics_content(draw):
    """(values, flush.size, split points, behavior.on.null.values, struct or primitive top level)."""
    schema = draw(schemas())
    if draw(st.booleans()) and schema.type.value != "struct":
        schema = SchemaBuilder.struct().name("top").field("v", schema).build()
    second = draw(schemas()) if draw(st.integers(0, 6)) == 0 else None
    defects = draw(st.booleans())
    values = []
    for _ in range(draw(st.integers(1, 25))):
        roll = draw(st.integers(0, 30 if defects else 1000))
        if roll == 0:
            values.append(draw(st.sampled_from(BAD)))
        elif roll == 1 and second is not None:
            values.append(envelope(second, draw(payloads(second, defects))))
        else:
            values.append(envelope(schema, draw(payloads(schema, defects))))
    splits = sorted(set(draw(st.lists(st.integers(1, max(1, len(values) - 1)), max_size=3))) - {len(values)})
    return values, draw(st.integers(1, 8)), splits, draw(st.sampled_from(["fail", "ignore"]))


# ---------------------------------------------------------------- the two paths

def start_task(store: str, flush_size: int, nulls: str) -> FilesSinkTask:
    raw = {"topics": TOPIC, "store.url": store, "format.class": "parquet", "flush.size": str(flush_size),
           "behavior.on.null.values": nulls, "name": "diff", "connector.class": "FilesSink"}
    connector = FilesSinkConnector()
    connector.start(FilesSinkConnector.parse_config(raw))
    config = connector.task_configs(1)[0]
    task = FilesSinkTask()
    task.initialize(SinkTaskContext(config, [(TOPIC, 0)]))
    task.start(config)
    task.open([(TOPIC, 0)])
    return task


def run_path(store: str, values: list, flush_size: int, splits: list, nulls: str, batches: bool):
    """Put the values (offsets 10, 12, 14, ...: gaps as compaction leaves them) in batches cut at
    ``splits``; returns (outcome, handled rows, files, metrics, fast batches)."""
    conv = JsonConverter()
    conv.configure({}, False)
    task = start_task(store, flush_size, nulls)
    handled, fast = [], 0
    offsets = [10 + 2 * i for i in range(len(values))]
    outcome = "ok"
    try:
        for lo, hi in zip([0] + splits, splits + [len(values)]):
            def on_error(batch, row, stage, converter, error, lo=lo):
                handled.append((lo + row, stage, str(error)))

            batch = SinkBatch(key_converter=conv, value_converter=conv, on_conversion_error=on_error,
                              topics=[TOPIC] * (hi - lo), partitions=[0] * (hi - lo), offsets=offsets[lo:hi],
                              keys=[None] * (hi - lo), values=values[lo:hi])
            if batches:
                fast += bool(task._decode(batch)[0])
                task.put_batch(batch)
            else:
                task.put(batch.to_records())
        task.pre_commit({(TOPIC, 0): offsets[-1] + 1}, final=True)
    except Exception as e:  # noqa: BLE001 - both paths must fail alike
        outcome = f"{type(e).__name__}: {e}"
    files = {}
    for path in sorted(Path(store).rglob("*")):
        rel = path.relative_to(store).as_posix()
        if path.is_file() and "/staging/" not in rel and "/wal/" not in rel:
            data = path.read_bytes()
            if "/offsets/" in rel:
                marker = json.loads(data)
                data = (marker["offset"], marker["files"])
            files[rel] = data
    metrics = {k: v for k, v in task.metrics.items()}
    task.stop()
    return outcome, handled, files, metrics, fast


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(topics_content())
def test_batch_path_writes_what_the_record_path_writes(content):
    values, flush_size, splits, nulls = content
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        fast = run_path(a, values, flush_size, splits, nulls, batches=True)
        slow = run_path(b, values, flush_size, splits, nulls, batches=False)
    event(f"columns decoded {'some' if fast[4] else 'no'} batches")
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert fast[2].keys() == slow[2].keys()
    for name in fast[2]:
        assert fast[2][name] == slow[2][name], name
    assert fast[3] == slow[3]


def test_typical_envelopes_are_decoded_in_columns(tmp_path):
    # Given envelopes of one struct schema of every supported kind, with nulls where optional
    schema = (SchemaBuilder.struct().name("row")
              .field("i8", Schema.INT8).field("i64", Schema.OPTIONAL_INT64).field("f32", Schema.FLOAT32)
              .field("f64", Schema.OPTIONAL_FLOAT64).field("ok", Schema.BOOLEAN).field("s", Schema.OPTIONAL_STRING)
              .field("raw", Schema.OPTIONAL_BYTES).field("price", Decimal.builder(2).optional().build())
              .field("day", Date.builder().build()).field("at", Time.builder().build())
              .field("ts", Timestamp.builder().optional().build())
              .field("tags", SchemaBuilder.array(Schema.OPTIONAL_STRING).optional().build())
              .field("inner", SchemaBuilder.struct().field("n", Schema.INT32).optional().build()).build())
    conv = JsonConverter()
    conv.configure({}, False)
    import datetime as dt
    import decimal

    inner = schema.field("inner").schema
    values = [conv.from_connect_data(TOPIC, schema, Struct(schema, {
        "i8": -128 + i, "i64": None if i % 3 == 0 else 2**62 + i, "f32": 0.1 * i, "f64": None if i == 2 else 1e300 / (i + 1),
        "ok": i % 2 == 0, "s": f"é \"{i}\" \U0001f600", "raw": bytes([i, 255]), "price": decimal.Decimal(f"{i}.25"),
        "day": dt.date(2026, 11, 1 + i), "at": dt.time(23, 59, i, 999000),
        "ts": dt.datetime(1969, 12, 31, 23, 59, i, tzinfo=dt.timezone.utc), "tags": ["a", None, f"t{i}"],
        "inner": None if i == 1 else Struct(inner, {"n": i})})) for i in range(12)]
    # When they go through both paths, Then the batch path decoded them in columns, and both wrote the same files
    fast = run_path(str(tmp_path / "a"), values, 5, [7], "fail", batches=True)
    slow = run_path(str(tmp_path / "b"), values, 5, [7], "fail", batches=False)
    assert fast[0] == "ok", fast[0]
    assert fast[4] == 2
    assert fast[:4] == slow[:4]
    parquet = sorted(n for n in fast[2] if n.endswith(".parquet"))
    assert [os.path.basename(n) for n in parquet] == ["t+0+0000000010.snappy.parquet", "t+0+0000000020.snappy.parquet",
                                                       "t+0+0000000030.snappy.parquet"]
    table = pq.read_table(tmp_path / "a" / parquet[0])
    assert table.num_rows == 5 and table.schema.metadata[b"parquet.avro.schema"]
    assert table.column("price").to_pylist()[1] == decimal.Decimal("1.25")


def test_float32_text_rounds_once_like_the_records():
    # pyarrow's float32 parse against the records' exact rounding, on the halfway cases next to a float32
    values = []
    for x in (1.0, 3.4028234663852886e38, 1.1754943508222875e-38, 1.401298464324817e-45, 0.1, 16777216.0):
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
        for b in (bits, bits + 1):
            lo = struct.unpack("<f", struct.pack("<I", b - 1))[0]
            hi = struct.unpack("<f", struct.pack("<I", b))[0]
            values.append(repr((lo + hi) / 2))
    schema = SchemaBuilder.struct().field("f", Schema.FLOAT32).build()
    rows = [envelope(schema, {"f": Raw(v)}) for v in values]
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        fast = run_path(a, rows, 100, [], "fail", batches=True)
        slow = run_path(b, rows, 100, [], "fail", batches=False)
    assert fast[:4] == slow[:4] and fast[0] == "ok"


def test_an_integer_minus_zero_for_a_float_goes_as_records_and_only_it():
    # Given batches of a float field: text with "-0" only inside strings, a float literal -0.0, and an
    # integer -0 (which the records read as 0.0, pyarrow as -0.0)
    schema = SchemaBuilder.struct().field("f", Schema.FLOAT64).field("host", Schema.STRING).build()
    hosts = [envelope(schema, {"f": Raw(f"{i}.5"), "host": f"web-0{i}"}) for i in range(6)]
    signed = [envelope(schema, {"f": Raw("-0.0"), "host": "web-00"})]
    integer = [envelope(schema, {"f": Raw("-0"), "host": "web-00"})]
    values = hosts + signed + integer + hosts
    # When they go through both paths, a batch each
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        fast = run_path(a, values, 4, [6, 7, 8], "fail", batches=True)
        slow = run_path(b, values, 4, [6, 7, 8], "fail", batches=False)
    # Then only the integer -0 went as records, and both wrote the same files
    assert fast[0] == "ok", fast[0]
    assert fast[4] == 3
    assert fast[:4] == slow[:4]


@pytest.mark.parametrize("text", ["NaN", "-Infinity", "Inf", str(2**1024 - 2**970), "1" + "0" * 4300,
                                  "1e-1999999999999999998"], ids=["nan", "-infinity", "inf", "beyond-a-double",
                                                                  "4301-digits", "19-digit-exponent"])
def test_a_float_the_records_refuse_is_not_read_in_columns(text):
    # Given a batch of a float field whose second value is a text pyarrow reads as a float (nan, an infinity,
    # 0.0) but the records refuse: a bare NaN or infinity, an integer beyond a double, a 19-digit exponent
    schema = SchemaBuilder.struct().field("f", Schema.FLOAT64).field("host", Schema.STRING).build()
    rows = [envelope(schema, {"f": Raw(f"{i}.5"), "host": f"web-0{i}"}) for i in range(4)]
    values = rows[:1] + [envelope(schema, {"f": Raw(text), "host": "bad"})] + rows[1:]
    # When it goes through both paths
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        fast = run_path(a, values, 10, [], "fail", batches=True)
        slow = run_path(b, values, 10, [], "fail", batches=False)
    # Then both refuse that value alone and write the same files (before: the columns wrote nan, inf or 0.0)
    assert [row for row, *_ in slow[1]] == [1], slow[1]
    assert fast[:4] == slow[:4]


def test_strings_that_hold_a_huge_exponent_keep_their_batch_in_columns():
    # Given a batch of a float field holding zeros and a string field holding hex digests, some with an
    # "e" and 18 digits after it (as a number with a huge exponent would have)
    schema = SchemaBuilder.struct().field("f", Schema.FLOAT64).field("digest", Schema.STRING).build()
    values = [envelope(schema, {"f": Raw("0.0" if i % 2 else f"{i}.5"), "digest": f"{i}9e1234567890123456789ab"})
              for i in range(8)]
    # When it goes through both paths
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        fast = run_path(a, values, 10, [], "fail", batches=True)
        slow = run_path(b, values, 10, [], "fail", batches=False)
    # Then the batch was decoded in columns (the text inside strings is not a number), with the same files
    assert fast[4] == 1 and fast[:4] == slow[:4]


def test_through_the_broker_batches_and_records_write_the_same_files_and_dead_letters(worker_props, kafka_bootstrap,
                                                                                     unique, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    from airflow_copycat.runtime.executor import run_group
    from airflow_copycat.runtime.kafka import admin_client, read_to_end
    from airflow_copycat.runtime.plan import make_plan
    from airflow_copycat.runtime.worker import WorkerConfig

    # Given two partitions of envelopes of one struct schema with bad messages among them
    schema = (SchemaBuilder.struct().name("row").field("id", Schema.INT64).field("name", Schema.OPTIONAL_STRING)
              .field("ts", Timestamp.builder().build()).build())
    topic = f"diff-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=-1)])[topic].result(30)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(400):
        value = envelope(schema, {"id": i, "name": None if i % 7 == 0 else f"n\u00e9{i}", "ts": 1_795_305_600_000 + i})
        if i in (5, 251):  # partition 1 only: partition 0 decodes in columns
            value = b"{broken"
        if i == 123:
            value = envelope(schema, {"id": "not a number", "ts": 0})
        p.produce(topic, value, partition=i % 2, headers=[("h", str(i).encode())])
    assert p.flush(30) == 0

    def run(name, **extra):
        config = {"name": name, "connector.class": "FilesSink", "topics": topic, "format.class": "parquet",
                  "store.url": str(tmp_path / name), "flush.size": "64", "errors.tolerance": "all",
                  "errors.deadletterqueue.topic.name": f"dlq-{name}",
                  "errors.deadletterqueue.context.headers.enable": "true", **extra}
        plan = make_plan(config, WorkerConfig(worker_props, env={}))
        (task,) = [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]
        assert task["status"] == "ok", task["error"]
        files = {f.relative_to(tmp_path / name).as_posix(): f.read_bytes()
                 for f in sorted((tmp_path / name).rglob("*.parquet"))}
        c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"check-{name}", "enable.partition.eof": True})
        try:
            dead = [(m.value(), [(k, v) for k, v in m.headers() or [] if not k.endswith(("connector.name", "stacktrace"))])
                    for m in read_to_end(c, [TopicPartition(f"dlq-{name}", 0, 0)], timeout_s=30)]
        finally:
            c.close()
        return task, files, dead

    # When the files sink runs as it is (batches) and with a transform that keeps every record (records)
    import airflow_copycat.connectors.files.sink as files_sink

    decoded = []
    real = files_sink.decode_envelopes
    files_sink.decode_envelopes = lambda *a: decoded.append(real(*a)) or decoded[-1]
    try:
        fast, fast_files, fast_dead = run(f"batches-{unique}")
    finally:
        files_sink.decode_envelopes = real
    assert any(d is not None for d in decoded) and any(d is None for d in decoded)
    slow, slow_files, slow_dead = run(f"records-{unique}", transforms="tag",
                                      **{"transforms.tag.type": "org.apache.kafka.connect.transforms.InsertHeader",
                                         "transforms.tag.header": "tag", "transforms.tag.value.literal": "x"})
    # Then both wrote the same files, byte for byte, and dead-lettered the same messages the same way
    assert len(fast_files) == 8 and fast_files == slow_files
    assert sorted(v for v, _ in fast_dead) == sorted([b"{broken", b"{broken", envelope(schema, {"id": "not a number",
                                                                                               "ts": 0})])
    assert fast_dead == slow_dead
    assert (fast["records"], fast["errors"], fast["dead_lettered"]) == (397, 3, 3) == \
        (slow["records"], slow["errors"], slow["dead_lettered"])
    assert {p["offset_after"] for p in fast["partitions"]} == {200}
    assert pq.read_table(tmp_path / f"batches-{unique}" / sorted(fast_files)[0]).num_rows == 64


@st.composite
def decimal_texts(draw):
    """Base64 decimal payloads of every size up to 9 bytes (and some defects), nulls, a precision and a
    scale, and where the column starts (an Arrow slice)."""
    def text(n: int) -> str:
        bits = n.bit_length() if n >= 0 else (~n).bit_length()
        return base64.b64encode(n.to_bytes(bits // 8 + 1, "big", signed=True)).decode()

    values = draw(st.lists(st.none() | st.integers(-2**71, 2**71).map(text)
                           | st.sampled_from(["", "AA=", "A===", "AA=A", "////", "é===", "AAAAAAAAAAAAAAAA"]),
                           min_size=1, max_size=40))
    precision = draw(st.integers(1, 38))
    return values, precision, draw(st.integers(-2, precision + 1)), draw(st.integers(0, 3))


@settings(max_examples=1000, deadline=None)
@given(decimal_texts())
def test_decimals_decode_in_columns_as_one_by_one(case):
    """Given base64 decimal payloads, when decoded in columns, then the column holds what decoding them
    one by one (``Decimal.to_logical``, as the records do) gives, or the columns refuse exactly where
    the one-by-one path fails."""
    import pyarrow as pa

    from airflow_copycat.connectors.files import json_columns

    values, precision, scale, skip = case
    schema = Decimal.builder(scale).optional().parameter("connect.decimal.precision", str(precision)).build()
    array = pa.array(["pad"] * skip + values, pa.string())[skip:]
    target = pa.decimal128(precision, scale)

    def one_by_one():
        return pa.array([None if s is None else Decimal.to_logical(schema, base64.b64decode(s, validate=True) or 1 / 0)
                         for s in values], type=target)

    try:
        expected = one_by_one()
    except Exception:  # noqa: BLE001 -- the columns must refuse too
        expected = None
    try:
        got = json_columns._convert(array, schema, 0)
    except json_columns._Unsure:
        got = None
    event("decoded" if got is not None else "refused")
    assert (got is None) == (expected is None), (values, precision, scale)
    if got is not None:
        assert got.equals(expected)
