"""PostgreSQL change data capture (Debezium's ``io.debezium.connector.postgresql.PostgresConnector``):
logical replication through pgoutput, in bounded runs, as Debezium's change events."""

from .source import PostgresCdcSourceConnector, PostgresCdcSourceTask

__all__ = ["PostgresCdcSourceConnector", "PostgresCdcSourceTask"]
