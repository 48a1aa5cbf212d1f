"""The example DAGs dags/postgres_cdc.py and dags/cdc_to_mariadb.py in real Airflow 3 (``dag.test()``), on
Spark: a PostgreSQL with wal_level=logical -> Debezium change events in the broker -> the JDBC sink with
ExtractNewRecordState into the real MariaDB. After each of two rounds (a CDC run, then a replay run, with
inserts, updates, deletes and NULLs over columns that have defaults in between) the MariaDB tables equal
the PostgreSQL tables, every row and column; the CDC finish XCom shows per table the events sent and
Debezium's offsets (the LSN) before and after the run.
"""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.util
import json
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.airflow.conftest import DAGS_FOLDER

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

CUSTOMERS = """CREATE TABLE customers (
    id int PRIMARY KEY, name text NOT NULL, email varchar(100), vip boolean NOT NULL DEFAULT false,
    note text DEFAULT 'none')"""
ORDERS = """CREATE TABLE orders (
    id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL DEFAULT 'NEW', qty int DEFAULT 1,
    amount numeric(10,2), ordered_at timestamp(3), ship_on date)"""


def install(name: str, replacements: list[tuple[str, str]]):
    """dags/<name> as it is, with this test's names (connector, topics, slot, tables: the broker, the offset
    topic and MariaDB's database are shared with other tests), loaded from the test dags folder."""
    text = (ROOT / "dags" / name).read_text()
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = DAGS_FOLDER / name
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"copycat_test_dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def normalized(value):
    """A value as both databases can compare it: booleans as 0/1 (MariaDB's BOOLEAN is TINYINT(1))."""
    if isinstance(value, bool):
        return int(value)
    return value


def pg_rows(db, table: str) -> list[tuple]:
    cur = db.conn.execute(f"SELECT * FROM {table} ORDER BY id")
    columns = [d.name for d in cur.description]
    return columns, [tuple(normalized(v) for v in row) for row in cur.fetchall()]


def maria_rows(engine, table: str, columns: list[str]) -> list[tuple]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM `{table}` ORDER BY id"))
        return [tuple(normalized(v) for v in row) for row in rows]


def assert_replica_equals_source(db, engine, unique: str) -> None:
    for table in ("customers", "orders"):
        columns, expected = pg_rows(db, table)
        assert maria_rows(engine, f"{table}_{unique}", columns) == expected, table


@pytest.fixture
def shop(postgres_cdc_url, unique):
    """A fresh database ``shop_<unique>`` on the logical cluster (dropped afterwards with its slots)."""
    from tests.support.cdc_databases import fresh_database

    with fresh_database(postgres_cdc_url, f"shop_{unique}") as db:
        yield db


def test_hourly_cdc_replayed_into_mariadb_stays_identical(kafka_conn, spark_default, run_dag, shop, mariadb_url, unique,
                                                          monkeypatch):
    # Given the shop database with customers and orders, the shop_pg and replica_db connections, Spark
    # (spark_default: the session's Spark Connect server), and the two example DAGs
    info = shop.info
    monkeypatch.setenv("AIRFLOW_CONN_SHOP_PG", json.dumps(
        {"conn_type": "postgres", "host": info.get("host", "127.0.0.1"), "port": int(info.get("port", 5432)),
         "schema": shop.dbname, "login": info.get("user", "postgres")}))
    maria = sa.engine.make_url(mariadb_url)
    monkeypatch.setenv("AIRFLOW_CONN_REPLICA_DB", json.dumps(
        {"conn_type": "mysql", "host": maria.host, "port": maria.port or 3306, "schema": maria.database,
         "login": maria.username, **({"password": maria.password} if maria.password else {})}))
    shop.sql(CUSTOMERS)
    shop.sql(ORDERS)
    shop.sql("INSERT INTO customers (id, name, email, vip) VALUES (1, 'Ada', 'ada@example.com', true), "
             "(2, 'Bob', NULL, false), (3, 'Cy', 'cy@example.com', false)")
    shop.sql("UPDATE customers SET note = NULL WHERE id = 3")  # NULL in a column with a default
    shop.sql("INSERT INTO orders SELECT g, 1 + g % 3, 'NEW', g, g * 1.25, "
             "timestamp '2026-11-24 10:00:00.123' + g * interval '1 minute', date '2026-12-01' + g "
             "FROM generate_series(1, 10) g")
    name, prefix = f"shop-cdc-{unique}", f"shop_{unique}"
    cdc = install("postgres_cdc.py", [
        ('"shop-cdc"', f'"{name}"'), ('"topic.prefix": "shop"', f'"topic.prefix": "{prefix}"'),
        ('"slot.name": "shop_cdc"', f'"slot.name": "slot_{unique}"'),
        ('"publication.name": "shop_cdc"', f'"publication.name": "pub_{unique}"')])
    sink_name = f"shop-cdc-to-mariadb-{unique}"
    replay = install("cdc_to_mariadb.py", [
        ('"shop-cdc-to-mariadb"', f'"{sink_name}"'), ('asset_alias("shop-cdc")', f'asset_alias("{name}")'),
        ('"shop\\\\.public\\\\..*"', f'"{prefix}\\\\.public\\\\..*"'),
        ('"shop\\\\.public\\\\.(.*)"', f'"{prefix}\\\\.public\\\\.(.*)"'), ('"$1"', f'"$1_{unique}"')])
    assert (cdc.dag_id, replay.dag_id) == ("copycat_postgres_cdc", "copycat_cdc_to_mariadb")
    engine = sa.create_engine(mariadb_url)
    try:
        # When the CDC DAG runs the first time (it creates the slot and snapshots), then the replay DAG
        first = run_dag(cdc)

        # Then the finish XCom counts the snapshot's rows per table and shows the offsets after it
        assert first.state == "success", first.states()
        summary = first.xcom(f"{name}.finish")
        assert summary["topics"] == {f"{prefix}.public.customers": 3, f"{prefix}.public.orders": 10}
        assert summary["tables"] == {"public.customers": {"read": 3}, "public.orders": {"read": 10}}
        (partition,) = [p for p in summary["partitions"] if "table" not in p["partition"]]
        assert partition["partition"] == {"server": prefix} and partition["offset_before"] is None
        assert isinstance(partition["offset_after"]["lsn"], int)
        lsn_after_first = partition["offset_after"]["lsn"]
        # and it announced both topics, which schedules the replay DAG
        events = {e["uri"].rsplit("/", 1)[1]: e for e in first.asset_events()}
        assert set(events) == {f"{prefix}.public.customers", f"{prefix}.public.orders"}
        assert all(e["aliases"] == [f"copycat/{name}"] for e in events.values())

        replayed = run_dag(replay)
        assert replayed.state == "success", replayed.states()
        # (MariaDB's upsert does not tell inserts from updates: the sink counts them as upserted)
        assert replayed.xcom(f"{sink_name}.finish")["tables"] == {
            f"customers_{unique}": {"upserted": 3}, f"orders_{unique}": {"upserted": 10}}
        # and MariaDB holds exactly PostgreSQL's rows, NULLs kept NULL where the columns have defaults
        assert_replica_equals_source(shop, engine, unique)

        # Given an hour of changes: inserts, updates (to NULL too), deletes, one transaction over both tables
        shop.sql("INSERT INTO customers (id, name, email, vip, note) VALUES (4, 'Dee', 'dee@example.com', true, "
                 "'new')")
        shop.sql("UPDATE customers SET email = 'bob@example.com', note = 'moved' WHERE id = 2")
        shop.sql("UPDATE customers SET note = NULL, vip = true WHERE id = 1")
        shop.sql("DELETE FROM customers WHERE id = 3")
        with shop.conn.transaction():
            shop.conn.execute("UPDATE orders SET status = 'SHIPPED', ship_on = date '2026-12-24' WHERE id IN (2, 5)")
            shop.conn.execute("UPDATE orders SET qty = NULL, amount = NULL WHERE id = 6")
            shop.conn.execute("DELETE FROM orders WHERE id = 7")
            shop.conn.execute("INSERT INTO orders (id, customer_id, amount, ordered_at) "
                              "VALUES (11, 4, 99.99, timestamp '2026-11-24 11:30:00.5')")

        # When both DAGs run again
        second = run_dag(cdc)
        assert second.state == "success", second.states()
        replayed = run_dag(replay)
        assert replayed.state == "success", replayed.states()

        # Then the CDC run sent exactly the changes, per table, from where the first run stopped
        summary = second.xcom(f"{name}.finish")
        assert summary["tables"] == {"public.customers": {"inserted": 1, "updated": 2, "deleted": 1},
                                     "public.orders": {"inserted": 1, "updated": 3, "deleted": 1}}
        assert summary["topics"] == {f"{prefix}.public.customers": 5, f"{prefix}.public.orders": 6}  # + tombstones
        (partition,) = [p for p in summary["partitions"] if "table" not in p["partition"]]
        assert partition["offset_before"]["lsn"] == lsn_after_first < partition["offset_after"]["lsn"]
        # the run task's result shows the slot as the run found and left it: confirmed up to what it read
        (group,) = [v for t, m, k, v in second.xcoms() if t == f"{name}.run" and k == "return_value"]
        metrics = group["tasks"][0]["metrics"]
        assert metrics["wal_before"]["confirmed_flush_lsn"] != metrics["wal_after"]["confirmed_flush_lsn"]
        assert metrics["wal_after"]["unconfirmed_bytes"] < 1 << 20
        # and the replay applied them: upserts and deletes, MariaDB equal to PostgreSQL, row by row
        assert replayed.xcom(f"{sink_name}.finish")["tables"] == {
            f"customers_{unique}": {"upserted": 3, "deleted": 1}, f"orders_{unique}": {"upserted": 4, "deleted": 1}}
        assert_replica_equals_source(shop, engine, unique)
        with engine.connect() as conn:
            assert conn.execute(sa.text(f"SELECT note FROM `customers_{unique}` WHERE id = 1")).scalar_one() is None
            row = conn.execute(sa.text(f"SELECT amount, ordered_at FROM `orders_{unique}` WHERE id = 11")).one()
        assert row == (decimal.Decimal("99.99"), dt.datetime(2026, 11, 24, 11, 30, 0, 500000))
    finally:
        with engine.begin() as conn:
            for table in ("customers", "orders"):
                conn.execute(sa.text(f"DROP TABLE IF EXISTS `{table}_{unique}`"))
            conn.execute(sa.text("DELETE FROM copycat_sink_offsets WHERE connector = :c"), {"c": sink_name})
        engine.dispose()
