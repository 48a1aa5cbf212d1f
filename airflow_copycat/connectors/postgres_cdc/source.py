"""The PostgreSQL change-data-capture source (Debezium's ``io.debezium.connector.postgresql.PostgresConnector``).

**Partitions** (:mod:`.partitions`): Debezium's ``{"server": <topic.prefix>}``, whose offset is
Debezium's streaming offset (so the offset topic key is ``["<connector name>", {"server":
"<topic.prefix>"}]`` and an offset Debezium committed is read as is: given the same slot, a
connector moved from Debezium continues without a new snapshot), and one ``{"server": ...,
"table": "<schema>.<table>"}`` per table the snapshot reads. :meth:`PostgresCdcSourceConnector.
task_configs` spreads them over up to ``tasks.max`` tasks (sticky across re-plans); the task
holding the server partition is the **stream task** -- a slot has one reader -- and every task
snapshots the tables it holds. :meth:`PostgresCdcSourceConnector.partitions` lists the tables
now in the catalog, so the partition sensor re-plans when a table appears or joins the include
list; the next run snapshots it, then streams it.

A **run** of a task:

1. ``start`` -- reads the committed offsets (every task sees those committed before the run);
   makes the publication (before any snapshot, so a table's changes are published from its
   boundary on); creates the slot when missing (exporting its snapshot when this task has tables
   to read), or fails with :class:`~.slot.SlotMissing` when the offset needs a slot that is gone
   (``snapshot.mode=when_needed`` snapshots again instead); the stream task confirms the slot up
   to the committed offset's ``lsn_commit`` (repairing a run that died between committing its
   offsets and confirming) and captures the run's **bound**, ``pg_current_wal_flush_lsn()``;
2. ``poll`` -- first the task's tables that need reading (:func:`.partitions.table_plan`: new,
   half read, or read before the stream went past them) under one exported snapshot -- the slot's
   own when this task just made it, else a temporary slot's, whose consistent point becomes the
   tables' boundary -- as ``op: r`` events, resumable per table (:mod:`.snapshot_read`); then, in
   the stream task, the slot's changes up to the bound (:mod:`.stream`), ``max.batch.size`` per
   poll, each table's from its boundary on, with heartbeats (:mod:`.heartbeat`); ``None`` once
   caught up. The stream task streams only when no table that other tasks must read is
   incomplete (as the offsets committed before the run say): such a run streams nothing and
   confirms nothing, and the next run streams from where the last one stopped. A connection lost
   while reading raises :class:`~airflow_copycat.connect.errors.RetriableException`: within
   ``errors.retry.timeout`` the framework polls again and the slot is read again from just after
   the last change handed out, up to the same bound;
3. ``commit`` -- the framework committed the offsets of every record polled so far: the stream
   task confirms the slot up to the end of the last transaction handed out (to the bound once
   caught up), so the slot retains only what this run left unread; after the run's last commit it
   settles the slot (:func:`.slot.settle`).

The task reports the slot in :attr:`PostgresCdcSourceTask.metrics`: the slot as the run found
and left it (``wal_before``/``wal_after``: ``retained_bytes`` kept on disk from ``restart_lsn``,
``unconfirmed_bytes`` after ``confirmed_flush_lsn``), the run's bound, per table the events it
sent (``read``, ``inserted``, ``updated``, ``deleted``, ``truncated``), ``snapshot`` (tables and
rows read) and ``stream_deferred`` (the tables whose snapshot the stream waited for).
PostgreSQL moves ``restart_lsn`` only past a running-transactions record it logged (every
checkpoint, and every 15 s on a server that writes), so ``retained_bytes`` may lag the
confirmation by that much.

Over 500 lines: the task is one state machine (snapshot, stream, heartbeats, slot confirmation)
whose steps share its state; the parts that stand alone are modules of their own (``stream``,
``change_batches``, ``snapshot_read``, ``partitions``, ``heartbeat``, ``slot``).
"""

from __future__ import annotations

import logging
from typing import Any

from ...extras import require

from airflow_copycat.connect.connector import TASK_PARTITIONS_KEY, SourceConnector, task_partitions
from airflow_copycat.connect.errors import ConnectException, RetriableException
from airflow_copycat.connect.records import SourceRecord
from airflow_copycat.connect.task import SourceTask

from . import config as cfg
from . import partitions as parts
from . import slot as slots
from . import snapshot as snap
from .change_batches import ChangeBatcher
from .envelope import EventBuilder, SourceInfo
from .heartbeat import HeartbeatClock, floor_position, heartbeat_record, stream_position
from .model import Relation, Truncate, lsn_text
from .pgoutput import PgOutputDecoder
from .snapshot_read import SnapshotRead, done_marker
from .stream import Item, Resume, StreamRead

psycopg = require("psycopg", "cdc", "PostgresCdcSource")

log = logging.getLogger("airflow_copycat.postgres_cdc")

_COUNT_NAMES = {"r": "read", "c": "inserted", "u": "updated", "d": "deleted", "t": "truncated"}
"""Per-table counts in :attr:`PostgresCdcSourceTask.metrics` (``tables``), named as the JDBC sink names its own."""

SNAPSHOT_MODES = ("initial", "initial_only", "when_needed")
"""The modes that read tables (the others stream only)."""

source_partition = parts.server_partition


class PostgresCdcSourceConnector(SourceConnector):
    """Plans the change-data-capture source: the server partition and one partition per table the
    snapshot reads, spread over up to ``tasks.max`` tasks by the default (sticky) :meth:`task_configs`."""

    config_def = cfg.CONFIG_DEF

    def task_class(self) -> type:
        return PostgresCdcSourceTask

    def validate(self, config: dict[str, Any]) -> list:
        return cfg.validate(config)

    def exactly_once_support(self, config: dict[str, Any]) -> bool:
        """True: a task started from a committed offset re-reads the slot from at most that offset's
        transaction and skips what the offset covers. (A table snapshot resumed after a crash reads
        its remaining rows under a newer snapshot; consumers still converge on the table's state. A table
        without a key cannot resume: its stopped snapshot is read again from the start, so its snapshot rows
        are at-least-once; see docs/exactly-once.md.)"""
        return True

    def start(self, config: dict[str, Any]) -> None:
        super().start(config)
        self.cdc = cfg.CdcConfig.parse(config)
        self._partitions: list[dict] | None = None

    def partitions(self) -> list[dict]:
        """The server partition, then (in the modes that snapshot) one per table the snapshot reads,
        as the catalog lists them now. Connects to the database once per planning."""
        if self._partitions is None:
            found = [parts.server_partition(self.cdc.topic_prefix)]
            if self.cdc.snapshot_mode in SNAPSHOT_MODES:
                try:
                    with psycopg.connect(**self.cdc.connect_kwargs(), autocommit=True, connect_timeout=30) as conn:
                        tables = snap.snapshot_tables(conn, self.cdc)
                except psycopg.OperationalError as e:
                    raise ConnectException(f"cannot list the tables of database {self.cdc.database!r} to plan the "
                                           f"snapshot: {str(e).strip()}") from None
                found += [parts.table_partition(self.cdc.topic_prefix, f"{s}.{t}") for s, t in tables]
            self._partitions = found
        return self._partitions


class PostgresCdcSourceTask(SourceTask):
    """Snapshots its tables and, holding the server partition, streams the slot, for one bounded
    run; see the module docstring."""

    def __init__(self) -> None:
        self.metrics: dict[str, Any] = {}
        self._control: psycopg.Connection | None = None
        self._stream_conn: psycopg.Connection | None = None
        self._snapshot: SnapshotRead | None = None
        self._holder: psycopg.Connection | None = None
        self._read: StreamRead | None = None
        self._confirmed: int = 0
        self._confirmable_polled = 0
        self._done = False
        self._ended = False  # the read's last heartbeat / offset marker was handed out
        self.drop_on_stop = False
        self.streams = False
        self.streaming = False
        self._filters: dict[tuple[str, str], int] = {}
        self._pending_marker: list = []
        self._final_commit = False  # commit() ran after the last poll, outside failure handling
        self._sent_since_commit = False  # poll() returned records that no commit() covered yet

    # ------------------------------------------------------------------ start

    def start(self, config: dict[str, str]) -> None:
        self.cdc = c = cfg.CdcConfig.parse(config)
        self.name = str(config.get("name") or "")
        self.slot = str(c[cfg.SLOT_NAME])
        self.publication = str(c[cfg.PUBLICATION_NAME])
        self.partition = parts.server_partition(c.topic_prefix)
        self.batch_size = int(c.get(cfg.MAX_BATCH_SIZE) or 2048)
        self.heartbeats = HeartbeatClock(int(c.get(cfg.HEARTBEAT_INTERVAL_MS) or 0))
        self.kwargs = c.connect_kwargs()
        assigned = task_partitions(config) if TASK_PARTITIONS_KEY in config else None
        self.streams = assigned is None or any("table" not in p for p in assigned)
        mine = None if assigned is None else {p["table"] for p in assigned if "table" in p}
        reader = self.context.offset_storage_reader
        self.committed = reader.offset(self.partition)
        self._control = self._connect()
        self.builder = EventBuilder(c)
        self.batcher = ChangeBatcher(self.builder, self.partition, self._count) \
            if c.get(cfg.BATCH_ENABLED) is not False else None
        self.decoder = PgOutputDecoder(self._describe, snap.python_encoding(self._control))
        mode = c.snapshot_mode
        info = slots.check_slot(slots.slot_info(self._control, self.slot), self.slot, c.database)
        self.drop_on_stop = bool(c.get(cfg.SLOT_DROP_ON_STOP))
        stream_from = parts.stream_offset(self.committed)
        self.snapshotting = mode in SNAPSHOT_MODES
        tables = [f"{s}.{t}" for s, t in snap.snapshot_tables(self._control, c)] if self.snapshotting else []
        offsets = reader.offsets([parts.table_partition(c.topic_prefix, t) for t in tables])
        by_table = {t: offsets.get(_canonical(parts.table_partition(c.topic_prefix, t))) for t in tables}
        remade = False
        if info is None or info.wal_status == "lost":
            read_before = [int(o["lsn"]) for o in by_table.values() if o and o.get("lsn") is not None]
            stream_from, remade, info = self._slot_gone(info, stream_from, mode, read_before)
        self._ensure_publication()
        self.captured = parts.Captured() if remade else parts.Captured.of(self.committed)
        floor = parts.floor_of(stream_from)
        if (self.streams or stream_from is None) and info is not None:
            # without a stream offset the tables' boundaries must not lie before the slot's start: a
            # slot made anew by another task of this run after the old one was lost (see _slot_gone)
            floor = max(floor, info.confirmed_flush_lsn or 0)
        if remade:  # every table read before belongs to the lost slot: all are read again
            floor = 1 << 64
        plan = parts.table_plan(tables, by_table, self.captured, floor)
        work = [s for s in plan.values() if s.state in (parts.FRESH, parts.RESUME) and (mine is None or s.table in mine)]
        snapshot_id, boundary = None, 0
        if info is None:
            if not self.streams and stream_from is not None:
                work = []  # the stream task decides what a lost slot means (_slot_gone); nothing to read against
            else:
                snapshot_id, boundary = self._create_slot(bool(work))
                info = slots.slot_info(self._control, self.slot)
        if work and snapshot_id is None:
            boundary, snapshot_id, self._holder = slots.temporary_snapshot(self.kwargs, self.slot)
        self.slot_start_lsn = (info.confirmed_flush_lsn or 0) if info is not None else 0
        self.metrics.update(slot=self.slot, tables={})
        if info is not None:
            self.metrics["wal_before"] = info.describe()
        if self.streams:
            self._start_stream(plan, mine, stream_from, floor, remade)
        if work:
            self._snapshot = SnapshotRead(self._connect(), snapshot_id, c, self.builder, boundary, work, c.topic_prefix,
                                          self._record, lambda rel, n: self._count(rel, "r", n))
            log.info("connector %s: snapshot of %s table(s) at boundary %s", self.name, len(work), lsn_text(boundary))
        if self._holder is not None:  # the snapshot is imported: the exporting session (and a temporary slot) may go
            self._holder.close()
            self._holder = None

    def _slot_gone(self, info, stream_from, mode, read_before=()):
        """The slot is missing or invalidated: ``(stream offset, made anew, slot info)`` to go on with,
        or :class:`~.slot.SlotMissing` when committed offsets continue from it (the stream's, or, before
        the stream committed any, the snapshot boundaries ``read_before`` of tables read against it)."""
        if stream_from is None:
            if read_before and not (self.drop_on_stop and info is None):
                # tables were snapshotted against the lost slot: the changes after their boundaries
                # are in no slot now, and a new slot starts later
                if mode != "when_needed":
                    raise slots.slot_missing(self.slot, self.cdc.database, self.name, min(read_before), info)
                log.warning("connector %s: slot %s is %s before the stream committed any offset; "
                            "snapshot.mode=when_needed: snapshotting again", self.name, self.slot,
                            "gone" if info is None else "invalidated")
                if info is not None:
                    slots.drop_slot(self._control, self.slot)
                return None, True, None
            if info is not None:  # invalidated before any stream offset: make it anew
                slots.drop_slot(self._control, self.slot)
            return None, False, None
        if self.drop_on_stop and info is None:
            # Debezium's slot.drop.on.stop: the last run dropped it on purpose; a new slot goes on from
            # now, without the changes made between the runs (development and tests only)
            log.warning("connector %s: slot %s was dropped at the end of the last run (slot.drop.on.stop=true): "
                        "a new slot starts now; changes made since that run are not captured", self.name, self.slot)
            return dict(stream_from, lsn_commit=0, txId=None), False, None
        if mode != "when_needed":
            raise slots.slot_missing(self.slot, self.cdc.database, self.name, int(self.committed["lsn"]), info)
        if not self.streams:  # the stream task makes it anew
            return stream_from, False, None
        log.warning("connector %s: slot %s is %s; snapshot.mode=when_needed: snapshotting again", self.name,
                    self.slot, "gone" if info is None else "invalidated")
        if info is not None:
            slots.drop_slot(self._control, self.slot)
        self.committed = None
        return None, True, None

    def _create_slot(self, export: bool) -> tuple[str | None, int]:
        """Create the connector's slot; with ``export``, keep its snapshot for this task's tables:
        ``(snapshot name, consistent point)``, else ``(None, 0)``. Another task may have made it first."""
        try:
            if export:
                lsn, snapshot_id, self._holder = slots.create_slot_exporting_snapshot(self.kwargs, self.slot)
            else:
                lsn, snapshot_id = slots.create_slot(self._control, self.slot), None
        except slots.SlotExists:
            return None, 0
        log.info("connector %s: created replication slot %s at %s", self.name, self.slot, lsn_text(lsn))
        return snapshot_id, (lsn if snapshot_id else 0)

    def _start_stream(self, plan, mine, stream_from, floor: int, remade: bool) -> None:
        """The stream task's part of ``start``: the tables it sends, whether it streams this run, its bound."""
        c = self.cdc
        captured = self.captured
        if self.snapshotting:
            if captured.adopt_all:  # Debezium's offset (or an older one of ours): every table is streamed already
                captured = self.captured = parts.Captured({t: 0 for t in plan})
            for table in list(captured.boundaries):
                if table not in plan:  # left the include list, or dropped: read again should it come back
                    del captured.boundaries[table]
            for state in plan.values():
                if state.state == parts.DONE:
                    captured.boundaries[state.table] = state.boundary
        waiting = sorted(s.table for s in plan.values() if s.state in (parts.FRESH, parts.RESUME)
                         and mine is not None and s.table not in mine)
        if waiting:
            log.info("connector %s: not streaming this run: the snapshot of %s is not complete yet (%s); the slot "
                     "keeps the changes for the next run", self.name, ", ".join(waiting[:5]),
                     f"{len(waiting)} table(s)")
            self.metrics["stream_deferred"] = waiting
        self.streaming = c.snapshot_mode != "initial_only" and not waiting
        if stream_from is not None and stream_from.get("lsn_commit"):
            # the last run committed its offsets: the slot may not have been confirmed (a crash in between)
            self._confirm(int(stream_from["lsn_commit"]), why="the committed offset")
        action = str(c.get(cfg.HEARTBEAT_ACTION_QUERY) or "").strip()
        if self.heartbeats.enabled and action and self.streaming:
            self._control.execute(action)  # a change of the captured database's own, before the bound
        self.bound = slots.flush_lsn(self._control)
        self.metrics["bound_lsn"] = lsn_text(self.bound)
        self.resume = Resume.of(stream_from)
        self._stream_committed = stream_from
        if remade or (self.snapshotting and not self.streaming and floor > parts.floor_of(stream_from)):
            # the slot's position as the stream's floor in the offsets, so every task of the next run judges
            # boundaries as this one did (tables read before a slot made anew are read again)
            # -- never past a committed position inside a transaction (floor_position; none when remade)
            position = self.slot_start_lsn if remade else floor
            self._pending_marker = [done_marker(f"{c.topic_prefix}", self.partition,
                                                floor_position(position, stream_from, captured.to_offset(position)))]

    def _connect(self) -> psycopg.Connection:
        """A new autocommit session with the value formats :mod:`.values` reads, the server's idle-session
        timeouts off and, as Debezium does on every connection it opens, ``database.initial.statements``."""
        conn = psycopg.connect(**self.kwargs, autocommit=True, connect_timeout=30)
        snap.prepare_session(conn)
        # a session waits idle while the framework works (the slot's control session during a long read, the
        # read between fetches): a server's idle timeouts, meant for forgotten sessions, must not end it
        conn.execute("SET idle_in_transaction_session_timeout = 0")
        if conn.info.server_version >= 140000:
            conn.execute("SET idle_session_timeout = 0")
        for statement in self.cdc.initial_statements():
            conn.execute(statement)
        return conn

    def _ensure_publication(self) -> None:
        mode = str(self.cdc[cfg.PUBLICATION_AUTOCREATE_MODE])
        tables = []
        if mode == "filtered":
            tables = [(s, t) for s, t in slots.publishable_tables(self._control) if self.cdc.table_included(s, t)]
        slots.ensure_publication(self._control, self.publication, mode, tables)

    def _describe(self, relation: Relation) -> Relation:
        """A Relation message completed from the catalog (:func:`.snapshot.complete_relation`)."""
        relation = snap.complete_relation(self._control, relation)
        self.builder.add_types(snap.load_types(self._control, {col.type_oid for col in relation.columns}))
        return relation

    # ------------------------------------------------------------------ poll

    def poll(self) -> list | None:
        records = self._poll()
        if records:
            self._sent_since_commit = True
        return records

    def _poll(self) -> list | None:
        if self._done:
            return None
        if self._snapshot is not None:
            records = self._snapshot.take()
            if records is not None:
                return records
            self.metrics["snapshot"] = {"tables": len(self._snapshot.done), "rows": self._snapshot.rows}
            for table, boundary in self._snapshot.done.items():  # read to their end: the stream sends them now
                self.captured.boundaries[table] = boundary
            self._snapshot.close()
            self._snapshot = None
        if self._pending_marker:
            markers, self._pending_marker = self._pending_marker, []
            return markers
        if not self.streaming:
            self._done = True
            return None
        if self._read is None:
            self._skip_to_first_boundary()
            self._stream_conn = self._connect()
            messages = slots.read_changes(self._stream_conn, self.slot, self.publication, self.bound)
            decoder = PgOutputDecoder(self._describe, self.decoder.encoding)  # a new session re-sends relations
            extra = {parts.TABLES_KEY: self.captured.to_offset(self.resume.lsn_commit)} if self.snapshotting else None
            self._read = StreamRead(messages, decoder, self.resume, self.bound, self._captured, extra)
        read = self._read
        if not read.exhausted:
            before = self._stream_offset()  # the position before this poll's first change
            try:
                items = read.take(self.batch_size)
            except psycopg.OperationalError as e:
                raise self._lost(e) from e
            except psycopg.Error as e:  # e.g. a session timeout, which ends the session (not an OperationalError)
                if self._stream_conn is None or not self._stream_conn.broken:
                    raise
                raise self._lost(e) from e
            if self.batcher is not None:
                records = self.batcher.items(items, self._records, before)
            else:
                records = []
                for item in items:
                    records += self._records(item, before)
                    before = item.offset
            if items:
                last = items[-1].offset  # the read may restart after it (see _lost)
                self.resume = Resume.of(last)
                self._stream_committed = last
            self._confirmable_polled = max(self._confirmable_polled, read.confirmable)
            if self.heartbeats.due() and not read.exhausted and (read.confirmable or read.in_transaction):
                records.append(self._heartbeat())  # heartbeat.interval.ms passed during a long read
            if records or not read.exhausted:
                return records
        self._confirmable_polled = max(self._confirmable_polled, read.confirmable)
        if not self._ended:
            self._ended = True
            if self.heartbeats.enabled:
                return [self._heartbeat()]
            if self.snapshotting and set(self.captured.boundaries) != set(_tables_of(self._stream_committed) or ()):
                # the stream's tables changed and no change carried them: commit them alone
                return [done_marker(f"{self.cdc.topic_prefix}", self.partition, self._stream_offset())]
        self._done = True
        return None

    def _skip_to_first_boundary(self) -> None:
        """Before the earliest boundary of the stream's tables nothing is wanted (when every captured
        table is snapshotted): confirm the slot there, so a slot made before the publication (by an
        operator) is never decoded from a point where the publication did not exist yet."""
        boundaries = self.captured.boundaries.values()
        if not self.snapshotting or self.cdc.get(cfg.SNAPSHOT_INCLUDE) or not boundaries:
            return
        first = min(boundaries)
        if first > max(self.resume.lsn_commit, self._confirmed, self.slot_start_lsn):
            self._confirm(first, why="the earliest table boundary: no change before it is wanted")

    def _lost(self, error: psycopg.OperationalError) -> RetriableException:
        """The read's connection was lost: drop the read, so that a retried :meth:`poll` reads the slot
        again from just after the last change handed out (``self.resume``) -- up to the same bound,
        nothing repeated, nothing skipped: :meth:`poll`'s retry contract."""
        read, self._read = self._read, None
        try:
            read.close()
        except Exception:  # noqa: BLE001 -- the connection is gone
            pass
        try:
            self._stream_conn.close()
        except Exception:  # noqa: BLE001
            pass
        self._stream_conn = None
        return RetriableException(f"reading replication slot {self.slot!r} failed: {str(error).strip()}; "
                                  f"the read resumes after the last change handed out")

    def _records(self, item: Item, before: dict) -> list[SourceRecord]:
        """The records of one change. Only the last carries the change's offset, the others ``before``
        (the position before the change): the framework marks each record's offset, so a change
        whose later record failed (a key-changing update's create after its delete, a truncate's
        next table, a tombstone) is sent again whole by the next run, not skipped."""
        message = item.message
        info = SourceInfo(commit_ts_us=message.commit_ts_us, tx_id=message.xid, lsn=message.lsn,
                          last_commit_lsn=item.last_commit_lsn)
        if isinstance(message, Truncate):
            events = self.builder.truncate_events(message, info)
            for relation in message.relations if events else ():
                self._count(relation, "t", 1)
        else:
            events = self.builder.events(message, info)
            if events:  # none when skipped.operations names the operation
                self._count(message.relation, message.op, 1)
        last = len(events) - 1
        return [self._record(e, self.partition, item.offset if i == last else before) for i, e in enumerate(events)]

    def _record(self, event, partition: dict, offset: dict) -> SourceRecord:
        return SourceRecord(topic=event.topic, key_schema=event.key_schema, key=event.key,
                            value_schema=event.value_schema, value=event.value, headers=event.headers,
                            source_partition=partition, source_offset=offset)

    def _captured(self, relation: Relation, commit_lsn: int) -> bool:
        """Whether the stream sends this change: a captured table's, and for a table the snapshot reads,
        from its boundary on (:meth:`.partitions.Captured.wants`)."""
        name = (relation.schema, relation.table)
        kind = self._filters.get(name)
        if kind is None:  # 0: not captured; 1: captured, never snapshotted; 2: from its boundary on
            kind = 0 if not self.cdc.table_included(*name) else \
                2 if self.snapshotting and self.cdc.snapshot_included(*name) else 1
            if kind == 2 and snap.is_partitioned(self._control, relation.oid):
                kind = 3  # 3: a partitioned table: it has no boundary (its partitions are read), nothing sends it
            self._filters[name] = kind
        if kind == 3:
            raise self._via_root(f"{name[0]}.{name[1]}")
        return kind == 1 or (kind == 2 and self.captured.wants(f"{name[0]}.{name[1]}", commit_lsn))

    def _via_root(self, table: str) -> ConnectException:
        """The error of a change that came under partitioned table ``table``'s own name: written while the
        publication published via the partition root. Skipping it would confirm the slot past a lost change."""
        return ConnectException(
            f"a change of partitioned table {table!r} came under the table's own name: publication "
            f"{self.publication!r} published via the partition root (publish_via_partition_root = true) when it "
            f"was written, and this connector sends partitions' changes under the partitions' names only. The slot "
            f"cannot be read past it without losing it; with the publication altered (ALTER PUBLICATION "
            f"{self.publication} SET (publish_via_partition_root = false)), drop slot {self.slot!r} and snapshot "
            f"again (snapshot.mode=when_needed)")

    def _stream_offset(self) -> dict:
        """The server offset of everything handed out so far: inside a transaction (a poll ended at
        ``max.batch.size`` before its last change) the offset of the last change handed out, as
        Debezium's heartbeat carries the current offset -- the end of the transaction before would make
        the next run send the transaction's first changes again; else the position the slot may be
        confirmed to (:func:`.heartbeat.stream_position`)."""
        read = self._read
        if read is not None and read.in_transaction:
            return dict(self._stream_committed)
        position = read.confirmable if read is not None else self.resume.lsn_commit
        tables = self.captured.to_offset(position) if self.snapshotting else None
        return stream_position(position, read.last_tx if read is not None else None, self._stream_committed, tables)

    def _heartbeat(self) -> SourceRecord:
        """Debezium's heartbeat: it commits the stream's current offset (:meth:`_stream_offset`), so the
        slot confirms while the captured tables are quiet; never behind what was sent, never past what was not."""
        self.heartbeats.reset()
        prefix = str(self.cdc.get(cfg.HEARTBEAT_TOPIC_PREFIX) or "__debezium-heartbeat")
        return heartbeat_record(self.cdc.topic_prefix, prefix, self.partition, self._stream_offset())

    def _count(self, relation: Relation, op: str, n: int) -> None:
        tables = self.metrics.setdefault("tables", {})
        counts = tables.setdefault(f"{relation.schema}.{relation.table}", {})
        name = _COUNT_NAMES[op]
        counts[name] = counts.get(name, 0) + n

    # ------------------------------------------------------------------ commit

    def commit(self) -> None:
        """The framework committed the offsets of every record polled so far (it does not call this
        after a failure, when only what Kafka acknowledged is committed): confirm the slot as far as
        they reach. After a failure the next run confirms the slot from its committed offset."""
        self._sent_since_commit = False
        if self._confirmable_polled > self._confirmed:
            self._confirm(self._confirmable_polled, why="committed records")
        self._final_commit = self._done
        if self._done and self.streams:  # the run's last commit: let PostgreSQL drop what it can now
            try:
                slots.settle(self._control, self.slot)
            except psycopg.Error as e:  # the offsets and the slot's position are committed already
                log.warning("connector %s: slot %s not settled after the run: %s", self.name, self.slot, e)

    def _confirm(self, lsn: int, *, why: str) -> None:
        new = slots.confirm(self._control, self.slot, lsn)
        self._confirmed = max(self._confirmed, lsn)
        if new is not None:
            log.info("connector %s: slot %s confirmed up to %s (%s)", self.name, self.slot, lsn_text(new), why)

    def stop(self) -> None:
        if self._read is not None:
            try:
                self._read.close()
            except Exception:  # noqa: BLE001 -- closing after a failure
                pass
        if self._done and self.streams and not self._sent_since_commit and not self._final_commit \
                and self._control is not None and not self._control.closed:
            # the read ended with polls that returned nothing after the last commit(): with
            # transactions the framework skips the empty commit (and so commit()), yet every record
            # polled is committed: confirm (and settle) as far as the read went, as commit() would
            try:
                self.commit()
            except psycopg.Error as e:
                log.warning("connector %s: slot %s not confirmed after the run: %s", self.name, self.slot, e)
        if self._control is not None and not self._control.closed and "wal_before" in self.metrics:
            try:
                info = slots.slot_info(self._control, self.slot)
                if info is not None:
                    self.metrics["wal_after"] = info.describe()
                    self.metrics["lsn_before"] = self.metrics["wal_before"]["confirmed_flush_lsn"]
                    self.metrics["lsn_after"] = self.metrics["wal_after"]["confirmed_flush_lsn"]
            except psycopg.Error as e:
                log.warning("connector %s: slot %s not described after the run: %s", self.name, self.slot, e)
        if self.drop_on_stop and self.streams and self._final_commit and self._control is not None \
                and not self._control.closed:
            try:  # only after a run that read everything it was to read; a failed run keeps the slot
                slots.drop_slot(self._control, self.slot)
                log.warning("connector %s: slot %s dropped (slot.drop.on.stop=true)", self.name, self.slot)
            except psycopg.Error as e:
                log.warning("connector %s: slot %s not dropped: %s", self.name, self.slot, e)
        if self._snapshot is not None:  # a run that stopped inside the snapshot: end its transaction
            try:
                self._snapshot.close()
            except Exception:  # noqa: BLE001 -- the connection may be gone already
                pass
            self._snapshot = None
        for conn in (self._stream_conn, self._holder, self._control):
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
        self._stream_conn = self._holder = self._control = None


def _canonical(partition: dict) -> str:
    from airflow_copycat.connect.assignment import canonical

    return canonical(partition)


def _tables_of(offset) -> dict | None:
    return None if not offset else offset.get(parts.TABLES_KEY)
