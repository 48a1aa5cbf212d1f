"""Time zones: MySQL/MariaDB TIMESTAMP vs DATETIME when sessions are not in UTC, PostgreSQL
``timestamp`` vs ``timestamptz`` with a non-UTC ``db.timezone``, and NULLs in a coalesced pair.
Record values and committed offsets must be the true UTC instants."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

from airflow_copycat.runtime.offsets import KafkaOffsetStore
from airflow_copycat.runtime.worker import WorkerConfig

from .reader_helpers import payloads, run

NOON_UTC = dt.datetime(2024, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
NOON_MS = int(NOON_UTC.timestamp() * 1000)


def _offset(worker_props, connector):
    [entry] = KafkaOffsetStore(WorkerConfig(worker_props, env={})).read(connector).values()
    return entry["offset"]


def _config(url, name, column, connector, prefix, **extra):
    cfg = {"name": connector, "connector.class": "JdbcSourceConnector", "connection.url": url,
           "mode": "timestamp+incrementing", "incrementing.column.name": "id", "timestamp.column.name": column,
           "table.whitelist": name, "topic.prefix": prefix}
    cfg.update(extra)
    return cfg


@pytest.mark.parametrize("db", ["mariadb"], indirect=True)
@pytest.mark.parametrize("column", ["ts", "dtm"])
def test_mariadb_timestamp_and_datetime_from_a_plus_five_session(db, worker_props, kafka_bootstrap, unique, column):
    name = f"tzm_{unique}"
    db.create(sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                       sa.Column("ts", mysql.TIMESTAMP(fsp=6), nullable=False),
                       sa.Column("dtm", mysql.DATETIME(fsp=6), nullable=False)))
    with db.engine.begin() as conn:  # a writer in +05:00: TIMESTAMP is stored as 12:00 UTC, DATETIME as written
        conn.execute(sa.text("SET time_zone = '+05:00'"))
        conn.execute(sa.text(f"INSERT INTO `{name}` VALUES (1, '2024-01-01 17:00:00', '2024-01-01 17:00:00')"))
    # the connector's own sessions start in +05:00 too (init_command): it must switch them to UTC
    url = db.url + "?init_command=" + "SET%20time_zone%3D%27%2B05%3A00%27"
    # DATETIME values are wall-clock times in db.timezone: Asia/Karachi is UTC+05:00 all year
    config = _config(url, name, column, f"tzm-{unique}", f"tzm{unique}-", **{"db.timezone": "Asia/Karachi"})
    assert run(config, worker_props) == 1
    [value] = payloads(kafka_bootstrap, f"tzm{unique}-{name}")
    assert value["ts"] == NOON_MS and value["dtm"] == NOON_MS
    offset = _offset(worker_props, f"tzm-{unique}")
    assert offset["timestamp"] == NOON_MS and offset["incrementing"] == 1
    with db.engine.begin() as conn:  # a later row, 1 s after: read once, resuming from the UTC offset
        conn.execute(sa.text("SET time_zone = '+05:00'"))
        conn.execute(sa.text(f"INSERT INTO `{name}` VALUES (2, '2024-01-01 17:00:01', '2024-01-01 17:00:01')"))
    assert run(config, worker_props) == 1
    assert run(config, worker_props) == 0
    assert _offset(worker_props, f"tzm-{unique}")["timestamp"] == NOON_MS + 1000


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
@pytest.mark.parametrize("column", ["naive", "aware"])
def test_postgresql_timestamp_and_timestamptz_with_a_non_utc_db_timezone(db, worker_props, kafka_bootstrap, unique,
                                                                         column):
    name = f"tzp_{unique}"
    db.create(sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                       sa.Column("naive", postgresql.TIMESTAMP(timezone=False), nullable=False),
                       sa.Column("aware", postgresql.TIMESTAMP(timezone=True), nullable=False)))
    with db.engine.begin() as conn:  # 07:00 in New York (EST, UTC-5) and 17:00+05: both 12:00 UTC
        conn.execute(sa.text(f"INSERT INTO {name} VALUES (1, '2024-01-01 07:00:00', '2024-01-01 17:00:00+05')"))
    # the connector's session is in Tokyo: timestamptz values still convert to the same instant
    url = db.url + "?options=-c%20timezone%3DAsia/Tokyo"
    config = _config(url, name, column, f"tzp-{unique}", f"tzp{unique}-", **{"db.timezone": "America/New_York"})
    assert run(config, worker_props) == 1
    [value] = payloads(kafka_bootstrap, f"tzp{unique}-{name}")
    assert value["naive"] == NOON_MS and value["aware"] == NOON_MS
    assert _offset(worker_props, f"tzp-{unique}")["timestamp"] == NOON_MS
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {name} VALUES (2, '2024-01-01 07:00:01', '2024-01-01 17:00:01+05')"))
    assert run(config, worker_props) == 1
    assert run(config, worker_props) == 0
    assert _offset(worker_props, f"tzp-{unique}")["timestamp"] == NOON_MS + 1000


def test_null_timestamps_in_a_coalesced_pair(db, worker_props, kafka_bootstrap, unique):
    name = f"tzn_{unique}"
    t0 = dt.datetime(2024, 1, 1, 12, 0, 0)
    table = db.create(sa.Table(name, sa.MetaData(),
                               sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                               sa.Column("updated_at", sa.DateTime), sa.Column("created_at", sa.DateTime)))
    db.insert(table, [{"id": 1, "updated_at": None, "created_at": t0},  # never updated: created_at counts
                      {"id": 2, "updated_at": t0 + dt.timedelta(seconds=3), "created_at": t0},
                      {"id": 3, "updated_at": None, "created_at": None}])  # no timestamp at all: never read
    config = _config(db.url, name, "updated_at,created_at", f"tzn-{unique}", f"tzn{unique}-",
                     **{"validate.non.null": "false", "db.timezone": "Europe/Berlin"})
    assert run(config, worker_props) == 2
    db.insert(table, [{"id": 4, "updated_at": None, "created_at": t0 + dt.timedelta(seconds=5)}])
    assert run(config, worker_props) == 1
    got = payloads(kafka_bootstrap, f"tzn{unique}-{name}")
    assert [p["id"] for p in got] == [1, 2, 4]
    berlin = 3600_000  # Europe/Berlin is UTC+01:00 in January: naive 12:00 there is 11:00 UTC
    assert got[0]["created_at"] == NOON_MS - berlin and got[0]["updated_at"] is None
    assert _offset(worker_props, f"tzn-{unique}")["timestamp"] == NOON_MS - berlin + 5000
