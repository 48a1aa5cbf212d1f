"""One transaction per ``put``: the rows, in bulk statements, and the offsets after them.

:meth:`Writer.write` is called by the sink task with the rows of one ``put`` (in
Kafka order) and the offset moves of their partitions. It

1. fits the tables to the rows (:mod:`.tables`; DDL, before the transaction), in order;
   a delete against a table that does not exist deletes nothing and is left out;
2. cuts the rows into runs of one table, one kind (write or delete) and one set of
   columns, in order; in upsert and update modes a run keeps only the last row of
   each key (what applying them one by one would leave), in key order -- except
   text keys on MySQL/MariaDB and SQLite, whose collations may hold two strings as
   one key: those runs keep every row in Kafka order (:func:`_last_of_each_key`);
3. in one transaction, writes each run in statements of at most ``batch.size``
   rows -- ``COPY`` (and one ``INSERT ... SELECT ... ON CONFLICT`` for upserts) on
   PostgreSQL, multi-row ``INSERT`` on MySQL/MariaDB, ``executemany`` on SQLite --
   then moves the offsets (:mod:`.offsets_table`) and commits.

A statement the database refuses because of a row (a constraint, a value too long,
a value of the wrong type: :func:`error_kind`) is rolled back to its savepoint and
cut in halves until the refused rows are found; each is handed to ``report(record, error)`` once
per write, however often its transaction is retried -- the
framework's errant-record reporter, which dead-letters it with tolerance or
raises, failing the run with nothing of the transaction committed. A failure that
may pass (connection lost, deadlock, serialization failure, database locked)
retries the whole transaction ``max.retries`` times, ``retry.backoff.ms`` apart.
Any other failure of a statement fails the run, naming the table and the first
record of the statement.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from typing import Callable, Mapping, Sequence
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from airflow_copycat.connect.errors import ConnectException

from ..jdbc.source import _safe_url
from .config import SinkSettings
from .dialects import Dialect
from .offsets_table import OffsetsTable
from .rows import Row, params
from .tables import Tables

log = logging.getLogger(__name__)


_PASSING_CLASSES = ("08", "40", "53", "57", "58")
"""SQLSTATE classes of failures that may pass: connection, transaction rollback (serialization
failure, deadlock), insufficient resources, operator intervention (a shutdown, a cancelled
statement), system errors."""
_PASSING_STATES = ("55P03", "55006")  # lock not available, object in use


_MYSQL_PASSING = {1205, 1213, 1317, 1927, 1040, 1053, 2006, 2013}
"""MySQL/MariaDB error numbers of failures that may pass, which they report with SQLSTATE HY000 or 70100:
lock wait timeout, deadlock, query interrupted, connection killed, too many connections, server
shutdown, server gone away, connection lost."""

_SQLITE_PASSING = (5, 6)
"""SQLite's primary result codes of failures that may pass: SQLITE_BUSY, SQLITE_LOCKED (the database is
locked by another writer). Its other operational errors (a missing column) cannot."""

_RECORD_CLASSES = ("22", "23")
"""SQLSTATE classes of a row's refusal: data exception (a value out of range, of the wrong form) and
integrity constraint violation (a key, a CHECK, a foreign key)."""
_RECORD_STATES = ("P0001",)  # PL/pgSQL RAISE EXCEPTION: a trigger refusing the row


def error_kind(e: BaseException) -> str:
    """``record`` (the database refused a row's values), ``retry`` (may pass), or ``fatal``. The SQLSTATE
    decides first, whatever the DB-API class: PyMySQL raises ``OperationalError`` for most server errors
    (a failed CHECK: 23000, an impossible datetime: 22007), so its classes of :data:`_RECORD_CLASSES` are
    the record's; so is a trigger's ``RAISE EXCEPTION`` (P0001; psycopg: ``InternalError``). Then the
    DB-API exception class (PEP 249 names, whatever the driver): an ``OperationalError`` that carries a
    SQLSTATE may pass only in the classes that say so: drivers put refusals of the statement itself there
    too (``ON CONFLICT`` on a deferrable key: 55000), which no retry mends. MySQL's and MariaDB's that
    may pass are known by their number (:data:`_MYSQL_PASSING`), SQLite's by their result code
    (:data:`_SQLITE_PASSING`). A failure to roll back to a savepoint after a statement is judged by the
    statement's error (:func:`_statement_error`)."""
    e = _statement_error(e)
    orig = getattr(e, "orig", None) or e
    state = str(getattr(orig, "sqlstate", None) or "")
    if state[:2] in _RECORD_CLASSES or state in _RECORD_STATES:
        return "record"
    if _mysql_errno(orig) in _MYSQL_PASSING:
        return "retry"
    names = {c.__name__ for c in type(orig).__mro__}
    if names & {"IntegrityError", "DataError"}:
        return "record"
    if isinstance(e, sa.exc.DisconnectionError):
        return "retry"
    if "OperationalError" in names:
        if state and not (state[:2] in _PASSING_CLASSES or state in _PASSING_STATES):
            return "fatal"
        code = getattr(orig, "sqlite_errorcode", None)
        if code is not None and code & 0xFF not in _SQLITE_PASSING:
            return "fatal"
        return "retry"
    return "fatal"


def _statement_error(e: BaseException) -> BaseException:
    """The statement's error when ``e`` is the failure to roll back to the savepoint taken before it:
    InnoDB rolls the whole transaction back on a deadlock (and a lock wait timeout with
    ``innodb_rollback_on_timeout``), so the savepoint is gone (1305) and that error hides the one that
    may pass. Else ``e``."""
    def rollback_to_savepoint(error: BaseException) -> bool:
        return str(getattr(error, "statement", None) or "").upper().startswith("ROLLBACK TO SAVEPOINT")

    if not rollback_to_savepoint(e):
        return e
    earlier = e.__context__  # (the driver's error of the rollback, then the statement's)
    while earlier is not None and not (isinstance(earlier, sa.exc.DBAPIError) and not rollback_to_savepoint(earlier)):
        earlier = earlier.__context__
    return earlier or e


def _mysql_errno(orig: BaseException) -> int | None:
    """The error number of a MySQL/MariaDB driver's exception (PyMySQL, mysqlclient: ``args[0]``)."""
    if type(orig).__module__.split(".")[0] not in ("pymysql", "MySQLdb"):
        return None
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def runs(rows: Sequence[Row], dedupe: bool, identity: Callable[[Row], tuple] | None = None,
         sort_text: bool = False) -> list[list[Row]]:
    """Consecutive rows of one signature; with ``dedupe`` each run as :func:`_last_of_each_key` keeps
    it, keys told apart by ``identity(row)`` (default: ``row.key``; ``sort_text``:
    :attr:`Dialect.text_keys_exact`)."""
    out: list[list[Row]] = []
    for row in rows:
        if out and out[-1][0].signature() == row.signature():
            out[-1].append(row)
        else:
            out.append([row])
    if dedupe:
        identity = identity or (lambda r: r.key)
        out = [_last_of_each_key(run, identity, sort_text) if run[0].key_columns else run for run in out]
    return out


def _last_of_each_key(run: list[Row], identity: Callable[[Row], tuple], sort_text: bool) -> list[Row]:
    """The last row of each key of ``run``, in key order: two writers upserting the same keys then lock
    them in one order. Unless a key holds text and not ``sort_text``: then every row, in Kafka order. A
    collation may hold two different strings as one key (case, accents, trailing spaces: MySQL's and
    MariaDB's defaults); only the rows as they came leave what applying them one by one leaves (the
    last record's values, the first one's spelling of the key), which dropping or reordering the rows
    of keys that differ in Python would not."""
    if not sort_text and any(isinstance(v, str) for row in run for v in row.key):
        return run
    return sorted({identity(r): r for r in run}.values(), key=_key_order)


def _key_order(row: Row) -> tuple:
    return tuple((type(v).__name__, v) for v in row.key)


class Writer:
    """Writes rows and offsets for one sink task (see the module docstring)."""

    def __init__(self, engine: sa.Engine, dialect: Dialect, settings: SinkSettings, tables: Tables,
                 offsets: OffsetsTable, report: Callable):
        self.engine, self.dialect, self.settings = engine, dialect, settings
        self.tables, self.offsets, self.report = tables, offsets, report
        self.zone = ZoneInfo(settings.db_timezone)
        self.counts: dict[str, dict[str, int]] = {}
        self.retries = 0
        self._reported: set[tuple] = set()  # records reported by the current write (a retry finds them again)
        self.deletes_skipped = 0  # deletes against tables that do not exist (Tables.ensure)

    def write(self, rows: Sequence[Row], moves: Mapping[tuple[str, int], tuple[int | None, int]]) -> None:
        self._reported = set()
        fitted = [row for row in rows if self.tables.ensure(row)]
        self.deletes_skipped += len(rows) - len(fitted)
        rows = fitted
        planned = runs(rows, dedupe=self.settings.insert_mode in ("upsert", "update"), identity=self._identities(),
                       sort_text=self.dialect.text_keys_exact)
        attempt = 0
        while True:
            counts: dict[str, dict[str, int]] = {}
            try:
                with self.engine.connect() as conn, conn.begin():
                    for run in planned:
                        for i in range(0, len(run), self.settings.batch_size):
                            self._bisect(conn, run[i:i + self.settings.batch_size], counts)
                    self.offsets.advance(conn, moves)
            except Exception as e:  # noqa: BLE001 -- classified below; anything not retriable is raised
                if error_kind(e) != "retry" or attempt >= self.settings.max_retries:
                    if error_kind(e) == "retry":
                        raise ConnectException(f"writing to {_safe_url(self.engine)} failed {attempt + 1} time(s), "
                                               f"the last: {_short(_statement_error(e))}") from e
                    raise
                attempt += 1
                self.retries += 1
                log.warning("writing to %s failed (%s); retry %d of %d in %d ms", _safe_url(self.engine),
                            _short(_statement_error(e)), attempt, self.settings.max_retries,
                            self.settings.retry_backoff_ms)
                time.sleep(self.settings.retry_backoff_ms / 1000.0)
                continue
            for table, c in counts.items():
                mine = self.counts.setdefault(table, {})
                for k, v in c.items():
                    mine[k] = mine.get(k, 0) + v
            return

    def _bisect(self, conn: sa.Connection, rows: list[Row], counts: dict) -> None:
        try:
            with conn.begin_nested():
                self._execute(conn, rows, counts)
        except Exception as e:  # noqa: BLE001
            kind = error_kind(e)
            if kind == "fatal":
                raise ConnectException(f"{rows[0].where}: writing {len(rows)} row(s) from there to table "
                                       f"{rows[0].table} failed: {_driver_message(_statement_error(e))}") from e
            if kind != "record":
                raise
            if len(rows) == 1:
                self._report_once(rows[0], e)
                return
            half = len(rows) // 2
            self._bisect(conn, rows[:half], counts)
            self._bisect(conn, rows[half:], counts)

    def _report_once(self, row: Row, e: BaseException) -> None:
        """Hand ``row``'s record to ``report`` unless an earlier attempt of this :meth:`write` did: a retried
        transaction refuses it again, and the dead-letter queue must get it once."""
        where = tuple(row.record.read_from)
        if where not in self._reported:
            self._reported.add(where)
            self.report(row.record, ConnectException(f"table {row.table}: {_short(e)}"))

    def _instant_positions(self, table: str, columns: Sequence[str]) -> list[int]:
        """Positions of ``columns`` whose column of ``table`` holds instants (:meth:`Dialect.holds_instants`)."""
        d = self.dialect
        if not d.instant_columns:  # (SQLite: describing a table in a transaction would wait for its own lock)
            return []
        types = self.tables.column_types(table) or {}
        return [i for i, col in enumerate(columns) if d.holds_instants(types.get(self.tables.fold(col)))]

    def _identities(self) -> Callable[[Row], tuple]:
        """A row's key as the table tells keys apart: a Timestamp in a column that holds instants by its
        instant, so the two of the repeated hour of a change to winter time (one local time, told apart by
        ``fold``, which ``==`` ignores) stay two rows; in a column of local times they are one. The tables'
        key columns are looked at once per table (for one ``write``)."""
        positions: dict[tuple, list[int]] = {}

        def identity(row: Row) -> tuple:
            where = (row.table, row.key_columns)
            at = positions.get(where)
            if at is None:
                at = positions[where] = self._instant_positions(row.table, row.key_columns)
            if not at:
                return row.key
            return tuple((v, v.fold) if i in at and isinstance(v, dt.datetime) else v for i, v in enumerate(row.key))

        return identity

    def _binder(self, table: str, columns: Sequence[str]) -> Callable[[tuple], tuple]:
        """The statement parameters of values of ``columns`` of ``table``: :meth:`Dialect.adapt`, after
        the timestamps of columns that hold instants are made instants (:meth:`Dialect.instant`)."""
        d = self.dialect
        at = self._instant_positions(table, columns)
        if not at:
            return d.adapt

        def bind(values: tuple) -> tuple:
            values = list(values)
            for i in at:
                if isinstance(values[i], dt.datetime):
                    values[i] = d.instant(values[i], self.zone)
            return d.adapt(tuple(values))

        return bind

    def _execute(self, conn: sa.Connection, rows: list[Row], counts: dict) -> None:
        d, first = self.dialect, rows[0]
        c = counts.setdefault(first.table, {})
        if first.delete:
            bind = self._binder(first.table, first.key_columns)
            n = conn.exec_driver_sql(d.delete(first.table, first.key_columns), [bind(r.key) for r in rows]).rowcount
            c["deleted"] = c.get("deleted", 0) + max(n, 0)
            return
        columns = [n for n, _, _ in first.columns]
        mode = self.settings.insert_mode
        if mode == "update":
            rest = [col for col in columns if col not in first.key_columns]
            if not rest:
                return  # every column is a key column: an update of such a row changes nothing
            bind = self._binder(first.table, rest + list(first.key_columns))
            n = conn.exec_driver_sql(d.update(first.table, columns, first.key_columns),
                                     [bind(params(r, rest) + r.key) for r in rows]).rowcount
            c["updated"] = c.get("updated", 0) + max(n, 0)
            return
        if d.name == "postgresql":
            self._postgres(conn, rows, columns, mode == "upsert", c)
            return
        sql = d.upsert(first.table, columns, first.key_columns) if mode == "upsert" else d.insert(first.table, columns)
        bind = self._binder(first.table, columns)
        conn.exec_driver_sql(sql, [bind(params(r, columns)) for r in rows])
        key = "upserted" if mode == "upsert" else "inserted"
        c[key] = c.get(key, 0) + len(rows)

    def _postgres(self, conn: sa.Connection, rows: list[Row], columns: list[str], upsert: bool, c: dict) -> None:
        """COPY the rows into the table (insert) or into a temporary copy of it, merged with one upsert."""
        d, first = self.dialect, rows[0]
        cols = ", ".join(d.ident(col) for col in columns)
        raw = conn.connection.driver_connection
        target = d.table(first.table)
        # the session's staging table of these columns (made once per connection, emptied per statement)
        stage = d.ident("copycat_stage_" + hashlib.sha1(f"{first.table}|{cols}".encode()).hexdigest()[:16]) \
            if upsert else None
        with raw.cursor() as cur:
            if upsert:
                cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} AS SELECT {cols} FROM {target} WITH NO DATA")
                cur.execute(f"TRUNCATE {stage}")
            bind = self._binder(first.table, columns)
            with cur.copy(f"COPY {stage if upsert else target} ({cols}) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row(bind(params(r, columns)))
            if not upsert:
                c["inserted"] = c.get("inserted", 0) + len(rows)
                return
            order = ", ".join(d.ident(k) + self._byte_order(first.table, k) for k in first.key_columns)
            cur.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {stage} ORDER BY {order}"
                        f"{d.on_conflict(columns, first.key_columns)} RETURNING (xmax = 0)")
            flags = [f for (f,) in cur.fetchall()]
        inserted = sum(1 for f in flags if f)
        c["inserted"] = c.get("inserted", 0) + inserted
        c["updated"] = c.get("updated", 0) + len(flags) - inserted


    def _byte_order(self, table: str, column: str) -> str:
        """`` COLLATE "C"`` for a text column: rows are locked in the order of the runs' keys (Python's, by
        code point: the column path's too), not the database's collation; two writers of the same keys
        then wait for each other instead of deadlocking."""
        column_type = (self.tables.column_types(table) or {}).get(self.tables.fold(column))
        return ' COLLATE "C"' if isinstance(column_type, sa.String) and not isinstance(column_type, sa.Enum) else ""


def _driver_message(e: BaseException, limit: int = 1000) -> str:
    """The driver's whole message of ``e`` (PostgreSQL's ``DETAIL`` and ``HINT`` lines included), without
    SQLAlchemy's statement and parameters (the rows' values)."""
    text = str(getattr(e, "orig", None) or e).strip() or type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _short(e: BaseException, limit: int = 300) -> str:
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    first = text[0] if text else type(e).__name__
    return first if len(first) <= limit else first[:limit] + "..."
