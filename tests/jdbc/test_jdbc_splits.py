"""Key-range splits of one table read in parallel, and size-balanced task configs, against SQLite, real
PostgreSQL and real MariaDB, through the real plan, the real source loop (``run_source_task``), the Kafka
offset store and the broker."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.connect import ConfigException
from airflow_copycat.connectors.jdbc import JdbcSourceConnector
from airflow_copycat.connectors.jdbc.splits import OFFSET_BOUNDS, SPLIT_BOUNDS_KEY
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.offsets import offset_store
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.source import run_source_task
from airflow_copycat.runtime.worker import WorkerConfig
from tests.jdbc.reader_helpers import jdbc_config

T0 = dt.datetime(2024, 1, 1, 12, 0, 0)
MODES = ["bulk", "incrementing", "timestamp", "timestamp+incrementing"]


def _table(db, name, ids, *, nullable_extra=False):
    cols = [sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("v", sa.String(30), nullable=False), sa.Column("ts", sa.DateTime, nullable=False)]
    if nullable_extra:
        cols += [sa.Column("maybe", sa.Integer, nullable=True), sa.Column("label", sa.String(20), nullable=False)]
    table = db.create(sa.Table(name, sa.MetaData(), *cols))
    _insert(db, table, ids)
    return table


def _insert(db, table, ids, *, later: int = 0):
    rows = [{"id": i, "v": f"r{i}", "ts": T0 + dt.timedelta(seconds=later + i)} for i in ids]
    if "label" in table.c:
        rows = [dict(r, maybe=None, label="x") for r in rows]
    if rows:
        db.insert(table, rows)


def _config(db, unique, mode, tables, **extra):
    return jdbc_config(db.url, mode, **{"name": f"split-{unique}", "topic.prefix": f"s{unique}-", "tasks.max": 4,
                                        "table.whitelist": ",".join(tables), "batch.max.rows": 7,
                                        "copycat.split.column": "id", "copycat.split.count": 4, **extra})


def _plan(config, worker_props, previous=None):
    return make_plan(config, WorkerConfig(worker_props, env={}), previous=previous)


def _tasks(plan):
    return sorted((t for g in plan["groups"] for t in g["tasks"]), key=lambda t: t["task"])


def _run(tasks, worker_props, ok=True):
    worker = WorkerConfig(worker_props, env={})
    results = [run_source_task(t, worker) for t in tasks]
    if ok:
        for r in results:
            assert r["status"] != "failed", r.get("error")
    return results


def _ids(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "split-check", "enable.partition.eof": True,
                  "isolation.level": "read_committed"})
    try:
        return [json.loads(m.value())["payload"]["id"] for m in read_to_end(c, [TopicPartition(topic, 0, 0)])]
    finally:
        c.close()


def _offsets(worker_props, config):
    """split ("k/n") -> committed offset, for the connector's split partitions."""
    committed = offset_store(WorkerConfig(worker_props, env={})).read(config["name"])
    return {e["partition"]["split"]: e["offset"] for e in committed.values() if "split" in e["partition"]}


def _bounds(plan, fqn):
    found = {json.dumps(json.loads(t["config"][SPLIT_BOUNDS_KEY])[fqn]["bounds"])
             for t in _tasks(plan) if SPLIT_BOUNDS_KEY in t["config"]}
    assert len(found) == 1, found
    return json.loads(found.pop())


@pytest.mark.parametrize("mode", MODES)
def test_a_split_table_is_read_by_n_tasks_every_row_exactly_once(db, worker_props, kafka_bootstrap, unique, mode):
    name = f"sp_{unique}"
    _table(db, name, range(1, 201))
    config = _config(db, unique, mode, [name])
    plan = _plan(config, worker_props)
    tasks = _tasks(plan)
    assert [t["partitions"] for t in tasks] == [
        [{"protocol": "1", "table": db.fqn(name), "split": f"{k}/4", "column": "id"}] for k in range(1, 5)]
    assert plan["partitions"] == [p for t in tasks for p in t["partitions"]]
    assert _bounds(plan, db.fqn(name)) == [50, 100, 150]
    results = _run(tasks, worker_props)
    assert [r["records"] for r in results] == [49, 50, 50, 51]  # each task read its own range
    ids = _ids(kafka_bootstrap, f"s{unique}-{name}")
    assert sorted(ids) == list(range(1, 201))
    if mode != "bulk":
        assert {k: o[OFFSET_BOUNDS] for k, o in _offsets(worker_props, config).items()} == \
            {f"{k}/4": [50, 100, 150] for k in range(1, 5)}


def test_a_timestamp_split_column_cuts_by_time(db, worker_props, kafka_bootstrap, unique):
    name = f"spts_{unique}"
    _table(db, name, range(1, 101))
    config = _config(db, unique, "incrementing", [name], **{"copycat.split.column": f"{name}=ts",
                                                             "copycat.split.count": 3, "tasks.max": 3})
    plan = _plan(config, worker_props)
    bounds = [dt.datetime.fromisoformat(b) for b in _bounds(plan, db.fqn(name))]
    assert bounds == [T0 + dt.timedelta(seconds=34), T0 + dt.timedelta(seconds=67)]
    results = _run(_tasks(plan), worker_props)
    assert [r["records"] for r in results] == [33, 33, 34]
    assert sorted(_ids(kafka_bootstrap, f"s{unique}-{name}")) == list(range(1, 101))


@pytest.mark.parametrize("mode", ["incrementing", "timestamp+incrementing"])
def test_a_split_stopped_mid_way_resumes_from_its_own_offset(db, worker_props, kafka_bootstrap, unique, mode):
    name = f"spr_{unique}"
    _table(db, name, range(1, 201))
    config = _config(db, unique, mode, [name], **{"batch.max.rows": 5})
    first = _run(_tasks(_plan(dict(config, **{"copycat.run.max.records": 10}), worker_props)), worker_props)
    assert [r["records"] for r in first] == [10, 10, 10, 10]  # every split stopped after 10 of its ~50 rows
    offsets = _offsets(worker_props, config)
    assert [offsets[f"{k}/4"]["incrementing"] for k in range(1, 5)] == [10, 59, 109, 159]
    second = _run(_tasks(_plan(config, worker_props)), worker_props)
    assert [r["records"] for r in second] == [39, 40, 40, 41]
    ids = _ids(kafka_bootstrap, f"s{unique}-{name}")
    assert len(ids) == 200 and sorted(ids) == list(range(1, 201))


@pytest.mark.parametrize("kind", ["postgresql", "mariadb"])
def test_a_split_whose_task_failed_mid_way_resumes_without_loss_or_repeat(request, tmp_path, kind, kafka_bootstrap,
                                                                           unique):
    from tests.jdbc.conftest import Db
    from tests.support.jdbc_runs import ConnectionKiller

    db = Db(kind, request.getfixturevalue("postgres_url" if kind == "postgresql" else "mariadb_url"))
    props = dict(request.getfixturevalue("worker_props"), **{"offset.flush.interval.ms": 0})
    try:
        name = f"spk_{unique}"
        _table(db, name, range(1, 201))
        config = _config(db, unique, "incrementing", [name], **{"batch.max.rows": 5})
        tasks = _tasks(_plan(config, props))
        with ConnectionKiller(db.url, name, at=3) as killer:  # the 3rd batch of split 1/4 loses its connection
            first = _run(tasks, props, ok=False)
        assert killer.killed and first[0]["status"] == "failed" and name in first[0]["error"]
        assert all(r["status"] != "failed" for r in first[1:]), first
        assert first[0]["records"] == 10
        assert _offsets(props, config)["1/4"]["incrementing"] == 10
        second = _run(_tasks(_plan(config, props)), props)
        assert [r["records"] for r in second] == [39, 0, 0, 0]
        ids = _ids(kafka_bootstrap, f"s{unique}-{name}")
        assert Counter(ids) == Counter(range(1, 201))  # every row once: nothing lost, nothing repeated
    finally:
        db.close()


def test_a_re_plan_after_min_and_max_moved_keeps_partitions_and_bounds(db, worker_props, kafka_bootstrap, unique):
    name = f"spm_{unique}"
    table = _table(db, name, range(100, 200))
    config = _config(db, unique, "timestamp+incrementing", [name], **{"batch.max.rows": 5})
    fqn = db.fqn(name)
    plan1 = _plan(config, worker_props)
    assert _bounds(plan1, fqn) == [124, 149, 174]
    # only splits 1 and 2 run, and stop mid-way; splits 3 and 4 commit nothing in this plan
    _run(_tasks(_plan(dict(config, **{"copycat.run.max.records": 10}), worker_props))[:2], worker_props)
    assert sorted(_offsets(worker_props, config)) == ["1/4", "2/4"]
    # new rows (later timestamps) below the old MIN and above the old MAX: a fresh plan would cut elsewhere
    _insert(db, table, list(range(1, 51)) + list(range(200, 400)), later=1000)
    plan2 = _plan(config, worker_props, previous=plan1)
    assert _bounds(plan2, fqn) != [124, 149, 174]
    assert plan2["partitions"] == plan1["partitions"]  # the same partition ids: offsets and sensors carry over
    assert [t["partitions"] for t in _tasks(plan2)] == [t["partitions"] for t in _tasks(plan1)]  # sticky
    _run(_tasks(plan2), worker_props)
    offsets = _offsets(worker_props, config)
    # every split, including 3 and 4 that had committed nothing, used the first plan's bounds ...
    assert {k: o[OFFSET_BOUNDS] for k, o in offsets.items()} == {f"{k}/4": [124, 149, 174] for k in range(1, 5)}
    # ... so each read exactly its range of those bounds: the last row of each range is its offset
    # (split 1 reads ids 110..123, then the new ids 1..50; the new plan's bounds would end split 2 at 199)
    assert [offsets[f"{k}/4"]["incrementing"] for k in range(1, 5)] == [50, 148, 173, 399]
    ids = _ids(kafka_bootstrap, f"s{unique}-{name}")
    assert Counter(ids) == Counter(list(range(1, 51)) + list(range(100, 400)))  # no gap, no duplicate
    # and a third plan, with nothing new, reads nothing
    assert sum(r["records"] for r in _run(_tasks(_plan(config, worker_props, previous=plan2)), worker_props)) == 0


def _analyze(db, names):
    if db.kind == "postgresql":
        with db.engine.begin() as conn:
            for n in names:
                conn.execute(sa.text(f'ANALYZE "{n}"'))
    elif db.kind == "mariadb":
        with db.engine.begin() as conn:
            for n in names:
                conn.execute(sa.text(f"ANALYZE TABLE `{n}`"))


def test_task_configs_are_balanced_by_estimated_table_size(db, worker_props, unique):
    big, small = f"big_{unique}", [f"small{i}_{unique}" for i in range(4)]
    _table(db, big, range(1, 3001))
    for s in small:
        _table(db, s, range(1, 21))
    _analyze(db, [big] + small)
    fqns = {db.fqn(n): n for n in [big] + small}
    config = _config(db, unique, "incrementing", [big] + small, **{"tasks.max": 2, "copycat.split.count": 1})
    groups = [sorted(fqns[p["table"]] for p in t["partitions"]) for t in _tasks(_plan(config, worker_props))]
    assert sorted(groups) == [[big], sorted(small)]  # round robin would have put the big table with two others
    # the big table split in two over 3 tasks: each half alone, the small tables together
    config = _config(db, unique, "incrementing", [big] + small,
                     **{"tasks.max": 3, "copycat.split.column": f"{big}=id", "copycat.split.count": 2})
    groups = [sorted((fqns[p["table"]], p.get("split")) for p in t["partitions"])
              for t in _tasks(_plan(config, worker_props))]
    assert sorted(groups) == sorted([[(big, "1/2")], [(big, "2/2")], sorted((s, None) for s in small)])


def test_split_problems_are_named_before_any_task_runs(db, worker_props, unique):
    names = [f"spv{i}_{unique}" for i in range(2)]
    for n in names:
        _table(db, n, range(1, 4), nullable_extra=True)
    base = _config(db, unique, "incrementing", names)
    # without a database: every problem of the keys at once
    for extra, keys in [({"copycat.split.count": 0}, ["copycat.split.count"]),
                        ({"copycat.split.column": ""}, ["copycat.split.column"]),
                        ({"copycat.split.column": "=id,t="}, ["copycat.split.column"])]:
        with pytest.raises(ConfigException) as e:
            JdbcSourceConnector.parse_config(dict(base, **extra))
        assert sorted({p.key for p in e.value.problems}) == keys, e.value
    with pytest.raises(ConfigException) as e:
        JdbcSourceConnector.parse_config(dict(base, query="SELECT * FROM x"))
    assert "copycat.split.column" in {p.key for p in e.value.problems}
    # at plan time: a missing, a nullable and a text column, and a table that is not read, all in one error
    bad = f"{names[0]}=nope,{names[1]}=maybe,elsewhere_{unique}=id"
    for column, needle in [(bad, None), (f"{names[0]}=label", "numeric or a date"), ("nowhere", "nowhere")]:
        with pytest.raises(ConfigException) as e:
            _plan(dict(base, **{"copycat.split.column": column}), worker_props)
        text = str(e.value)
        if needle:
            assert needle in text, text
        else:
            assert "'nope'" in text and db.fqn(names[0]) in text
            assert "'maybe'" in text and "nullable" in text and db.fqn(names[1]) in text
            assert f"elsewhere_{unique}" in text and "not among the tables" in text
