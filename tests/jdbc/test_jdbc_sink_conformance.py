"""The conformance kit's sink contract applied to the JDBC sink, on SQLite files (exactly-once: offsets in the
database). Insert mode without a key, so a record written twice would be two rows."""

from __future__ import annotations

import sqlalchemy as sa

from airflow_copycat.connect import Schema, SchemaBuilder, Struct
from airflow_copycat.connectors.jdbc_sink import JdbcSinkConnector
from airflow_copycat.testing import sink_connector_tests

VALUE = (SchemaBuilder.struct().name("row").field("topic", Schema.STRING).field("partition", Schema.INT32)
         .field("offset", Schema.INT64).field("text", Schema.STRING).build())


def make_value(topic: str, partition: int, offset: int) -> Struct:
    return Struct(VALUE, {"topic": topic, "partition": partition, "offset": offset, "text": f"{topic}/{partition}/{offset}"})


def read_back(config) -> list[dict]:
    engine = sa.create_engine(config["connection.url"])
    out = []
    try:
        inspector = sa.inspect(engine)
        with engine.connect() as conn:
            for table in ("orders", "refunds"):
                if inspector.has_table(table):
                    out += [dict(r._mapping) for r in conn.execute(
                        sa.text(f'SELECT "topic", "partition", "offset", "text" FROM "{table}"'))]
    finally:
        engine.dispose()
    return out


TestJdbcSink = sink_connector_tests(
    JdbcSinkConnector,
    make_sink=lambda tmp_path: {"topics": "orders,refunds", "connection.url": f"sqlite:///{tmp_path}/target.db",
                                "auto.create": "true"},
    read_back=read_back,
    make_value=make_value,
    value_schema=VALUE,
    invalid_configs=[
        ({"insert.mode": "upsert", "batch.size": "0"}, ["pk.mode", "batch.size"]),
        ({"delete.enabled": "true", "db.timezone": "Nowhere/Else"}, ["delete.enabled", "db.timezone"]),
    ],
)
