"""One run's part of the initial snapshot: the captured tables' rows as ``op: r`` events with resumable offsets.

:class:`SnapshotRead` reads table after table (sorted, :func:`.snapshot.snapshot_tables`) in one
``REPEATABLE READ`` transaction -- under the snapshot the slot's creation exported when there is
one, so rows read plus changes streamed from the slot's start miss and repeat nothing -- chunk by
chunk in key order (:func:`.snapshot.read_table`). Each record's offset is Debezium's snapshot
offset plus where the snapshot stands::

    {"lsn": <the slot's start>, "txId": null, "ts_usec": <snapshot start, µs>, "snapshot": true,
     "last_snapshot_record": false, "snapshot_tables_done": ["public.a"],
     "snapshot_table": "public.b", "snapshot_after_key": ["17"]}

so a run that stops half-way is continued by the next after the last key committed, under a newer
snapshot (see :mod:`.snapshot`). The last record of the snapshot is held back until the reading is
over and then carries ``"last_snapshot_record": true``: Debezium's mark that the snapshot is
complete, after which the stream starts at the slot's start.
"""

from __future__ import annotations

import time
from typing import Callable

from ...extras import require

from . import config as cfg
from . import snapshot as snap
from .envelope import EventBuilder, SourceInfo
from .model import Relation

psycopg = require("psycopg", "cdc", "PostgresCdcSource")


class SnapshotRead:
    """Snapshot records of the tables ``config`` captures (see the module docstring).

    ``conn`` is an idle autocommit connection this object owns from now on; ``snapshot_id`` the
    exported snapshot (``None``: the transaction's own); ``progress`` the committed offset of a
    snapshot in progress (or ``None``); ``make_record(event, offset)`` builds a record;
    ``counted(relation, rows)`` is told of every chunk read.
    """

    def __init__(self, conn: psycopg.Connection, snapshot_id: str | None, config, builder: EventBuilder,
                 slot_lsn: int, progress: dict | None, make_record: Callable, counted: Callable):
        self.conn, self.config, self.builder = conn, config, builder
        self.slot_lsn = slot_lsn
        self.make_record, self.counted = make_record, counted
        self._tx = snap.snapshot_transaction(conn, snapshot_id)
        self._tx.__enter__()
        progress = progress or {}
        self.done: list[str] = list(progress.get("snapshot_tables_done") or [])
        self.tables = [(s, t) for s, t in snap.snapshot_tables(conn, config) if f"{s}.{t}" not in self.done]
        first = f"{self.tables[0][0]}.{self.tables[0][1]}" if self.tables else None
        self._after = progress.get("snapshot_after_key") if progress.get("snapshot_table") == first else None
        self.ts_us = time.time_ns() // 1000
        self.rows = 0
        self._relation: Relation | None = None
        self._chunks = None
        self._held: tuple | None = None  # (relation, row, offset, first of its table) of the last row read
        self._table_ended = False  # the table of the held row was read to its end
        self._emitted = False
        self._resumed = bool(progress.get("snapshot_table") or self.done)

    def take(self) -> list | None:
        """The next chunk's records (the held one before them), ``None`` once every table was read."""
        while True:
            if self._chunks is None:
                if not self.tables:
                    return None
                schema, table = self.tables[0]
                relation = snap.relation_from_catalog(self.conn, schema, table)
                self.builder.add_types(snap.load_types(self.conn, {c.type_oid for c in relation.columns}))
                self._relation = relation
                self._chunks = snap.read_table(self.conn, relation,
                                               after_key=self._after if relation.key_columns else None,
                                               chunk_size=int(self.config[cfg.SNAPSHOT_FETCH_SIZE]))
            chunk = next(self._chunks, None)
            if chunk is not None:
                return self._records(chunk)
            schema, table = self.tables.pop(0)
            self.done.append(f"{schema}.{table}")
            self._chunks, self._after = None, None
            self._table_ended = True

    def _records(self, rows: list[tuple]) -> list:
        relation = self._relation
        name, done = f"{relation.schema}.{relation.table}", list(self.done)
        out = []
        for row in rows:
            offset = {"lsn": self.slot_lsn, "txId": None, "ts_usec": self.ts_us, "snapshot": True,
                      "last_snapshot_record": False, "snapshot_tables_done": done,
                      "snapshot_table": name, "snapshot_after_key": snap.key_of(relation, row)}
            if self._held is not None:
                out.append(self._emit(last_of_table=self._table_ended, last=False))
            first_of_table = self._table_ended or self._held is None and not self._emitted
            self._held, self._table_ended = (relation, row, offset, first_of_table), False
        self.rows += len(rows)
        self.counted(relation, len(rows))
        return out

    def _emit(self, *, last_of_table: bool, last: bool):
        """The held row's record; its ``source.snapshot`` is Debezium's mark of where it lies:
        ``first`` (of the snapshot), ``first_in_data_collection``, ``last_in_data_collection``,
        ``last`` (of the snapshot) or ``true``."""
        relation, row, offset, first_of_table = self._held
        self._held = None
        if last:
            marker = "last"
        elif not self._emitted and not self._resumed:
            marker = "first"
        elif first_of_table:
            marker = "first_in_data_collection"
        elif last_of_table:
            marker = "last_in_data_collection"
        else:
            marker = "true"
        self._emitted = True
        info = SourceInfo(commit_ts_us=self.ts_us, lsn=self.slot_lsn, snapshot=marker)
        return self.make_record(self.builder.read_event(relation, row, info), offset)

    def finish(self) -> list:
        """After :meth:`take` returned ``None``: the held last record (``source.snapshot: last``), its
        offset marked ``last_snapshot_record``; ends the snapshot's transaction."""
        self.close()
        if self._held is None:
            return []
        held = self._emit(last_of_table=True, last=True)
        offset = dict(held.source_offset, last_snapshot_record=True, snapshot_tables_done=list(self.done),
                      snapshot_table=None, snapshot_after_key=None)
        return [held.new_record(source_offset=offset)]

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
