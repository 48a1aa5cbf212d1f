"""Databases for the JDBC source tests: SQLite, and the real PostgreSQL and MariaDB of the session
fixtures ``postgres_url`` / ``mariadb_url`` (tests/conftest.py: they fail, never skip, when a server
does not answer; ``make test`` starts them)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

class Db:
    """One database: its URL for the connector, an engine for the test to write with."""

    def __init__(self, kind: str, url: str):
        self.kind, self.url = kind, url
        self.engine = sa.create_engine(url)
        self.created: list[sa.Table] = []

    def create(self, table: sa.Table) -> sa.Table:
        table.create(self.engine)
        self.created.append(table)
        return table

    def insert(self, table: sa.Table, rows: list[dict]) -> None:
        with self.engine.begin() as conn:
            conn.execute(table.insert(), rows)

    def fqn(self, name: str) -> str:
        if self.kind == "postgresql":
            return f"test.public.{name}"
        if self.kind == "mariadb":
            return f"test.{name}"
        return name

    def close(self) -> None:
        for t in reversed(self.created):
            try:
                t.drop(self.engine)
            except Exception:  # noqa: BLE001
                pass
        self.engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def db(request, tmp_path):
    kind = request.param
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}/source.db"
    elif kind == "postgresql":
        url = request.getfixturevalue("postgres_url")
    else:
        url = request.getfixturevalue("mariadb_url")
    d = Db(kind, url)
    yield d
    d.close()


def _engine_dropping_tables(url: str):
    """Yields ``(engine, made)`` on ``url``; drops the tables (and their ``<table>_view`` views) named in
    ``made`` afterwards."""
    engine = sa.create_engine(url)
    made: list[str] = []
    yield engine, made
    with engine.begin() as conn:
        for t in made:
            conn.execute(sa.text(f'DROP VIEW IF EXISTS "{t}_view"'))
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{t}"'))
    engine.dispose()


@pytest.fixture
def pg(postgres_url):
    """``(engine, made)`` on the test PostgreSQL: the tables (and their ``<table>_view`` views) named in
    ``made`` are dropped after the test."""
    yield from _engine_dropping_tables(postgres_url)



@pytest.fixture(scope="session")
def legacy_postgres_url(postgres_url):
    """URL of a database set up as older ones often are, on the test PostgreSQL, made for the session
    and dropped after it: encoding LATIN1 (C collation), so its sessions talk LATIN1 unless a client
    asks for another encoding; ``extra_float_digits=0`` (PostgreSQL's default before 12), so floats
    printed as text are rounded to 15 significant digits unless a session asks for more; dates printed
    ``SQL, DMY`` and intervals ``sql_standard``."""
    import uuid

    name = f"copycat_legacy_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                             "TEMPLATE template0"))
    try:
        with admin.connect() as conn:
            for setting, value in (("extra_float_digits", "0"), ("DateStyle", "'SQL, DMY'"),
                                   ("IntervalStyle", "sql_standard")):
                conn.execute(sa.text(f"ALTER DATABASE {name} SET {setting} = {value}"))
        yield sa.engine.make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture
def legacy_pg(legacy_postgres_url):
    """``(engine, made)`` as :func:`pg`, on the database of :func:`legacy_postgres_url`."""
    yield from _engine_dropping_tables(legacy_postgres_url)
