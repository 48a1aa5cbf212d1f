"""The batch path against the record path it replaces: a connector that returns SourceBatches writes the
same Kafka records, dead letters, counts and offsets as the same rows returned as records (real broker)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, existing_topics, read_to_end
from airflow_copycat.runtime.offsets import KafkaOffsetStore
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

SOURCE = "tests.support.batch_sources:GeneratedRowsSource"
VOLATILE_HEADERS = {"__connect.errors.exception.stacktrace"}


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return [run_group(g, worker_props) for g in plan["groups"]]


def _messages(bootstrap, topic):
    partitions = existing_topics(admin_client({"bootstrap.servers": bootstrap})).get(topic, 0)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    try:
        msgs = read_to_end(c, [TopicPartition(topic, p, 0) for p in range(partitions)], timeout_s=60)
        return [(m.partition(), m.key(), m.value(),
                 [(k, v) for k, v in (m.headers() or []) if k not in VOLATILE_HEADERS]) for m in msgs]
    finally:
        c.close()


def _offsets(worker_props, name):
    store = KafkaOffsetStore(WorkerConfig(worker_props, env={}))
    try:
        return {json.dumps(e["partition"], sort_keys=True): e["offset"] for e in store.read(name).values()}
    finally:
        store.close()


def _both(worker_props, kafka_bootstrap, unique, extra):
    """Run the same rows as records and as batches; return each side's (results, messages, dead letters, offsets)."""
    out = {}
    for emit in ("records", "batches"):
        name = f"gen-{emit}-{unique}"
        config = {"name": name, "connector.class": SOURCE, "topic": f"{name}-t", "emit": emit, "rows": 500,
                  "batch.rows": 64, "topic.creation.default.partitions": 1, **extra}
        if "errors.deadletterqueue.topic.name" in extra:
            config["errors.deadletterqueue.topic.name"] = f"{name}-dlq"
        (group,) = _run(config, worker_props)
        (task,) = group["tasks"]
        dead = _messages(kafka_bootstrap, f"{name}-dlq") if "errors.deadletterqueue.topic.name" in extra else []
        # the partition id names the connector: compare the offsets themselves
        out[emit] = (task, _messages(kafka_bootstrap, config["topic"]), dead,
                     sorted(json.dumps(o) for o in _offsets(worker_props, name).values()))
    return out


def _named(messages, name):
    """The messages' headers with the connector's name (which differs between the two runs) replaced."""
    return [[(k, v.replace(name.encode(), b"NAME") if v else v) for k, v in m[3]] for m in messages]


CONVERTERS = {
    "json-schemas": {},
    "json-plain": {"key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false"},
    "json-numeric": {"value.converter.decimal.format": "NUMERIC", "value.converter.schemas.enable": "false"},
    "avro-embedded": {"key.converter": "io.confluent.connect.avro.AvroConverter",
                      "value.converter": "io.confluent.connect.avro.AvroConverter"},
    "string-key": {"key.converter": "org.apache.kafka.connect.storage.StringConverter"},  # str() of the key Struct
}


@pytest.mark.parametrize("converters", list(CONVERTERS))
def test_batches_write_what_their_records_write(worker_props, kafka_bootstrap, unique, converters):
    # Given 500 generated rows, every 7th refused by the converter (a null in a required field),
    # errors tolerated into a dead-letter topic with context headers
    extra = {**CONVERTERS[converters], "bad.every": 7, "errors.tolerance": "all",
             "errors.deadletterqueue.topic.name": "set per run", "errors.deadletterqueue.context.headers.enable": "true"}
    # When the connector returns them once as records and once as batches
    out = _both(worker_props, kafka_bootstrap, unique, extra)
    (rt, rm, rd, ro), (bt, bm, bd, bo) = out["records"], out["batches"]
    # Then Kafka holds the same records in the same order, the same dead letters, and the same offsets
    assert len(rm) == 500 - 500 // 7 and rm == bm
    assert len(rd) == 500 // 7 and [m[1:3] for m in rd] == [m[1:3] for m in bd]
    assert _named(rd, f"gen-records-{unique}") == _named(bd, f"gen-batches-{unique}")
    assert ro == bo == [json.dumps({"row": 500})]
    assert (bt["status"], bt["records"], bt["errors"], bt["dead_lettered"]) == \
        (rt["status"], rt["records"], rt["errors"], rt["dead_lettered"]) == ("ok", 429, 71, 71)


@pytest.mark.parametrize("transforms", [False, True])
def test_tombstone_rows_write_what_tombstone_records_write(worker_props, kafka_bootstrap, unique, transforms):
    # Given batches where every 5th row is a tombstone (its key, no value), and every 7th row refused
    extra = {"tombstone.every": 5, "bad.every": 7, "errors.tolerance": "all"}
    if transforms:  # a batch holding tombstones goes through transforms as records
        extra.update({"transforms": "insert", "transforms.insert.static.field": "origin",
                      "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
                      "transforms.insert.static.value": "gen"})
    out = _both(worker_props, kafka_bootstrap, unique, extra)
    (rt, rm, _, ro), (bt, bm, _, bo) = out["records"], out["batches"]
    # Then Kafka holds the same records, the tombstones with their keys and null values
    tombstones = [m for m in bm if m[2] is None]
    assert rm == bm and len(tombstones) == 100 and all(m[1] for m in tombstones)
    # (a tombstone's value is not converted, so a row both refused and a tombstone is sent: 100 - 14 refused rows)
    assert len(bm) == 500 - (500 // 7 - 500 // 35)
    assert ro == bo and (bt["records"], bt["errors"]) == (rt["records"], rt["errors"])


def test_a_dead_letter_of_a_batch_row_names_its_own_row(worker_props, kafka_bootstrap, unique):
    # Given batches with a refused row, tolerated into a dead-letter topic with context headers
    extra = {"bad.every": 100, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "set per run",
             "errors.deadletterqueue.context.headers.enable": "true"}
    out = _both(worker_props, kafka_bootstrap, unique, extra)
    # Then each dead letter carries the offset after its own row, as the record path writes it
    for emit in ("records", "batches"):
        offsets = [json.loads(dict(m[3])["__connect.errors.source.offset"]) for m in out[emit][2]]
        assert offsets == [{"row": k} for k in (100, 200, 300, 400, 500)], emit


def test_transforms_on_batches_give_what_they_give_on_records(worker_props, kafka_bootstrap, unique):
    # Given a chain of transforms (the batch falls back to its records for them)
    extra = {"transforms": "insert,drop", "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
             "transforms.insert.static.field": "origin", "transforms.insert.static.value": "gen",
             "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
             "transforms.drop.exclude": "score"}
    out = _both(worker_props, kafka_bootstrap, unique, extra)
    # Then the records in Kafka are the same
    assert out["records"][1] == out["batches"][1] and len(out["batches"][1]) == 500
    assert b'"origin":"gen"' in out["batches"][1][0][2] and b'"score"' not in out["batches"][1][0][2]


def test_a_refused_row_without_tolerance_fails_the_task_naming_it(worker_props, kafka_bootstrap, unique):
    # Given batches whose 150th row the converter refuses, and no error tolerance
    out = _both(worker_props, kafka_bootstrap, unique, {"bad.every": 150})
    for emit in ("records", "batches"):
        task, messages, _, offsets = out[emit]
        # Then the task fails naming the row, and no offset is committed past a row not in Kafka
        assert task["status"] == "failed" and '{"row": 150}' in task["error"], (emit, task["error"])
        committed = json.loads(offsets[0])["row"] if offsets else 0
        assert committed <= 149 and len(messages) >= committed


def test_a_routed_batch_creates_only_the_topic_it_goes_to(worker_props, kafka_bootstrap, unique):
    # Given batches routed by RegexRouter, and created topics of 2 partitions
    name = f"gen-route-{unique}"
    config = {"name": name, "connector.class": SOURCE, "topic": f"{name}-t", "rows": 100, "batch.rows": 40,
              "topic.creation.default.partitions": 2, "transforms": "route",
              "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
              "transforms.route.regex": "(.*)-t", "transforms.route.replacement": "$1-routed"}
    ((task,),) = [g["tasks"] for g in _run(config, worker_props)]
    # Then the rows are in the routed topic, created with 2 partitions, and the unrouted name was never created
    topics = existing_topics(admin_client({"bootstrap.servers": kafka_bootstrap}))
    assert task["topics"] == {f"{name}-routed": 100}
    assert topics.get(f"{name}-routed") == 2 and f"{name}-t" not in topics
    assert len(_messages(kafka_bootstrap, f"{name}-routed")) == 100


def test_a_batch_without_row_offsets_commits_nothing_of_itself_when_it_fails_half_way(worker_props, kafka_bootstrap,
                                                                                      unique):
    # Given batches of 64 rows that carry only their last row's offset, a transform without a column form (so
    # the rows go one by one) and a row the converter refuses at row 150, without error tolerance
    name = f"gen-noff-{unique}"
    config = {"name": name, "connector.class": SOURCE, "topic": f"{name}-t", "rows": 300, "batch.rows": 64,
              "row.offsets": "false", "bad.every": 150, "topic.creation.default.partitions": 1,
              "transforms": "mask", "transforms.mask.type": "org.apache.kafka.connect.transforms.MaskField$Value",
              "transforms.mask.fields": "customer"}
    ((task,),) = [g["tasks"] for g in _run(config, worker_props)]
    # Then the task fails, and the committed offset is the end of the last whole batch before the bad row
    assert task["status"] == "failed"
    assert _offsets(worker_props, name) and [o for o in _offsets(worker_props, name).values()] == [{"row": 128}]
    assert len(_messages(kafka_bootstrap, f"{name}-t")) >= 128
