"""Look-back re-read (``copycat.lookback.ms``) on real PostgreSQL and MariaDB: a row committed late
with a timestamp older than the committed offset is read by the next run with look-back and
missed without it; nothing is duplicated across runs; the identities live in the offset, pruned
to the span, and too many fail the task clearly."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.offsets import KafkaOffsetStore
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

from .reader_helpers import payloads, run

T0 = dt.datetime(2024, 5, 1, 9, 0, 0)
SERVERS = pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)


def _table(db, name):
    return db.create(sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                              sa.Column("v", sa.String(20)), sa.Column("ts", sa.DateTime(), nullable=False)))


def _row(i, seconds):  # whole seconds: MariaDB's DATETIME keeps no fraction
    return {"id": i, "v": f"r{i}", "ts": T0 + dt.timedelta(seconds=seconds)}


def _config(db, name, mode, connector, prefix, **extra):
    cfg = {"name": connector, "connector.class": "JdbcSourceConnector", "connection.url": db.url, "mode": mode,
           "table.whitelist": name, "timestamp.column.name": "ts", "topic.prefix": prefix, "batch.max.rows": 2}
    if mode == "timestamp+incrementing":
        cfg["incrementing.column.name"] = "id"
    cfg.update(extra)
    return cfg


def _offset(worker_props, connector):
    [entry] = KafkaOffsetStore(WorkerConfig(worker_props, env={})).read(connector).values()
    return entry["offset"]


@SERVERS
@pytest.mark.parametrize("mode", ["timestamp", "timestamp+incrementing"])
def test_late_row_older_than_the_offset_is_read_with_lookback_and_missed_without(
        db, worker_props, kafka_bootstrap, unique, mode):
    name = f"lb_{unique}"
    table = _table(db, name)
    with_lb = _config(db, name, mode, f"lb-{unique}", f"lb{unique}-", **{"copycat.lookback.ms": 60_000})
    without = _config(db, name, mode, f"nolb-{unique}", f"nolb{unique}-")
    db.insert(table, [_row(1, 1), _row(2, 2), _row(3, 3)])
    assert run(with_lb, worker_props) == 3
    assert run(without, worker_props) == 3
    # a transaction that began before id 3 was written commits now, with an older timestamp
    db.insert(table, [_row(4, 2), _row(5, 5)])
    assert run(with_lb, worker_props) == 2  # the late id 4 and the new id 5, nothing re-emitted
    assert run(without, worker_props) == 1  # only id 5: id 4 is lost
    assert run(with_lb, worker_props) == 0  # third run: the look-back re-reads ids 1-5 and emits none
    db.insert(table, [_row(6, 4)])  # late again, older than id 5
    assert run(with_lb, worker_props) == 1
    got = payloads(kafka_bootstrap, f"lb{unique}-{name}")
    assert sorted(p["id"] for p in got) == [1, 2, 3, 4, 5, 6]  # each exactly once
    assert sorted(p["id"] for p in payloads(kafka_bootstrap, f"nolb{unique}-{name}")) == [1, 2, 3, 5]
    offset = _offset(worker_props, f"lb-{unique}")
    assert offset["timestamp"] == int((T0 + dt.timedelta(seconds=5)).replace(tzinfo=dt.timezone.utc)
                                      .timestamp() * 1000)
    assert sum(len(v) for v in offset["lookback"].values()) == 6  # all six rows lie within the 60 s span


@SERVERS
def test_identities_are_pruned_to_the_span(db, worker_props, unique):
    name = f"lbp_{unique}"
    table = _table(db, name)
    config = _config(db, name, "timestamp+incrementing", f"lbp-{unique}", f"lbp{unique}-",
                     **{"copycat.lookback.ms": 1500})
    db.insert(table, [_row(1, 1), _row(2, 2), _row(3, 9), _row(4, 10)])
    assert run(config, worker_props) == 4
    offset = _offset(worker_props, f"lbp-{unique}")
    # only rows with ts >= 10 s - 1.5 s are remembered: ids 3 and 4
    assert sorted(int(ms) for ms in offset["lookback"]) == [
        int((T0 + dt.timedelta(seconds=s)).replace(tzinfo=dt.timezone.utc).timestamp() * 1000) for s in (9, 10)]
    db.insert(table, [_row(5, 1)])  # older than the span: not recovered (the span is the contract)
    db.insert(table, [_row(6, 9)])  # within the span: recovered
    assert run(config, worker_props) == 1


@SERVERS
def test_switching_lookback_on_later_duplicates_nothing(db, worker_props, kafka_bootstrap, unique):
    name = f"lbs_{unique}"
    table = _table(db, name)
    base = _config(db, name, "timestamp", f"lbs-{unique}", f"lbs{unique}-")
    db.insert(table, [_row(1, 10), _row(2, 20), _row(3, 30)])
    assert run(base, worker_props) == 3
    on = dict(base, **{"copycat.lookback.ms": 60_000})
    assert run(on, worker_props) == 0  # rows emitted before the look-back existed are not re-emitted
    db.insert(table, [_row(4, 25), _row(5, 40)])
    # id 4 is older than where the look-back was switched on (30 s): not recoverable; id 5 is new
    assert run(on, worker_props) == 1
    db.insert(table, [_row(6, 35)])  # late, but after the switch-on point: recovered
    assert run(on, worker_props) == 1
    assert sorted(p["id"] for p in payloads(kafka_bootstrap, f"lbs{unique}-{name}")) == [1, 2, 3, 5, 6]


@SERVERS
def test_too_many_rows_within_the_span_fail_the_task(db, worker_props, unique):
    name = f"lbo_{unique}"
    table = _table(db, name)
    config = _config(db, name, "timestamp+incrementing", f"lbo-{unique}", f"lbo{unique}-",
                     **{"copycat.lookback.ms": 60_000, "copycat.lookback.max.rows": 3})
    db.insert(table, [_row(i, i) for i in range(1, 6)])
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    [task] = [t for g in (run_group(g, worker_props) for g in plan["groups"]) for t in g["tasks"]]
    assert task["status"] == "failed"
    for part in (db.fqn(name), "copycat.lookback.max.rows=3", "copycat.lookback.ms", "timestamp.delay.interval.ms"):
        assert part in task["error"]
