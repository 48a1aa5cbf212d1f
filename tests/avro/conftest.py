"""A schema registry for the Avro tests.

The registry named by ``SCHEMA_REGISTRY_URL`` (then every registry test runs against
it, e.g. Confluent's), else the stand-in of :mod:`tests.support.schema_registry`
on 127.0.0.1: no real registry can run on these machines (see that module). Tests
use subjects of their own (topics carry the ``unique`` suffix), so they share one
registry.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def schema_registry_url():
    external = os.environ.get("SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    from tests.support.schema_registry import SchemaRegistryServer

    with SchemaRegistryServer() as registry:
        yield registry.url


@pytest.fixture
def registry_client(schema_registry_url):
    """confluent-kafka's own client: the independent party that checks what the converter did."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": schema_registry_url})
