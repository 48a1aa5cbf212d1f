"""The JDBC sink through the framework: real broker, real PostgreSQL (and SQLite for the crash), plan + run_group.

Records are written to Kafka by the JsonConverter with schemas (what a Kafka Connect source with the
default worker writes); the sink reads them back, resumes from the offsets it keeps in the database,
dead-letters rows the database refuses, and survives a SIGKILL in the middle of its transactions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import sqlalchemy as sa
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect import Schema, SchemaBuilder, Struct
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

KEY = SchemaBuilder.struct().name("k").field("id", Schema.INT64).build()
VALUE = (SchemaBuilder.struct().name("v").field("id", Schema.INT64).field("name", Schema.STRING)
         .field("qty", Schema.INT32).build())


def produce(bootstrap: str, topic: str, items: list, partitions: int = 2) -> None:
    """``items``: ``(id, name, qty)`` or ``(id, None)`` for a tombstone of ``id``."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()
    conv = JsonConverter()
    conv.configure({"schemas.enable": True}, is_key=False)
    keys = JsonConverter()
    keys.configure({"schemas.enable": True}, is_key=True)
    p = Producer({"bootstrap.servers": bootstrap})
    for item in items:
        key = keys.from_connect_data(topic, KEY, Struct(KEY, {"id": item[0]}))
        value = None if item[1] is None else conv.from_connect_data(
            topic, VALUE, Struct(VALUE, {"id": item[0], "name": item[1], "qty": item[2]}))
        p.produce(topic, value, key, partition=item[0] % partitions)
    assert p.flush(30) == 0


def run(config: dict, worker_props: dict) -> dict:
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    results = [run_group(g, worker_props) for g in plan["groups"]]
    return {"records": sum(r["records"] for r in results), "status": {r["status"] for r in results},
            "results": results}


def rows(engine, table: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(f'SELECT id, name, qty FROM "{table}" ORDER BY id'))]


def test_upserts_and_deletes_from_kafka_then_a_rerun_writes_nothing_twice(kafka_bootstrap, worker_props, unique, pg):
    engine, made = pg
    topic = f"orders_{unique}"
    made.append(topic)
    produce(kafka_bootstrap, topic, [(i, f"n{i}", i) for i in range(20)] + [(3, None), (4, "again", 40), (5, None)])
    config = {"name": f"jdbc-sink-{unique}", "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
              "topics": topic, "connection.url": str(engine.url.render_as_string(hide_password=False)),
              "insert.mode": "upsert", "pk.mode": "record_key", "delete.enabled": "true", "auto.create": "true",
              "tasks.max": 2}
    first = run(config, worker_props)
    assert first["status"] == {"ok"} and first["records"] == 23
    expected = [(i, "again" if i == 4 else f"n{i}", 40 if i == 4 else i) for i in range(20) if i not in (3, 5)]
    assert rows(engine, topic) == expected
    with engine.connect() as conn:
        offsets = dict(((t, p), o) for t, p, o in conn.execute(sa.text(
            "SELECT topic, kafka_partition, next_offset FROM copycat_sink_offsets WHERE connector = :c"),
            {"c": config["name"]}))
    assert sum(offsets.values()) == 23
    # the task results count what each task did to each table
    counts = [t["metrics"]["tables"][topic] for r in first["results"] for t in r["tasks"]]
    assert sum(c.get("inserted", 0) for c in counts) == 20 and sum(c.get("deleted", 0) for c in counts) == 2
    assert sum(c.get("updated", 0) for c in counts) <= 1  # id 4 again: an update unless in the round of its insert
    # the consumer group mirrors the database's offsets for lag tools
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"connect-{config['name']}"})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
    finally:
        c.close()
    assert {(tp.topic, tp.partition): tp.offset for tp in committed} == offsets
    with engine.begin() as conn:  # a row changed by someone else is not overwritten by records already written
        conn.execute(sa.text(f'UPDATE "{topic}" SET qty = -1 WHERE id = 0'))
    again = run(config, worker_props)
    assert again["status"] == {"ok"} and again["records"] == 0
    assert rows(engine, topic)[0] == (0, "n0", -1)


def test_rows_the_database_refuses_go_to_the_dead_letter_queue(kafka_bootstrap, worker_props, unique, pg):
    engine, made = pg
    topic = f"checked_{unique}"
    made.append(topic)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{topic}" (id BIGINT PRIMARY KEY, name TEXT NOT NULL, '
                             f'qty INTEGER CHECK (qty >= 0))'))
    produce(kafka_bootstrap, topic, [(i, f"n{i}", -i if i in (7, 33) else i) for i in range(50)], partitions=1)
    dlq = f"dlq-{unique}"
    config = {"name": f"jdbc-sink-{unique}", "connector.class": "JdbcSink", "topics": topic,
              "connection.url": engine.url.render_as_string(hide_password=False), "insert.mode": "insert",
              "pk.mode": "record_value", "pk.fields": "id", "errors.tolerance": "all",
              "errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.context.headers.enable": "true"}
    result = run(config, worker_props)
    assert result["status"] == {"ok"}
    assert [r[0] for r in rows(engine, topic)] == [i for i in range(50) if i not in (7, 33)]
    c = Consumer(WorkerConfig(worker_props, env={}).consumer_config(f"check-{unique}"))
    try:
        dead = list(read_to_end(c, [TopicPartition(dlq, 0, 0)], timeout_s=30))
    finally:
        c.close()
    assert [json.loads(m.value())["payload"]["id"] for m in dead] == [7, 33]
    headers = dict(dead[0].headers())
    assert headers["__connect.errors.topic"] == topic.encode() and b"check" in headers[
        "__connect.errors.exception.message"].lower()


CRASH_CHILD = textwrap.dedent("""
    import json, sys
    from airflow_copycat.runtime.executor import run_group
    group, worker = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    print(json.dumps(run_group(group, worker)), flush=True)
""")


def test_a_sink_killed_mid_run_then_rerun_has_no_duplicate_and_no_gap(kafka_bootstrap, worker_props, unique,
                                                                      tmp_path):
    db = tmp_path / "target.db"
    url = f"sqlite:///{db}"
    topic = f"events_{unique}"
    n = 30000
    produce(kafka_bootstrap, topic, [(i, f"event {i}", i % 1000) for i in range(n)], partitions=1)
    # insert mode without a key: a record written twice would be two rows
    config = {"name": f"jdbc-sink-{unique}", "connector.class": "JdbcSink", "topics": topic, "connection.url": url,
              "insert.mode": "insert", "auto.create": "true", "batch.size": "500"}
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    (group,) = plan["groups"]
    engine = sa.create_engine(url)

    def committed() -> int:
        try:
            with engine.connect() as conn:
                return int(conn.execute(sa.text("SELECT coalesce(max(next_offset), 0) FROM copycat_sink_offsets"))
                           .scalar_one())
        except sa.exc.OperationalError:  # not created yet, or locked by the writer
            return 0

    child = subprocess.Popen([sys.executable, "-c", CRASH_CHILD, json.dumps(group), json.dumps(worker_props)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=os.getcwd())
    try:
        deadline = time.monotonic() + 120
        while committed() == 0 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert child.poll() is None, "the run ended before it could be killed: make the topic larger"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    at_kill = committed()
    assert 0 < at_kill < n
    with engine.connect() as conn:
        assert conn.execute(sa.text(f'SELECT count(*) FROM "{topic}"')).scalar_one() == at_kill
    result = run_group(group, worker_props)
    assert result["status"] == "ok" and result["records"] == n - at_kill
    with engine.connect() as conn:
        ids = [r[0] for r in conn.execute(sa.text(f'SELECT id FROM "{topic}" ORDER BY id'))]
    engine.dispose()
    assert ids == list(range(n))
