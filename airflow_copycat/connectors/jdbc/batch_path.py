"""The JDBC source's batch path: one query's rows as a :class:`~airflow_copycat.connect.SourceBatch`.

A :class:`BatchPath` belongs to one :class:`~.source.TableReader` and runs the same queries as its
record path (same statements, same ``LIMIT``, same hold-back of timestamp groups), reads them
into Arrow (:mod:`.arrow_reader`) and computes the offsets with column operations, so that the
batch's ``to_records()`` is, record for record, what the record path makes of those rows: same
values, same offset after every row (``row_offsets``, computed lazily), same reader state after
the batch. It declines (returns ``None``, and the reader takes the record path for that query)
whenever that equality is not plain:

* look-back reads (``copycat.lookback.ms``: which rows are emitted depends on every row before);
* a value with no Arrow form (NaN numeric, a decimal wider than 38 digits, ...);
* a naive timestamp column value in a daylight-saving gap of its zone (the record path names the row);
* timestamp+incrementing rows that are not strictly increasing in (timestamp, incrementing), or
  NULL or non-integer incrementing values (the record path's mark rules decide those).

Bulk mode streams the whole table on a connection of its own (ADBC on PostgreSQL), in batches
of at most ``batch.max.rows`` rows; its offsets are ``{}`` (plus a split's bounds).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from airflow_copycat.connect import ConnectException, RetriableException, SourceBatch
from airflow_copycat.connect.batch import RowOffsets

from . import arrow_reader as ar
from . import config as c

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def ts_fields(micros: int) -> dict:
    """``{"timestamp": epoch ms, "timestamp_nanos": ns within the second}`` of epoch microseconds
    (what :func:`.source.ts_offset` gives for the same instant)."""
    return {"timestamp": micros // 1000, "timestamp_nanos": (micros % 1_000_000) * 1000}


def from_micros(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


def micros_of(t: dt.datetime) -> int:
    d = t - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


class BatchPath:
    """Reads one table's queries into batches for a :class:`~.source.TableReader` (``reader``)."""

    def __init__(self, reader, columns: list[ar.ColumnPlan], adbc: Callable[[], ar.AdbcConnection] | None):
        self.reader, self.columns = reader, columns
        self._adbc = adbc  # the task's shared ADBC connection (PostgreSQL), else None: SQLAlchemy rows
        self.names = [p.mapping.name for p in columns]
        self.key_fields = tuple(m.name for m in reader.key_mappings)
        self._stream = self._stream_conn = None
        self._pending: list[pa.RecordBatch] = []

    # ---- fetching

    def _lost(self, e: Exception, conn: ar.AdbcConnection) -> bool:
        return not conn.alive()

    def fetch(self, stmt) -> tuple[pa.Table | None, list | None]:
        """(the rows as a batch table or ``None`` when a value has no Arrow form, the SQLAlchemy rows
        when they were fetched that way). Errors as the record path's ``_fetch``; a naive timestamp
        column holding a time in a daylight-saving gap also gives ``None`` (the record path names it)."""
        r = self.reader
        if self._adbc is None:
            rows = r._fetch(stmt)
            if r.ts_cols is not None and not r.ts_aware and not self._no_gap_in_rows(rows):
                return None, rows
            return ar.table_from_rows(rows, self.columns), rows
        conn = self._adbc()
        try:
            raw = conn.fetch(stmt)
        except (TypeError, ValueError, pa.ArrowException):
            return None, None  # a bound value ADBC cannot send (the record path runs the query instead)
        except ar.adbc_error_types() as e:
            if self._lost(e, conn):  # nothing was read: safe to retry
                self._adbc(reset=True)
                raise RetriableException(f"{r.ref.label}: the database connection was lost: {e}") from e
            raise ConnectException(f"{r.ref.label}: query failed: {e}") from e
        if r.ts_cols is not None and not r.ts_aware:
            for i in r.ts_indexes:
                if not _no_gap(raw.column(i), r.ts_zone):
                    return None, None
        return ar.convert_adbc_table(raw, self.columns), None

    def _no_gap_in_rows(self, rows) -> bool:
        r = self.reader
        for i in r.ts_indexes:
            try:
                arr = pa.array([row[i] for row in rows], type=pa.timestamp("us"))
            except ar._ARROW_ERRORS:
                return False
            if not _no_gap(arr, r.ts_zone):
                return False
        return True

    # ---- one query of the incremental modes

    def read(self, stmt, limit: int) -> list | None:
        """The batch (as a one-item list, or ``[]``) of ``stmt`` limited to ``limit`` rows, with the
        reader's state moved past it; ``None`` when this query must take the record path (see the
        module docstring; the reader's state is then untouched)."""
        r = self.reader
        table, rows = self.fetch(stmt.limit(limit))
        if table is None:
            return self._decline(rows)
        n = table.num_rows
        if r.mode == c.MODE_INCREMENTING:
            out = self._incrementing(table)
        elif r.mode == c.MODE_TIMESTAMP_INCREMENTING:
            out = self._timestamp_incrementing(table)
        else:
            out = self._timestamp(table, limit)
        if out is None:
            return self._decline(rows)
        if n < limit:
            r.done = True
        return out

    def _decline(self, rows):
        self.declined_rows = rows  # the record path reuses what was fetched (SQLAlchemy rows) instead of re-reading
        return None

    def _batch(self, table: pa.Table, offsets: RowOffsets) -> list:
        if table.num_rows == 0:
            return []
        r = self.reader
        return [SourceBatch(topic=r.topic, data=table, value_schema=r.value_schema, source_partition=r.partition,
                            source_offset=offsets[table.num_rows - 1], key_fields=self.key_fields,
                            key_schema=r.key_schema, row_offsets=offsets)]

    def _with_split(self, offset: dict) -> dict:
        split = self.reader.split_offset
        return dict(offset, **split) if split else offset

    def _inc_values(self, table: pa.Table) -> list:
        return table.column(self.reader.inc.name).to_pylist()

    def _ts_micros(self, table: pa.Table) -> np.ndarray | None:
        r = self.reader
        cols = [table.column(self.names[i]) for i in r.ts_indexes]
        ts = cols[0] if len(cols) == 1 else pc.coalesce(*cols)
        if ts.null_count:
            return None
        return ts.cast(pa.int64()).to_numpy()

    def _incrementing(self, table: pa.Table) -> list | None:
        r = self.reader
        incs = self._inc_values(table)
        if incs:
            r.last_inc = incs[-1]

        def make(i: int) -> dict:
            v = incs[i]
            return self._with_split({} if v is None else {"incrementing": int(v)})

        return self._batch(table, RowOffsets(len(incs), make))

    def _timestamp_incrementing(self, table: pa.Table) -> list | None:
        r = self.reader
        n = table.num_rows
        if n == 0:
            return []
        incs = self._inc_values(table)
        ts = self._ts_micros(table)
        if ts is None or any(v is None or type(v) is not int for v in incs):
            return None
        try:
            inc = np.asarray(incs, dtype=np.int64)
        except OverflowError:  # beyond int64 (a NUMERIC column): Python ints compare exactly
            inc = np.asarray(incs, dtype=object)
        if n > 1:
            d_ts = np.diff(ts)
            d_inc = np.diff(inc)
            if not bool(np.all((d_ts > 0) | ((d_ts == 0) & (d_inc > 0)))):
                return None
        if r.last_ts is not None:  # the first row must be after the mark, as every row of the query is
            first, mark = int(ts[0]), micros_of(r.last_ts)
            if not (first > mark or (first == mark and (r.last_inc is None or incs[0] > r.last_inc))):
                return None
        last_t = from_micros(int(ts[-1]))
        r.scan_ts, r.scan_inc = last_t, incs[-1]
        r.last_ts, r.last_inc = last_t, incs[-1]

        def make(i: int) -> dict:
            return self._with_split({**ts_fields(int(ts[i])), "incrementing": int(incs[i])})

        return self._batch(table, RowOffsets(n, make))

    def _timestamp(self, table: pa.Table, limit: int) -> list | None:
        r = self.reader
        ts = self._ts_micros(table)
        if ts is None:
            return None
        if len(ts) == limit:  # rows sharing the last timestamp are held back for the next batch
            last = ts[-1]
            keep = ts != last
            if not keep.any():  # the whole batch shares one timestamp: read all of its rows now
                t = from_micros(int(last))
                more, _ = self.fetch(r._select().where(r.ts_expr == r._bind_ts(t)))
                if more is None:
                    return None
                if more.num_rows == 0:
                    raise ConnectException(f"{r.ref.label}: the rows at {t.isoformat()} cannot be selected "
                                           f"again by their timestamp")
                table, ts = more, np.full(more.num_rows, last, dtype=np.int64)
            else:
                table, ts = table.filter(pa.array(keep)), ts[keep]
        n = len(ts)
        if n == 0:
            return []
        ends = np.ones(n, dtype=bool)
        ends[:-1] = ts[1:] != ts[:-1]
        end_at = np.maximum.accumulate(np.where(ends, np.arange(n), -1))
        before = r._offset(r.last_ts, None)
        last_t = from_micros(int(ts[-1]))
        r.scan_ts = r.last_ts = last_t

        def make(i: int) -> dict:
            j = int(end_at[i])
            return self._with_split(dict(before) if j < 0 else ts_fields(int(ts[j])))

        return self._batch(table, RowOffsets(n, make))

    # ---- bulk

    def read_bulk(self, limit: int) -> list:
        """Up to ``limit`` rows of the bulk snapshot as a batch (records where a value has no Arrow form)."""
        r = self.reader
        if self._adbc is None:
            return self._read_bulk_rows(limit)
        if self._stream is None:
            try:
                self._stream_conn = ar.AdbcConnection(r.engine)
                self._stream = iter(self._stream_conn.stream(r._select().order_by(*r.table.primary_key.columns)))
            except ar.adbc_error_types() as e:
                self.close()
                raise ConnectException(f"table {r.ref.fqn}: query failed: {e}") from e
        have = sum(b.num_rows for b in self._pending)
        try:
            while have < limit:
                b = next(self._stream, None)
                if b is None:
                    r.done = True
                    break
                self._pending.append(b)
                have += b.num_rows
        except ar.adbc_error_types() as e:  # not retriable: restarting would repeat rows, resuming is no snapshot
            self.close()
            r._interrupted = ConnectException(f"table {r.ref.fqn}: the bulk snapshot was interrupted (the next run "
                                              f"reads the whole table again): {e}")
            raise r._interrupted from e
        raw = pa.Table.from_batches(self._pending) if self._pending else None
        if raw is None:
            self.close()
            return []
        take, rest = raw.slice(0, limit), raw.slice(limit)
        self._pending = rest.to_batches() if rest.num_rows else []
        if r.done and not self._pending:
            self.close()
        elif not self._pending and take.num_rows < limit:
            r.done = True
        table = ar.convert_adbc_table(take, self.columns)
        offset = self._with_split({})
        if table is None:  # a value with no Arrow form: these rows as records
            values = [ar.adbc_python_values(col) for col in take.columns]
            return [r._record(row, {}) for row in zip(*values)]
        return self._bulk_batch(table, offset)

    def _bulk_batch(self, table: pa.Table, offset: dict) -> list:
        if table.num_rows == 0:
            return []
        r = self.reader
        return [SourceBatch(topic=r.topic, data=table, value_schema=r.value_schema, source_partition=r.partition,
                            source_offset=offset, key_fields=self.key_fields, key_schema=r.key_schema)]

    def _read_bulk_rows(self, limit: int) -> list:
        r = self.reader
        rows = r._bulk_rows(limit)
        table = ar.table_from_rows(rows, self.columns)
        if table is None:
            return [r._record(row, {}) for row in rows]
        return self._bulk_batch(table, self._with_split({}))

    def close(self) -> None:
        stream, conn = self._stream, self._stream_conn
        self._stream = self._stream_conn = None
        self._pending = []
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 -- closing a broken stream
                pass
        if conn is not None:
            conn.close()


def _no_gap(col, zone) -> bool:
    """Whether no naive value of ``col`` lies in a daylight-saving gap of ``zone``."""
    arr = col.cast(pa.timestamp("us")) if pa.types.is_timestamp(col.type) else col
    try:
        pc.assume_timezone(arr, str(zone), ambiguous="earliest", nonexistent="raise")
    except pa.ArrowInvalid:
        return False
    return True


class SharedAdbc:
    """The task's one ADBC connection for the incremental queries of all its tables, opened on
    first use and again after it was lost."""

    def __init__(self, engine: sa.Engine):
        self.engine, self._conn = engine, None

    def __call__(self, reset: bool = False) -> ar.AdbcConnection | None:
        if reset:
            self.close()
            return None
        if self._conn is None:
            self._conn = ar.AdbcConnection(self.engine)
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def batch_path(reader, values: dict[str, Any], adbc: SharedAdbc | None) -> BatchPath | None:
    """The reader's batch path, or ``None``: batches switched off, a look-back read, or a column
    without an Arrow type (or, on PostgreSQL, a type ADBC does not give as psycopg's values)."""
    if not values.get(c.BATCH_ENABLED, True) or reader.seen is not None:
        return None
    coltypes = [col.type for col in reader.table.columns]
    zones = [str(ar_zone) for ar_zone in reader.column_zones]
    columns = ar.plans(reader.mappings, coltypes, zones)
    if columns is None:
        return None
    if adbc is not None and not ar.adbc_supported(coltypes):
        return None
    return BatchPath(reader, columns, adbc)

