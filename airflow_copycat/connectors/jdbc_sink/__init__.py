"""JDBC sink connector (Confluent's ``io.confluent.connect.jdbc.JdbcSinkConnector``, Debezium's JDBC sink keys)."""

from .sink import JdbcSinkConnector, JdbcSinkTask

__all__ = ["JdbcSinkConnector", "JdbcSinkTask"]
