"""Streamed changes as batches: a run of one table's change events in columns, the stream's fast path.

:class:`ChangeBatcher` turns the items of one poll (:class:`~.stream.Item`, in WAL order) into
what :meth:`PostgresCdcSourceTask.poll <.source.PostgresCdcSourceTask.poll>` returns: for each run
of consecutive plain changes of one table (an insert, an update that keeps its key, a delete) one
:class:`~airflow_copycat.connect.batch.SourceBatch` of Debezium envelopes -- ``before``, ``after``
and ``source`` as struct columns, the key's fields as columns of their own, a delete's tombstone as
a tombstone row right after it -- and for everything else the records
:class:`~.envelope.EventBuilder` makes (a TRUNCATE, an update that moves the key, a table with a
column of a type kept out of batches). A batch means exactly the records the builder would make for
its changes (:meth:`SourceBatch.to_records <airflow_copycat.connect.batch.SourceBatch.to_records>`):
the same values, converted by the same functions (a value that does not parse raises the same
error, from ``poll()``), the same topic, key, tombstones and per-row offsets. One difference:
``ts_ms``/``ts_us``/``ts_ns`` (when the connector made the event) are read once per batch rather
than once per event.

Types in batches: integers, floats, booleans, strings (Debezium's string-based types included:
``ZonedTimestamp``, ``Json``, ``Uuid``, enums, ...), bytes and ``Decimal`` (``decimal.handling.mode=precise``
with a fixed scale). A table with a column of another type (Connect's ``Date``/``Time``/``Timestamp``
with ``time.precision.mode=connect``, ``VariableScaleDecimal``, arrays, geometries) streams as records.
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from airflow_copycat.connect import Schema
from airflow_copycat.connect.batch import SourceBatch
from airflow_copycat.connect.data import Decimal, Type

from ..files.formats import arrow_type
from .envelope import SOURCE_SCHEMA, TRANSACTION_SCHEMA, EventBuilder
from .model import Change, Relation
from .stream import Item

_IN_BATCHES = {Type.INT8, Type.INT16, Type.INT32, Type.INT64, Type.FLOAT32, Type.FLOAT64, Type.BOOLEAN,
               Type.STRING, Type.BYTES}
_LOGICAL = {"org.apache.kafka.connect.data.Date", "org.apache.kafka.connect.data.Time",
            "org.apache.kafka.connect.data.Timestamp"}
MIN_ROWS = 16
"""A run shorter than this goes as records (a batch's fixed cost is not worth it)."""


def _struct_type(schema: Schema) -> pa.StructType:
    return pa.struct([pa.field(f.name, arrow_type(f.schema)) for f in schema.fields])


_SOURCE_TYPE = _struct_type(SOURCE_SCHEMA)
_TRANSACTION_TYPE = _struct_type(TRANSACTION_SCHEMA)


def _arrow_types(t) -> tuple | None:
    """(the row struct's Arrow type, the key fields' Arrow types) of a table's schemas, or ``None`` when
    a row or key field cannot ride in a batch column (or the rows have no field)."""
    keys = t.key_schema.fields if t.key_schema is not None else []
    if not t.row_schema.fields or not all(_fits(f.schema) for f in t.row_schema.fields + keys):
        return None
    return _struct_type(t.row_schema), [arrow_type(f.schema) for f in keys]


def _fits(schema: Schema) -> bool:
    """Whether values of a row field of this schema can ride in a batch column."""
    if schema.name == Decimal.LOGICAL_NAME:  # decimal128 holds up to 38 digits (and Python reads scales <= 38)
        return int(schema.parameters.get("connect.decimal.precision") or 38) <= 38 and 0 <= Decimal.scale(schema) <= 38
    return schema.type in _IN_BATCHES and schema.name not in _LOGICAL


class ChangeBatcher:
    """Makes a poll's records and batches from its items (see the module docstring).

    ``builder`` is the task's :class:`~.envelope.EventBuilder`; ``partition`` the stream's source
    partition; ``count(relation, op, n)`` is told of the changes each batch holds. Not thread-safe:
    one per task."""

    def __init__(self, builder: EventBuilder, partition: dict, count: Callable):
        self.builder, self.partition, self.count = builder, partition, count
        self._fit: dict[Relation, tuple | None] = {}  # relation -> _arrow_types, or None: records
        self._last: tuple = (None, None, None)  # (relation, its schemas, its fit)

    def items(self, items: list[Item], events: Callable[[Item], list]) -> list:
        """Batches and records for ``items`` in order; ``events(item)`` gives an item's records the
        builder's way (and counts them), for the items not batched."""
        out: list = []
        run: list[Item] = []
        for item in items:
            message = item.message
            plain = type(message) is Change and self._plain(message)
            if run and (not plain or message.relation is not run[0].message.relation):
                out += self._flush(run, events)
                run = []
            if plain:
                run.append(item)
            else:
                out += events(item)
        return out + self._flush(run, events)

    def _plain(self, change: Change) -> bool:
        """A change whose events are one envelope (+ a tombstone after a delete), of a table whose
        columns all fit in batches."""
        op = change.op
        if op not in ("c", "u", "d") or op in self.builder.skipped:
            return False
        relation = change.relation
        if relation is self._last[0]:  # changes come in runs of one table
            t, fit = self._last[1], self._last[2]
        else:
            t = self.builder.table_schemas(relation)
            if relation not in self._fit:
                self._fit[relation] = _arrow_types(t)
            fit = self._fit[relation]
            self._last = (relation, t, fit)
        if fit is None:
            return False
        if op == "u" and change.before is not None and t.key_schema is not None:
            before, after, positions = change.before, change.after, t.key_positions
            if any(before[i] is not None for i in positions) and any(before[i] != after[i] for i in positions):
                return False  # the key may have moved (a NULL key column too): the builder decides
        return True

    def _flush(self, run: list[Item], events: Callable[[Item], list]) -> list:
        if not run:
            return []
        if len(run) < MIN_ROWS:
            return [r for item in run for r in events(item)]
        try:
            return [self._batch(run)]
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # a value Arrow cannot hold as typed
            return [r for item in run for r in events(item)]

    def _batch(self, run: list[Item]) -> SourceBatch:
        b = self.builder
        relation = run[0].message.relation
        t = b.table_schemas(relation)
        row_type, key_types = self._fit[relation]
        befores: list[tuple | None] = []  # per row: the WAL's values (texts), or None (no such row)
        afters: list[tuple | None] = []
        keys: list[tuple] = []  # the row the key comes from
        ops: list[str | None] = []
        tombstones: list[int] = []
        offsets: list[dict] = []
        sources: list[list] = []
        source_values = b.source_values
        with_tombstones = b.tombstones and t.key_schema is not None
        for item in run:
            change: Change = item.message
            op = change.op
            befores.append(change.before)
            afters.append(change.after)
            keys.append(change.before if op == "d" or change.after is None else change.after)
            ops.append(op)
            offsets.append(item.offset)
            sources.append(source_values(relation, change.commit_ts_us, change.xid, change.lsn, item.last_commit_lsn))
            if op == "d" and with_tombstones:  # the tombstone: the same key, no value
                tombstones.append(len(ops))
                befores.append(None)
                afters.append(None)
                keys.append(keys[-1])
                ops.append(None)
                offsets.append(item.offset)
                sources.append(sources[-1])
        n = len(ops)
        ns = b.clock()
        columns = tuple(zip(t.value_positions, t.value_mappings))
        data: dict[str, Any] = {
            "before": _row_structs(row_type, columns, befores),
            "after": _row_structs(row_type, columns, afters),
            "source": _structs(_SOURCE_TYPE, sources),
            "transaction": pa.nulls(n, _TRANSACTION_TYPE),
            "op": pa.array(ops, pa.string()),
            "ts_ms": pa.array([ns // 1_000_000] * n, pa.int64()),
            "ts_us": pa.array([ns // 1000] * n, pa.int64()),
            "ts_ns": pa.array([ns] * n, pa.int64()),
        }
        key_fields = []
        for f, typ, i, mapping in zip(t.key_schema.fields if t.key_schema is not None else [], key_types,
                                      t.key_positions, t.key_mappings):
            key_fields.append(f"key.{f.name}")  # apart from the envelope's own fields
            data[key_fields[-1]] = _column(typ, i, mapping, keys, 0)
        batch = SourceBatch(topic=t.topic, data=pa.table(data), value_schema=t.envelope,
                            source_partition=self.partition, source_offset=offsets[-1],
                            key_fields=tuple(key_fields), key_schema=t.key_schema if key_fields else None,
                            row_offsets=offsets, tombstones=tuple(tombstones))
        for op in ("c", "u", "d"):  # counted once the batch is made (a failed one goes as records)
            changes = ops.count(op)
            if changes:
                self.count(relation, op, changes)
        return batch


def _row_structs(struct_type: pa.StructType, columns: tuple, rows: list[tuple | None]) -> pa.StructArray:
    """A ``before``/``after`` column: for each row field (``columns``: the row's position of its value in
    the WAL's tuples, its FieldMapping) the converted values of ``rows`` (None: a null struct)."""
    missing = [r is None for r in rows]
    nulls = missing.count(True)
    arrays = [_column(struct_type.field(f).type, i, mapping, rows, nulls) for f, (i, mapping) in enumerate(columns)]
    mask = pa.array(missing, pa.bool_()) if nulls else None
    return pa.StructArray.from_arrays(arrays, fields=list(struct_type), mask=mask)


def _column(typ: pa.DataType, i: int, mapping, rows: list[tuple | None], nulls: int) -> pa.Array:
    """Value ``i`` of each of ``rows`` (``nulls`` of them None) converted by ``mapping``: by one Arrow cast
    of the texts where that is exact (:attr:`.values.FieldMapping.text_exact`) and no text is missing
    that would take a value (``mapping.missing``), else value by value by ``mapping.convert``."""
    texts = [None if r is None else r[i] for r in rows]
    if mapping.text_exact and (mapping.missing is None or texts.count(None) == nulls):
        try:
            column = pa.array(texts, pa.string())
            return column if typ == pa.string() else column.cast(typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
            pass  # an unchanged TOASTed value, a text Arrow does not cast: convert()'s way (and its error)
    convert = mapping.convert
    return pa.array([None if r is None else convert(r[i]) for r in rows], typ)


def _structs(struct_type: pa.StructType, rows: list[list | None]) -> pa.StructArray:
    """A struct column of ``rows`` (each a list of the fields' values, or None for a null struct)."""
    width = struct_type.num_fields
    nones = [None] * width
    columns = list(zip(*[nones if r is None else r for r in rows])) if rows else [()] * width
    arrays = [pa.array(column, struct_type.field(i).type) for i, column in enumerate(columns)]
    missing = [r is None for r in rows]
    mask = pa.array(missing, pa.bool_()) if any(missing) else None
    return pa.StructArray.from_arrays(arrays, fields=list(struct_type), mask=mask)
