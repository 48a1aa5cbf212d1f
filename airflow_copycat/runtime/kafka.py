"""Small Kafka helpers on top of confluent-kafka: topic creation, partition listing,
and reading partitions to their end.

The end of a partition is found by consuming with ``enable.partition.eof`` until
the partition reports EOF -- never by watermark or list-offsets queries, which
some Kafka-protocol brokers answer wrongly.
"""

from __future__ import annotations

import re
import time
from typing import Any, Iterable, Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ..connect.errors import ConnectException, RetriableException


def _list_error(e: KafkaException) -> ConnectException:
    """A failed metadata request: retriable when the broker is out of reach, not when it refused us."""
    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if err is not None and (err.fatal() or err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                                                          KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                          KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError._SSL)):
        return ConnectException(f"cannot list topics: {e}")
    return RetriableException(f"cannot list topics: {e}")


def admin_client(config: dict) -> AdminClient:
    return AdminClient(dict(config))


def existing_topics(admin: AdminClient | Producer, timeout: float = 15.0) -> dict[str, int]:
    """Topic name -> partition count, for every topic the broker reports, from an admin client or a
    producer (both answer ``list_topics``; a producer that is connected already answers sooner).

    Lists all topics (no topic filter): a metadata request for one named topic
    may auto-create it on brokers with ``auto.create.topics.enable``.
    """
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        raise _list_error(e) from e
    return {name: len(t.partitions) for name, t in md.topics.items() if not t.error}


def ensure_topic(
    admin: AdminClient,
    name: str,
    *,
    partitions: int = 1,
    replication_factor: int = -1,
    config: dict | None = None,
    known: dict[str, int] | None = None,
) -> bool:
    """Create topic ``name`` if it does not exist. Returns True if this call created it."""
    topics = known if known is not None else existing_topics(admin)
    if name in topics:
        return False
    fut = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=config or {})],
        operation_timeout=30,
    )[name]
    try:
        fut.result()
    except KafkaException as e:
        if e.args and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:  # another task won the race
            if known is not None:
                known[name] = existing_topics(admin).get(name, partitions)
            return False
        raise ConnectException(f"cannot create topic {name!r}: {e}") from e
    # Wait until the topic's metadata is visible, so producers do not race its creation.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and name not in existing_topics(admin):
        time.sleep(0.1)
    if known is not None:
        known[name] = partitions
    return True


def topic_partition_count(admin: AdminClient, name: str, timeout: float = 15.0) -> int:
    """Partitions of topic ``name``; 0 if it does not exist. Raises if the broker reports
    another error for it (not authorized, leader not available...)."""
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        raise _list_error(e) from e
    t = md.topics.get(name)
    if t is None:
        return 0
    if t.error is not None:
        if t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return 0
        raise ConnectException(f"topic {name}: {t.error.str()}")
    return len(t.partitions)


def topic_config(admin: AdminClient, name: str) -> dict[str, str]:
    """The configuration of topic ``name`` (empty if the broker cannot describe it)."""
    from confluent_kafka.admin import ConfigResource

    try:
        future = admin.describe_configs([ConfigResource("topic", name)])[ConfigResource("topic", name)]
        return {k: v.value for k, v in future.result(timeout=15).items()}
    except Exception:  # describe is best effort: the check it feeds is a safety net
        return {}


def sink_topics(values: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """A sink config's ``topics`` (a list or comma-separated text) and ``topics.regex`` (``None`` when unset)."""
    topics = values.get("topics") or []
    if isinstance(topics, str):
        topics = [t.strip() for t in topics.split(",") if t.strip()]
    return list(topics), values.get("topics.regex") or None


def matching_partitions(
    admin: AdminClient, *, topics: Iterable[str] = (), regex: str | None = None
) -> list[tuple[str, int]]:
    """Sorted ``(topic, partition)`` of the named topics that exist and of every topic
    matching ``regex`` (full match, as Kafka's ``topics.regex``)."""
    wanted = set(topics)
    pattern = re.compile(regex) if regex else None
    md = admin.list_topics(timeout=15)
    out = []
    for name, t in md.topics.items():
        if t.error or not (name in wanted or (pattern and pattern.fullmatch(name))):
            continue
        out += [(name, p) for p in t.partitions]
    return sorted(out)


def read_to_end(
    consumer: Consumer,
    assignments: list[TopicPartition],
    *,
    timeout_s: float = 120.0,
    batch: int = 1000,
) -> Iterator:
    """Yield every message from the assigned positions to the end of each partition.

    Each partition is paused once it reports EOF, so records written after that
    are left for the next read. Raises on consumer errors other than EOF, and
    :class:`RetriableException` if the end is not reached within ``timeout_s``.

    ``consume`` returns when ``batch`` messages are there or after its short wait: the wait
    is what a read of a few messages (an offset topic, a small partition) costs at its end.
    """
    if not assignments:
        return
    consumer.assign(assignments)
    pending = {(tp.topic, tp.partition) for tp in assignments}
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise RetriableException(f"did not reach the end of {sorted(pending)} within {timeout_s}s")
        for msg in consumer.consume(num_messages=batch, timeout=0.01):
            key = (msg.topic(), msg.partition())
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if key in pending:
                        pending.discard(key)
                        consumer.pause([TopicPartition(msg.topic(), msg.partition())])
                    continue
                if err.retriable():
                    continue
                raise ConnectException(f"consumer error on {key[0]}[{key[1]}]: {err.str()}")
            if key in pending:
                yield msg
