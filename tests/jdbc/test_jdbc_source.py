"""The JDBC source against SQLite, real PostgreSQL and real MariaDB, through the real source loop and broker."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import time

import pytest
import sqlalchemy as sa

from airflow_copycat.connect import ConfigException
from airflow_copycat.connect.data import Decimal, Timestamp, Type
from airflow_copycat.connectors.jdbc import JdbcSourceConnector, JdbcSourceTask
from airflow_copycat.connectors.jdbc.config import to_sqlalchemy_url
from airflow_copycat.connect import SourceBatch
from airflow_copycat.connect.task import OffsetStorageReader, SourceTaskContext
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.plugins import resolve_connector
from airflow_copycat.runtime.worker import WorkerConfig
from tests.jdbc.reader_helpers import jdbc_config, payloads, run

T0 = dt.datetime(2024, 1, 1, 12, 0, 0)


def _events(db, name, ts=True):
    cols = [sa.Column("id", sa.Integer, primary_key=True, autoincrement=False), sa.Column("v", sa.String(50))]
    if ts:
        cols.append(sa.Column("ts", sa.DateTime, nullable=False))
    return db.create(sa.Table(name, sa.MetaData(), *cols))


def _config(db, unique, mode, name, **extra):
    return jdbc_config(db.url, mode, **{"name": f"jdbc-{unique}", "topic.prefix": f"p{unique}-", "tasks.max": 1,
                                        "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
                                        "table.whitelist": name, **extra})


@pytest.mark.parametrize("mode", ["incrementing", "timestamp", "timestamp+incrementing"])
def test_incremental_modes_across_runs_miss_and_duplicate_nothing(db, worker_props, kafka_bootstrap, unique, mode):
    name = f"ev_{unique}"
    table = _events(db, name)
    config = _config(db, unique, mode, name, **{"batch.max.rows": 2})
    db.insert(table, [{"id": i, "v": f"r{i}", "ts": T0 + dt.timedelta(seconds=i)} for i in range(1, 6)])
    assert run(config, worker_props) == 5
    db.insert(table, [{"id": i, "v": f"r{i}", "ts": T0 + dt.timedelta(seconds=i)} for i in range(6, 9)])
    assert run(config, worker_props) == 3
    assert run(config, worker_props) == 0
    db.insert(table, [{"id": 9, "v": "r9", "ts": T0 + dt.timedelta(seconds=9)}])
    assert run(config, worker_props) == 1
    got = payloads(kafka_bootstrap, f"p{unique}-{name}")
    assert sorted(p["id"] for p in got) == list(range(1, 10))


@pytest.mark.parametrize("mode", ["timestamp", "timestamp+incrementing"])
def test_rows_sharing_a_timestamp_across_batch_boundary(db, worker_props, kafka_bootstrap, unique, mode):
    name = f"tie_{unique}"
    table = _events(db, name)
    config = _config(db, unique, mode, name, **{"batch.max.rows": 2})
    db.insert(table, [{"id": i, "v": "same", "ts": T0} for i in range(1, 6)])
    assert run(config, worker_props) == 5
    db.insert(table, [{"id": i, "v": "later", "ts": T0 + dt.timedelta(seconds=1)} for i in range(6, 9)])
    assert run(config, worker_props) == 3
    got = payloads(kafka_bootstrap, f"p{unique}-{name}")
    assert sorted(p["id"] for p in got) == list(range(1, 9))


def test_timestamp_incrementing_resumes_inside_a_timestamp_group(db, tmp_path, unique):
    # The task is stopped after 2 of 5 rows sharing one timestamp; a new task from that offset reads the other 3
    name = f"grp_{unique}"
    table = _events(db, name)
    db.insert(table, [{"id": i, "v": "same", "ts": T0} for i in range(1, 6)])
    config = _config(db, unique, "timestamp+incrementing", name, **{"batch.max.rows": 2})
    first = _task(config, {})
    batch = _poll(first)
    first.stop()
    assert [r.value.get("id") for r in batch] == [1, 2]
    offset = batch[-1].source_offset
    assert offset["incrementing"] == 2 and offset["timestamp"] == Timestamp.from_logical(T0)
    second = _task(config, {json.dumps(batch[-1].source_partition, sort_keys=True, separators=(",", ":")): offset})
    rest = []
    while (b := _poll(second)) is not None:
        rest += b
    second.stop()
    assert [r.value.get("id") for r in rest] == [3, 4, 5]


class _Reader(OffsetStorageReader):
    def __init__(self, offsets):
        self._o = offsets

    def offsets(self, partitions):
        from airflow_copycat.connect.assignment import canonical

        return {canonical(p): self._o[canonical(p)] for p in partitions if canonical(p) in self._o}



def _poll(task):
    """One ``poll()`` as records: a batch stands for its ``to_records()`` (connect/batch.py)."""
    items = task.poll()
    if items is None:
        return None
    return [r for item in items for r in (item.to_records() if isinstance(item, SourceBatch) else [item])]

def _task(config, offsets):
    values = JdbcSourceConnector.parse_config(config)
    conn = JdbcSourceConnector()
    conn.start(values)
    task_config = conn.task_configs(1)[0]
    conn.stop()
    task = JdbcSourceTask()
    task.initialize(SourceTaskContext(task_config, _Reader(offsets)))
    task.start(task_config)
    return task


def test_late_commit_with_older_timestamp_inside_the_delay_window(db, worker_props, kafka_bootstrap, unique):
    name = f"late_{unique}"
    table = _events(db, name)
    config = _config(db, unique, "timestamp+incrementing", name, **{"timestamp.delay.interval.ms": 3000})
    with db.engine.connect() as conn:
        from airflow_copycat.connectors.jdbc.source import db_now

        now = db_now(conn).replace(tzinfo=None)
    db.insert(table, [{"id": 1, "v": "old", "ts": now - dt.timedelta(minutes=5)}])
    db.insert(table, [{"id": 2, "v": "newer", "ts": now - dt.timedelta(seconds=1)}])
    assert run(config, worker_props) == 1  # id 2 is inside the delay window: not read yet
    # a transaction that started earlier commits now, with a timestamp older than id 2's
    db.insert(table, [{"id": 3, "v": "late", "ts": now - dt.timedelta(seconds=2)}])
    time.sleep(3.2)
    assert run(config, worker_props) == 2
    got = payloads(kafka_bootstrap, f"p{unique}-{name}")
    assert sorted(p["id"] for p in got) == [1, 2, 3]


def test_bulk_reads_the_whole_table_each_run(db, worker_props, kafka_bootstrap, unique):
    name = f"bulk_{unique}"
    table = _events(db, name, ts=False)
    db.insert(table, [{"id": i, "v": f"r{i}"} for i in range(1, 4)])
    config = _config(db, unique, "bulk", name, **{"batch.max.rows": 2})
    assert run(config, worker_props) == 3
    assert run(config, worker_props) == 3
    assert JdbcSourceConnector().exactly_once_support({"mode": "bulk"}) is False
    assert JdbcSourceConnector().exactly_once_support({"mode": "timestamp+incrementing"}) is True


def test_odd_table_and_column_names_are_quoted(db, worker_props, kafka_bootstrap, unique):
    name = f'x"; DROP TABLE y; -- {unique}'
    if db.kind == "mariadb":
        name = f"x`; DROP TABLE y; -- {unique}"[:60]
    table = db.create(sa.Table(name, sa.MetaData(),
                               sa.Column("my id", sa.Integer, primary_key=True, autoincrement=False),
                               sa.Column('we"ird', sa.String(20))))
    db.insert(table, [{"my id": 1, 'we"ird': "a"}, {"my id": 2, 'we"ird': "b"}])
    config = _config(db, unique, "incrementing", name, **{"incrementing.column.name": "my id"})
    assert run(config, worker_props) == 2
    got = payloads(kafka_bootstrap, f"p{unique}-{name}")
    assert [(p["my id"], p['we"ird']) for p in got] == [(1, "a"), (2, "b")]
    assert sa.inspect(db.engine).has_table(name)


@pytest.mark.parametrize("mapping", ["none", "precision_only", "best_fit"])
def test_types_and_numeric_mapping(db, unique, mapping):
    name = f"types_{unique}"
    cols = [
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("small", sa.SmallInteger, nullable=False),
        sa.Column("num0", sa.Numeric(9, 0)),
        sa.Column("num2", sa.Numeric(10, 2)),
        sa.Column("big", sa.Numeric(30, 4)),
        sa.Column("f", sa.Float(precision=53)),
        sa.Column("b", sa.Boolean),
        sa.Column("d", sa.Date),
        sa.Column("t", sa.Time),
        sa.Column("ts", sa.DateTime),
        sa.Column("txt", sa.Text),
        sa.Column("bin", sa.LargeBinary),
        sa.Column("j", sa.JSON),
    ]
    table = db.create(sa.Table(name, sa.MetaData(), *cols))
    db.insert(table, [{"id": 7, "small": 3, "num0": 123456789, "num2": decimal.Decimal("12.34"),
                       "big": decimal.Decimal("123456789012345678901234.5678") if db.kind != "sqlite" else
                       decimal.Decimal("1234.5678"), "f": 1.5, "b": True, "d": dt.date(2024, 2, 29),
                       "t": dt.time(13, 14, 15), "ts": T0, "txt": "héllo", "bin": b"\x00\xff", "j": {"a": [1, 2]}}])
    config = _config(db, unique, "incrementing", name, **{"numeric.mapping": mapping})
    task = _task(config, {})
    [record] = _poll(task)
    task.stop()
    s = record.value_schema
    fs = {f.name: f.schema for f in s.fields}
    assert fs["id"].type is Type.INT64 and not fs["id"].optional
    assert fs["small"].type is Type.INT16
    assert fs["f"].type is Type.FLOAT64 and fs["b"].type is Type.BOOLEAN
    assert fs["d"].name.endswith("Date") and fs["t"].name.endswith("Time") and fs["ts"].name == Timestamp.LOGICAL_NAME
    assert fs["txt"].type is Type.STRING and fs["bin"].type is Type.BYTES and fs["j"].type is Type.STRING
    v = record.value
    if mapping == "none":
        assert fs["num0"].name == Decimal.LOGICAL_NAME and Decimal.scale(fs["num0"]) == 0
        assert Decimal.scale(fs["num2"]) == 2 and v.get("num2") == decimal.Decimal("12.34")
    else:
        assert fs["num0"].type is Type.INT32 and v.get("num0") == 123456789
    if mapping == "best_fit":
        assert fs["num2"].type is Type.FLOAT64 and v.get("num2") == 12.34
    if mapping == "precision_only":
        assert fs["num2"].name == Decimal.LOGICAL_NAME
    assert fs["big"].name == Decimal.LOGICAL_NAME and Decimal.scale(fs["big"]) == 4
    assert v.get("d") == dt.date(2024, 2, 29) and v.get("t") == dt.time(13, 14, 15)
    assert v.get("ts") == T0.replace(tzinfo=dt.timezone.utc)
    assert v.get("txt") == "héllo" and v.get("bin") == b"\x00\xff" and json.loads(v.get("j")) == {"a": [1, 2]}
    # the key is the primary key, as a Struct
    assert [f.name for f in record.key_schema.fields] == ["id"] and record.key.get("id") == 7
    assert record.source_partition == {"protocol": "1", "table": db.fqn(name)}
    assert record.source_offset == {"incrementing": 7}


def test_every_bad_key_is_named_at_once():
    with pytest.raises(ConfigException) as e:
        JdbcSourceConnector.parse_config({"connection.url": "jdbc:oracle:thin:@h:1521:x", "mode": "weird",
                                          "batch.max.rows": 0, "numeric.mapping": "x", "db.timezone": "Mars/Base"})
    text = str(e.value)
    for key in ("connection.url", "mode", "batch.max.rows", "numeric.mapping", "db.timezone", "topic.prefix"):
        assert key in text
    with pytest.raises(ConfigException) as e:
        JdbcSourceConnector.parse_config({"connection.url": "sqlite:///x.db", "mode": "timestamp+incrementing",
                                          "topic.prefix": "p-", "connection.password": "s3cret"})
    text = str(e.value)
    assert "incrementing.column.name" in text and "timestamp.column.name" in text and "s3cret" not in text


def test_missing_column_fails_naming_table_and_column(db, unique):
    name = f"miss_{unique}"
    _events(db, name)
    config = _config(db, unique, "timestamp+incrementing", name, **{"timestamp.column.name": "updated_at"})
    with pytest.raises(Exception) as e:
        _task(config, {})
    assert db.fqn(name) in str(e.value) and "updated_at" in str(e.value)


def test_jdbc_urls_are_translated_and_aliases_resolve():
    assert to_sqlalchemy_url("jdbc:postgresql://h:5433/db?user=u&password=p").render_as_string(False) == \
        "postgresql+psycopg://u:p@h:5433/db"
    assert to_sqlalchemy_url("jdbc:mariadb://h:3306/db", "root", "pw").render_as_string(False) == \
        "mysql+pymysql://root:pw@h:3306/db"
    assert to_sqlalchemy_url("jdbc:mysql://h/db").drivername == "mysql+pymysql"
    assert to_sqlalchemy_url("jdbc:sqlite:/tmp/a.db").database == "/tmp/a.db"
    for alias in ("JdbcSource", "JdbcSourceConnector", "io.confluent.connect.jdbc.JdbcSourceConnector"):
        assert resolve_connector(alias) is JdbcSourceConnector


def test_a_password_in_a_jdbc_urls_query_string_is_hidden_in_the_plan(postgres_url, worker_props, unique):
    # Confluent's usual form: jdbc:postgresql://host/db?user=u&password=p (trust auth ignores the password)
    from airflow_copycat.runtime.connector_config import HIDDEN, restore_secrets

    secret, table = f"pw{unique}Secret", f"leak_{unique}"
    engine = sa.create_engine(postgres_url)
    with engine.begin() as c:
        c.execute(sa.text(f'CREATE TABLE "{table}" (id int primary key)'))
    try:
        raw = {"name": f"leak-{unique}", "connector.class": "JdbcSource", "mode": "incrementing",
               "connection.url": f"jdbc:postgresql://127.0.0.1:5432/test?user=postgres&password={secret}",
               "incrementing.column.name": "id", "table.whitelist": table, "topic.prefix": "leak-"}
        plan = make_plan(raw, WorkerConfig(worker_props, env={}))
        assert secret not in json.dumps(plan)
        task_config = plan["groups"][0]["tasks"][0]["config"]
        assert task_config["connection.url"].endswith(f"password={HIDDEN}")
        assert restore_secrets(task_config, raw)["connection.url"] == raw["connection.url"]
    finally:
        with engine.begin() as c:
            c.execute(sa.text(f'DROP TABLE "{table}"'))
        engine.dispose()
