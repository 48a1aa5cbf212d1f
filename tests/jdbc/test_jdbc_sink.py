"""JDBC sink against real SQLite, PostgreSQL and MariaDB: insert modes, key modes, deletes, schema evolution,
types and time zones, bad records, exactly-once offsets in the target database.

The task is driven as the sink runtime drives it (start, open, take the rewinds, put, pre_commit) with records
built here; the runs through Kafka are in test_jdbc_sink_kafka.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest
import sqlalchemy as sa

from airflow_copycat.connect import (ConfigException, ConnectException, Date, Decimal, Schema, SchemaBuilder,
                                     SinkRecord, SinkTaskContext, Struct, Time, Timestamp)
from airflow_copycat.connectors.jdbc_sink import JdbcSinkConnector, JdbcSinkTask
from airflow_copycat.runtime import plugins

KEY = SchemaBuilder.struct().name("Key").field("id", Schema.INT64).build()
V1 = (SchemaBuilder.struct().name("Value").field("id", Schema.INT64).field("name", Schema.STRING)
      .field("qty", Schema.OPTIONAL_INT32).build())
V2 = (SchemaBuilder.struct().name("Value").field("id", Schema.INT64).field("name", Schema.STRING)
      .field("qty", Schema.OPTIONAL_INT32).field("note", Schema.OPTIONAL_STRING).build())


class Sink:
    """One task over one topic-partition, with the offsets it committed and the rows it wrote."""

    def __init__(self, db, table: str, **over):
        self.db, self.table = db, table
        self.raw = {"name": over.pop("name", f"sink-{table}"), "topics": table, "connection.url": db.url, **over}
        self.tp = (table, 0)
        self.task = None

    def start(self):
        connector = JdbcSinkConnector()
        connector.start(JdbcSinkConnector.parse_config(dict(self.raw)))
        cfg = connector.task_configs(1)[0]
        self.task = JdbcSinkTask()
        self.context = SinkTaskContext(cfg, [self.tp])
        self.task.initialize(self.context)
        self.task.start(cfg)
        self.task.open([self.tp])
        return self.context.take_rewinds()

    def put(self, records):
        self.task.put(records)
        return self.task.pre_commit({self.tp: records[-1].kafka_offset + 1} if records else {}, final=True)

    def stop(self):
        if self.task is not None:
            self.task.stop()

    def rows(self, order="id"):
        with self.db.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(f'SELECT * FROM "{self.table}" ORDER BY {order}'
                                                           if self.db.kind != "mariadb" else
                                                           f"SELECT * FROM `{self.table}` ORDER BY {order}"))]

    def drop(self):
        with self.db.engine.begin() as conn:
            q = "`" if self.db.kind == "mariadb" else '"'
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {q}{self.table}{q}"))
            if sa.inspect(conn).has_table("copycat_sink_offsets"):
                conn.execute(sa.text("DELETE FROM copycat_sink_offsets WHERE connector = :c"), {"c": self.raw["name"]})


@pytest.fixture
def sink(db):
    made = []

    def make(**over):
        s = Sink(db, over.pop("table", f"t_{uuid.uuid4().hex[:8]}"), **over)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()
        s.drop()


def rec(offset, value=None, *, key=None, schema=V1, key_schema=KEY, topic=None, sink=None, tombstone=False):
    topic = topic or sink.table
    if tombstone:
        return SinkRecord(topic=topic, kafka_partition=0, key_schema=key_schema, key=key, value_schema=None,
                          value=None, kafka_offset=offset)
    return SinkRecord(topic=topic, kafka_partition=0, key_schema=key_schema, key=key, value_schema=schema,
                      value=Struct(schema, value), kafka_offset=offset)


def k(i):
    return Struct(KEY, {"id": i})


def test_class_names_resolve_to_the_sink():
    for name in ("JdbcSink", "io.confluent.connect.jdbc.JdbcSinkConnector", "io.debezium.connector.jdbc.JdbcSinkConnector"):
        assert plugins.resolve_connector(name) is JdbcSinkConnector


def test_bad_config_names_every_problem():
    with pytest.raises(ConfigException) as e:
        JdbcSinkConnector.parse_config({"insert.mode": "merge", "pk.mode": "none", "delete.enabled": "true",
                                        "batch.size": "0", "db.timezone": "Mars/Olympus"})
    text = str(e.value)
    for key in ("insert.mode", "delete.enabled", "batch.size", "db.timezone", "connection.url", "topics"):
        assert key in text, key
    with pytest.raises(ConfigException) as e:
        JdbcSinkConnector.parse_config({"connection.url": "sqlite:///x.db", "topics": "t", "insert.mode": "upsert"})
    assert "pk.mode" in str(e.value) and "primary key" in str(e.value)


def test_debezium_keys_mean_the_confluent_ones(db, sink):
    s = sink(**{"insert.mode": "upsert", "primary.key.mode": "record_key", "primary.key.fields": "id",
                "schema.evolution": "basic", "delete.enabled": "true"})
    s.start()
    s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s),
           rec(1, {"id": 1, "name": "b", "qty": 2}, key=k(1), sink=s)])
    assert s.rows() == [(1, "b", 2)]
    with pytest.raises(ConfigException) as e:
        JdbcSinkConnector.parse_config({"connection.url": db.url, "topics": "t", "pk.mode": "kafka",
                                        "primary.key.mode": "record_key"})
    assert "primary.key.mode" in str(e.value)


def test_insert_auto_create_and_resume_from_the_database_offsets(db, sink):
    s = sink(**{"auto.create": "true"})
    assert s.start() == {}
    s.put([rec(i, {"id": i, "name": f"n{i}", "qty": None if i % 2 else i}, key=k(i), sink=s) for i in range(5)])
    assert s.rows() == [(i, f"n{i}", None if i % 2 else i) for i in range(5)]
    s.stop()
    again = sink(table=s.table, name=s.raw["name"], **{"auto.create": "true"})
    assert again.start() == {s.tp: 5}  # the next run starts after the last written record
    again.put([rec(i, {"id": i, "name": f"n{i}", "qty": i}, key=k(i), sink=again) for i in range(3, 7)])
    assert [r[0] for r in s.rows()] == [0, 1, 2, 3, 4, 5, 6]  # 3 and 4 given again were not written twice


def test_upsert_update_and_delete_by_record_key(db, sink):
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true", "delete.enabled": "true"})
    s.start()
    s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s),
           rec(1, {"id": 2, "name": "b", "qty": 2}, key=k(2), sink=s),
           rec(2, {"id": 1, "name": "a2", "qty": 10}, key=k(1), sink=s),
           rec(3, key=k(2), sink=s, tombstone=True),
           rec(4, {"id": 3, "name": "c", "qty": 3}, key=k(3), sink=s),
           rec(5, key=k(3), sink=s, tombstone=True),
           rec(6, {"id": 3, "name": "c2", "qty": 4}, key=k(3), sink=s)])
    assert s.rows() == [(1, "a2", 10), (3, "c2", 4)]
    counts = s.task.metrics["tables"][s.table]
    assert counts.get("deleted", 0) >= 1
    u = sink(table=s.table, name=s.raw["name"] + "-u", **{"insert.mode": "update", "pk.mode": "record_key"})
    u.start()
    u.put([rec(0, {"id": 1, "name": "upd", "qty": 0}, key=k(1), topic=s.table),
           rec(1, {"id": 9, "name": "nobody", "qty": 0}, key=k(9), topic=s.table)])
    assert s.rows() == [(1, "upd", 0), (3, "c2", 4)]  # update mode never inserts


def test_a_null_in_an_optional_field_with_a_default_is_written_as_null(db, sink):
    # Given values whose schema carries column defaults (as Debezium's change events do): an optional
    # field with a default set to null, and a required field with a default that was never put
    with_defaults = (SchemaBuilder.struct().name("Value").field("id", Schema.INT64)
                     .field("status", SchemaBuilder.string().default_value("NEW").build())
                     .field("note", SchemaBuilder.string().optional().default_value("none").build()).build())
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true"})
    s.start()

    # When they are written
    s.put([rec(0, {"id": 1, "status": "SHIPPED", "note": None}, key=k(1), schema=with_defaults, sink=s),
           rec(1, {"id": 2, "note": "gift"}, key=k(2), schema=with_defaults, sink=s)])

    # Then the null stays NULL (a replica of a row with NULL there must hold NULL), and the required
    # field that was never put gets its default, as Kafka's Struct.get gives it
    assert s.rows() == [(1, "SHIPPED", None), (2, "NEW", "gift")]


def test_tombstones_are_skipped_without_delete_enabled(db, sink):
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true"})
    s.start()
    s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s), rec(1, key=k(1), sink=s, tombstone=True)])
    assert s.rows() == [(1, "a", 1)]
    assert s.task.metrics["tombstones_skipped"] == 1


def test_pk_modes_kafka_and_record_value_and_a_primitive_key(db, sink):
    s = sink(**{"pk.mode": "kafka", "auto.create": "true"})
    s.start()
    s.put([rec(7, {"id": 1, "name": "a", "qty": 1}, sink=s)])
    assert s.rows(order="__connect_offset") == [(s.table, 0, 7, 1, "a", 1)]
    v = sink(**{"pk.mode": "record_value", "pk.fields": "name", "insert.mode": "upsert", "auto.create": "true"})
    v.start()
    v.put([rec(0, {"id": 1, "name": "x", "qty": 1}, sink=v), rec(1, {"id": 2, "name": "x", "qty": 2}, sink=v)])
    assert v.rows(order="name") == [("x", 2, 2)]  # the key column first, then the rest
    p = sink(**{"pk.mode": "record_key", "pk.fields": "k", "insert.mode": "upsert", "auto.create": "true"})
    p.start()
    p.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key="one", key_schema=Schema.STRING, sink=p),
           rec(1, {"id": 2, "name": "b", "qty": 2}, key="one", key_schema=Schema.STRING, sink=p)])
    assert p.rows(order="k") == [("one", 2, "b", 2)]


def test_auto_evolve_adds_optional_columns_and_refuses_required_ones(db, sink):
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true", "auto.evolve": "true"})
    s.start()
    s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s)])
    s.put([rec(1, {"id": 2, "name": "b", "qty": 2, "note": "new"}, key=k(2), schema=V2, sink=s)])
    assert s.rows() == [(1, "a", 1, None), (2, "b", 2, "new")]
    required = (SchemaBuilder.struct().name("Value").field("id", Schema.INT64).field("name", Schema.STRING)
                .field("qty", Schema.OPTIONAL_INT32).field("note", Schema.OPTIONAL_STRING)
                .field("must", Schema.INT32).build())
    with pytest.raises(ConnectException) as e:
        s.put([rec(2, {"id": 3, "name": "c", "qty": 3, "note": None, "must": 1}, key=k(3), schema=required, sink=s)])
    text = str(e.value)
    assert f"topic {s.table} partition 0 offset 2" in text and s.table in text and "must" in text
    assert [r[0] for r in s.rows()] == [1, 2]  # nothing of the refused put was written


def test_missing_table_or_column_without_auto_flags_fails_naming_it(db, sink):
    s = sink()
    s.start()
    with pytest.raises(ConnectException) as e:
        s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, sink=s)])
    assert "does not exist" in str(e.value) and "auto.create" in str(e.value)


def test_types_decimals_and_time_zones(db, sink):
    schema = (SchemaBuilder.struct().name("T").field("id", Schema.INT64)
              .field("price", Decimal.builder(3).build())
              .field("day", Date.builder().build())
              .field("at", Time.builder().build())
              .field("ts", Timestamp.builder().build())
              .field("ok", Schema.BOOLEAN).field("f", Schema.FLOAT64).field("raw", Schema.OPTIONAL_BYTES)
              .field("tags", SchemaBuilder.array(Schema.STRING).optional().build())
              .field("txt", Schema.STRING).build())
    s = sink(**{"auto.create": "true", "db.timezone": "Europe/Berlin", "pk.mode": "record_value", "pk.fields": "id"})
    s.start()
    ts = dt.datetime(2026, 7, 1, 10, 0, 0, 123000, tzinfo=dt.timezone.utc)
    s.put([rec(0, {"id": 1, "price": decimal.Decimal("12345678901234.567"), "day": dt.date(2026, 2, 28),
                   "at": dt.time(13, 14, 15, 500000), "ts": ts, "ok": True, "f": 0.1, "raw": b"\x00\xff",
                   "tags": ["a", "b"], "txt": "naïve — ünïcode"}, schema=schema, sink=s)])
    with db.engine.connect() as conn:
        row = conn.execute(sa.text(f'SELECT * FROM {"`" if db.kind == "mariadb" else chr(34)}{s.table}'
                                   f'{"`" if db.kind == "mariadb" else chr(34)}')).one()
    m = row._mapping
    assert decimal.Decimal(str(m["price"])) == decimal.Decimal("12345678901234.567")
    assert str(m["day"])[:10] == "2026-02-28"
    local = m["ts"] if isinstance(m["ts"], dt.datetime) else dt.datetime.fromisoformat(str(m["ts"]))
    assert local.replace(tzinfo=None) == dt.datetime(2026, 7, 1, 12, 0, 0, 123000)  # Berlin is UTC+2 in July
    assert bool(m["ok"]) is True and float(m["f"]) == 0.1 and bytes(m["raw"]) == b"\x00\xff"
    tags = m["tags"]
    assert (tags if isinstance(tags, list) else __import__("json").loads(tags)) == ["a", "b"]
    assert m["txt"] == "naïve — ünïcode"


class Reporter(SinkTaskContext):
    """A context with errors.tolerance=all, as the runtime's: keeps what put reported."""

    def __init__(self, *a):
        super().__init__(*a)
        self.reported = []

    def report_error(self, record, error):
        self.reported.append((record.kafka_offset, str(error)))


def test_refused_rows_are_found_by_splitting_and_the_rest_is_written(db, sink):
    s = sink(**{"auto.create": "true", "pk.mode": "record_value", "pk.fields": "id", "batch.size": "64"})
    s.start()
    s.put([rec(0, {"id": 0, "name": "first", "qty": 0}, sink=s)])
    s.task.context = Reporter(s.task.context.config, [s.tp])
    batch = [rec(i, {"id": (0 if i in (17, 90) else i), "name": f"n{i}", "qty": i}, sink=s) for i in range(1, 101)]
    s.put(batch)
    assert [o for o, _ in s.task.context.reported] == [17, 90]  # duplicates of id 0: the database refused them
    assert [r[0] for r in s.rows()] == [i for i in range(101) if i not in (17, 90)]
    again = sink(table=s.table, name=s.raw["name"], **{"auto.create": "true", "pk.mode": "record_value",
                                                        "pk.fields": "id"})
    assert again.start() == {s.tp: 101}  # the refused records count as handled


def test_without_tolerance_a_refused_row_fails_naming_it_and_commits_nothing(db, sink):
    s = sink(**{"auto.create": "true", "pk.mode": "record_value", "pk.fields": "id"})
    s.start()
    s.put([rec(0, {"id": 0, "name": "first", "qty": 0}, sink=s)])
    with pytest.raises(ConnectException) as e:
        s.put([rec(i, {"id": 0 if i == 5 else i, "name": "x", "qty": i}, sink=s) for i in range(1, 9)])
    assert f"topic {s.table} partition 0 offset 5" in str(e.value)
    assert [r[0] for r in s.rows()] == [0]
    again = sink(table=s.table, name=s.raw["name"], **{"auto.create": "true", "pk.mode": "record_value",
                                                        "pk.fields": "id"})
    assert again.start() == {s.tp: 1}


def test_schemaless_values_are_refused_with_the_reason(db, sink):
    s = sink(**{"auto.create": "true"})
    s.start()
    with pytest.raises(ConnectException) as e:
        s.put([SinkRecord(topic=s.table, kafka_partition=0, value={"id": 1}, kafka_offset=0)])
    assert "schemas.enable=true" in str(e.value)


def test_a_second_attempt_that_wrote_first_fences_the_other(db, sink):
    a = sink(**{"auto.create": "true"})
    a.start()
    b = sink(table=a.table, name=a.raw["name"], **{"auto.create": "true"})
    b.start()
    b.put([rec(0, {"id": 1, "name": "b", "qty": 1}, sink=b)])
    with pytest.raises(ConnectException) as e:
        a.put([rec(0, {"id": 1, "name": "a", "qty": 1}, sink=a)])
    assert "another attempt" in str(e.value)
    assert a.rows() == [(1, "b", 1)]


def test_upsert_needs_a_primary_key_on_an_existing_table(db, sink):
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key"})
    with db.engine.begin() as conn:
        q = "`" if db.kind == "mariadb" else '"'
        conn.execute(sa.text(f"CREATE TABLE {q}{s.table}{q} (id BIGINT, name TEXT, qty INTEGER)"))
    s.start()
    with pytest.raises(ConnectException) as e:
        s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s)])
    assert "no primary key" in str(e.value) and s.table in str(e.value)


def test_a_narrower_column_fails_before_writing(db, sink):
    if db.kind == "sqlite":
        pytest.skip("SQLite columns take any value: there is no narrower column type")
    s = sink()
    with db.engine.begin() as conn:
        q = "`" if db.kind == "mariadb" else '"'
        conn.execute(sa.text(f"CREATE TABLE {q}{s.table}{q} (id SMALLINT, name TEXT, qty INTEGER)"))
    s.start()
    with pytest.raises(ConnectException) as e:
        s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, sink=s)])
    assert "column id" in str(e.value) and "int64" in str(e.value)


def test_key_timestamps_are_written_in_db_timezone_like_value_timestamps(db, sink):
    key_schema = SchemaBuilder.struct().name("K").field("at", Timestamp.builder().build()).build()
    value_schema = SchemaBuilder.struct().name("V").field("at", Timestamp.builder().build()).field(
        "n", Schema.INT32).build()
    s = sink(**{"auto.create": "true", "pk.mode": "record_key", "insert.mode": "upsert",
                "db.timezone": "Europe/Berlin"})
    s.start()
    at = dt.datetime(2026, 1, 15, 12, 0, tzinfo=dt.timezone.utc)
    s.put([rec(0, {"at": at, "n": 1}, key=Struct(key_schema, {"at": at}), key_schema=key_schema,
               schema=value_schema, sink=s)])
    (row,) = s.rows(order="n")
    local = row[0] if isinstance(row[0], dt.datetime) else dt.datetime.fromisoformat(str(row[0]))
    assert local.replace(tzinfo=None) == dt.datetime(2026, 1, 15, 13, 0)  # Berlin is UTC+1 in January


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_timestamps_into_columns_that_hold_instants_keep_their_instant(db, sink, monkeypatch):
    """Given an existing table with a column that holds instants (PostgreSQL ``timestamptz``, MariaDB
    ``TIMESTAMP``) and one of local times, ``db.timezone`` Europe/Berlin and PostgreSQL sessions whose
    own zone is America/New_York, when records with instants in the repeated hour of the change to
    winter time and elsewhere are upserted, then updated, then the instant column holds each instant
    and the other Berlin's local time (before: the sink bound Berlin's local time, which the server read
    in its session's zone: shifted by hours)."""
    monkeypatch.setenv("PGOPTIONS", "-c TimeZone=America/New_York")  # PostgreSQL's sessions, the sink's too
    kind = {"postgresql": ("TIMESTAMPTZ", "TIMESTAMP"), "mariadb": ("TIMESTAMP(3) NULL", "DATETIME(3)")}[db.kind]
    value_schema = (SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("at", Timestamp.builder().build())
                    .field("local_at", Timestamp.builder().build()).build())
    utc = dt.timezone.utc
    instants = [dt.datetime(2024, 10, 27, 0, 30, tzinfo=utc), dt.datetime(2024, 10, 27, 1, 30, tzinfo=utc),
                dt.datetime(2024, 7, 1, 10, 0, 0, 123000, tzinfo=utc), dt.datetime(2024, 1, 15, 23, 59, 59, tzinfo=utc)]
    table = f"t_{uuid.uuid4().hex[:8]}"
    q = "`" if db.kind == "mariadb" else '"'
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {q}{table}{q} (id BIGINT PRIMARY KEY, at {kind[0]}, local_at {kind[1]})"))
    epoch = "UNIX_TIMESTAMP(at)" if db.kind == "mariadb" else "EXTRACT(EPOCH FROM at)"
    for n, mode in enumerate(["upsert", "update"]):
        s = sink(table=table, name=f"sink-{table}-{mode}", **{"pk.mode": "record_key", "insert.mode": mode,
                                                               "db.timezone": "Europe/Berlin"})
        s.start()
        written = [t + dt.timedelta(days=7 * n) if i > 1 else instants[1 - i] if n else t
                   for i, t in enumerate(instants)]  # the update swaps the two of the repeated hour
        s.put([rec(i, {"id": i, "at": t, "local_at": t}, key=k(i), schema=value_schema, sink=s)
               for i, t in enumerate(written)])
        s.stop()
        with db.engine.connect() as conn:
            got = conn.execute(sa.text(f"SELECT id, {epoch}, local_at FROM {q}{table}{q} ORDER BY id")).all()
        assert [float(e) for _, e, _ in got] == [t.timestamp() for t in written], mode
        berlin = __import__("zoneinfo").ZoneInfo("Europe/Berlin")
        assert [r[2] for r in got] == [t.astimezone(berlin).replace(tzinfo=None) for t in written], mode


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_timestamp_keys_of_the_repeated_hour_are_two_rows_in_a_column_of_instants(db, sink):
    """Given a primary key column that holds instants and ``db.timezone`` Europe/Berlin, when the two
    instants of the repeated hour of the change to winter time (one local time, 02:30) are upserted in
    one batch, then upserted again, then deleted by tombstones, then they are two rows throughout, and
    none is left (before: the batch kept one of them, as one local time)."""
    key_schema = SchemaBuilder.struct().name("K").field("at", Timestamp.builder().build()).build()
    value_schema = (SchemaBuilder.struct().name("V").field("at", Timestamp.builder().build())
                    .field("n", Schema.INT32).build())
    table = f"t_{uuid.uuid4().hex[:8]}"
    q, kind = ("`", "TIMESTAMP(3) NOT NULL") if db.kind == "mariadb" else ('"', "TIMESTAMPTZ")
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {q}{table}{q} (at {kind} PRIMARY KEY, n INT)"))
    s = sink(table=table, **{"pk.mode": "record_key", "insert.mode": "upsert", "delete.enabled": "true",
                             "db.timezone": "Europe/Berlin"})
    s.start()
    utc = dt.timezone.utc
    both = [dt.datetime(2024, 10, 27, 0, 30, tzinfo=utc), dt.datetime(2024, 10, 27, 1, 30, tzinfo=utc)]
    epoch = "UNIX_TIMESTAMP(at)" if db.kind == "mariadb" else "EXTRACT(EPOCH FROM at)"

    def rows():
        with db.engine.connect() as conn:
            return [(float(e), n) for e, n in conn.execute(sa.text(f"SELECT {epoch}, n FROM {q}{table}{q} ORDER BY 1"))]

    def key(t):
        return Struct(key_schema, {"at": t})

    for n in (1, 3):
        s.put([rec(n + i, {"at": t, "n": n + i}, key=key(t), key_schema=key_schema, schema=value_schema, sink=s)
               for i, t in enumerate(both)])
        assert rows() == [(t.timestamp(), n + i) for i, t in enumerate(both)]
    s.put([rec(5 + i, key=key(t), key_schema=key_schema, sink=s, tombstone=True) for i, t in enumerate(both)])
    assert rows() == []


def test_two_sinks_upserting_the_same_keys_at_once_both_finish_and_last_writes_win(db, sink):
    import random
    import threading

    opts = {"insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true", "retry.backoff.ms": "50",
            "batch.size": "100"}
    first = sink(**opts)
    first.start()
    first.put([rec(0, {"id": 0, "name": "seed", "qty": 0}, key=k(0), sink=first)])  # the table exists
    writers = [sink(table=first.table, name=f"{first.raw['name']}-{w}", **opts) for w in (1, 2)]
    last: list[dict[int, str]] = [{}, {}]
    errors = []

    def write(w: int) -> None:
        try:
            s, rnd = writers[w], random.Random(w)
            s.start()
            for put in range(8):
                records = []
                for i in range(150):
                    key = rnd.randrange(200)
                    name = f"w{w}-{put}-{i}"
                    records.append(rec(put * 150 + i, {"id": key, "name": name, "qty": w}, key=k(key),
                                       topic=first.table))
                    last[w][key] = name
                s.put(records)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    rows = {r[0]: r[1] for r in first.rows()}
    keys = set(last[0]) | set(last[1]) | {0}
    assert set(rows) == keys
    for key in keys - {0}:
        assert rows[key] in {last[0].get(key), last[1].get(key)}, key


def test_tasks_starting_at_once_on_a_fresh_database_all_start_and_write(db, sink):
    """Every task of a new connector makes the offsets table (and auto.create the target table) when it
    is missing: tasks starting at the same moment must not fail each other (PostgreSQL's CREATE TABLE IF
    NOT EXISTS is not safe against a concurrent CREATE of the same name)."""
    import threading

    offsets = f"offsets_{uuid.uuid4().hex[:8]}"
    opts = {"insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true", "copycat.offsets.table": offsets}
    first = sink(**opts)
    sinks = [first] + [sink(table=first.table, name=f"{first.raw['name']}-{w}", **opts) for w in range(1, 6)]
    barrier, errors = threading.Barrier(len(sinks)), []

    def run(w: int) -> None:
        try:
            barrier.wait(30)
            sinks[w].start()
            sinks[w].put([rec(0, {"id": w, "name": f"w{w}", "qty": w}, key=k(w), topic=first.table)])
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=run, args=(w,)) for w in range(len(sinks))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert first.rows() == [(w, f"w{w}", w) for w in range(len(sinks))]
        with db.engine.connect() as conn:
            q = "`" if db.kind == "mariadb" else '"'
            assert conn.execute(sa.text(f"SELECT COUNT(*) FROM {q}{offsets}{q}")).scalar() == len(sinks)
    finally:
        with db.engine.begin() as conn:
            q = "`" if db.kind == "mariadb" else '"'
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {q}{offsets}{q}"))


def test_refusals_of_the_statement_fail_at_once_and_failures_that_may_pass_are_retried(postgres_url):
    """Real PostgreSQL errors, classified by the writer: a row's values are the record's; a lock not
    available or a statement timeout may pass (retried); ON CONFLICT on a deferrable key (a driver's
    OperationalError, SQLSTATE 55000) is refused whatever the retries: the run fails at once."""
    from airflow_copycat.connectors.jdbc_sink.writer import error_kind

    engine = sa.create_engine(postgres_url)
    table = f"t_kinds_{uuid.uuid4().hex[:8]}"
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE TABLE "{table}" (id BIGINT PRIMARY KEY DEFERRABLE, n TEXT)')
            conn.exec_driver_sql(f'INSERT INTO "{table}" VALUES (1, \'a\')')

        def kind(*statements: str) -> str:
            with engine.connect() as conn:
                with pytest.raises(sa.exc.DBAPIError) as e:
                    for sql in statements:
                        conn.exec_driver_sql(sql)
                conn.rollback()
            return error_kind(e.value)

        assert kind(f'INSERT INTO "{table}" VALUES (1, \'b\') ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n') == "fatal"
        assert kind("SET statement_timeout = 10", "SELECT pg_sleep(1)") == "retry"
        assert kind(f'INSERT INTO "{table}" VALUES (1, \'b\')', "COMMIT") == "record"
        with engine.connect() as holder:
            holder.exec_driver_sql(f'SELECT * FROM "{table}" FOR UPDATE')
            assert kind("SET lock_timeout = 10", f'SELECT * FROM "{table}" FOR UPDATE') == "retry"
            holder.rollback()
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{table}"')
        engine.dispose()


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
@pytest.mark.parametrize("column", ["TEXT", "copycat_test_mood"])
def test_text_and_enum_keys_upsert_locked_in_one_order(db, sink, column):
    """Given a text key (locked in byte order, COLLATE "C", as the column path's copies sort it) and an
    enum key (which takes no collation), when records upsert and update the same keys, then the rows
    are written."""
    key_schema = SchemaBuilder.struct().name("CodeKey").field("code", Schema.STRING).build()
    value_schema = (SchemaBuilder.struct().name("CodeValue").field("code", Schema.STRING)
                    .field("n", Schema.INT32).build())
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key"})
    with db.engine.begin() as conn:
        conn.exec_driver_sql("DO $$ BEGIN CREATE TYPE copycat_test_mood AS ENUM ('a', 'B', 'b'); "
                             "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        conn.exec_driver_sql(f'CREATE TABLE "{s.table}" (code {column} PRIMARY KEY, n INTEGER NOT NULL)')
    s.start()

    def put(first: int, n: int) -> None:
        s.put([rec(first + i, {"code": code, "n": n}, key=Struct(key_schema, {"code": code}), sink=s,
                   schema=value_schema, key_schema=key_schema) for i, code in enumerate(["b", "B", "a"])])

    put(0, 1)
    put(3, 2)
    assert sorted(s.rows(order="n")) == [("B", 2), ("a", 2), ("b", 2)]



@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_password_in_the_urls_query_is_hidden_in_logs_retries_and_errors(db, sink, caplog):
    """Given a SQLAlchemy URL with ``?password=`` (psycopg takes it from the query; trust auth ignores
    it), when the sink starts and a write fails until the retries run out (the offsets row is locked by
    another session, ``lock_timeout`` short), then its INFO line, its retry warnings and its error show
    ``[hidden]`` where the password was (before: only a ``user:password@`` password was hidden)."""
    import logging

    secret = f"Pw{uuid.uuid4().hex}"
    url = sa.engine.make_url(db.url).update_query_dict({"password": secret, "options": "-c lock_timeout=200"})
    s = sink(**{"connection.url": url.render_as_string(hide_password=False), "auto.create": "true",
                "max.retries": "1", "retry.backoff.ms": "10", "copycat.batch.enabled": "false"})
    caplog.set_level(logging.INFO)
    s.start()
    s.put([rec(0, {"id": 0, "name": "a", "qty": 0}, sink=s)])
    with db.engine.connect() as holder:
        holder.execute(sa.text("SELECT * FROM copycat_sink_offsets WHERE connector = :c FOR UPDATE"),
                       {"c": s.raw["name"]})
        with pytest.raises(ConnectException) as e:
            s.put([rec(1, {"id": 1, "name": "b", "qty": 1}, sink=s)])
        holder.rollback()
    assert "failed 2 time(s)" in str(e.value) and "password=[hidden]" in str(e.value)
    assert "JDBC sink task writing to" in caplog.text and "retry 1 of 1" in caplog.text
    assert secret not in caplog.text and secret not in str(e.value)


def test_debezium_field_lists_are_regexes_of_topic_and_field_and_the_whitelist_plain_names(db, sink):
    """Given Debezium's field.include.list / field.exclude.list (regexes matching the whole of
    ``<topic>:<field>``, or of the field name alone) and Confluent's fields.whitelist (plain names),
    when a record with fields id, email, name, qty is upserted, then each writes the fields it selects
    (before: field.include.list was taken as plain names, so ``<topic>:email`` dropped every value
    column without a word)."""
    value = (SchemaBuilder.struct().name("Contact").field("id", Schema.INT64).field("email", Schema.STRING)
             .field("name", Schema.STRING).field("qty", Schema.OPTIONAL_INT32).build())
    table = f"t_{uuid.uuid4().hex[:8]}"
    cases = [({"field.include.list": f"{table}:id,{table}:email"}, (1, "a@x")),
             ({"field.include.list": "t_[0-9a-f]+:(email|qty)"}, (1, "a@x", 3)),
             ({"field.include.list": "e.*"}, (1, "a@x")),
             ({"field.include.list": f"other{table}:email"}, (1,)),
             ({"field.exclude.list": f"{table}:na.*"}, (1, "a@x", 3)),
             ({"fields.whitelist": "email"}, (1, "a@x")),
             ({"fields.whitelist": f"{table}:email"}, (1,))]
    for n, (selection, expected) in enumerate(cases):
        s = sink(table=f"{table}", name=f"sink-{table}-{n}", **{
            "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "schema.evolution": "basic",
            "insert.mode": "upsert", "primary.key.mode": "record_key", **selection})
        s.start()
        s.put([rec(0, {"id": 1, "email": "a@x", "name": "alice", "qty": 3}, key=k(1), schema=value, sink=s)])
        assert s.rows() == [expected], selection
        s.stop()
        s.drop()
    with pytest.raises(ConfigException) as e:
        JdbcSinkConnector.parse_config({"connection.url": db.url, "topics": "t", "fields.whitelist": "a",
                                        "field.include.list": "t:a"})
    assert "field.include.list" in str(e.value) and "give one" in str(e.value)
    with pytest.raises(ConfigException) as e:
        JdbcSinkConnector.parse_config({"connection.url": db.url, "topics": "t", "field.exclude.list": "t:(a"})
    assert "field.exclude.list" in str(e.value) and "regular expression" in str(e.value)


def test_text_keys_a_collation_holds_equal_keep_kafka_order_and_the_last_record_wins(db, sink):
    """Given text keys that MariaDB's default collation (utf8mb4_general_ci: case-, accent- and
    trailing-space-insensitive) holds as one key, when they are upserted in one put, then the table
    holds what one put per record leaves: the last record of each such key in Kafka order wins
    (before: the run was sorted by code point, so ``A`` (offset 1) was written before ``a`` (offset 0)
    and the older value won; and a key seen again kept its first position)."""
    key_schema = SchemaBuilder.struct().name("CodeKey").field("code", Schema.STRING).build()
    value_schema = (SchemaBuilder.struct().name("CodeValue").field("code", Schema.STRING)
                    .field("v", Schema.STRING).build())
    codes = ["a", "A", "b ", "b", "c", "C", "c", "é", "e"]
    opts = {"insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true", "copycat.batch.enabled": "false"}

    def records(s):
        return [rec(i, {"code": code, "v": f"v{i}"}, key=Struct(key_schema, {"code": code}), key_schema=key_schema,
                    schema=value_schema, sink=s) for i, code in enumerate(codes)]

    together, one_by_one = sink(**opts), sink(**opts)
    together.start()
    together.put(records(together))
    one_by_one.start()
    for r in records(one_by_one):
        one_by_one.put([r])
    assert sorted(together.rows(order="v")) == sorted(one_by_one.rows(order="v"))
    if db.kind == "mariadb":
        assert sorted(v for _, v in together.rows(order="v")) == ["v1", "v3", "v6", "v8"]


@pytest.mark.parametrize("db", ["mariadb"], indirect=True)
def test_rows_mariadb_refuses_are_found_and_reported_and_the_rest_is_written(db, sink):
    """Given errors.tolerance=all and MariaDB tables that refuse one record's row -- a failed CHECK
    (PyMySQL: OperationalError 4025, SQLSTATE 23000), a TIMESTAMP past 2038 (1292, 22007), a NaN
    float (no such value in MariaDB; PyMySQL refuses it before sending) -- when four records are put,
    then that record is reported naming it and the other three are written (before: the put failed
    whole with the raw driver error, nothing reported, no record named)."""
    utc = dt.timezone.utc
    cases = {"f DOUBLE CHECK (f >= 0)": (Schema.FLOAT64, 1.5, -1.0),
             "f TIMESTAMP NULL": (Timestamp.builder().build(), dt.datetime(2020, 1, 1, tzinfo=utc),
                                  dt.datetime(2040, 1, 1, tzinfo=utc)),
             "f DOUBLE": (Schema.FLOAT64, 1.5, float("nan"))}
    for column, (field, good, bad) in cases.items():
        value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("f", field).build()
        s = sink(**{"pk.mode": "record_value", "pk.fields": "id"})
        with db.engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE `{s.table}` (id BIGINT PRIMARY KEY, {column})"))
        s.start()
        s.task.context = Reporter(s.task.context.config, [s.tp])
        s.put([rec(i, {"id": i, "f": bad if i == 2 else good}, schema=value, sink=s) for i in range(4)])
        assert [o for o, _ in s.task.context.reported] == [2], column
        assert s.table in s.task.context.reported[0][1], column
        assert [r[0] for r in s.rows()] == [0, 1, 3], column
    assert f"topic {s.table} partition 0 offset 2: table {s.table} column f is nan" in s.task.context.reported[0][1]


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_statement_the_database_refuses_fails_naming_the_table_and_the_first_record(db, sink):
    """Given a table whose key is DEFERRABLE (PostgreSQL's ON CONFLICT refuses it: a fatal error, no
    row's fault), when records are upserted, then the run fails naming the table and the topic,
    partition and offset of the first record of the failing statement, without the statement's values
    (before: the raw driver error, which named no record)."""
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key", "copycat.batch.enabled": "false"})
    with db.engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{s.table}" (id BIGINT PRIMARY KEY DEFERRABLE, name TEXT, qty INTEGER)'))
    s.start()
    with pytest.raises(ConnectException) as e:
        s.put([rec(i, {"id": i, "name": f"secret-value-{i}", "qty": i}, key=k(i), sink=s) for i in range(3, 6)])
    text = str(e.value)
    assert f"topic {s.table} partition 0 offset 3: writing 3 row(s) from there to table {s.table} failed" in text
    assert "deferrable" in text and "secret-value" not in text


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_a_float_or_decimal_into_an_integer_or_single_precision_column_fails_before_writing(db, sink):
    """Given existing integer and single-precision float columns (PostgreSQL REAL, MariaDB FLOAT), when
    a record brings a float64 or a Decimal with a fraction for an integer column, or a float64 for the
    single-precision one, then the put fails before writing, naming topic, partition, offset, table
    and column (before: MariaDB rounded silently; PostgreSQL refused each record at the database)."""
    single = {"postgresql": "REAL", "mariadb": "FLOAT"}[db.kind]
    q = "`" if db.kind == "mariadb" else '"'
    cases = {"qty": (Schema.FLOAT64, 1.5, "float64"), "price": (Decimal.builder(2).build(), decimal.Decimal("1.25"),
                                                                "Decimal of scale 2"),
             "ratio": (Schema.FLOAT64, 123456789.123, "single precision")}
    for column, (field, v, why) in cases.items():
        s = sink()
        with db.engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {q}{s.table}{q} (id BIGINT, qty INTEGER, price BIGINT, "
                                 f"ratio {single})"))
        value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field(column, field).build()
        s.start()
        with pytest.raises(ConnectException) as e:
            s.put([rec(0, {"id": 1, column: v}, schema=value, sink=s)])
        assert f"topic {s.table} partition 0 offset 0: table {s.table} column {column} is " in str(e.value), column
        assert why in str(e.value), column
        assert s.rows() == [], column


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_lost_connection_under_the_columns_transaction_is_written_through_the_records(db, sink):
    """Given the columns path (PostgreSQL, JsonConverter with schemas) whose ADBC connection the server
    terminated between two batches (as a restart or an administrator would), when the next batch's
    transaction fails on it, then its records are written through the records path and the offsets
    move past them (before: drain -> _rollback -> close -> drain ... ended the run in RecursionError)."""
    from airflow_copycat.connect.sink_batch import SinkBatch
    from airflow_copycat.converters.json_converter import JsonConverter

    app = f"copycat_lost_{uuid.uuid4().hex[:8]}"
    url = sa.engine.make_url(db.url).update_query_dict({"application_name": app})
    s = sink(**{"connection.url": url.render_as_string(hide_password=False), "auto.create": "true",
                "pk.mode": "record_key"})
    s.start()
    assert s.task.columns is not None
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({"schemas.enable": True}, is_key=True)
    values.configure({"schemas.enable": True}, is_key=False)

    def batch(first: int, n: int) -> SinkBatch:
        ids = range(first, first + n)
        return SinkBatch(key_converter=keys, value_converter=values, topics=[s.table] * n, partitions=[0] * n,
                         offsets=list(ids), keys=[keys.from_connect_data(s.table, KEY, k(i)) for i in ids],
                         values=[values.from_connect_data(s.table, V1, Struct(V1, {"id": i, "name": f"n{i}", "qty": i}))
                                 for i in ids])

    s.task.put_batch(batch(0, 50))
    s.task.pre_commit({s.tp: 50})
    assert s.task.metrics["rows_columnar"] == 50  # the ADBC connection is open now
    with db.engine.connect() as conn:
        killed = conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                      "WHERE application_name = :a"), {"a": app}).all()
    assert killed
    s.task.put_batch(batch(50, 50))
    assert s.task.pre_commit({s.tp: 100}) == {s.tp: 100}
    assert [r[0] for r in s.rows()] == list(range(100))
    assert s.task.metrics["rows_columnar"] == 50  # the second batch went through the records


def test_a_timestamp_outside_the_years_1_to_9999_in_db_timezone_is_a_record_error(db, sink):
    """Given db.timezone America/New_York and errors.tolerance=all, when a record's Timestamp is
    0001-01-01T01:00Z (a common "minimum date", the year 0 in New York), then that record is reported
    naming it and the field, and the others are written (before: a bare OverflowError failed the run,
    every rerun the same)."""
    value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("ts", Timestamp.builder().build()).build()
    s = sink(**{"auto.create": "true", "pk.mode": "record_value", "pk.fields": "id", "db.timezone": "America/New_York"})
    s.start()
    s.task.context = Reporter(s.task.context.config, [s.tp])
    utc = dt.timezone.utc
    usual = dt.datetime(2020, 1, 1, tzinfo=utc)
    stamps = [usual, dt.datetime(1, 1, 1, 1, tzinfo=utc), usual]
    s.put([rec(i, {"id": i, "ts": ts}, schema=value, sink=s) for i, ts in enumerate(stamps)])
    assert [o for o, _ in s.task.context.reported] == [1]
    assert f"topic {s.table} partition 0 offset 1: field ts: " in s.task.context.reported[0][1]
    assert [r[0] for r in s.rows()] == [0, 2]


def test_a_tombstone_before_its_table_exists_deletes_nothing_and_is_skipped(db, sink):
    """Given auto.create and delete.enabled, when a put begins with a tombstone for a table that does
    not exist yet (a compacted topic whose insert was compacted away) and a later record of it makes
    the table, then the tombstone is skipped (counted), the rest is written, deletes after the table
    exists delete, and the offsets pass them all (before: the run failed at the tombstone for good,
    "a tombstone has no value schema to create it from", even with errors.tolerance=all)."""
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key", "delete.enabled": "true", "auto.create": "true"})
    assert s.start() == {}
    s.put([rec(0, key=k(7), sink=s, tombstone=True),
           rec(1, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s),
           rec(2, {"id": 2, "name": "b", "qty": 2}, key=k(2), sink=s),
           rec(3, key=k(2), sink=s, tombstone=True)])
    assert s.rows() == [(1, "a", 1)]
    assert s.task.metrics["tombstones_skipped"] == 1
    s.stop()
    again = sink(table=s.table, name=s.raw["name"], **{"insert.mode": "upsert", "pk.mode": "record_key",
                                                        "delete.enabled": "true", "auto.create": "true"})
    assert again.start() == {s.tp: 4}


def test_a_string_default_is_one_literal_whatever_it_holds(db, sink):
    """Given a table with rows and auto.evolve, when records bring new optional fields whose defaults
    hold backslashes, quotes and percent signs -- one crafted to end the literal on MariaDB and drop
    a column -- then each column is added with exactly that default (the existing row holds it) and
    no other column changes (before: MariaDB read the backslashes as escapes: a mangled default, a
    syntax error, or the crafted default's DROP COLUMN ran)."""
    defaults = ["C:\\temp\\new", "ends with \\", "50% 'off'", "\\', DROP COLUMN important -- "]
    base = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("important", Schema.STRING)
    s = sink(**{"auto.create": "true", "auto.evolve": "true", "pk.mode": "record_value", "pk.fields": "id"})
    s.start()
    s.put([rec(0, {"id": 0, "important": "keep me"}, schema=base.build(), sink=s)])
    schema = base
    for i, default in enumerate(defaults, 1):
        schema = schema.field(f"d{i}", SchemaBuilder.string().optional().default_value(default).build())
        s.put([rec(i, {"id": i, "important": f"i{i}", **{f"d{j}": "given" for j in range(1, i + 1)}},
                   schema=schema.build(), sink=s)])
    assert s.rows()[0] == (0, "keep me", *defaults)


def test_without_quoting_only_plain_names_reach_the_sql(db, sink):
    """Given quote.sql.identifiers=never and auto.create, when a record's schema has a field whose name
    is SQL (``x INT); DROP TABLE victim; ...``), then the put fails before any statement, naming the
    record and the name, and the other table is still there; plain names are written as before
    (before: the CREATE TABLE ran the name's statements and dropped the other table)."""
    q = "`" if db.kind == "mariadb" else '"'
    victim = f"victim_{uuid.uuid4().hex[:8]}"
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {q}{victim}{q} (id INT)"))
    try:
        s = sink(**{"auto.create": "true", "quote.sql.identifiers": "never"})
        s.start()
        evil = f"x INT); DROP TABLE {victim}; --"  # (shorter than PostgreSQL's 63 bytes)
        value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field(evil, Schema.INT32).build()
        with pytest.raises(ConnectException) as e:
            s.put([rec(0, {"id": 1, evil: 2}, schema=value, sink=s)])
        assert f"topic {s.table} partition 0 offset 0" in str(e.value) and "not a plain identifier" in str(e.value)
        assert sa.inspect(db.engine).has_table(victim)
        plain = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("qty_2$", Schema.INT32).build()
        s.put([rec(0, {"id": 1, "qty_2$": 2}, schema=plain, sink=s)])
        assert s.rows() == [(1, 2)]
    finally:
        with db.engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {q}{victim}{q}"))
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {q}zz_{victim}{q}"))


@pytest.mark.parametrize("db", ["mariadb"], indirect=True)
def test_mariadb_lock_wait_timeouts_and_deadlocks_are_retried(db, sink):
    """Given MariaDB and max.retries, when the sink's write (1) waits longer than
    innodb_lock_wait_timeout for the offsets row another session holds (1205, SQLSTATE HY000) and
    (2) is chosen as a deadlock's victim (1213: InnoDB rolls the whole transaction back, so the
    savepoint's rollback fails with 1305), then the transaction is retried and written (before: both
    failed the run at once)."""
    import threading
    import time

    url = sa.engine.make_url(db.url).update_query_dict({"init_command": "SET innodb_lock_wait_timeout=1"})
    s = sink(**{"connection.url": url.render_as_string(hide_password=False), "insert.mode": "upsert",
                "pk.mode": "record_value", "pk.fields": "id", "max.retries": "5", "retry.backoff.ms": "500"})
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE `{s.table}` (id BIGINT PRIMARY KEY, name TEXT, qty INT)"))
        conn.execute(sa.text(f"INSERT INTO `{s.table}` VALUES " + ",".join(f"({i}, 'x', 0)" for i in range(1, 2001))))
    s.start()
    s.put([rec(0, {"id": 5000, "name": "warm-up", "qty": 0}, sink=s)])  # the offsets row exists

    def hold_offsets():
        with db.engine.begin() as conn:
            conn.execute(sa.text("SELECT * FROM copycat_sink_offsets WHERE connector = :c FOR UPDATE"),
                         {"c": s.raw["name"]})
            time.sleep(2.5)

    def deadlock():
        with db.engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE `{s.table}` SET name = 'heavy' WHERE id >= 100"))  # a costly victim
            conn.execute(sa.text(f"UPDATE `{s.table}` SET name = 'other' WHERE id = 2"))
            time.sleep(0.8)  # the sink has locked id 1 and waits for id 2
            conn.execute(sa.text(f"UPDATE `{s.table}` SET name = 'other' WHERE id = 1"))

    for n, (other, ids) in enumerate([(hold_offsets, [1]), (deadlock, [1, 2])]):
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        retried = s.task.writer.retries
        s.put([rec(1 + 2 * n + i, {"id": i, "name": "sink", "qty": n}, sink=s) for i in ids])
        thread.join()
        assert s.task.writer.retries > retried, other.__name__
        with db.engine.connect() as conn:
            got = conn.execute(sa.text(f"SELECT id, name, qty FROM `{s.table}` WHERE id IN (1, 2) ORDER BY id")).all()
        assert [tuple(r) for r in got if r[0] in ids] == [(i, "sink", n) for i in ids], other.__name__


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_row_a_trigger_refuses_is_a_record_error(db, sink):
    """Given errors.tolerance=all and a BEFORE INSERT trigger that raises for one row (PL/pgSQL RAISE
    EXCEPTION, SQLSTATE P0001, which psycopg raises as InternalError), when four records are put, then
    that record is reported and the others are written (before: the run failed whole)."""
    s = sink(**{"pk.mode": "record_value", "pk.fields": "id", "copycat.batch.enabled": "false"})
    with db.engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{s.table}" (id BIGINT PRIMARY KEY, name TEXT, qty INTEGER)'))
        conn.execute(sa.text(f'CREATE FUNCTION "{s.table}_f"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
                             "IF NEW.name = 'bad' THEN RAISE EXCEPTION 'refused by policy'; END IF; "
                             "RETURN NEW; END $$"))
        conn.execute(sa.text(f'CREATE TRIGGER "{s.table}_t" BEFORE INSERT ON "{s.table}" FOR EACH ROW '
                             f'EXECUTE FUNCTION "{s.table}_f"()'))
    try:
        s.start()
        s.task.context = Reporter(s.task.context.config, [s.tp])
        s.put([rec(i, {"id": i, "name": "bad" if i == 2 else "ok", "qty": i}, sink=s) for i in range(4)])
        assert [o for o, _ in s.task.context.reported] == [2]
        assert "refused by policy" in s.task.context.reported[0][1]
        assert [r[0] for r in s.rows()] == [0, 1, 3]
    finally:
        s.drop()
        with db.engine.begin() as conn:
            conn.execute(sa.text(f'DROP FUNCTION IF EXISTS "{s.table}_f"()'))


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_nan_into_sqlite_is_a_record_error_not_a_null(db, sink):
    """Given errors.tolerance=all, when records with NaN, Infinity and NULL floats go to SQLite, then the
    NaN record is reported naming its column and the others are written as given (before: SQLite stored
    the bound NaN as NULL without a word)."""
    value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("f", Schema.OPTIONAL_FLOAT64).build()
    s = sink(**{"auto.create": "true", "pk.mode": "record_value", "pk.fields": "id"})
    s.start()
    s.task.context = Reporter(s.task.context.config, [s.tp])
    floats = [float("nan"), float("inf"), -float("inf"), None]
    s.put([rec(i, {"id": i, "f": f}, schema=value, sink=s) for i, f in enumerate(floats)])
    assert [o for o, _ in s.task.context.reported] == [0] and "column f is nan" in s.task.context.reported[0][1]
    assert s.rows() == [(1, float("inf")), (2, -float("inf")), (3, None)]


def test_update_mode_with_only_key_columns_changes_nothing_and_does_not_fail(db, sink):
    """Given a table whose primary key is every column the records have (pk.mode=record_value without
    pk.fields), when insert.mode=update writes records, then nothing changes and the offsets move (an
    update of only key columns sets nothing; before: ``UPDATE ... SET  WHERE``, a syntax error)."""
    value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("code", Schema.STRING).build()
    s = sink(**{"insert.mode": "update", "pk.mode": "record_value"})
    q = "`" if db.kind == "mariadb" else '"'
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {q}{s.table}{q} (id BIGINT NOT NULL, code VARCHAR(20) NOT NULL, "
                             "PRIMARY KEY (id, code))"))
        conn.execute(sa.text(f"INSERT INTO {q}{s.table}{q} VALUES (1, 'a')"))
    s.start()
    assert s.put([rec(i, {"id": i, "code": "a"}, schema=value, sink=s) for i in range(3)]) == {s.tp: 3}
    assert s.rows() == [(1, "a")]


def test_debeziums_current_time_zone_and_table_keys_apply_and_unsupported_ones_are_refused(db, sink):
    """Given Debezium's current keys use.time.zone and collection.name.format, when a Timestamp is
    written, then it lands in the named table as local time of that zone (before: both keys were
    ignored without a word: UTC, a table named after the topic); Debezium keys the sink does not
    implement are config problems."""
    value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("ts", Timestamp.builder().build()).build()
    target = f"t_{uuid.uuid4().hex[:8]}"
    s = sink(**{"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "schema.evolution": "basic",
                "primary.key.mode": "record_value", "primary.key.fields": "id", "use.time.zone": "Europe/Berlin",
                "collection.name.format": target})
    s.start()
    s.put([rec(0, {"id": 1, "ts": dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.timezone.utc)}, schema=value, sink=s)])
    written = Sink(db, target)
    try:
        (row,) = written.rows()
        local = row[1] if isinstance(row[1], dt.datetime) else dt.datetime.fromisoformat(str(row[1]))
        assert local.replace(tzinfo=None) == dt.datetime(2026, 7, 1, 14, 0)
        assert not sa.inspect(db.engine).has_table(s.table)
    finally:
        written.drop()
    for key, value in (("truncate.enabled", "true"), ("collection.naming.strategy", "x.Y")):
        with pytest.raises(ConfigException) as e:
            JdbcSinkConnector.parse_config({"connection.url": db.url, "topics": "t", key: value})
        assert key in str(e.value) and "not supported" in str(e.value)


def test_a_unique_index_is_a_key_for_upserts_and_deletes(db, sink):
    """Given a table whose key is a UNIQUE INDEX rather than a constraint (which ON CONFLICT and ON
    DUPLICATE KEY take), when records are upserted and deleted by that key, then they are written
    (before: on PostgreSQL and SQLite the table was refused as having no key)."""
    s = sink(**{"insert.mode": "upsert", "pk.mode": "record_key", "delete.enabled": "true"})
    q = "`" if db.kind == "mariadb" else '"'
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {q}{s.table}{q} (id BIGINT NOT NULL, name TEXT, qty INTEGER)"))
        conn.execute(sa.text(f"CREATE UNIQUE INDEX {q}{s.table}_id{q} ON {q}{s.table}{q} (id)"))
    s.start()
    s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s),
           rec(1, {"id": 1, "name": "b", "qty": 2}, key=k(1), sink=s),
           rec(2, {"id": 2, "name": "c", "qty": 3}, key=k(2), sink=s)])
    s.put([rec(3, {"id": 2, "name": "d", "qty": 4}, key=k(2), sink=s), rec(4, key=k(1), sink=s, tombstone=True)])
    assert s.rows() == [(2, "d", 4)]


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_refused_record_is_reported_once_when_its_transaction_is_retried(db, sink):
    """Given errors.tolerance=all and a put whose transaction is retried (the offsets row is held by
    another session past lock_timeout the first time), when one of its records is refused, then it is
    reported once, not once per attempt (before: the dead-letter queue got it twice)."""
    import threading
    import time

    url = sa.engine.make_url(db.url).update_query_dict({"options": "-c lock_timeout=500"})
    s = sink(**{"connection.url": url.render_as_string(hide_password=False), "pk.mode": "record_value",
                "pk.fields": "id", "auto.create": "true", "retry.backoff.ms": "1500", "copycat.batch.enabled": "false"})
    s.start()
    s.put([rec(0, {"id": 0, "name": "a", "qty": 0}, sink=s)])
    s.task.context = Reporter(s.task.context.config, [s.tp])

    def hold_offsets():
        with db.engine.begin() as conn:
            conn.execute(sa.text("SELECT * FROM copycat_sink_offsets WHERE connector = :c FOR UPDATE"),
                         {"c": s.raw["name"]})
            time.sleep(1.0)

    thread = threading.Thread(target=hold_offsets)
    thread.start()
    time.sleep(0.2)
    s.put([rec(i, {"id": 0 if i == 2 else i, "name": "b", "qty": i}, sink=s) for i in (1, 2, 3)])
    thread.join()
    assert s.task.writer.retries >= 1
    assert [o for o, _ in s.task.context.reported] == [2]
    assert [r[0] for r in s.rows()] == [0, 1, 3]


def test_a_null_inside_a_struct_column_stays_null_as_at_the_top_level(db, sink):
    """Given an optional field with a default, at the top level and inside a struct written as JSON, when
    both are null, then both are written as null (before: the nested one was written as its default,
    through Struct.get, while the top-level one stayed NULL)."""
    colour = SchemaBuilder.string().optional().default_value("red").build()
    inner = SchemaBuilder.struct().name("Inner").field("color", colour).optional().build()
    value = (SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("color", colour)
             .field("inner", inner).build())
    s = sink(**{"auto.create": "true", "pk.mode": "record_value", "pk.fields": "id"})
    s.start()
    s.put([rec(0, {"id": 1, "color": None, "inner": Struct(inner, {"color": None})}, schema=value, sink=s)])
    ((_, top, nested),) = s.rows()
    assert top is None
    assert (nested if isinstance(nested, dict) else __import__("json").loads(nested)) == {"color": None}


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_sqlite_failures_that_cannot_pass_are_not_retried(db, sink):
    """Given SQLite and max.retries, when a write fails for a reason no retry mends (a column someone
    dropped after the task read the table), then the run fails at once naming the table and the record
    (before: every sqlite3.OperationalError was retried, max.retries x retry.backoff.ms late)."""
    s = sink(**{"auto.create": "true", "max.retries": "3", "retry.backoff.ms": "1000"})
    s.start()
    s.put([rec(0, {"id": 0, "name": "a", "qty": 0}, sink=s)])
    with db.engine.begin() as conn:
        conn.execute(sa.text(f'ALTER TABLE "{s.table}" DROP COLUMN qty'))
    with pytest.raises(ConnectException) as e:
        s.put([rec(1, {"id": 1, "name": "b", "qty": 1}, sink=s)])
    assert f"topic {s.table} partition 0 offset 1" in str(e.value) and "qty" in str(e.value)
    assert s.task.writer.retries == 0


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_decimals_with_more_scale_than_the_column_holds_fail_before_writing(db, sink):
    """Given Decimal fields, when MariaDB would create or add a column for a scale above DECIMAL's 30, or
    an existing NUMERIC(10, 2) column gets a Decimal of scale 3, then the put fails before writing,
    naming the record, table and column (before: MariaDB made DECIMAL(65, 30) and rounded the values
    with only a note; an existing column rounded them silently)."""
    q = "`" if db.kind == "mariadb" else '"'
    fine = SchemaBuilder.struct().name("V").field("id", Schema.INT64).build()
    wide = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("d", Decimal.builder(34).optional().build())
    cases = [("existing", Decimal.builder(3).build(), decimal.Decimal("1.234"))]
    if db.kind == "mariadb":
        cases += [("create", Decimal.builder(34).build(), decimal.Decimal("0." + "1" * 34)),
                  ("evolve", None, decimal.Decimal("0." + "1" * 34))]
    for case, field, v in cases:
        s = sink(**{"auto.create": "true", "auto.evolve": "true", "pk.mode": "record_value", "pk.fields": "id"})
        if case == "existing":
            with db.engine.begin() as conn:
                conn.execute(sa.text(f"CREATE TABLE {q}{s.table}{q} (id BIGINT PRIMARY KEY, d NUMERIC(10, 2))"))
        s.start()
        if case == "evolve":
            s.put([rec(0, {"id": 0}, schema=fine, sink=s)])
            value = wide.build()
        else:
            value = SchemaBuilder.struct().name("V").field("id", Schema.INT64).field("d", field).build()
        with pytest.raises(ConnectException) as e:
            s.put([rec(1, {"id": 1, "d": v}, schema=value, sink=s)])
        assert f"topic {s.table} partition 0 offset 1: table {s.table} column d is " in str(e.value), case
        assert "scale" in str(e.value), case
        if case != "create":
            assert [r[0] for r in s.rows()] == ([0] if case == "evolve" else []), case


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_names_longer_than_postgresql_keeps_fail_at_the_first_record(db, sink):
    """Given a topic (so a table) name of more than 63 bytes, when the sink writes it on PostgreSQL, then
    the first put fails naming the record and the name, and no table is made (before: PostgreSQL cut the
    name with a notice, the first run worked, and every later run failed: CREATE TABLE of a table that
    exists, as the long name was never found again)."""
    s = sink(table=f"t_{uuid.uuid4().hex[:8]}_" + "x" * 60, **{"auto.create": "true"})
    s.start()
    with pytest.raises(ConnectException) as e:
        s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, sink=s)])
    assert f"topic {s.table} partition 0 offset 0" in str(e.value) and "63 bytes" in str(e.value)
    assert not sa.inspect(db.engine).has_table(s.table[:63])


def test_a_pk_fields_mistake_fails_the_run_instead_of_dead_lettering_the_topic(db, sink):
    """Given errors.tolerance=all and pk.fields naming no field of the value (``Id`` for ``id``), or two
    columns for a primitive key, when records are put, then the run fails naming pk.fields, nothing is
    reported and the offsets stay (before: every record was dead-lettered and the offsets moved past
    them, so a rerun with the config fixed did not write them)."""
    for over, key, key_schema in (({"pk.mode": "record_value", "pk.fields": "Id"}, None, KEY),
                                  ({"pk.mode": "record_key", "pk.fields": "a,b"}, "one", Schema.STRING)):
        s = sink(**{"auto.create": "true", "insert.mode": "upsert", **over})
        assert s.start() == {}
        s.task.context = Reporter(s.task.context.config, [s.tp])
        with pytest.raises(ConnectException) as e:
            s.put([rec(i, {"id": i, "name": "a", "qty": i}, key=key, key_schema=key_schema, sink=s) for i in range(3)])
        assert "pk.fields" in str(e.value) and f"topic {s.table} partition 0 offset 0" in str(e.value)
        assert s.task.context.reported == [] and s.task.committed == {}


def test_config_mistakes_that_would_fail_later_are_config_problems():
    """An empty table.name.format, a pk.fields naming a column twice and a copycat.offsets.table of
    three parts are config problems, named before anything runs (before: accepted, then raw SQL errors
    naming no record)."""
    base = {"connection.url": "sqlite:///x.db", "topics": "t"}
    for over, key in (({"table.name.format": ""}, "table.name.format"),
                      ({"pk.mode": "record_value", "pk.fields": "id,id"}, "pk.fields"),
                      ({"copycat.offsets.table": "a.b.c"}, "copycat.offsets.table")):
        with pytest.raises(ConfigException) as e:
            JdbcSinkConnector.parse_config({**base, **over})
        assert key in str(e.value), over
    JdbcSinkConnector.parse_config({**base, "copycat.offsets.table": "s.offsets", "pk.mode": "record_value",
                                    "pk.fields": "id,code"})



@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_in_columns_a_table_that_cannot_fit_fails_the_batch_before_anything_is_written(db, sink):
    """Given the columns path and a batch whose partition 0 holds records of the table's schema and
    whose partition 1 brings a required field without default (which auto.evolve cannot add), when
    the batch is put, then it fails naming partition 1's record and nothing of the batch is written,
    as through the records (before: partition 0's rows were committed first)."""
    from airflow_copycat.connect.sink_batch import SinkBatch
    from airflow_copycat.converters.json_converter import JsonConverter

    must = (SchemaBuilder.struct().name("Value").field("id", Schema.INT64).field("name", Schema.STRING)
            .field("qty", Schema.OPTIONAL_INT32).field("must", Schema.INT32).build())
    s = sink(**{"auto.create": "true", "auto.evolve": "true", "pk.mode": "record_key"})
    s.start()
    s.put([rec(0, {"id": 0, "name": "seed", "qty": 0}, key=k(0), sink=s)])  # the table, from V1
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({"schemas.enable": True}, is_key=True)
    values.configure({"schemas.enable": True}, is_key=False)
    rows = [(0, i, V1, {"id": i, "name": "a", "qty": i}) for i in range(1, 51)]
    rows += [(1, i, must, {"id": 100 + i, "name": "b", "qty": i, "must": 1}) for i in range(10)]
    batch = SinkBatch(key_converter=keys, value_converter=values, topics=[s.table] * len(rows),
                      partitions=[p for p, *_ in rows], offsets=[o for _, o, *_ in rows],
                      keys=[keys.from_connect_data(s.table, KEY, k(v["id"])) for *_, v in rows],
                      values=[values.from_connect_data(s.table, sc, Struct(sc, v)) for _, _, sc, v in rows])
    s.task.open([(s.table, 1)])
    with pytest.raises(ConnectException) as e:
        s.task.put_batch(batch)
        s.task.pre_commit({(s.table, 0): 51, (s.table, 1): 10})
    assert f"topic {s.table} partition 1 offset 0" in str(e.value) and "must" in str(e.value)
    assert [r[0] for r in s.rows()] == [0]


def test_with_debeziums_class_the_topics_dots_become_underscores_in_the_table_name(db, sink):
    """Given Debezium's connector class and a topic in Debezium's form ``server1.inventory.customers_x``,
    when its records are written with schema.evolution=basic, then the table is
    ``server1_inventory_customers_x``, as Debezium names it (before: the topic was split at its last dot
    into schema ``server1.inventory`` and table ``customers_x``: a raw error, or rows in another schema)."""
    suffix = uuid.uuid4().hex[:8]
    topic, table = f"server1.inventory.customers_{suffix}", f"server1_inventory_customers_{suffix}"
    s = sink(table=topic, **{"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
                             "schema.evolution": "basic", "primary.key.mode": "record_key", "insert.mode": "upsert"})
    s.start()
    try:
        s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, key=k(1), sink=s)])
        assert Sink(db, table).rows() == [(1, "a", 1)]
    finally:
        Sink(db, table).drop()


def test_ddl_the_database_refuses_fails_naming_the_record_and_the_table(db, sink):
    """Given auto.create and a table name in a schema that does not exist (``nosuch_<x>.t``), when a
    record is put, then the run fails with a ConnectException naming the record and the table (before:
    the driver's raw error, naming neither)."""
    s = sink(table=f"nosuch_{uuid.uuid4().hex[:8]}.t", **{"auto.create": "true"})
    s.start()
    with pytest.raises(ConnectException) as e:
        s.put([rec(0, {"id": 1, "name": "a", "qty": 1}, sink=s)])
    assert f"topic {s.table} partition 0 offset 0: making table {s.table} fit the record failed: " in str(e.value)


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_in_columns_a_pk_fields_mistake_fails_the_batch_before_anything_is_written(db, sink):
    """Given the columns path, pk.mode=record_value with pk.fields=code, and a batch whose partition 0
    has the field and whose partition 1 does not, when the batch is put, then it fails naming partition
    1's record and pk.fields, and nothing of the batch is written (before: partition 0's rows were
    committed before the records path failed on partition 1)."""
    from airflow_copycat.connect.sink_batch import SinkBatch
    from airflow_copycat.converters.json_converter import JsonConverter

    coded = SchemaBuilder.struct().name("C").field("code", Schema.STRING).field("n", Schema.INT32).build()
    plain = SchemaBuilder.struct().name("P").field("n", Schema.INT32).build()
    s = sink(**{"auto.create": "true", "pk.mode": "record_value", "pk.fields": "code", "insert.mode": "upsert"})
    s.start()
    s.task.open([(s.table, 1)])
    values = JsonConverter()
    values.configure({"schemas.enable": True}, is_key=False)
    rows = [(0, i, coded, {"code": f"c{i}", "n": i}) for i in range(50)] + [(1, i, plain, {"n": i}) for i in range(5)]
    batch = SinkBatch(key_converter=values, value_converter=values, topics=[s.table] * len(rows),
                      partitions=[p for p, *_ in rows], offsets=[o for _, o, *_ in rows], keys=[None] * len(rows),
                      values=[values.from_connect_data(s.table, sc, Struct(sc, v)) for _, _, sc, v in rows])
    with pytest.raises(ConnectException) as e:
        s.task.put_batch(batch)
        s.task.pre_commit({(s.table, 0): 50, (s.table, 1): 5})
    assert f"topic {s.table} partition 1 offset 0: pk.fields ['code']" in str(e.value)
    assert not sa.inspect(db.engine).has_table(s.table) or s.rows(order="code") == []
