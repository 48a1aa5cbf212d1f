"""The real PostgreSQL and MariaDB servers answer through the ``postgres_url`` / ``mariadb_url`` fixtures.

No mocks: each test creates a table, writes, reads back and drops it on the server itself.
"""

from __future__ import annotations

import uuid


def _round_trip(url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    table = sa.Table(f"copycat_dbcheck_{uuid.uuid4().hex[:8]}", sa.MetaData(),
                     sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                     sa.Column("name", sa.String(40), nullable=False))
    try:
        table.create(engine)
        with engine.begin() as conn:
            conn.execute(table.insert(), [{"id": 1, "name": "one"}, {"id": 2, "name": "zwei"}])
        with engine.connect() as conn:
            rows = conn.execute(sa.select(table.c.id, table.c.name).order_by(table.c.id)).all()
        assert [tuple(r) for r in rows] == [(1, "one"), (2, "zwei")]
    finally:
        table.drop(engine, checkfirst=True)
        with engine.connect() as conn:
            assert not sa.inspect(conn).has_table(table.name)
        engine.dispose()


def test_postgres_answers(postgres_url):
    _round_trip(postgres_url)


def test_mariadb_answers(mariadb_url):
    _round_trip(mariadb_url)

