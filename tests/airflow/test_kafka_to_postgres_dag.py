"""The example DAG dags/kafka_to_postgres.py in real Airflow 3 (``dag.test()``), on Spark, into the real
PostgreSQL: upserts and deletes land in the tables the RegexRouter names, the finish XCom counts the rows
inserted, updated and deleted per table and shows the Kafka offsets before and after, and the finish task
emits one Asset event per table, named as Airflow's Postgres provider names tables."""

from __future__ import annotations

import importlib.util
import json
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect import Schema, SchemaBuilder, Struct
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.kafka import admin_client
from tests.airflow.conftest import DAGS_FOLDER

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KEY = SchemaBuilder.struct().name("shop.key").field("id", Schema.INT64).build()
CUSTOMER = SchemaBuilder.struct().name("shop.customer").field("id", Schema.INT64).field("name", Schema.STRING).build()
ORDER = (SchemaBuilder.struct().name("shop.order").field("id", Schema.INT64).field("customer_id", Schema.INT64)
         .field("status", Schema.STRING).build())


def install_example_dag(unique: str):
    """dags/kafka_to_postgres.py as it is, with this test's connector name, topics and table names."""
    text = (ROOT / "dags" / "kafka_to_postgres.py").read_text()
    for old, new in [('"shop-to-warehouse"', f'"shop-to-warehouse-{unique}"'),
                     ('"shop-customers,shop-orders"', f'"shop-{unique}-customers,shop-{unique}-orders"'),
                     ('"shop-(.*)"', f'"shop-{unique}-(.*)"'), ('"$1"', f'"$1_{unique}"')]:
        assert old in text, old
        text = text.replace(old, new)
    path = DAGS_FOLDER / "kafka_to_postgres.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"copycat_test_dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def produce(bootstrap: str, topic: str, schema, rows: list) -> None:
    """``rows``: dicts, or ``("delete", id)`` for a tombstone."""
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({"schemas.enable": True}, is_key=True)
    values.configure({"schemas.enable": True}, is_key=False)
    p = Producer({"bootstrap.servers": bootstrap})
    for row in rows:
        key_id = row[1] if isinstance(row, tuple) else row["id"]
        key = keys.from_connect_data(topic, KEY, Struct(KEY, {"id": key_id}))
        value = None if isinstance(row, tuple) else values.from_connect_data(topic, schema, Struct(schema, row))
        p.produce(topic, value, key, partition=key_id % 2)
    assert p.flush(30) == 0


def test_hourly_upserts_and_deletes_into_postgres(kafka_conn, spark_default, run_dag, postgres_url, unique, monkeypatch):
    url = sa.engine.make_url(postgres_url)
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE_DB", json.dumps(
        {"conn_type": "postgres", "host": url.host, "port": url.port or 5432, "schema": url.database,
         "login": url.username}))
    customers, orders = f"shop-{unique}-customers", f"shop-{unique}-orders"
    admin = admin_client({"bootstrap.servers": kafka_conn})
    for t, f in admin.create_topics([NewTopic(customers, 2, 1), NewTopic(orders, 2, 1)]).items():
        f.result()
    produce(kafka_conn, customers, CUSTOMER, [{"id": i, "name": f"customer {i}"} for i in range(1, 4)])
    produce(kafka_conn, orders, ORDER, [{"id": i, "customer_id": 1 + i % 3, "status": "NEW"} for i in range(1, 11)])
    dag = install_example_dag(unique)
    engine = sa.create_engine(postgres_url)
    name = f"shop-to-warehouse-{unique}"
    t_customers, t_orders = f"customers_{unique}", f"orders_{unique}"
    try:
        first = run_dag(dag)
        assert first.state == "success", first.states()
        summary = first.xcom(f"{name}.finish")
        assert summary["tables"] == {t_customers: {"inserted": 3, "updated": 0},
                                     t_orders: {"inserted": 10, "updated": 0}}
        with engine.connect() as conn:
            assert conn.execute(sa.text(f'SELECT count(*) FROM "{t_orders}"')).scalar_one() == 10
        # the mapped run task says in the UI what it ran
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            labels = {ti.rendered_map_index for ti in session.query(TaskInstance).filter_by(
                dag_id=dag.dag_id, run_id=first.run_id, task_id=f"{name}.run")}
        partitions = {f"{topic}[{p}]" for topic in (customers, orders) for p in (0, 1)}
        for label in labels:  # "group 0: <partition>, <partition> (+1 more)", cut to a line
            head, _, listed = label.partition(": ")
            listed, _, more = listed.partition(" (+")
            assert head.startswith("group ") and set(listed.split(", ")) <= partitions, label
        assert sum(len(lb.split(": ")[1].split(" (+")[0].split(", ")) + int((lb.split(" (+") + ["0"])[1].split()[0])
                   for lb in labels) == 4, labels
        assert {p["offset_after"] for p in summary["partitions"] if p["partition"][0] == orders} <= {4, 5, 6}

        # an hour later: orders shipped, one cancelled (a tombstone), a new one
        produce(kafka_conn, orders, ORDER, [{"id": 2, "customer_id": 3, "status": "SHIPPED"},
                                            {"id": 5, "customer_id": 3, "status": "SHIPPED"}, ("delete", 7),
                                            {"id": 11, "customer_id": 2, "status": "NEW"}])
        second = run_dag(dag)
        assert second.state == "success", second.states()
        summary = second.xcom(f"{name}.finish")
        assert summary["tables"] == {t_orders: {"inserted": 1, "updated": 2, "deleted": 1}}
        before = {p["partition"][1]: (p["offset_before"], p["offset_after"]) for p in summary["partitions"]
                  if p["partition"][0] == orders and p["records"]}
        assert sum(after - b for b, after in before.values()) == 4
        with engine.connect() as conn:
            rows = dict(conn.execute(sa.text(f'SELECT id, status FROM "{t_orders}"')).fetchall())
        assert rows[2] == rows[5] == "SHIPPED" and 7 not in rows and rows[11] == "NEW" and len(rows) == 10

        # one Asset event per table written, under the Postgres provider's URI form
        host = f"{url.host}:{url.port or 5432}"
        events = {e["uri"]: e for e in first.asset_events()}
        assert set(events) == {f"postgres://{host}/{url.database}/public/{t_customers}",
                               f"postgres://{host}/{url.database}/public/{t_orders}"}
        assert events[f"postgres://{host}/{url.database}/public/{t_orders}"]["extra"] == {
            "connector": name, "table": t_orders, "inserted": 10, "updated": 0}
        assert [e["uri"] for e in second.asset_events()] == [f"postgres://{host}/{url.database}/public/{t_orders}"]
    finally:
        with engine.begin() as conn:
            for t in (t_customers, t_orders):
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{t}"'))
            conn.execute(sa.text("DELETE FROM copycat_sink_offsets WHERE connector = :c"), {"c": name})
        engine.dispose()
