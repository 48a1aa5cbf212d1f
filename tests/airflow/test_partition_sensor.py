"""The partition sensor and its trigger in real Airflow: SQLite tables appear while DAGs run under
``dag.test()`` (reschedule and deferrable), the example DAG imports a new table on its next run."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import pprint
import shutil
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflow_copycat.get_provider_info import get_provider_info
from airflow_copycat.sensors.partitions import CopycatPartitionSensor
from airflow_copycat.triggers.partitions import CopycatPartitionTrigger
from tests.airflow.conftest import DAGS_FOLDER

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

_DAG = '''\
"""Written by tests/airflow/test_partition_sensor.py."""
import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group
from airflow_copycat.sensors.partitions import CopycatPartitionSensor

CONFIG = {config}

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    watch = CopycatPartitionSensor(task_id="watch", connector_config=CONFIG, worker_config={worker},
                                   **{sensor})
    watch >> connector_task_group(CONFIG, in_process=True, worker_config={worker})
'''


def load_dag(path: Path):
    spec = importlib.util.spec_from_file_location(f"copycat_test_dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def sensor_dag(dag_id: str, config: dict, worker: dict, **sensor):
    path = DAGS_FOLDER / f"{dag_id}.py"
    path.write_text(_DAG.format(dag_id=dag_id, config=pprint.pformat(config), worker=pprint.pformat(worker),
                                sensor=pprint.pformat(sensor)), encoding="utf-8")
    return load_dag(path)


class Shop:
    """A SQLite database whose tables hold rows ``<table>-<i>``."""

    def __init__(self, path: Path):
        self.url = f"sqlite:///{path}"
        self.engine = sa.create_engine(self.url)

    def create(self, name: str, rows: int = 3) -> list[str]:
        values = [f"{name}-{i}" for i in range(rows)]
        with self.engine.begin() as conn:
            conn.execute(sa.text(f'CREATE TABLE "{name}" (id INTEGER PRIMARY KEY NOT NULL, v TEXT)'))
            conn.execute(sa.text(f'INSERT INTO "{name}" (v) VALUES (:v)'), [{"v": v} for v in values])
        return values

    def create_later(self, name: str, seconds: float) -> threading.Timer:
        """Creates the table while a run is under way."""
        timer = threading.Timer(seconds, self.create, args=(name,))
        timer.start()
        return timer


def jdbc_config(name: str, shop: Shop, prefix: str, **extra) -> dict:
    return {"name": name, "connector.class": "JdbcSource", "connection.url": shop.url, "mode": "incrementing",
            "incrementing.column.name": "id", "topic.prefix": prefix, "tasks.max": 2, **extra}


def owners(plan: dict) -> dict[str, int]:
    """Table -> task index, in a plan."""
    return {p["table"]: t["task"] for g in plan["groups"] for t in g["tasks"] for p in t["partitions"]}


def values_of(read_topic, topic: str) -> list[str]:
    return sorted(r["v"] for r in read_topic(topic))


@pytest.mark.parametrize("mode", ["reschedule", "deferrable"])
def test_a_table_created_while_the_sensor_waits_fires_it_and_is_imported(
        mode, tmp_path, unique, run_dag, read_topic, test_worker_config, kafka_conn):
    # Given tables a and b, and a DAG: sensor -> plan -> run -> finish
    shop = Shop(tmp_path / "shop.db")
    a, b, c = (f"{t}_{unique}" for t in "abc")
    shop.create(a)
    shop.create(b)
    name, prefix = f"shop-{unique}", f"shop-{unique}-"
    sensor = {"mode": "reschedule"} if mode == "reschedule" else {"deferrable": True}
    dag = sensor_dag(f"watch_{mode}_{unique}", jdbc_config(name, shop, prefix), test_worker_config,
                     poke_interval=1, timeout=300, **sensor)

    # When it first runs, with no earlier plan
    first = run_dag(dag)

    # Then the sensor fires at once (nothing to compare with) and both tables are imported
    assert first.state == "success", first.states()
    assert first.xcom("watch") == {"added": [{"protocol": "1", "table": a}, {"protocol": "1", "table": b}],
                                   "dropped": [], "baseline_missing": True}
    plan1 = first.xcom(f"{name}.plan", key="plan")
    assert set(owners(plan1)) == {a, b}

    # When it runs again and table c is created while the sensor waits
    timer = shop.create_later(c, 3)
    second = run_dag(dag)
    timer.join()

    # Then the sensor fires with c added, the plan keeps a and b on their tasks and adds c, c's rows reach Kafka
    assert second.state == "success", second.states()
    assert second.xcom("watch") == {"added": [{"protocol": "1", "table": c}], "dropped": [],
                                    "baseline_missing": False}
    plan2 = second.xcom(f"{name}.plan", key="plan")
    assert {t: owners(plan2)[t] for t in (a, b)} == owners(plan1)
    assert c in owners(plan2)
    assert values_of(read_topic, prefix + c) == [f"{c}-{i}" for i in range(3)]
    assert second.xcom(f"{name}.finish")["records"] == 3  # a and b had nothing new


def test_reschedule_times_out_into_a_skip_when_nothing_changes(
        tmp_path, unique, run_dag, test_worker_config, kafka_conn):
    # Given a DAG whose sensor gives up after 2 s, skipping (soft_fail)
    shop = Shop(tmp_path / "shop.db")
    shop.create(f"a_{unique}")
    name = f"quiet-{unique}"
    dag = sensor_dag(f"quiet_{unique}", jdbc_config(name, shop, f"quiet-{unique}-"), test_worker_config,
                     mode="reschedule", poke_interval=1, timeout=2, soft_fail=True)
    assert run_dag(dag).state == "success"

    # When it runs again with the same tables
    second = run_dag(dag)

    # Then the sensor looked, saw no change, and was skipped after its timeout; the rest was skipped too
    states = second.states()
    assert states[("watch", -1)] == "skipped"
    assert "same as the last plan" in second.log


def test_an_invalid_config_fails_the_sensor_at_once_naming_every_problem(
        tmp_path, unique, run_dag, test_worker_config, kafka_conn):
    config = {"name": f"bad-{unique}", "connector.class": "JdbcSource", "connection.url": "sqlite:///x.db",
              "mode": "sometimes", "tasks.max": 0}
    dag = sensor_dag(f"bad_{unique}", config, test_worker_config, deferrable=True, soft_fail=True, retries=2)

    result = run_dag(dag)

    # Failed (not skipped, despite soft_fail; not retried), naming each problem
    assert result.states()[("watch", -1)] == "failed"
    assert result.try_number("watch") == 1
    for problem in ("tasks.max=0", "mode='sometimes'", "topic.prefix"):
        assert problem in result.log


def test_deferring_stores_no_database_password_and_the_trigger_reads_the_connection(
        postgres_url, unique, run_dag, test_worker_config, kafka_conn, monkeypatch):
    # Given a PostgreSQL table named through an Airflow connection that carries a password
    password = f"pw-{unique}-secret"
    conn_id = f"shop_pg_{unique}"
    url = sa.engine.make_url(postgres_url)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "postgres", "host": url.host, "port": url.port, "schema": url.database,
        "login": url.username, "password": password}))
    engine = sa.create_engine(postgres_url)
    table = f"watched_{unique}"
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE TABLE "{table}" (id INTEGER PRIMARY KEY)'))
        config = {"name": f"pg-{unique}", "connector.class": "JdbcSource", "airflow.conn.id": conn_id,
                  "mode": "incrementing", "incrementing.column.name": "id", "topic.prefix": f"pg-{unique}-",
                  "table.whitelist": table}
        dag = sensor_dag(f"pg_{unique}", config, test_worker_config, deferrable=True, poke_interval=1, timeout=300)
        assert run_dag(dag).state == "success"

        # When a second run defers while nothing changed, and the table is then dropped
        def drop():
            with engine.begin() as conn:
                conn.execute(sa.text(f'DROP TABLE "{table}"'))

        timer = threading.Timer(3, drop)
        timer.start()
        second = run_dag(dag)
        timer.join()
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
        engine.dispose()

    # Then the trigger (which got no password) found the database through the connection and saw the drop
    assert second.xcom("watch")["dropped"] == [{"protocol": "1", "table": f"{url.database}.public.{table}"}]
    # ... and the trigger's stored arguments hold the connection id, never the password
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    with create_session() as session:
        stored = [t.kwargs for t in session.query(Trigger).all()
                  if t.classpath.endswith("CopycatPartitionTrigger") and conn_id in json.dumps(t.kwargs, default=str)]
    for kwargs in stored:
        assert password not in json.dumps(kwargs, default=str)


def test_a_password_only_in_the_config_cannot_be_deferred(postgres_url, unique, run_dag, test_worker_config,
                                                          kafka_conn):
    # Given a source whose password is in the connector config itself (PostgreSQL here trusts any
    # password), and an earlier plan
    url = sa.engine.make_url(postgres_url).set(password=f"pw-{unique}-x")
    config = {"name": f"pw-{unique}", "connector.class": "JdbcSource", "mode": "bulk",
              "connection.url": url.render_as_string(hide_password=False), "topic.prefix": f"pw-{unique}-",
              "table.whitelist": f"none_{unique}"}
    dag = sensor_dag(f"pwcfg_{unique}", config, test_worker_config, deferrable=True, poke_interval=1, timeout=300)
    assert run_dag(dag).state == "success"

    # When the sensor would defer
    second = run_dag(dag)

    # Then it fails at once saying what to do instead, and the password is in no log line
    assert second.states()[("watch", -1)] == "failed"
    assert "secret value(s) of connection.url" in second.log and "airflow.conn.id" in second.log
    assert f"pw-{unique}-x" not in second.log


# ------------------------------------------------------------------ the trigger alone


def test_trigger_serializes_to_its_init_arguments_json_safe():
    trigger = CopycatPartitionTrigger(connector_config={"name": "x", "connection.password": "[hidden]"},
                                      baseline=[{"table": "a"}], kafka_conn_id="k", worker_config={"a": 1},
                                      poke_interval=5)
    classpath, kwargs = trigger.serialize()
    module, _, cls = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), cls)(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert module == "airflow_copycat.triggers.partitions"
    assert module in get_provider_info()["triggers"][0]["python-modules"]


def test_trigger_waits_while_nothing_changes_then_yields_one_event(tmp_path, unique, kafka_conn):
    shop = Shop(tmp_path / "shop.db")
    shop.create("a")
    config = jdbc_config(f"t-{unique}", shop, "t-")
    trigger = CopycatPartitionTrigger(connector_config=config, baseline=[{"protocol": "1", "table": "a"}],
                                      poke_interval=0.2)

    async def first_event(timeout):
        return await asyncio.wait_for(anext(trigger.run()), timeout)

    with pytest.raises(asyncio.TimeoutError):  # same tables: no event
        asyncio.run(first_event(2))
    shop.create("b")
    event = asyncio.run(first_event(30))
    assert event.payload == {"status": "changed", "added": [{"protocol": "1", "table": "b"}], "dropped": [],
                             "baseline_missing": False}


def test_trigger_reports_an_error_as_one_event_without_the_password(unique, kafka_conn):
    config = {"name": f"down-{unique}", "connector.class": "JdbcSource", "mode": "bulk", "topic.prefix": "d-",
              "connection.url": f"postgresql+psycopg://u:pw-{unique}@127.0.0.1:1/none"}
    event = asyncio.run(anext(CopycatPartitionTrigger(connector_config=config, baseline=[]).run()))
    assert event.payload["status"] == "error"
    assert "127.0.0.1" in event.payload["message"] and f"pw-{unique}" not in event.payload["message"]


def test_sensor_documents_its_templated_fields():
    import inspect

    doc = inspect.getdoc(CopycatPartitionSensor)
    for field in CopycatPartitionSensor.template_fields:
        assert "(templated)" in doc.split(f":param {field}:", 1)[1].split(":param", 1)[0]


# ------------------------------------------------------------------ the example DAG


def test_example_dag_imports_a_table_created_between_runs_on_spark(
        tmp_path, unique, run_dag, read_topic, kafka_conn, spark_default):
    # Given the example DAG over a SQLite database with tables a and b
    shutil.copy(ROOT / "dags" / "jdbc_discovery.py", DAGS_FOLDER / "jdbc_discovery.py")
    dag = load_dag(DAGS_FOLDER / "jdbc_discovery.py")
    shop = Shop(tmp_path / "shop.db")
    a, b, c = (f"{t}_{unique}" for t in "abc")
    rows = {t: shop.create(t) for t in (a, b)}
    conf = {"database_url": shop.url, "topic_prefix": f"ex-{unique}-"}

    # When it runs, then table c is created, and it runs again (a table created while a run's sensor
    # waits: test_a_table_created_while_the_sensor_waits_fires_it_and_is_imported; the example DAG's
    # sensor pokes once a minute)
    first = run_dag(dag, run_conf=conf)
    shop.create(c)
    second = run_dag(dag, run_conf=conf)

    # Then the first run imported a and b; the second's sensor saw c, its plan kept a and b where they were
    assert first.state == second.state == "success", (first.states(), second.states())
    for t in (a, b):
        assert values_of(read_topic, f"ex-{unique}-{t}") == rows[t]
    assert second.xcom("watch_tables")["added"] == [{"protocol": "1", "table": c}]
    plan1, plan2 = (r.xcom("shop-tables.plan", key="plan") for r in (first, second))
    assert {t: owners(plan2)[t] for t in (a, b)} == owners(plan1)
    assert values_of(read_topic, f"ex-{unique}-{c}") == [f"{c}-{i}" for i in range(3)]
    os.remove(DAGS_FOLDER / "jdbc_discovery.py")
