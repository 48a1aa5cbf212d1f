"""Testing aids: the conformance kit for connector authors, and the embedded Kafka-protocol broker
used by the demo and the tests (:mod:`.broker`, imported on its own)."""

from .conformance import sink_connector_tests, source_connector_tests

__all__ = ["sink_connector_tests", "source_connector_tests"]
