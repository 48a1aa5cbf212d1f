"""ExtractNewRecordState: Debezium's event flattening SMT (``io.debezium.transforms.ExtractNewRecordState``).

A Debezium connector writes every row change as an *envelope*: a struct whose
schema name ends in ``.Envelope``, with the row ``before`` and ``after`` the
change, the ``source`` metadata (connector, database, table, LSN, ...), the
operation ``op`` (``c`` create, ``u`` update, ``d`` delete, ``r`` snapshot read,
``t`` truncate) and ``ts_ms``. A delete is followed by a *tombstone* (same key,
null value) so that Kafka's log compaction can forget the row. Most sinks want
plain rows instead; this transform replaces each envelope with its ``after``
row, as Debezium's does, with the same keys::

    transforms=unwrap
    transforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState
    transforms.unwrap.delete.tombstone.handling.mode=rewrite
    transforms.unwrap.add.fields=op,table,lsn,source.ts_ms

What happens to each kind of record:

=====================  ===================================================================
record                 result
=====================  ===================================================================
create, update, read   the ``after`` row (its schema: the ``after`` field's schema), plus
                       ``__deleted="false"`` in the rewrite modes, plus ``add.fields``
delete                 per ``delete.tombstone.handling.mode`` (below)
truncate               dropped (``before`` and ``after`` are both null)
tombstone              kept only in ``rewrite-with-tombstone`` (legacy: ``drop.tombstones=false``)
anything else          unchanged: heartbeats, schema changes, transaction markers, logical
                       decoding messages -- any value whose schema is not an envelope
=====================  ===================================================================

``delete.tombstone.handling.mode`` says what a delete and its tombstone become:

* ``tombstone`` (default): the delete becomes a record with a null value (the
  value schema stays the ``after`` schema, as Debezium leaves it), which a JDBC
  sink with ``delete.enabled`` reads as a delete; the tombstone is dropped.
* ``drop``: both are dropped.
* ``rewrite``: the delete becomes its ``before`` row plus ``__deleted="true"``
  (and inserts and updates get ``__deleted="false"``); the tombstone is dropped.
* ``rewrite-with-tombstone``: as ``rewrite``, and the tombstone is kept.
* ``delete-to-tombstone``: the delete becomes a real tombstone (null value and no
  value schema); the tombstone is dropped.

The legacy keys (removed in Debezium 3.2, still accepted here) apply only when
``delete.tombstone.handling.mode`` is not set and at least one of them is:
``drop.tombstones`` (default ``true``) and ``delete.handling.mode`` (``drop``,
the default; ``none``: a null-valued record as ``tombstone`` mode; ``rewrite``:
as ``rewrite`` mode).

``add.fields`` lists envelope fields to append to the row, each named
``add.fields.prefix`` (default ``__``) plus its name: ``op``, ``ts_ms``,
``ts_us``, ``ts_ns`` come from the envelope, ``id``, ``total_order`` and
``data_collection_order`` from ``transaction``, any other name from ``source``
(``table`` -> ``__table``, ``lsn`` -> ``__lsn``); ``struct.field`` names the
struct (``source.ts_ms`` -> ``__source_ts_ms``) and ``field:name`` renames
(``source.ts_ms:event_ts`` -> ``__event_ts``). A field the envelope does not
have is left out. Added fields are optional and keep their schema's logical
name. Deletes get them only in the rewrite modes (a null value has no fields).
``add.headers`` / ``add.headers.prefix`` do the same into record headers (values
written as Kafka Connect's ``SimpleHeaderConverter`` writes them); a tombstone
gets only the ``op`` header, ``d``.

``route.by.field`` sends the record to the topic named by that field of the
row (``before`` for a delete); a null or empty value keeps the topic.

A schemaless value (``value.converter.schemas.enable=false``) is a change event
when it is a map with ``op``, ``before`` and ``after`` entries: it is flattened
the same way into a map (Debezium passes schemaless values through unchanged;
this is an extension, so that sinks reading schemaless Debezium JSON work).
Other schemaless values pass through.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType, one_of
from ..connect.data import Schema, SchemaBuilder, Struct, Type
from ..connect.errors import DataException
from ..connect.records import ConnectRecord
from ..connect.transforms import Transformation
from ._keyvalue import (
    REPLACE_NULL_WITH_DEFAULT,
    SchemaCache,
    config_error,
    copy_schema_basics,
    define_replace_null_with_default,
    parse_config,
    trusted_struct,
    type_name,
)
from .extract_hoist import ExtractField
from .fields import InsertField
from .headers import header_bytes

log = logging.getLogger("airflow_copycat.transforms")

DELETED_FIELD = "__deleted"
"""The field the rewrite modes add: ``"true"`` on a rewritten delete, ``"false"`` otherwise."""

ENVELOPE_SUFFIX = ".Envelope"

_MODES = ("drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone")
_LEGACY_MODES = ("drop", "rewrite", "none")
_TRANSACTION_FIELDS = ("id", "total_order", "data_collection_order")
_ENVELOPE_FIELDS = ("op", "ts_ms", "ts_us", "ts_ns")

# what a delete becomes
_DROP, _NULL_VALUE, _TOMBSTONE, _REWRITE = "drop", "null value", "tombstone", "rewrite"


def is_envelope(schema: Schema | None) -> bool:
    """Whether ``schema`` is a Debezium change event's (a struct named ``*.Envelope``)."""
    return schema is not None and schema.name is not None and schema.name.endswith(ENVELOPE_SUFFIX)


def _is_schemaless_envelope(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("op"), str) and "after" in value and "before" in value


class _FieldRef:
    """One entry of ``add.fields`` / ``add.headers``: ``field``, ``struct.field`` or either with ``:new_name``."""

    __slots__ = ("struct", "field", "new_name")

    def __init__(self, prefix: str, spec: str):
        parts = spec.split(":")
        if len(parts) > 2:
            raise ValueError(f"{spec!r} has more than one ':'; write field, struct.field, or either with :new_name")
        path = parts[0].split(".")
        self.field = path[0] if len(path) == 1 else path[1]
        if len(path) == 1:
            self.struct = (None if self.field in _ENVELOPE_FIELDS else
                           "transaction" if self.field in _TRANSACTION_FIELDS else "source")
        else:
            self.struct = path[0]
        if len(parts) == 2:
            self.new_name = prefix + parts[1]
        else:
            self.new_name = prefix + (self.field if len(path) == 1 else f"{self.struct}_{self.field}")

    def schema(self, envelope: Schema) -> Schema | None:
        """The added field's schema (the envelope field's, optional), or ``None`` when the envelope lacks it."""
        parent = envelope
        if self.struct is not None:
            holder = envelope.field(self.struct)
            parent = holder.schema if holder is not None and holder.schema.type is Type.STRUCT else None
        found = parent.field(self.field) if parent is not None else None
        if found is None:  # a field another transform put on the envelope itself
            found = envelope.field(self.field)
        if found is None:
            return None
        return found.schema.copy(optional=True, default=None)

    def value(self, envelope: Struct) -> Any:
        """The field's value in ``envelope`` (as :meth:`schema` finds the field); nulls stay null."""
        if self.struct is not None:
            holder = envelope.schema.field(self.struct)
            if holder is not None and holder.schema.type is Type.STRUCT:
                parent = envelope.get_without_default(self.struct)
                if parent is None:
                    return None
                if parent.schema.field(self.field) is not None:
                    return parent.get_without_default(self.field)
        return envelope.get_without_default(self.field) if envelope.schema.field(self.field) is not None else None

    def schemaless(self, envelope: dict) -> tuple[bool, Any]:
        """(whether a schemaless envelope has the field, its value): a null ``struct`` has it, as null."""
        if self.struct is not None and self.struct in envelope:
            parent = envelope[self.struct]
            if parent is None:
                return True, None
            if isinstance(parent, dict) and self.field in parent:
                return True, parent[self.field]
        if self.field in envelope:
            return True, envelope[self.field]
        return False, None


def _field_refs(key: str, prefix: str, specs: list[str]) -> list[_FieldRef]:
    try:
        return [_FieldRef(prefix, s.strip()) for s in specs if s.strip()]
    except ValueError as e:
        raise config_error(key, ",".join(specs), str(e)) from None


_FIELD_DOC = (" Each entry: field (op, ts_ms, ts_us, ts_ns from the envelope; id, total_order, "
              "data_collection_order from transaction; any other from source), struct.field, or either "
              "with :new_name. Fields the envelope lacks are skipped.")


def _marked(delegate: InsertField.Value, row: ConnectRecord) -> ConnectRecord:
    """``row`` with ``__deleted`` (``delegate``) when it is a struct or map; another value (Debezium's
    MongoDB rows are strings) as it is."""
    return delegate.apply(row) if isinstance(row.value, (Struct, dict)) else row


class ExtractNewRecordState(Transformation):
    """Replace a Debezium change event with its ``after`` row; see the module docstring for every key."""

    kafka_class = "io.debezium.transforms.ExtractNewRecordState"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("delete.tombstone.handling.mode", ConfigType.STRING, None, one_of(*_MODES),
                importance="medium",
                doc="What deletes and tombstones become: drop (both dropped); tombstone (a null-valued delete, "
                    "tombstone dropped; the default when no legacy key is set either); rewrite (the before row "
                    "with __deleted=true, tombstone dropped); rewrite-with-tombstone (rewrite, tombstone kept); "
                    "delete-to-tombstone (the delete becomes a tombstone, the original tombstone is dropped).")
        .define("drop.tombstones", ConfigType.BOOLEAN, True, importance="low",
                doc="Legacy (used only when delete.tombstone.handling.mode is not set): drop tombstones.")
        .define("delete.handling.mode", ConfigType.STRING, "drop", one_of(*_LEGACY_MODES), importance="medium",
                doc="Legacy (used only when delete.tombstone.handling.mode is not set): drop, none (a null-valued "
                    "record) or rewrite (the before row with __deleted=true; other rows get __deleted=false).")
        .define("add.fields", ConfigType.LIST, "", importance="low",
                doc="Envelope fields to append to the row, named prefix + field (prefix + struct_field for "
                    "struct.field)." + _FIELD_DOC)
        .define("add.fields.prefix", ConfigType.STRING, "__", importance="low", doc="Prefix of added fields.")
        .define("add.headers", ConfigType.LIST, "", importance="low",
                doc="Envelope fields to add as headers, named as add.fields names fields." + _FIELD_DOC)
        .define("add.headers.prefix", ConfigType.STRING, "__", importance="low", doc="Prefix of added headers.")
        .define("route.by.field", ConfigType.STRING, "", importance="low",
                doc="A row field (before's for a delete) whose value becomes the topic; null or empty keeps it.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        mode = c["delete.tombstone.handling.mode"]
        legacy = any(configs.get(k) not in (None, "") for k in ("drop.tombstones", "delete.handling.mode"))
        if mode is None and legacy:
            self._keep_tombstones = not c["drop.tombstones"]
            self._delete = {"drop": _DROP, "none": _NULL_VALUE, "rewrite": _REWRITE}[c["delete.handling.mode"].lower()]
        else:
            if mode is not None and legacy:
                log.warning("ExtractNewRecordState: delete.tombstone.handling.mode is set, so drop.tombstones and "
                            "delete.handling.mode are ignored")
            mode = (mode or "tombstone").lower()
            self._keep_tombstones = mode == "rewrite-with-tombstone"
            self._delete = {"drop": _DROP, "tombstone": _NULL_VALUE, "delete-to-tombstone": _TOMBSTONE}.get(
                mode, _REWRITE)
        self.rewrite = self._delete == _REWRITE
        self.add_fields = _field_refs("add.fields", c["add.fields.prefix"], c["add.fields"])
        self.add_headers = _field_refs("add.headers", c["add.headers.prefix"], c["add.headers"])
        self.route_by_field = c["route.by.field"] or None
        with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._after, self._before = ExtractField.Value(), ExtractField.Value()
        self._after.configure({"field": "after"})
        self._before.configure({"field": "before"})
        self._removed, self._updated = InsertField.Value(), InsertField.Value()
        for delegate, flag in ((self._removed, "true"), (self._updated, "false")):
            delegate.configure({"static.field": DELETED_FIELD, "static.value": flag,
                                REPLACE_NULL_WITH_DEFAULT: with_default})
        self.with_default = with_default
        self._cache = SchemaCache(64)

    # ------------------------------------------------------------------------------------ apply

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = record.value
        if value is None:
            if self.add_headers:
                record = record.new_record(headers=record.headers + tuple(
                    (ref.new_name, b"d") for ref in self.add_headers if ref.field == "op"))
            return record if self._keep_tombstones else None
        schemaless = record.value_schema is None
        if not (_is_schemaless_envelope(value) if schemaless else is_envelope(record.value_schema)):
            return record
        if not schemaless and not isinstance(value, Struct):
            raise DataException(f"ExtractNewRecordState: the value has the envelope schema "
                                f"{record.value_schema.name!r} but is a {type_name(value)}, not a Struct")
        if self.add_headers:
            record = record.new_record(headers=record.headers + self._headers(value, schemaless))
        envelope = record
        unwrapped = self._after.apply(envelope)
        if unwrapped.value is None:
            before = self._before.apply(envelope)
            if before.value is None:  # a truncate: no row to give
                return None
            if self._delete == _DROP:
                return None
            if self._delete == _TOMBSTONE:
                unwrapped = envelope.new_record(value_schema=None, value=None)
            elif self._delete == _REWRITE:
                unwrapped = _marked(self._removed, before)
            unwrapped = self._route(unwrapped, before.value)
            if unwrapped.value is not None:
                unwrapped = self._with_fields(envelope, unwrapped)
            return unwrapped
        if self.rewrite:
            unwrapped = _marked(self._updated, unwrapped)
        unwrapped = self._route(unwrapped, unwrapped.value)
        return self._with_fields(envelope, unwrapped)

    def _headers(self, value: Any, schemaless: bool) -> tuple:
        out = []
        for ref in self.add_headers:
            if schemaless:
                present, v = ref.schemaless(value)
            else:
                present, v = ref.schema(value.schema) is not None, None
                if present:
                    v = ref.value(value)
            if present:
                out.append((ref.new_name, header_bytes(v)))
        return tuple(out)

    def _route(self, record: ConnectRecord, row: Any) -> ConnectRecord:
        if self.route_by_field is None:
            return record
        if isinstance(row, Struct):
            topic = row.get(self.route_by_field)
        elif isinstance(row, dict):
            topic = row.get(self.route_by_field)
        else:
            raise DataException(f"ExtractNewRecordState route.by.field={self.route_by_field!r}: the row is a "
                                f"{type_name(row)}, not a struct or map")
        if topic is not None and not isinstance(topic, str):
            raise DataException(f"ExtractNewRecordState route.by.field={self.route_by_field!r}: the field holds a "
                                f"{type_name(topic)}, not a string topic name")
        return record.new_record(topic=topic) if topic and topic.strip() else record

    def _with_fields(self, envelope: ConnectRecord, unwrapped: ConnectRecord) -> ConnectRecord:
        if not self.add_fields:
            return unwrapped
        row = unwrapped.value
        if unwrapped.value_schema is None:
            if not isinstance(row, dict):
                raise DataException(f"ExtractNewRecordState add.fields: the row is a {type_name(row)}, not a map")
            row = dict(row)
            for ref in self.add_fields:
                present, v = ref.schemaless(envelope.value)
                if present:
                    row[ref.new_name] = v
            return unwrapped.new_record(value=row)
        if not isinstance(row, Struct):
            raise DataException(f"ExtractNewRecordState add.fields: the row is a {type_name(row)}, not a Struct")
        schema, refs = self._cache.get((row.schema, envelope.value_schema), self._added_schema)
        values = [row.get_without_default(f.name) for f in row.schema.fields]
        values += [ref.value(envelope.value) for ref in refs]
        return unwrapped.new_record(value_schema=schema, value=trusted_struct(schema, values))

    def _added_schema(self, key: tuple[Schema, Schema]) -> tuple[Schema, list[_FieldRef]]:
        """(the row schema with the added fields, the refs the envelope has), for (row schema, envelope schema)."""
        row_schema, envelope_schema = key
        builder = copy_schema_basics(row_schema, SchemaBuilder.struct())
        if row_schema.optional:
            builder.optional()
        for f in row_schema.fields:
            builder.field(f.name, f.schema)
        refs = self.added_fields(envelope_schema)
        for ref in refs:
            try:
                builder.field(ref.new_name, ref.schema(envelope_schema))
            except DataException:
                raise DataException(f"ExtractNewRecordState add.fields: the row already has a field "
                                    f"{ref.new_name!r}; set add.fields.prefix or rename it with :new_name") from None
        return builder.build(), refs

    def added_fields(self, envelope_schema: Schema) -> list[_FieldRef]:
        """The ``add.fields`` entries that rows from envelopes of ``envelope_schema`` get, in order."""
        return [ref for ref in self.add_fields if ref.schema(envelope_schema) is not None]

    def close(self) -> None:
        self._cache.clear()
        for delegate in (self._after, self._before, self._removed, self._updated):
            delegate.close()


__all__ = ["DELETED_FIELD", "ExtractNewRecordState", "is_envelope"]
