"""A schema registry that is down when a run starts: conversions are retried within errors.retry.timeout."""

from __future__ import annotations

import threading

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig
from airflow_copycat.testing.broker import free_port
from tests.support.schema_registry import SchemaRegistryServer


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]


def test_a_late_registry_is_waited_for_then_a_dead_one_fails_naming_the_record(worker_props, unique):
    # Given a registry that is not up yet when the run starts (it starts 3 s later on its port)
    port = free_port()
    started = []  # the server binds its port when built: build it only when it should come up

    def come_up():
        started.append(SchemaRegistryServer(port=port).start())

    config = {"name": f"late-sr-{unique}", "connector.class": "tests.support.avro_connectors:StructSource",
              "topic": f"late-sr-{unique}", "count": 5, "value.converter": "io.confluent.connect.avro.AvroConverter",
              "value.converter.schema.registry.url": f"http://127.0.0.1:{port}",
              "value.converter.max.retries": 0, "errors.retry.timeout": 60000, "errors.retry.delay.max.ms": 1000}
    timer = threading.Timer(3, come_up)
    timer.start()
    try:
        # When the source runs with errors.retry.timeout set
        (task,) = _run(config, worker_props)
        # Then the conversion was retried until the registry answered, and every record went through
        assert task["status"] == "ok", task["error"]
        assert task["records"] == 5 and task["retries"] >= 1 and task["errors"] == 0
    finally:
        timer.join()
        for registry in started:
            registry.stop()
    # And with no retry budget, a registry that stays down fails the task naming the record and the key to raise
    (failed,) = _run(dict(config, **{"name": f"dead-sr-{unique}", "topic": f"dead-sr-{unique}",
                                     "errors.retry.timeout": 0}), worker_props)
    assert failed["status"] == "failed"
    assert "VALUE_CONVERTER" in failed["error"] and "errors.retry.timeout" in failed["error"]
