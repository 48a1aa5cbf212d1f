"""One task's part of the snapshot in one run: its tables' rows as ``op: r`` events, one partition per table.

:class:`SnapshotRead` reads the tables a task was given (:mod:`.partitions`: their partitions,
boundaries and progress) one after the other in one ``REPEATABLE READ`` transaction under an
exported snapshot (:func:`.snapshot.snapshot_transaction`), chunk by chunk in key order
(:func:`.snapshot.read_table`). Each record carries its table's partition
``{"server": <prefix>, "table": "<schema>.<table>"}`` and offset::

    {"snapshot": true, "last_snapshot_record": false, "lsn": <boundary>, "ts_usec": <start, µs>,
     "snapshot_after_key": ["17"]}

so a run that stops half-way is continued by the next after the last key committed (under a newer
snapshot, keeping the table's first boundary). Once a table was read to its end, an empty batch
commits its offset with ``"last_snapshot_record": true`` (an empty table gets one too): the
stream task adopts the table from the next run on. ``source.snapshot`` follows Debezium's marks
within the task's share: ``first`` (its first row, unless it resumed), ``first_in_data_collection``,
``last_in_data_collection``, ``last`` (its last row), else ``true``.
"""

from __future__ import annotations

import time
from typing import Callable

from ...extras import require

from airflow_copycat.connect import Schema
from airflow_copycat.connect.batch import SourceBatch

from . import config as cfg
from . import snapshot as snap
from .envelope import EventBuilder, SourceInfo
from .model import Relation
from .partitions import RESUME, TableState, table_partition

psycopg = require("psycopg", "cdc", "PostgresCdcSource")


def done_marker(topic: str, partition: dict, offset: dict) -> SourceBatch:
    """An empty batch: commits ``offset`` for ``partition`` without producing a record."""
    import pyarrow as pa

    return SourceBatch(topic=topic, data=pa.table({"value": pa.array([], pa.string())}),
                       value_schema=Schema.OPTIONAL_STRING, source_partition=partition, source_offset=offset)


class SnapshotRead:
    """Snapshot records of ``work``'s tables (see the module docstring).

    ``conn`` is an idle autocommit connection this object owns from now on; ``snapshot_id`` the
    exported snapshot whose consistent point is ``boundary`` (the boundary of tables read from
    their start); ``work`` the :class:`~.partitions.TableState` of each table to read (``fresh``
    or ``resume``); ``make_record(event, partition, offset)`` builds a record; ``counted(relation,
    rows)`` is told of every chunk read. :attr:`done` maps each table read to its end to its boundary.
    """

    def __init__(self, conn: psycopg.Connection, snapshot_id: str | None, config, builder: EventBuilder,
                 boundary: int, work: list[TableState], topic_prefix: str, make_record: Callable,
                 counted: Callable):
        self.conn, self.config, self.builder = conn, config, builder
        self.boundary, self.prefix = boundary, topic_prefix
        self.make_record, self.counted = make_record, counted
        self._tx = snap.snapshot_transaction(conn, snapshot_id)
        self._tx.__enter__()
        self.work = sorted(work, key=lambda s: s.table)
        self.done: dict[str, int] = {}
        self.ts_us = time.time_ns() // 1000
        self.rows = 0
        self._state: TableState | None = None
        self._relation: Relation | None = None
        self._partition: dict | None = None
        self._chunks = None
        self._held: tuple | None = None  # (row, offset, first of its table) of the last row read
        self._first_of_table = False
        self._emitted = any(s.state == RESUME for s in work)  # a resumed snapshot has had its "first"

    def take(self) -> list | None:
        """The next chunk's records (and, at a table's end, its held last row and done marker);
        ``None`` once every table was read."""
        while True:
            if self._chunks is None:
                if not self.work:
                    return None
                state = self.work[0]
                relation = _relation_named(self.conn, state.table)
                if relation is None:  # dropped since the plan: nothing to read, nothing to mark
                    self.work.pop(0)
                    continue
                self.builder.add_types(snap.load_types(self.conn, {c.type_oid for c in relation.columns}))
                after = state.after_key if state.state == RESUME and relation.key_columns else None
                self._state, self._relation = state, relation
                self._partition = table_partition(self.prefix, state.table)
                self._first_of_table = True
                self._chunks = snap.read_table(self.conn, relation, after_key=after,
                                               chunk_size=int(self.config[cfg.SNAPSHOT_FETCH_SIZE]))
            chunk = next(self._chunks, None)
            if chunk is not None:
                return self._records(chunk)
            return self._table_end()

    def _boundary(self) -> int:
        state = self._state
        return state.boundary if state.state == RESUME and state.boundary is not None else self.boundary

    def _records(self, rows: list[tuple]) -> list:
        relation, boundary = self._relation, self._boundary()
        out = []
        for row in rows:
            offset = {"snapshot": True, "last_snapshot_record": False, "lsn": boundary, "ts_usec": self.ts_us,
                      "snapshot_after_key": snap.key_of(relation, row)}
            if self._held is not None:
                out.append(self._emit(last_of_table=False, last=False))
            self._held = (row, offset, self._first_of_table)
            self._first_of_table = False
        self.rows += len(rows)
        self.counted(relation, len(rows))
        return out

    def _table_end(self) -> list:
        state = self.work.pop(0)
        out = [self._emit(last_of_table=True, last=not self.work)] if self._held is not None else []
        boundary = self._boundary()
        offset = {"snapshot": True, "last_snapshot_record": True, "lsn": boundary, "ts_usec": self.ts_us}
        topic = f"{self.prefix}.{state.table}"
        out.append(done_marker(topic, self._partition, offset))
        self.done[state.table] = boundary
        self._chunks = None
        return out

    def _emit(self, *, last_of_table: bool, last: bool):
        """The held row's record, with Debezium's ``source.snapshot`` mark of where it lies."""
        row, offset, first_of_table = self._held
        self._held = None
        if last:
            marker = "last"
        elif not self._emitted:
            marker = "first"
        elif first_of_table:
            marker = "first_in_data_collection"
        elif last_of_table:
            marker = "last_in_data_collection"
        else:
            marker = "true"
        self._emitted = True
        info = SourceInfo(commit_ts_us=self.ts_us, lsn=offset["lsn"], snapshot=marker)
        return self.make_record(self.builder.read_event(self._relation, row, info), self._partition, offset)

    def close(self) -> None:
        """End the transaction (a run that stops half-way leaves nothing open) and close the connection."""
        if self.conn.closed:
            return
        try:
            if self._chunks is not None:
                self._chunks.close()
            self._tx.__exit__(None, None, None)
        finally:
            self.conn.close()


def _relation_named(conn, name: str):
    """The relation of the table partition name ``"<schema>.<table>"``, or ``None`` when no such table
    exists. Schema and table names may contain dots themselves, so each dot is tried as the separator
    (the first dot first, as before: a dotted table name in an undotted schema)."""
    for i, ch in enumerate(name):
        if ch == ".":
            try:
                return snap.relation_from_catalog(conn, name[:i], name[i + 1:])
            except LookupError:
                continue
    return None
