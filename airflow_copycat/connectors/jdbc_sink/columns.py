"""PostgreSQL: a consume round's messages written in columns, the JDBC sink's fast path.

:meth:`ColumnWriter.put_batch` is called by the sink task with each batch the
framework gives ``put_batch`` (up to 10,000 undecoded messages) when the target is
PostgreSQL and ``copycat.batch.enabled`` is true. Its contract is the records':
the table, the offsets table, the dead letters and the failures are those
:meth:`JdbcSinkTask.put <.sink.JdbcSinkTask.put>` leaves for the batch's records.

For each topic-partition run of the batch (:meth:`SinkBatch.runs`) it decodes the
values -- and with ``pk.mode=record_key`` the keys -- in columns
(:func:`~..files.json_columns.decode_envelopes`: JsonConverter with
``schemas.enable``), builds the row of the run's first record (:func:`.rows.row_of`),
fits the table to it (:meth:`.tables.Tables.ensure`, DDL before the transaction)
and lays the columns out as the records path writes them: key columns first,
then the value fields (``fields.whitelist``), timestamps as naive local time of
``db.timezone``, decimals with their scale. Consecutive runs that fit are then
written in one transaction on one ADBC connection: per table and column set, the
rows (upsert: the last of each key) are bulk-loaded into a temporary staging table
(``adbc_ingest``) and moved with one ``INSERT ... SELECT`` (upsert: ``ON CONFLICT
... DO UPDATE``), then the offsets move by compare-and-set
(:meth:`.offsets_table.OffsetsTable.moves_sql`), then it commits. Upserts of keys
that are all new are copied straight into their tables instead (:mod:`.appends`:
half the database's work; refused as soon as a key is there, and then staged). When
that transaction fails, each run is tried again in a transaction of its own.

The batch's last transaction runs on a writer thread while the framework consumes
and decodes the next batch (the ADBC driver and pyarrow's JSON parser release the
GIL); it is waited for (:meth:`ColumnWriter.drain`) before anything of the next
batch is written, in ``pre_commit`` and in ``stop``. Its rows and offsets commit
together or not at all, as before; a failure of it is handled at that point, as
any failed transaction (its records are reported from the batch before the
current one, see ``SinkTask.put_batch``).

What it cannot promise to write exactly as the records goes to the records path,
in order, run by run: a converter other than JsonConverter with schemas, a
tombstone or null value, a value or key column decode_envelopes refuses, a
nested field (written as JSON text), a null primary key, ``insert.mode=update``,
a table column of another type than the staged one (a ``DOUBLE`` for a
``float32`` field, ``JSONB`` for a string). And any failure of a run's
transaction -- a row the database refuses, a lost connection, another attempt's
offsets -- rolls it back and writes that run through the records path, which
retries, finds refused rows by halving and dead-letters them or fails naming the
record. Runs are written in batch order, each partition's offsets in the
transaction of its rows.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_copycat.connect.data import Type
from airflow_copycat.connect.errors import ConnectException
from airflow_copycat.extras import require
from airflow_copycat.connect.records import SinkRecord

from ..files.json_columns import decode_envelopes
from ..jdbc.arrow_reader import conninfo
from .appends import Appends
from .config import KAFKA_PK_DEFAULTS
from .rows import RecordError, Row, row_of
from .staging import staged, takes

log = logging.getLogger(__name__)

STAGE = "copycat_columns_stage"
"""The session's temporary staging table (replaced for each statement)."""
_WRITTEN = "written"

@dataclasses.dataclass
class _Run:
    """One topic-partition run laid out as its table's columns (``names``; staged as ``c0..cN``)."""

    tp: tuple[str, int]
    start: int  # batch rows start..stop-1 (start: the first not yet written)
    stop: int
    end: int  # the next offset after the run
    row: Row  # the first record's row: table, key columns, column schemas
    table: pa.Table
    numeric: frozenset[int]  # positions of columns staged as text, cast to NUMERIC

    @property
    def names(self) -> list[str]:
        return [n for n, _, _ in self.row.columns]


class ColumnWriter:
    """The fast path of one :class:`~.sink.JdbcSinkTask` (see the module docstring)."""

    def __init__(self, task):
        self.task = task
        self._conn = None
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: _InFlight | None = None
        self.appends = Appends()

    # ------------------------------------------------------------ the batch

    def put_batch(self, batch) -> None:
        """Write ``batch`` as the records path would (see the module docstring). Its last column
        transaction may still run when this returns; :meth:`drain` waits for it."""
        steps: list = []  # in batch order: a group of runs for the columns, or a (start, stop) span for the records
        group: list[tuple[int, int, _Run]] = []
        for topic, partition, start, stop in batch.runs():
            try:
                run = self._layout(batch, (topic, partition), start, stop)
            except _Unfit as e:  # before anything of the batch is written, as the records fail
                raise e.error from None
            except Exception as e:  # noqa: BLE001 -- whatever went wrong, the records decide
                log.debug("%s-%s: records path (%s)", topic, partition, e)
                run = None
            if run is _WRITTEN:
                continue
            if run is None:
                if group:
                    steps.append(group)
                    group = []
                steps.append((start, stop))
            else:
                group.append((start, stop, run))
        if group:
            steps.append(group)
        self.drain()  # the batch before, written (or given to the records) before anything of this one
        for i, step in enumerate(steps):
            if isinstance(step, tuple):
                self.task.put(self._records(batch, [step]))
            elif i == len(steps) - 1:
                self._submit(batch, step)
            else:
                self._write(batch, step)

    def drain(self, *, fallback: bool = True) -> None:
        """Wait for the column transaction :meth:`put_batch` left running. When it failed, its runs
        go as :meth:`_write` sends them after a failure (each alone, then the records), unless
        ``fallback`` is false (the task stops: nothing of it is committed, the next run redoes it).
        Called before any other write, by ``pre_commit`` and by ``stop``."""
        inflight = self._inflight
        if inflight is None:
            return
        try:
            inflight.future.result()
        except Exception as e:  # noqa: BLE001 -- the records path writes them and reports what failed
            log.debug("columns failed for %d run(s): %s", len(inflight.group), _first_line(e))
            self._rollback()
            if fallback:  # if it raises, the next drain (the batch given again, pre_commit) takes it up again
                self._fall_back(inflight.batch, inflight.group)
            self._inflight = None
            return
        self._inflight = None
        self._done(inflight.group, inflight.moves, inflight.counts)

    @staticmethod
    def _records(batch, spans: Sequence[tuple[int, int]]) -> list:
        return [r for a, b in spans for r in map(batch.record, range(a, b)) if r is not None]

    def _layout(self, batch, tp: tuple[str, int], start: int, stop: int) -> _Run | str | None:
        """The run's columns, ``"written"`` when an earlier transaction wrote all of it, ``None`` when
        the records must write it."""
        task, settings = self.task, self.task.settings
        if settings.insert_mode == "update":
            return None
        offsets = batch.offsets
        committed = max(task.committed.get(tp, -1), self._inflight.moves.get(tp, (None, -1))[1]
                        if self._inflight is not None else -1)
        if offsets[start] < committed:  # given again after a retry: skip what the database has
            start = bisect.bisect_left(offsets, committed, start, stop)
            if start == stop:
                return _WRITTEN
        topic = tp[0]
        decoded = decode_envelopes(batch.values[start:stop], batch.value_converter, topic)
        if decoded is None or decoded[0].type is not Type.STRUCT:
            return None
        keys = batch.keys[start:stop]
        key_table = None
        if settings.pk_mode == "record_key":
            key_decoded = decode_envelopes(keys, batch.key_converter, topic)
            if key_decoded is None:
                return None
            key_table = key_decoded[1]
        elif keys.count(None) != len(keys) and decode_envelopes(keys, batch.key_converter, topic) is None:
            return None  # a key that may not decode: the records report it (null keys: the first record's tells)
        first = _first_record(batch, start)
        try:
            row = row_of(first, settings, task.zone)
        except RecordError:
            return None
        except ConnectException as e:  # a config that does not fit the records (pk.fields): no record's fault
            raise _Unfit(e) from e
        if row is None:
            return None
        try:
            fits = task.tables.ensure(row)
        except ConnectException as e:
            raise _Unfit(e) from e
        if not fits:
            return None  # a delete against a table that does not exist: the records skip it
        table, numeric = self._columns(batch, row, decoded[1], key_table, start, stop)
        if table is None or not self._fits(row, table, numeric):
            return None
        return _Run(tp, start, stop, offsets[stop - 1] + 1, row, table, frozenset(numeric))

    def _columns(self, batch, row: Row, values: pa.Table, keys: pa.Table | None, start: int, stop: int):
        """The run's columns in the row's order, as staged, and which are decimals; ``(None, ())``
        when a column cannot be written exactly as the records write it."""
        settings, n = self.task.settings, stop - start
        names = [name for name, _, _ in row.columns]
        mode = settings.pk_mode
        arrays: dict[str, Any] = {}
        if mode == "kafka":
            kafka_names = list(settings.pk_fields or KAFKA_PK_DEFAULTS)
            arrays[kafka_names[0]] = pa.array([batch.topics[start]] * n, pa.string())
            arrays[kafka_names[1]] = pa.array([batch.partitions[start]] * n, pa.int32())
            arrays[kafka_names[2]] = pa.array(batch.offsets[start:stop], pa.int64())
        elif mode == "record_key":
            if keys.column_names == ["value"] and len(row.key_columns) == 1 and "value" not in row.key_columns:
                arrays[row.key_columns[0]] = keys.column(0)  # a primitive key
            else:
                for name in row.key_columns:
                    arrays[name] = keys.column(name)
        for name in names:
            if name not in arrays:
                if name not in values.column_names:
                    return None, ()
                arrays[name] = values.column(name)
        out, numeric = [], []
        for i, name in enumerate(names):
            array = staged(arrays[name], settings.db_timezone)  # key and value timestamps alike
            if array is None:
                return None, ()
            if name in row.key_columns and array.null_count:
                return None, ()  # a null primary key: the records report each such record
            if pa.types.is_decimal(arrays[name].type):
                numeric.append(i)
            out.append(array)
        return pa.Table.from_arrays(out, names=[f"c{i}" for i in range(len(out))]), numeric

    def _fits(self, row: Row, table: pa.Table, numeric: Sequence[int]) -> bool:
        """Whether each table column takes the staged values as the records path's values (same
        type, or one the database converts the same way)."""
        types = self.task.tables.column_types(row.table)
        if types is None:
            return False
        fold = self.task.tables.fold
        for i, (name, _, _) in enumerate(row.columns):
            column = types.get(fold(name))
            if column is None or not takes(column, table.schema.types[i], i in numeric):
                return False
        return True

    # ------------------------------------------------------------ the transaction

    def _write(self, batch, group: list[tuple[int, int, _Run]]) -> None:
        """One transaction for ``group``'s runs; when it fails, :meth:`_fall_back`."""
        if group and not self._try(group):
            self._fall_back(batch, group)

    def _fall_back(self, batch, group: list[tuple[int, int, _Run]]) -> None:
        """After ``group``'s transaction failed: one transaction for each run, and the records path
        for a run that fails alone. Runs an earlier attempt of this fallback committed are skipped
        (the records path skips what the database holds by itself)."""
        group = [one for one in group if one[2].end > self.task.committed.get(one[2].tp, -1)]
        for one in group if len(group) > 1 else ():
            if not self._try([one]):
                self.task.put(self._records(batch, [one[:2]]))
        if len(group) == 1:
            self.task.put(self._records(batch, [group[0][:2]]))

    def _moves(self, group: list[tuple[int, int, _Run]]) -> dict[tuple[str, int], tuple[int | None, int]]:
        moves: dict[tuple[str, int], tuple[int | None, int]] = {}
        for _, _, run in group:
            moves[run.tp] = (moves[run.tp][0] if run.tp in moves else self.task.committed.get(run.tp), run.end)
        return moves

    def _try(self, group: list[tuple[int, int, _Run]]) -> bool:
        """Write ``group``'s runs and their offsets in one transaction; ``False`` (rolled back) when
        anything failed."""
        moves, counts = self._moves(group), {}
        try:
            self._transaction([run for _, _, run in group], moves, counts)
        except Exception as e:  # noqa: BLE001 -- the records path writes them and reports what failed
            log.debug("columns failed for %d run(s): %s", len(group), _first_line(e))
            self._rollback()
            return False
        self._done(group, moves, counts)
        return True

    def _submit(self, batch, group: list[tuple[int, int, _Run]]) -> None:
        """Start ``group``'s transaction on the writer thread (the next batch decodes meanwhile: the
        database driver and the JSON parser both release the GIL); :meth:`drain` ends it."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="jdbc-sink-columns")
        moves, counts = self._moves(group), {}
        future = self._pool.submit(self._transaction, [run for _, _, run in group], moves, counts)
        self._inflight = _InFlight(batch, group, moves, counts, future)

    def _done(self, group: list[tuple[int, int, _Run]], moves: dict, counts: dict) -> None:
        """What a committed transaction of ``group`` moved: the task's offsets, counts and metrics."""
        task = self.task
        task.committed.update({tp: new for tp, (_, new) in moves.items()})
        for table, c in counts.items():
            mine = task.writer.counts.setdefault(table, {})
            for k, v in c.items():
                mine[k] = mine.get(k, 0) + v
        task.metrics["rows_columnar"] = task.metrics.get("rows_columnar", 0) + sum(r.stop - r.start
                                                                                   for _, _, r in group)
        task.metrics["rows_copied_straight"] = self.appends.rows
        task.metrics.update(tables=task.writer.counts, tables_created=len(task.tables.created),
                            columns_added=len(task.tables.added), write_retries=task.writer.retries)

    def _transaction(self, runs: list[_Run], moves: dict, counts: dict) -> None:
        """Write ``runs`` and ``moves`` in one transaction and commit. Upserts whose tables
        :mod:`.appends` wants are first copied straight in; when that copy is refused, the transaction
        is rolled back and written through the staging table."""
        upsert = self.task.settings.insert_mode == "upsert"
        merged = list(_merged(runs, upsert))
        bodies = self.appends.bodies(merged) if upsert else None
        if bodies is not None:
            try:
                if self.appends.write(self.task._engine, self.task.dialect, self.task.offsets, merged, bodies,
                                      moves, counts):
                    return
            except Exception as e:  # noqa: BLE001 -- raised again unless a straight copy was refused
                if not self.appends.refused(e):
                    raise
                counts.clear()
        self._stage(merged, moves, counts, upsert)

    def _stage(self, merged: list[tuple[pa.Table, _Run]], moves: dict, counts: dict, upsert: bool) -> None:
        """The transaction through the staging table, on the ADBC connection."""
        conn = self._connection()
        with conn.cursor() as cur:
            for rows, first in merged:
                cur.adbc_ingest(STAGE, rows, mode="replace", temporary=True)
                cur.execute(self._insert_sql(first, upsert))
                inserted, total = cur.fetchone()
                c = counts.setdefault(first.row.table, {})
                c["inserted"] = c.get("inserted", 0) + int(inserted or 0)
                if upsert:
                    c["updated"] = c.get("updated", 0) + int(total) - int(inserted or 0)
                    self.appends.merged(first.row.table, int(inserted or 0), rows.num_rows)
            for sql, params, fenced in self.task.offsets.moves_sql(moves, lambda i: f"${i}"):
                cur.execute(sql, params)
                if len(cur.fetchall()) != 1:
                    raise fenced
        conn.commit()

    def _insert_sql(self, run: _Run, upsert: bool) -> str:
        d, names = self.task.dialect, run.names
        cols = ", ".join(d.ident(n) for n in names)
        select = ", ".join(f"CAST(c{i} AS NUMERIC)" if i in run.numeric else f"c{i}" for i in range(len(names)))
        conflict = d.on_conflict(names, run.row.key_columns) if upsert else ""
        # rows locked in key order: two writers upserting the same keys wait for each other, never deadlock;
        # text in byte order, as the straight copies sort it (appends.py), whatever the database's collation
        types = run.table.schema.types
        order = " ORDER BY " + ", ".join(
            f"c{i}" + (' COLLATE "C"' if pa.types.is_string(types[i]) else "")
            for i in (names.index(k) for k in run.row.key_columns)) if upsert and run.row.key_columns else ""
        return (f"WITH ins AS (INSERT INTO {d.table(run.row.table)} ({cols}) SELECT {select} FROM {STAGE}{order}{conflict} "
                "RETURNING (xmax = 0) AS i) SELECT count(*) FILTER (WHERE i), count(*) FROM ins")

    def _connection(self):
        if self._conn is None:
            adbc = require("adbc_driver_postgresql.dbapi", "jdbc", "the JDBC sink's columns on PostgreSQL")

            self._conn = adbc.connect(conninfo(self.task._engine.url), autocommit=False)
        return self._conn

    def _rollback(self) -> None:
        """Roll back the ADBC connection's transaction; a connection that cannot (lost) is dropped, and
        the next transaction opens a new one. (Not :meth:`close`: that drains, and :meth:`drain` rolls
        back here while its failed transaction is still the one in flight.)"""
        if self._conn is None:
            return
        try:
            self._conn.rollback()
        except Exception:  # noqa: BLE001 -- a broken connection
            self._drop_connection()

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 -- closing a dead connection
                pass

    def close(self) -> None:
        """Wait for a transaction still running (see :meth:`drain`; no fallback), then close."""
        try:
            self.drain(fallback=False)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        self._drop_connection()


class _Unfit(Exception):
    """A run's table cannot be made to fit its records (:meth:`.tables.Tables.ensure` refused), or the
    config does not fit them (:func:`.rows.row_of`'s ``ConnectException``): ``error``. The batch fails
    before anything of it is written, with the error the records path fails with."""

    def __init__(self, error: ConnectException):
        super().__init__(str(error))
        self.error = error


@dataclasses.dataclass
class _InFlight:
    """A column transaction running on the writer thread: the batch and runs it writes, the offset
    moves and counts it makes when it commits."""

    batch: Any
    group: list
    moves: dict
    counts: dict
    future: Future


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _first_record(batch, row: int) -> SinkRecord:
    """The record of ``row`` as far as :func:`.rows.row_of` reads it (decoding it through
    ``batch.record`` would read the whole batch's timestamps and headers); a converter's error is
    raised, and the records path reports it."""
    topic = batch.topics[row]
    key = batch.key_converter.to_connect_data(topic, batch.keys[row])
    value = batch.value_converter.to_connect_data(topic, batch.values[row])
    return SinkRecord(topic=topic, kafka_partition=batch.partitions[row], key_schema=key.schema, key=key.value,
                      value_schema=value.schema, value=value.value, timestamp=None, kafka_offset=batch.offsets[row])


def _merged(runs: list[_Run], dedupe: bool):
    """``(table, first run)`` per stretch of consecutive runs of one signature (the writer's
    :func:`.writer.runs`), with ``dedupe`` the last row of each key only."""
    out: list[list[_Run]] = []
    for run in runs:
        if out and out[-1][0].row.signature() == run.row.signature():
            out[-1].append(run)
        else:
            out.append([run])
    for stretch in out:
        table = stretch[0].table if len(stretch) == 1 else pa.concat_tables([r.table for r in stretch])
        keys = stretch[0].row.key_columns
        if dedupe and keys:
            table = _last_per_key(table, [f"c{i}" for i in range(len(keys))])
        yield table, stretch[0]


def _last_per_key(table: pa.Table, keys: list[str]) -> pa.Table:
    """The last row of each key (keys are the first columns), in the order of those last rows."""
    n = table.num_rows
    index = pa.array(range(n), pa.int64()) if n else pa.array([], pa.int64())
    last = table.select(keys).append_column("i", index).group_by(keys, use_threads=False).aggregate(
        [("i", "max")]).column("i_max")
    if len(last) == n:
        return table
    return table.take(pc.take(last, pc.sort_indices(last)))
