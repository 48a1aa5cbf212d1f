"""JDBC source: tables of a relational database into Kafka (Confluent's ``JdbcSourceConnector``).

Accepts Confluent's configuration (see :mod:`.config`) and talks to the database
through SQLAlchemy (psycopg for PostgreSQL, pymysql for MySQL/MariaDB, sqlite3).

* **Partitions**: one per table, as Confluent's offset protocol 1:
  ``{"protocol": "1", "table": "<fqn>"}`` where ``<fqn>`` is ``db.schema.table``
  on PostgreSQL, ``db.table`` on MySQL/MariaDB and ``table`` on SQLite (the
  unquoted catalog/schema/table Confluent's ``TableId`` gives). With
  ``copycat.split.count=n`` a table is read as ``n`` key ranges instead, each its own
  partition ``{"protocol": "1", "table": "<fqn>", "split": "k/n", "column": "<col>"}``
  with its own offset (see :mod:`.splits`); ``task_configs`` balances partitions over
  tasks by estimated rows, sticky on re-plans. In custom query mode (``query``) there is
  one partition, Confluent's ``{"query": "query"}``, read by one task, and its records go
  to the topic named ``topic.prefix`` exactly.
* **Offsets**: ``{"incrementing": n}``, ``{"timestamp": ms, "timestamp_nanos": ns}``
  (epoch milliseconds, UTC, and the nanoseconds within the second), or both;
  bulk mode commits ``{}`` (every run reads the whole table). With
  ``copycat.lookback.ms`` the offset also carries ``"lookback"``: the short hashes of the
  rows emitted within the look-back span, by epoch ms (and, right after the look-back was
  switched on, ``"lookback_from"``), see :mod:`.lookback`. A windowed run's offsets have
  the same shape and live in the window's own namespace (the framework's business).
* **Queries** (identifiers quoted by SQLAlchemy, values bound: table and column
  names cannot inject SQL), each limited to ``batch.max.rows``:

  - incrementing: ``inc > :last ORDER BY inc``;
  - timestamp+incrementing: ``(ts > :t OR (ts = :t AND inc > :i)) AND ts < :upper ORDER BY ts, inc``
    -- rows that share one timestamp are never lost at a batch boundary;
  - timestamp: ``ts > :t AND ts < :upper ORDER BY ts``; rows sharing the last
    timestamp of a full batch are held back for the next batch (or, when a whole
    batch shares one timestamp, all of them are read in one batch, which may then
    exceed ``batch.max.rows``). Only the last row of such a group carries the
    group's timestamp as its offset (the others carry the offset before the
    group), so a crash can repeat rows of a group but never lose one;
  - bulk: the whole table, ordered by the primary key when there is one.

  ``ts`` is ``COALESCE`` of the ``timestamp.column.name`` columns in the order
  given; rows where it is NULL are **never read** in timestamp modes.
  ``:upper`` is the database's clock at task start minus
  ``timestamp.delay.interval.ms``, so a transaction that commits late with an
  older timestamp is still read if it commits within the delay.
* **Look-back** (``copycat.lookback.ms`` = L, timestamp modes): the first batch of a run
  starts at ``ts >= :t - L`` instead of after the offset, and rows whose identity
  (timestamp + primary key, else incrementing value, else all values) the offset holds
  are skipped; a late row with an older timestamp is emitted, the offset's timestamp stays.
  More than ``copycat.lookback.max.rows`` identities within the span fail the task.
* **Custom query** (``query``): ``SELECT * FROM (<query>) copycat_q WHERE <the above>``
  -- the query is never edited, so its own WHERE/JOIN work; its columns are typed by
  reflecting it as a temporary view/table (see :mod:`.query`); records have no key;
  ``validate.non.null`` is not checked (as Confluent).
* **Windows** (backfills, ``copycat.window.start``/``.end``; timestamp modes only, see
  :meth:`JdbcSourceConnector.window_support`): ``ts >= :start AND ts < min(:end, :upper)``,
  after the window's own committed offset when it has one; ``timestamp.initial`` is ignored.
* **Time zones**: offsets and Timestamp values are UTC. Columns with a time zone
  (``timestamptz``) are converted; naive columns (``DATETIME``, PostgreSQL ``timestamp``,
  SQLite text) are read and compared in ``db.timezone``; MySQL/MariaDB ``TIMESTAMP``
  columns are UTC because every connector session runs ``SET time_zone = '+00:00'``.
  Several timestamp columns are compared with the first one's zone.
* **Columns dropped or renamed** between runs: a task fails at start naming the table and
  the incrementing/timestamp column it no longer finds (other columns just change the schema).
* **Keys**: a Struct of the primary-key columns (``None`` without a primary key);
  values: a Struct named after the table with every column (see :mod:`.schema`).
* **Bounded runs**: ``poll`` returns up to ``batch.max.rows`` records, visiting
  tables round-robin, and ``None`` when every table is caught up.

Delivery: incrementing and timestamp+incrementing modes are exactly-once with the
framework's transactions (the offset alone defines what was read). Timestamp mode
is at-least-once (rows sharing a timestamp may repeat after a crash); bulk mode
re-reads everything each run. Incrementing mode misses rows committed late with a
lower id and never sees updates (as Confluent's); use timestamp+incrementing.

An Airflow connection id (``airflow.conn.id``) is resolved by the Airflow layer, not here.

Size: over 700 lines (connector, discovery and the per-table reader, about 325 of them). The table
reader belongs in a module of its own; it is not moved yet because it shares the offset helpers
(``db_now``, ``ts_offset``, ``ts_from_offset``), ``TableRef`` and the offset field names with the
connector, which would have to move with it to keep the imports one-way. The batch path lives in
:mod:`.batch_path`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
from ...extras import explain
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from airflow_copycat.connect import (ConfigProblem, ConnectException, RetriableException, SourceBatch,
                                     SourceConnector, SourceRecord, SourceTask, Struct)
from airflow_copycat.connect.assignment import canonical
from airflow_copycat.connect.config import Password
from airflow_copycat.connect.connector import TASK_PARTITIONS_KEY, task_partitions, window_bounds
from airflow_copycat.connect.secrets import hide_url_passwords

from . import batch_path as bp
from . import config as c
from . import splits
from . import lookback as lb
from . import query as q
from .schema import ColumnMapping, map_column, naive_zone, struct_schema

log = logging.getLogger(__name__)

PROTOCOL = "1"
QUERY_NAME_KEY = QUERY_NAME_VALUE = "query"  # Confluent: a query's partition is {"query": "query"}
INCREMENTING_FIELD = "incrementing"
TIMESTAMP_FIELD = "timestamp"
TIMESTAMP_NANOS_FIELD = "timestamp_nanos"


# ------------------------------------------------------------------ connection and discovery


def _secret(v: Any) -> str | None:
    if v is None:
        return None
    return v.value if isinstance(v, Password) else str(v)


UTF8_DRIVERS = ("psycopg", "psycopg2")
"""PostgreSQL drivers that take libpq's ``client_encoding`` as a connect argument."""
PG_SESSION = {"extra_float_digits": "3", "DateStyle": "ISO", "IntervalStyle": "postgres"}
"""Settings every PostgreSQL session of the record path gets (:func:`_pg_session`)."""


def create_engine(values: dict[str, Any]) -> sa.Engine:
    """The connector's engine for its ``connection.*`` keys. MySQL/MariaDB sessions run in UTC
    (:func:`_utc_session`). PostgreSQL sessions (psycopg, psycopg2) talk UTF-8 (``client_encoding=UTF8``,
    as PgJDBC's always do) whatever the database, role, URL or environment (``PGCLIENTENCODING``) set:
    the Arrow paths (ADBC, ``COPY``) exchange text as UTF-8 bytes, which the server converts from and to
    the database's encoding, so the record path must too to read and write the same text and be refused
    the same way -- a character the database's encoding lacks is the server's error 22P05 on every path,
    not a driver's encoding error on one of them. They also get :data:`PG_SESSION` (:func:`_pg_session`)."""
    url = c.to_sqlalchemy_url(str(values[c.CONNECTION_URL]), values.get(c.CONNECTION_USER),
                              _secret(values.get(c.CONNECTION_PASSWORD)))
    postgres = url.get_backend_name() == "postgresql" and url.get_driver_name() in UTF8_DRIVERS
    try:
        engine = sa.create_engine(url, pool_pre_ping=True, connect_args={"client_encoding": "UTF8"} if postgres else {})
    except ImportError as e:  # the URL's driver (psycopg, pymysql) comes with the jdbc extra
        raise explain(e, "jdbc", f"a {url.get_backend_name()} connection") from e
    if engine.dialect.name in ("mysql", "mariadb"):
        sa.event.listen(engine, "connect", _utc_session)
    elif postgres:
        sa.event.listen(engine, "connect", _pg_session)
    return engine


def _pg_session(dbapi_connection, _record) -> None:
    """PostgreSQL: :data:`PG_SESSION` for the session, set (and committed) when it connects, after the
    URL's, the environment's (``PGOPTIONS``) or the service file's ``options``, which keep everything
    else they set (a ``search_path``...). The record path reads values as text, which a database or role
    with ``extra_float_digits=0`` (older PostgreSQL's default) rounds to 15 digits -- 0.30000000000000004
    read as 0.3 -- where ADBC's binary values are exact, and which psycopg cannot parse in another
    DateStyle (timestamps with a time zone) or IntervalStyle (intervals, always read as records). Set with
    ``SET``, not libpq's ``options``: a connection's own ``options`` replace ``PGOPTIONS`` and a service's."""
    cursor = dbapi_connection.cursor()
    try:
        for name, value in PG_SESSION.items():
            cursor.execute(f"SET {name} = '{value}'")
    finally:
        cursor.close()
    dbapi_connection.commit()  # a rollback of the transaction the SETs began would undo them


def _utc_session(dbapi_connection, _record) -> None:
    """MySQL/MariaDB: every session of the connector runs in UTC, so TIMESTAMP columns (stored in UTC,
    returned in the session's zone) come back as UTC whatever the server's (or the URL's
    ``init_command``) time zone. DATETIME columns are not affected: they are read in ``db.timezone``."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SET time_zone = '+00:00'")
    finally:
        cursor.close()


def _safe_url(engine: sa.Engine) -> str:
    """``engine``'s URL as logs and messages show it: the user info password and every query parameter
    named like a secret (``?password=``, ``sslpassword``, ``token``...: psycopg and PyMySQL take them from
    the query) read as ``[hidden]`` (:func:`~airflow_copycat.connect.secrets.hide_url_passwords`). Every
    URL of the JDBC source and sink shown to a person goes through here."""
    return hide_url_passwords(engine.url.render_as_string(hide_password=True))


@dataclass(frozen=True)
class TableRef:
    schema: str | None
    name: str
    fqn: str
    split: splits.Split | None = None
    """Set when this ref is one key range of the table (see :mod:`.splits`)."""
    query: str | None = None
    """Set in custom query mode: this ref is the query's result, not a table."""

    @property
    def label(self) -> str:
        """How errors name it: ``table <fqn>``, or ``the query (query)``."""
        return "the query (query)" if self.query is not None else f"table {self.fqn}"

    @property
    def partition(self) -> dict:
        if self.query is not None:
            return {QUERY_NAME_KEY: QUERY_NAME_VALUE}
        if self.split is not None:
            return self.split.partition(self.fqn)
        return {"protocol": PROTOCOL, "table": self.fqn}


def _like(pattern: str) -> re.Pattern:
    return re.compile("".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern) + r"\Z")


def discover(engine: sa.Engine, values: dict[str, Any]) -> list[TableRef]:
    """The tables (and views, per ``table.types``) the config selects, sorted by fqn; in custom query
    mode the one ref of the query (topic ``topic.prefix``, partition ``{"query": "query"}``)."""
    if str(values.get(c.QUERY) or "").strip():
        return [TableRef(None, "", QUERY_NAME_VALUE, query=str(values[c.QUERY]))]
    insp = sa.inspect(engine)
    dialect = engine.dialect.name
    pattern = values.get(c.SCHEMA_PATTERN)
    if dialect == "sqlite":
        schemas: list[str | None] = [None]
    elif pattern:
        rx = _like(pattern)
        schemas = [s for s in insp.get_schema_names() if rx.match(s)]
    else:
        schemas = [insp.default_schema_name]
    types = {t.upper() for t in values.get(c.TABLE_TYPES) or ["TABLE"]}
    include = set(values.get(c.TABLE_WHITELIST) or []) | set(values.get(c.TABLE_INCLUDE) or [])
    exclude = set(values.get(c.TABLE_BLACKLIST) or []) | set(values.get(c.TABLE_EXCLUDE) or [])
    database = engine.url.database
    found = []
    for schema in schemas:
        names = []
        if "TABLE" in types:
            names += insp.get_table_names(schema=schema)
        if "VIEW" in types:
            names += insp.get_view_names(schema=schema)
        for name in names:
            if dialect == "sqlite":
                fqn = name
            elif dialect == "postgresql":
                fqn = f"{database}.{schema}.{name}"
            else:  # MySQL/MariaDB: the schema is the database
                fqn = f"{schema}.{name}"
            aliases = {name, fqn, f"{schema}.{name}"}
            if include and not (aliases & include):
                continue
            if aliases & exclude:
                continue
            found.append(TableRef(schema, name, fqn))
    return sorted(found, key=lambda t: t.fqn)


def db_now(conn: sa.Connection) -> dt.datetime:
    """The database's clock, as an aware UTC datetime."""
    name = conn.dialect.name
    if name == "postgresql":
        v = conn.execute(sa.text("SELECT CURRENT_TIMESTAMP")).scalar_one()
    elif name in ("mysql", "mariadb"):
        v = conn.execute(sa.text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    elif name == "sqlite":
        v = dt.datetime.fromisoformat(
            conn.execute(sa.text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")).scalar_one())
    else:
        return dt.datetime.now(dt.timezone.utc)
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.timezone.utc)
    return v.astimezone(dt.timezone.utc)


# ------------------------------------------------------------------ offsets


def ts_offset(t: dt.datetime) -> dict:
    """``{"timestamp": epoch ms, "timestamp_nanos": ns within the second}`` of an aware datetime."""
    delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    seconds = delta.days * 86_400 + delta.seconds
    return {TIMESTAMP_FIELD: seconds * 1000 + delta.microseconds // 1000,
            TIMESTAMP_NANOS_FIELD: delta.microseconds * 1000}


def ts_from_offset(offset: dict) -> dt.datetime | None:
    ms = offset.get(TIMESTAMP_FIELD)
    if ms is None:
        return None
    ms = int(ms)
    nanos = offset.get(TIMESTAMP_NANOS_FIELD)
    seconds = ms // 1000
    micros = int(nanos) // 1000 if nanos is not None else (ms % 1000) * 1000
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds, microseconds=micros)


# ------------------------------------------------------------------ the connector


class JdbcSourceConnector(SourceConnector):
    """Reads database tables into Kafka: one partition per table (see the module docstring)."""

    config_def = c.CONFIG_DEF

    def task_class(self) -> type:
        return JdbcSourceTask

    def validate(self, config: dict[str, Any]) -> list[ConfigProblem]:
        return c.validate(config)

    def exactly_once_support(self, config: dict[str, Any]) -> bool:
        """True for incrementing and timestamp+incrementing: a task started from a committed offset
        reads exactly the rows after it. False for bulk (every run re-reads the table) and for
        timestamp mode (rows sharing one timestamp may repeat after a crash)."""
        return str(config.get(c.MODE)) in (c.MODE_INCREMENTING, c.MODE_TIMESTAMP_INCREMENTING)

    def start(self, config: dict[str, Any]) -> None:
        super().start(config)
        self._engine = create_engine(config)

    def partitions(self) -> list[dict]:
        """One partition per table, or per key range of a split table (see :mod:`.splits`)."""
        try:
            return [t.partition for t in splits.expand(self._engine, self.config, discover(self._engine, self.config))]
        except sa.exc.SQLAlchemyError as e:
            raise ConnectException(f"cannot list the tables of {_safe_url(self._engine)}: {e}") from e

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """Partitions balanced over at most ``max_tasks`` tasks by estimated rows, sticky to
        ``previous_assignment``; split tables' plan-time bounds travel in the task configs
        (see :func:`.splits.task_configs`)."""
        try:
            tables = discover(self._engine, self.config)
        except sa.exc.SQLAlchemyError as e:
            raise ConnectException(f"cannot list the tables of {_safe_url(self._engine)}: {e}") from e
        if tables and tables[0].query is not None:  # custom query mode: one partition, one task
            return super().task_configs(max_tasks)
        return splits.task_configs(self._engine, self.config, tables, max_tasks, self.previous_assignment)

    def window_support(self, config: dict[str, Any]) -> str | None:
        """``None`` (can run a window) in timestamp and timestamp+incrementing modes, on tables or a query:
        a task given ``copycat.window.start``/``.end`` reads the rows with start <= ts <
        min(end, database clock - timestamp.delay.interval.ms), after the window's own committed
        offset when it has one, else from start inclusive (``timestamp.initial`` does not apply).
        Otherwise the reason: bulk and incrementing modes have no timestamp to select a window's rows."""
        mode = str(config.get(c.MODE))
        if mode in (c.MODE_TIMESTAMP, c.MODE_TIMESTAMP_INCREMENTING):
            return None
        return (f"mode {mode} has no timestamp column to select a window's rows: a backfill (windowed run) of "
                f"the JDBC source needs mode timestamp or timestamp+incrementing")

    def stop(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.dispose()
            self._engine = None


# ------------------------------------------------------------------ reading one table


def _sqlite_sortable(expr):
    """A SQLite text timestamp as ``YYYY-MM-DD HH:MM:SS.ffffff`` (SQLAlchemy's format, whatever the writer
    used: no fraction, fewer digits, a ``T``), so text order is time order to the microsecond.
    (``julianday()`` would keep milliseconds only: rows a few microseconds apart would compare equal.)"""
    text = sa.func.replace(expr, "T", " ", type_=sa.String())
    return sa.case((sa.func.instr(expr, ".") == 0, text.concat(".000000")),
                   else_=sa.func.substr(text.concat("000000"), 1, 26, type_=sa.String()))


class TableReader:
    """Reads one table batch by batch from its committed offset up to the run's bound."""

    def __init__(self, engine: sa.Engine, ref: TableRef, values: dict[str, Any], committed: dict | None,
                 now: dt.datetime, window: tuple[dt.datetime, dt.datetime] | None = None,
                 adbc: bp.SharedAdbc | None = None):
        self.engine, self.ref, self.partition = engine, ref, ref.partition
        self.mode = values[c.MODE]
        self.topic = f"{values[c.TOPIC_PREFIX]}{ref.name}"
        self.zone = ZoneInfo(values[c.DB_TIMEZONE])
        if ref.query is not None:  # the query as a derived table, typed by reflection (see :mod:`.query`)
            self.table = q.derived_table(ref.query, q.reflect_columns(engine, ref.query))
        else:
            try:
                self.table = sa.Table(ref.name, sa.MetaData(), schema=ref.schema, autoload_with=engine,
                                      listeners=[("column_reflect", q.driver_values)])
            except sa.exc.NoSuchTableError:
                raise ConnectException(f"table {ref.fqn} no longer exists") from None
        cols = {col.name: col for col in self.table.columns}
        self.mappings = [map_column(col.name, col.type, col.nullable, values[c.NUMERIC_MAPPING], self.zone)
                         for col in self.table.columns]
        self.value_schema = struct_schema(ref.name, self.mappings)
        self.column_zones = [naive_zone(col.type, self.zone) for col in self.table.columns]
        pk = [col.name for col in self.table.primary_key.columns]
        by_name = {m.name: m for m in self.mappings}
        self.key_mappings = [by_name[n] for n in pk]
        self.key_indexes = [self.mappings.index(m) for m in self.key_mappings]
        self.key_schema = struct_schema(None, [ColumnMapping(m.name, m.schema.copy(optional=False), m.convert)
                                               for m in self.key_mappings]) if pk else None
        inc, ts = c._columns(values)
        self.inc = self.ts_cols = None
        wanted = []
        if self.mode in (c.MODE_INCREMENTING, c.MODE_TIMESTAMP_INCREMENTING):
            wanted.append((c.INCREMENTING_COLUMN, inc))
        if self.mode in (c.MODE_TIMESTAMP, c.MODE_TIMESTAMP_INCREMENTING):
            wanted += [(c.TIMESTAMP_COLUMN, name) for name in ts]
        for key, name in wanted:
            if name not in cols:
                raise ConnectException(
                    f"{ref.label}: column {name!r} ({key}) does not exist (dropped or renamed?); its columns are "
                    f"{sorted(cols)}")
            rowid = engine.dialect.name == "sqlite" and cols[name].primary_key and isinstance(cols[name].type, sa.Integer)
            if values[c.VALIDATE_NON_NULL] and cols[name].nullable and ref.query is None and not rowid:  # tables only
                raise ConnectException(
                    f"table {ref.fqn}: column {name!r} ({key}) is nullable; make it NOT NULL or set "
                    f"{c.VALIDATE_NON_NULL}=false (rows where it is NULL are then never read)")
        if self.mode in (c.MODE_INCREMENTING, c.MODE_TIMESTAMP_INCREMENTING):
            self.inc = cols[inc]
        if self.mode in (c.MODE_TIMESTAMP, c.MODE_TIMESTAMP_INCREMENTING):
            self.ts_cols = [cols[n] for n in ts]
            self.ts_expr = self.ts_cols[0] if len(self.ts_cols) == 1 else \
                sa.func.coalesce(*self.ts_cols, type_=self.ts_cols[0].type)
            self.ts_aware = bool(getattr(self.ts_cols[0].type, "timezone", False))
            self.ts_zone = naive_zone(self.ts_cols[0].type, self.zone)
            kinds = {(bool(getattr(col.type, "timezone", False)), str(naive_zone(col.type, self.zone)))
                     for col in self.ts_cols}
            if len(kinds) > 1:  # COALESCE compares their raw values: offsets would never match the SQL
                raise ConnectException(
                    f"{ref.label}: timestamp columns {ts} mix time-zone kinds (with and without time zone, or MySQL "
                    f"TIMESTAMP and DATETIME); use columns of one kind, or a query that converts them")
            self.sqlite = engine.dialect.name == "sqlite"
            if self.sqlite:  # timestamps are text, written as '...10:00:00' or '...10:00:00.000000' or ...
                self.ts_expr = _sqlite_sortable(self.ts_expr)
            self.ts_indexes = [list(cols).index(n) for n in ts]
            self.upper = now - dt.timedelta(milliseconds=values[c.TIMESTAMP_DELAY_MS])
        # a window (backfill run): start <= ts < min(end, upper), and timestamp.initial does not apply
        self.lower = window[0] if window else None
        if window and self.ts_cols is not None:
            self.upper = min(self.upper, window[1])
        committed = committed or {}
        self.last_inc = committed.get(INCREMENTING_FIELD)
        self.last_ts = ts_from_offset(committed)
        initial = values.get(c.TIMESTAMP_INITIAL)
        if self.last_ts is None and self.ts_cols is not None and initial is not None and not window:
            self.last_ts = now if initial == c.TIMESTAMP_INITIAL_CURRENT else ts_from_offset({TIMESTAMP_FIELD: initial})
        self._init_scan(values, committed)
        self.done = False
        self._bulk = self._interrupted = None
        # a split reads only its key range, and every offset it commits carries the split's bounds
        self.split_where = ref.split.conditions(self.table, ref.fqn) if ref.split else []
        self.split_offset = ref.split.offset_fields(self.mode) if ref.split else {}
        # the batch path (see :mod:`.batch_path`): the same rows and offsets as columnar batches
        self._batch = bp.batch_path(self, values, adbc)

    def _select(self):
        """SELECT of every column, limited to this reader's key range when it reads a split."""
        return sa.select(*self.table.columns).where(*self.split_where)

    def _init_scan(self, values: dict[str, Any], committed: dict) -> None:
        """Where this run's scan starts: after ``scan_ts``/``scan_inc`` (the committed offset), or, with
        ``copycat.lookback.ms``, at ``reread_from`` (the offset's timestamp minus the look-back, inclusive,
        but never before the position the look-back was switched on at); and the identities of the rows
        emitted within the look-back span (``seen``, see :mod:`.lookback`)."""
        self.scan_ts, self.scan_inc, self.reread_from, self.seen = self.last_ts, self.last_inc, None, None
        span = int(values.get(c.LOOKBACK_MS) or 0)
        if not span or self.ts_cols is None:
            return
        names = list(self.table.columns.keys())
        pk = [col.name for col in self.table.primary_key.columns]
        self.id_indexes = [names.index(n) for n in pk] or (
            [names.index(self.inc.name)] if self.inc is not None else list(range(len(names))))
        mark = None
        if self.last_ts is not None:
            o = ts_offset(self.last_ts)
            mark = [o[TIMESTAMP_FIELD], o[TIMESTAMP_NANOS_FIELD], self.last_inc]
        self.seen = lb.SeenRows.from_offset(committed, span, int(values[c.LOOKBACK_MAX_ROWS]), self.ref.label, mark)
        if self.last_ts is not None:
            reread = self.last_ts - dt.timedelta(milliseconds=span)
            since = self.seen.since
            since_ts = ts_from_offset({TIMESTAMP_FIELD: since[0], TIMESTAMP_NANOS_FIELD: since[1]}) if since else None
            if since_ts is not None and since_ts >= reread:  # identities are complete only after `since`
                self.scan_ts, self.scan_inc = since_ts, since[2]
            else:
                self.scan_ts, self.scan_inc, self.reread_from = None, None, reread
        self.seen.prune(self._mark_ms())

    def _mark_ms(self) -> int | None:
        return None if self.last_ts is None else lb.epoch_ms(self.last_ts)

    def _first_time(self, ts: dt.datetime, row) -> bool:
        """Look-back: whether this row (timestamp + primary key, or incrementing value, or all values) was
        never emitted; remembers it when so."""
        ident = lb.identity(ts, [self.mappings[i].convert(row[i]) for i in self.id_indexes])
        if ident in self.seen:
            return False
        self.seen.add(lb.epoch_ms(ts), ident)
        return True

    def _after_mark(self, ts: dt.datetime, inc: Any) -> bool:
        if self.last_ts is None or ts > self.last_ts:
            return True
        return ts == self.last_ts and (self.last_inc is None or (inc is not None and inc > self.last_inc))

    # ---- binding

    def _bind_ts(self, t: dt.datetime):
        """The bound value ``ts_expr`` is compared with for the instant ``t`` (aware, UTC)."""
        v = t if self.ts_aware else t.astimezone(self.ts_zone).replace(tzinfo=None)
        if self.sqlite:  # as the column type writes it: 'YYYY-MM-DD HH:MM:SS.ffffff', what _sqlite_sortable makes
            return sa.bindparam(None, v, type_=self.ts_cols[0].type)
        return v

    def _row_ts(self, row) -> dt.datetime | None:
        for i in self.ts_indexes:
            v = row[i]
            if v is not None:
                t = self.mappings[i].convert(v)
                if isinstance(v, dt.datetime) and v.tzinfo is None and not self.ts_aware and \
                        t.astimezone(self.ts_zone).replace(tzinfo=None) != v:
                    # a local time that does not exist (a daylight-saving gap): its instant would not bind back
                    # to it, so offsets would skip or repeat rows -- fail, naming the row
                    raise ConnectException(
                        f"{self.ref.label}: column {self.mappings[i].name!r} holds {v.isoformat(' ')}, which does not "
                        f"exist in db.timezone {self.ts_zone} (a daylight-saving gap); set db.timezone to the zone the "
                        f"values were written in, or correct the row")
                return t
        return None

    def _offset(self, ts: dt.datetime | None, inc: Any) -> dict:
        out: dict[str, Any] = {}
        if self.ts_cols is not None and ts is not None:
            out.update(ts_offset(ts))
        if self.inc is not None and inc is not None:
            out[INCREMENTING_FIELD] = int(inc)
        if self.seen is not None:
            out.update(self.seen.offset_fields())
        return out

    def _fetch(self, stmt) -> list:
        try:
            with self.engine.connect() as conn:
                return list(conn.execute(stmt))
        except sa.exc.SQLAlchemyError as e:
            if isinstance(e, sa.exc.DBAPIError) and e.connection_invalidated:  # nothing was read: safe to retry
                raise RetriableException(f"{self.ref.label}: the database connection was lost: {e}") from e
            raise ConnectException(f"{self.ref.label}: query failed: {e}") from e

    # ---- reading

    def read(self, limit: int) -> list[SourceRecord | SourceBatch]:
        if self.seen is not None and self.seen.overflowed is not None:
            raise self.seen.overflowed  # the failed batch was never handed over: never read past it
        if self.done:
            return []
        if self.mode == c.MODE_BULK:
            return self._read_bulk(limit)
        stmt = self._select()
        if self.mode == c.MODE_INCREMENTING:
            if self.last_inc is not None:
                stmt = stmt.where(self.inc > self.last_inc)
            stmt = stmt.order_by(self.inc)
        else:
            cond = [self.ts_expr < self._bind_ts(self.upper)]
            if self.lower is not None:
                cond.append(self.ts_expr >= self._bind_ts(self.lower))
            if self.scan_ts is not None:  # after the last row read (on the first batch: the committed offset)
                t = self._bind_ts(self.scan_ts)
                if self.mode == c.MODE_TIMESTAMP_INCREMENTING and self.scan_inc is not None:
                    cond.append(sa.or_(self.ts_expr > t, sa.and_(self.ts_expr == t, self.inc > self.scan_inc)))
                else:
                    cond.append(self.ts_expr > t)
            elif self.reread_from is not None:  # look-back: the first batch re-reads before the committed offset
                cond.append(self.ts_expr >= self._bind_ts(self.reread_from))
            else:
                cond.append(self.ts_expr.is_not(None))
            stmt = stmt.where(*cond).order_by(self.ts_expr, *([self.inc] if self.inc is not None else []))
        rows = None
        if self._batch is not None:
            self._batch.declined_rows = None
            out = self._batch.read(stmt, limit)
            if out is not None:
                return out
            rows = self._batch.declined_rows  # the batch path declined these rows: records of them
        if rows is None:
            rows = self._fetch(stmt.limit(limit))
        if len(rows) < limit:
            self.done = True
        if self.mode == c.MODE_TIMESTAMP:
            return self._timestamp_groups(rows, limit, stmt)
        records = []
        inc_index = list(self.table.columns.keys()).index(self.inc.name)
        for row in rows:
            ts = self._row_ts(row) if self.ts_cols is not None else None
            inc = row[inc_index]
            if ts is None:  # incrementing mode
                self.last_inc = inc
                records.append(self._record(row, self._offset(None, inc)))
                continue
            self.scan_ts, self.scan_inc = ts, inc
            if self.seen is not None and not self._first_time(ts, row):
                continue  # re-read by the look-back, emitted before
            if self._after_mark(ts, inc):  # a late row found by the look-back leaves the mark where it is
                self.last_ts, self.last_inc = ts, inc
            if self.seen is not None:
                self.seen.prune(self._mark_ms())
            records.append(self._record(row, self._offset(self.last_ts, self.last_inc)))
        return records

    def _timestamp_groups(self, rows: list, limit: int, stmt) -> list[SourceRecord]:
        stamped = [(self._row_ts(r), r) for r in rows]
        if len(rows) == limit:
            last = stamped[-1][0]
            kept = [(t, r) for t, r in stamped if t != last]
            if not kept:  # the whole batch shares one timestamp: read all of its rows now
                t = self._bind_ts(last)
                more = self._fetch(self._select().where(self.ts_expr == t))
                if not more:  # never spin: a timestamp that cannot be selected again is a bug to report
                    raise ConnectException(f"{self.ref.label}: the rows at {last.isoformat()} cannot be selected "
                                           f"again by their timestamp")
                kept = [(last, r) for r in more]
            stamped = kept
        records = []
        before = self._offset(self.last_ts, None)
        for k, (t, row) in enumerate(stamped):
            group_ends = k + 1 == len(stamped) or stamped[k + 1][0] != t
            if self.seen is not None:  # look-back: each record's offset carries every identity emitted so far
                fresh = self._first_time(t, row)
                if group_ends and self._after_mark(t, None):
                    self.last_ts = t
                self.seen.prune(self._mark_ms())
                if fresh:
                    records.append(self._record(row, self._offset(self.last_ts, None)))
                continue
            if group_ends:
                before = self._offset(t, None)
            records.append(self._record(row, dict(before)))
        if stamped:
            self.scan_ts = stamped[-1][0]
            if self.seen is None:
                self.last_ts = stamped[-1][0]
        return records

    def _read_bulk(self, limit: int) -> list[SourceRecord | SourceBatch]:
        if self._interrupted is not None:
            raise self._interrupted
        if self._batch is not None:
            return self._batch.read_bulk(limit)
        return [self._record(row, {}) for row in self._bulk_rows(limit)]

    def _bulk_rows(self, limit: int) -> list:
        """The bulk snapshot's next ``limit`` rows, streamed on a connection of its own."""
        if self._bulk is None:
            order = list(self.table.primary_key.columns)
            stmt = self._select().order_by(*order)
            try:
                self._conn = self.engine.connect()
                self._bulk = self._conn.execution_options(stream_results=True).execute(stmt)
            except sa.exc.SQLAlchemyError as e:
                self.close()
                raise ConnectException(f"table {self.ref.fqn}: query failed: {e}") from e
        try:
            rows = self._bulk.fetchmany(limit)
        except sa.exc.SQLAlchemyError as e:  # not retriable: restarting would repeat rows, resuming is no snapshot
            self.close()
            self._interrupted = ConnectException(f"table {self.ref.fqn}: the bulk snapshot was interrupted (the "
                                                 f"next run reads the whole table again): {e}")
            raise self._interrupted from e
        if len(rows) < limit:
            self.done = True
            self.close()
        return rows

    def _record(self, row, offset: dict) -> SourceRecord:
        # Trusted: each mapping's convert() yields what its field schema takes (see .schema); the
        # converters still check every value's type and range as they write it.
        values = [m.convert(v) for m, v in zip(self.mappings, row)]
        value = Struct._trusted(self.value_schema, values)
        key = None
        if self.key_schema is not None:
            key = Struct._trusted(self.key_schema, [values[i] for i in self.key_indexes])
        return SourceRecord(topic=self.topic, kafka_partition=None, key_schema=self.key_schema, key=key,
                            value_schema=self.value_schema, value=value,
                            source_partition=self.partition,
                            source_offset=dict(offset, **self.split_offset) if self.split_offset else offset)

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            self._batch.close()
        bulk, conn = self._bulk, getattr(self, "_conn", None)
        self._bulk, self._conn = None, None
        if bulk is not None:
            bulk.close()
        if conn is not None:
            conn.close()


def _rows(items: list) -> int:
    """Rows in a list of records and batches."""
    return sum(len(r) if isinstance(r, SourceBatch) else 1 for r in items)


class JdbcSourceTask(SourceTask):
    """Reads the tables of its partitions (see the module docstring)."""

    def start(self, config: dict[str, str]) -> None:
        values = c.CONFIG_DEF.parse(config, context="JdbcSourceTask")
        self.batch = values[c.BATCH_MAX_ROWS]
        self._engine = create_engine(values)
        log.info("JDBC source task reading %s in mode %s", _safe_url(self._engine), values[c.MODE])
        try:
            window = window_bounds(config)
        except ValueError as e:
            raise ConnectException(f"bad window: {e}") from None
        if window is not None and values[c.MODE] not in (c.MODE_TIMESTAMP, c.MODE_TIMESTAMP_INCREMENTING):
            raise ConnectException(JdbcSourceConnector().window_support(values))
        tables = discover(self._engine, values)
        if TASK_PARTITIONS_KEY in config and not (tables and tables[0].query is not None):
            wanted = [canonical(p) for p in task_partitions(config)]
            by_fqn = {t.fqn: t for t in tables}
            by_key = {canonical(p): dataclasses.replace(by_fqn[fqn], split=split)
                      for p in task_partitions(config) for fqn, split in [splits.parse_partition(p)] if fqn in by_fqn}
            missing = [k for k in wanted if k not in by_key]
            if missing:
                raise ConnectException(f"table(s) {missing} no longer exist in {_safe_url(self._engine)}")
            tables = [by_key[k] for k in wanted]
        tables = splits.resolve(tables, config, self.context.offset_storage_reader)  # split bounds: committed or planned
        committed = self.context.offset_storage_reader.offsets([t.partition for t in tables]) if tables else {}
        with self._engine.connect() as conn:
            now = db_now(conn)
        self._adbc = bp.SharedAdbc(self._engine) if values[c.BATCH_ENABLED] and \
            self._engine.dialect.name == "postgresql" else None
        self._readers = [TableReader(self._engine, t, values, committed.get(canonical(t.partition)), now, window,
                                     self._adbc) for t in tables]
        self._next = 0

    def poll(self) -> list[SourceRecord | SourceBatch] | None:
        readers = [r for r in getattr(self, "_readers", []) if not r.done]
        if not readers:
            return None
        records: list[SourceRecord | SourceBatch] = []
        for k in range(len(readers)):
            reader = readers[(self._next + k) % len(readers)]
            try:
                records += reader.read(self.batch - _rows(records))
            except ConnectException:
                if records:  # hand over what other tables gave; this reader fails again on the next poll
                    break
                raise
            if _rows(records) >= self.batch:
                break
        self._next += 1
        if not records and all(r.done for r in readers):
            return None  # every table caught up on this poll: the run ends now, not one empty poll later
        return records

    def stop(self) -> None:
        for r in getattr(self, "_readers", []):
            r.close()
        if getattr(self, "_adbc", None) is not None:
            self._adbc.close()
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.dispose()
            self._engine = None
