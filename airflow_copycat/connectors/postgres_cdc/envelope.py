"""Debezium's change events for PostgreSQL: keys, ``Envelope`` values, tombstones and topics.

Given a :class:`~.model.Relation` (the table as of one point of the WAL) and a
:class:`~.model.Change`, :class:`EventBuilder` gives what Debezium's PostgreSQL connector would
send, so consumers written for Debezium (its JSON through the JsonConverter with schemas, its Avro)
read it unchanged:

* topic ``<topic.prefix>.<schema>.<table>``;
* key: struct ``<prefix>.<schema>.<table>.Key`` of the replica identity's key columns (the primary
  key; every column with ``REPLICA IDENTITY FULL`` and no primary key), or no key (``None`` schema
  and value) when the table has none;
* value: struct ``<prefix>.<schema>.<table>.Envelope`` (version 2) with ``before`` and ``after``
  (optional ``<prefix>.<schema>.<table>.Value`` structs of the columns ``column.include/exclude.list``
  keep), ``source`` (``io.debezium.connector.postgresql.Source``), ``transaction`` (optional, always
  null: ``provide.transaction.metadata`` is not supported), ``op`` (``c`` ``u`` ``d`` ``r`` ``t``),
  ``ts_ms``/``ts_us``/``ts_ns`` (when the event was made);
* a delete is followed by a tombstone (same key, null value) when ``tombstones.on.delete``; an
  update that changes the key becomes a delete (+ tombstone) of the old key with header
  ``__debezium.newkey`` and a create of the new key with header ``__debezium.oldkey``;
* a ``TRUNCATE`` gives one ``op: t`` event per table, without key, before or after;
* operations in ``skipped.operations`` (Debezium's default: ``t``) give no events;
* an unchanged TOASTed value (:data:`~.model.UNCHANGED_TOAST`) becomes
  ``unavailable.value.placeholder``.

Schemas are built once per relation definition: a new :class:`~.model.Relation` after
``ALTER TABLE`` (a column added, dropped or retyped) gives new schemas for the events after it.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from airflow_copycat.connect import Schema, SchemaBuilder
from airflow_copycat.connect.data import Struct

from . import config as cfg
from .model import Change, Relation, Truncate
from .pgtypes import PgType
from .values import ENUM, ValueMapper

SOURCE_SCHEMA_NAME = "io.debezium.connector.postgresql.Source"
CONNECTOR = "postgresql"
ENVELOPE_VERSION = 2
SNAPSHOT_VALUES = ("true", "first", "first_in_data_collection", "last_in_data_collection", "last", "false",
                   "incremental")
NEW_KEY_HEADER = "__debezium.newkey"
OLD_KEY_HEADER = "__debezium.oldkey"


def _version() -> str:
    from airflow_copycat import __version__

    return f"copycat-{__version__}"


SNAPSHOT_SCHEMA = (SchemaBuilder.string().name(ENUM).version(1).parameter("allowed", ",".join(SNAPSHOT_VALUES))
                   .default_value("false").optional().build())

SOURCE_SCHEMA = (
    SchemaBuilder.struct().name(SOURCE_SCHEMA_NAME).version(1)
    .field("version", Schema.STRING)
    .field("connector", Schema.STRING)
    .field("name", Schema.STRING)
    .field("ts_ms", Schema.INT64)
    .field("snapshot", SNAPSHOT_SCHEMA)
    .field("db", Schema.STRING)
    .field("sequence", Schema.OPTIONAL_STRING)
    .field("ts_us", Schema.OPTIONAL_INT64)
    .field("ts_ns", Schema.OPTIONAL_INT64)
    .field("schema", Schema.STRING)
    .field("table", Schema.STRING)
    .field("txId", Schema.OPTIONAL_INT64)
    .field("lsn", Schema.OPTIONAL_INT64)
    .field("xmin", Schema.OPTIONAL_INT64)
    .build()
)
"""Debezium's ``source`` block of PostgreSQL events."""

TRANSACTION_SCHEMA = (SchemaBuilder.struct().optional().name("event.block").version(1)
                      .field("id", Schema.STRING).field("total_order", Schema.INT64)
                      .field("data_collection_order", Schema.INT64).build())


@dataclass(frozen=True)
class SourceInfo:
    """Where an event comes from, for its ``source`` block.

    ``commit_ts_us`` is the transaction's commit time (µs since the epoch; the snapshot's start for
    snapshot reads), ``tx_id`` its transaction id, ``lsn`` the change's WAL position (the slot's
    consistent point for snapshot reads), ``last_commit_lsn`` the commit LSN of the last complete
    transaction before it (with ``lsn`` it makes Debezium's ``sequence``,
    ``["<last_commit_lsn>","<lsn>"]``), ``snapshot`` one of :data:`SNAPSHOT_VALUES` (``false`` when
    streaming; ``first``/``true``/``last`` or ``*_in_data_collection`` for snapshot reads)."""

    commit_ts_us: int = 0
    tx_id: int | None = None
    lsn: int | None = None
    last_commit_lsn: int | None = None
    snapshot: str = "false"
    xmin: int | None = None


@dataclass(frozen=True)
class Event:
    """One record to produce: ``key``/``value`` (``None`` value = tombstone) with their schemas and
    ``headers`` (``(name, bytes)`` pairs), for :class:`~airflow_copycat.connect.records.SourceRecord`."""

    topic: str
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    headers: tuple = field(default=())
    op: str = ""


_AVRO_INVALID = re.compile(r"[^A-Za-z0-9_]")


def _avro_name(name: str) -> str:
    """Debezium's avro schema name adjustment: invalid characters (dots kept) become ``_``; a leading digit gets one."""
    parts = []
    for part in name.split("."):
        part = _AVRO_INVALID.sub("_", part)
        parts.append("_" + part if part[:1].isdigit() else part)
    return ".".join(parts)


def _avro_field(name: str) -> str:
    name = _AVRO_INVALID.sub("_", name)
    return "_" + name if name[:1].isdigit() else name


@dataclass
class _TableSchemas:
    key_schema: Schema | None
    row_schema: Schema
    envelope: Schema
    key_positions: tuple[int, ...]
    key_converters: tuple[Callable, ...]
    value_positions: tuple[int, ...]
    value_converters: tuple[Callable, ...]
    topic: str
    key_mappings: tuple = ()  # the FieldMappings of the key's and the rows' columns
    value_mappings: tuple = ()


def sequence(lsn: int | None, last_commit_lsn: int | None) -> str | None:
    """The ``source.sequence`` of a change at ``lsn`` after the transaction committed at ``last_commit_lsn``
    (Debezium's ``["<last commit LSN>","<LSN>"]``); None without ``lsn`` (a snapshot row)."""
    if lsn is None:
        return None
    last = "null" if last_commit_lsn is None else f'"{int(last_commit_lsn)}"'
    return f'[{last},"{int(lsn)}"]'


class EventBuilder:
    """Builds Debezium change events from model changes, per one connector config.

    ``config`` is a :class:`~.config.CdcConfig`; ``types`` the catalog's non-built-in types by OID
    (:func:`.snapshot.load_types`; enums, domains, extension types); ``clock`` returns the time in
    ns for the events' ``ts_*`` (``time.time_ns`` by default). Not thread-safe: one per task.
    """

    def __init__(self, config, types: Mapping[int, PgType] | None = None, *,
                 clock: Callable[[], int] = time.time_ns, version: str | None = None):
        self.config = config
        self.prefix = config.topic_prefix
        self.database = config.database
        self.mapper = ValueMapper(config, types)
        self.clock = clock
        self.version = version or _version()
        self.tombstones = config.tombstones_on_delete
        self.skipped = config.skipped_operations
        self._schema_names = str(config.get(cfg.SCHEMA_NAME_ADJUSTMENT_MODE) or "none") != "none"
        self._field_names = str(config.get(cfg.FIELD_NAME_ADJUSTMENT_MODE) or "none") != "none"
        self._tables: dict[Relation, _TableSchemas] = {}
        self._last: tuple = (None, None)  # (relation, its schemas): events come in runs of one table
        self._last_source: tuple = (None, None, None)  # (relation, info, source struct): snapshot rows share one

    def add_types(self, types: Mapping[int, PgType]) -> None:
        """Make more catalog types known (a Relation arrived with a type not seen before); schemas of
        relations built before are kept."""
        self.mapper.types.update(types)

    # ---------------------------------------------------------------- schemas

    def topic(self, relation: Relation) -> str:
        """``<topic.prefix>.<schema>.<table>``."""
        return f"{self.prefix}.{relation.schema}.{relation.table}"

    def key_schema(self, relation: Relation) -> Schema | None:
        """The ``.Key`` struct of the relation's key columns; ``None`` when it has none."""
        return self._table(relation).key_schema

    def row_schema(self, relation: Relation) -> Schema:
        """The optional ``.Value`` struct of ``before``/``after``."""
        return self._table(relation).row_schema

    def value_schema(self, relation: Relation) -> Schema:
        """The ``.Envelope`` struct of event values."""
        return self._table(relation).envelope

    def table_schemas(self, relation: Relation) -> _TableSchemas:
        """The relation's schemas, topic, and key and value columns with their converters (built once
        per relation definition)."""
        return self._table(relation)

    def _name(self, name: str) -> str:
        return _avro_name(name) if self._schema_names else name

    def _field(self, name: str) -> str:
        return _avro_field(name) if self._field_names else name

    def _table(self, relation: Relation) -> _TableSchemas:
        last_relation, last_table = self._last
        if relation is last_relation:
            return last_table
        cached = self._tables.get(relation)
        if cached is not None:
            self._last = (relation, cached)
            return cached
        base = f"{self.prefix}.{relation.schema}.{relation.table}"
        key_b = SchemaBuilder.struct().name(self._name(base + ".Key"))
        row_b = SchemaBuilder.struct().name(self._name(base + ".Value"))
        key_pos, key_conv, val_pos, val_conv = [], [], [], []
        names = [c.name for c in relation.columns]
        # the key: message.key.columns' columns in the order of its entries, else the relation's key columns
        key_names = (self.config.message_key_columns(relation.schema, relation.table, names)
                     or [c.name for c in relation.columns if c.key])
        mappings = [self.mapper.field(column) for column in relation.columns]
        for name in key_names:
            i = names.index(name)
            key_b.field(self._field(name), mappings[i].schema)
            key_pos.append(i)
            key_conv.append(mappings[i].convert)
        for i, column in enumerate(relation.columns):
            if self.config.column_included(relation.schema, relation.table, column.name):
                row_b.field(self._field(column.name), mappings[i].schema)
                val_pos.append(i)
                val_conv.append(mappings[i].convert)
        row = row_b.optional().build()
        envelope = (SchemaBuilder.struct().name(self._name(base + ".Envelope")).version(ENVELOPE_VERSION)
                    .field("before", row).field("after", row).field("source", SOURCE_SCHEMA)
                    .field("transaction", TRANSACTION_SCHEMA).field("op", Schema.STRING)
                    .field("ts_ms", Schema.OPTIONAL_INT64).field("ts_us", Schema.OPTIONAL_INT64)
                    .field("ts_ns", Schema.OPTIONAL_INT64).build())
        table = _TableSchemas(key_b.build() if key_pos else None, row, envelope, tuple(key_pos), tuple(key_conv),
                              tuple(val_pos), tuple(val_conv), self.topic(relation),
                              tuple(mappings[i] for i in key_pos), tuple(mappings[i] for i in val_pos))
        if len(self._tables) > 10_000:  # relations are re-sent per session; keep memory bounded
            self._tables.clear()
        self._tables[relation] = table
        self._last = (relation, table)
        return table

    # ---------------------------------------------------------------- values

    def source(self, relation: Relation, info: SourceInfo) -> Struct:
        """The ``source`` block of an event of ``relation``."""
        last_relation, last_info, last_struct = self._last_source
        if relation is last_relation and info is last_info:
            return last_struct
        struct = Struct._trusted(SOURCE_SCHEMA, self.source_values(
            relation, info.commit_ts_us, info.tx_id, info.lsn, info.last_commit_lsn, info.snapshot, info.xmin))
        self._last_source = (relation, info, struct)
        return struct

    def source_values(self, relation: Relation, commit_ts_us: int, tx_id: int | None, lsn: int | None,
                      last_commit_lsn: int | None, snapshot: str = "false", xmin: int | None = None) -> list:
        """The values of :meth:`source`'s struct (given a :class:`SourceInfo`'s fields), in
        :data:`SOURCE_SCHEMA`'s field order."""
        us = commit_ts_us
        return [self.version, CONNECTOR, self.prefix, us // 1000, snapshot, self.database, sequence(lsn, last_commit_lsn),
                us, us * 1000, relation.schema, relation.table, tx_id, lsn, xmin]

    def key(self, relation: Relation, row: tuple | None) -> Struct | None:
        """The key struct of ``row`` (a value tuple in ``relation.columns`` order); None without a key."""
        t = self._table(relation)
        if t.key_schema is None or row is None:
            return None
        return Struct._trusted(t.key_schema, [conv(row[i]) for i, conv in zip(t.key_positions, t.key_converters)])

    def row(self, relation: Relation, row: tuple | None) -> Struct | None:
        """The ``.Value`` struct of ``row`` (None stays None); columns the WAL did not carry (None)
        are null."""
        if row is None:
            return None
        t = self._table(relation)
        return Struct._trusted(t.row_schema, [conv(row[i]) for i, conv in zip(t.value_positions, t.value_converters)])

    def _envelope(self, relation: Relation, op: str, before, after, info: SourceInfo) -> Struct:
        t = self._table(relation)
        ns = self.clock()
        return Struct._trusted(t.envelope, [before, after, self.source(relation, info), None, op,
                                            ns // 1_000_000, ns // 1000, ns])

    def change_event(self, change: Change, info: SourceInfo) -> Event:
        """The one event of ``change`` (op c/u/d/r as given), without the tombstone or key-change
        split :meth:`events` adds."""
        relation = change.relation
        t = self._table(relation)
        key_row = change.after if change.op in ("c", "u", "r") else change.before
        if change.op == "u" and change.after is None:
            key_row = change.before
        value = self._envelope(relation, change.op, self.row(relation, change.before),
                               self.row(relation, change.after), info)
        return Event(t.topic, t.key_schema, self.key(relation, key_row), t.envelope, value, op=change.op)

    def tombstone(self, relation: Relation, key: Struct | None) -> Event:
        """The tombstone after a delete: the same key, a null value (and, as Debezium's, no value schema)."""
        t = self._table(relation)
        return Event(t.topic, t.key_schema, key, None, None, op="")

    def events(self, change: Change, info: SourceInfo) -> list[Event]:
        """Every event ``change`` gives, in order: none when its op is skipped; an update that moves
        the key gives a delete (+ tombstone) and a create; a delete gives the delete and (with
        ``tombstones.on.delete``) a tombstone."""
        op = change.op
        if op in self.skipped:
            return []
        relation = change.relation
        if op == "u" and change.before is not None and self._table(relation).key_schema is not None:
            old_key = self.key(relation, change.before)
            new_key = self.key(relation, change.after)
            if old_key is not None and _key_given(self._table(relation), change.before) and old_key != new_key:
                return self._key_change(change, info, old_key, new_key)
        event = self.change_event(change, info)
        if op == "d" and self.tombstones and event.key is not None:
            return [event, self.tombstone(relation, event.key)]
        return [event]

    def _key_change(self, change: Change, info: SourceInfo, old_key: Struct, new_key: Struct) -> list[Event]:
        relation = change.relation
        t = self._table(relation)
        out = []
        if "d" not in self.skipped:
            delete = self._envelope(relation, "d", self.row(relation, change.before), None, info)
            out.append(Event(t.topic, t.key_schema, old_key, t.envelope, delete,
                             headers=((NEW_KEY_HEADER, _header(new_key)),), op="d"))
            if self.tombstones:
                out.append(Event(t.topic, t.key_schema, old_key, None, None,
                                 headers=((NEW_KEY_HEADER, _header(new_key)),)))
        if "c" not in self.skipped:
            create = self._envelope(relation, "c", None, self.row(relation, change.after), info)
            out.append(Event(t.topic, t.key_schema, new_key, t.envelope, create,
                             headers=((OLD_KEY_HEADER, _header(old_key)),), op="c"))
        return out

    def read_event(self, relation: Relation, row: tuple, info: SourceInfo) -> Event:
        """A snapshot read (``op: r``) of ``row``."""
        t = self._table(relation)
        value = self._envelope(relation, "r", None, self.row(relation, row), info)
        return Event(t.topic, t.key_schema, self.key(relation, row), t.envelope, value, op="r")

    def truncate_events(self, truncate: Truncate, info: SourceInfo) -> list[Event]:
        """One ``op: t`` event per truncated table (no key, no before/after); none when ``t`` is in
        ``skipped.operations`` (Debezium's default)."""
        if "t" in self.skipped:
            return []
        out = []
        for relation in truncate.relations:
            t = self._table(relation)
            out.append(Event(t.topic, None, None, t.envelope, self._envelope(relation, "t", None, None, info), op="t"))
        return out


def _key_given(table: _TableSchemas, before: tuple) -> bool:
    """Whether the WAL's old row holds the key (pgoutput sends old key columns only when the key changed)."""
    return any(before[i] is not None for i in table.key_positions)


def _header(key: Struct) -> bytes:
    """A key as Debezium's header carries it through a JSON header converter: its fields as JSON."""
    return json.dumps(key.to_dict(), separators=(",", ":"), default=str).encode()
