"""The source and sink loops against the real broker, with small in-test connectors."""

from __future__ import annotations

import json

from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.offsets import KafkaOffsetStore, offset_key
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

SOURCE = "tests.support.connectors:CountingSource"


def _values(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    try:
        return [json.loads(m.value())["payload"] for m in read_to_end(c, [TopicPartition(topic, 0, 0)])]
    finally:
        c.close()


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return plan, [run_group(g, worker_props) for g in plan["groups"]]


def test_source_run_commits_offsets_and_resumes(worker_props, kafka_bootstrap, unique):
    # Given a source of 2 counters x 5 records
    topic = f"count-{unique}"
    config = {"name": f"count-{unique}", "connector.class": SOURCE, "topic": topic, "count": 5, "tasks.max": 2}
    # When it runs once
    plan, results = _run(config, worker_props)
    # Then every record is in Kafka once and the offsets say where each counter stopped
    assert sorted(_values(kafka_bootstrap, topic)) == sorted(f"c{i}-{n}" for i in range(2) for n in range(5))
    store = KafkaOffsetStore(WorkerConfig(worker_props, env={}))
    assert {e["partition"]["counter"]: e["offset"] for e in store.read(config["name"]).values()} == {"c0": {"n": 5}, "c1": {"n": 5}}
    assert sum(g["records"] for g in results) == 10
    # When the source grows and runs again, only the new records are copied
    plan2, results2 = _run(dict(config, count=7), worker_props)
    assert sum(g["records"] for g in results2) == 4
    assert plan2["offsets"] and all(o["offset"] == {"n": 5} for o in plan2["offsets"])
    parts = {p["partition"]["counter"]: p for g in results2 for t in g["tasks"] for p in t["partitions"]}
    assert parts["c0"]["offset_before"] == {"n": 5} and parts["c0"]["offset_after"] == {"n": 7}
    assert len(_values(kafka_bootstrap, topic)) == 14


def test_offset_topic_is_kafka_connect_format(worker_props, kafka_bootstrap, unique):
    config = {"name": f"fmt-{unique}", "connector.class": SOURCE, "topic": f"fmt-{unique}", "count": 3, "counters": 1}
    _run(config, worker_props)
    # An independent client reads the compacted offset topic and finds Kafka Connect's key/value layout
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    c.subscribe([worker_props["offset.storage.topic"]])
    seen = {m.key: m.value for m in c}
    c.close()
    assert seen[offset_key(config["name"], {"counter": "c0"})] == b'{"n":3}'
    assert offset_key(config["name"], {"counter": "c0"}) == f'["{config["name"]}",{{"counter":"c0"}}]'.encode()


def test_failed_task_commits_only_what_was_acknowledged(worker_props, kafka_bootstrap, unique):
    # Given a source that fails in the middle of its run
    topic = f"fail-{unique}"
    config = {"name": f"fail-{unique}", "connector.class": SOURCE, "topic": topic, "count": 6, "counters": 1,
              "batch": 2, "fail.at": 4}
    _, results = _run(config, dict(worker_props, **{"offset.flush.interval.ms": 0}))
    task = results[0]["tasks"][0]
    assert task["status"] == "failed" and "boom at c0:4" in task["error"]
    # Then the committed offset is at the last acknowledged record, and a fixed rerun continues from there
    _, results = _run(dict(config, **{"fail.at": -1}), worker_props)
    assert results[0]["tasks"][0]["partitions"][0]["offset_before"] == {"n": 4}
    assert sorted(_values(kafka_bootstrap, topic)) == [f"c0-{n}" for n in range(6)]


def test_sink_reads_to_end_and_mirrors_offsets_to_group(worker_props, kafka_bootstrap, unique, tmp_path):
    topic = f"sinkin-{unique}"
    _run({"name": f"src-{unique}", "connector.class": SOURCE, "topic": topic, "count": 4, "counters": 2,
          "topic.creation.default.partitions": 2}, worker_props)
    sink = {"name": f"sink-{unique}", "connector.class": "tests.support.connectors:JsonFileSink",
            "topics": topic, "dir": str(tmp_path), "tasks.max": 2}
    plan, results = _run(sink, worker_props)
    assert sorted(p for g in plan["groups"] for t in g["tasks"] for p in map(tuple, t["partitions"])) == [(topic, 0), (topic, 1)]
    rows = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(rows) == 8 == sum(g["records"] for g in results)
    # The consumer group connect-<name> shows the committed positions
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"connect-sink-{unique}"})
    committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)}
    c.close()
    assert sum(committed.values()) == 8
    # The run says where it started and ended in each partition (it read them from offset 0 to their end,
    # the ends and the data arriving in the same consume rounds)
    moved = {p["partition"][1]: (p["offset_before"], p["offset_after"], p["records"])
             for g in results for t in g["tasks"] for p in t["partitions"]}
    assert moved == {n: (0, committed[n], committed[n]) for n in (0, 1)}
    # A second run finds nothing new
    _, results = _run(sink, worker_props)
    assert sum(g["records"] for g in results) == 0
