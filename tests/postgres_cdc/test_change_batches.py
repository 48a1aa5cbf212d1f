"""The stream's batch path (``copycat.batch.enabled``, the default) against its record path: the same bytes.

Two connectors of one ``topic.prefix`` get a slot each before any change is made, so both read exactly
the same changes from the WAL: one streams as records (``copycat.batch.enabled=false``), the other in
batches. Generated transactions (seeded) of inserts, updates, deletes, updates that move the key,
TRUNCATEs, NULLs, unchanged TOASTed values, Unicode and control characters, float edge values, decimals,
bytes, a table with an array column (which streams as records in both) and one with ``REPLICA IDENTITY
FULL``. Every topic must then hold, message for message, the same key, value and header bytes from
both runs -- only the envelope's ``ts_ms``/``ts_us``/``ts_ns`` (when the event was made) may differ --
and both connectors commit the same offset and count the same changes.
"""

from __future__ import annotations

import random
import re

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.connect.records import SourceRecord
from airflow_copycat.connectors.postgres_cdc import change_batches
from airflow_copycat.connectors.postgres_cdc.change_batches import ChangeBatcher
from airflow_copycat.runtime.kafka import read_to_end

from tests.postgres_cdc.cdc_runs import CdcRuns
from tests.postgres_cdc.test_source import config

TABLES = {
    "kinds": "CREATE TABLE kinds (id bigint PRIMARY KEY, s smallint, n int NOT NULL DEFAULT 7, t text, "
             "big text, f float8, r real, m numeric(12,3), b bytea, ok boolean, ts timestamptz, u uuid, j jsonb)",
    "full_rows": "CREATE TABLE full_rows (k text PRIMARY KEY, v int, note varchar(20))",
    "arrays": "CREATE TABLE arrays (id int PRIMARY KEY, a int[], t text)",
}
TEXTS = ["", "plain", 'quote " and \\ back', "tab\tnew\nline\r", "ctl \x01\x1f", "é€😀 wide", "x" * 40]
FLOATS = ["0", "-0", "1.5", "0.1", "1e-7", "123456789.125", "1e300", "-2.5e-310", "NaN", "Infinity", "-Infinity"]


def _value(rnd: random.Random, pool: list):
    return None if rnd.random() < 0.15 else rnd.choice(pool)


def _kinds_row(rnd: random.Random, key: int) -> tuple:
    return (key, _value(rnd, [0, -32768, 32767, 12]), rnd.randrange(-2**31, 2**31), _value(rnd, TEXTS),
            None, _value(rnd, FLOATS), _value(rnd, ["1.5", "3.4028235e38", "-0", "1e-45", "NaN", "0.1"]),
            _value(rnd, ["0", "-123456789.123", "999999999.999", "0.001", "1"]),
            _value(rnd, [b"", b"\x00\xff", bytes(range(40))]), _value(rnd, [True, False]),
            _value(rnd, ["2024-03-01 10:00:00.123456+02", "1970-01-01 00:00:00+00", "0044-03-15 12:00:00+00"]),
            _value(rnd, ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]), _value(rnd, ['{"k": [1, "\\u0001"]}', "[]"]))


def _changes(db, rnd: random.Random, transactions: int) -> None:
    """Transactions of mixed changes over the three tables (TOASTed ``big`` values kept unchanged by later updates)."""
    with psycopg.connect(db.url, autocommit=False) as conn:
        live: set[int] = set()
        next_key = 1
        for tx in range(transactions):
            for _ in range(rnd.randrange(1, 60)):
                roll = rnd.random()
                if roll < 0.45 or not live:
                    row = _kinds_row(rnd, next_key)
                    conn.execute("INSERT INTO kinds VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", row)
                    if rnd.random() < 0.1:  # a value stored out of line: later updates leave it unchanged
                        conn.execute("UPDATE kinds SET big = %s WHERE id = %s",
                                     ("".join(rnd.choice("abcdef0123456789") for _ in range(9000)), next_key))
                    live.add(next_key)
                    next_key += 1
                elif roll < 0.75:
                    key = rnd.choice(sorted(live))
                    conn.execute("UPDATE kinds SET t = %s, f = %s, n = n + 1 WHERE id = %s",
                                 (_value(rnd, TEXTS), _value(rnd, FLOATS), key))
                elif roll < 0.9:
                    key = rnd.choice(sorted(live))
                    conn.execute("DELETE FROM kinds WHERE id = %s", (key,))
                    live.discard(key)
                elif roll < 0.95:  # the key moves: a delete, a tombstone and a create
                    key = rnd.choice(sorted(live))
                    conn.execute("UPDATE kinds SET id = %s WHERE id = %s", (next_key, key))
                    live.discard(key)
                    live.add(next_key)
                    next_key += 1
                else:
                    k = f"k{rnd.randrange(30)}"
                    conn.execute("INSERT INTO full_rows VALUES (%s, %s, %s) ON CONFLICT (k) DO UPDATE "
                                 "SET v = EXCLUDED.v, note = EXCLUDED.note", (k, rnd.randrange(100), _value(rnd, TEXTS[:4])))
                    conn.execute("INSERT INTO arrays VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE SET a = EXCLUDED.a",
                                 (rnd.randrange(20), [rnd.randrange(9), None], _value(rnd, TEXTS)))
            if tx % 17 == 16:
                conn.execute("DELETE FROM full_rows WHERE v < 30")
            if tx == transactions // 2:
                conn.execute("TRUNCATE arrays")
            conn.commit()


def _messages(bootstrap: str, topic: str, start: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-batches", "enable.partition.eof": True})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return []
        return [(m.key(), m.value(), tuple(m.headers() or ())) for m in read_to_end(c, [TopicPartition(topic, 0, start)])]
    finally:
        c.close()


_MADE_AT = re.compile(rb'("op":"[curdt]","ts_ms":)\d+(,"ts_us":)\d+(,"ts_ns":)\d+')


def _without_made_at(message: tuple) -> tuple:
    """An Avro envelope without its last three fields, ts_ms/ts_us/ts_ns (each a union branch byte, then a
    zig-zag varint: read from the end, a varint is its last byte and the bytes before it with the high bit set)."""
    key, value, headers = message
    if value is None:
        return message
    end = len(value)
    for _ in range(3):
        end -= 1  # the varint's last byte
        while value[end - 1] & 0x80:
            end -= 1
        end -= 1  # the union branch
        assert value[end] == 2, value[end:]
    return key, value[:end], headers


def _comparable(message: tuple) -> tuple:
    key, value, headers = message
    return key, None if value is None else _MADE_AT.sub(rb"\1T\2T\3T", value), headers


@pytest.mark.parametrize("value_converter", ["json", "avro"])
def test_batches_send_the_bytes_records_send(cdc_db, worker_props, unique, monkeypatch, value_converter):
    made, from_wire = [], []
    batch, wire = ChangeBatcher._batch, change_batches._wire_tuples
    monkeypatch.setattr(ChangeBatcher, "_batch", lambda self, run, before: made.append(len(run)) or batch(self, run, before))
    monkeypatch.setattr(change_batches, "_wire_tuples",  # counts the batches read from the messages' bytes
                        lambda *args: (lambda t: from_wire.append(t is not None) or t)(wire(*args)))
    for ddl in TABLES.values():
        cdc_db.sql(ddl)
    cdc_db.sql("ALTER TABLE full_rows REPLICA IDENTITY FULL")
    cdc_db.sql("ALTER TABLE kinds ALTER COLUMN big SET STORAGE EXTERNAL")  # out of line, uncompressed
    base = config(cdc_db, unique, **{"snapshot.mode": "no_data", "max.batch.size": "500"})
    if value_converter == "avro":  # registry-less: the schema embedded in every value (the framed layout)
        base["value.converter"] = "io.confluent.connect.avro.AvroConverter"
    records = CdcRuns(dict(base, name=f"records-{unique}", **{"slot.name": f"records_{unique}",
                                                              "copycat.batch.enabled": "false"}), worker_props)
    batches = CdcRuns(dict(base, name=f"batches-{unique}", **{"slot.name": f"batches_{unique}"}), worker_props)
    records.run()  # each makes its slot before any change: both read the same changes
    batches.run()
    _changes(cdc_db, random.Random(7), 40)

    first = records.run()
    assert made == [], "copycat.batch.enabled=false streams records"
    ends = {}
    topics = [f"pg{unique}.public.{t}" for t in TABLES]
    sent = {t: _messages(worker_props["bootstrap.servers"], t, 0) for t in topics}
    for t in topics:
        ends[t] = len(sent[t])
    second = batches.run()
    assert sum(made) > 300, made
    assert from_wire.count(True) > 5, "batches read their tuples from the messages' bytes at once"
    again = {t: _messages(worker_props["bootstrap.servers"], t, ends[t]) for t in topics}

    kinds = sent[topics[0]]
    assert len(kinds) > 1000 and any(v is None for _, v, _ in kinds), "the changes make long runs and tombstones"
    assert any(h for _, _, h in kinds), "some updates moved the key"
    assert any(b"__debezium_unavailable_value" in (v or b"") for _, v, _ in kinds), "unchanged TOASTed values"
    if value_converter == "avro":  # no ts_* text to mask: Avro writes them as varints; compare all but them
        sent = {t: [_without_made_at(m) for m in sent[t]] for t in topics}
        again = {t: [_without_made_at(m) for m in again[t]] for t in topics}
    for t in topics:
        assert sent[t], t
        assert [_comparable(m) for m in again[t]] == [_comparable(m) for m in sent[t]], t
    assert second["metrics"]["tables"] == first["metrics"]["tables"]
    assert batches.committed() == records.committed()


def test_a_key_column_moving_from_null_is_a_key_change_on_both_paths():
    """message.key.columns over a nullable column (REPLICA IDENTITY FULL): an update whose old key holds a
    NULL that the new key fills moves the key -- a delete (+ tombstone) and a create -- in batches too."""
    from airflow_copycat.connect.batch import SourceBatch
    from airflow_copycat.connectors.postgres_cdc.config import CdcConfig
    from airflow_copycat.connectors.postgres_cdc.envelope import EventBuilder, SourceInfo
    from airflow_copycat.connectors.postgres_cdc.model import Change, Column, Relation
    from airflow_copycat.connectors.postgres_cdc.stream import Item

    config = CdcConfig.parse({"database.hostname": "h", "database.dbname": "postgres", "database.user": "u",
                              "topic.prefix": "p", "message.key.columns": "public.t:a,b"})
    relation = Relation(1, "public", "t", (Column("a", 23, -1, "integer", key=True, optional=False),
                                           Column("b", 23, -1, "integer", key=True, optional=True),
                                           Column("v", 25, -1, "text", key=True, optional=True)), "f")
    builder = EventBuilder(config, clock=lambda: 1, version="x")
    items = [Item(Change(relation, "u", (str(i), None, "x"), (str(i), "5", "x"), lsn=100 + i, xid=7,
                         commit_ts_us=10), {"lsn": 100 + i}, None) for i in range(20)]

    def events(item, before=None):
        m = item.message
        return [SourceRecord(topic=e.topic, key_schema=e.key_schema, key=e.key, value_schema=e.value_schema,
                             value=e.value, headers=e.headers, source_partition={"server": "p"}, source_offset=item.offset)
                for e in builder.events(m, SourceInfo(commit_ts_us=10, tx_id=7, lsn=m.lsn, last_commit_lsn=None))]

    want = [r for item in items for r in events(item)]
    got = []
    for out in ChangeBatcher(builder, {"server": "p"}, lambda *a: None).items(items, events, {"lsn": 1}):
        got += out.to_records() if isinstance(out, SourceBatch) else [out]
    assert [(r.key, r.value is None, r.headers) for r in got] == [(r.key, r.value is None, r.headers) for r in want]
    assert len(want) == 60  # a delete, a tombstone and a create each


def test_a_commit_time_beyond_nanoseconds_in_int64_streams_as_records():
    """A commit after 2262-04-11 (a server clock far off): ``source.ts_ns`` does not fit a batch's int64 column,
    so the run goes as records, which carry the builder's value (no batch wraps it around)."""
    from airflow_copycat.connect.batch import SourceBatch
    from airflow_copycat.connectors.postgres_cdc.config import CdcConfig
    from airflow_copycat.connectors.postgres_cdc.envelope import EventBuilder, SourceInfo
    from airflow_copycat.connectors.postgres_cdc.model import Change, Column, Relation
    from airflow_copycat.connectors.postgres_cdc.stream import Item

    config = CdcConfig.parse({"database.hostname": "h", "database.dbname": "postgres", "database.user": "u",
                              "topic.prefix": "p"})
    relation = Relation(1, "public", "t", (Column("id", 20, -1, "bigint", key=True, optional=False),), "d")
    builder = EventBuilder(config, clock=lambda: 1, version="x")
    us = 9_300_000_000_000_000  # 2264
    items = [Item(Change(relation, "c", None, (str(i),), lsn=100 + i, xid=7, commit_ts_us=us), None, None, 99)
             for i in range(20)]

    def events(item, before=None):
        return [SourceRecord(topic=e.topic, key_schema=e.key_schema, key=e.key, value_schema=e.value_schema,
                             value=e.value, source_partition={"server": "p"}, source_offset=item.offset)
                for e in builder.events(item.message, SourceInfo(commit_ts_us=us, tx_id=7, lsn=item.message.lsn,
                                                                 last_commit_lsn=None))]

    out = ChangeBatcher(builder, {"server": "p"}, lambda *a: None).items(items, events, {"lsn": 1})
    assert not any(isinstance(o, SourceBatch) for o in out)
    assert [o.value.get("source").get("ts_ns") for o in out] == [us * 1000] * 20


def test_a_decimal_of_a_scale_arrow_cannot_read_back_streams_as_records(cdc_db, worker_props, unique):
    """numeric(5,40) (PostgreSQL 15+): Python cannot read a decimal128 of scale 40 back, so a batch of it could
    not fall back to its records (here: a transform on a batch holding tombstones); such tables go as records."""
    cdc_db.sql("CREATE TABLE t_ns (id int PRIMARY KEY, v numeric(5,40))")
    extra = {"transforms": "h", "transforms.h.type": "org.apache.kafka.connect.transforms.InsertHeader",
             "transforms.h.header": "hh", "transforms.h.value.literal": "x"}
    base = config(cdc_db, unique, **{"snapshot.mode": "no_data", **extra})
    records = CdcRuns(dict(base, name=f"records-{unique}", **{"slot.name": f"records_{unique}",
                                                              "copycat.batch.enabled": "false"}), worker_props)
    batches = CdcRuns(dict(base, name=f"batches-{unique}", **{"slot.name": f"batches_{unique}"}), worker_props)
    records.run()
    batches.run()
    with psycopg.connect(cdc_db.url) as conn:
        for i in range(40):
            conn.execute("INSERT INTO t_ns VALUES (%s, %s)", (i, "0." + "0" * 35 + f"{i:05d}"))
        conn.execute("DELETE FROM t_ns WHERE id < 20")
    topic = f"pg{unique}.public.t_ns"
    records.run()
    sent = _messages(worker_props["bootstrap.servers"], topic, 0)
    batches.run()
    again = _messages(worker_props["bootstrap.servers"], topic, len(sent))
    assert len(sent) == 80 and [_comparable(m) for m in again] == [_comparable(m) for m in sent]



def _wire_message(op: str, values) -> bytes:
    """A pgoutput Insert/Update/Delete of relation 1 with ``values`` (text, None: 'n', UNCHANGED_TOAST: 'u')."""
    import struct

    from airflow_copycat.connectors.postgres_cdc.model import UNCHANGED_TOAST

    out = {"c": b"I", "u": b"U", "d": b"D"}[op] + struct.pack(">I", 1) + (b"K" if op == "d" else b"N")
    out += struct.pack(">h", len(values))
    for v in values:
        out += b"n" if v is None else b"u" if v is UNCHANGED_TOAST else b"t" + struct.pack(">i", len(v.encode())) + v.encode()
    return out


WIRE_ROWS = st.lists(st.tuples(
    st.sampled_from("cud"), st.integers(1, 10**6),
    st.one_of(st.none(), st.sampled_from(["1.5", "-0", "NaN", "3.4028235e+38", "1e-45", "0.1", "Infinity"]),
              st.just("3.403e+38")),  # the last: FLT_MAX with extra_float_digits=-2, beyond float32
    st.one_of(st.none(), st.sampled_from(["2024-03-01 10:00:00.123456+02", "0044-03-15 12:00:00+00", "infinity",
                                         "1900-01-01 00:00:00+00:09:21", "2024-01-31 22:00:00.5-05:30"])),
    st.one_of(st.none(), st.text(max_size=8)), st.integers(-5, 5)), min_size=16, max_size=60)


@settings(max_examples=60, deadline=None)
@given(WIRE_ROWS)
def test_a_batch_read_from_the_wire_holds_the_values_its_records_hold(rows):
    """Changes decoded as WireChanges (their tuples read from the bytes at once, columns cast at once): the
    batch's records, value for value (Connect Structs, not only the bytes a converter would write -- an
    encoder may repair a null), equal the events the builder makes of the same changes. Deletes carry the
    key only, so the required columns' NULLs there take their missing values (a default, a zero). A real
    beyond float32 (which the converter refuses) sends the run as records."""
    from airflow_copycat.connect.batch import SourceBatch
    from airflow_copycat.connectors.postgres_cdc.config import CdcConfig
    from airflow_copycat.connectors.postgres_cdc.envelope import EventBuilder, SourceInfo
    from airflow_copycat.connectors.postgres_cdc.model import Column
    from airflow_copycat.connectors.postgres_cdc.pgoutput import PgOutputDecoder, WireChange, with_columns
    from airflow_copycat.connectors.postgres_cdc.stream import Item

    columns = (Column("id", 20, -1, "bigint", key=True, optional=False),
               Column("n", 23, -1, "integer", optional=False, default="7"),
               Column("r", 700, -1, "real", optional=False),
               Column("at", 1184, -1, "timestamp with time zone", optional=False),
               Column("note", 25, -1, "text"), Column("q", 23, -1, "integer", optional=False))
    decoder = PgOutputDecoder(describe=lambda rel: with_columns(rel, columns))
    decoder.decode(b"R\x00\x00\x00\x01public\0t\0d\x00\x06" + b"".join(
        bytes([1 if c.key else 0]) + c.name.encode() + b"\0" + c.type_oid.to_bytes(4, "big") + b"\xff\xff\xff\xff"
        for c in columns), 1)
    config = CdcConfig.parse({"database.hostname": "h", "database.dbname": "postgres", "database.user": "u",
                              "topic.prefix": "p"})
    builder = EventBuilder(config, clock=lambda: 1, version="x")
    items = []
    for i, (op, key, r, at, note, q) in enumerate(rows):
        values = [str(key), None, None, None, None, None] if op == "d" else \
            [str(key), "3", r or "0", at or "2024-01-01 00:00:00+00", note, str(q)]
        decoder.xid, decoder.commit_ts_us = 700 + i // 4, 1_700_000_000_000_000 + 1001 * (i // 4)  # a Begin's
        change = decoder.decode(_wire_message(op, values), 100 + i)
        assert type(change) is WireChange
        items.append(Item(change, {"lsn": 100 + i}, None if i < 4 else 90 + i // 4))

    def events(item, before=None):
        m = item.message
        made = builder.events(m, SourceInfo(commit_ts_us=m.commit_ts_us, tx_id=m.xid, lsn=m.lsn,
                                            last_commit_lsn=item.last_commit_lsn))
        # only a change's last record carries its offset, the others the offset before it (F7)
        return [SourceRecord(topic=e.topic, key_schema=e.key_schema, key=e.key, value_schema=e.value_schema,
                             value=e.value, headers=e.headers, source_partition={"server": "p"},
                             source_offset=item.offset if i == len(made) - 1 else before)
                for i, e in enumerate(made)]

    want, before = [], {"lsn": 1}
    for item in items:
        want += events(item, before)
        before = item.offset
    got, batches = [], 0
    for out in ChangeBatcher(builder, {"server": "p"}, lambda *a: None).items(items, events, {"lsn": 1}):
        batches += isinstance(out, SourceBatch)
        got += out.to_records() if isinstance(out, SourceBatch) else [out]
    beyond = any(op != "d" and r == "3.403e+38" for op, _, r, *_ in rows)
    assert batches == (0 if beyond else 1), "one run of one table's plain changes: one batch (records: a real " \
        "beyond float32, which no batch column holds)"

    def comparable(record):
        value = record.value
        if value is not None:  # when the event was made: read once per batch
            value = {f.name: value.get(f.name) for f in value.schema.fields if not f.name.startswith("ts_")}
        return record.key, repr(value), record.source_offset

    assert [comparable(r) for r in got] == [comparable(r) for r in want]
