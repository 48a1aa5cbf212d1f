"""The snapshot half: tables from the catalog, rows read under an exported snapshot, resumable per table.

Runs on the test PostgreSQL server. An exported snapshot here comes from ``pg_export_snapshot()``
in a ``REPEATABLE READ`` transaction, which needs no logical WAL; the slot's
``CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT`` exports the same kind of snapshot.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from airflow_copycat.connectors.postgres_cdc.config import CdcConfig
from airflow_copycat.connectors.postgres_cdc.envelope import EventBuilder, SourceInfo
from airflow_copycat.connectors.postgres_cdc.snapshot import (
    key_of,
    load_types,
    read_table,
    relation_from_catalog,
    snapshot_tables,
    snapshot_transaction,
)
from airflow_copycat.converters.json_converter import JsonConverter


@pytest.fixture()
def db(postgres_url):
    dsn = postgres_url.replace("+psycopg", "")
    conn = psycopg.connect(dsn, autocommit=True)
    schema = f"cdc_snap_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE SCHEMA {schema}")
    yield dsn, conn, schema
    conn.execute(f"DROP SCHEMA {schema} CASCADE")
    conn.close()


def test_relation_from_catalog_describes_columns_keys_and_replica_identity(db):
    _, conn, s = db
    conn.execute(f"CREATE TYPE {s}.state AS ENUM ('new', 'paid')")
    conn.execute(f"""CREATE TABLE {s}.orders (
        region text NOT NULL, id bigint NOT NULL, amount numeric(10,2) DEFAULT 0, tags int[],
        state {s}.state, created timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (region, id))""")
    conn.execute(f"ALTER TABLE {s}.orders DROP COLUMN tags")  # dropped columns are not columns
    conn.execute(f"ALTER TABLE {s}.orders ADD COLUMN tags int[]")

    r = relation_from_catalog(conn, s, "orders")

    assert (r.schema, r.table, r.replica_identity) == (s, "orders", "d")
    assert [c.name for c in r.columns] == ["region", "id", "amount", "state", "created", "tags"]
    assert [c.name for c in r.key_columns] == ["region", "id"]
    by = {c.name: c for c in r.columns}
    assert (by["id"].type_oid, by["id"].type_name, by["id"].optional) == (20, "bigint", False)
    assert by["amount"].type_name == "numeric" and by["amount"].type_modifier == (10 << 16 | 2) + 4
    assert by["amount"].default == "0" and by["amount"].optional
    assert by["created"].type_name == "timestamp with time zone" and by["created"].default == "now()"
    assert by["tags"].type_name == "_int4" and by["tags"].type_oid == 1007
    assert by["state"].type_name == f"{s}.state"
    types = load_types(conn, [c.type_oid for c in r.columns])
    assert types[by["state"].type_oid].enum_labels == ("new", "paid")

    with pytest.raises(LookupError, match="does not exist"):
        relation_from_catalog(conn, s, "missing")


@pytest.mark.parametrize("identity, ddl, key", [
    ("d", "id int PRIMARY KEY, code text NOT NULL UNIQUE", ["id"]),
    ("f", "id int PRIMARY KEY, code text", ["id"]),  # FULL: the key is still the primary key (Debezium)
    ("f", "id int, code text", []),  # FULL without a primary key: no key
    ("i", "id int, code text NOT NULL", ["code"]),  # USING INDEX: the index's columns
    ("n", "id int, code text", []),
])
def test_the_key_follows_debeziums_rule_for_each_replica_identity(db, identity, ddl, key):
    _, conn, s = db
    conn.execute(f"CREATE TABLE {s}.t ({ddl})")
    if identity == "i":
        conn.execute(f"CREATE UNIQUE INDEX t_code ON {s}.t (code)")
        conn.execute(f"ALTER TABLE {s}.t REPLICA IDENTITY USING INDEX t_code")
    elif identity != "d":
        conn.execute(f"ALTER TABLE {s}.t REPLICA IDENTITY {'FULL' if identity == 'f' else 'NOTHING'}")
    r = relation_from_catalog(conn, s, "t")
    assert r.replica_identity == identity and [c.name for c in r.key_columns] == key


def test_rows_are_read_as_of_the_exported_snapshot(db):
    dsn, conn, s = db
    conn.execute(f"CREATE TABLE {s}.items (id int PRIMARY KEY, name text)")
    conn.execute(f"INSERT INTO {s}.items SELECT g, 'item ' || g FROM generate_series(1, 5) g")
    with psycopg.connect(dsn) as exporter:  # holds the snapshot open, as the slot's creating session does
        exporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot_id = exporter.execute("SELECT pg_export_snapshot()").fetchone()[0]
        # changes after the snapshot: the stream will carry them, the snapshot must not
        conn.execute(f"INSERT INTO {s}.items VALUES (6, 'late')")
        conn.execute(f"UPDATE {s}.items SET name = 'renamed' WHERE id = 1")
        conn.execute(f"DELETE FROM {s}.items WHERE id = 2")

        with psycopg.connect(dsn, autocommit=True) as reader, snapshot_transaction(reader, snapshot_id):
            relation = relation_from_catalog(reader, s, "items")
            rows = [r for chunk in read_table(reader, relation, chunk_size=2) for r in chunk]

    assert rows == [(str(i), f"item {i}") for i in range(1, 6)]


def test_a_stopped_read_resumes_after_the_last_key_with_nothing_lost_or_repeated(db):
    dsn, conn, s = db
    conn.execute(f"CREATE TABLE {s}.events (day date, seq int, note text, PRIMARY KEY (day, seq))")
    conn.execute(f"INSERT INTO {s}.events SELECT DATE '2024-01-01' + (g % 4), g, 'n' || g "
                 f"FROM generate_series(1, 23) g")
    relation = relation_from_catalog(conn, s, "events")
    with psycopg.connect(dsn, autocommit=True) as reader, snapshot_transaction(reader, None):
        expected = [r for chunk in read_table(reader, relation, chunk_size=100) for r in chunk]

    # a first run reads two chunks of 5 and is stopped; its offset keeps the table and the last key
    with psycopg.connect(dsn, autocommit=True) as reader, snapshot_transaction(reader, None):
        chunks = read_table(reader, relation, chunk_size=5)
        first = next(chunks) + next(chunks)
        chunks.close()
    offset = {"table": f"{s}.events", "last_key": key_of(relation, first[-1])}
    assert offset["last_key"] == [first[-1][0], first[-1][1]]

    with psycopg.connect(dsn, autocommit=True) as reader, snapshot_transaction(reader, None):
        rest = [r for chunk in read_table(reader, relation, after_key=offset["last_key"], chunk_size=5)
                for r in chunk]

    assert first + rest == expected and len(expected) == 23
    assert expected == sorted(expected, key=lambda r: (r[0], int(r[1])))


def test_a_table_without_key_is_read_whole_and_cannot_resume(db):
    dsn, conn, s = db
    conn.execute(f"CREATE TABLE {s}.log (line text)")
    conn.execute(f"INSERT INTO {s}.log SELECT 'l' || g FROM generate_series(1, 7) g")
    relation = relation_from_catalog(conn, s, "log")
    with psycopg.connect(dsn, autocommit=True) as reader, snapshot_transaction(reader, None):
        chunks = list(read_table(reader, relation, chunk_size=3))
        assert [len(c) for c in chunks] == [3, 3, 1]
        with pytest.raises(ValueError, match="no key"):
            list(read_table(reader, relation, after_key=["x"]))


def test_snapshot_rows_become_debezium_read_events(db):
    dsn, conn, s = db
    conn.execute(f"CREATE TABLE {s}.accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), "
                 f"opened timestamptz, flags bool[])")
    conn.execute(f"INSERT INTO {s}.accounts VALUES (1, 'ann', 10.5, '2024-03-01 10:00:00+02', '{{t,NULL}}'), "
                 f"(2, 'bob', NULL, NULL, NULL)")
    config = CdcConfig.parse({"database.hostname": "h", "database.dbname": "test", "database.user": "u",
                              "topic.prefix": "shop"})
    with psycopg.connect(dsn, autocommit=True) as reader, snapshot_transaction(reader, None):
        relation = relation_from_catalog(reader, s, "accounts")
        builder = EventBuilder(config, load_types(reader, [c.type_oid for c in relation.columns]))
        rows = [r for chunk in read_table(reader, relation) for r in chunk]
    events = [builder.read_event(relation, row, SourceInfo(commit_ts_us=1, lsn=99, snapshot=marker))
              for row, marker in zip(rows, ("first", "last"))]
    conv = JsonConverter()
    conv.configure({"schemas.enable": False}, False)
    import json
    payloads = [json.loads(conv.from_connect_data(e.topic, e.value_schema, e.value)) for e in events]

    assert events[0].topic == f"shop.{s}.accounts" and events[0].key["id"] == 1
    assert payloads[0]["after"] == {"id": 1, "owner": "ann", "balance": "BBo=", "opened": "2024-03-01T08:00:00.000000Z",
                                    "flags": [True, None]}
    assert payloads[1]["after"] == {"id": 2, "owner": "bob", "balance": None, "opened": None, "flags": None}
    assert [p["source"]["snapshot"] for p in payloads] == ["first", "last"]


def test_snapshot_tables_follow_the_filters(db):
    _, conn, s = db
    for t in ("a", "b", "c_tmp"):
        conn.execute(f"CREATE TABLE {s}.{t} (id int PRIMARY KEY)")
    config = CdcConfig.parse({"database.hostname": "h", "database.dbname": "test", "database.user": "u",
                              "topic.prefix": "p", "table.include.list": rf"{s}\.(a|b)",
                              "snapshot.include.collection.list": rf"{s}\.b"})
    assert snapshot_tables(conn, config) == [(s, "b")]


def test_a_partitioned_table_is_snapshotted_as_its_partitions_like_its_changes_stream(db):
    _, conn, s = db
    conn.execute(f"CREATE TABLE {s}.m (id int, region text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)")
    conn.execute(f"CREATE TABLE {s}.m_eu PARTITION OF {s}.m FOR VALUES IN ('eu')")
    conn.execute(f"CREATE TABLE {s}.m_us PARTITION OF {s}.m FOR VALUES IN ('us')")
    config = CdcConfig.parse({"database.hostname": "h", "database.dbname": "test", "database.user": "u",
                              "topic.prefix": "p", "schema.include.list": s})
    assert snapshot_tables(conn, config) == [(s, "m_eu"), (s, "m_us")]  # each row once, under its partition


def test_under_a_real_slots_exported_snapshot_rows_end_where_the_slot_begins(cdc_db):
    from airflow_copycat.connectors.postgres_cdc.slot import create_slot_exporting_snapshot

    cdc_db.sql("CREATE TABLE public.stock (sku text PRIMARY KEY, qty int NOT NULL)")
    cdc_db.sql("INSERT INTO public.stock SELECT 'sku-' || lpad(g::text, 3, '0'), g FROM generate_series(1, 50) g")
    cdc_db.sql("CREATE PUBLICATION stock_pub FOR TABLE public.stock")
    kwargs = {k: v for k, v in cdc_db.info.items()}
    lsn, snapshot_id, holder = create_slot_exporting_snapshot(kwargs, "snapshot_test")
    try:
        # after the slot's consistent point: these belong to the stream, not to the snapshot
        cdc_db.sql("UPDATE public.stock SET qty = 0")
        cdc_db.sql("INSERT INTO public.stock VALUES ('sku-999', 1)")
        with psycopg.connect(cdc_db.url, autocommit=True) as reader, snapshot_transaction(reader, snapshot_id):
            holder.close()  # the importing transaction keeps the snapshot; the exporter may go
            relation = relation_from_catalog(reader, "public", "stock")
            rows = [r for chunk in read_table(reader, relation, chunk_size=16) for r in chunk]
    finally:
        holder.close()

    assert lsn > 0
    assert rows == [(f"sku-{g:03d}", str(g)) for g in range(1, 51)]
    changes = cdc_db.sql("SELECT count(*) FROM pg_logical_slot_peek_binary_changes('snapshot_test', NULL, NULL, "
                         "'proto_version', '1', 'publication_names', 'stock_pub') WHERE substr(data, 1, 1) IN "
                         "('I', 'U')")
    assert changes[0][0] == 51  # the 50 updates and the insert wait in the slot, after the rows read


def test_snapshot_transaction_needs_an_idle_autocommit_connection_and_ends_its_transaction(db):
    dsn, conn, s = db
    with psycopg.connect(dsn) as not_autocommit, pytest.raises(ValueError, match="autocommit"):
        with snapshot_transaction(not_autocommit, None):
            pass
    with psycopg.connect(dsn, autocommit=True) as reader:
        with pytest.raises(psycopg.errors.UndefinedTable):
            with snapshot_transaction(reader, None):
                reader.execute(f"SELECT * FROM {s}.missing")
        assert reader.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # rolled back, usable
        with pytest.raises(psycopg.Error, match="snapshot"):  # an exported snapshot that no longer exists
            with snapshot_transaction(reader, "00000003-0000001B-1"):
                pass
        assert reader.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
