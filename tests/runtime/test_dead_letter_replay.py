"""Dead-letter queues on both sides, and replaying them after a fix."""

from __future__ import annotations

import json

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect import ConfigDef, ConfigType, Schema, SourceConnector, SourceRecord, SourceTask
from airflow_copycat.runtime.errors import replay_config
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

BAD_SOURCE = "tests.runtime.test_dead_letter_replay:MixedSource"


class MixedSource(SourceConnector):
    """One partition of 6 int32 values, except records 2 and 4, whose values are words."""

    config_def = ConfigDef().define("topic", ConfigType.STRING)

    def partitions(self):
        return [{"p": 0}]

    def task_class(self):
        return MixedTask


class MixedTask(SourceTask):
    def start(self, config):
        self.topic = config["topic"]
        offset = self.context.offset_storage_reader.offset({"p": 0})
        self.next = offset["i"] if offset else 0

    def poll(self):
        if self.next >= 6:
            return None
        out = [SourceRecord(topic=self.topic, key_schema=Schema.STRING, key=f"k{i}", value_schema=Schema.INT32,
                            value={2: "two", 4: "four"}.get(i, i), headers=[("trace", f"t{i}".encode())],
                            source_partition={"p": 0}, source_offset={"i": i + 1}) for i in range(self.next, 6)]
        self.next = 6
        return out


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]


def _messages(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    try:
        return list(read_to_end(c, [TopicPartition(topic, 0, 0)], timeout_s=30))
    finally:
        c.close()


def test_source_dead_letters_carry_their_origin_and_replay_into_the_topic(worker_props, kafka_bootstrap, unique):
    # Given a source whose records 2 and 4 do not fit their schema, with errors tolerated into a DLQ
    name, dlq = f"mixed-{unique}", f"mixed-dlq-{unique}"
    config = {"name": name, "connector.class": BAD_SOURCE, "topic": name, "errors.tolerance": "all",
              "errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.context.headers.enable": "true"}
    (task,) = _run(config, worker_props)
    # Then the good records reach the topic, the two bad ones the DLQ, and the run counts them
    assert (task["status"], task["records"], task["errors"], task["dead_lettered"]) == ("ok", 4, 2, 2)
    assert [json.loads(m.value())["payload"] for m in _messages(kafka_bootstrap, name)] == [0, 1, 3, 5]
    dead = _messages(kafka_bootstrap, dlq)
    assert len(dead) == 2
    headers = dict(dead[0].headers())
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert headers["__connect.errors.connector.name"] == name.encode()
    assert json.loads(headers["__connect.errors.source.partition"]) == {"p": 0}
    assert json.loads(headers["__connect.errors.source.offset"]) == {"i": 3}
    assert headers["__copycat.record.topic"] == name.encode() and headers["trace"] == b"t2"
    assert b"two" in dead[0].value() and json.loads(dead[0].key())["payload"] == "k2"

    # When the dead letters are replayed (here the fix is that the topic now takes schemaless values)
    (replayed,) = _run(replay_config(config), worker_props)
    assert replayed["status"] == "ok" and replayed["records"] == 2
    # Then they are in the topic they were headed for, with their keys and own headers, without error headers
    tail = _messages(kafka_bootstrap, name)[4:]
    assert [json.loads(m.value())["payload"] for m in tail] == ["two", "four"]
    assert [json.loads(m.key())["payload"] for m in tail] == ["k2", "k4"]
    assert [dict(m.headers()) for m in tail] == [{"trace": b"t2"}, {"trace": b"t4"}]
    # And a second replay finds nothing new: the replay keeps offsets of its own
    (again,) = _run(replay_config(config), worker_props)
    assert again["records"] == 0 and len(_messages(kafka_bootstrap, name)) == 6


def test_sink_dead_letters_replay_byte_for_byte_into_their_topic(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a topic with a record the sink cannot convert, dead-lettered with context headers
    topic, dlq = f"in-{unique}", f"in-dlq-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(topic, key=b"k-good", value=b'{"schema":{"type":"string","optional":false},"payload":"a"}')
    p.produce(topic, key=b"k-bad", value=b"not json", headers=[("origin", b"app-7")])
    p.flush(10)
    config = {"name": f"sink-{unique}", "connector.class": "tests.support.connectors:JsonFileSink", "topics": topic,
              "dir": str(tmp_path), "key.converter": "string", "errors.tolerance": "all",
              "errors.deadletterqueue.topic.name": dlq,
              "errors.deadletterqueue.context.headers.enable": "true"}
    (task,) = _run(config, worker_props)
    assert (task["errors"], task["dead_lettered"]) == (1, 1)
    # When the DLQ is replayed
    (replayed,) = _run(replay_config(config), worker_props)
    assert replayed["status"] == "ok" and replayed["records"] == 1
    # Then the original bytes, key and headers are back at the end of the topic the sink reads
    back = _messages(kafka_bootstrap, topic)[-1]
    assert (back.key(), back.value(), back.headers()) == (b"k-bad", b"not json", [("origin", b"app-7")])
