"""Edge cases an independent review found: SQLite timestamps stored as text in another format, DST gaps
in db.timezone, timestamp columns of mixed zone kinds, SQLite rowid keys, queries ending in a comment,
and JDBC URL properties. Each runs through the real plan, source loop and broker."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from airflow_copycat.connectors.jdbc.config import to_sqlalchemy_url
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig
from tests.jdbc.reader_helpers import payloads, run


def _sqlite(tmp_path, ddl: str, rows: list[str]) -> str:
    url = f"sqlite:///{tmp_path}/edge.db"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(ddl)
        for row in rows:
            conn.exec_driver_sql(row)
    engine.dispose()
    return url


@pytest.mark.parametrize("mode", ["timestamp+incrementing", "timestamp"])
def test_sqlite_timestamps_without_fractions_share_a_timestamp_across_batches(tmp_path, worker_props,
                                                                              kafka_bootstrap, unique, mode):
    # Given rows written as SQLite's CURRENT_TIMESTAMP writes them (no fraction), five sharing one second,
    # read two per batch: the bound values carry microseconds, so text comparison would not match
    url = _sqlite(tmp_path, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, ts TIMESTAMP NOT NULL "
                            "DEFAULT CURRENT_TIMESTAMP)",
                  [f"INSERT INTO t (id, ts) VALUES ({i}, '2024-01-01 10:00:00')" for i in range(1, 6)]
                  + ["INSERT INTO t (id, ts) VALUES (6, '2024-01-01 10:00:01')"])
    config = {"name": f"sq-{unique}", "connector.class": "JdbcSource", "connection.url": url, "mode": mode,
              "timestamp.column.name": "ts", "incrementing.column.name": "id", "batch.max.rows": 2,
              "topic.prefix": f"sq{unique}-", "copycat.run.max.ms": 60000}
    # When it runs, then every row arrives exactly once and the run ends by itself
    assert run(config, worker_props) == 6
    assert sorted(p["id"] for p in payloads(kafka_bootstrap, f"sq{unique}-t")) == [1, 2, 3, 4, 5, 6]
    assert run(config, worker_props) == 0


def test_a_naive_timestamp_in_a_dst_gap_fails_the_task_naming_it(tmp_path, worker_props, kafka_bootstrap, unique):
    # 02:30 on 2024-03-31 does not exist in Europe/Berlin: its instant does not bind back to it, so an offset
    # after it would skip or repeat rows. The rows before it arrive, then the task fails naming the value.
    stamps = [dt.datetime(2024, 3, 31, 1, 50), dt.datetime(2024, 3, 31, 2, 30), dt.datetime(2024, 3, 31, 3, 10)]
    url = _sqlite(tmp_path, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, ts DATETIME NOT NULL)",
                  [f"INSERT INTO t VALUES ({i}, '{t.isoformat(' ')}.000000')" for i, t in enumerate(stamps, 1)])
    config = {"name": f"dst-{unique}", "connector.class": "JdbcSource", "connection.url": url,
              "mode": "timestamp+incrementing", "timestamp.column.name": "ts", "incrementing.column.name": "id",
              "batch.max.rows": 1, "db.timezone": "Europe/Berlin", "topic.prefix": f"dst{unique}-"}
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    [task] = run_group(plan["groups"][0], worker_props)["tasks"]
    assert task["status"] == "failed" and "2024-03-31 02:30:00" in task["error"] and "daylight-saving" in task["error"]
    assert [p["id"] for p in payloads(kafka_bootstrap, f"dst{unique}-t")] == [1]
    # ... and with the zone the values were written in (UTC here) every row is read
    assert run(dict(config, name=f"dst2-{unique}", **{"db.timezone": "UTC"}), worker_props) == 3


def test_timestamp_columns_of_mixed_zone_kinds_fail_naming_them(mariadb_url, worker_props, unique):
    # MySQL TIMESTAMP (UTC) coalesced with DATETIME (db.timezone): raw comparisons would never match the offsets
    table = f"mixed_{unique}"
    engine = sa.create_engine(mariadb_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, modified TIMESTAMP NULL, "
                             f"created DATETIME NOT NULL)")
        conn.exec_driver_sql(f"INSERT INTO {table} VALUES (1, NULL, '2024-01-01 10:00:00')")
    try:
        config = {"name": f"mixed-{unique}", "connector.class": "JdbcSource", "connection.url": mariadb_url,
                  "mode": "timestamp+incrementing", "timestamp.column.name": "modified,created",
                  "incrementing.column.name": "id", "validate.non.null": False, "db.timezone": "Europe/Berlin",
                  "table.whitelist": table, "topic.prefix": f"mx{unique}-"}
        plan = make_plan(config, WorkerConfig(worker_props, env={}))
        [task] = run_group(plan["groups"][0], worker_props)["tasks"]
        assert task["status"] == "failed" and task["records"] == 0
        assert "mix time-zone kinds" in task["error"] and "modified" in task["error"]
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {table}")
        engine.dispose()


def test_mariadb_set_and_double_columns_arrive_as_the_server_gives_them(mariadb_url, worker_props, kafka_bootstrap,
                                                                          unique):
    # Given a MariaDB table with a SET column and a DOUBLE one (SQLAlchemy would make a Python set and a
    # Decimal of 10 places of them)
    engine = sa.create_engine(mariadb_url)
    table = f"sets_{unique}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, tags SET('x','y','z'), d DOUBLE)")
        conn.exec_driver_sql(f"INSERT INTO {table} VALUES (1, 'y,x', 0.1), (2, '', 1.5e-12), (3, NULL, NULL)")
    try:
        config = {"name": f"sets-{unique}", "connector.class": "JdbcSource", "connection.url": mariadb_url,
                  "mode": "incrementing", "incrementing.column.name": "id", "table.whitelist": table,
                  "topic.prefix": f"sets{unique}-"}
        # When it runs, then the SET is the server's text, its members in the column's order, and the
        # DOUBLE the float it holds
        assert run(config, worker_props) == 3
        got = sorted((p["id"], p["tags"], p["d"]) for p in payloads(kafka_bootstrap, f"sets{unique}-{table}"))
        assert got == [(1, "x,y", 0.1), (2, "", 1.5e-12), (3, None, None)]
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        engine.dispose()


def test_a_sqlite_integer_primary_key_is_a_valid_incrementing_column(tmp_path, worker_props, kafka_bootstrap,
                                                                     unique):
    # INTEGER PRIMARY KEY is SQLite's rowid: never NULL, though reflection says nullable
    url = _sqlite(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)",
                  ["INSERT INTO t (v) VALUES ('a')", "INSERT INTO t (v) VALUES ('b')"])
    config = {"name": f"rowid-{unique}", "connector.class": "JdbcSource", "connection.url": url,
              "mode": "incrementing", "incrementing.column.name": "id", "topic.prefix": f"rw{unique}-"}
    assert run(config, worker_props) == 2


def test_a_query_ending_in_a_line_comment_runs(tmp_path, worker_props, kafka_bootstrap, unique):
    url = _sqlite(tmp_path, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, v TEXT)",
                  ["INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')"])
    config = {"name": f"qc-{unique}", "connector.class": "JdbcSource", "connection.url": url,
              "mode": "incrementing", "incrementing.column.name": "id", "topic.prefix": f"qc{unique}",
              "query": "SELECT id, v FROM t -- every row;"}
    assert run(config, worker_props) == 2
    assert [p["v"] for p in payloads(kafka_bootstrap, f"qc{unique}")] == ["a", "b"]


def test_jdbc_url_properties_are_kept_for_libpq_and_tls_ones_are_never_dropped_silently():
    url = to_sqlalchemy_url("jdbc:postgresql://db:5432/shop?user=u&sslmode=require&connect_timeout=5")
    assert url.query == {"sslmode": "require", "connect_timeout": "5"} and url.username == "u"
    with pytest.raises(ValueError, match="useSSL"):
        to_sqlalchemy_url("jdbc:mysql://db:3306/shop?useSSL=true")


@pytest.mark.parametrize("url", ["jdbc:postgresql://app:Kx7pQ2mZ9w/rest@db.example:5432/shop",
                                 "jdbc:mysql://app:Kx7pQ2mZ9w?rest@db.example:3306/shop",
                                 "jdbc:mariadb://app:Kx7pQ2mZ9w#rest@db.example:3306/shop"])
def test_a_jdbc_url_with_an_unencoded_slash_question_mark_or_hash_in_its_password_fails_without_quoting_it(url):
    """urlsplit ends the host at the first '/', '?' or '#', leaving the password's head where the port
    should be: the problem says so in a fixed text, never quoting a part of the URL."""
    from airflow_copycat.runtime.plan import validate_only

    config = {"name": "j", "connector.class": "JdbcSource", "mode": "bulk", "table.whitelist": "t",
              "topic.prefix": "p-", "connection.url": url}
    (problem,) = validate_only(config)
    assert "Kx7pQ2mZ9w" not in problem and "port that is not a number" in problem
    with pytest.raises(ValueError) as raised:
        to_sqlalchemy_url(url)
    assert "Kx7pQ2mZ9w" not in str(raised.value)


def test_a_database_url_in_a_jdbc_message_hides_its_password_and_secret_query_values():
    """Messages name the database by its URL: render_as_string(hide_password=True) keeps libpq's
    sslpassword (which an Airflow connection's extra puts in the query), so it is hidden as well."""
    from airflow_copycat.connectors.jdbc.source import _safe_url

    engine = sa.create_engine("postgresql+psycopg://postgres:DbPw-1234567@127.0.0.1:5432/test"
                              "?sslmode=disable&sslpassword=SslKeyPw7531902")
    try:
        shown = _safe_url(engine)
    finally:
        engine.dispose()
    assert "SslKeyPw7531902" not in shown and "DbPw-1234567" not in shown
    assert shown.startswith("postgresql+psycopg://postgres:") and "127.0.0.1:5432/test?sslmode=disable" in shown
