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
