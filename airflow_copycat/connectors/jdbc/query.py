"""Custom query mode: the user's ``query`` as a derived table whose columns are known.

The query is never edited: the connector reads ``SELECT ... FROM (<query>) copycat_q WHERE ...``,
so a query with its own WHERE, JOIN, GROUP BY or UNION works, and the incrementing/timestamp
conditions apply to its result columns. Its text is passed verbatim (colons are not bind
parameters, percent signs are escaped for the driver); a trailing ``;`` is dropped.

Column types come from the database itself, by reflecting the query like a table: inside a
transaction that is rolled back, a ``TEMPORARY VIEW`` (PostgreSQL, SQLite) or an empty
``TEMPORARY TABLE ... AS SELECT * FROM (<query>) copycat_q LIMIT 0`` (MySQL/MariaDB, which have
no temporary views) is created and read with SQLAlchemy's inspector, then dropped. This gives
the same types as table mode (numeric precision and scale, TIMESTAMP vs DATETIME on MySQL,
``timestamp`` vs ``timestamptz`` on PostgreSQL), unlike DB-API cursor descriptions, which
SQLite leaves untyped. The session needs the right to create temporary objects (PostgreSQL's
TEMP privilege, MySQL's CREATE TEMPORARY TABLES; both usual).

SQLite gives a column a type only when it is a plain column reference; a computed column
(``a + 1``, ``count(*)``, even a ``CAST``) takes the storage class of its first non-NULL value
(INTEGER -> INT64, REAL -> FLOAT64, BLOB -> BYTES, else STRING).
"""

from __future__ import annotations

import copy
import hashlib

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from airflow_copycat.connect import ConnectException

ALIAS = "copycat_q"

_SQLITE_STORAGE = {"integer": sa.BigInteger(), "real": sa.Float(precision=53), "blob": sa.LargeBinary(),
                   "text": sa.Text()}


def clean(query: str) -> str:
    """The query without surrounding blanks and trailing ``;``, ending in a newline: wrapped as
    ``(<query>\n) copycat_q``, a trailing ``-- comment`` cannot swallow the closing parenthesis."""
    return query.strip().rstrip(";").strip() + "\n"


def _verbatim(query: str) -> sa.TextClause:
    return sa.text(clean(query).replace(":", r"\:"))


def driver_values(_inspector, _table, column: dict) -> None:
    """A reflected column's type as the connector reads it (``column_reflect`` listener of the tables it
    reflects, and applied to a query's columns), where SQLAlchemy's own result processing would change
    the driver's values:

    * MySQL/MariaDB ``DOUBLE`` and ``REAL`` reflect with ``asdecimal=True``, which returns each value as
      a Decimal rounded to 10 places (1/3 read as 0.3333333333, 1.5e-12 as 0.0): read as the driver's
      floats;
    * a MySQL/MariaDB ``SET`` returns a Python set (written to Kafka as ``"{'y', 'x'}"``, in any order):
      read as the server's text, ``x,y`` in the order the column defines its members."""
    kind = column["type"]
    if isinstance(kind, sa.Float) and kind.asdecimal:
        kind = copy.copy(kind)
        kind.asdecimal = False
        column["type"] = kind
    elif isinstance(kind, mysql.SET):
        column["type"] = sa.String()


def reflect_columns(engine: sa.Engine, query: str) -> list[dict]:
    """The query's result columns as the inspector reports table columns (name, type, nullable), their
    types as :func:`driver_values` leaves them."""
    name = "copycat_q_" + hashlib.sha1(clean(query).encode()).hexdigest()[:10]
    mysql = engine.dialect.name in ("mysql", "mariadb")
    try:
        with engine.connect() as conn:
            trans = conn.begin()
            try:
                quoted = conn.dialect.identifier_preparer.quote(name)
                body = clean(query).replace(":", r"\:")  # text(): no bind parameters; % escaped per driver
                if mysql:
                    conn.execute(sa.text(f"CREATE TEMPORARY TABLE {quoted} AS SELECT * FROM ({body}) {ALIAS} LIMIT 0"))
                else:
                    conn.execute(sa.text(f"CREATE TEMPORARY VIEW {quoted} AS {body}"))
                try:
                    columns = sa.inspect(conn).get_columns(name)
                    if engine.dialect.name == "sqlite":
                        for col in columns:
                            if isinstance(col["type"], sa.types.NullType):
                                col["type"] = _sqlite_storage(conn, query, col["name"])
                finally:
                    if mysql:  # CREATE/DROP TEMPORARY TABLE do not end the transaction
                        conn.execute(sa.text(f"DROP TEMPORARY TABLE IF EXISTS {quoted}"))
            finally:
                trans.rollback()  # drops the temporary view (PostgreSQL, SQLite)
    except sa.exc.SQLAlchemyError as e:
        raise ConnectException(f"the query (query) cannot be run: {e}") from e
    if not columns:
        raise ConnectException("the query (query) returns no columns")
    for col in columns:
        driver_values(None, None, col)
    names = [c["name"] for c in columns]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConnectException(f"the query (query) returns several columns named {dupes}: give them distinct aliases")
    return columns


def _sqlite_storage(conn: sa.Connection, query: str, column: str) -> sa.types.TypeEngine:
    col = sa.column(column)
    sub = _verbatim(query).columns(col).subquery(ALIAS)
    found = conn.execute(sa.select(sa.func.typeof(sub.c[column])).where(sub.c[column].is_not(None)).limit(1)).scalar()
    return _SQLITE_STORAGE.get(found or "", sa.Text())


class _NoPrimaryKey:
    columns: tuple = ()


class DerivedTable:
    """``(<query>) AS copycat_q`` with typed columns, used where a reflected ``sa.Table`` is: its
    ``columns`` (and ``c``) select from the derived table; it has no primary key (records get no key)."""

    primary_key = _NoPrimaryKey()

    def __init__(self, query: str, columns: list[dict]):
        self.subquery = _verbatim(query).columns(
            *[sa.Column(c["name"], c["type"], nullable=c.get("nullable", True)) for c in columns]).subquery(ALIAS)
        self.columns = self.c = self.subquery.columns


def derived_table(query: str, columns: list[dict]) -> DerivedTable:
    return DerivedTable(query, columns)
