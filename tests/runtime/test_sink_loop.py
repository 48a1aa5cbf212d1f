"""The sink loop (runtime/sink.py) against the real broker: batches or records, put retries, the
SinkBatch contract."""

from __future__ import annotations

import json
from itertools import groupby

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from hypothesis import given
from hypothesis import strategies as st

from airflow_copycat.connect import (
    ConfigDef,
    ConfigType,
    DataException,
    RetriableException,
    Schema,
    SinkConnector,
    SinkTask,
)
from airflow_copycat.connect.sink_batch import SinkBatch
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.connector_config import FRAMEWORK_CONFIG
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

HERE = "tests.runtime.test_sink_loop"


class LogSink(SinkConnector):
    """Appends ``[how, topic, partition, offset, value]`` per record to ``<file>`` in ``pre_commit``;
    ``how`` says whether the task got it through ``put`` or ``put_batch``. ``fail.puts``: how many
    first calls raise RetriableException."""

    config_def = (ConfigDef().define("file", ConfigType.STRING).define("topics", ConfigType.LIST, "")
                  .define("fail.puts", ConfigType.INT, 0))

    def task_class(self):
        return LogTask


class OwnKeysLogSink(LogSink):
    def task_configs(self, max_tasks):
        """Only its own keys, as many Kafka Connect connectors build task configs: the framework's
        keys (copycat.*, errors.*) are then absent and their declared defaults apply."""
        return [{k: str(self.config[k]) for k in ("name", "connector.class", "topics", "file", "fail.puts")}]


class LogTask(SinkTask):
    def start(self, config):
        self.file, self.fail_puts, self.rows = config["file"], int(config.get("fail.puts") or 0), []

    def _maybe_fail(self):
        if self.fail_puts > 0:
            self.fail_puts -= 1
            raise RetriableException("destination briefly unavailable")

    def put(self, records):
        self._maybe_fail()
        self.rows += [["put", r.topic, r.kafka_partition, r.kafka_offset, r.value] for r in records]

    def pre_commit(self, offsets, *, final=False):
        with open(self.file, "a") as f:
            for row in self.rows:
                f.write(json.dumps(row) + "\n")
        self.rows = []
        return dict(offsets)


class BatchLogSink(LogSink):
    def task_class(self):
        return BatchLogTask


class BatchLogTask(LogTask):
    """Takes batches: writes the batch's records, marked as having come in a batch."""

    def put_batch(self, batch):
        self._maybe_fail()
        assert isinstance(batch, SinkBatch) and len(batch) > 0
        self.rows += [["batch", r.topic, r.kafka_partition, r.kafka_offset, r.value] for r in batch.to_records()]


def _topic(bootstrap, topic, values):
    admin = admin_client({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def _envelope(text):
    conv = JsonConverter()
    conv.configure({}, False)
    return conv.from_connect_data("t", Schema.STRING, text)


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    return [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_put_retry_timeout_defaults_to_the_declared_default(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a sink whose first put() fails with a retriable error, and a task config without
    # copycat.put.retry.timeout.ms (whose declared default gives put() minutes to recover)
    assert FRAMEWORK_CONFIG.keys["copycat.put.retry.timeout.ms"].default == 300000
    topic = f"retry-{unique}"
    _topic(kafka_bootstrap, topic, [_envelope(f"v{i}") for i in range(3)])
    out = tmp_path / "rows.jsonl"
    config = {"name": f"retry-{unique}", "connector.class": f"{HERE}:OwnKeysLogSink", "topics": topic, "file": str(out),
              "fail.puts": 1}
    # When it runs
    (task,) = _run(config, worker_props)
    # Then the put was given again after a back-off, not failed at once, and every record arrived
    assert task["status"] == "ok", task["error"]
    assert task["retries"] == 1 and task["records"] == 3
    assert [r[3:] for r in _rows(out)] == [[0, "v0"], [1, "v1"], [2, "v2"]]


def test_a_task_that_takes_batches_gets_batches_unless_there_are_transforms(worker_props, kafka_bootstrap, unique,
                                                                          tmp_path):
    # Given a topic with a value that is not JSON among good ones
    topic = f"batches-{unique}"
    _topic(kafka_bootstrap, topic, [_envelope("a"), b"{not json", _envelope("c")])
    tolerant = {"errors.tolerance": "all", "topics": topic}
    # When a task that overrides put_batch runs, Then it gets the messages as batches; the bad one
    # is handled by errors.* when the batch is decoded, and its offset still advances
    out = tmp_path / "batch.jsonl"
    (task,) = _run(dict(tolerant, name=f"b-{unique}", **{"connector.class": f"{HERE}:BatchLogSink",
                                                         "file": str(out)}), worker_props)
    assert task["status"] == "ok", task["error"]
    assert (task["records"], task["errors"]) == (2, 1)
    assert _rows(out) == [["batch", topic, 0, 0, "a"], ["batch", topic, 0, 2, "c"]]
    assert task["partitions"][0]["offset_after"] == 3
    # When the same task runs with a transform, Then it gets records through put(), the same ones
    out = tmp_path / "records.jsonl"
    (task,) = _run(dict(tolerant, name=f"r-{unique}", file=str(out), transforms="keep",
                        **{"connector.class": f"{HERE}:BatchLogSink",
                           "transforms.keep.type": "org.apache.kafka.connect.transforms.InsertHeader",
                           "transforms.keep.header": "seen", "transforms.keep.value.literal": "yes"}), worker_props)
    assert task["status"] == "ok", task["error"]
    assert (task["records"], task["errors"]) == (2, 1)
    assert _rows(out) == [["put", topic, 0, 0, "a"], ["put", topic, 0, 2, "c"]]


def test_sink_batch_records_are_the_decoded_messages_and_bad_ones_fail_or_are_handled():
    conv = JsonConverter()
    conv.configure({}, False)
    columns = dict(topics=["t"] * 3, partitions=[0, 0, 1], offsets=[5, 6, 2], keys=[None, None, None],
                   values=[_envelope("x"), b"{bad", _envelope("z")], timestamps=[10, 11, 12])
    # Without the framework's handling, a message that does not decode fails, naming where it is
    batch = SinkBatch(key_converter=conv, value_converter=conv, **columns)
    with pytest.raises(DataException, match="VALUE_CONVERTER failed for the record at topic t partition 0 offset 6"):
        batch.to_records()
    # With it, the handled message is left out, once, however often the records are asked for
    handled = []
    batch = SinkBatch(key_converter=conv, value_converter=conv,
                      on_conversion_error=lambda b, row, stage, c, e: handled.append((row, stage)), **columns)
    records = batch.to_records()
    assert [(r.kafka_partition, r.kafka_offset, r.value, r.timestamp) for r in records] == [(0, 5, "x", 10), (1, 2, "z", 12)]
    assert batch.to_records() == records and handled == [(1, "VALUE_CONVERTER")] and batch.failed_rows() == [1]
    assert batch.runs() == [("t", 0, 0, 2), ("t", 1, 2, 3)] and batch.row("t", 1, 2) == 2


def test_the_default_put_batch_puts_the_batch_records():
    conv = JsonConverter()
    conv.configure({}, False)
    got = []

    class Plain(SinkTask):
        def put(self, records):
            got.extend(records)

    batch = SinkBatch(key_converter=conv, value_converter=conv, topics=["t"], partitions=[0], offsets=[0],
                      keys=[None], values=[_envelope("x")])
    Plain().put_batch(batch)
    assert got == batch.to_records() and got[0].value == "x"


class _Message:
    """Just the accessors of confluent-kafka's Message the batch reads."""

    def __init__(self, topic, partition, offset, value):
        self._t, self._p, self._o, self._v = topic, partition, offset, value

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def key(self):
        return None

    def value(self):
        return self._v

    def headers(self):
        return None

    def timestamp(self):
        return (1, 1000 + self._o)


class _OtherMessage(_Message):
    pass


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2)), min_size=1, max_size=40),
       st.booleans())
def test_sink_batch_runs_and_columns_of_messages(where, mixed):
    # Given messages of interleaved topics and partitions, of one class or of two
    messages = [(_OtherMessage if mixed and i % 3 == 0 else _Message)(t, p, i, f"v{i}".encode())
                for i, (t, p) in enumerate(where)]
    conv = JsonConverter()
    conv.configure({}, False)
    batch = SinkBatch.from_messages(messages, key_converter=conv, value_converter=conv)
    # Then each run is a maximal stretch of one topic-partition, in row order, covering every row
    expected, start = [], 0
    for (t, p), group in groupby(where):
        stop = start + len(list(group))
        expected.append((t, p, start, stop))
        start = stop
    assert batch.runs() == expected
    # and the columns are the messages' accessors, whatever their class
    assert batch.offsets == list(range(len(where))) and batch.topics == [t for t, _ in where]
    assert batch.values == [f"v{i}".encode() for i in range(len(where))] and batch.keys == [None] * len(where)
    assert batch.timestamps == [1000 + i for i in range(len(where))] and batch.headers == [[]] * len(where)


def test_consumers_do_not_idle_while_a_round_is_processed():
    # librdkafka's default fetch.queue.backoff.ms (1 s) stops fetching while the application works on
    # a full prefetch queue; sink consumers back off briefly, unless configured otherwise
    worker = WorkerConfig({"bootstrap.servers": "localhost:9092"}, env={})
    assert worker.consumer_config("g")["fetch.queue.backoff.ms"] == 10
    tuned = WorkerConfig({"bootstrap.servers": "localhost:9092", "consumer.fetch.queue.backoff.ms": 100}, env={})
    assert tuned.consumer_config("g")["fetch.queue.backoff.ms"] == 100
    assert worker.consumer_config("g", {"fetch.queue.backoff.ms": 50})["fetch.queue.backoff.ms"] == 50
