"""Re-ingesting a dead-letter queue after a fix: a source connector that reads a DLQ topic.

Records land in a dead-letter topic (``errors.deadletterqueue.topic.name``) when
a connector tolerates errors. Once the cause is fixed -- a transform, a
converter setting, a schema -- :func:`airflow_copycat.runtime.errors.replay_config`
turns the connector's config into the config of this replay connector, which runs
like any source (Airflow DAG, ``copycat run``, its own offsets, so a rerun
replays nothing twice):

* a **source**'s dead letters are records that never reached Kafka. Each is
  rebuilt as it was (key, value and their schemas from the ``connect-json``
  envelope the runtime wrote; see :mod:`airflow_copycat.converters.dead_letters`)
  and sent to the topic it was headed for, through the *fixed* transforms and
  converters, which the replay config copies from the connector;
* a **sink**'s dead letters are Kafka records it could not write. Their original
  bytes go back to the topic they came from (header ``__connect.errors.topic``,
  so the sink needs ``errors.deadletterqueue.context.headers.enable=true``, or
  set ``replay.topic``), where the sink's next run reads them again. Other
  consumers of that topic see them a second time; point ``replay.topic`` at a
  topic of its own to avoid that.

Headers the error handler added (``__connect.errors.*``, ``__copycat.record.*``)
are removed; the record's own headers are kept. A record that fails again
fails the replay task naming its DLQ offset (``errors.tolerance`` of the replay
config decides, as for any connector).
"""

from __future__ import annotations

import time
from typing import Any

from ...connect import ConfigDef, ConfigType, Schema, SourceConnector, SourceRecord, SourceTask
from ...connect.config import ConfigProblem, non_empty
from ...connect.connector import task_partitions
from ...connect.errors import ConnectException, DataException, RetriableException
from ...converters.dead_letters import (
    ERRORS_HEADER_PREFIX,
    FORMAT_ENVELOPE,
    H_ORIGINAL_TOPIC,
    H_RECORD_TOPIC,
    H_VALUE_FORMAT,
    RECORD_HEADER_PREFIX,
    decode_source_record,
)

DLQ_TOPIC_CONFIG = "dlq.topic"
REPLAY_TOPIC_CONFIG = "replay.topic"
BATCH_CONFIG = "batch.size"
BOOTSTRAP_CONFIG = "dlq.bootstrap.servers"
STALL_TIMEOUT_S = 120.0  # no message and no end of partition for this long: the broker is out of reach

CONFIG_DEF = (
    ConfigDef()
    .define(DLQ_TOPIC_CONFIG, ConfigType.STRING, validator=non_empty, importance="high",
            doc="The dead-letter topic to re-ingest.")
    .define(REPLAY_TOPIC_CONFIG, ConfigType.STRING, "",
            doc="Send every replayed record to this topic instead of the one it was headed for or came from.")
    .define(BATCH_CONFIG, ConfigType.INT, 500, doc="Most records returned by one poll().")
    .define(BOOTSTRAP_CONFIG, ConfigType.STRING, "",
            doc="Read the dead-letter topic from this cluster instead of the worker's (with the worker's "
                "security settings).")
)


def _client_config(config: dict[str, Any], worker_client: dict[str, Any] | None) -> dict[str, Any]:
    """The Kafka client settings to read the dead-letter topic with."""
    client = dict(worker_client or {})
    if config.get(BOOTSTRAP_CONFIG):
        client["bootstrap.servers"] = config[BOOTSTRAP_CONFIG]
    if not client.get("bootstrap.servers"):
        raise ConnectException(f"the dead-letter replay reads Kafka itself and has no bootstrap.servers: run it "
                               f"through the framework (a DAG or copycat run), or set {BOOTSTRAP_CONFIG}")
    return client


class DeadLetterReplaySource(SourceConnector):
    """Reads a dead-letter topic and re-emits each record where it belongs: one partition
    per DLQ topic-partition, offset ``{"offset": next Kafka offset}``."""

    config_def = CONFIG_DEF
    reads_kafka = True

    def task_class(self) -> type:
        return DeadLetterReplayTask

    def exactly_once_support(self, config: dict[str, Any]) -> bool:
        """Supported: a DLQ offset names the same record every time."""
        return True

    def validate(self, config: dict[str, Any]) -> list[ConfigProblem]:
        if config.get(DLQ_TOPIC_CONFIG) and config.get(DLQ_TOPIC_CONFIG) == config.get(REPLAY_TOPIC_CONFIG):
            return [ConfigProblem(REPLAY_TOPIC_CONFIG, config[REPLAY_TOPIC_CONFIG],
                                  "is the dead-letter topic itself: the replay would read its own output forever")]
        return []

    def partitions(self) -> list[dict]:
        from confluent_kafka.admin import AdminClient

        topic = self.config[DLQ_TOPIC_CONFIG]
        md = AdminClient(_client_config(self.config, self.kafka_client_config)).list_topics(timeout=15)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return []  # nothing was ever dead-lettered
        return [{"dlq": topic, "partition": p} for p in sorted(t.partitions)]


class DeadLetterReplayTask(SourceTask):
    def start(self, config: dict[str, Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        values = CONFIG_DEF.parse(config)
        self.replay_topic = values[REPLAY_TOPIC_CONFIG]
        self.batch = values[BATCH_CONFIG]
        self.partitions = {(p["dlq"], int(p["partition"])): p for p in task_partitions(config)}
        self.pending = set(self.partitions)
        client = _client_config(values, self.context.kafka_client_config)
        self.stall_s = STALL_TIMEOUT_S
        self.last_progress = time.monotonic()
        self.consumer = Consumer({**client, "group.id": f"copycat-dlq-replay-{config.get('name')}",
                                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
        committed = self.context.offset_storage_reader.offsets(list(self.partitions.values()))
        from ...connect.assignment import canonical

        assignment = []
        for tp, partition in self.partitions.items():
            offset = committed.get(canonical(partition))
            assignment.append(TopicPartition(tp[0], tp[1], int(offset["offset"]) if offset else OFFSET_BEGINNING))
        if assignment:
            self.consumer.assign(assignment)

    def poll(self) -> list[SourceRecord] | None:
        from confluent_kafka import KafkaError, TopicPartition

        if not self.pending:
            return None
        out = []
        messages = self.consumer.consume(num_messages=self.batch, timeout=0.5)
        if messages:
            self.last_progress = time.monotonic()
        elif time.monotonic() - self.last_progress > self.stall_s:
            raise RetriableException(f"no record and no end of partition from dead-letter partitions "
                                     f"{sorted(self.pending)} for {self.stall_s:.0f}s: is the broker reachable?")
        for msg in messages:
            tp = (msg.topic(), msg.partition())
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.pending.discard(tp)
                    self.consumer.pause([TopicPartition(*tp)])
                    continue
                if err.retriable():
                    continue
                raise ConnectException(f"reading dead-letter topic {tp[0]}[{tp[1]}]: {err.str()}")
            if tp in self.pending:
                out.append(self._record(msg, self.partitions[tp]))
        return out or (None if not self.pending else [])

    def _record(self, msg, partition: dict) -> SourceRecord:
        headers = msg.headers() or []
        found = {k: v for k, v in headers if v is not None}
        kept = [(k, v) for k, v in headers if not k.startswith((ERRORS_HEADER_PREFIX, RECORD_HEADER_PREFIX))]
        where = f"dead-letter topic {msg.topic()} partition {msg.partition()} offset {msg.offset()}"
        offset = {"offset": msg.offset() + 1}
        if H_VALUE_FORMAT in found:  # a source's dead letter: rebuild the Connect record
            if not self.replay_topic and H_RECORD_TOPIC not in found:
                raise DataException(f"{where} does not say which topic it was headed for: set {REPLAY_TOPIC_CONFIG}")
            topic = self.replay_topic or found[H_RECORD_TOPIC].decode()
            key_schema, key = self._decode(msg.key(), found, "key", where)
            value_schema, value = self._decode(msg.value(), found, "value", where)
        else:  # a sink's dead letter: the original bytes, back where they came from
            original = found.get(H_ORIGINAL_TOPIC)
            if not self.replay_topic and not original:
                raise DataException(f"{where} has no {H_ORIGINAL_TOPIC} header, so its topic is unknown: set "
                                    f"{REPLAY_TOPIC_CONFIG}, or errors.deadletterqueue.context.headers.enable=true "
                                    f"on the sink that wrote it")
            topic = self.replay_topic or original.decode()
            key_schema, key = Schema.OPTIONAL_BYTES, msg.key()
            value_schema, value = Schema.OPTIONAL_BYTES, msg.value()
        return SourceRecord(topic=topic, key_schema=key_schema, key=key, value_schema=value_schema, value=value,
                            timestamp=msg.timestamp()[1] if msg.timestamp()[0] else None,
                            headers=kept, source_partition=partition, source_offset=offset)

    @staticmethod
    def _decode(data: bytes | None, found: dict, side: str, where: str):
        fmt = found.get(f"{RECORD_HEADER_PREFIX}{side}.format", FORMAT_ENVELOPE.encode()).decode()
        try:
            return decode_source_record(data, fmt, side == "key", found.get(f"{RECORD_HEADER_PREFIX}{side}.schema"))
        except DataException as e:
            raise DataException(f"{where}: cannot rebuild its {side} ({fmt}): {e}") from e

    def stop(self) -> None:
        consumer = getattr(self, "consumer", None)
        if consumer is not None:
            consumer.close()
            self.consumer = None

