"""The transforms most used on imports, applied to a whole :class:`~..connect.batch.SourceBatch`.

:func:`apply_chain` returns the batch the connector's transform chain makes of
``batch`` -- the same rows, each what the chain would make of its record -- or
``None`` when some stage cannot be done in columns; the caller then sends the
batch's records through the chain one by one (the per-record path, which also
reports every error). It never raises for a row's data: anything unexpected is
``None``, so errors are always the per-record path's.

Done in columns, on a struct value (or, for HoistField, a primitive one):

* ``InsertField$Value`` with ``static.field``, ``topic.field``, ``partition.field``
  and ``timestamp.field`` (each one value for the whole batch) when no field has a
  default (``replace.null.with.default`` would rewrite nulls); ``offset.field`` is
  for sinks;
* ``ReplaceField$Value`` (``include``, ``exclude``, ``renames``) when no field has a
  default (``replace.null.with.default`` would rewrite nulls);
* ``HoistField$Value`` of a primitive value (a line becomes ``{field: line}``);
* ``RegexRouter`` and ``TimestampRouter`` (a batch has one topic and one timestamp);
* ``Filter`` and any stage whose predicate is ``TopicNameMatches`` or
  ``HasHeaderKey`` (one answer for the whole batch);
* Debezium's ``ExtractNewRecordState`` on a batch of change events (a struct value
  named ``*.Envelope``) when no row is dropped: every row a create, update or
  snapshot read, or, in the rewrite modes, also deletes (their ``before`` row with
  ``__deleted="true"``); with ``add.fields`` but without ``add.headers`` or
  ``route.by.field`` (which differ by row). A batch that is not change events
  passes through. Truncates, deletes in the other modes and ``replace.null.with.default``
  in a rewrite mode over fields with defaults go row by row.

The output schema is always the one the record transform builds for the batch's
first record, so the two paths cannot disagree on it; row values are moved as
columns.
"""

from __future__ import annotations

import dataclasses
import logging

import pyarrow as pa
import pyarrow.compute as pc

from ..connect.batch import KEY_COLUMN, VALUE_COLUMN, SourceBatch
from ..connect.data import Type
from ..transforms.debezium import DELETED_FIELD, ExtractNewRecordState, is_envelope
from ..transforms.extract_hoist import HoistField
from ..transforms.fields import InsertField, ReplaceField
from ..transforms.filter import Filter
from ..transforms.predicates import HasHeaderKey, TopicNameMatches
from ..transforms.routing import RegexRouter, TimestampRouter

log = logging.getLogger("airflow_copycat.transforms")

_BATCH_CONSTANT_PREDICATES = (TopicNameMatches, HasHeaderKey)


def apply_chain(chain, batch: SourceBatch) -> SourceBatch | None:
    """``batch`` after every stage of ``chain`` (a :class:`.transforms.TransformChain`): a batch of
    the same rows, a batch of no rows when a Filter drops them all, or ``None`` (go row by row)."""
    for stage in chain._stages:
        if not len(batch):
            return batch
        try:
            sample = batch.to_records([0])[0]
            if stage.predicate is not None:
                if not isinstance(stage.predicate, _BATCH_CONSTANT_PREDICATES):
                    return None
                if bool(stage.predicate.test(sample)) == stage.negate:
                    continue
            out = _one(stage.transform, batch, sample)
        except Exception:  # noqa: BLE001 -- the per-record path reports the row's error as it should
            log.debug("transform %s: going row by row", stage.alias, exc_info=True)
            return None
        if out is None:
            return None
        batch = out
    return batch


def _one(transform, batch: SourceBatch, sample) -> SourceBatch | None:
    kind = type(transform)
    if kind is Filter:
        return dataclasses.replace(batch, data=batch.data.slice(0, 0), row_offsets=None)
    if kind in (RegexRouter, TimestampRouter):
        routed = transform.apply(sample)
        return dataclasses.replace(batch, topic=routed.topic)
    if kind is InsertField.Value:
        return _insert(transform, batch, sample)
    if kind is ReplaceField.Value:
        return _replace(transform, batch, sample)
    if kind is HoistField.Value:
        return _hoist(transform, batch, sample)
    if kind is ExtractNewRecordState:
        return _unwrap(transform, batch, sample)
    return None


def _columns(batch: SourceBatch) -> dict:
    return {f.name: batch.data.column(f.name) for f in batch.value_schema.fields}


def _with_value(batch: SourceBatch, schema, columns: dict) -> SourceBatch | None:
    """``batch`` with a new value (``columns`` by field name, ``schema``), its key columns kept; ``None``
    when a value field would take the name of the batch's primitive key column."""
    if batch.has_key and not batch.key_fields and KEY_COLUMN in columns:
        return None
    data = pa.table(columns) if columns else pa.table({"_": pa.nulls(len(batch))}).drop_columns(["_"])
    key_fields = []
    for name in batch.key_fields:  # the key's columns stay as they were, under names apart from the value's
        target = name
        while target in data.schema.names:
            target = "__key." + target
        data = data.append_column(target, batch.data.column(name))
        key_fields.append(target)
    if batch.has_key and not batch.key_fields:
        data = data.append_column(KEY_COLUMN, batch.data.column(KEY_COLUMN))
    return dataclasses.replace(batch, data=data, value_schema=schema, key_fields=tuple(key_fields))


def _insert(transform, batch: SourceBatch, sample) -> SourceBatch | None:
    if batch.value_schema.type is not Type.STRUCT or transform._offset is not None:
        return None
    if transform._with_default and any(f.schema.default is not None for f in batch.value_schema.fields):
        return None  # replace.null.with.default rewrites nulls of those fields: the record transform's way
    schema = transform.apply(sample).value_schema
    columns = _columns(batch)
    n = len(batch)
    for spec, value, arrow_type in (
        (transform._topic, batch.topic, pa.string()),
        (transform._partition, batch.kafka_partition, pa.int32()),
        (transform._timestamp, batch.timestamp, pa.timestamp("ms", tz="UTC")),
        (transform._static, transform._static_value, pa.string()),
    ):
        if spec is None:
            continue
        if value is None and not spec.optional:
            return None  # the record path raises, naming the field
        columns[spec.name] = pa.nulls(n, arrow_type) if value is None else pa.array([value] * n, arrow_type)
    return _with_value(batch, schema, columns)


def _replace(transform, batch: SourceBatch, sample) -> SourceBatch | None:
    old = batch.value_schema
    if old.type is not Type.STRUCT or any(f.schema.default is not None for f in old.fields):
        return None
    schema = transform.apply(sample).value_schema
    columns = {transform._renames.get(f.name, f.name): batch.data.column(f.name)
               for f in old.fields if transform._keep(f.name)}
    if list(columns) != [f.name for f in schema.fields]:
        return None
    return _with_value(batch, schema, columns)


def _hoist(transform, batch: SourceBatch, sample) -> SourceBatch | None:
    if batch.value_schema.type is Type.STRUCT:
        return None  # a nested struct column: go row by row
    schema = transform.apply(sample).value_schema
    return _with_value(batch, schema, {transform._field: batch.data.column(VALUE_COLUMN)})


def _unwrap(transform, batch: SourceBatch, sample) -> SourceBatch | None:
    envelope = batch.value_schema
    if not is_envelope(envelope):
        return batch  # not change events: every row passes through
    if transform.add_headers or transform.route_by_field:
        return None  # headers and topics that differ by row
    after_field, before_field = envelope.field("after"), envelope.field("before")
    if after_field is None or before_field is None or after_field.schema.type is not Type.STRUCT:
        return None
    row_schema = after_field.schema
    after = batch.data.column("after")
    upserts = pc.is_valid(after)
    deletes = after.null_count > 0
    if deletes:  # the rewrite modes keep a delete as its before row; the others drop it or null its value
        before = batch.data.column("before")
        if not transform.rewrite or before_field.schema != row_schema \
                or pc.any(pc.and_(pc.invert(upserts), pc.is_null(before))).as_py():
            return None  # a truncate, or a delete that is not a row of the same schema
    if transform.rewrite and transform.with_default and any(f.schema.default is not None for f in row_schema.fields):
        return None  # replace.null.with.default rewrites nulls of those fields: the record transform's way
    out = transform.apply(sample)
    if out is None or out.value_schema is None or out.topic != batch.topic:
        return None
    columns = {}
    for f in row_schema.fields:  # struct children by name, as a batch's records read them
        column = pc.struct_field(after, f.name)
        columns[f.name] = pc.if_else(upserts, column, pc.struct_field(before, f.name)) if deletes else column
    if transform.rewrite:
        columns[DELETED_FIELD] = pc.if_else(upserts, "false", "true") if deletes \
            else pa.array(["false"] * len(batch), pa.string())
    for ref in transform.added_fields(envelope):
        columns[ref.new_name] = _envelope_column(batch, envelope, ref)
    if list(columns) != [f.name for f in out.value_schema.fields]:
        return None
    return _with_value(batch, out.value_schema, columns)


def _envelope_column(batch: SourceBatch, envelope, ref):
    """The column of ``add.fields`` entry ``ref``: a field of the envelope's ``ref.struct`` (null where that
    struct is null), else the envelope's own field of that name (as the record transform reads it)."""
    holder = envelope.field(ref.struct) if ref.struct is not None else None
    if holder is not None and holder.schema.type is Type.STRUCT:
        parent = batch.data.column(ref.struct)
        if holder.schema.field(ref.field) is not None:
            return pc.struct_field(parent, ref.field)
        own = batch.data.column(ref.field)
        return pc.if_else(pc.is_valid(parent), own, pa.nulls(len(batch), own.type))
    return batch.data.column(ref.field)
