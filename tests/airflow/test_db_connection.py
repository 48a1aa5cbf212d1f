"""Database connectors reading their database from an Airflow connection (``airflow.conn.id``),
in real Airflow against the real PostgreSQL and MariaDB of this machine."""

from __future__ import annotations

import json
import os

import pytest
import sqlalchemy as sa
from airflow.sdk.log import redact

from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.hooks.database import resolve_db_connection
from airflow_copycat.runtime.connector_config import HIDDEN


@pytest.fixture
def airflow_conn():
    """``airflow_conn(conn_id, **fields)`` defines a connection as ``AIRFLOW_CONN_*`` (as in production)."""
    names = []

    def define(conn_id: str, **fields) -> str:
        name = f"AIRFLOW_CONN_{conn_id.upper()}"
        os.environ[name] = json.dumps(fields)
        names.append(name)
        return conn_id

    yield define
    for name in names:
        os.environ.pop(name, None)


@pytest.fixture
def pg_table(postgres_url, unique):
    engine = sa.create_engine(postgres_url)
    name = f"people_{unique}"
    table = sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                     sa.Column("who", sa.Text, nullable=False))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": i, "who": f"person {i}"} for i in range(1, 8)])
    yield name
    table.drop(engine)
    engine.dispose()


def test_a_postgres_connection_fills_url_user_and_password(airflow_conn, unique):
    conn_id = airflow_conn(f"db_{unique}", conn_type="postgres", host="127.0.0.1", port=5432, schema="test",
                           login="root", password="p@ss:word/1", extra={"sslmode": "disable", "cursor": "dictcursor"})
    out = resolve_db_connection({"name": "x", "airflow.conn.id": conn_id, "mode": "bulk"})
    assert out["connection.url"] == "postgresql+psycopg://127.0.0.1:5432/test?sslmode=disable"
    assert (out["connection.user"], out["connection.password"]) == ("root", "p@ss:word/1")
    assert out["mode"] == "bulk"


def test_a_sqlite_connection_names_the_file_and_mysql_maps_to_pymysql(airflow_conn, unique, tmp_path):
    lite = airflow_conn(f"lite_{unique}", conn_type="sqlite", host=str(tmp_path / "shop.db"))
    assert resolve_db_connection({"airflow.conn.id": lite})["connection.url"] == f"sqlite:///{tmp_path}/shop.db"
    maria = airflow_conn(f"maria_{unique}", conn_type="mysql", host="127.0.0.1", port=3306, schema="test",
                         login="root")
    out = resolve_db_connection({"airflow.conn.id": maria})
    assert out["connection.url"] == "mysql+pymysql://127.0.0.1:3306/test" and "connection.password" not in out


def test_unknown_or_unsupported_connections_and_clashing_keys_are_named(airflow_conn, unique):
    with pytest.raises(ConfigException) as missing:
        resolve_db_connection({"name": "c", "airflow.conn.id": f"nope_{unique}"})
    assert "airflow.conn.id" in str(missing.value) and f"nope_{unique}" in str(missing.value)
    http = airflow_conn(f"http_{unique}", conn_type="http", host="example.com")
    with pytest.raises(ConfigException, match="connection type 'http'"):
        resolve_db_connection({"airflow.conn.id": http})
    pg = airflow_conn(f"pg_{unique}", conn_type="postgres", host="127.0.0.1", schema="test", password="hunter2")
    with pytest.raises(ConfigException) as clash:
        resolve_db_connection({"airflow.conn.id": pg, "connection.url": "sqlite://", "connection.password": "x"})
    text = str(clash.value)
    assert "connection.url" in text and "connection.password" in text and "hunter2" not in text


def test_a_dag_imports_a_table_through_an_airflow_connection_and_never_shows_its_password(
        make_dag, run_dag, airflow_conn, pg_table, unique, read_topic, test_worker_config):
    # Given a PostgreSQL connection with a password (trust auth ignores it; it must still stay hidden)
    password = f"pw-{unique}-secret"
    conn_id = airflow_conn(f"shop_{unique}", conn_type="postgres", host="127.0.0.1", port=5432, schema="test",
                           login="root", password=password)
    group = f"pg-{unique}"
    config = {"name": group, "connector.class": "JdbcSource", "airflow.conn.id": conn_id, "mode": "bulk",
              "table.whitelist": pg_table, "topic.prefix": f"{unique}-"}
    dag = make_dag(f"db_conn_{unique}", config, in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the table's rows reached Kafka
    assert result.state == "success", result.states()
    rows = read_topic(f"{unique}-{pg_table}")
    assert sorted(r["id"] for r in rows) == list(range(1, 8))
    # ... the plan shows the URL without a password, and hides the password key
    plan = result.xcom(f"{group}.plan", key="plan")
    task_config = plan["groups"][0]["tasks"][0]["config"]
    assert task_config["connection.url"] == "postgresql+psycopg://127.0.0.1:5432/test"
    assert task_config["connection.password"] == HIDDEN
    # ... and the password is in no XCom, and masked in the task log
    for _, _, _, value in result.xcoms():
        assert password not in json.dumps(value)
    assert password not in redact(result.log)


def test_a_clash_with_a_url_never_quotes_the_urls_password(airflow_conn, unique):
    conn_id = airflow_conn(f"pg2_{unique}", conn_type="postgres", host="127.0.0.1", schema="test")
    with pytest.raises(ConfigException) as clash:
        resolve_db_connection({"name": "x", "airflow.conn.id": conn_id,
                               "connection.url": "postgresql://u:s3cretPW42@h/db", "connection.user": "u"})
    assert "connection.url" in str(clash.value) and "s3cretPW42" not in str(clash.value)
