"""Testing aids: the embedded Kafka-protocol broker used by the demo and the tests."""
