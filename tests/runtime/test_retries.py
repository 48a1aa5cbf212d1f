"""Retriable failures: retried within errors.retry.timeout, then the task fails saying where."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from airflow_copycat.connect.errors import ConnectException, RetriableException
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.retry import RetryPolicy, is_retriable
from airflow_copycat.runtime.worker import WorkerConfig
from airflow_copycat.testing.broker import EmbeddedBroker
from tests.support.line_server import LineServer

LINES = "tests.support.line_server:LineServerSource"


def _values(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    try:
        return [json.loads(m.value())["payload"] for m in read_to_end(c, [TopicPartition(topic, 0, 0)], timeout_s=30)]
    finally:
        c.close()


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]


def test_retry_policy_backs_off_within_its_budget_then_names_what_failed():
    now = [0.0]
    waits = []

    def sleep(seconds):  # a clock the policy reads, advanced by its own waits
        waits.append(seconds)
        now[0] += seconds

    policy = RetryPolicy(5000, 1000, sleep=sleep, clock=lambda: now[0])
    calls = []

    def flaky():
        calls.append(now[0])
        raise RetriableException("database unreachable")

    with pytest.raises(ConnectException) as e:
        policy.call(flaky, what="poll() of connector db task 0", where='{"table":"orders"}')
    # back-off doubles from 300 ms, capped at errors.retry.delay.max.ms, and stops within the 5 s budget
    assert waits == [0.3, 0.6, 1.0, 1.0, 1.0, 1.0]
    assert sum(waits) <= 5.0 and len(calls) == 7 and policy.retries == 6
    assert 'poll() of connector db task 0 ({"table":"orders"}) failed after 7 attempt(s)' in str(e.value)
    assert "errors.retry.timeout" in str(e.value) and "database unreachable" in str(e.value)
    # and the error that ends the retries is not retried again by an outer policy
    with pytest.raises(ConnectException):
        RetryPolicy(60000, sleep=sleep, clock=lambda: now[0]).call(lambda: policy.call(flaky, what="x"), what="y")
    assert policy.retries == 12


@pytest.mark.parametrize("error, retriable", [
    (RetriableException("db gone"), True),
    (ConnectionResetError("peer reset"), True),
    (KafkaException(KafkaError(KafkaError._TRANSPORT)), True),
    (KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT)), True),
    (KafkaException(KafkaError(KafkaError._FENCED, fatal=True)), False),
    (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), False),
    (ValueError("bad data"), False),
])
def test_what_is_retriable(error, retriable):
    assert is_retriable(error) is retriable


def test_no_retry_budget_means_one_attempt():
    calls = []
    with pytest.raises(ConnectException, match="on the first attempt"):
        RetryPolicy(0, sleep=calls.append).call(lambda: (_ for _ in ()).throw(RetriableException("x")), what="w")
    assert calls == []
    # and a non-retriable error is not retried at all, whatever the budget
    with pytest.raises(ValueError):
        RetryPolicy(60000, sleep=calls.append).call(lambda: int("x"), what="parse")
    assert calls == []


def test_source_connection_cut_mid_run_is_retried_and_loses_nothing(worker_props, kafka_bootstrap, unique):
    # Given a server that drops the connection twice in the middle of the stream
    with LineServer(300, cut_after=70, cuts=2) as server:
        name = f"cut-{unique}"
        config = {"name": name, "connector.class": LINES, "port": server.port, "topic": name,
                  "errors.retry.timeout": 30000, "errors.retry.delay.max.ms": 500}
        # When the source runs
        (task,) = _run(config, worker_props)
        # Then it reconnected after each cut and every line is in Kafka once, in order
        assert task["status"] == "ok", task["error"]
        assert task["retries"] >= 2 and server.connections >= 3
    assert _values(kafka_bootstrap, name) == [f"line {n}" for n in range(300)]


def test_without_retries_a_cut_fails_the_task_and_the_rerun_resumes(worker_props, kafka_bootstrap, unique):
    with LineServer(200, cut_after=120, cuts=1) as server:
        name = f"nocut-{unique}"
        config = {"name": name, "connector.class": LINES, "port": server.port, "topic": name}
        # Given the default errors.retry.timeout=0, When the connection drops
        (failed,) = _run(config, dict(worker_props, **{"offset.flush.interval.ms": 0}))
        # Then the task fails saying what failed, where, and which key would retry it
        assert failed["status"] == "failed"
        assert "poll() of connector" in failed["error"] and "errors.retry.timeout" in failed["error"]
        assert "connection to 127.0.0.1" in failed["error"]
        # And a rerun (the server is healthy again) resumes from the committed line: nothing lost or repeated
        (rerun,) = _run(config, worker_props)
        assert rerun["status"] == "ok", rerun["error"]
    assert _values(kafka_bootstrap, name) == [f"line {n}" for n in range(200)]


@pytest.mark.slow
def test_source_waits_for_a_broker_that_starts_late(tmp_path, unique):
    # Given a broker that is down when the run starts, and comes up once the run has failed to reach it
    broker = EmbeddedBroker()
    props = {"bootstrap.servers": broker.bootstrap, "offset.storage.topic": f"late-offsets-{unique}",
             "offset.storage.partitions": 1}
    log = tmp_path / "a.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    config = {"name": f"late-{unique}", "connector.class": "FileStreamSource", "file": str(log),
              "topic": f"late-{unique}", "errors.retry.timeout": 90000, "errors.retry.delay.max.ms": 2000}
    # (planning needs no broker when offsets come from a file; the run uses the Kafka offset topic)
    plan = make_plan(config, WorkerConfig(dict(props, **{"offset.storage.file.filename": str(tmp_path / "o.json")}),
                                          env={}))

    class StartOnFirstRetry(logging.Handler):
        def emit(self, record):
            if broker.proc is None:
                threading.Thread(target=broker.start).start()

    hook = StartOnFirstRetry(logging.WARNING)
    logging.getLogger("airflow_copycat.retry").addHandler(hook)
    try:
        # When the run starts
        (group,) = [run_group(g, props) for g in plan["groups"]]
        # Then it retried until the broker came up, and copied everything
        (task,) = group["tasks"]
        assert task["status"] == "ok", task["error"]
        assert task["retries"] >= 1 and task["records"] == 100
        assert _values(broker.bootstrap, config["topic"]) == [f"line {i}" for i in range(100)]
    finally:
        logging.getLogger("airflow_copycat.retry").removeHandler(hook)
        broker.stop()
