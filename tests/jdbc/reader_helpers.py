"""Shared helpers of the JDBC reader tests (query mode, look-back, windows, time zones): run a
connector config through the real plan and source loop, read back what reached the broker."""

from __future__ import annotations

import json

from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.connectors.jdbc import JdbcSourceConnector
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.offsets import FileOffsetStore
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.source import run_source_task
from airflow_copycat.runtime.worker import WorkerConfig


def payloads(bootstrap: str, topic: str) -> list[dict]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    try:
        return [json.loads(m.value())["payload"] for m in read_to_end(c, [TopicPartition(topic, 0, 0)])]
    finally:
        c.close()


def jdbc_config(url: str, mode: str, **keys) -> dict:
    """A JdbcSource config reading ``url`` in ``mode``, with the mode's columns set (``id`` incrementing,
    ``ts`` timestamp); ``keys`` (pass dotted keys as ``**{...}``) add to or override it."""
    cfg = {"connector.class": "JdbcSourceConnector", "connection.url": url, "mode": mode}
    if mode in ("incrementing", "timestamp+incrementing"):
        cfg["incrementing.column.name"] = "id"
    if mode in ("timestamp", "timestamp+incrementing"):
        cfg["timestamp.column.name"] = "ts"
    cfg.update(keys)
    return cfg


def run(config: dict, worker_props: dict) -> int:
    """One scheduled run (plan + every group, offsets in the worker's offset topic): records produced."""
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    results = [run_group(g, worker_props) for g in plan["groups"]]
    for g in results:
        for t in g["tasks"]:
            assert t["status"] != "failed", t.get("error")
    return sum(g["records"] for g in results)


def task_configs(config: dict) -> list[dict]:
    values = JdbcSourceConnector.parse_config(config)
    conn = JdbcSourceConnector()
    conn.start(values)
    try:
        return conn.task_configs(1)
    finally:
        conn.stop()


def run_task(task_config: dict, worker_props: dict, store_path) -> dict:
    """One task config through the real source loop with a file offset store at ``store_path``."""
    return run_source_task({"task": 0, "config": task_config}, WorkerConfig(worker_props, env={}),
                           store=FileOffsetStore(str(store_path)))


def committed(store_path, name: str) -> dict:
    """The committed offsets of connector ``name`` in a file store: canonical partition -> offset."""
    return {k: v["offset"] for k, v in FileOffsetStore(str(store_path)).read(name).items()}
