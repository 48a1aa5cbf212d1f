"""Consumer lag of a sink connector: how far its consumer group ``connect-<name>`` is behind the
end of each topic-partition it reads, what ``kafka-consumer-groups --describe`` shows.

Sinks commit their positions to that group after every run (mirroring the offsets they keep in
the destination, see :mod:`airflow_copycat.runtime.sink`), so the lag is what the next run will
copy. Kafka only; no Airflow import. Read by the offsets page (:mod:`airflow_copycat.plugins`) and, after
each sink run, by the finish task for the ``lag`` metric (:mod:`airflow_copycat.operators.metrics`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition

from .kafka import admin_client, existing_topics
from .sink import consumer_group
from .worker import WorkerConfig

END_TIMEOUT_S = 15.0
"""How long finding the end of the partitions may take before the lag is reported unknown."""


def sink_lag(worker: WorkerConfig, connector: str, topics: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One row per topic-partition the group ``connect-<connector>`` committed, plus every partition
    of ``topics`` (the sink's configured topics) it has not committed yet, sorted::

        {"topic", "partition", "committed", "end", "lag"}

    ``committed`` is ``None`` for a partition the group never committed (the next run starts it
    from the destination's offsets or the earliest record; ``lag`` is then ``None`` too). ``end``
    is the offset after the partition's last record, found by reading to the end of the
    partition from ``max(committed, high watermark)`` -- not by trusting the watermark alone,
    which some Kafka-protocol brokers report too low -- so on Kafka it costs one empty read.
    ``end`` and ``lag`` are ``None`` when the end was not reached within :data:`END_TIMEOUT_S`.
    Raises the client's exception when the broker cannot be asked at all.
    """
    group = consumer_group(connector)
    admin = admin_client(worker.admin_config())
    committed: dict[tuple[str, int], int | None] = {}
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
    for tp in answer.topic_partitions or []:
        if tp.error is None and tp.offset >= 0:
            committed[(tp.topic, tp.partition)] = tp.offset
    wanted = set(topics)
    if wanted:
        counts = existing_topics(admin)
        for topic in wanted:
            for p in range(counts.get(topic, 0)):
                committed.setdefault((topic, p), None)
    ends = _ends(worker, committed)
    rows = []
    for (topic, partition), offset in sorted(committed.items()):
        end = ends.get((topic, partition))
        rows.append({"topic": topic, "partition": partition, "committed": offset, "end": end,
                     "lag": None if offset is None or end is None else max(0, end - offset)})
    return rows


def _ends(worker: WorkerConfig, positions: dict[tuple[str, int], int | None]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset after its last record (a partition-EOF event's offset)."""
    if not positions:
        return {}
    consumer = Consumer(worker.consumer_config(f"copycat-lag-{uuid.uuid4().hex[:8]}"))
    try:
        starts = []
        for (topic, partition), committed in positions.items():
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=END_TIMEOUT_S)
            starts.append(TopicPartition(topic, partition, max(committed or 0, high, low)))
        consumer.assign(starts)
        ends: dict[tuple[str, int], int] = {}
        pending = set(positions)
        deadline = time.monotonic() + END_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                key = (msg.topic(), msg.partition())
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    if key in pending:
                        ends[key] = msg.offset()
                        pending.discard(key)
                        consumer.pause([TopicPartition(*key)])
        return ends
    finally:
        consumer.close()
