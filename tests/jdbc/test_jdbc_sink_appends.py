"""Upserts of new keys copied straight into the table (connectors/jdbc_sink/appends.py), on real PostgreSQL.

The differential proof that straight copies write what the records write is
``test_jdbc_sink_columns.py`` (mode ``upsert-new-keys``). Here: when the copy is tried and when not,
after a real unique violation, a real refused value, a view; upserts that update through runs;
two sinks upserting the same new keys at once.
"""

from __future__ import annotations

import threading

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy as sa
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect import Schema, SchemaBuilder, Struct
from airflow_copycat.connectors.jdbc_sink.appends import Appends, csv_rows
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

KEY = SchemaBuilder.struct().name("k").field("id", Schema.INT64).build()
VALUE = (SchemaBuilder.struct().name("v").field("id", Schema.INT64).field("name", Schema.STRING)
         .field("qty", Schema.OPTIONAL_INT32).build())


def _psycopg(engine) -> psycopg.Connection:
    return psycopg.connect(engine.url.set(drivername="postgresql").render_as_string(hide_password=False))


def test_a_refused_copy_is_tried_again_as_the_kind_of_refusal_says(pg, unique):
    """Given real refusals: a key already there stops the tries until a merge inserts only new keys; a
    value the column does not take leaves the table tried; copying into a view stops them for good."""
    engine, made = pg
    table = f"appends_refused_{unique}"
    made.append(table)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{table}" (id BIGINT PRIMARY KEY, name TEXT)'))
        conn.execute(sa.text(f'CREATE VIEW "{table}_view" AS SELECT * FROM "{table}"'))
    rows = pa.table({"c0": pa.array([2, 1], pa.int64()), "c1": ["b", "a"]})
    appends = Appends()
    with _psycopg(engine) as conn, conn.cursor() as cur:
        assert appends.wanted(table)
        appends.copy(cur, table, f'"{table}"', "id, name", csv_rows(rows, 1))
        conn.commit()
        with pytest.raises(psycopg.errors.UniqueViolation) as e:
            appends.copy(cur, table, f'"{table}"', "id, name", csv_rows(rows, 1))
        conn.rollback()
        assert appends.refused(e.value) and not appends.wanted(table)
        appends.merged(table, 3, 5)  # a merge that updated rows: still not tried
        assert not appends.wanted(table)
        appends.merged(table, 5, 5)  # only new keys again
        assert appends.wanted(table)
        with pytest.raises(psycopg.errors.UniqueViolation) as e:  # the second time: two such merges in a row
            appends.copy(cur, table, f'"{table}"', "id, name", csv_rows(rows, 1))
        conn.rollback()
        assert appends.refused(e.value)
        for inserted, wanted in ((5, False), (4, False), (5, False), (5, True)):
            appends.merged(table, inserted, 5)
            assert appends.wanted(table) is wanted

        bad = pa.table({"c0": pa.array([7], pa.int64()), "c1": ["nul\x00"]})
        with pytest.raises(psycopg.DataError) as e:
            appends.copy(cur, table, f'"{table}"', "id, name", csv_rows(bad, 1))
        conn.rollback()
        assert appends.refused(e.value) and appends.wanted(table)

        view = f"{table}_view"
        with pytest.raises(psycopg.Error) as e:
            appends.copy(cur, view, f'"{view}"', "id, name", csv_rows(pa.table({"c0": pa.array([9], pa.int64()),
                                                                               "c1": ["c"]}), 1))
        conn.rollback()
        assert appends.refused(e.value) and not appends.wanted(view)
        appends.merged(view, 1, 1)
        assert not appends.wanted(view)
        assert not appends.refused(RuntimeError("a failure after the copy"))
        cur.execute(f'SELECT id, name FROM "{table}" ORDER BY id')
        assert cur.fetchall() == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("shape", ["identity", "rule", "deferrable"])
def test_tables_where_a_copy_is_not_the_upsert_are_never_copied_into(kafka_bootstrap, worker_props, unique, pg,
                                                                      shape):
    """Given tables where PostgreSQL refuses the upsert but a COPY would write -- a GENERATED ALWAYS identity
    key (COPY overrides it), an INSERT rule (COPY skips it), a deferrable key (checked at commit only) --
    when the sink upserts new keys, then the run fails as the upsert does, and nothing was written."""
    engine, made = pg
    topic = table = f"appends_{shape}_{unique}"
    made += [table, f"{table}_audit"]
    key = {"identity": "id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
           "rule": "id BIGINT PRIMARY KEY", "deferrable": "id BIGINT PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE"}
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{table}" ({key[shape]}, name TEXT NOT NULL, qty INTEGER)'))
        conn.execute(sa.text(f'CREATE TABLE "{table}_audit" (id BIGINT)'))
        if shape == "rule":
            conn.execute(sa.text(f'CREATE RULE audit AS ON INSERT TO "{table}" DO ALSO '
                                 f'INSERT INTO "{table}_audit" VALUES (NEW.id)'))
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    _produce(kafka_bootstrap, topic, [(i, f"a{i}") for i in range(100)])
    config = {"name": f"appends-{shape}-{unique}", "connector.class": "JdbcSink", "topics": topic,
              "table.name.format": table, "connection.url": engine.url.render_as_string(hide_password=False),
              "insert.mode": "upsert", "pk.mode": "record_key"}
    (group,) = make_plan(config, WorkerConfig(worker_props, env={}))["groups"]
    result = run_group(group, worker_props)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar()
        audited = conn.execute(sa.text(f'SELECT count(*) FROM "{table}_audit"')).scalar()
    why = {"identity": "GENERATED ALWAYS", "rule": "rules", "deferrable": "deferrable"}[shape]
    assert result["status"] == "failed" and why in result["tasks"][0]["error"], result
    assert "time(s)" not in result["tasks"][0]["error"]  # a refusal of the statement is not retried
    assert (rows, audited) == (0, 0)


def test_csv_rows_are_in_key_order_and_tell_nulls_from_empty_strings():
    rows = pa.table({"c0": pa.array([3, 1, 2], pa.int64()), "c1": ["", None, 'say "hi"\n'],
                     "c2": pa.array([b"\x00\xff", None, b""], pa.binary())})
    assert csv_rows(rows, 1) == b'"1",,\n"2","say ""hi""\n","\\x"\n"3","","\\x00ff"\n'
    assert csv_rows(pa.table({"c0": pa.array([1], pa.timestamp("ns"))}), 1) is None


def _produce(bootstrap: str, topic: str, values: list[tuple[int, str]]) -> None:
    conv_v, conv_k = JsonConverter(), JsonConverter()
    conv_v.configure({"schemas.enable": True}, is_key=False)
    conv_k.configure({"schemas.enable": True}, is_key=True)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, name in values:
        p.produce(topic, conv_v.from_connect_data(topic, VALUE, Struct(VALUE, {"id": i, "name": name, "qty": i})),
                  conv_k.from_connect_data(topic, KEY, Struct(KEY, {"id": i})), partition=0)
    assert p.flush(30) == 0


def _run(name: str, topic: str, table: str, engine, worker_props: dict) -> dict:
    config = {"name": name, "connector.class": "JdbcSink", "topics": topic, "table.name.format": table,
              "connection.url": engine.url.render_as_string(hide_password=False), "insert.mode": "upsert",
              "pk.mode": "record_key", "auto.create": "true"}
    (group,) = make_plan(config, WorkerConfig(worker_props, env={}))["groups"]
    result = run_group(group, worker_props)
    assert result["status"] == "ok", result
    return result["tasks"][0]["metrics"]


def test_upserts_go_straight_in_while_keys_are_new_and_merge_once_they_are_not(kafka_bootstrap, worker_props,
                                                                                unique, pg):
    """Given runs of a sink in upsert mode: new keys are copied straight in; a run that updates every key
    is merged (counted as updates); a later run of new keys is copied straight in again."""
    engine, made = pg
    topic = table = f"appends_{unique}"
    made.append(table)
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()

    def run(values):
        _produce(kafka_bootstrap, topic, values)
        return _run(f"appends-{unique}", topic, table, engine, worker_props)

    first = run([(i, f"a{i}") for i in range(500)])
    assert first["rows_copied_straight"] == 500 and first["tables"][table] == {"inserted": 500, "updated": 0}
    second = run([(i, f"b{i}") for i in range(499, -1, -1)])
    assert second["rows_copied_straight"] == 0
    assert second["tables"][table] == {"inserted": 0, "updated": 500}
    third = run([(i, f"c{i}") for i in range(500, 800)])
    assert third["rows_copied_straight"] == 300
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT id, name, qty FROM "{table}" ORDER BY id')).fetchall()
    assert rows == [(i, f"b{i}", i) for i in range(500)] + [(i, f"c{i}", i) for i in range(500, 800)]


def test_two_sinks_copying_the_same_new_keys_at_once_both_finish_and_every_key_is_written(
        kafka_bootstrap, worker_props, unique, pg):
    """Given two sinks whose topics hold the same new keys with different values, when they run at
    once into one table, then both finish, every key is there once, with one of the two values."""
    engine, made = pg
    table = f"appends_two_{unique}"
    made.append(table)
    topics = [f"appends_two_{unique}_{w}" for w in (0, 1)]
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    for t in topics:
        admin.create_topics([NewTopic(t, 1, 1)])[t].result()
        _produce(kafka_bootstrap, t, [(i, f"{t[-1]}-{i}") for i in range(3000)])
    with engine.begin() as conn:  # made before: the two would race to create it (tested elsewhere)
        conn.execute(sa.text(f'CREATE TABLE "{table}" (id BIGINT PRIMARY KEY, name TEXT NOT NULL, qty INTEGER)'))
    barrier, results, errors = threading.Barrier(2), {}, []

    def run(w: int) -> None:
        try:
            barrier.wait(30)
            results[w] = _run(f"appends-two-{unique}-{w}", topics[w], table, engine, worker_props)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT id, name FROM "{table}" ORDER BY id')).fetchall()
    assert [i for i, _ in rows] == list(range(3000))
    assert all(name in (f"0-{i}", f"1-{i}") for i, name in rows)
    for w in (0, 1):
        counts = results[w]["tables"][table]
        assert counts["inserted"] + counts.get("updated", 0) == 3000, results[w]
