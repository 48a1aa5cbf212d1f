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
    """One partition of 6 int32 values, except records 2 and 4, whose values are digits in strings."""

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
                            value={2: "2", 4: "4"}.get(i, i), headers=[("trace", f"t{i}".encode())],
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


def test_source_dead_letters_carry_their_origin_and_replay_after_a_fix(worker_props, kafka_bootstrap, unique):
    # Given a source whose records 2 and 4 do not fit their int32 schema, a transform adding a header to every
    # record, and errors tolerated into a DLQ
    name, dlq = f"mixed-{unique}", f"mixed-dlq-{unique}"
    config = {"name": name, "connector.class": BAD_SOURCE, "topic": name, "errors.tolerance": "all",
              "errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.context.headers.enable": "true",
              "transforms": "via", "transforms.via.type": "InsertHeader", "transforms.via.header": "via",
              "transforms.via.value.literal": "copycat"}
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
    # the record as the connector made it (before the transform), its schema kept apart from the value
    assert "via" not in headers and headers["__copycat.record.value.format"] == b"json"
    assert json.loads(headers["__copycat.record.value.schema"]) == {"type": "int32", "optional": False}
    assert json.loads(dead[0].value()) == "2" and json.loads(dead[0].key())["payload"] == "k2"

    # When the dead letters are replayed without a fix, Then the replay fails naming the dead letter
    (unfixed,) = _run(replay_config(config), worker_props)
    assert unfixed["status"] == "failed" and "VALUE_CONVERTER" in unfixed["error"]
    assert f'{{"dlq": "{dlq}", "partition": 0}} offset {{"offset": 1}}' in unfixed["error"]
    assert len(_messages(kafka_bootstrap, name)) == 4

    # When the connector's config is fixed (a Cast to int32) and the dead letters are replayed
    fixed = dict(config, **{"transforms": "via,toInt", "transforms.toInt.type": "Cast$Value",
                            "transforms.toInt.spec": "int32"})
    (replayed,) = _run(replay_config(fixed), worker_props)
    assert replayed["status"] == "ok" and replayed["records"] == 2
    # Then they are in the topic they were headed for, as int32, with their keys and own headers, the transform
    # applied once, and no error headers
    tail = _messages(kafka_bootstrap, name)[4:]
    assert [json.loads(m.value()) for m in tail] == [{"schema": {"type": "int32", "optional": False}, "payload": 2},
                                                     {"schema": {"type": "int32", "optional": False}, "payload": 4}]
    assert [json.loads(m.key())["payload"] for m in tail] == ["k2", "k4"]
    assert [m.headers() for m in tail] == [[("trace", b"t2"), ("via", b"copycat")],
                                           [("trace", b"t4"), ("via", b"copycat")]]
    # And a second replay finds nothing new: the replay keeps offsets of its own
    (again,) = _run(replay_config(fixed), worker_props)
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


def test_records_put_refuses_are_dead_lettered_with_their_kafka_bytes(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a topic of three records, and a sink whose destination refuses one of them (errant record reporter)
    topic, dlq = f"refuse-{unique}", f"refuse-dlq-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, value in ((b"k0", b"ok-0"), (b"k1", b"bad"), (b"k2", b"ok-2")):
        p.produce(topic, key=key, value=value)
    p.flush(10)
    config = {"name": f"refuse-{unique}", "connector.class": "tests.support.connectors:JsonFileSink", "topics": topic,
              "dir": str(tmp_path), "key.converter": "string", "value.converter": "string", "reject.value": "bad"}
    # When it runs without error tolerance, Then the task fails naming the refused record
    (failed,) = _run(config, worker_props)
    assert failed["status"] == "failed" and f"topic {topic} partition 0 offset 1" in failed["error"]
    # When it runs with errors tolerated into a DLQ (a new connector: the failed run committed nothing)
    tolerant = dict(config, name=f"refuse2-{unique}", **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true"})
    (task,) = _run(tolerant, worker_props)
    # Then the others are written, and the refused one is in the DLQ with its Kafka bytes and stage TASK_PUT
    assert (task["status"], task["errors"], task["dead_lettered"]) == ("ok", 1, 1)
    rows = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert [r[3] for r in rows] == ["ok-0", "ok-2"]
    (dead,) = _messages(kafka_bootstrap, dlq)
    headers = dict(dead.headers())
    assert (dead.key(), dead.value()) == (b"k1", b"bad")
    assert headers["__connect.errors.stage"] == b"TASK_PUT" and headers["__connect.errors.offset"] == b"1"
