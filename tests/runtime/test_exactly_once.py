"""Exactly-once sources (KIP-618): transactions, fencing, atomic offsets, plan-time checks."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_copycat.connect.errors import ConfigException, ConnectException
from airflow_copycat.runtime.batch_producer import produce
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end
from airflow_copycat.runtime.offsets import KafkaOffsetStore, murmur2, murmur2_partition
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.transactions import SourceTransaction, transactional_id
from airflow_copycat.runtime.worker import WorkerConfig
from tests.support.line_server import LineServer

COUNTING = "tests.support.connectors:CountingSource"
LINES = "tests.support.line_server:LineServerSource"


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


@pytest.mark.parametrize("boundary, expected_commits", [("poll", 4), ("interval", 1)])
def test_transaction_boundary(worker_props, kafka_bootstrap, unique, boundary, expected_commits):
    # Given a worker with exactly-once enabled and a source that returns 10 records in polls of 3
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    name = f"bound-{unique}"
    config = {"name": name, "connector.class": COUNTING, "topic": name, "counters": 1, "count": 10, "batch": 3,
              "transaction.boundary": boundary, "transaction.boundary.interval.ms": 600000}
    # When it runs
    (task,) = _run(config, props)
    # Then poll commits after each of the 4 batches (no empty transaction at the end); interval only at the end
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


def test_a_failed_run_keeps_what_it_committed_and_aborts_the_rest(worker_props, kafka_bootstrap, unique,
                                                                  abort_visibility):
    # Given exactly-once sources that fail at record 5: one commits per poll of 2, one only at the end of the run
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    base = {"connector.class": COUNTING, "counters": 1, "count": 8, "batch": 2, "fail.at": 5}
    per_poll = dict(base, name=f"abort-poll-{unique}", topic=f"abort-poll-{unique}")
    at_end = dict(base, name=f"abort-end-{unique}", topic=f"abort-end-{unique}", **{
        "transaction.boundary": "interval", "transaction.boundary.interval.ms": 600000})
    for config in (per_poll, at_end):
        (failed,) = _run(config, props)
        assert failed["status"] == "failed" and "boom at c0:5" in failed["error"]
    # Then the per-poll source committed its first two batches; the other committed nothing
    assert _offsets(props, per_poll["name"]) == {'{"counter": "c0"}': {"n": 4}}
    assert _offsets(props, at_end["name"]) == {}
    # When the fixed sources run again, Then each resumes from its committed offset and finishes
    for config, resumed_from in ((per_poll, {"n": 4}), (at_end, None)):
        (fixed,) = _run(dict(config, **{"fail.at": -1}), props)
        assert fixed["status"] == "ok" and fixed["partitions"][0]["offset_before"] == resumed_from
        assert _offsets(props, config["name"]) == {'{"counter": "c0"}': {"n": 8}}
    # And read_committed consumers see each record once (the aborted transactions' copies are hidden)
    abort_visibility.skip_unless_hidden()
    for config in (per_poll, at_end):
        values = [json.loads(v)["payload"] for v in _committed_values(kafka_bootstrap, config["topic"])]
        assert values == [f"c0-{n}" for n in range(8)]


def test_a_zombie_attempt_that_produces_again_is_told_it_was_fenced(worker_props, unique):
    # Given an attempt of a task with a record in its open transaction
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    worker = WorkerConfig(props, env={})
    name = f"zombie-produce-{unique}"
    admin = admin_client(worker.admin_config())
    admin.create_topics([NewTopic(name, 1)])[name].result()
    tid = transactional_id(worker, name, 0)
    zombie = SourceTransaction(worker.producer_config(), tid, KafkaOffsetStore(worker), name)
    zombie.start()
    zombie.producer.produce(name, b"first")
    zombie.producer.flush(30)
    # When a newer attempt of the same task starts, and the first one goes on producing
    newer = SourceTransaction(worker.producer_config(), tid, KafkaOffsetStore(worker), name)
    newer.start()
    # Then its next record fails the task with an error that names the fencing (the producer itself only
    # says "erroneous state"), not as a bad record to dead-letter
    with pytest.raises(ConnectException, match="fenced") as failed:
        for _ in range(200):
            produce(zombie.producer, name, {"value": b"more"}, lambda e: zombie.error("producing", e))
            zombie.producer.poll(0.05)
    assert tid in str(failed.value)
    newer.close()


def test_a_running_attempt_is_fenced_when_the_next_one_starts(worker_props, kafka_bootstrap, unique, abort_visibility):
    # Given an exactly-once source run that takes a few seconds (a server sending 120 lines, 25 ms apart)
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    name = f"fence-{unique}"
    with LineServer(120, delay_s=0.025) as server:
        config = {"name": name, "connector.class": LINES, "port": server.port, "topic": name}
        plan = make_plan(config, WorkerConfig(props, env={}))
        (group,) = plan["groups"]
        first: list = []
        attempt = threading.Thread(target=lambda: first.append(run_group(group, props)["tasks"][0]))
        attempt.start()
        deadline = time.monotonic() + 30
        while not _offsets(props, name) and time.monotonic() < deadline:  # until the first attempt committed a poll
            time.sleep(0.2)
        # When a second attempt of the same task starts (an Airflow retry while the first still runs)
        (second,) = run_group(group, props)["tasks"]
        attempt.join(60)
    # Then the second attempt fenced the first, which failed saying so, and the second finished the stream
    (first,) = first
    assert first["status"] == "failed" and "fenced" in first["error"], first
    assert second["status"] == "ok", second["error"]
    assert second["partitions"][0]["offset_before"] is not None  # it resumed from what the first committed
    assert _offsets(props, name) == {json.dumps({"server": f"127.0.0.1:{server.port}"}): {"line": 120}}
    values = [json.loads(v)["payload"] for v in _committed_values(kafka_bootstrap, name)]
    assert set(values) == {f"line {n}" for n in range(120)}
    # And read_committed consumers see each line once: the fenced attempt's open transaction was aborted
    abort_visibility.skip_unless_hidden()
    assert values == [f"line {n}" for n in range(120)]


def test_a_replan_with_fewer_tasks_fences_the_task_ids_that_no_longer_exist(worker_props, unique):
    # Given an exactly-once source planned with 3 tasks, and a zombie attempt of task 2 still alive
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    worker = WorkerConfig(props, env={})
    name = f"shrink-{unique}"
    config = {"name": name, "connector.class": COUNTING, "topic": name, "counters": 3, "count": 2, "tasks.max": 3}
    first = make_plan(config, worker)
    assert sum(len(g["tasks"]) for g in first["groups"]) == 3
    zombie = SourceTransaction(worker.producer_config(), transactional_id(worker, name, 2), KafkaOffsetStore(worker),
                               name)
    zombie.start()
    # When the connector is re-planned with one task
    make_plan(dict(config, **{"tasks.max": 1}), worker, previous=first)
    # Then the zombie of task 2 can no longer commit
    with pytest.raises(ConnectException, match="fenced"):
        zombie.commit([({"counter": "c2"}, {"n": 999})])
    assert _offsets(props, name) == {}


def test_dead_letters_commit_with_the_transaction(worker_props, kafka_bootstrap, unique):
    # Given an exactly-once source whose records 2 and 4 fail conversion (tolerated into a DLQ)
    props = dict(worker_props, **{"exactly.once.source.support": "enabled"})
    name, dlq = f"eos-dlq-{unique}", f"eos-dlq-{unique}-dlq"
    config = {"name": name, "connector.class": "tests.runtime.test_dead_letter_replay:MixedSource", "topic": name,
              "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq}
    (task,) = _run(config, props)
    # Then records, dead letters and the offset past all six commit together
    assert task["status"] == "ok", task["error"]
    assert (task["records"], task["dead_lettered"], task["transactions"]) == (4, 2, 1)
    assert _offsets(props, name) == {'{"p": 0}': {"i": 6}}
    assert len(_committed_values(kafka_bootstrap, name)) == 4
    assert len(_committed_values(kafka_bootstrap, dlq)) == 2
