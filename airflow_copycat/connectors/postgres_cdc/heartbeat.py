"""Debezium's heartbeats, and the stream's offset when no change carries it.

A heartbeat record (``heartbeat.interval.ms`` > 0) goes to ``<topic.heartbeat.prefix>.<topic.prefix>``
with key ``{"serverName": <prefix>}`` and value ``{"ts_ms": ...}``, as Debezium's, and carries the
server partition's current offset, as Debezium's: between transactions the position the stream
may be confirmed to (committing it lets the task confirm the slot while the captured tables are
quiet), inside a transaction (a poll that ended at ``max.batch.size``) the offset of the last change
handed out -- never behind what was sent (the next run would send part of the transaction again),
never past what was not. The stream task sends one whenever ``heartbeat.interval.ms`` passed since
the last one during a long read, and one at the end of every read (a bounded run is usually
shorter than the interval). Without heartbeats the same offset is committed by an empty batch
(:func:`~.snapshot_read.done_marker`) when it says more than the last record did (a newer
``lsn_commit``, the stream's tables).
"""

from __future__ import annotations

import time
from typing import Mapping

from airflow_copycat.connect.data import Schema, SchemaBuilder, Struct
from airflow_copycat.connect.records import SourceRecord

from .partitions import TABLES_KEY

HEARTBEAT_KEY_SCHEMA = (SchemaBuilder.struct().name("io.debezium.connector.common.ServerNameKey")
                        .field("serverName", Schema.STRING).build())
HEARTBEAT_VALUE_SCHEMA = (SchemaBuilder.struct().name("io.debezium.connector.common.Heartbeat")
                          .field("ts_ms", Schema.INT64).build())


def stream_position(position: int, last_tx: tuple | None, committed: Mapping | None, tables: dict | None) -> dict:
    """The server offset at ``position``, every transaction committed before it handed out (``lsn``,
    ``lsn_proc`` and ``lsn_commit`` all ``position``, as Debezium's offset after a commit):
    ``last_tx`` is ``(xid, commit µs)`` of the last complete transaction read (else the
    ``committed`` offset's), ``tables`` the stream's tables (:data:`~.partitions.TABLES_KEY`)."""
    committed = committed or {}
    offset = {"lsn": position, "lsn_proc": position, "lsn_commit": position,
              "txId": last_tx[0] if last_tx else committed.get("txId"),
              "ts_usec": last_tx[1] if last_tx else committed.get("ts_usec")}
    if tables is not None:
        offset[TABLES_KEY] = tables
    return offset


def floor_position(floor: int, committed: Mapping | None, tables: dict | None) -> dict:
    """The server offset a run that does not stream commits to record the slot's position ``floor`` as the
    stream's floor: the ``committed`` offset (owned by the last run that streamed) with ``lsn_commit``
    raised to ``floor`` -- its ``lsn``, ``txId`` and :data:`~.stream.LSN_INDEX_KEY` kept, for it may stand
    inside a transaction whose remaining changes were not sent (the slot, confirmed only to transaction ends
    or to a bound, still holds that transaction whole) -- and ``tables`` as :data:`~.partitions.TABLES_KEY`.
    Without a committed offset (``None``): :func:`stream_position` at ``floor``."""
    if not committed:
        return stream_position(floor, None, None, tables)
    offset = dict(committed, lsn_commit=max(floor, int(committed.get("lsn_commit") or 0)))
    if tables is not None:
        offset[TABLES_KEY] = tables
    return offset


def heartbeat_record(topic_prefix: str, heartbeat_prefix: str, partition: dict, offset: dict) -> SourceRecord:
    """Debezium's heartbeat record for ``partition`` committing ``offset``."""
    now_ms = time.time_ns() // 1_000_000
    return SourceRecord(topic=f"{heartbeat_prefix}.{topic_prefix}", key_schema=HEARTBEAT_KEY_SCHEMA,
                        key=Struct(HEARTBEAT_KEY_SCHEMA).put("serverName", topic_prefix),
                        value_schema=HEARTBEAT_VALUE_SCHEMA,
                        value=Struct(HEARTBEAT_VALUE_SCHEMA).put("ts_ms", now_ms),
                        source_partition=partition, source_offset=offset)


class HeartbeatClock:
    """When the next heartbeat is due: every ``interval_ms`` (0: never) from :meth:`reset`."""

    def __init__(self, interval_ms: int):
        self.interval_s = max(0, interval_ms) / 1000.0
        self.last = time.monotonic()
        self.sent = 0

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def due(self) -> bool:
        return self.enabled and time.monotonic() - self.last >= self.interval_s

    def reset(self) -> None:
        self.last = time.monotonic()
        self.sent += 1
