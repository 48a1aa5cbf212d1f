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


# -- any connection type through its provider's common-sql hook ---------------------------------------------

def _engine(config: dict):
    """The engine a JDBC connector task opens from a resolved config (what runs on Spark executors)."""
    from airflow_copycat.connectors.jdbc.source import create_engine

    return create_engine(config)


def test_a_postgres_connection_goes_through_the_providers_hook_and_its_extras_reach_psycopg_and_adbc(
        airflow_conn, unique):
    # Given a postgres connection (the postgres provider is installed) with libpq extras and hook-only extras
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    from airflow_copycat.connectors.jdbc.arrow_reader import AdbcConnection

    conn_id = airflow_conn(f"pg_extras_{unique}", conn_type="postgres", host="127.0.0.1", port=5432, schema="test",
                           login="root", password=f"pw-{unique}",
                           extra={"sslmode": "disable", "options": "-c statement_timeout=4321",
                                  "application_name": f"copycat-{unique}", "connect_timeout": 7,
                                  "cursor": "dictcursor", "sqlalchemy_query": {"target_session_attrs": "any"}})
    assert isinstance(sql_hook_of(conn_id), PostgresHook)

    # When the connector config names it
    out = resolve_db_connection({"name": "x", "airflow.conn.id": conn_id})

    # Then the URL is the hook's (its sqlalchemy_query too), on psycopg 3, with the extras but no password
    url = sa.engine.make_url(out["connection.url"])
    assert url.drivername == "postgresql+psycopg" and url.password is None and url.username is None
    assert dict(url.query) == {"target_session_attrs": "any", "sslmode": "disable",
                               "options": "-c statement_timeout=4321", "application_name": f"copycat-{unique}",
                               "connect_timeout": "7"}
    assert (out["connection.user"], out["connection.password"]) == ("root", f"pw-{unique}")
    # ... and the session psycopg opens has them, and so has the batch path's ADBC (libpq) session
    engine = _engine(out)
    try:
        with engine.connect() as c:
            assert c.execute(sa.text("SHOW statement_timeout")).scalar() == "4321ms"
            assert c.execute(sa.text("SHOW application_name")).scalar() == f"copycat-{unique}"
        adbc = AdbcConnection(engine)
        try:
            assert adbc.query("SELECT current_setting('statement_timeout')").column(0).to_pylist() == ["4321ms"]
        finally:
            adbc.close()
    finally:
        engine.dispose()


def sql_hook_of(conn_id: str):
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).get_hook()


def test_an_explicit_sqlalchemy_scheme_is_kept_and_the_default_driver_is_replaced(airflow_conn, unique):
    chosen = airflow_conn(f"pg_scheme_{unique}", conn_type="postgres", host="127.0.0.1", schema="test",
                          extra={"sqlalchemy_scheme": "postgresql+psycopg2"})
    assert resolve_db_connection({"airflow.conn.id": chosen})["connection.url"] == \
        "postgresql+psycopg2://127.0.0.1/test"


def test_iam_authentication_goes_through_the_hook_and_a_failure_names_the_key(airflow_conn, unique):
    # Given a postgres connection asking for an AWS IAM token (the amazon provider is not installed here)
    conn_id = airflow_conn(f"pg_iam_{unique}", conn_type="postgres", host="db.example.com", schema="test",
                           login="iam_user", password="never-shown-1234", extra={"iam": True})
    # When it is resolved, Then the hook's IAM path ran, and its failure is a config problem of the key
    with pytest.raises(ConfigException) as e:
        resolve_db_connection({"name": "iam", "airflow.conn.id": conn_id})
    text = str(e.value)
    assert "airflow.conn.id" in text and conn_id in text and "PostgresHook" in text and "amazon" in text
    assert "never-shown-1234" not in text


def test_a_mariadb_connection_passes_its_charset_to_pymysql(airflow_conn, unique, mariadb_url):
    # Given a mysql connection (the mysql provider needs mysqlclient and is not installed: read directly)
    conn_id = airflow_conn(f"maria_cs_{unique}", conn_type="mysql", host="127.0.0.1", port=3306, schema="test",
                           login="root", extra={"charset": "latin1", "cursor": "sscursor", "local_infile": True})
    out = resolve_db_connection({"airflow.conn.id": conn_id})
    assert out["connection.url"] == "mysql+pymysql://127.0.0.1:3306/test?charset=latin1"
    # When a connector task connects, Then the session uses that character set
    engine = _engine(out)
    try:
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT @@character_set_client")).scalar() == "latin1"
    finally:
        engine.dispose()


def test_a_sqlite_connection_goes_through_the_sqlite_providers_hook(airflow_conn, unique, tmp_path):
    from airflow.providers.sqlite.hooks.sqlite import SqliteHook

    db = tmp_path / "shop.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE t (id INTEGER)"))
        c.execute(sa.text("INSERT INTO t VALUES (1), (2)"))
    engine.dispose()
    conn_id = airflow_conn(f"lite_hook_{unique}", conn_type="sqlite", host=str(db))
    assert isinstance(sql_hook_of(conn_id), SqliteHook)
    out = resolve_db_connection({"airflow.conn.id": conn_id})
    engine = _engine(out)
    try:
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT count(*) FROM t")).scalar() == 2
    finally:
        engine.dispose()


def test_a_connection_whose_hook_is_no_sql_hook_is_refused(airflow_conn, unique):
    kafka = airflow_conn(f"kafka_not_db_{unique}", conn_type="kafka", extra={"bootstrap.servers": "b:9092"})
    with pytest.raises(ConfigException, match="no SQL database connection") as e:
        resolve_db_connection({"airflow.conn.id": kafka})
    assert "airflow.conn.id" in str(e.value)


_WITHOUT_SQL_PROVIDERS = '''
import importlib.abc, json, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        for blocked in ("airflow.providers.postgres.hooks", "airflow.providers.sqlite.hooks"):
            if name == blocked or name.startswith(blocked + "."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Block())
from airflow_copycat.hooks.database import resolve_db_connection

out = resolve_db_connection({"airflow.conn.id": "pg_no_provider"})
print(json.dumps(out))
'''


def test_postgres_mysql_and_sqlite_connections_work_without_their_providers(airflow_db, unique):
    # Given an interpreter in which the postgres provider's hooks cannot be imported
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "AIRFLOW_CONN_PG_NO_PROVIDER": json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": 5432, "schema": "test", "login": "root",
         "password": "pw-direct", "extra": {"sslmode": "disable", "cursor": "dictcursor"}})}
    # When a connection of that type is resolved
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_SQL_PROVIDERS], capture_output=True, text=True,
                          timeout=180, cwd=Path(__file__).resolve().parents[2], env=env)
    # Then it is read directly, as before the hooks were used
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"airflow.conn.id": "pg_no_provider", "connection.url": "postgresql+psycopg://127.0.0.1:5432/test"
                   "?sslmode=disable", "connection.user": "root", "connection.password": "pw-direct"}


def test_mysql_tls_extras_turn_tls_on_in_pymysql_or_fail_the_config(airflow_conn, unique, mariadb_url):
    # Given mysql connections with the MySQL provider's TLS extras (this MariaDB has TLS disabled)
    required = airflow_conn(f"maria_tls_{unique}", conn_type="mysql", host="127.0.0.1", port=3306, schema="test",
                            login="root", extra={"ssl_mode": "REQUIRED"})
    verify = airflow_conn(f"maria_ca_{unique}", conn_type="mysql", host="127.0.0.1", schema="test",
                          extra={"ssl_mode": "VERIFY_IDENTITY", "ssl": {"ca": "/etc/ssl/ca.pem"}})
    no_ca = airflow_conn(f"maria_noca_{unique}", conn_type="mysql", host="127.0.0.1", schema="test",
                         extra={"ssl_mode": "VERIFY_CA"})
    # When they are resolved, Then TLS is asked of PyMySQL, never silently dropped
    out = resolve_db_connection({"airflow.conn.id": required})
    assert out["connection.url"] == "mysql+pymysql://127.0.0.1:3306/test?ssl_check_hostname=false"
    engine = _engine(out)
    try:
        with pytest.raises(sa.exc.OperationalError, match="SSL is required"):
            engine.connect()
    finally:
        engine.dispose()
    assert resolve_db_connection({"airflow.conn.id": verify})["connection.url"] == \
        "mysql+pymysql://127.0.0.1/test?ssl_ca=%2Fetc%2Fssl%2Fca.pem&ssl_check_hostname=true"
    with pytest.raises(ConfigException, match="VERIFY_CA, which needs the CA"):
        resolve_db_connection({"airflow.conn.id": no_ca})
