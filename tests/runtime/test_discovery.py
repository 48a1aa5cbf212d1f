"""Partition discovery (runtime/discovery.py) and sticky re-planning (runtime/plan.py) with real
connectors: files of a FileStreamSource, tables of a SQLite database, topics of a sink on the broker."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect import SourceConnector
from airflow_copycat.connect.errors import ConfigException, ConnectException
from airflow_copycat.runtime.discovery import compare, current_partitions, plan_partitions
from airflow_copycat.runtime.kafka import admin_client
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig


class BlindSource(SourceConnector):
    """A source that cannot list its partitions (the base class's ``partitions()``)."""

    def task_class(self):
        raise NotImplementedError


def files_config(unique, pattern, **extra):
    return {"name": f"files-{unique}", "connector.class": "FileStreamSource", "file": pattern,
            "topic": f"files-{unique}", **extra}


def sqlite_config(unique, path, **extra):
    return {"name": f"db-{unique}", "connector.class": "JdbcSource", "connection.url": f"sqlite:///{path}",
            "mode": "incrementing", "incrementing.column.name": "id", "topic.prefix": f"db-{unique}-", **extra}


def create_tables(path, *names):
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        for name in names:
            conn.execute(sa.text(f'CREATE TABLE "{name}" (id INTEGER PRIMARY KEY NOT NULL, v TEXT)'))
            # as many rows in each: the JDBC source balances tasks by estimated rows
            conn.execute(sa.text(f'INSERT INTO "{name}" (v) VALUES (:v)'), [{"v": f"{name}{i}"} for i in range(3)])
    engine.dispose()


def drop_table(path, name):
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP TABLE "{name}"'))
    engine.dispose()


def touch(*paths):
    for p in paths:
        p.write_text("x\n", encoding="utf-8")


def table(name):
    return {"protocol": "1", "table": name}


def assignment(plan):
    """Task index -> partitions of that task, in a plan."""
    return {t["task"]: t["partitions"] for g in plan["groups"] for t in g["tasks"]}


# ------------------------------------------------------------------ discovery


def test_files_appearing_and_vanishing_are_added_and_dropped(tmp_path, unique, worker_props):
    # Given two log files and a source reading *.log
    touch(tmp_path / "a.log", tmp_path / "b.log")
    config = files_config(unique, str(tmp_path / "*.log"))
    worker = WorkerConfig(worker_props)
    baseline = current_partitions(config, worker)
    assert baseline == [{"filename": str(tmp_path / "a.log")}, {"filename": str(tmp_path / "b.log")}]

    # When nothing changes, then there is no change
    assert not compare(current_partitions(config, worker), baseline)

    # When c.log appears and a.log goes away
    touch(tmp_path / "c.log")
    (tmp_path / "a.log").unlink()
    change = compare(current_partitions(config, worker), baseline)

    # Then c.log is added and a.log dropped
    assert change
    assert change.to_dict() == {"added": [{"filename": str(tmp_path / "c.log")}],
                                "dropped": [{"filename": str(tmp_path / "a.log")}], "baseline_missing": False}


def test_tables_created_and_dropped_in_sqlite_are_added_and_dropped(tmp_path, unique, worker_props):
    # Given a database with tables a and b, and a plan made from them
    db = tmp_path / "shop.db"
    create_tables(db, "a", "b")
    config = sqlite_config(unique, db)
    plan = make_plan(config, WorkerConfig(worker_props))
    baseline = plan_partitions(plan)
    assert baseline == [table("a"), table("b")]

    # When table c is created and b is dropped
    create_tables(db, "c")
    drop_table(db, "b")
    change = compare(current_partitions(config, WorkerConfig(worker_props)), baseline)

    # Then the change says so, in the plan's partition form
    assert (change.added, change.dropped) == ([table("c")], [table("b")])


def test_no_plan_means_every_partition_is_added_even_none(tmp_path, unique, worker_props):
    config = files_config(unique, str(tmp_path / "*.log"))
    assert plan_partitions(None) is None
    empty = compare(current_partitions(config, WorkerConfig(worker_props)), None)
    assert empty and empty.to_dict() == {"added": [], "dropped": [], "baseline_missing": True}


def test_sink_partitions_are_the_topic_partitions_of_its_regex(unique, worker_props, kafka_bootstrap):
    # Given a sink reading every topic matching orders-<unique>-.*, one of which exists with 2 partitions
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    first, second = f"orders-{unique}-eu", f"orders-{unique}-us"
    admin.create_topics([NewTopic(first, 2)])[first].result()
    config = {"name": f"sink-{unique}", "connector.class": "FileStreamSink", "file": "/dev/null",
              "topics.regex": f"orders-{unique}-.*"}
    worker = WorkerConfig(worker_props)
    baseline = current_partitions(config, worker)
    assert baseline == [[first, 0], [first, 1]]

    # When a second matching topic is created
    admin.create_topics([NewTopic(second, 1)])[second].result()
    change = compare(current_partitions(config, worker), baseline)

    # Then its partition is added, as the plan would list it
    assert (change.added, change.dropped) == ([[second, 0]], [])


def test_an_invalid_config_names_every_problem_before_touching_anything(tmp_path, worker_props):
    config = {"name": "bad", "connector.class": "JdbcSource", "connection.url": "sqlite:///x.db",
              "connection.password": "pw-that-must-not-show", "mode": "sometimes", "tasks.max": 0}
    with pytest.raises(ConfigException) as e:
        current_partitions(config, WorkerConfig(worker_props))
    text = str(e.value)
    for problem in ("tasks.max=0", "mode='sometimes'", "topic.prefix"):
        assert problem in text
    assert "pw-that-must-not-show" not in text
    assert not (tmp_path / "x.db").exists()


def test_a_connector_that_cannot_list_partitions_cannot_be_watched(unique, worker_props):
    config = {"name": f"blind-{unique}", "connector.class": f"{__name__}:BlindSource"}
    with pytest.raises(ConnectException, match="cannot list its partitions"):
        current_partitions(config, WorkerConfig(worker_props))


def test_an_unreachable_database_fails_without_showing_its_password(unique, worker_props):
    config = sqlite_config(unique, "/nonexistent-dir/x.db")
    config["connection.url"] = "postgresql+psycopg://copycat:pw-secret-123@127.0.0.1:1/none"
    with pytest.raises(Exception) as e:
        current_partitions(config, WorkerConfig(worker_props))
    assert "127.0.0.1" in str(e.value) and "pw-secret-123" not in str(e.value)


# ------------------------------------------------------------------ sticky re-planning


def test_replanning_sqlite_tables_is_sticky(tmp_path, unique, worker_props):
    # Given tables a, b, c, d planned over 3 tasks
    db = tmp_path / "shop.db"
    create_tables(db, "a", "b", "c", "d")
    config = sqlite_config(unique, db, **{"tasks.max": 3})
    worker = WorkerConfig(worker_props)
    first = make_plan(config, worker)
    before = assignment(first)
    assert len(before) == 3 and sorted(len(p) for p in before.values()) == [1, 1, 2]
    owner = {p["table"]: t for t, ps in before.items() for p in ps}

    # When table e appears and the connector is re-planned from the first plan
    create_tables(db, "e")
    second = make_plan(config, worker, previous=first)
    after = assignment(second)

    # Then a..d keep their task, and e goes to a task that had one table (the least loaded)
    assert {p["table"]: t for t, ps in after.items() for p in ps if p["table"] != "e"} == owner
    [e_task] = [t for t, ps in after.items() if table("e") in ps]
    assert len(before[e_task]) == 1
    assert sorted(len(p) for p in after.values()) == [1, 2, 2]
    # ... and the task configs carry the same assignment
    for g in second["groups"]:
        for t in g["tasks"]:
            assert t["partitions"] == after[t["task"]]

    # When the doubled-up task's tables are dropped and f, g appear
    doubled = [t for t, ps in after.items() if len(ps) == 2 and t != e_task][0]
    for p in after[doubled]:
        drop_table(db, p["table"])
    create_tables(db, "f", "g")
    third = make_plan(config, worker, previous=second)
    last = assignment(third)

    # Then the dropped tables freed their task, which takes the new ones first; nothing else moved
    kept = {p["table"]: t for t, ps in after.items() for p in ps if t != doubled}
    assert {p["table"]: t for t, ps in last.items() for p in ps if p["table"] in kept} == kept
    assert sorted(p["table"] for p in last[doubled]) in (["f"], ["f", "g"])
    assert sorted(p["table"] for ps in last.values() for p in ps) == sorted([*kept, "f", "g"])
    assert sorted(len(p) for p in last.values()) == [1, 2, 2]


def test_replanning_respects_a_lower_tasks_max(tmp_path, unique, worker_props):
    # Given four files over four tasks
    touch(*(tmp_path / f"{n}.log" for n in "abcd"))
    config = files_config(unique, str(tmp_path / "*.log"), **{"tasks.max": 4})
    worker = WorkerConfig(worker_props)
    first = make_plan(config, worker)
    assert len(assignment(first)) == 4

    # When a file appears and tasks.max drops to 2
    touch(tmp_path / "e.log")
    second = make_plan(dict(config, **{"tasks.max": 2}), worker, previous=first)
    after = assignment(second)

    # Then there are two tasks; tasks 0 and 1 keep their files; every file is planned exactly once
    assert len(after) == 2
    for t in (0, 1):
        assert all(p in after[t] for p in assignment(first)[t])
    planned = sorted(p["filename"] for ps in after.values() for p in ps)
    assert planned == sorted(str(tmp_path / f"{n}.log") for n in "abcde")
