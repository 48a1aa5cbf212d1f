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

How: the run's tuples are read from the changes' pgoutput messages at once, one Arrow string column
per table column (:mod:`.wire_columns`), when every change of the run is a
:class:`~.pgoutput.WireChange`; a run holding a change decoded already (an update that carries its old
row, as every update does under ``REPLICA IDENTITY FULL``) reads all its tuples from the decoded values.
Each column is then converted by one Arrow cast where that gives what the per-value converter gives
(:mod:`.column_casts`: integers, strings, decimals, floats, ``timestamptz``), value by value otherwise;
a ``real`` value beyond float32's range (which the converter refuses) sends the run as records.

Types in batches: integers, floats, booleans, strings (Debezium's string-based types included:
``ZonedTimestamp``, ``Json``, ``Uuid``, enums, ...), bytes and ``Decimal`` (``decimal.handling.mode=precise``
with a fixed scale). A table with a column of another type (Connect's ``Date``/``Time``/``Timestamp``
with ``time.precision.mode=connect``, ``VariableScaleDecimal``, arrays, geometries) streams as records.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_copycat.connect import Schema
from airflow_copycat.connect.batch import RowOffsets, SourceBatch
from airflow_copycat.connect.data import Decimal, Type

from ..files.formats import arrow_type
from .column_casts import cast_texts, float32s
from .envelope import SOURCE_SCHEMA, TRANSACTION_SCHEMA, EventBuilder
from .model import Change, Relation
from .pgoutput import WireChange
from .stream import Item
from .wire_columns import TextColumn, tuple_columns

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

    def items(self, items: list[Item], events: Callable[[Item, dict], list], before: dict) -> list:
        """Batches and records for ``items`` in order; ``events(item, before)`` gives an item's records
        the builder's way (and counts them), for the items not batched. ``before``: the offset of the
        position before the first item. Of a change's several records (a delete and its tombstone) only
        the last carries the change's offset; the others the offset before it, so a change whose later
        record failed is sent again whole."""
        out: list = []
        run: list[Item] = []
        run_before = before
        for item in items:
            message = item.message
            plain = isinstance(message, Change) and self._plain(message)
            if run and (not plain or message.relation is not run[0].message.relation):
                out += self._flush(run, events, run_before)
                run = []
            if plain:
                if not run:
                    run_before = before
                run.append(item)
            else:
                out += events(item, before)
            before = item.offset
        return out + self._flush(run, events, run_before)

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
        if op == "u" and t.key_schema is not None and (type(change) is not WireChange or change.old_at >= 0) \
                and change.before is not None:
            before, after, positions = change.before, change.after, t.key_positions
            if any(before[i] is not None for i in positions) and any(before[i] != after[i] for i in positions):
                return False  # the key may have moved (a NULL key column too): the builder decides
        return True

    def _flush(self, run: list[Item], events: Callable[[Item, dict], list], before: dict) -> list:
        if not run:
            return []
        if len(run) < MIN_ROWS:
            return self._each(run, events, before)
        try:
            return [self._batch(run, before)]
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # a value Arrow cannot hold as typed
            return self._each(run, events, before)

    @staticmethod
    def _each(run: list[Item], events: Callable[[Item, dict], list], before: dict) -> list:
        out: list = []
        for item in run:
            out += events(item, before)
            before = item.offset
        return out

    def _batch(self, run: list[Item], before: dict) -> SourceBatch:
        b = self.builder
        changes: list[Change] = [item.message for item in run]
        relation = changes[0].relation
        t = b.table_schemas(relation)
        row_type, key_types = self._fit[relation]
        # per change, in one pass: (op, lsn, txId, commit time, the commit LSN before it)
        ops, lsns, xids, times, lasts = zip(*[(m.op, m.lsn, m.xid, m.commit_ts_us, item.last_commit_lsn)
                                              for item, m in zip(run, changes)])
        # each change is a row; a delete's tombstone (the same key, no value) is one more, right after it
        if b.tombstones and t.key_schema is not None and "d" in ops:
            counts = np.array([2 if op == "d" else 1 for op in ops], np.int64)
            of_row = np.repeat(np.arange(len(run)), counts)  # per row: its change
            tombstone = np.zeros(len(of_row), bool)
            tombstone[np.cumsum(counts)[counts == 2] - 1] = True
        else:
            of_row, tombstone = np.arange(len(run)), np.zeros(len(run), bool)
        n = len(of_row)
        tuples = _wire_tuples(relation, changes, of_row, tombstone) or _decoded_tuples(changes, of_row, tombstone)
        ns = b.clock()
        columns = tuple(zip(t.value_positions, t.value_mappings))
        take = pa.array(of_row)
        op = pa.array(ops, pa.string()).take(take)
        data: dict[str, Any] = {
            "before": _row_structs(row_type, columns, tuples["before"]),
            "after": _row_structs(row_type, columns, tuples["after"]),
            "source": _source_column(b, run[0], take, lsns, xids, times, lasts),
            "transaction": pa.nulls(n, _TRANSACTION_TYPE),
            "op": pc.if_else(pa.array(tombstone), pa.scalar(None, pa.string()), op) if tombstone.any() else op,
            "ts_ms": pa.repeat(pa.scalar(ns // 1_000_000, pa.int64()), n),
            "ts_us": pa.repeat(pa.scalar(ns // 1000, pa.int64()), n),
            "ts_ns": pa.repeat(pa.scalar(ns, pa.int64()), n),
        }
        key_fields = []
        for f, typ, i, mapping in zip(t.key_schema.fields if t.key_schema is not None else [], key_types,
                                      t.key_positions, t.key_mappings):
            key_fields.append(f"key.{f.name}")  # apart from the envelope's own fields
            data[key_fields[-1]] = _column(typ, mapping, tuples["key"].column(i))
        rows = of_row.tolist()
        # a delete followed by its tombstone: the delete row carries the offset before its change
        split = np.append(tombstone[1:], False).tolist()
        batch = SourceBatch(topic=t.topic, data=pa.table(data), value_schema=t.envelope,
                            source_partition=self.partition, source_offset=run[-1].offset,
                            key_fields=tuple(key_fields), key_schema=t.key_schema if key_fields else None,
                            row_offsets=RowOffsets(n, lambda r: run[rows[r]].offset if not split[r] else
                                                   (run[rows[r] - 1].offset if rows[r] else before)),
                            tombstones=tuple(np.flatnonzero(tombstone).tolist()))
        for kind in ("c", "u", "d"):  # counted once the batch is made (a failed one goes as records)
            count = ops.count(kind)
            if count:
                self.count(relation, kind, count)
        return batch


class _Texts:
    """One column's values over a batch's rows, as the WAL had them: ``column(i)`` of a :class:`_Tuples`."""

    def __init__(self, values: list | None = None, wire: TextColumn | None = None, missing_rows: int = 0,
                 present: list[bool] | None = None):
        self._values, self.wire, self.missing_rows, self.present = values, wire, missing_rows, present

    def values(self) -> list:
        """Per row: the text, None (NULL, or no such row), or UNCHANGED_TOAST."""
        return self._values if self._values is not None else self.wire.values()


class _Tuples:
    """One of a batch's tuples (``before``, ``after`` or the key's row) for every row: ``present`` says
    which rows have one (the others: a null struct); ``column(i)`` is the WAL's column ``i`` of every
    row -- from the decoded ``rows``, or taken from the run's ``wire`` columns at ``at`` (per row, its
    message; -1: none) when first asked for."""

    def __init__(self, present: list[bool], rows: list[tuple | None] | None = None,
                 wire: list[TextColumn] | None = None, at: np.ndarray | None = None):
        self.present, self.rows, self.wire, self.at = present, rows, wire, at
        self.missing = present.count(False)

    def column(self, i: int) -> _Texts:
        if self.wire is not None:
            return _Texts(wire=self.wire[i].take(self.at), missing_rows=self.missing, present=self.present)
        return _Texts(values=[None if r is None else r[i] for r in self.rows], missing_rows=self.missing,
                      present=self.present)


def _key_row(change: Change):
    """Which tuple of ``change`` its key comes from: ``"before"`` for a delete (or an update without new row)."""
    return "before" if change.op == "d" or change.after is None else "after"


def _decoded_tuples(changes: list[Change], of_row: np.ndarray, tombstone: np.ndarray) -> dict[str, _Tuples]:
    """The batch's tuples from the changes' decoded ``before``/``after`` (see :func:`_wire_tuples`)."""
    keys = [c.before if _key_row(c) == "before" else c.after for c in changes]
    out = {}
    for name, rows in (("before", [c.before for c in changes]), ("after", [c.after for c in changes]),
                       ("key", keys)):
        per_row = [None if tomb and name != "key" else rows[i] for i, tomb in zip(of_row.tolist(), tombstone.tolist())]
        out[name] = _Tuples([r is not None for r in per_row], rows=per_row)
    return out


def _wire_tuples(relation: Relation, changes: list[Change], of_row: np.ndarray,
                 tombstone: np.ndarray) -> dict[str, _Tuples] | None:
    """The batch's tuples read from the changes' messages at once (:func:`.wire_columns.tuple_columns`),
    or None when a change is not a :class:`~.pgoutput.WireChange` or a tuple is not the relation's columns
    in order, each whole in its message (the caller then decodes them change by change, which raises the
    decoder's error or reads what the decoder reads). ``of_row``: per row, its change; ``tombstone``: per
    row, whether it is a delete's tombstone (no ``before``/``after``, the delete's key).
    A WireChange has one tuple: a delete's old row, an insert's or update's new row."""
    if any(type(c) is not WireChange for c in changes):
        return None
    wires, old_at, new_at = zip(*[(c.wire, c.old_at, c.new_at) for c in changes])
    old_at, new_at = np.array(old_at, np.int64), np.array(new_at, np.int64)
    olds = old_at >= 0
    lengths = np.fromiter(map(len, wires), np.int64, len(wires))
    ends = np.cumsum(lengths)
    columns = tuple_columns(np.frombuffer(b"".join(wires), np.uint8), ends,
                            ends - lengths + np.where(olds, old_at, new_at), len(relation.columns))
    if columns is None:
        return None
    old = olds[of_row]
    rows = {"before": np.where(old & ~tombstone, of_row, -1), "after": np.where(~old & ~tombstone, of_row, -1),
            "key": of_row}
    return {name: _Tuples((at >= 0).tolist(), wire=columns, at=at) for name, at in rows.items()}


def _row_structs(struct_type: pa.StructType, columns: tuple, rows: _Tuples) -> pa.StructArray:
    """A ``before``/``after`` column: for each row field (``columns``: the row's position of its value in
    the WAL's tuples, its FieldMapping) the converted values of ``rows`` (a row without tuple: a null struct)."""
    arrays = [_column(struct_type.field(f).type, mapping, rows.column(i)) for f, (i, mapping) in enumerate(columns)]
    mask = pa.array([not p for p in rows.present], pa.bool_()) if rows.missing else None
    return pa.StructArray.from_arrays(arrays, fields=list(struct_type), mask=mask)


def _column(typ: pa.DataType, mapping, texts: _Texts) -> pa.Array:
    """One column's values converted by ``mapping``: at once where that is exact (:func:`.column_casts.cast_texts`,
    for ``text_exact`` and ``zoned_width`` columns; a NULL the WAL sent for a column whose ``mapping.missing``
    is a value becomes that value), else value by value by ``mapping.convert`` (a row without tuple: null)."""
    if mapping.text_exact or mapping.zoned_width is not None:
        wire, width = texts.wire, mapping.zoned_width
        try:
            if wire is not None:
                if wire.unchanged is None:
                    column = cast_texts(wire.texts, typ, width)
                    if mapping.missing is None or not wire.null_values:
                        return column
                    # NULLs the WAL sent for a required column (a delete's old row carries the key only)
                    return pc.if_else(pa.array(wire.nulls), pa.scalar(mapping.missing, typ), column)
            else:
                values = texts.values()
                if mapping.missing is None or values.count(None) == texts.missing_rows:
                    return cast_texts(pa.array(values, pa.string()), typ, width)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
            pass  # an unchanged TOASTed value, a text Arrow does not cast: convert()'s way (and its error)
    convert = mapping.convert
    column = pa.array([convert(v) if p else None for v, p in zip(texts.values(), texts.present)],
                      pa.float64() if typ == pa.float32() else typ)
    return float32s(column) if typ == pa.float32() else column  # OverflowError: the run goes as records


def _source_column(b: EventBuilder, first: Item, of_row: pa.Array, lsns: tuple, xids: tuple, times: tuple,
                   lasts: tuple) -> pa.StructArray:
    """The ``source`` column of a batch (``of_row``: per row, its change): per change (``lsns``, ``xids``, commit
    ``times`` in us, the commit LSN before it in ``lasts``) its commit time, txId, LSN and ``sequence`` (as
    :func:`.envelope.sequence` writes it); the other fields as :meth:`.envelope.EventBuilder.source_values`
    gives them for the run's ``first`` item."""
    m = first.message
    values = dict(zip(_SOURCE_TYPE.names, b.source_values(m.relation, m.commit_ts_us, m.xid, m.lsn,
                                                         first.last_commit_lsn)))
    us = np.array(times, np.int64)
    lsn = pa.array(np.array(lsns, np.int64))
    last = pa.array(lasts, pa.int64())
    last_text = pc.binary_join_element_wise('"', pc.cast(last, pa.string()), '"', "")
    if last.null_count:
        last_text = pc.fill_null(last_text, "null")
    # ts_ns beyond int64 (a commit after 2262): ArrowInvalid, and the run goes as records, as Arrow refuses it there
    per_change = {"ts_ms": pa.array(us // 1000), "ts_us": pa.array(us), "ts_ns": pc.multiply_checked(pa.array(us), 1000),
                  "txId": pa.array(np.array(xids, np.int64)), "lsn": lsn,
                  "sequence": pc.binary_join_element_wise("[", last_text, ',"', pc.cast(lsn, pa.string()), '"]', "")}
    n = len(of_row)
    arrays = [per_change[f.name].take(of_row).cast(f.type) if f.name in per_change
              else pa.repeat(pa.scalar(values[f.name], f.type), n) for f in _SOURCE_TYPE]
    return pa.StructArray.from_arrays(arrays, fields=list(_SOURCE_TYPE))
