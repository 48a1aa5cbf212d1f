"""Shared fixtures: one Kafka broker and one Spark session per test session.

Kafka: the embedded Tansu broker on 127.0.0.1, or the cluster named by
``KAFKA_BOOTSTRAP`` (then every Kafka test runs against real Kafka). Tests that
need a Kafka feature Tansu lacks detect it with :func:`broker_is_embedded` and
skip with the reason.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Spark's Python workers must run this interpreter (it has confluent-kafka etc.), however pytest was started.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def kafka_bootstrap():
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    from airflow_copycat.testing.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap


def broker_is_embedded() -> bool:
    return not os.environ.get("KAFKA_BOOTSTRAP")


@pytest.fixture
def unique():
    """A short unique suffix for topic, connector and group names."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def worker_props(kafka_bootstrap, unique):
    """Worker properties with a per-test offset topic (few partitions: quick to read to the end)."""
    return {
        "bootstrap.servers": kafka_bootstrap,
        "offset.storage.topic": f"copycat-offsets-{unique}",
        "offset.storage.partitions": 3,
        "offset.flush.interval.ms": 1000,
    }


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session."""
    from pyspark.sql import SparkSession

    from airflow_copycat.runtime.submit import default_spark_conf

    builder = SparkSession.builder.master("local[2]").appName("copycat-tests")
    for k, v in default_spark_conf("local[2]").items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    yield session
    session.stop()


class AbortVisibility:
    """Whether the broker hides aborted transactional records from ``read_committed`` consumers."""

    REASON = ("this broker shows aborted transactional records to read_committed consumers (the embedded Tansu "
              "broker does, FACTS.md); set KAFKA_BOOTSTRAP to a Kafka cluster to run the abort-visibility assertions")

    def __init__(self, hidden: bool):
        self.hidden = hidden

    def skip_unless_hidden(self):
        """Call after a test's other assertions, before those that need aborted records hidden."""
        if not self.hidden:
            pytest.skip(self.REASON)


@pytest.fixture(scope="session")
def abort_visibility(kafka_bootstrap) -> AbortVisibility:
    """Probed, not assumed: one record is produced in a transaction that is aborted, then read
    back with ``isolation.level=read_committed``. Kafka hides it; the embedded Tansu broker
    does not (FACTS.md), so tests skip only their abort-visibility assertions there.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    from airflow_copycat.runtime.kafka import admin_client, read_to_end

    topic = f"copycat-abort-probe-{uuid.uuid4().hex[:8]}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    try:
        seen = [m.value() for m in read_to_end(consumer, [TopicPartition(topic, 0, 0)], timeout_s=30)]
    finally:
        consumer.close()
    assert b"committed" in seen, f"the broker lost a committed transactional record: {seen}"
    return AbortVisibility(b"aborted" not in seen)
