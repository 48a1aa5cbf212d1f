"""Flatten: nested structs and maps become one level, field names joined by a delimiter
(Kafka Connect's ``Flatten``)."""

from __future__ import annotations

from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType
from ..connect.data import Schema, SchemaBuilder, Struct, Type
from ..connect.errors import DataException
from ._keyvalue import KeyOrValue, SchemaCache, copy_schema_basics, key_and_value, parse_config, trusted_struct

_LEAF_TYPES = frozenset(t for t in Type if t.is_primitive) | {Type.ARRAY}


@key_and_value("Flatten")
class Flatten(KeyOrValue):
    """Flatten a nested key or value: ``{"a": {"b": 1}, "c": [..]}`` becomes
    ``{"a.b": 1, "c": [..]}`` (``delimiter``, default ``.``).

    Schema'd: nested Struct fields are expanded; a field under an optional struct
    becomes optional, and takes its default from the field or, failing that, from the
    parent struct's default. Arrays are kept as they are (their contents too); map
    fields are refused, as in Kafka Connect. Schemaless: nested dicts are expanded,
    everything else kept. A null key or value passes through.
    """

    purpose = "Flatten"
    config_def = ConfigDef().define("delimiter", ConfigType.STRING, ".",
                                    doc="Put between the names of nested fields to name the flattened field.")

    def configure(self, configs: Mapping[str, Any]) -> None:
        self._delimiter = parse_config(self, configs)["delimiter"]
        self._cache = SchemaCache()

    def _name(self, prefix: str, name: str) -> str:
        return prefix + self._delimiter + name if prefix else name

    def apply(self, record):
        schema, value = self.operand(record)
        if value is None and schema is None:
            return record
        if schema is None:
            out: dict[str, Any] = {}
            self._flatten_map(self.require_map(value), "", out)
            return self.updated(record, None, out)
        if value is not None:
            self.require_struct(value)
        if schema.type is not Type.STRUCT:
            raise DataException(f"Flatten needs a struct {self.side} schema, got {schema.type.value}")
        new_schema = self._cache.get(schema, self._flat_schema)
        if value is None:
            return self.updated(record, new_schema, None)
        values: list[Any] = []
        _flatten_struct(value, values)
        return self.updated(record, new_schema, trusted_struct(new_schema, values))

    def _flatten_map(self, value: dict, prefix: str, out: dict) -> None:
        for key, v in value.items():
            name = self._name(prefix, str(key))
            if isinstance(v, dict):
                self._flatten_map(v, name, out)
            elif isinstance(v, Struct):
                raise DataException(f"Flatten: field {name!r} of a schemaless {self.side} holds a Struct; "
                                    "a Struct needs its schema (use a converter with schemas enabled)")
            else:
                out[name] = v

    def _flat_schema(self, schema: Schema) -> Schema:
        builder = copy_schema_basics(schema, SchemaBuilder.struct())
        if schema.optional:
            builder.optional()
        self._add_fields(schema, "", builder, schema.optional, schema.default)
        return builder.build()

    def _add_fields(self, schema: Schema, prefix: str, builder: SchemaBuilder, optional: bool, parent_default) -> None:
        for f in schema.fields:
            name = self._name(prefix, f.name)
            field_optional = optional or f.schema.optional
            default = f.schema.default
            if default is None and isinstance(parent_default, Struct):
                default = parent_default.get(f.name)
            t = f.schema.type
            if t is Type.STRUCT:
                self._add_fields(f.schema, name, builder, field_optional, default)
            elif t in _LEAF_TYPES:
                leaf = f.schema
                if field_optional != leaf.optional or default is not leaf.default:
                    leaf = leaf.copy(optional=field_optional, default=default)
                try:
                    builder.field(name, leaf)
                except DataException:
                    raise DataException(f"Flatten: two fields of the {self.side} schema flatten to the same name "
                                        f"{name!r}; set a delimiter that does not occur in field names") from None
            else:
                raise DataException(f"Flatten does not support {t.value} fields in a schema'd {self.side} "
                                    f"(field {name!r}); drop or extract that field first")


def _flatten_struct(struct: Struct | None, out: list[Any], schema: Schema | None = None) -> None:
    """Append the leaf values of ``struct`` (depth first, in field order) to ``out``; a null
    nested struct contributes nulls for all its leaves."""
    schema = struct.schema if struct is not None else schema
    for f in schema.fields:
        v = struct.get(f.name) if struct is not None else None
        if f.schema.type is Type.STRUCT:
            _flatten_struct(v, out, f.schema)
        else:
            out.append(v)
