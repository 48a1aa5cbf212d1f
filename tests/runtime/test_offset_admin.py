"""Offset maintenance (list / reset / delete one partition) against the real broker and the file store."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.runtime import offset_admin
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, read_to_end, topic_partition_count
from airflow_copycat.runtime.offsets import FileOffsetStore, KafkaOffsetStore, murmur2_partition, offset_key
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

A = {"filename": "/var/log/app/a.log"}
B = {"filename": "/var/log/app/b.log"}


def _raw_records(worker: WorkerConfig) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of the offset topic as (partition, key, value), in partition order."""
    n = topic_partition_count(admin_client(worker.admin_config()), worker.offset_topic)
    c = Consumer({"bootstrap.servers": worker.bootstrap_servers, "group.id": "offset-admin-check",
                  "enable.partition.eof": True})
    try:
        return [(m.partition(), m.key(), m.value())
                for m in read_to_end(c, [TopicPartition(worker.offset_topic, p, 0) for p in range(n)], timeout_s=30)]
    finally:
        c.close()


@pytest.fixture
def kafka_store(worker_props):
    store = KafkaOffsetStore(WorkerConfig(worker_props, env={}))
    yield store
    store.close()


def test_list_reset_delete_in_the_offset_topic(kafka_store, unique):
    # Given a connector with two committed file offsets
    name = f"logs-{unique}"
    kafka_store.write(name, [(A, {"position": 700}), (B, {"position": 90})])
    kafka_store.write(f"other-{unique}", [(A, {"position": 5})])

    # Listing shows both, sorted, and a readable table
    rows = offset_admin.list_offsets(kafka_store, name)
    assert rows == [{"partition": A, "offset": {"position": 700}}, {"partition": B, "offset": {"position": 90}}]
    table = offset_admin.format_table(rows)
    assert '{"filename":"/var/log/app/a.log"} | {"position":700}' in table

    # When one partition is reset
    result = offset_admin.change_offset(kafka_store, name, "reset", A, {"position": 3})
    assert (result["before"], result["after"], result["partitions"]) == ({"position": 700}, {"position": 3}, 2)
    # Then a fresh reader sees the new value, the other partition and connector untouched
    fresh = KafkaOffsetStore(kafka_store.worker)
    assert offset_admin.list_offsets(fresh, name) == [{"partition": A, "offset": {"position": 3}},
                                                      {"partition": B, "offset": {"position": 90}}]
    assert offset_admin.list_offsets(fresh, f"other-{unique}") == [{"partition": A, "offset": {"position": 5}}]

    # When the other partition is deleted
    result = offset_admin.change_offset(kafka_store, name, "delete", B)
    assert (result["before"], result["after"], result["partitions"]) == ({"position": 90}, None, 1)
    assert list(fresh.read(name)) == [json.dumps(A, sort_keys=True, separators=(",", ":"))]

    # Then the topic holds Kafka Connect's records: key [connector, partition], every value of a key in the
    # partition the store's (murmur2) writer and the transactional produce_in use, a null value for the delete
    records = _raw_records(kafka_store.worker)
    n = topic_partition_count(admin_client(kafka_store.worker.admin_config()), kafka_store.topic)
    for partition, last_value in ((A, b'{"position":3}'), (B, None)):
        key = offset_key(name, partition)
        mine = [(p, v) for p, k, v in records if k == key]
        assert {p for p, _ in mine} == {murmur2_partition(key, n)}
        assert mine[-1][1] == last_value
    assert key == b'["logs-' + unique.encode() + b'",{"filename":"/var/log/app/b.log"}]'


def test_the_file_store_is_changed_the_same_way(tmp_path, unique):
    store = FileOffsetStore(str(tmp_path / "connect.offsets"))
    store.write("logs", [(A, {"position": 700}), (B, {"position": 90})])
    offset_admin.change_offset(store, "logs", "reset", B, {"position": 0})
    offset_admin.change_offset(store, "logs", "delete", A)
    stored = json.loads((tmp_path / "connect.offsets").read_text())["offsets"]
    assert stored == [{"key": ["logs", B], "value": {"position": 0}}]


@pytest.mark.parametrize("request_, bad", [
    (("reset", "{filename: a.log}", '{"position": 0}'), ["partition"]),
    (("reset", json.dumps(A), "[3]"), ["offset"]),
    (("reset", json.dumps(A), "7"), ["offset"]),
    (("reset", "", ""), ["partition", "offset"]),
    (("delete", "null", ""), ["partition"]),
    (("delete", json.dumps(A), '{"position": 1}'), ["offset"]),
    (("rewind", "", ""), ["action"]),
])
def test_invalid_requests_name_every_bad_param(request_, bad):
    with pytest.raises(ConfigException) as e:
        offset_admin.parse_request(*request_)
    assert [p.key for p in e.value.problems] == bad
    for key in bad:
        assert f"  - {key}=" in str(e.value)


def test_valid_requests_are_decoded():
    assert offset_admin.parse_request("list", "", "") == ("list", None, None)
    assert offset_admin.parse_request(" Reset ", json.dumps(A), '{"position": 0}') == ("reset", A, {"position": 0})
    assert offset_admin.parse_request("delete", json.dumps(B), "") == ("delete", B, None)


def test_an_unknown_partition_is_refused_unless_forced_and_nothing_is_written(kafka_store, unique):
    name = f"logs-{unique}"
    kafka_store.write(name, [(A, {"position": 700})])
    before = _raw_records(kafka_store.worker)
    typo = {"filename": "/var/log/app/A.log"}
    for action, offset in (("reset", {"position": 0}), ("delete", None)):
        with pytest.raises(ConfigException) as e:
            offset_admin.change_offset(kafka_store, name, action, typo, offset)
        assert "partition=" in str(e.value) and "/var/log/app/a.log" in str(e.value) and "force" in str(e.value)
    assert _raw_records(kafka_store.worker) == before
    # With force, an offset for a partition not seen yet is written (e.g. start a new file mid-way)
    result = offset_admin.change_offset(kafka_store, name, "reset", typo, {"position": 10}, force=True)
    assert (result["before"], result["after"]) == (None, {"position": 10})
    assert len(kafka_store.read(name)) == 2


def _values(bootstrap: str, topic: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "offset-admin-lines", "enable.partition.eof": True})
    try:
        return [json.loads(m.value())["payload"] for m in read_to_end(c, [TopicPartition(topic, 0, 0)], timeout_s=30)]
    finally:
        c.close()


def test_the_next_source_run_starts_from_the_reset_offset(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a file source that copied five lines
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(5)))
    config = {"name": f"tail-{unique}", "connector.class": "FileStreamSource", "file": str(log),
              "topic": f"tail-{unique}"}

    def run():
        plan = make_plan(config, WorkerConfig(worker_props, env={}))
        return [run_group(g, worker_props) for g in plan["groups"]]

    run()
    store = KafkaOffsetStore(WorkerConfig(worker_props, env={}))
    (row,) = offset_admin.list_offsets(store, config["name"])
    assert row["partition"] == {"filename": str(log)} and row["offset"]["position"] == 35
    # When its position is reset to the start of line 3 (the listed offset, position edited) and it runs again
    offset_admin.change_offset(store, config["name"], "reset", row["partition"], {**row["offset"], "position": 21})
    run()
    # Then it copied lines 3 and 4 again, and only those
    assert _values(kafka_bootstrap, config["topic"]) == [f"line {i}" for i in range(5)] + ["line 3", "line 4"]
    # When the partition's offset is deleted, the next run copies the whole file again
    offset_admin.change_offset(store, config["name"], "delete", row["partition"])
    run()
    assert _values(kafka_bootstrap, config["topic"])[7:] == [f"line {i}" for i in range(5)]
    store.close()


@pytest.mark.parametrize("action", ["reset", "delete"])
def test_a_partition_typed_with_its_keys_in_another_order_changes_the_connectors_own_key(worker_props, unique,
                                                                                       action):
    # The offset topic is keyed by JSON bytes: a JDBC split partition as the connector commits it
    # (protocol, table, split, column), typed by the user as the list table shows it (keys sorted)
    worker = WorkerConfig(worker_props, env={})
    store = KafkaOffsetStore(worker)
    name = f"shop-{unique}"
    connector_form = {"protocol": "1", "table": "main.orders", "split": "1/2", "column": "id"}
    store.write(name, [(connector_form, {"incrementing": 100})])
    typed = offset_admin.compact_json(offset_admin.list_offsets(store, name)[0]["partition"])
    assert typed.startswith('{"column"')
    request = offset_admin.parse_request(action, typed, '{"incrementing": 0}' if action == "reset" else "")

    offset_admin.change_offset(store, name, *request)

    # Then only the connector's own key was written, so a later commit of the connector wins
    keys = {k for _, k, _ in _raw_records(worker) if json.loads(k)[0] == name}
    assert keys == {offset_key(name, connector_form)}
    store.write(name, [(connector_form, {"incrementing": 250})])
    assert offset_admin.list_offsets(KafkaOffsetStore(worker), name)[0]["offset"] == {"incrementing": 250}


def test_offset_keys_are_utf8_like_kafka_connects():
    # Kafka Connect's JSON converter writes non-ASCII characters as UTF-8, not \u escapes
    assert offset_key("c", {"table": "bücher"}) == '["c",{"table":"bücher"}]'.encode("utf-8")
