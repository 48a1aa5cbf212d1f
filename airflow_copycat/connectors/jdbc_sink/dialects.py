"""What differs between PostgreSQL, MySQL/MariaDB and SQLite for the JDBC sink: column types and statements.

A :class:`Dialect` turns a Connect schema into a column type for ``CREATE TABLE`` /
``ALTER TABLE ADD`` (:meth:`Dialect.column_type`) and writes the statements of
each insert mode with the database's own upsert:

==============  ======================================  =====================================
database        upsert                                  bulk path (one statement per batch)
==============  ======================================  =====================================
PostgreSQL      ``INSERT ... ON CONFLICT (pk) DO        ``COPY`` into a temporary table, then one
                UPDATE SET c = EXCLUDED.c``             ``INSERT ... SELECT`` (with that upsert)
MySQL/MariaDB   ``INSERT ... ON DUPLICATE KEY UPDATE    multi-row ``INSERT ... VALUES (..), (..)``
                c = VALUES(c)``                         (the driver folds ``executemany``)
SQLite          ``INSERT ... ON CONFLICT (pk) DO        ``executemany`` of one prepared statement
                UPDATE SET c = excluded.c``             in one transaction
==============  ======================================  =====================================

Types (Confluent's choices where they are sound): integers by width, REAL/DOUBLE,
BOOLEAN, text (``VARCHAR(256)`` for MySQL key columns, which cannot index TEXT),
bytes, Decimal as NUMERIC/DECIMAL with the schema's scale, DATE, TIME, TIMESTAMP
(written as local time of ``db.timezone``), and structs, arrays and maps as JSON
(``JSONB`` on PostgreSQL, ``JSON`` on MariaDB, text on SQLite).

A table's existing column that holds instants (PostgreSQL ``timestamptz``, MySQL/MariaDB
``TIMESTAMP``: :meth:`Dialect.holds_instants`) gets each Connect Timestamp as the instant it
is (:meth:`Dialect.instant`), not as a local time the server would read in its session's zone.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any, Mapping, Sequence

import sqlalchemy as sa

from airflow_copycat.connect.data import Date, Decimal, Schema, Time, Timestamp, Type


class Dialect:
    """One database's types and statements; ``quote`` says whether identifiers are quoted."""

    name = "generic"
    param = "?"  # the DBAPI paramstyle placeholder of the driver

    def __init__(self, engine, quote: bool):
        self.engine = engine
        self.quote = quote
        self._preparer = engine.dialect.identifier_preparer

    # ---------------------------------------------------------------- names

    def ident(self, name: str) -> str:
        return self._preparer.quote_identifier(name) if self.quote else name

    def table(self, name: str) -> str:
        """``schema.table`` or ``table``, each part quoted as configured."""
        schema, _, table = name.rpartition(".")
        return f"{self.ident(schema)}.{self.ident(table)}" if schema else self.ident(table)

    # ---------------------------------------------------------------- types

    def column_type(self, schema: Schema, key: bool) -> str:
        """The column type for a field of ``schema``; ``key``: the column is part of the primary key.
        Raises ``ValueError`` (``is ...: why``) for a field no column type of the database holds exactly."""
        name = schema.name
        if name == Decimal.LOGICAL_NAME:
            return self.decimal(Decimal.scale(schema))
        if name == Date.LOGICAL_NAME:
            return "DATE"
        if name == Time.LOGICAL_NAME:
            return self.time()
        if name == Timestamp.LOGICAL_NAME:
            return self.timestamp()
        t = schema.type
        if t in (Type.STRUCT, Type.ARRAY, Type.MAP):
            return self.json()
        return self.primitive(t, key)

    def primitive(self, t: Type, key: bool) -> str:
        raise NotImplementedError

    def decimal(self, scale: int) -> str:
        return f"NUMERIC(65, {scale})" if scale <= 30 else "NUMERIC"

    def time(self) -> str:
        return "TIME"

    def timestamp(self) -> str:
        return "TIMESTAMP"

    def json(self) -> str:
        return "TEXT"

    # ---------------------------------------------------------------- statements

    def insert(self, table: str, columns: Sequence[str]) -> str:
        cols = ", ".join(self.ident(c) for c in columns)
        marks = ", ".join(self.param for _ in columns)
        return f"INSERT INTO {self.table(table)} ({cols}) VALUES ({marks})"

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        raise NotImplementedError

    def update(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        """``UPDATE ... SET non-key columns WHERE keys``; parameters: non-key values, then key values."""
        sets = ", ".join(f"{self.ident(c)} = {self.param}" for c in columns if c not in keys)
        where = " AND ".join(f"{self.ident(k)} = {self.param}" for k in keys)
        return f"UPDATE {self.table(table)} SET {sets} WHERE {where}"

    def delete(self, table: str, keys: Sequence[str]) -> str:
        where = " AND ".join(f"{self.ident(k)} = {self.param}" for k in keys)
        return f"DELETE FROM {self.table(table)} WHERE {where}"

    def add_column(self, table: str, column: str, type_: str, nullable: bool, default_sql: str | None) -> str:
        default = f" DEFAULT {default_sql}" if default_sql is not None else ""
        return f"ALTER TABLE {self.table(table)} ADD COLUMN {self.ident(column)} {type_}{default}" \
               f"{'' if nullable else ' NOT NULL'}"

    def adapt(self, values: tuple) -> tuple:
        """Statement parameters as the driver takes them (most take the rows' values as they are)."""
        return values

    def unwritable(self, values: Mapping[str, Any]) -> str | None:
        """Why this database cannot hold one of a row's ``values`` (by column) as it is -- ``column c: ...``
        -- or ``None``. The sink refuses such a record (``errors.*``) rather than write another value or
        fail the run."""
        return None

    text_keys_exact = False
    """Whether two different strings are always two keys of a text column (byte-wise comparing collations),
    so a writer may reorder the rows of distinct keys (:func:`.writer.runs`). MySQL's and MariaDB's
    default collations ignore case, accents and trailing spaces; SQLite's NOCASE columns ignore case."""

    instant_columns = False
    """Whether a table of this database may have columns that :meth:`holds_instants` (else a writer need
    not look at the table's columns for them)."""

    def holds_instants(self, column_type) -> bool:
        """Whether a table column of this SQLAlchemy type (as reflected; ``None``: unknown) stores an
        instant, which the server reads from a local time in its session's zone."""
        return False

    def instant(self, local: dt.datetime, zone) -> dt.datetime:
        """The parameter for such a column of a Timestamp the rows hold as naive ``local`` time of
        ``zone`` (``db.timezone``; its ``fold`` tells the repeated hour of a change to winter time)."""
        return local


class Postgres(Dialect):
    name = "postgresql"
    param = "%s"
    text_keys_exact = True  # deterministic collations (the default) compare bytes; a citext or
    # nondeterministic-collation key given twice in one statement is refused by ON CONFLICT itself

    def primitive(self, t: Type, key: bool) -> str:
        return {Type.INT8: "SMALLINT", Type.INT16: "SMALLINT", Type.INT32: "INTEGER", Type.INT64: "BIGINT",
                Type.FLOAT32: "REAL", Type.FLOAT64: "DOUBLE PRECISION", Type.BOOLEAN: "BOOLEAN", Type.STRING: "TEXT",
                Type.BYTES: "BYTEA"}[t]

    def decimal(self, scale: int) -> str:
        return "NUMERIC"  # any precision and scale: what the schema says is kept as given

    def json(self) -> str:
        return "JSONB"

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        return self.insert(table, columns) + self.on_conflict(columns, keys)

    instant_columns = True

    def holds_instants(self, column_type) -> bool:
        return isinstance(column_type, sa.DateTime) and bool(getattr(column_type, "timezone", False))

    def instant(self, local: dt.datetime, zone) -> dt.datetime:
        return local.replace(tzinfo=zone)  # bound (and copied) with its offset: the instant, whatever the session's zone

    def on_conflict(self, columns: Sequence[str], keys: Sequence[str]) -> str:
        rest = [c for c in columns if c not in keys]
        target = ", ".join(self.ident(k) for k in keys)
        if not rest:
            return f" ON CONFLICT ({target}) DO NOTHING"
        sets = ", ".join(f"{self.ident(c)} = EXCLUDED.{self.ident(c)}" for c in rest)
        return f" ON CONFLICT ({target}) DO UPDATE SET {sets}"


class MySql(Dialect):
    name = "mysql"
    param = "%s"

    def primitive(self, t: Type, key: bool) -> str:
        if t is Type.STRING:
            return "VARCHAR(256)" if key else "LONGTEXT"
        if t is Type.BYTES:
            return "VARBINARY(256)" if key else "LONGBLOB"
        return {Type.INT8: "TINYINT", Type.INT16: "SMALLINT", Type.INT32: "INT", Type.INT64: "BIGINT",
                Type.FLOAT32: "FLOAT", Type.FLOAT64: "DOUBLE", Type.BOOLEAN: "BOOLEAN"}[t]

    def decimal(self, scale: int) -> str:
        if scale > 30:
            raise ValueError(f"is a Decimal of scale {scale}: MySQL's and MariaDB's DECIMAL holds at most 30 "
                             "digits after the point (the rest would be rounded away)")
        return f"DECIMAL(65, {scale})"

    def unwritable(self, values: Mapping[str, Any]) -> str | None:
        for name, v in values.items():
            if isinstance(v, float) and not math.isfinite(v):
                return f"column {name} is {v}: MySQL and MariaDB store no NaN or Infinity"
        return None

    def time(self) -> str:
        return "TIME(3)"

    def timestamp(self) -> str:
        return "DATETIME(3)"

    def json(self) -> str:
        return "LONGTEXT"

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        rest = [c for c in columns if c not in keys] or list(keys)
        sets = ", ".join(f"{self.ident(c)} = VALUES({self.ident(c)})" for c in rest)
        return self.insert(table, columns) + f" ON DUPLICATE KEY UPDATE {sets}"

    instant_columns = True

    def holds_instants(self, column_type) -> bool:
        return isinstance(column_type, sa.TIMESTAMP)  # not DATETIME: reflected as sa.DATETIME

    def instant(self, local: dt.datetime, zone) -> dt.datetime:
        # the sink's sessions run in UTC (jdbc.source._utc_session), where the server reads TIMESTAMP values
        return local.replace(tzinfo=zone).astimezone(dt.timezone.utc).replace(tzinfo=None)

    def add_column(self, table: str, column: str, type_: str, nullable: bool, default_sql: str | None) -> str:
        default = f" DEFAULT {default_sql}" if default_sql is not None else ""
        return f"ALTER TABLE {self.table(table)} ADD COLUMN {self.ident(column)} {type_}" \
               f"{' NULL' if nullable else ' NOT NULL'}{default}"


class Sqlite(Dialect):
    name = "sqlite"
    param = "?"

    def __init__(self, engine, quote: bool):
        super().__init__(engine, quote)
        # pysqlite opens transactions on its own and not before every statement, which breaks
        # SAVEPOINTs: the engine's transactions are SQLite's own, and take the write lock at BEGIN
        sa.event.listen(engine, "connect", _sqlite_autocommit)
        sa.event.listen(engine, "begin", _sqlite_begin)

    def adapt(self, values: tuple) -> tuple:
        return tuple(_sqlite_value(v) for v in values)

    def unwritable(self, values: Mapping[str, Any]) -> str | None:
        for name, v in values.items():
            if isinstance(v, float) and math.isnan(v):
                return f"column {name} is nan: SQLite would store NULL (it holds no NaN)"
        return None

    def primitive(self, t: Type, key: bool) -> str:
        return {Type.INT8: "INTEGER", Type.INT16: "INTEGER", Type.INT32: "INTEGER", Type.INT64: "INTEGER",
                Type.FLOAT32: "REAL", Type.FLOAT64: "REAL", Type.BOOLEAN: "BOOLEAN", Type.STRING: "TEXT",
                Type.BYTES: "BLOB"}[t]

    def decimal(self, scale: int) -> str:
        return "TEXT"  # SQLite's NUMERIC is a float: the exact digits are kept as text

    def time(self) -> str:
        return "TIME"

    def timestamp(self) -> str:
        return "DATETIME"

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        rest = [c for c in columns if c not in keys]
        target = ", ".join(self.ident(k) for k in keys)
        if not rest:
            return self.insert(table, columns) + f" ON CONFLICT ({target}) DO NOTHING"
        sets = ", ".join(f"{self.ident(c)} = excluded.{self.ident(c)}" for c in rest)
        return self.insert(table, columns) + f" ON CONFLICT ({target}) DO UPDATE SET {sets}"


def _sqlite_autocommit(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _sqlite_value(v):
    """Decimals as their digits, dates and times as SQLAlchemy writes them to SQLite (ISO text,
    ``YYYY-MM-DD HH:MM:SS.ffffff``), so SQLAlchemy and the JDBC source read them back."""
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    return v


def dialect_for(engine, quote: bool) -> Dialect:
    """The :class:`Dialect` of ``engine``; raises ``ValueError`` for a database the sink does not write."""
    name = engine.dialect.name
    if name == "postgresql":
        return Postgres(engine, quote)
    if name in ("mysql", "mariadb"):
        return MySql(engine, quote)
    if name == "sqlite":
        return Sqlite(engine, quote)
    raise ValueError(f"the JDBC sink writes PostgreSQL, MySQL/MariaDB and SQLite, not {name}")
