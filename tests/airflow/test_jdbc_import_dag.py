"""The example DAG dags/jdbc_import.py in real Airflow 3, on Spark, against a SQLite shop database:
live runs move the connector's offsets; a backfill run of an earlier hour imports that hour's rows
and leaves the live offsets alone; the finish XCom shows per table the offsets before and after and
the rows copied.

``dag.test()`` always makes a *manual* run (Airflow 3.3 has no run-type argument), so the backfill
run here is made the way the scheduler gets it: Airflow's own backfill code
(``airflow.models.backfill._create_backfill``, what ``airflow backfill create`` and
``POST /api/v2/backfills`` call) creates the Backfill and its DagRun of run type ``backfill``, and
the run's task instances are then run with ``dag.test()``'s own loop and task runner
(:func:`run_backfill`). The real scheduler path is tested by tests/e2e.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.airflow.conftest import DAGS_FOLDER, DagRunResult, _state

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc
H9, H10, H11 = (dt.datetime(2026, 11, 20, h, tzinfo=UTC) for h in (9, 10, 11))


def _shop_db():
    spec = importlib.util.spec_from_file_location("shop_db", ROOT / "scripts" / "shop_db.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shop_db = _shop_db()


def install_example_dag(unique: str):
    """dags/jdbc_import.py as it is, in the test dags folder, with its connector config renamed for this
    test (connector name and topic prefix: the broker and offset topic are shared with other tests)."""
    folder = DAGS_FOLDER / "connectors"
    folder.mkdir(exist_ok=True)
    doc = json.loads((ROOT / "dags" / "connectors" / "shop-orders.json").read_text())
    doc["name"] = f"shop-orders-{unique}"
    doc["config"]["topic.prefix"] = f"shop-{unique}-"
    (folder / "shop-orders.json").write_text(json.dumps(doc), encoding="utf-8")
    path = DAGS_FOLDER / "jdbc_import.py"
    shutil.copy(ROOT / "dags" / "jdbc_import.py", path)
    spec = importlib.util.spec_from_file_location(f"copycat_test_dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag, doc


def run_backfill(dag, logical_date: dt.datetime) -> DagRunResult:
    """Create a real backfill of ``dag`` over the one run at ``logical_date`` (Airflow's backfill code: the
    Backfill row and a DagRun of run type ``backfill`` with the timetable's data interval), then run that
    DagRun's task instances as ``dag.test()`` does."""
    from airflow import settings
    from airflow.models.backfill import _create_backfill
    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.state import DagRunState, State, TaskInstanceState
    from airflow.utils.types import DagRunType
    from sqlalchemy import select

    backfill = _create_backfill(dag_id=dag.dag_id, from_date=logical_date, to_date=logical_date, max_active_runs=1,
                                reverse=False, dag_run_conf=None, triggering_user_name="test")
    session = settings.Session()
    dr = session.scalar(select(DagRun).where(DagRun.backfill_id == backfill.id))
    assert dr is not None and dr.run_type == DagRunType.BACKFILL_JOB
    dr.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    dr.state = DagRunState.RUNNING
    session.commit()
    deadline = time.monotonic() + 900
    while dr.state == DagRunState.RUNNING:
        assert time.monotonic() < deadline, "the backfill run did not finish"
        session.expire_all()
        schedulable, _ = dr.update_state(session=session)
        for ti in schedulable:
            ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        scheduled = [ti for ti in dr.get_task_instances(session=session) if ti.state == TaskInstanceState.SCHEDULED]
        if not scheduled and dr.state == DagRunState.RUNNING:
            time.sleep(0.5)
        for ti in scheduled:
            _run_task(ti=ti, task=dag.task_dict[ti.task_id])
    assert dr.state in State.finished
    return DagRunResult(dag.dag_id, dr.run_id, _state(dr.state), "")


def offset_records(bootstrap: str, name: str) -> list[tuple[bytes, bytes | None]]:
    """Raw (key, value) of every record of the default offset topic that belongs to connector ``name``."""
    from confluent_kafka import Consumer, TopicPartition

    from airflow_copycat.runtime.kafka import admin_client, existing_topics, read_to_end

    n = existing_topics(admin_client({"bootstrap.servers": bootstrap})).get("copycat-offsets", 0)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.partition.eof": True})
    try:
        msgs = read_to_end(c, [TopicPartition("copycat-offsets", p, 0) for p in range(n)])
        return [(m.key(), m.value()) for m in msgs if json.loads(m.key())[0] == name]
    finally:
        c.close()


def per_table(summary: dict) -> dict[str, tuple]:
    """table -> (offset before, offset after, records) from a finish summary."""
    return {p["partition"]["table"]: (p["offset_before"], p["offset_after"], p["records"])
            for p in summary["partitions"]}


def ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def test_hourly_import_live_runs_and_a_backfill_of_an_earlier_hour(
        kafka_conn, spark_default, run_dag, read_topic, tmp_path, unique, monkeypatch):
    # Given the shop database with orders in three hours (one customer per hour), the shop_db connection,
    # Spark (spark_default: the session's Spark Connect server), and the example DAG
    db_file = tmp_path / "shop.db"
    monkeypatch.setenv("AIRFLOW_CONN_SHOP_DB", json.dumps({"conn_type": "sqlite", "host": str(db_file)}))
    engine = shop_db.engine_for(str(db_file))
    customers, orders = shop_db.create_tables(engine)
    stamps = {h: [h + dt.timedelta(minutes=m) for m in (3, 20, 41)] for h in (H9, H10, H11)}
    for h in (H9, H10, H11):
        shop_db.add_customers(engine, customers, [h + dt.timedelta(minutes=1)])
        shop_db.add_orders(engine, orders, stamps[h], seed=h.hour)
    dag, doc = install_example_dag(unique)
    name, prefix = doc["name"], doc["config"]["topic.prefix"]
    assert dag.dag_id == "copycat_jdbc_import"

    # When a live (manual) run imports the database
    first = run_dag(dag)

    # Then it copied every row, and its finish XCom shows per table the offsets it moved and the rows
    assert first.state == "success", first.states()
    summary = first.xcom(f"{name}.finish")
    assert summary["window"] is None and summary["status"] == "ok"
    tables = per_table(summary)
    assert {t: (before, after["timestamp"], n) for t, (before, after, n) in tables.items()} == {
        "customers": (None, ms(H11 + dt.timedelta(minutes=1)), 3),
        "orders": (None, ms(H11 + dt.timedelta(minutes=41)), 9)}
    live_orders = read_topic(f"{prefix}orders")
    assert len(live_orders) == 9
    live_offsets = offset_records(kafka_conn, name)
    assert {json.loads(k)[1]["table"] for k, _ in live_offsets} == {"customers", "orders"}

    # Given rows of the 10:00 hour that committed late -- long after the live offsets passed that hour
    late = [H10 + dt.timedelta(minutes=50, seconds=s) for s in (1, 2)]
    late_ids = shop_db.add_orders(engine, orders, late, seed=99)

    # When a backfill run imports the hour [10:00, 11:00)
    backfill = run_backfill(dag, H10)

    # Then it copied exactly the rows of that hour, the late ones too, with the window's own offsets
    assert backfill.state == "success", backfill.states()
    summary = backfill.xcom(f"{name}.finish")
    window = summary["window"]
    assert (window["start"], window["end"]) == (H10.isoformat(), H11.isoformat())
    assert window["offsets_namespace"].startswith(f"{name}@window/2026-11-20T10:00:00Z/2026-11-20T11:00:00Z/")
    assert window["offsets_deleted"] == 2  # the finished window's offsets are tombstoned
    tables = per_table(summary)
    assert {t: (before, after["timestamp"], n) for t, (before, after, n) in tables.items()} == {
        "customers": (None, ms(H10 + dt.timedelta(minutes=1)), 1),
        "orders": (None, ms(late[-1]), 5)}
    new_orders = list((Counter(map(json.dumps, read_topic(f"{prefix}orders"))) -
                       Counter(map(json.dumps, live_orders))).elements())  # the topic has 2 partitions
    new_orders = [json.loads(o) for o in new_orders]
    assert len(new_orders) == 5
    assert sorted(dt.datetime.fromtimestamp(o["updated_at"] / 1000, UTC) for o in new_orders) == stamps[H10] + late
    assert {o["id"] for o in new_orders} >= set(late_ids)
    # and the live offsets are byte for byte what the live run left
    assert offset_records(kafka_conn, name) == live_offsets
    plan = backfill.xcom(f"{name}.plan", key="plan")
    assert plan["window"] == {k: window[k] for k in ("start", "end", "offsets_namespace")}

    # When a new order arrives and the next live run imports it
    now = dt.datetime.now(UTC).replace(microsecond=0) - dt.timedelta(minutes=1)
    shop_db.add_orders(engine, orders, [now], seed=7)
    second = run_dag(dag)

    # Then the live run went on from where the first live run stopped (not from the backfill's window)
    assert second.state == "success", second.states()
    tables = per_table(second.xcom(f"{name}.finish"))
    before, after, n = tables["orders"]
    assert before["timestamp"] == ms(H11 + dt.timedelta(minutes=41)) and n == 1
    assert after["timestamp"] == ms(now)
    engine.dispose()


def test_window_always_on_a_dag_without_data_intervals_fails_at_plan_time(make_dag, run_dag, tmp_path, unique):
    # Given a DAG with schedule=None (a manual run's data interval is the empty [t, t)) whose connector is told
    # to window every run
    engine = shop_db.engine_for(str(tmp_path / "shop.db"))
    shop_db.create_tables(engine)
    engine.dispose()
    config = {"name": f"shop-{unique}", "connector.class": "JdbcSource", "connection.url": f"sqlite:///{tmp_path}/shop.db",
              "mode": "timestamp+incrementing", "timestamp.column.name": "updated_at",
              "incrementing.column.name": "id", "topic.prefix": f"shop-{unique}-"}
    dag = make_dag(f"always_window_{unique}", config, window="always", in_process=True)

    # When it runs
    result = run_dag(dag)

    # Then the plan task failed, once (no retry), saying why, and nothing ran
    states = result.states()
    assert result.state == "failed"
    assert states[(f"shop-{unique}.plan", -1)] == "failed"
    assert states.get((f"shop-{unique}.run", -1)) in (None, "upstream_failed")
    assert "copycat.window.start=" in result.log and "with window='always' copies its data interval" in result.log
    assert "is empty" in result.log and "Running group" not in result.log
