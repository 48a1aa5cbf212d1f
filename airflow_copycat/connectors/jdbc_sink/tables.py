"""The sink's tables: found, created (``auto.create``) and evolved (``auto.evolve``) before any row is written.

:meth:`Tables.ensure` is called by the writer for the first row of each table and
schema in a ``put``, before the transaction that writes the rows (DDL commits on
its own on MySQL/MariaDB). It makes the table fit the row's columns or raises
:class:`~airflow_copycat.connect.errors.ConnectException` naming topic,
partition, offset, table and column, having changed nothing for that row:

* a missing table: created with ``auto.create`` (primary key per ``pk.mode``), else an error;
  a delete against it deletes nothing: :meth:`Tables.ensure` says so, and it is skipped;
* a missing column: added with ``auto.evolve`` when the field is optional or has a
  default, else an error (a new required field without default cannot be added to a
  table with rows);
* a column narrower than its field (an ``int64`` into ``INTEGER``, a float or a Decimal
  with a fraction into an integer column, a Decimal of more scale than a ``NUMERIC(p, s)``
  column, ``float64`` into single precision -- PostgreSQL's ``REAL``, MySQL's ``FLOAT`` --,
  text into a number: :func:`narrowing`), and a table without the primary key that
  upserts, updates or deletes need: an error.

What a table looks like is read once per task (``sqlalchemy.inspect``) and kept
up to date with what this task changed.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import sqlalchemy as sa

from airflow_copycat.connect.data import Decimal, Schema, Type
from airflow_copycat.connect.errors import ConnectException

from .config import SinkSettings
from .dialects import Dialect
from .rows import Row

log = logging.getLogger(__name__)

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
"""A name that means itself in SQL unquoted (on every database the sink writes)."""

_PG_NAME_BYTES = 63  # NAMEDATALEN - 1

_INT_BITS = {Type.INT8: 8, Type.INT16: 16, Type.INT32: 32, Type.INT64: 64}


def _column_bits(t: sa.types.TypeEngine) -> int | None:
    name = type(t).__name__.upper()
    if "BIGINT" in name:
        return 64
    if "SMALLINT" in name or "TINYINT" in name:
        return 16 if "SMALL" in name else 8
    if "MEDIUMINT" in name:
        return 24
    if isinstance(t, sa.types.Integer):
        return 32
    return None


def narrowing(column_type: sa.types.TypeEngine, schema: Schema, dialect: str) -> str | None:
    """Why a column of ``column_type`` cannot hold every value of ``schema``, or ``None``: an integer
    narrower than the field's, a float or a Decimal with a fraction into an integer column, a float64
    into a single-precision column, text into a number or a boolean."""
    if dialect == "sqlite":  # SQLite stores any value in any column
        return None
    if schema.name == Decimal.LOGICAL_NAME:
        scale = Decimal.scale(schema)
        if isinstance(column_type, sa.types.Integer) and scale > 0:
            return f"is {column_type} and the field is a Decimal of scale {scale}: fractions would be lost"
        exact = isinstance(column_type, sa.types.Numeric) and not isinstance(column_type, (sa.types.Float,
                                                                                          sa.types.Integer))
        if exact and column_type.scale is not None and scale > column_type.scale:
            return f"is {column_type} and the field is a Decimal of scale {scale}: digits would be rounded away"
        return None
    if schema.name is not None:  # other logical types
        return None
    t = schema.type
    if t in _INT_BITS:
        if isinstance(column_type, (sa.types.Float, sa.types.Numeric)) and not isinstance(column_type, sa.types.Integer):
            return None
        bits = _column_bits(column_type)
        if bits is not None and bits < _INT_BITS[t]:
            return f"is {column_type} and the field is {t.value}: values would not fit"
        return None
    if t in (Type.FLOAT32, Type.FLOAT64) and isinstance(column_type, sa.types.Integer):
        return f"is {column_type} and the field is {t.value}: fractions would be lost"
    if t is Type.FLOAT64 and _single_precision(column_type):
        return f"is {column_type} (single precision) and the field is float64"
    if t is Type.STRING and isinstance(column_type, (sa.types.Integer, sa.types.Numeric, sa.types.Boolean)):
        return f"is {column_type} and the field is a string"
    return None


def _single_precision(column_type: sa.types.TypeEngine) -> bool:
    """PostgreSQL's ``REAL`` (``float(1..24)`` reflects as it) and MySQL's/MariaDB's ``FLOAT`` (a ``FLOAT(p)``
    of more than 24 bits is created, and reflected, as ``DOUBLE``; MySQL's ``REAL`` is ``DOUBLE``)."""
    return isinstance(column_type, sa.types.Float) and type(column_type).__name__.upper() in ("REAL", "FLOAT")


def _literal(value: Any, dialect: sa.Dialect) -> str | None:
    """``value`` (a field's default) as an SQL literal of ``dialect``, or ``None`` for a value of no simple
    literal. Text is rendered by SQLAlchemy's compiler of the dialect, which knows its escapes (MySQL and
    MariaDB read ``\\`` in a literal as an escape unless ``NO_BACKSLASH_ESCAPES``): a default comes from a
    record's schema, written by whoever produces to the topic, and must never end the literal."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return dialect.statement_compiler(dialect, None).render_literal_value(value, sa.String())
    return None


def _unique_indexes(indexes: list[dict]) -> list[list[str]]:
    """The columns of each unique index that can be an upsert's conflict target as a key: on columns
    only (no expression) and not partial (PostgreSQL's ``CREATE UNIQUE INDEX`` without a constraint)."""
    return [list(i["column_names"]) for i in indexes
            if i.get("unique") and i.get("column_names") and None not in i["column_names"]
            and not (i.get("dialect_options") or {}).get("postgresql_where")
            and not (i.get("dialect_options") or {}).get("sqlite_where")]


def _ddl_failed(row: Row, e: sa.exc.DBAPIError) -> ConnectException:
    """The error of DDL for ``row`` that failed again after the table was read again: named by its record
    and table, with the driver's message (not SQLAlchemy's statement)."""
    message = str(getattr(e, "orig", None) or e).strip().splitlines()
    return ConnectException(f"{row.where}: making table {row.table} fit the record failed: "
                            f"{message[0] if message else type(e).__name__}")


class Tables:
    """What the task knows of its tables; see the module docstring."""

    def __init__(self, engine: sa.Engine, dialect: Dialect, settings: SinkSettings):
        self.engine, self.dialect, self.settings = engine, dialect, settings
        self._known: dict[str, dict[str, Any] | None] = {}  # table -> {"columns": {name: type}, "pk": [...]}
        self._checked: set[tuple] = set()  # (table, signature) already fitted
        self.created: list[str] = []
        self.added: list[str] = []

    def _fold(self, name: str) -> str:
        return name if self.dialect.quote and self.dialect.name == "postgresql" else name.lower()

    def _describe(self, table: str) -> dict[str, Any] | None:
        if table not in self._known:
            schema, _, name = table.rpartition(".")
            inspector = sa.inspect(self.engine)
            if not self.dialect.quote and self.dialect.name == "postgresql":
                name = name.lower()
            if not inspector.has_table(name, schema=schema or None):
                self._known[table] = None
            else:
                cols = inspector.get_columns(name, schema=schema or None)
                pk = inspector.get_pk_constraint(name, schema=schema or None).get("constrained_columns") or []
                uniques = [u.get("column_names") or [] for u in inspector.get_unique_constraints(name, schema=schema or None)]
                uniques += _unique_indexes(inspector.get_indexes(name, schema=schema or None))
                self._known[table] = {"columns": {self._fold(c["name"]): c["type"] for c in cols},
                                      "keys": [[self._fold(c) for c in pk]] + [[self._fold(c) for c in u] for u in uniques]}
        return self._known[table]

    def ensure(self, row: Row) -> bool:
        """Make ``row.table`` fit ``row`` (see the module docstring); ``False`` for a delete against a
        table that does not exist: it deletes nothing, and is not to be written."""
        signature = row.signature()
        if signature in self._checked:
            return True
        self._check_names(row)
        if row.delete and self._missing(row.table):
            return False
        try:
            described = self._describe(row.table)
            if described is None:
                self._create(row)
            else:
                self._fit(row, described)
        except sa.exc.DBAPIError as e:
            # another task (of this connector, or another writer) made the table or added the column
            # between our look and our DDL: look again and fit what is there now
            log.info("%s: DDL on %s failed (%s); reading the table again", row.where, row.table,
                     str(getattr(e, "orig", e)).splitlines()[0])
            self._known.pop(row.table, None)
            described = self._describe(row.table)
            if described is None:
                raise _ddl_failed(row, e) from e
            try:
                self._fit(row, described)
            except sa.exc.DBAPIError as again:
                raise _ddl_failed(row, again) from again
        self._checked.add(signature)
        return True

    def _check_names(self, row: Row) -> None:
        """Refuse names the sink cannot put into its SQL: holding ``%`` (the drivers' placeholder), longer
        than PostgreSQL keeps (it truncates them with a notice: the next task would not find them), and,
        with ``quote.sql.identifiers=never``, anything but a plain identifier (:data:`_PLAIN`; ``.``
        between schema and table): written unquoted, a field name from a record's schema would be SQL."""
        names = [("table", part) for part in row.table.split(".")] + [("column", n) for n, _, _ in row.columns]
        for kind, name in names:
            if "%" in name:
                raise ConnectException(f"{row.where}: table {row.table!r} / {kind} {name!r}: names holding '%' "
                                       "are not supported by the JDBC sink")
            if self.dialect.name == "postgresql" and len(name.encode()) > _PG_NAME_BYTES:
                raise ConnectException(f"{row.where}: table {row.table!r} / {kind} {name!r} is longer than "
                                       f"PostgreSQL's {_PG_NAME_BYTES} bytes, which it would cut silently (and not "
                                       "find the name again): name it with table.name.format or a transform")
            if not self.dialect.quote and not _PLAIN.fullmatch(name):
                raise ConnectException(f"{row.where}: table {row.table!r} / {kind} {name!r} is not a plain "
                                       "identifier (letters, digits, _ and $, not first a digit or $), which "
                                       "quote.sql.identifiers=never would write into the SQL as it is: quote "
                                       "identifiers, or rename it with a transform")

    def _missing(self, table: str) -> bool:
        """Whether ``table`` does not exist; asked of the database again when this task last saw it
        missing (another writer may have made it since)."""
        if self._known.get(table) is None:
            self._known.pop(table, None)
        return self._describe(table) is None

    def _create(self, row: Row) -> None:
        if not self.settings.auto_create:
            raise ConnectException(f"{row.where}: table {row.table} does not exist; create it or set "
                                   "auto.create=true")
        d = self.dialect
        parts = [f"{d.ident(n)} {self._column_type(row, n, s, k)}{'' if (s.optional and not k) else ' NOT NULL'}"
                 for n, s, k in row.columns]
        if row.key_columns:
            parts.append(f"PRIMARY KEY ({', '.join(d.ident(k) for k in row.key_columns)})")
        ddl = f"CREATE TABLE {d.table(row.table)} ({', '.join(parts)})"
        with self.engine.begin() as conn:
            conn.exec_driver_sql(ddl)
        log.info("created table %s for %s", row.table, row.where)
        self.created.append(row.table)
        self._known.pop(row.table, None)

    def _fit(self, row: Row, described: dict[str, Any]) -> None:
        d, columns = self.dialect, described["columns"]
        mode = self.settings.insert_mode
        if row.key_columns and (mode in ("upsert", "update") or row.delete):
            wanted = sorted(self._fold(k) for k in row.key_columns)
            if not any(sorted(k) == wanted for k in described["keys"] if k):
                raise ConnectException(f"{row.where}: table {row.table} has no primary key or unique "
                                       f"constraint on {list(row.key_columns)}, which insert.mode={mode}"
                                       f"{' and deletes' if row.delete else ''} need")
        missing = []
        for name, schema, key in row.columns:
            have = columns.get(self._fold(name))
            if have is None:
                missing.append((name, schema, key))
                continue
            why = narrowing(have, schema, d.name)
            if why:
                raise ConnectException(f"{row.where}: table {row.table} column {name} {why}")
        for name, schema, key in missing:
            default = _literal(schema.default, self.engine.dialect) if schema.default is not None else None
            if not self.settings.auto_evolve:
                raise ConnectException(f"{row.where}: table {row.table} has no column {name}; add it or set "
                                       "auto.evolve=true")
            if key:
                raise ConnectException(f"{row.where}: table {row.table} has no primary key column {name}; "
                                       "a primary key cannot be evolved")
            if not schema.optional and default is None:
                raise ConnectException(f"{row.where}: table {row.table} column {name}: the field is required "
                                       "and has no default, so it cannot be added to a table that has rows")
            self._column_type(row, name, schema, False)
        for name, schema, _ in missing:
            default = _literal(schema.default, self.engine.dialect) if schema.default is not None else None
            ddl = d.add_column(row.table, name, self._column_type(row, name, schema, False), schema.optional, default)
            with self.engine.begin() as conn:
                conn.exec_driver_sql(ddl)
            log.info("added column %s to table %s for %s", name, row.table, row.where)
            self.added.append(f"{row.table}.{name}")
        if missing:
            self._known.pop(row.table, None)

    def _column_type(self, row: Row, name: str, schema: Schema, key: bool) -> str:
        """:meth:`Dialect.column_type`, its refusal named as the sink's errors name a column."""
        try:
            return self.dialect.column_type(schema, key)
        except ValueError as e:
            raise ConnectException(f"{row.where}: table {row.table} column {name} {e}") from None

    def column_types(self, table: str) -> dict[str, Any] | None:
        """``{column: SQLAlchemy type}`` of ``table`` as the database has it (names as this sink writes
        them, folded as the database folds them), ``None`` when it does not exist."""
        described = self._describe(table)
        return None if described is None else dict(described["columns"])

    def fold(self, name: str) -> str:
        """A column name as :meth:`column_types` keys it."""
        return self._fold(name)

    def forget(self, table: str) -> None:
        """Read ``table`` again when next needed (another writer may have changed it)."""
        self._known.pop(table, None)
        self._checked = {s for s in self._checked if s[0] != table}
