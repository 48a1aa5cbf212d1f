"""Windowed runs (backfills) of the JDBC source on SQLite and PostgreSQL, through the real source
loop with the offset topic (the planner keeps a window's offsets in its own namespace): a window reads exactly the rows with start <= ts < end, the same records
again from empty offsets, resumes after its committed offset, and rows at exactly ``end`` belong
to the next window. Plus: deleted or renamed columns between runs fail naming table and column."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from airflow_copycat.connect.connector import WINDOW_END_KEY, WINDOW_START_KEY
from airflow_copycat.connectors.jdbc import JdbcSourceConnector

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.offsets import KafkaOffsetStore
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

from .reader_helpers import payloads, run

T0 = dt.datetime(2024, 6, 1, 0, 0, 0)
UTC = dt.timezone.utc
DBS = pytest.mark.parametrize("db", ["sqlite", "postgresql"], indirect=True)


def _minutes(m):
    return T0 + dt.timedelta(minutes=m)


def _setup(db, unique, mode):
    name = f"win_{unique}"
    table = db.create(sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                               sa.Column("ts", sa.DateTime, nullable=False)))
    # id 5 is before the first window, id 4 is exactly at its end (the next window's first row)
    db.insert(table, [{"id": 1, "ts": _minutes(0)}, {"id": 2, "ts": _minutes(10)}, {"id": 3, "ts": _minutes(20)},
                      {"id": 4, "ts": _minutes(30)}, {"id": 5, "ts": _minutes(-1)}, {"id": 6, "ts": _minutes(50)}])
    config = {"name": f"win-{unique}", "connector.class": "JdbcSourceConnector", "connection.url": db.url,
              "mode": mode, "table.whitelist": name, "timestamp.column.name": "ts", "batch.max.rows": 2,
              # ignored in a window: the window's start is where it begins
              "timestamp.initial": str(int(_minutes(15).replace(tzinfo=UTC).timestamp() * 1000))}
    if mode == "timestamp+incrementing":
        config["incrementing.column.name"] = "id"
    return name, config


def _plan(config, worker_props, prefix, start, end, **extra):
    """A windowed plan (the planner gives it a plan id: its offsets live in the window's namespace)."""
    windowed = dict(config, **{"topic.prefix": prefix, WINDOW_START_KEY: start.isoformat(),
                               WINDOW_END_KEY: end.isoformat()}, **extra)
    return make_plan(windowed, WorkerConfig(worker_props, env={}))


def _run(plan, worker_props) -> int:
    """The real run of a plan: every group through the source loop, offsets in the offset topic."""
    results = [run_group(g, worker_props) for g in plan["groups"]]
    for g in results:
        for t in g["tasks"]:
            assert t["status"] != "failed", t.get("error")
    return sum(g["records"] for g in results)


def _ids(kafka_bootstrap, topic):
    return [p["id"] for p in payloads(kafka_bootstrap, topic)]


@DBS
@pytest.mark.parametrize("mode", ["timestamp", "timestamp+incrementing"])
def test_a_window_reads_exactly_its_rows_and_the_same_again(db, worker_props, kafka_bootstrap, unique, mode):
    name, config = _setup(db, unique, mode)
    first = _plan(config, worker_props, f"a{unique}-", _minutes(0), _minutes(30))
    assert _run(first, worker_props) == 3
    assert _ids(kafka_bootstrap, f"a{unique}-{name}") == [1, 2, 3]
    # a new plan of the same window starts from empty offsets and produces the same records
    again = _plan(config, worker_props, f"b{unique}-", _minutes(0), _minutes(30))
    assert _run(again, worker_props) == 3
    assert payloads(kafka_bootstrap, f"b{unique}-{name}") == payloads(kafka_bootstrap, f"a{unique}-{name}")
    # a retry of the first plan starts from the window's committed offsets: nothing more to read
    assert _run(first, worker_props) == 0
    # the row at exactly the first window's end is the next window's first row
    nxt = _plan(config, worker_props, f"c{unique}-", _minutes(30), _minutes(60))
    assert _run(nxt, worker_props) == 2
    assert _ids(kafka_bootstrap, f"c{unique}-{name}") == [4, 6]
    # the live offsets were never touched: a live run reads the whole table
    assert run(dict(config, **{"topic.prefix": f"l{unique}-", "timestamp.initial": None}), worker_props) == 6


@DBS
def test_a_window_resumes_after_its_committed_offset(db, worker_props, kafka_bootstrap, unique):
    name, config = _setup(db, unique, "timestamp+incrementing")
    plan = _plan(config, worker_props, f"r{unique}-", _minutes(0), _minutes(30), **{"copycat.run.max.records": 2})
    assert _run(plan, worker_props) == 2  # the budget stops it after one batch
    namespace = plan["window"]["offsets_namespace"]
    [entry] = KafkaOffsetStore(WorkerConfig(worker_props, env={})).read(namespace).values()
    assert entry["offset"]["incrementing"] == 2
    assert _run(plan, worker_props) == 1
    assert _ids(kafka_bootstrap, f"r{unique}-{name}") == [1, 2, 3]


def test_window_support_by_mode():
    connector = JdbcSourceConnector()
    assert connector.window_support({"mode": "timestamp"}) is None
    assert connector.window_support({"mode": "timestamp+incrementing", "query": "SELECT 1"}) is None
    for mode in ("bulk", "incrementing"):
        reason = connector.window_support({"mode": mode})
        assert reason and mode in reason and "timestamp" in reason


@pytest.mark.parametrize("change", ["drop", "rename"])
def test_a_timestamp_column_dropped_or_renamed_between_runs_fails_naming_table_and_column(
        db, worker_props, unique, change):
    name = f"chg_{unique}"
    table = db.create(sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                               sa.Column("ts", sa.DateTime, nullable=False), sa.Column("updated", sa.DateTime)))
    db.insert(table, [{"id": 1, "ts": T0, "updated": T0}])
    config = {"name": f"chg-{unique}", "connector.class": "JdbcSourceConnector", "connection.url": db.url,
              "mode": "timestamp", "table.whitelist": name, "timestamp.column.name": "updated,ts",
              "validate.non.null": "false", "topic.prefix": f"chg{unique}-"}
    assert run(config, worker_props) == 1
    q = db.engine.dialect.identifier_preparer
    with db.engine.begin() as conn:
        if change == "drop":
            conn.execute(sa.text(f"ALTER TABLE {q.quote(name)} DROP COLUMN updated"))
        else:
            conn.execute(sa.text(f"ALTER TABLE {q.quote(name)} RENAME COLUMN updated TO modified"))
    with pytest.raises(AssertionError) as e:
        run(config, worker_props)
    text = str(e.value)
    assert db.fqn(name) in text and "'updated'" in text and "timestamp.column.name" in text
    if change == "rename":
        assert "modified" in text  # the columns it has now
