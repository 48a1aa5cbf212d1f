"""Query results as Arrow tables typed as the Connect schema: the JDBC source's batch path.

A :class:`ColumnPlan` per column says which Arrow type holds its Connect values (the table of
:mod:`airflow_copycat.connect.batch`: ``int8``..``int64``, ``float32``/``float64``, ``bool``,
``string``, ``binary``, ``decimal128(p, s)``, ``timestamp("us", "UTC")``, ``date32``,
``time64("us")``). Every value a batch holds is the value the record path
(:func:`.schema.map_column`'s ``convert`` of the driver's value) makes, so a batch's
``to_records()`` equals the records; where a value has no Arrow form (a NaN numeric, a
decimal wider than 38 digits, an integer out of range) the caller falls back to records.

Readers, picked per dialect by measurement (2M-row table of 10 columns, this project's bench):

* PostgreSQL: **ADBC** (``adbc-driver-postgresql``: libpq's binary protocol straight into Arrow,
  about 3x psycopg fetch + transpose). Parameters are bound as ``$n`` (SQLAlchemy's
  ``numeric_dollar`` style); NUMERIC arrives as text and is cast to ``decimal128``; a naive
  ``timestamp`` is placed in its zone with Python's rule (fold 0; a daylight-saving gap falls
  back to per-value conversion). Only columns of known types (:func:`adbc_supported`) take
  this path; a table with another column type (intervals, arrays, ranges, ``timetz``, ...)
  is read as records.
* MySQL/MariaDB and SQLite: the rows SQLAlchemy fetches (pymysql / sqlite3), transposed into
  columns (:func:`table_from_rows`): columns whose driver values already are Connect values
  (integers, doubles, text) go to Arrow in one call, the others through ``convert`` first.
"""

from __future__ import annotations

import decimal
import json
from ...extras import require
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
from sqlalchemy import types as sat

from airflow_copycat.connect import Schema
from airflow_copycat.connect.data import Date, Decimal, Time, Timestamp, Type

from .schema import ColumnMapping

UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
_INF = float("inf")

_PRIMITIVE = {Type.BOOLEAN: pa.bool_(), Type.INT8: pa.int8(), Type.INT16: pa.int16(), Type.INT32: pa.int32(),
              Type.INT64: pa.int64(), Type.FLOAT32: pa.float32(), Type.FLOAT64: pa.float64(),
              Type.STRING: pa.string(), Type.BYTES: pa.binary()}
# Connect types whose driver values pa.array takes as they are, with the record path's value
# (int(v), float(v), a str): anything else it refuses, and the column goes through convert()
_AS_IS = {Type.INT8, Type.INT16, Type.INT32, Type.INT64, Type.FLOAT64, Type.STRING}
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError,
                 ValueError, decimal.InvalidOperation)


def arrow_type(schema: Schema, precision: int | None = None) -> pa.DataType | None:
    """The Arrow type holding values of a column's Connect ``schema`` (``precision``: the
    column's declared decimal precision), or ``None`` when there is none."""
    if schema.name == Decimal.LOGICAL_NAME:
        scale = Decimal.scale(schema)
        p = precision if precision and scale <= precision <= 38 else 38
        return pa.decimal128(p, scale) if 0 <= scale <= p else None
    if schema.name == Timestamp.LOGICAL_NAME:
        return UTC_TIMESTAMP
    if schema.name == Date.LOGICAL_NAME:
        return pa.date32()
    if schema.name == Time.LOGICAL_NAME:
        return pa.time64("us")
    if schema.name is not None:
        return None
    return _PRIMITIVE.get(schema.type)


@dataclass(frozen=True)
class ColumnPlan:
    """One column on the batch path: its mapping, Arrow type, and (naive timestamps) its zone."""

    mapping: ColumnMapping
    type: pa.DataType
    coltype: sat.TypeEngine
    zone: str | None = None
    """Naive timestamp columns: the zone their values are in (see :func:`.schema.naive_zone`)."""

    @property
    def as_is(self) -> bool:
        return self.mapping.schema.name is None and self.mapping.schema.type in _AS_IS


def plans(mappings: Sequence[ColumnMapping], coltypes: Sequence[sat.TypeEngine], zones: Sequence[str | None]
          ) -> list[ColumnPlan] | None:
    """The columns' plans, or ``None`` when one has no Arrow type (the table is read as records)."""
    out = []
    for m, t, z in zip(mappings, coltypes, zones):
        at = arrow_type(m.schema, getattr(t, "precision", None) if isinstance(t, sat.Numeric) else None)
        if at is None:
            return None
        out.append(ColumnPlan(m, at, t, z))
    return out


def _array(values: list, plan: ColumnPlan) -> pa.Array:
    return pa.array(values, type=plan.type)


def column_from_values(raw: Sequence, plan: ColumnPlan) -> pa.Array:
    """Driver values of one column as Arrow: as they are when they already are Connect values,
    else through the mapping's ``convert`` (raises an Arrow/Python error when a value has no Arrow form)."""
    if plan.as_is:
        try:
            return _array(raw if isinstance(raw, list) else list(raw), plan)
        except _ARROW_ERRORS:
            pass  # a value of another Python type (SQLite's dynamic typing, bytes for text): convert it
    convert = plan.mapping.convert
    values = [convert(v) for v in raw]
    arr = _array(values, plan)
    if plan.type == pa.float32() and arr.null_count < len(arr):
        # a double beyond float32's range (SQLite REAL is a double) would become inf: the record path keeps it
        infinite = sum(1 for v in values if v is not None and v in (_INF, -_INF))
        if (pc.sum(pc.is_inf(arr)).as_py() or 0) != infinite:
            raise ValueError("a value beyond float32's range")
    return arr


def table_from_rows(rows: Sequence, columns: Sequence[ColumnPlan]) -> pa.Table | None:
    """Fetched rows transposed into a table of the plans' columns; ``None`` when a value has no
    Arrow form (the caller builds records of these rows instead). ``convert`` errors propagate,
    as on the record path."""
    cols = list(zip(*rows)) if rows else [()] * len(columns)
    arrays = []
    for plan, raw in zip(columns, cols):
        try:
            arrays.append(column_from_values(raw, plan))
        except _ARROW_ERRORS:
            if not plan.as_is:
                # convert() itself may be what failed: let the record path raise it, row by row
                convert = plan.mapping.convert
                for v in raw:
                    convert(v)
            return None
    return pa.Table.from_arrays(arrays, names=[p.mapping.name for p in columns])


# ------------------------------------------------------------------ PostgreSQL through ADBC


_ADBC_TYPES = (sat.Integer, sat.Numeric, sat.Boolean, sat.Date, sat.LargeBinary, sat._Binary, sat.JSON, sat.Uuid)


def adbc_supported(coltypes: Sequence[sat.TypeEngine]) -> bool:
    """Whether ADBC gives every column's values in a form this module turns into the record path's."""
    from sqlalchemy.dialects import postgresql as pg

    for t in coltypes:
        if isinstance(t, (pg.ENUM, sat.Enum, sat.Interval, sat.ARRAY, pg.INTERVAL)):
            return False
        if isinstance(t, (sat.DateTime, sat.Time)):
            if isinstance(t, sat.Time) and getattr(t, "timezone", False):
                return False
            continue
        if isinstance(t, sat.String) and type(t).__name__.upper() in ("VARCHAR", "TEXT", "CHAR", "STRING",
                                                                       "BPCHAR", "CITEXT", "NVARCHAR", "NCHAR"):
            continue
        if isinstance(t, _ADBC_TYPES) or type(t).__name__.upper() in ("BYTEA", "JSONB", "UUID", "REAL",
                                                                      "DOUBLE_PRECISION"):
            continue
        return False
    return True


def _adbc_python(v: Any, storage_type: pa.DataType, ext: str | None) -> Any:
    """An ADBC value as psycopg returns it (the driver value the record path converts)."""
    if v is None:
        return None
    if ext == "numeric":
        return decimal.Decimal(v)
    if ext == "arrow.json" or (ext is not None and "json" in ext):
        return json.loads(v)
    return v


def _ext_name(t: pa.DataType) -> str | None:
    if isinstance(t, pa.BaseExtensionType):
        name = getattr(t, "type_name", None)  # opaque types: the PostgreSQL type's name
        return str(name) if name else t.extension_name
    return None


def _storage(col: pa.ChunkedArray) -> pa.ChunkedArray:
    if isinstance(col.type, pa.BaseExtensionType):
        return pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)
    return col


def convert_adbc_column(col: pa.ChunkedArray, plan: ColumnPlan) -> pa.ChunkedArray:
    """One column as ADBC read it, as the plan's Arrow type holding the record path's values;
    raises an Arrow/Python error when a value has no Arrow form."""
    ext = _ext_name(col.type)
    storage = _storage(col)
    target = plan.type
    if ext is None and storage.type == target:
        return storage
    try:
        if ext is None and plan.mapping.schema.name == Timestamp.LOGICAL_NAME and pa.types.is_timestamp(storage.type):
            if storage.type.tz is not None:
                return pc.cast(storage, target)
            # fold 0 as Python's replace(tzinfo=zone): the earlier of two ambiguous instants; a gap raises
            local = pc.cast(storage, pa.timestamp("us"))
            return pc.cast(pc.assume_timezone(local, plan.zone or "UTC", ambiguous="earliest", nonexistent="raise"),
                           target)
        if ext == "numeric" and pa.types.is_decimal(target):
            return pc.cast(storage, target)
        if ext is None and (pa.types.is_integer(storage.type) and pa.types.is_integer(target)
                            or pa.types.is_floating(storage.type) and pa.types.is_floating(target)
                            and storage.type.bit_width <= target.bit_width
                            or pa.types.is_string(storage.type) and pa.types.is_string(target)
                            or pa.types.is_binary(storage.type) and pa.types.is_binary(target)
                            or pa.types.is_large_string(storage.type) and pa.types.is_string(target)):
            return pc.cast(storage, target)
    except _ARROW_ERRORS:
        pass  # per value below (a daylight-saving gap, more digits than the scale, NaN: convert decides)
    convert = plan.mapping.convert
    st = storage.type
    values = [convert(_adbc_python(v, st, ext)) for v in col.to_pylist()] if ext is not None else \
        [convert(v) for v in storage.to_pylist()]
    return pa.chunked_array([pa.array(values, type=target)], type=target)


def adbc_python_values(col: pa.ChunkedArray) -> list:
    """A column as the driver values psycopg would have given (for the record path's ``convert``)."""
    ext = _ext_name(col.type)
    storage = _storage(col)
    if ext is None:
        return storage.to_pylist()
    return [_adbc_python(v, storage.type, ext) for v in col.to_pylist()]


STREAM_BATCH_BYTES = 1 << 20
"""Bulk snapshots stream in Arrow batches of about this size (1 MiB): memory stays bounded whatever the table."""

QUERY_LISTENERS: list[Callable[[str, "AdbcConnection"], None]] = []
"""Called with (SQL, connection) before every query an :class:`AdbcConnection` sends, as SQLAlchemy's
``before_cursor_execute`` is for the record path's queries (tests use it to kill a connection)."""


def conninfo(url: sa.URL) -> str:
    """libpq's ``key=value`` connection string of a SQLAlchemy URL (its query keys are libpq's, as psycopg
    passes them): no URI encoding to get wrong (``options=-c timezone=+02`` and the like).

    ``client_encoding`` is always UTF8, whatever the URL says: ADBC's driver reads and writes text as
    UTF-8 bytes without converting them, so in another client encoding (a LATIN1 database's default)
    it read text garbled and wrote it garbled. The engines of the record path talk UTF-8 too
    (:func:`..jdbc.source.create_engine`). ``options`` only when the URL has them: libpq then reads
    ``PGOPTIONS`` or a service file's, as the record path's sessions do."""
    make_conninfo = require("psycopg.conninfo", "jdbc", "the JDBC batch path on PostgreSQL").make_conninfo

    keys = {"host": url.host, "port": url.port, "dbname": url.database, "user": url.username,
            "password": url.password}
    keys.update({k: v if isinstance(v, str) else v[-1] for k, v in url.query.items()})
    keys["client_encoding"] = "UTF8"
    # an empty value (a URL naming no database: a service file names it) would set the key to '' for libpq
    return make_conninfo("", **{k: v for k, v in keys.items() if v not in (None, "")})


class AdbcConnection:
    """One libpq connection through ADBC's driver manager (autocommit, as every ADBC connection starts,
    so no snapshot is held between queries).

    It talks to the driver manager's own API, not its DB-API module, which prepares every new query
    text before running it: one more round trip per batch, since the incrementing column's offset is
    part of the text (see :meth:`compile`). Measured on 500k rows in 10k-row batches: 1.06 s against
    1.71 s through the DB-API cursor, the same rows. A query is sent as it is: ADBC's PostgreSQL driver
    reads a query without parameters with ``COPY (...) TO STDOUT (FORMAT binary)``."""

    def __init__(self, engine: sa.Engine):
        driver = require("adbc_driver_postgresql", "jdbc", "the JDBC batch path on PostgreSQL")
        self._adm = require("adbc_driver_manager", "jdbc", "the JDBC batch path on PostgreSQL")
        self._db = driver.connect(conninfo(engine.url))
        try:
            self._conn = self._adm.AdbcConnection(self._db)
        except BaseException:
            self._db.close()
            raise
        # the DB-API's way of running a call so that Ctrl-C cancels the query on the server (private to the
        # driver manager, hence the fallback: a plain call, which a Ctrl-C interrupts when it returns)
        self._blocking = getattr(getattr(self._adm, "_lib", None), "_blocking_call", None)
        self._open: dict[int, tuple] = {}  # id(statement) -> (statement, reader) of results not yet closed
        self._dialect = type(engine.dialect)(paramstyle="numeric_dollar")
        self.backend_pid = int(self.query("SELECT pg_backend_pid()").column(0)[0].as_py())

    def compile(self, stmt) -> tuple[str, tuple]:
        """``stmt`` as SQL and its parameters. Integer parameters (the incrementing column's offset, a
        split's bounds) are written into the SQL instead: ADBC sends a query without parameters as
        ``COPY (...) TO STDOUT (FORMAT binary)``, which reads a batch faster than the row protocol
        it must use to bind them."""
        compiled = stmt.compile(dialect=self._dialect)
        names = compiled.positiontup or []
        params = compiled.construct_params()
        values = tuple(params[name] for name in names)
        # plain non-negative ints only: their literal is their digits (a negative one could meet a
        # unary minus in SQL as "--", a comment)
        if values and all(type(v) is int and v >= 0 for v in values):
            return str(stmt.compile(dialect=self._dialect, compile_kwargs={"literal_binds": True})), ()
        return str(compiled), values

    def _run(self, sql: str, params: Sequence[Any] = (), batch_bytes: int | None = None):
        """(statement, reader) of ``sql`` with ``params`` bound as ``$1..$n``; the caller closes both
        (:func:`_close`). ``batch_bytes``: about how many bytes each Arrow batch read holds."""
        stmt = self._adm.AdbcStatement(self._conn)
        try:
            if batch_bytes:
                stmt.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(batch_bytes)})
            stmt.set_sql_query(sql)
            if params:
                stmt.bind(pa.record_batch([[v] for v in params], names=[str(i) for i in range(len(params))]))
            handle, _ = self._call(stmt, stmt.execute_query)
            reader = pa.RecordBatchReader._import_from_c(handle.address)
        except BaseException:
            stmt.close()
            raise
        self._open[id(stmt)] = (stmt, reader)
        return stmt, reader

    def _call(self, stmt, fn):
        """``fn()``, cancelled on the server by Ctrl-C where the driver manager allows it."""
        return self._blocking(fn, (), {}, stmt.cancel) if self._blocking is not None else fn()

    def _close(self, stmt, reader) -> None:
        """Release a result's reader, then its statement (a statement refuses to close under a live reader);
        once: a stream :meth:`close` ended is not closed again when its generator is collected."""
        if self._open.pop(id(stmt), None) is None:
            return
        try:
            reader.close()
        finally:
            stmt.close()

    def query(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """The whole result of ``sql`` (a plain SQL text; parameters as ``$1..$n``)."""
        stmt, reader = self._run(sql, params)
        try:
            return self._call(stmt, reader.read_all)
        finally:
            self._close(stmt, reader)

    def _sql(self, stmt) -> tuple[str, tuple]:
        sql, params = self.compile(stmt)
        for listener in list(QUERY_LISTENERS):
            listener(sql, self)
        return sql, params

    def fetch(self, stmt) -> pa.Table:
        """Every row of ``stmt`` (a SQLAlchemy statement)."""
        return self.query(*self._sql(stmt))

    def stream(self, stmt) -> Iterator[pa.RecordBatch]:
        """``stmt``'s rows in Arrow batches of about :data:`STREAM_BATCH_BYTES`, read as they are consumed."""
        sql, params = self._sql(stmt)
        stmt, reader = self._run(sql, params, STREAM_BATCH_BYTES)
        try:
            while True:
                try:
                    batch = self._call(stmt, reader.read_next_batch)
                except StopIteration:
                    return
                yield batch
        finally:
            self._close(stmt, reader)

    def alive(self) -> bool:
        try:
            self.query("SELECT 1")
            return True
        except Exception:  # noqa: BLE001 -- any failure of a trivial query: the connection is gone
            return False

    def close(self) -> None:
        """Close the results still open (a stream abandoned half-way), then the connection."""
        for stmt, reader in list(self._open.values()):
            try:
                self._close(stmt, reader)
            except Exception:  # noqa: BLE001 -- a result of a dead connection
                pass
        for handle in (self._conn, self._db):
            try:
                handle.close()
            except Exception:  # noqa: BLE001 -- closing a dead connection
                pass


def adbc_error_types() -> tuple[type[BaseException], ...]:
    adbc_driver_manager = require("adbc_driver_manager", "jdbc", "the JDBC batch path on PostgreSQL")

    return (adbc_driver_manager.Error, OSError)  # libpq's I/O failures (a lost connection) arrive as OSError


def convert_adbc_table(table: pa.Table, columns: Sequence[ColumnPlan]) -> pa.Table | None:
    """An ADBC result as a table of the plans' columns; ``None`` when a value has no Arrow form."""
    arrays = []
    for plan, col in zip(columns, table.columns):
        try:
            arrays.append(convert_adbc_column(col, plan))
        except _ARROW_ERRORS:
            convert = plan.mapping.convert
            for v in adbc_python_values(col):  # a convert() error is the record path's: raise it
                convert(v)
            return None
    return pa.Table.from_arrays(arrays, names=[p.mapping.name for p in columns])
