"""Exactly-once sources (KIP-618): transactions, fencing, atomic offsets, plan-time checks."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect.errors import ConfigException, ConnectException
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end
from airflow_copycat.runtime.offsets import KafkaOffsetStore, murmur2, murmur2_partition
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.transactions import SourceTransaction, transactional_id
from airflow_copycat.runtime.worker import WorkerConfig

COUNTING = "tests.support.connectors:CountingSource"


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]


def _committed_values(bootstrap, topic):
    """What a read_committed consumer sees in partition 0 of ``topic``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True,
                  "isolation.level": "read_committed"})
    try:
        return [m.value() for m in read_to_end(c, [TopicPartition(topic, 0, 0)], timeout_s=30)]
    finally:
        c.close()


def _offsets(worker_props, name):
    store = KafkaOffsetStore(WorkerConfig(worker_props, env={}))
    return {json.dumps(e["partition"], sort_keys=True): e["offset"] for e in store.read(name).values()}


def test_murmur2_matches_kafka_and_the_store_writer(kafka_bootstrap, unique):
    # Kafka's own UtilsTest vectors
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    assert {k: murmur2(k) for k in vectors} == vectors
    # and librdkafka's murmur2_random (the offset store's own writer) puts every key where we compute it
    topic = f"murmur-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 7)])[topic].result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    placed = {}
    for i in range(300):
        key = json.dumps(["conn", {"file": f"/var/log/{i}.log"}]).encode()
        producer.produce(topic, key=key, value=b"x",
                         on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()))
    producer.flush(30)
    assert len(placed) == 300
    assert all(murmur2_partition(k, 7) == p for k, p in placed.items())


def test_exactly_once_file_source_commits_records_and_offsets_together(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a log file and a source that requires exactly-once delivery
    log = tmp_path / "app.log"
    name = f"eos-{unique}"
    config = {"name": name, "connector.class": "FileStreamSource", "file": str(log), "topic": name,
              "exactly.once.support": "required", "value.converter": "string"}
    lines = []
    for run in range(3):
        # When lines are appended and the source runs, three times
        new = [f"run {run} line {i}" for i in range(40)]
        with log.open("a") as f:
            f.writelines(line + "\n" for line in new)
        lines += new
        (task,) = _run(config, worker_props)
        # Then each run is transactional, under the task's transactional.id
        assert task["status"] == "ok", task["error"]
        assert task["transactional_id"] == f"copycat-{name}-0" and task["transactions"] >= 1
        assert task["records"] == 40
    # And a read_committed consumer sees every line exactly once, in order
    assert [v.decode() for v in _committed_values(kafka_bootstrap, name)] == lines
    # And the committed offset is the file's end
    (offset,) = _offsets(worker_props, name).values()
    assert offset["position"] == log.stat().st_size


@pytest.mark.parametrize("boundary, expected_commits", [("poll", 5), ("interval", 1)])
def test_transaction_boundary(worker_props, kafka_bootstrap, unique, boundary, expected_commits):
    # Given a worker with exactly-once enabled and a source that returns 10 records in polls of 3
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    name = f"bound-{unique}"
    config = {"name": name, "connector.class": COUNTING, "topic": name, "counters": 1, "count": 10, "batch": 3,
              "transaction.boundary": boundary, "transaction.boundary.interval.ms": 600000}
    # When it runs
    (task,) = _run(config, props)
    # Then poll commits after each of the 4 batches (plus the run's final commit); interval only at the end
    assert task["status"] == "ok", task["error"]
    assert task["transactions"] == expected_commits
    assert _offsets(props, name) == {'{"counter": "c0"}': {"n": 10}}
    assert len(_committed_values(kafka_bootstrap, name)) == 10


def test_required_fails_at_plan_time_for_a_connector_without_support(worker_props, unique, tmp_path):
    # Given a connector that does not declare exactly-once support
    config = {"name": f"req-{unique}", "connector.class": COUNTING, "topic": "t", "exactly.once.support": "required"}
    # When it is planned, Then the plan fails naming the key and the connector
    with pytest.raises(ConfigException) as e:
        make_plan(config, WorkerConfig(worker_props, env={}))
    assert "exactly.once.support" in str(e.value) and "CountingSource" in str(e.value)
    # And a supporting connector fails too when offsets live in a file, not in the Kafka transaction
    file_source = {"name": f"req2-{unique}", "connector.class": "FileStreamSource", "file": str(tmp_path / "a.log"),
                   "topic": "t", "exactly.once.support": "required"}
    with pytest.raises(ConfigException, match="offset.storage.file.filename"):
        make_plan(file_source, WorkerConfig(dict(worker_props, **{"offset.storage.file.filename":
                                                                   str(tmp_path / "o.json")}), env={}))
    # And requested (the default) with a non-supporting connector plans fine
    make_plan(dict(config, **{"exactly.once.support": "requested"}), WorkerConfig(worker_props, env={}))


def test_a_zombie_attempt_is_fenced_by_the_next_attempt(worker_props, kafka_bootstrap, unique, abort_visibility):
    # Given an earlier attempt of task 0 still alive, with a record in its open transaction
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    worker = WorkerConfig(props, env={})
    name = f"zombie-{unique}"
    config = {"name": name, "connector.class": COUNTING, "topic": name, "counters": 1, "count": 5, "batch": 5}
    admin = admin_client(worker.admin_config())
    admin.create_topics([NewTopic(name, 1)])[name].result()
    zombie = SourceTransaction(worker.producer_config(), transactional_id(worker, name, 0),
                               KafkaOffsetStore(worker), name)
    zombie.start()
    zombie.producer.produce(name, b"from the zombie")
    zombie.producer.flush(30)
    # When a new attempt of the same task runs
    (task,) = _run(config, props)
    # Then it succeeds and commits its offsets
    assert task["status"] == "ok", task["error"]
    assert _offsets(props, name) == {'{"counter": "c0"}': {"n": 5}}
    # And the zombie can no longer commit: it is told it was fenced, and its offsets are not written
    with pytest.raises(ConnectException, match="fenced"):
        zombie.commit([({"counter": "c0"}, {"n": 999})])
    assert _offsets(props, name) == {'{"counter": "c0"}': {"n": 5}}
    values = _committed_values(kafka_bootstrap, name)
    assert [json.loads(v)["payload"] for v in values if v != b"from the zombie"] == [f"c0-{n}" for n in range(5)]
    # And (on a broker that hides aborted records) read_committed consumers never see the zombie's record
    abort_visibility.skip_unless_hidden()
    assert b"from the zombie" not in values


def test_a_failed_run_aborts_its_records_and_commits_no_offset(worker_props, kafka_bootstrap, unique, abort_visibility):
    # Given an exactly-once source that commits only at the end of a run, and fails at record 5
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    name = f"abort-{unique}"
    config = {"name": name, "connector.class": COUNTING, "topic": name, "counters": 1, "count": 8, "batch": 2,
              "fail.at": 5, "transaction.boundary": "interval", "transaction.boundary.interval.ms": 600000}
    (failed,) = _run(config, props)
    assert failed["status"] == "failed" and "boom at c0:5" in failed["error"]
    # Then no offset was committed: the records produced so far were in the aborted transaction
    assert _offsets(props, name) == {}
    # When the fixed source runs again, Then it starts from the beginning and commits everything once
    (fixed,) = _run(dict(config, **{"fail.at": -1}), props)
    assert fixed["status"] == "ok" and fixed["partitions"][0]["offset_before"] is None
    assert _offsets(props, name) == {'{"counter": "c0"}': {"n": 8}}
    # And read_committed consumers see each record once (the aborted attempt's copies are hidden)
    abort_visibility.skip_unless_hidden()
    assert [json.loads(v)["payload"] for v in _committed_values(kafka_bootstrap, name)] == [f"c0-{n}" for n in range(8)]
