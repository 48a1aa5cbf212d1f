"""Real Airflow 3 in this process: a throwaway AIRFLOW_HOME on SQLite, DAG files in its
dags folder, ``dag.test()`` runs, and the metadata database read back.

AIRFLOW_HOME must be set before anything imports airflow, so it is set when this
conftest is imported (pytest imports it before the test modules of this folder).
DAGs are written as files into the dags folder because ``dag.test()`` runs only
DAGs the DAG processor can find there -- as in production.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import pprint
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if "airflow" in sys.modules and not os.environ.get("COPYCAT_TEST_AIRFLOW_HOME"):
    raise RuntimeError("airflow was imported before tests/airflow/conftest.py could set AIRFLOW_HOME")

AIRFLOW_HOME = Path(os.environ.get("COPYCAT_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="copycat-airflow-"))
DAGS_FOLDER = AIRFLOW_HOME / "dags"
DAGS_FOLDER.mkdir(parents=True, exist_ok=True)
os.environ["COPYCAT_TEST_AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS_FOLDER)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "INFO"

PRISTINE_DB = AIRFLOW_HOME / "pristine-airflow.db"
"""A copy of the freshly migrated metadata DB, for tests that run Airflow's CLI in their own home."""


@pytest.fixture(scope="session", autouse=True)
def airflow_db():
    """The metadata DB of AIRFLOW_HOME, created once per session (as ``airflow db migrate`` does)."""
    from airflow.utils.db import initdb

    initdb()
    _copy_sqlite(AIRFLOW_HOME / "airflow.db", PRISTINE_DB)
    yield AIRFLOW_HOME
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)
    # Airflow's logging config bound its handlers to pytest's capture stream, which pytest
    # closes when the session ends: point them at the real stderr for whatever logs at exit.
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler and handler.stream not in (sys.__stdout__, sys.__stderr__):
            handler.setStream(sys.__stderr__)


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite DB (Airflow runs it in WAL mode: the file alone may lag)."""
    import sqlite3

    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


@pytest.fixture(scope="session")
def kafka_conn(kafka_bootstrap):
    """``kafka_default`` points at the test broker (an ``AIRFLOW_CONN_*`` variable, as in production)."""
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}})
    yield kafka_bootstrap
    os.environ.pop("AIRFLOW_CONN_KAFKA_DEFAULT", None)


@pytest.fixture
def spark_default(spark_connect, monkeypatch):
    """``spark_default`` is a ``spark_connect`` connection to the session's Spark Connect server: the
    example DAGs' task groups run there, about a second each, instead of starting a spark-submit JVM
    each (spark-submit itself is tested with its own connection: test_dags_test_spark.py, the CLI's
    and the Spark application's tests)."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connect.airflow_connection())
    return "spark_default"


@pytest.fixture
def test_worker_config(unique):
    """Worker keys for one test: its own offset topic, with few partitions (quick to read to the end)."""
    return {"offset.storage.topic": f"copycat-offsets-{unique}", "offset.storage.partitions": 3,
            "offset.flush.interval.ms": 1000}


_DAG_TEMPLATE = '''\
"""Written by tests/airflow/conftest.py."""
import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group

with DAG(
    dag_id={dag_id!r},
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={params},
    default_args={default_args},
) as dag:
    connector_task_group(
        {config},
        **{group_kwargs},
    )
'''


@pytest.fixture
def make_dag(kafka_conn):
    """``make_dag(dag_id, connector_config, params=..., default_args=..., **connector_task_group kwargs)``
    writes a DAG file with one ``connector_task_group`` into the dags folder and returns its DAG."""

    def make(dag_id: str, connector_config: dict, *, params: dict | None = None,
             default_args: dict | None = None, **group_kwargs: Any):
        path = DAGS_FOLDER / f"{dag_id}.py"
        path.write_text(_DAG_TEMPLATE.format(
            dag_id=dag_id, params=pprint.pformat(params or {}), default_args=pprint.pformat(default_args or {}),
            config=pprint.pformat(connector_config), group_kwargs=pprint.pformat(group_kwargs)), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"copycat_test_dag_{uuid.uuid4().hex}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.dag

    return make


_COPY_DAG_TEMPLATE = '''\
"""Written by tests/airflow/conftest.py."""
import pendulum
from airflow.sdk import DAG

from airflow_copycat import copy_task_group

with DAG(
    dag_id={dag_id!r},
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={params},
    default_args={default_args},
) as dag:
    copy_task_group(
        {config},
        **{group_kwargs},
    )
'''


@pytest.fixture
def make_copy_dag():
    """``make_copy_dag(dag_id, copy_config, params=..., default_args=..., **copy_task_group kwargs)``: like ``make_dag``, with
    one ``copy_task_group``."""

    def make(dag_id: str, copy_config: dict, *, params: dict | None = None, default_args: dict | None = None,
             **group_kwargs: Any):
        path = DAGS_FOLDER / f"{dag_id}.py"
        path.write_text(_COPY_DAG_TEMPLATE.format(
            dag_id=dag_id, params=pprint.pformat(params or {}), default_args=pprint.pformat(default_args or {}),
            config=pprint.pformat(copy_config), group_kwargs=pprint.pformat(group_kwargs)), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"copycat_test_dag_{uuid.uuid4().hex}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.dag

    return make


@dataclass
class DagRunResult:
    """One finished ``dag.test()`` run, read back from the metadata DB."""

    dag_id: str
    run_id: str
    state: str
    log: str

    def states(self) -> dict[tuple[str, int], str]:
        """``{(task_id, map_index): state}`` of every task instance of the run."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            tis = session.query(TaskInstance).filter_by(dag_id=self.dag_id, run_id=self.run_id).all()
            return {(ti.task_id, ti.map_index): _state(ti.state) for ti in tis}

    def try_number(self, task_id: str, map_index: int = -1) -> int:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            ti = session.query(TaskInstance).filter_by(
                dag_id=self.dag_id, run_id=self.run_id, task_id=task_id, map_index=map_index).one()
            return ti.try_number

    def xcoms(self) -> list[tuple[str, int, str, Any]]:
        """``(task_id, map_index, key, value)`` of every XCom of the run."""
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(XComModel).filter_by(dag_id=self.dag_id, run_id=self.run_id).all()
            return [(x.task_id, x.map_index, x.key, _decoded(x.value)) for x in rows]

    def xcom(self, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        found = [v for t, m, k, v in self.xcoms() if (t, m, k) == (task_id, map_index, key)]
        assert found, f"no XCom {key!r} of {task_id}[{map_index}] in run {self.run_id}"
        return found[0]

    def rendered_fields(self, task_id: str, map_index: int = -1) -> dict:
        from airflow.models.renderedtifields import RenderedTaskInstanceFields
        from airflow.utils.session import create_session

        with create_session() as session:
            row = session.query(RenderedTaskInstanceFields).filter_by(
                dag_id=self.dag_id, run_id=self.run_id, task_id=task_id, map_index=map_index).one()
            return _decoded(row.rendered_fields)

    def asset_events(self) -> list[dict]:
        """The asset events this run emitted: uri, extra, and the aliases they came through."""
        from airflow.models.asset import AssetEvent
        from airflow.utils.session import create_session

        with create_session() as session:
            events = session.query(AssetEvent).filter_by(source_dag_id=self.dag_id, source_run_id=self.run_id).all()
            return [{"uri": e.asset.uri, "extra": dict(e.extra or {}), "task_id": e.source_task_id,
                     "aliases": sorted(a.name for a in e.source_aliases)} for e in events]


def _state(state: Any) -> str | None:
    return getattr(state, "value", state)


def _decoded(value: Any) -> Any:
    while isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            break
    return value


@pytest.fixture
def run_dag(capfd, caplog):
    """``run_dag(dag, **dag.test kwargs)``: one ``dag.test()`` run; the result holds the run's
    log and reads the metadata DB.

    The log is what the run printed (Airflow's structlog console) plus the records of
    stdlib loggers (connectors log there; Airflow's handler for them may hold a stream
    that was replaced by pytest's capture before this test started).
    """

    def run(dag, **kwargs) -> DagRunResult:
        capfd.readouterr()
        caplog.clear()
        dag_run = dag.test(**kwargs)
        out, err = capfd.readouterr()
        records = "\n".join(f"[{r.levelname.lower()}] {r.getMessage()} [{r.name}]" for r in caplog.records)
        log = f"{out}{err}\n{records}\n"
        sys.stdout.write(log[-30000:])  # shown by pytest if the test fails
        return DagRunResult(dag.dag_id, dag_run.run_id, _state(dag_run.state), log)

    return run


@pytest.fixture
def read_topic(kafka_bootstrap):
    """``read_topic(topic)``: every record value of ``topic``, partition by partition, JSON envelopes unwrapped."""
    return lambda topic: _read_topic(kafka_bootstrap, topic)


def _read_topic(bootstrap: str, topic: str) -> list[Any]:
    from tests.support.jdbc_airflow import read_topic

    return [value for _, _, _, value in read_topic(bootstrap, topic)]


@pytest.fixture
def cli_env(tmp_path, airflow_db):
    """Environment for running Airflow's CLI in its own AIRFLOW_HOME (a copy of the freshly
    migrated DB, so no ``airflow db migrate`` per test); add to it what the command needs."""
    home = tmp_path / "airflow-home"
    home.mkdir()
    _copy_sqlite(PRISTINE_DB, home / "airflow.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "COPYCAT_TEST"))}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"), AIRFLOW__LOGGING__LOGGING_LEVEL="INFO")
    return env


def airflow_cli() -> str:
    """The ``airflow`` command of this interpreter's environment."""
    return str(Path(sys.executable).parent / "airflow")


# ---- the offset store of one test, behind kafka_default (the offsets DAG's and the offsets page's tests)


@pytest.fixture
def secret(unique):
    """A SASL password of the test's Kafka connection, which must show up nowhere."""
    return f"pw-{unique}-never-shown"


@pytest.fixture
def worker(kafka_conn, test_worker_config, monkeypatch, secret):
    """``kafka_default`` for this test: its extra names the test's own offset topic (a connection doubles as
    worker properties) and carries :func:`secret` as SASL password; returns the same worker config."""
    from airflow_copycat.runtime.worker import WorkerConfig

    extra = {"bootstrap.servers": kafka_conn, "sasl.username": "copycat", "sasl.password": secret,
             **test_worker_config}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    return WorkerConfig({"bootstrap.servers": kafka_conn, **test_worker_config}, env={})


@pytest.fixture
def store(worker):
    """The offset store of :func:`worker`'s offset topic."""
    from airflow_copycat.runtime.offsets import KafkaOffsetStore

    s = KafkaOffsetStore(worker)
    yield s
    s.close()
