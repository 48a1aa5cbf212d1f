"""The real Airflow services running the example DAG ``dags/jdbc_import.py``, for the
backfill tests in tests/e2e (REST API and browser; ``jdbc_airflow`` in tests/e2e/conftest.py
starts them once per test session).

:func:`jdbc_airflow_services` gives them a dags folder holding the example DAG file and its connector
config (copies of the repository's files, unchanged), a SQLite shop database filled with
orders over several past hours (``scripts/shop_db.py``), the session's Kafka broker with an
offset topic of its own, and the Spark Connect server it is given. The DAG is unpaused and its first scheduled
(live) run has finished before any test starts: the live offsets exist, so a test can check
that a backfill leaves them where they are.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.airflow_services import AirflowServices, airflow_services

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "copycat_jdbc_import"
CONNECTOR = "shop-orders"
TOPICS = {"customers": "shop-customers", "orders": "shop-orders"}
HOURS = 7
"""Hours of shop data, ending with the hour before the current one."""


def _shop_db_module():
    spec = importlib.util.spec_from_file_location("copycat_shop_db", REPO / "scripts" / "shop_db.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class JdbcAirflow:
    """The services and what they work on."""

    services: AirflowServices
    bootstrap: str
    offset_topic: str
    shop_url: str
    first_hour: dt.datetime
    """Start of the oldest hour with shop rows (aware UTC); hours ``first_hour + i`` for i < HOURS have rows."""
    live_run_id: str

    def hour(self, i: int) -> dt.datetime:
        return self.first_hour + dt.timedelta(hours=i)

    def rows_between(self, start: dt.datetime, end: dt.datetime) -> dict[str, set[int]]:
        """Table -> ids of its rows whose ``updated_at`` lies in ``[start, end)`` now."""
        import sqlalchemy as sa

        engine = sa.create_engine(self.shop_url)
        naive = [t.astimezone(dt.timezone.utc).replace(tzinfo=None) for t in (start, end)]
        try:
            with engine.connect() as conn:
                return {table: set(conn.execute(sa.text(
                    f"SELECT id FROM {table} WHERE updated_at >= :s AND updated_at < :e"),
                    {"s": naive[0], "e": naive[1]}).scalars()) for table in TOPICS}
        finally:
            engine.dispose()

    def offsets(self) -> dict[str, dict]:
        """Connector name (live, or a window's namespace) -> its offsets, from the offset topic."""
        from airflow_copycat.runtime.offsets import KafkaOffsetStore
        from airflow_copycat.runtime.worker import WorkerConfig

        store = KafkaOffsetStore(WorkerConfig({"bootstrap.servers": self.bootstrap,
                                               "offset.storage.topic": self.offset_topic}))
        try:
            return {name: offsets for name, offsets in store.read_all().items() if offsets}
        finally:
            store.close()


@contextlib.contextmanager
def jdbc_airflow_services(work: Path, *, kafka_bootstrap: str, postgres_url: str,
                          spark_connection: str) -> Iterator[JdbcAirflow]:
    """Starts the services in the empty directory ``work`` (see the module docstring) and
    yields them after the first live run succeeded; stops them on exit. ``spark_connection``:
    the ``spark_default`` connection (JSON) the DAG's groups run on."""
    dag_file = REPO / "dags" / "jdbc_import.py"
    assert dag_file.exists(), f"the example DAG {dag_file} is missing"
    dags = work / "dags"
    (dags / "connectors").mkdir(parents=True)
    shutil.copy(dag_file, dags / dag_file.name)
    shutil.copy(REPO / "dags" / "connectors" / "shop-orders.json", dags / "connectors" / "shop-orders.json")

    shop_db = _shop_db_module()
    shop_path = work / "shop.db"
    shop_url = f"sqlite:///{shop_path}"
    now = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    first_hour = now - dt.timedelta(hours=HOURS)
    engine = shop_db.engine_for(shop_url)
    try:
        shop_db.fill(engine, first_hour, HOURS, per_hour=12)
    finally:
        engine.dispose()

    offset_topic = f"copycat-offsets-e2e-{uuid.uuid4().hex[:8]}"
    bin_dir = str(Path(sys.executable).parent)
    extra_env = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {
            "bootstrap.servers": kafka_bootstrap, "offset.storage.topic": offset_topic,
            "offset.storage.partitions": 3}}),
        "AIRFLOW_CONN_SHOP_DB": json.dumps({"conn_type": "sqlite", "host": str(shop_path)}),
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection,
        # as the Makefile's ENV: spark-submit finds python3 on PATH; executors run this interpreter
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
    }
    with airflow_services(dags, postgres_url=postgres_url, extra_env=extra_env, home=work / "airflow-home") as s:
        with s.logs_on_failure():
            s.wait_for_dag(DAG_ID)
            s.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
            # catchup=False: unpausing schedules one live run, for the latest complete hour
            live = s.wait_for_runs(DAG_ID, lambda r: r["run_type"] == "scheduled", 1, timeout=600)
            assert [r["state"] for r in live] == ["success"], live
        yield JdbcAirflow(s, kafka_bootstrap, offset_topic, shop_url, first_hour, live[0]["dag_run_id"])


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, dict]]:
    """Every record of ``topic`` as ``(partition, offset, key, value payload)``, read to the end."""
    from confluent_kafka import Consumer, TopicPartition

    from airflow_copycat.runtime.kafka import admin_client, existing_topics, read_to_end

    partitions = existing_topics(admin_client({"bootstrap.servers": bootstrap})).get(topic, 0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        out = []
        for msg in read_to_end(consumer, [TopicPartition(topic, p, 0) for p in range(partitions)]):
            doc = json.loads(msg.value())
            out.append((msg.partition(), msg.offset(), msg.key(),
                        doc["payload"] if isinstance(doc, dict) and "payload" in doc else doc))
        return out
    finally:
        consumer.close()


def topic_positions(bootstrap: str) -> dict[str, dict[int, int]]:
    """Topic -> partition -> the offset after its last record (what a later read starts after)."""
    out = {}
    for topic in TOPICS.values():
        ends: dict[int, int] = {}
        for partition, offset, _, _ in read_topic(bootstrap, topic):
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        out[topic] = ends
    return out


def records_since(bootstrap: str, positions: dict[str, dict[int, int]]) -> dict[str, list[dict]]:
    """Topic -> the record values written after ``positions`` (of :func:`topic_positions`)."""
    return {topic: [value for partition, offset, _, value in read_topic(bootstrap, topic)
                    if offset >= positions[topic].get(partition, 0)] for topic in TOPICS.values()}
