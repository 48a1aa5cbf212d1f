"""JDBC source connector (Confluent's ``io.confluent.connect.jdbc.JdbcSourceConnector``) on SQLAlchemy."""

from .source import JdbcSourceConnector, JdbcSourceTask

__all__ = ["JdbcSourceConnector", "JdbcSourceTask"]
