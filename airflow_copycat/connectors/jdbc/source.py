"""JDBC source: tables of a relational database into Kafka (Confluent's ``JdbcSourceConnector``).

Accepts Confluent's configuration (see :mod:`.config`) and talks to the database
through SQLAlchemy (psycopg for PostgreSQL, pymysql for MySQL/MariaDB, sqlite3).

* **Partitions**: one per table, as Confluent's offset protocol 1:
  ``{"protocol": "1", "table": "<fqn>"}`` where ``<fqn>`` is ``db.schema.table``
  on PostgreSQL, ``db.table`` on MySQL/MariaDB and ``table`` on SQLite (the
  unquoted catalog/schema/table Confluent's ``TableId`` gives).
* **Offsets**: ``{"incrementing": n}``, ``{"timestamp": ms, "timestamp_nanos": ns}``
  (epoch milliseconds, UTC, and the nanoseconds within the second), or both;
  bulk mode commits ``{}`` (every run reads the whole table).
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
  older timestamp is still read if it commits within the delay. Naive timestamp
  columns are in ``db.timezone``; offsets are UTC.
* **Keys**: a Struct of the primary-key columns (``None`` without a primary key);
  values: a Struct named after the table with every column (see :mod:`.schema`).
* **Bounded runs**: ``poll`` returns up to ``batch.max.rows`` records, visiting
  tables round-robin, and ``None`` when every table is caught up.

Delivery: incrementing and timestamp+incrementing modes are exactly-once with the
framework's transactions (the offset alone defines what was read). Timestamp mode
is at-least-once (rows sharing a timestamp may repeat after a crash); bulk mode
re-reads everything each run. Incrementing mode misses rows committed late with a
lower id and never sees updates (as Confluent's); use timestamp+incrementing.

Not supported yet: custom ``query`` mode, an Airflow connection id instead of a URL.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from airflow_copycat.connect import ConfigProblem, ConnectException, SourceConnector, SourceRecord, SourceTask, Struct
from airflow_copycat.connect.assignment import canonical
from airflow_copycat.connect.config import Password
from airflow_copycat.connect.connector import TASK_PARTITIONS_KEY, task_partitions

from . import config as c
from .schema import ColumnMapping, map_column, struct_schema

log = logging.getLogger(__name__)

PROTOCOL = "1"
INCREMENTING_FIELD = "incrementing"
TIMESTAMP_FIELD = "timestamp"
TIMESTAMP_NANOS_FIELD = "timestamp_nanos"


# ------------------------------------------------------------------ connection and discovery


def _secret(v: Any) -> str | None:
    if v is None:
        return None
    return v.value if isinstance(v, Password) else str(v)


def create_engine(values: dict[str, Any]) -> sa.Engine:
    url = c.to_sqlalchemy_url(str(values[c.CONNECTION_URL]), values.get(c.CONNECTION_USER),
                              _secret(values.get(c.CONNECTION_PASSWORD)))
    return sa.create_engine(url, pool_pre_ping=True)


def _safe_url(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


@dataclass(frozen=True)
class TableRef:
    schema: str | None
    name: str
    fqn: str

    @property
    def partition(self) -> dict:
        return {"protocol": PROTOCOL, "table": self.fqn}


def _like(pattern: str) -> re.Pattern:
    return re.compile("".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern) + r"\Z")


def discover(engine: sa.Engine, values: dict[str, Any]) -> list[TableRef]:
    """The tables (and views, per ``table.types``) the config selects, sorted by fqn."""
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
        try:
            return [t.partition for t in discover(self._engine, self.config)]
        except sa.exc.SQLAlchemyError as e:
            raise ConnectException(f"cannot list the tables of {_safe_url(self._engine)}: {e}") from e

    def stop(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.dispose()
            self._engine = None


# ------------------------------------------------------------------ reading one table


class TableReader:
    """Reads one table batch by batch from its committed offset up to the run's bound."""

    def __init__(self, engine: sa.Engine, ref: TableRef, values: dict[str, Any], committed: dict | None,
                 now: dt.datetime):
        self.engine, self.ref, self.partition = engine, ref, ref.partition
        self.mode = values[c.MODE]
        self.topic = f"{values[c.TOPIC_PREFIX]}{ref.name}"
        self.zone = ZoneInfo(values[c.DB_TIMEZONE])
        try:
            self.table = sa.Table(ref.name, sa.MetaData(), schema=ref.schema, autoload_with=engine)
        except sa.exc.NoSuchTableError:
            raise ConnectException(f"table {ref.fqn} no longer exists") from None
        cols = {col.name: col for col in self.table.columns}
        self.mappings = [map_column(col.name, col.type, col.nullable, values[c.NUMERIC_MAPPING], self.zone)
                         for col in self.table.columns]
        self.value_schema = struct_schema(ref.name, self.mappings)
        pk = [col.name for col in self.table.primary_key.columns]
        by_name = {m.name: m for m in self.mappings}
        self.key_mappings = [by_name[n] for n in pk]
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
                    f"table {ref.fqn}: column {name!r} ({key}) does not exist; its columns are {sorted(cols)}")
            if values[c.VALIDATE_NON_NULL] and cols[name].nullable:
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
            self.ts_indexes = [list(cols).index(n) for n in ts]
            self.upper = now - dt.timedelta(milliseconds=values[c.TIMESTAMP_DELAY_MS])
        committed = committed or {}
        self.last_inc = committed.get(INCREMENTING_FIELD)
        self.last_ts = ts_from_offset(committed)
        initial = values.get(c.TIMESTAMP_INITIAL)
        if self.last_ts is None and self.ts_cols is not None and initial is not None:
            self.last_ts = now if initial == c.TIMESTAMP_INITIAL_CURRENT else ts_from_offset({TIMESTAMP_FIELD: initial})
        self.done = False
        self._bulk = None

    # ---- binding

    def _bind_ts(self, t: dt.datetime) -> dt.datetime:
        if self.ts_aware:
            return t
        return t.astimezone(self.zone).replace(tzinfo=None)

    def _row_ts(self, row) -> dt.datetime | None:
        for i in self.ts_indexes:
            v = row[i]
            if v is not None:
                return self.mappings[i].convert(v)
        return None

    def _offset(self, ts: dt.datetime | None, inc: Any) -> dict:
        out: dict[str, Any] = {}
        if self.ts_cols is not None and ts is not None:
            out.update(ts_offset(ts))
        if self.inc is not None and inc is not None:
            out[INCREMENTING_FIELD] = int(inc)
        return out

    def _fetch(self, stmt) -> list:
        try:
            with self.engine.connect() as conn:
                return list(conn.execute(stmt))
        except sa.exc.SQLAlchemyError as e:
            raise ConnectException(f"table {self.ref.fqn}: query failed: {e}") from e

    # ---- reading

    def read(self, limit: int) -> list[SourceRecord]:
        if self.done:
            return []
        if self.mode == c.MODE_BULK:
            return self._read_bulk(limit)
        stmt = sa.select(*self.table.columns)
        if self.mode == c.MODE_INCREMENTING:
            if self.last_inc is not None:
                stmt = stmt.where(self.inc > self.last_inc)
            stmt = stmt.order_by(self.inc)
        else:
            cond = [self.ts_expr < self._bind_ts(self.upper)]
            if self.last_ts is not None:
                t = self._bind_ts(self.last_ts)
                if self.mode == c.MODE_TIMESTAMP_INCREMENTING and self.last_inc is not None:
                    cond.append(sa.or_(self.ts_expr > t, sa.and_(self.ts_expr == t, self.inc > self.last_inc)))
                else:
                    cond.append(self.ts_expr > t)
            else:
                cond.append(self.ts_expr.is_not(None))
            stmt = stmt.where(*cond).order_by(self.ts_expr, *([self.inc] if self.inc is not None else []))
        rows = self._fetch(stmt.limit(limit))
        if len(rows) < limit:
            self.done = True
        if self.mode == c.MODE_TIMESTAMP:
            return self._timestamp_groups(rows, limit, stmt)
        records = []
        inc_index = list(self.table.columns.keys()).index(self.inc.name)
        for row in rows:
            ts = self._row_ts(row) if self.ts_cols is not None else None
            self.last_inc = row[inc_index]
            if ts is not None:
                self.last_ts = ts
            records.append(self._record(row, self._offset(ts, row[inc_index])))
        return records

    def _timestamp_groups(self, rows: list, limit: int, stmt) -> list[SourceRecord]:
        stamped = [(self._row_ts(r), r) for r in rows]
        if len(rows) == limit:
            last = stamped[-1][0]
            kept = [(t, r) for t, r in stamped if t != last]
            if not kept:  # the whole batch shares one timestamp: read all of its rows now
                t = self._bind_ts(last)
                more = self._fetch(sa.select(*self.table.columns).where(self.ts_expr == t))
                kept = [(last, r) for r in more]
            stamped = kept
        records = []
        before = self._offset(self.last_ts, None)
        for k, (t, row) in enumerate(stamped):
            group_ends = k + 1 == len(stamped) or stamped[k + 1][0] != t
            if group_ends:
                before = self._offset(t, None)
            records.append(self._record(row, dict(before)))
        if stamped:
            self.last_ts = stamped[-1][0]
        return records

    def _read_bulk(self, limit: int) -> list[SourceRecord]:
        if self._bulk is None:
            order = list(self.table.primary_key.columns)
            stmt = sa.select(*self.table.columns).order_by(*order)
            try:
                self._conn = self.engine.connect()
                self._bulk = self._conn.execution_options(stream_results=True).execute(stmt)
            except sa.exc.SQLAlchemyError as e:
                self.close()
                raise ConnectException(f"table {self.ref.fqn}: query failed: {e}") from e
        rows = self._bulk.fetchmany(limit)
        if len(rows) < limit:
            self.done = True
            self.close()
        return [self._record(row, {}) for row in rows]

    def _record(self, row, offset: dict) -> SourceRecord:
        value = Struct(self.value_schema, {m.name: m.convert(v) for m, v in zip(self.mappings, row)})
        key = None
        if self.key_schema is not None:
            key = Struct(self.key_schema, {m.name: value.get(m.name) for m in self.key_mappings})
        return SourceRecord(topic=self.topic, kafka_partition=None, key_schema=self.key_schema, key=key,
                            value_schema=self.value_schema, value=value,
                            source_partition=self.partition, source_offset=offset)

    def close(self) -> None:
        bulk, conn = self._bulk, getattr(self, "_conn", None)
        self._bulk, self._conn = None, None
        if bulk is not None:
            bulk.close()
        if conn is not None:
            conn.close()


class JdbcSourceTask(SourceTask):
    """Reads the tables of its partitions (see the module docstring)."""

    def start(self, config: dict[str, str]) -> None:
        values = c.CONFIG_DEF.parse(config, context="JdbcSourceTask")
        self.batch = values[c.BATCH_MAX_ROWS]
        self._engine = create_engine(values)
        log.info("JDBC source task reading %s in mode %s", _safe_url(self._engine), values[c.MODE])
        tables = discover(self._engine, values)
        if TASK_PARTITIONS_KEY in config:
            wanted = [canonical(p) for p in task_partitions(config)]
            by_key = {canonical(t.partition): t for t in tables}
            missing = [k for k in wanted if k not in by_key]
            if missing:
                raise ConnectException(f"table(s) {missing} no longer exist in {_safe_url(self._engine)}")
            tables = [by_key[k] for k in wanted]
        committed = self.context.offset_storage_reader.offsets([t.partition for t in tables]) if tables else {}
        with self._engine.connect() as conn:
            now = db_now(conn)
        self._readers = [TableReader(self._engine, t, values, committed.get(canonical(t.partition)), now)
                         for t in tables]
        self._next = 0

    def poll(self) -> list[SourceRecord] | None:
        readers = [r for r in getattr(self, "_readers", []) if not r.done]
        if not readers:
            return None
        records: list[SourceRecord] = []
        for k in range(len(readers)):
            reader = readers[(self._next + k) % len(readers)]
            records += reader.read(self.batch - len(records))
            if len(records) >= self.batch:
                break
        self._next += 1
        return records

    def stop(self) -> None:
        for r in getattr(self, "_readers", []):
            r.close()
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.dispose()
            self._engine = None
