"""The conformance kit on the JDBC source (SQLite): two tables, incrementing mode."""

from __future__ import annotations

import sqlalchemy as sa

from airflow_copycat.connectors.jdbc import JdbcSourceConnector
from airflow_copycat.testing import source_connector_tests


def make_source(tmp_path, n):
    url = f"sqlite:///{tmp_path}/conformance.db"
    engine = sa.create_engine(url)
    md = sa.MetaData()
    tables = [sa.Table(name, md, sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                       sa.Column("v", sa.String(20), nullable=False)) for name in ("a", "b")]
    md.create_all(engine)
    with engine.begin() as conn:
        for i in range(n):
            conn.execute(tables[i % 2].insert(), [{"id": i + 1, "v": f"row{i}"}])
    engine.dispose()
    return {"connection.url": url, "mode": "incrementing", "incrementing.column.name": "id",
            "topic.prefix": "conf-", "batch.max.rows": 2}


TestJdbcSource = source_connector_tests(
    JdbcSourceConnector, make_source,
    invalid_configs=[
        ({"mode": "sometimes"}, ["mode"]),
        ({"mode": "timestamp+incrementing", "incrementing.column.name": None}, ["incrementing.column.name",
                                                                               "timestamp.column.name"]),
        ({"connection.url": None, "topic.prefix": None}, ["connection.url", "topic.prefix"]),
        ({"numeric.mapping": "exact"}, ["numeric.mapping"]),
    ])
