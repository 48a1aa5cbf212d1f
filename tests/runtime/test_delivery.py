"""What the runtime guarantees when configs, data or the broker misbehave."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect.errors import ConfigException, ConnectException
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end
from airflow_copycat.runtime.offsets import KafkaOffsetStore
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return [run_group(g, worker_props) for g in plan["groups"]]


def _messages(bootstrap, topic, partitions=1):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    try:
        return list(read_to_end(c, [TopicPartition(topic, p, 0) for p in range(partitions)], timeout_s=30))
    finally:
        c.close()


def test_connector_partitioner_override_does_not_scatter_its_offsets(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a source whose producer spreads records over partitions at random
    log = tmp_path / "a.log"
    config = {"name": f"rnd-{unique}", "connector.class": "FileStreamSource", "file": str(log),
              "topic": f"rnd-{unique}", "topic.creation.default.partitions": 3,
              "producer.override.partitioner": "random"}
    # When it runs five times with lines appended before each run
    for run in range(5):
        with log.open("a") as f:
            f.writelines(f"run {run} line {i}\n" for i in range(10))
        _run(config, worker_props)
    # Then every line is in Kafka exactly once: each run resumed from the offset the last one committed
    values = sorted(json.loads(m.value())["payload"] for m in _messages(kafka_bootstrap, config["topic"], 3))
    assert values == sorted(f"run {r} line {i}" for r in range(5) for i in range(10))


def test_a_skipped_bad_line_is_dead_lettered_once_across_runs(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a file whose last line is not UTF-8, and errors tolerated into a dead-letter topic
    log = tmp_path / "a.log"
    log.write_bytes(b"good 1\ngood 2\n\xff\xfe bad\n")
    dlq = f"dlq-{unique}"
    config = {"name": f"skip-{unique}", "connector.class": "FileStreamSource", "file": str(log),
              "topic": f"skip-{unique}", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
              "errors.deadletterqueue.context.headers.enable": "true"}
    (first,) = _run(config, worker_props)
    # When the source runs again with one more good line
    with log.open("ab") as f:
        f.write(b"good 3\n")
    (second,) = _run(config, worker_props)
    # Then the bad line went to the dead-letter topic once, with where it came from, and no good line is lost
    assert (first["errors"], second["errors"]) == (1, 0)
    (dead,) = _messages(kafka_bootstrap, dlq)
    headers = dict(dead.headers())
    assert dead.value() == b"\xff\xfe bad"
    assert json.loads(headers["__connect.errors.source.partition"]) == {"filename": str(log)}
    values = [json.loads(m.value())["payload"] for m in _messages(kafka_bootstrap, config["topic"])]
    assert values == ["good 1", "good 2", "good 3"]


def test_sink_dead_letters_records_it_cannot_convert(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a topic with two JSON envelopes around a record that is not JSON
    topic = f"mixed-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in (b'{"schema":{"type":"string","optional":false},"payload":"a"}', b"not json",
                  b'{"schema":{"type":"string","optional":false},"payload":"b"}'):
        p.produce(topic, value)
    p.flush(10)
    dlq = f"sinkdlq-{unique}"
    out = tmp_path / "out"
    config = {"name": f"sinkdlq-{unique}", "connector.class": "FilesSink", "topics": topic, "store.url": str(out),
              "format.class": "json", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
              "errors.deadletterqueue.context.headers.enable": "true"}
    (result,) = _run(config, worker_props)
    # Then the good records are written, the bad one is in the dead-letter topic with its Kafka location
    assert result["status"] == "ok" and result["errors"] == 1
    rows = [json.loads(line) for f in (out / "topics" / topic).rglob("*.json") for line in f.read_text().splitlines()]
    assert rows == ["a", "b"]
    (dead,) = _messages(kafka_bootstrap, dlq)
    headers = dict(dead.headers())
    assert dead.value() == b"not json"
    assert (headers["__connect.errors.topic"], headers["__connect.errors.offset"]) == (topic.encode(), b"1")


@pytest.mark.parametrize("bad, key", [
    ({"producer.override.linger.ms": "soon"}, "producer.override"),
    ({"value.converter.schemas.enable": "maybe"}, "value.converter"),
    ({"transforms": "mask", "transforms.mask.type": "org.apache.kafka.connect.transforms.MaskField$Value"}, "transforms"),
])
def test_settings_that_would_fail_inside_spark_fail_the_plan(worker_props, unique, tmp_path, bad, key):
    config = {"name": f"bad-{unique}", "connector.class": "FileStreamSource", "file": str(tmp_path / "x.log"),
              "topic": f"bad-{unique}", "value.converter": "org.apache.kafka.connect.json.JsonConverter", **bad}
    with pytest.raises(ConfigException) as e:
        make_plan(config, WorkerConfig(worker_props, env={}))
    assert key in str(e.value)


def test_an_offset_topic_that_is_not_compacted_is_refused(worker_props, kafka_bootstrap, unique):
    # Given an existing offset topic that deletes old records
    topic = f"offsets-delete-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"cleanup.policy": "delete"})])[topic].result()
    store = KafkaOffsetStore(WorkerConfig(dict(worker_props, **{"offset.storage.topic": topic}), env={}))
    # Then writing offsets to it is refused with the reason and the fix
    with pytest.raises(ConnectException, match="cleanup.policy=delete"):
        store.write("c", [({"p": 1}, {"o": 1})])
