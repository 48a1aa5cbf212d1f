"""The PostgreSQL change-data-capture source (Debezium's ``io.debezium.connector.postgresql.PostgresConnector``).

One source partition, ``{"server": <topic.prefix>}``, as Debezium's, so the offset topic key is
``["<connector name>", {"server": "<topic.prefix>"}]`` and an offset Debezium committed is read
as is (given the same slot, a connector moved from Debezium continues without a new snapshot).
One task does the work: a slot is read by one session at a time.

A **run** of the task:

1. ``start`` -- reads the committed offset; creates the slot when missing (exporting its
   snapshot when a snapshot is due), or fails with :class:`~.slot.SlotMissing` when the offset
   needs a slot that is gone (``snapshot.mode=when_needed`` snapshots again instead); confirms
   the slot up to the committed offset's ``lsn_commit`` (which repairs a run that died between
   committing its offsets and confirming the slot); makes the publication; captures the run's
   **bound**, ``pg_current_wal_flush_lsn()``;
2. ``poll`` -- the snapshot first when one is due (``op: r`` events, resumable per table, see
   :mod:`.snapshot`), then the slot's changes up to the bound (:mod:`.stream`), ``max.batch.size``
   changes per poll, and with ``heartbeat.interval.ms`` a heartbeat record on
   ``<topic.heartbeat.prefix>.<topic.prefix>`` carrying the bound; ``None`` once caught up. A
   connection lost while reading raises :class:`~airflow_copycat.connect.errors.RetriableException`:
   within ``errors.retry.timeout`` the framework polls again and the slot is read again from just
   after the last change handed out, up to the same bound;
3. ``commit`` -- the framework committed the offsets of every record polled so far: confirm the
   slot up to the end of the last transaction handed out (to the bound once caught up), so the
   slot retains only what this run left unread.

The task reports the slot in :attr:`PostgresCdcSourceTask.metrics`: the slot as the run found
and left it (``wal_before``/``wal_after``: ``retained_bytes`` kept on disk from ``restart_lsn``,
``unconfirmed_bytes`` after ``confirmed_flush_lsn``), the run's bound, and per table the events
it sent (``read``, ``inserted``, ``updated``, ``deleted``, ``truncated``). PostgreSQL moves
``restart_lsn`` only past a running-transactions record it logged (every checkpoint, and every
15 s on a server that writes), so ``retained_bytes`` may lag the confirmation by that much.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from ...extras import require

from airflow_copycat.connect.connector import SourceConnector
from airflow_copycat.connect.errors import ConnectException, RetriableException
from airflow_copycat.connect.records import SourceRecord
from airflow_copycat.connect.data import Schema, SchemaBuilder, Struct
from airflow_copycat.connect.task import SourceTask

from . import config as cfg
from . import slot as slots
from . import snapshot as snap
from .envelope import EventBuilder, SourceInfo
from .model import Relation, Truncate, lsn_text
from .pgoutput import PgOutputDecoder
from .snapshot_read import SnapshotRead
from .stream import Item, Resume, StreamRead

psycopg = require("psycopg", "cdc", "PostgresCdcSource")

log = logging.getLogger("airflow_copycat.postgres_cdc")

HEARTBEAT_KEY_SCHEMA = (SchemaBuilder.struct().name("io.debezium.connector.common.ServerNameKey")
                        .field("serverName", Schema.STRING).build())
HEARTBEAT_VALUE_SCHEMA = (SchemaBuilder.struct().name("io.debezium.connector.common.Heartbeat")
                          .field("ts_ms", Schema.INT64).build())


_COUNT_NAMES = {"r": "read", "c": "inserted", "u": "updated", "d": "deleted", "t": "truncated"}
"""Per-table counts in :attr:`PostgresCdcSourceTask.metrics` (``tables``), named as the JDBC sink names its own."""


def source_partition(topic_prefix: str) -> dict:
    """Debezium's PostgreSQL source partition."""
    return {"server": topic_prefix}


def snapshot_running(offset: dict | None) -> bool:
    """Whether ``offset`` was committed in the middle of a snapshot (Debezium's rule)."""
    return bool(offset and offset.get("snapshot") and not offset.get("last_snapshot_record"))


class PostgresCdcSourceConnector(SourceConnector):
    """Plans the change-data-capture source: one task, one partition (see the module docstring)."""

    config_def = cfg.CONFIG_DEF

    def task_class(self) -> type:
        return PostgresCdcSourceTask

    def validate(self, config: dict[str, Any]) -> list:
        return cfg.validate(config)

    def exactly_once_support(self, config: dict[str, Any]) -> bool:
        """True: a task started from a committed offset re-reads the slot from at most that offset's
        transaction and skips what the offset covers. (A snapshot resumed after a crash reads its
        remaining rows under a newer snapshot; consumers still converge on the table's state.)"""
        return True

    def start(self, config: dict[str, Any]) -> None:
        super().start(config)
        self.cdc = cfg.CdcConfig.parse(config)

    def partitions(self) -> list[dict]:
        return [source_partition(self.cdc.topic_prefix)]

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """One task, whatever ``tasks.max`` says: a replication slot has one reader."""
        return super().task_configs(1)


class PostgresCdcSourceTask(SourceTask):
    """Streams one slot (and snapshots) for one bounded run; see the module docstring."""

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
        self._heartbeat_due = False
        self.drop_on_stop = False
        self._captured_tables: dict[tuple[str, str], bool] = {}
        self._final_commit = False  # commit() ran after the last poll, outside failure handling

    # ------------------------------------------------------------------ start

    def start(self, config: dict[str, str]) -> None:
        self.cdc = c = cfg.CdcConfig.parse(config)
        self.name = str(config.get("name") or "")
        self.slot = str(c[cfg.SLOT_NAME])
        self.publication = str(c[cfg.PUBLICATION_NAME])
        self.partition = source_partition(c.topic_prefix)
        self.batch_size = int(c.get(cfg.MAX_BATCH_SIZE) or 2048)
        self.heartbeat_ms = int(c.get(cfg.HEARTBEAT_INTERVAL_MS) or 0)
        self.kwargs = c.connect_kwargs()
        self.committed = self.context.offset_storage_reader.offset(self.partition)
        self._control = self._connect()
        self.builder = EventBuilder(c)
        self.decoder = PgOutputDecoder(self._describe, _python_encoding(self._control))
        mode = c.snapshot_mode
        info = slots.slot_info(self._control, self.slot)
        if info is not None and info.database and info.database != c.database:
            raise ConnectException(f"replication slot {self.slot!r} belongs to database {info.database!r}, not "
                                   f"{c.database!r}: use another slot.name for this connector")
        if info is not None and info.plugin and info.plugin != slots.PLUGIN:
            raise ConnectException(f"replication slot {self.slot!r} decodes with plugin {info.plugin!r}, not "
                                   f"{slots.PLUGIN!r}: use another slot.name (or drop that slot if it is unused)")
        gone = info is None or info.wal_status == "lost"
        resumable = self.committed is not None and self.committed.get("lsn") is not None
        snapshot_id, snapshot_after = None, None
        self.drop_on_stop = bool(c.get(cfg.SLOT_DROP_ON_STOP))
        if gone and resumable and self.drop_on_stop and info is None:
            # Debezium's slot.drop.on.stop: the last run dropped it on purpose; a new slot goes on from
            # now, without the changes made between the runs (development and tests only)
            log.warning("connector %s: slot %s was dropped at the end of the last run (slot.drop.on.stop=true): "
                        "a new slot starts now; changes made since that run are not captured", self.name, self.slot)
            resumable = False
            self.committed = dict(self.committed, lsn_commit=0, txId=None)
        if gone and resumable:
            if mode != "when_needed":
                raise self._slot_missing(info)
            log.warning("connector %s: slot %s is %s; snapshot.mode=when_needed: snapshotting again", self.name,
                        self.slot, "gone" if info is None else "invalidated")
            if info is not None:
                slots.drop_slot(self._control, self.slot)
            self.committed = None
            info = None
        self._ensure_publication()
        want_snapshot = mode in ("initial", "initial_only", "when_needed") and (
            self.committed is None or snapshot_running(self.committed))
        if info is not None and want_snapshot and self.committed is None:
            # A slot no run ever committed an offset for (a first run that died before its first commit, or
            # one made by hand): its position has no snapshot to meet, and reading the tables under a newer
            # one would send the changes in between twice. Nothing was confirmed from it: make it anew,
            # exporting the snapshot the stream starts from.
            log.info("connector %s: slot %s has no committed offset yet: making it anew for a snapshot that "
                     "meets its start", self.name, self.slot)
            slots.drop_slot(self._control, self.slot)
            info = None
        if info is None:
            if want_snapshot:
                lsn, snapshot_id, self._holder = slots.create_slot_exporting_snapshot(self.kwargs, self.slot)
            else:
                lsn = slots.create_slot(self._control, self.slot)
            log.info("connector %s: created replication slot %s at %s", self.name, self.slot, lsn_text(lsn))
            info = slots.slot_info(self._control, self.slot)
        self.slot_start_lsn = info.confirmed_flush_lsn or 0
        self.metrics.update(slot=self.slot, wal_before=info.describe(), tables={})
        if snapshot_running(self.committed):
            snapshot_after = self.committed
        elif self.committed and self.committed.get("lsn_commit"):
            # the last run committed its offsets: the slot may not have been confirmed (a crash in between)
            self._confirm(int(self.committed["lsn_commit"]), why="the committed offset")
        action = str(c.get(cfg.HEARTBEAT_ACTION_QUERY) or "").strip()
        if self.heartbeat_ms > 0 and action:
            self._control.execute(action)  # a change of the captured database's own, before the bound
        self.bound = slots.flush_lsn(self._control)
        self.metrics["bound_lsn"] = lsn_text(self.bound)
        if want_snapshot:
            self._start_snapshot(snapshot_id, snapshot_after)
        self.streaming = mode != "initial_only"
        self.resume = Resume() if want_snapshot else Resume.of(self.committed)

    def _connect(self) -> psycopg.Connection:
        """A new autocommit session with the value formats :mod:`.values` reads and, as Debezium does on
        every connection it opens, ``database.initial.statements``."""
        conn = psycopg.connect(**self.kwargs, autocommit=True, connect_timeout=30)
        snap.prepare_session(conn)
        for statement in self.cdc.initial_statements():
            conn.execute(statement)
        return conn

    def _slot_missing(self, info) -> ConnectException:
        where = f"LSN {lsn_text(int(self.committed['lsn']))}"
        state = "does not exist" if info is None else "was invalidated (wal_status=lost: max_slot_wal_keep_size)"
        return slots.SlotMissing(
            f"replication slot {self.slot!r} in database {self.cdc.database!r} {state}, but connector "
            f"{self.name!r} has committed offsets ({where}) that continue from it: the changes since then can no "
            f"longer be read. Set snapshot.mode=when_needed to snapshot every captured table again and stream "
            f"from a new slot, or delete the connector's offsets to start over")

    def _ensure_publication(self) -> None:
        mode = str(self.cdc[cfg.PUBLICATION_AUTOCREATE_MODE])
        tables = []
        if mode == "filtered":
            rows = self._control.execute(
                "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition").fetchall()
            tables = [(s, t) for s, t in rows if self.cdc.table_included(s, t)]
        slots.ensure_publication(self._control, self.publication, mode, tables)

    def _describe(self, relation: Relation) -> Relation:
        """A Relation message completed from the catalog (type names, nullability, defaults, Debezium's
        key: the primary key); columns the catalog no longer has keep what pgoutput said."""
        try:
            known = snap.relation_from_catalog(self._control, relation.schema, relation.table)
        except LookupError:
            known = None
        by_name = {col.name: col for col in known.columns} if known else {}
        columns = []
        for col in relation.columns:
            k = by_name.get(col.name)
            if k is not None and k.type_oid == col.type_oid:
                columns.append(replace(k, type_modifier=col.type_modifier))
            else:
                name = self._control.execute("SELECT format_type(%s, NULL)", (col.type_oid,)).fetchone()[0]
                columns.append(replace(col, type_name=name, key=col.key and relation.replica_identity != "f"))
        self.builder.add_types(snap.load_types(self._control, {col.type_oid for col in columns}))
        return replace(relation, columns=tuple(columns))

    # ------------------------------------------------------------------ snapshot

    def _start_snapshot(self, snapshot_id: str | None, progress: dict | None) -> None:
        self._snapshot = SnapshotRead(self._connect(), snapshot_id, self.cdc, self.builder, self.slot_start_lsn,
                                      progress, self._record, lambda rel, n: self._count(rel, "r", n))
        if self._holder is not None:  # the snapshot is imported: the exporting session may go
            self._holder.close()
            self._holder = None

    # ------------------------------------------------------------------ poll

    def poll(self) -> list[SourceRecord] | None:
        if self._done:
            return None
        if self._snapshot is not None:
            records = self._snapshot.take()
            if records is not None:
                return records
            records = self._snapshot.finish()
            self.metrics["snapshot"] = {"tables": len(self._snapshot.done), "rows": self._snapshot.rows}
            self._snapshot = None
            if records or not self.streaming:
                return records
        if not self.streaming:
            self._done = True
            return None
        if self._read is None:
            self._stream_conn = self._connect()
            messages = slots.read_changes(self._stream_conn, self.slot, self.publication, self.bound)
            decoder = PgOutputDecoder(self._describe, self.decoder.encoding)  # a new session re-sends relations
            self._read = StreamRead(messages, decoder, self.resume, self.bound, self._captured)
        read = self._read
        if not read.exhausted:
            try:
                items = read.take(self.batch_size)
            except psycopg.OperationalError as e:
                raise self._lost(e) from e
            records = [r for item in items for r in self._records(item)]
            if items:
                last = items[-1].offset  # the read may restart after it (see _lost)
                self.resume = Resume(last["lsn_commit"], last["lsn"], last["txId"])
            self._confirmable_polled = max(self._confirmable_polled, read.confirmable)
            if records or not read.exhausted:
                return records
        self._confirmable_polled = max(self._confirmable_polled, read.confirmable)
        if self.heartbeat_ms > 0 and not self._heartbeat_due:
            self._heartbeat_due = True
            return [self._heartbeat()]
        self._done = True
        return None

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

    def _captured(self, relation: Relation) -> bool:
        name = (relation.schema, relation.table)
        known = self._captured_tables.get(name)
        if known is None:
            known = self._captured_tables[name] = self.cdc.table_included(*name)
        return known

    def _records(self, item: Item) -> list[SourceRecord]:
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
        return [self._record(e, item.offset) for e in events]

    def _record(self, event, offset: dict) -> SourceRecord:
        return SourceRecord(topic=event.topic, key_schema=event.key_schema, key=event.key,
                            value_schema=event.value_schema, value=event.value, headers=event.headers,
                            source_partition=self.partition, source_offset=offset)

    def _heartbeat(self) -> SourceRecord:
        """Debezium's heartbeat: it commits an offset at the bound, so the slot confirms while tables are quiet."""
        prefix = str(self.cdc.get(cfg.HEARTBEAT_TOPIC_PREFIX) or "__debezium-heartbeat")
        now_ms = time.time_ns() // 1_000_000
        tx, position = self._read.last_tx, self._read.confirmable
        offset = {"lsn": position, "lsn_proc": position, "lsn_commit": position,
                  "txId": tx[0] if tx else (self.committed or {}).get("txId"),
                  "ts_usec": tx[1] if tx else (self.committed or {}).get("ts_usec")}
        return SourceRecord(topic=f"{prefix}.{self.cdc.topic_prefix}", key_schema=HEARTBEAT_KEY_SCHEMA,
                            key=Struct(HEARTBEAT_KEY_SCHEMA).put("serverName", self.cdc.topic_prefix),
                            value_schema=HEARTBEAT_VALUE_SCHEMA,
                            value=Struct(HEARTBEAT_VALUE_SCHEMA).put("ts_ms", now_ms),
                            source_partition=self.partition, source_offset=offset)

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
        if self._confirmable_polled > self._confirmed:
            self._confirm(self._confirmable_polled, why="committed records")
        self._final_commit = self._done

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
        if self._control is not None and not self._control.closed and "wal_before" in self.metrics:
            try:
                info = slots.slot_info(self._control, self.slot)
                if info is not None:
                    self.metrics["wal_after"] = info.describe()
                    self.metrics["lsn_before"] = self.metrics["wal_before"]["confirmed_flush_lsn"]
                    self.metrics["lsn_after"] = self.metrics["wal_after"]["confirmed_flush_lsn"]
            except psycopg.Error as e:
                log.warning("connector %s: slot %s not described after the run: %s", self.name, self.slot, e)
        if self.drop_on_stop and self._final_commit and self._control is not None and not self._control.closed:
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


def _python_encoding(conn: psycopg.Connection) -> str:
    """The database's encoding as Python names it (pgoutput sends text in the server's encoding)."""
    name = conn.execute("SHOW server_encoding").fetchone()[0]
    if name.upper() in ("UTF8", "UNICODE"):
        return "utf-8"
    try:
        from psycopg._encodings import pg2pyenc  # psycopg's own table of PostgreSQL -> Python names

        return pg2pyenc(name.encode())
    except Exception:  # noqa: BLE001 -- SQL_ASCII and the like: bytes as they come
        return "latin-1"
