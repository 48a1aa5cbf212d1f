"""Windowed runs (backfills) through the real planner, source loop, offset topic and broker, reading
real SQLite and PostgreSQL tables with the JDBC source: a window copies only its interval, keeps
its offsets under its own namespace, leaves the live offsets byte for byte as they were, resumes on
a retry of the same plan and re-emits the same records under a new plan."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.runtime import windows
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, existing_topics, read_to_end
from airflow_copycat.runtime.offsets import KafkaOffsetStore, offset_key
from airflow_copycat.runtime.plan import make_plan, validate_only
from airflow_copycat.runtime.worker import WorkerConfig

UTC = dt.timezone.utc
H9, H10, H11 = (dt.datetime(2026, 11, 20, h, tzinfo=UTC) for h in (9, 10, 11))


def _shop_db():
    path = Path(__file__).resolve().parents[2] / "scripts" / "shop_db.py"
    spec = importlib.util.spec_from_file_location("shop_db", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shop_db = _shop_db()


class Shop:
    """A shop database (``<prefix>customers`` / ``<prefix>orders``) in SQLite or PostgreSQL, dropped after."""

    def __init__(self, url: str, prefix: str):
        self.url, self.prefix = url, prefix
        self.engine = sa.create_engine(url)
        self.customers, self.orders = shop_db.create_tables(self.engine, prefix)

    def add_orders(self, stamps, seed=0):
        return shop_db.add_orders(self.engine, self.orders, stamps, seed=seed)

    def close(self):
        self.customers.metadata.drop_all(self.engine)
        self.engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request, tmp_path, unique):
    url = f"sqlite:///{tmp_path}/shop.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    s = Shop(url, f"w{unique}_")
    yield s
    s.close()


def _config(shop: Shop, unique: str, **extra) -> dict:
    cfg = {"name": f"shop-{unique}", "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
           "connection.url": shop.url, "mode": "timestamp+incrementing", "timestamp.column.name": "updated_at",
           "incrementing.column.name": "id", "table.whitelist": f"{shop.prefix}orders,{shop.prefix}customers",
           "topic.prefix": f"t{unique}-", "tasks.max": 2, "timestamp.delay.interval.ms": 0}
    cfg.update(extra)
    return cfg


def _window(cfg: dict, start: dt.datetime, end: dt.datetime) -> dict:
    return dict(cfg, **{"copycat.window.start": start.isoformat(), "copycat.window.end": end.isoformat()})


def _run(plan: dict, worker_props: dict) -> list[dict]:
    tasks = [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]
    failed = [t["error"] for t in tasks if t["status"] != "ok"]
    assert not failed, failed
    return tasks


def _records(bootstrap: str, topic: str) -> list[tuple[dict, dict]]:
    """(key payload, value payload) of every record of ``topic``, in partition-then-offset order."""
    partitions = existing_topics(admin_client({"bootstrap.servers": bootstrap})).get(topic, 0)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.partition.eof": True})
    try:
        msgs = read_to_end(c, [TopicPartition(topic, p, 0) for p in range(partitions)])
        return [(json.loads(m.key())["payload"], json.loads(m.value())["payload"]) for m in msgs]
    finally:
        c.close()


def _offset_records(bootstrap: str, offset_topic: str, name: str) -> list[tuple[bytes, bytes | None]]:
    """Every raw (key, value) of the offset topic whose key belongs to connector ``name``."""
    partitions = existing_topics(admin_client({"bootstrap.servers": bootstrap})).get(offset_topic, 0)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.partition.eof": True})
    try:
        msgs = read_to_end(c, [TopicPartition(offset_topic, p, 0) for p in range(partitions)])
        return [(m.key(), m.value()) for m in msgs if json.loads(m.key())[0] == name]
    finally:
        c.close()


def _ts(payload: dict) -> dt.datetime:
    """A record's ``updated_at`` (Kafka Connect Timestamp: epoch ms) as an aware datetime."""
    return dt.datetime.fromtimestamp(payload["updated_at"] / 1000, UTC)


def test_a_window_copies_only_its_interval_and_leaves_the_live_offsets_alone(shop, worker_props, unique):
    # Given orders in three hours, and a live run that imported them all
    stamps = {h: [h + dt.timedelta(minutes=m, seconds=7) for m in (0, 10, 25, 59)] for h in (H9, H10, H11)}
    ids = {h: shop.add_orders(s, seed=h.hour) for h, s in stamps.items()}
    shop_db.add_customers(shop.engine, shop.customers, [H9 + dt.timedelta(minutes=5), H10 + dt.timedelta(minutes=5)])
    worker = WorkerConfig(worker_props, env={})
    cfg = _config(shop, unique)
    live_plan = make_plan(cfg, worker)
    assert live_plan["window"] is None
    _run(live_plan, worker_props)
    orders_topic = f"t{unique}-{shop.prefix}orders"
    live_records = _records(worker_props["bootstrap.servers"], orders_topic)
    assert len(live_records) == 12
    offset_topic = worker_props["offset.storage.topic"]
    live_offsets = _offset_records(worker_props["bootstrap.servers"], offset_topic, cfg["name"])
    assert live_offsets

    # When the hour [10:00, 11:00) is run as a window
    plan = make_plan(_window(cfg, H10, H11), worker)

    # Then the plan records the window and its (empty: first run) offsets under the window's namespace
    namespace = f"{cfg['name']}@window/2026-11-20T10:00:00Z/2026-11-20T11:00:00Z/{plan['id']}"
    assert plan["window"] == {"start": H10.isoformat(), "end": H11.isoformat(), "offsets_namespace": namespace}
    assert plan["offsets"] == []
    assert all(t["config"]["copycat.plan.id"] == plan["id"] and t["config"]["copycat.window.start"] == H10.isoformat()
               for g in plan["groups"] for t in g["tasks"])
    tasks = _run(plan, worker_props)

    # and the run copied exactly the rows of that hour: the 4 orders and the one customer
    new = _records(worker_props["bootstrap.servers"], orders_topic)[len(live_records):]
    assert sorted(k["id"] for k, _ in new) == ids[H10]
    assert all(H10 <= _ts(v) < H11 for _, v in new)
    customers = _records(worker_props["bootstrap.servers"], f"t{unique}-{shop.prefix}customers")
    assert [_ts(v) for _, v in customers[2:]] == [H10 + dt.timedelta(minutes=5)]
    assert sum(t["records"] for t in tasks) == 5
    # and its offsets live under the window's namespace, pointing inside the window
    store = KafkaOffsetStore(worker)
    window_offsets = {e["partition"]["table"]: e["offset"] for e in store.read(namespace).values()}
    assert {t.split(".")[-1] for t in window_offsets} == {f"{shop.prefix}orders", f"{shop.prefix}customers"}
    for offset in window_offsets.values():
        assert H10.timestamp() * 1000 <= offset["timestamp"] < H11.timestamp() * 1000
    # and the live offsets are byte for byte what they were
    assert _offset_records(worker_props["bootstrap.servers"], offset_topic, cfg["name"]) == live_offsets

    # and a live run afterwards finds nothing new: the window moved nothing it relies on
    again = _run(make_plan(cfg, worker), worker_props)
    assert sum(t["records"] for t in again) == 0


def test_a_retry_resumes_the_window_and_a_new_plan_emits_the_same_records(shop, worker_props, unique):
    # Given 30 orders in one hour (and some outside it), and a run budget of 4 records per task
    inside = [H10 + dt.timedelta(seconds=100 * i + 1) for i in range(30)]
    shop.add_orders([H9 + dt.timedelta(minutes=30)] + inside + [H11 + dt.timedelta(minutes=1)])
    worker = WorkerConfig(worker_props, env={})
    cfg = _window(_config(shop, unique, **{"batch.max.rows": 3, "copycat.run.max.records": 4,
                                           "table.whitelist": f"{shop.prefix}orders", "tasks.max": 1}), H10, H11)
    topic = f"t{unique}-{shop.prefix}orders"
    plan = make_plan(cfg, worker)

    # When the same plan's run is attempted again and again (what Airflow's retries of a run task do)
    counts = []
    while True:
        counts.append(sum(t["records"] for t in _run(plan, worker_props)))
        if counts[-1] == 0:
            break
        assert len(counts) < 20

    # Then each attempt resumed where the last committed: all 30 rows, none twice, none from outside
    first = _records(worker_props["bootstrap.servers"], topic)
    assert len(first) == 30 and sum(counts) == 30
    assert [_ts(v) for _, v in first] == inside
    assert counts[0] <= 6  # the budget ended the first attempt early (it stops at a batch boundary)

    # When the window is planned again (the DAG run cleared, or a second backfill over the same hour)
    replan = make_plan(dict(cfg, **{"copycat.run.max.records": -1}), worker)
    assert replan["id"] != plan["id"] and replan["offsets"] == []
    _run(replan, worker_props)

    # Then it reads the window from its start and emits the same records: same keys, same values, same order
    second = _records(worker_props["bootstrap.servers"], topic)[30:]
    assert second == first


def test_exactly_once_windows_use_their_own_transactional_ids(shop, worker_props, unique):
    # Given an exactly-once connector
    shop.add_orders([H10 + dt.timedelta(minutes=1), H11 + dt.timedelta(minutes=1)])
    worker = WorkerConfig(worker_props, env={})
    cfg = _config(shop, unique, **{"exactly.once.support": "required", "tasks.max": 1,
                                   "table.whitelist": f"{shop.prefix}orders"})

    # When a window runs, then the live connector
    (window_task,) = _run(make_plan(_window(cfg, H10, H11), worker), worker_props)
    (live_task,) = _run(make_plan(cfg, worker), worker_props)

    # Then the window's transactions ran under an id of its own (a backfill never fences the live run),
    # and both committed what they read
    assert live_task["transactional_id"] == f"copycat-{cfg['name']}-0"
    assert window_task["transactional_id"].startswith(f"copycat-{cfg['name']}@window/2026-11-20T10:00:00Z/")
    assert (window_task["records"], live_task["records"]) == (1, 2)
    assert window_task["transactions"] >= 1 and live_task["transactions"] >= 1


def test_finishing_a_window_deletes_its_offsets_only(shop, worker_props, unique):
    # Given a live run and a window run
    shop.add_orders([H10 + dt.timedelta(minutes=1)])
    worker = WorkerConfig(worker_props, env={})
    cfg = _config(shop, unique)
    _run(make_plan(cfg, worker), worker_props)
    plan = make_plan(_window(cfg, H10, H11), worker)
    _run(plan, worker_props)
    store = KafkaOffsetStore(worker)
    live = store.read(cfg["name"])
    assert store.read(plan["window"]["offsets_namespace"])

    # When the window is finished
    deleted = windows.finished(store, plan)

    # Then its offsets are tombstoned and the live ones stay
    assert [p["table"].split(".")[-1] for p in deleted] == [f"{shop.prefix}orders"]  # customers had no rows
    assert store.read(plan["window"]["offsets_namespace"]) == {}
    assert store.read(cfg["name"]) == live
    tombstones = _offset_records(worker_props["bootstrap.servers"], worker_props["offset.storage.topic"],
                                 plan["window"]["offsets_namespace"])
    assert sorted(k for k, v in tombstones if v is None) == sorted(
        offset_key(plan["window"]["offsets_namespace"], p) for p in deleted)


def test_a_connector_that_cannot_run_windows_fails_at_plan_time(worker_props, tmp_path, unique):
    # Given a file source (no event time) asked to run a window
    cfg = _window({"name": f"files-{unique}", "connector.class": "FileStreamSource", "file": str(tmp_path / "a.log"),
                   "topic": f"files-{unique}"}, H10, H11)

    # When it is planned, then the plan fails naming copycat.window.start and why, before any run
    with pytest.raises(ConfigException) as e:
        make_plan(cfg, WorkerConfig(worker_props, env={}))
    assert "copycat.window.start" in str(e.value)
    assert "cannot run a window" in str(e.value) and "FileStreamSourceConnector" in str(e.value)


def test_a_sink_cannot_run_a_window(worker_props, tmp_path, unique):
    cfg = _window({"name": f"sink-{unique}", "connector.class": "tests.support.connectors:JsonFileSink",
                   "topics": f"t-{unique}", "dir": str(tmp_path)}, H10, H11)
    with pytest.raises(ConfigException) as e:
        make_plan(cfg, WorkerConfig(worker_props, env={}))
    assert "copycat.window.start" in str(e.value) and "sink connectors do not run windows" in str(e.value)


@pytest.mark.parametrize("window, problem", [
    ({"copycat.window.start": "2026-11-20T10:00:00Z"}, "copycat.window.end=(absent): is missing"),
    ({"copycat.window.start": "yesterday", "copycat.window.end": "2026-11-20T11:00:00Z"},
     "copycat.window.start='yesterday': is not an ISO-8601 timestamp"),
    ({"copycat.window.start": "2026-11-20T11:00:00Z", "copycat.window.end": "2026-11-20T10:00:00Z"},
     "must be after copycat.window.start"),
])
def test_bad_windows_are_config_problems(window, problem, tmp_path):
    cfg = {"name": "w", "connector.class": "FileStreamSource", "file": str(tmp_path / "a"), "topic": "t", **window}
    problems = validate_only(cfg)
    assert len(problems) == 1 and problem in problems[0], problems
