"""Replacing a key or value by one of its fields, or wrapping it in one (Kafka Connect's
ExtractField and HoistField).

ExtractField takes one field (a dotted path with ``field.syntax.version=V2``) of a Struct or
map as the whole key or value; HoistField wraps the key or value in a Struct (or, schemaless,
a map) of one field. Updated schemas are built once per input schema and cached.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType, non_empty, one_of
from ..connect.data import Schema, SchemaBuilder, Type
from ..connect.errors import DataException
from ._keyvalue import (
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    checked_struct,
    config_error,
    define_replace_null_with_default,
    field_value,
    key_and_value,
    parse_config,
    type_name,
)


def _parse_path_v2(path: str) -> list[str]:
    """Kafka Connect's KIP-821 dotted path: ``a.b.c``; backticks quote a name holding dots
    (```a.b`.c``), a backslash escapes a backtick inside them."""
    steps: list[str] = []
    i, n = 0, len(path)
    while 0 <= i < n:
        if path[i] != "`":
            dot = path.find(".", i)
            if dot >= 0:
                steps.append(path[i:dot])
                i = dot + 1
            else:
                steps.append(path[i:])
                i = n
            continue
        opened = i
        i += 1
        start, name = i, []
        while True:
            i = path.find("`", i)
            if i == -1:
                raise ValueError(f"incomplete backtick pair in path {path!r}: add a backslash before the "
                                 f"backtick at position {opened} to escape it")
            escaped = path[i - 1] == "\\"
            if i >= n - 1:
                if escaped:
                    raise ValueError(f"incomplete backtick pair in path {path!r}: add a backslash before the "
                                     f"backtick at position {opened} to escape it")
                name.append(path[start:i])
                steps.append("".join(name))
                i += 1
                break
            if path[i + 1] != ".":
                i += 1
                continue
            if escaped:
                name.append(path[start:i - 1] + "`")
                i += 1
                start = i
                continue
            name.append(path[start:i])
            steps.append("".join(name))
            i += 2
            break
    if path.endswith("."):
        steps.append("")
    return steps


def _field_path(version: str, path: str) -> list[str]:
    return _parse_path_v2(path) if version.upper() == "V2" else [path]


@key_and_value("ExtractField")
class ExtractField(KeyOrValue):
    """Replace the key or value with one of its fields (``field``); with
    ``field.syntax.version=V2``, a nested field by dotted path (``address.city``;
    backticks around a name holding dots). The schema becomes that field's schema.
    A null key or value, or a schemaless one without the field, gives null."""

    purpose = "ExtractField"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("field", ConfigType.STRING, validator=non_empty, doc="Field name (V2: dotted path) to extract.")
        .define("field.syntax.version", ConfigType.STRING, "V1", one_of("V1", "V2"),
                doc="V1: field names at the top level only; V2: dotted paths into nested fields.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._path_text = c["field"]
        try:
            self._path = _field_path(c["field.syntax.version"], c["field"])
        except ValueError as e:
            raise config_error("field", c["field"], str(e)) from None
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()

    def apply(self, record):
        schema, value = self.operand(record)
        if schema is None:
            if value is None:
                return self.updated(record, None, None)
            current: Any = self.require_map(value)
            for step in self._path[:-1]:
                current = current.get(step)
                if current is None:
                    return self.updated(record, None, None)
                if not isinstance(current, dict):
                    raise DataException(f"ExtractField {self._path_text!r}: {step!r} holds a {type_name(current)}, "
                                        "not a map, so it has no nested fields")
            return self.updated(record, None, current.get(self._path[-1]))
        field_schema = self._cache.get(schema, self._field_schema)
        if value is None:
            return self.updated(record, field_schema, None)
        current = self.require_struct(value)
        for step in self._path[:-1]:
            current = current.get(step)
            if current is None:
                return self.updated(record, field_schema, None)
        return self.updated(record, field_schema, field_value(current, self._path[-1], self._with_default))

    def _field_schema(self, schema: Schema) -> Schema:
        current = schema
        for i, step in enumerate(self._path):
            f = current.field(step) if current.type is Type.STRUCT else None
            if f is None:
                where = "the " + self.side + " schema" if i == 0 else repr(".".join(self._path[:i]))
                names = ", ".join(x.name for x in current.fields) if current.type is Type.STRUCT else "none"
                raise DataException(f"ExtractField: unknown field {self._path_text!r}: {where} has no field "
                                    f"{step!r} (fields: {names})")
            current = f.schema
        return current


# ------------------------------------------------------------------------------------ HoistField


@key_and_value("HoistField")
class HoistField(KeyOrValue):
    """Wrap the key or value in a single ``field``: a Struct with one field (of the old
    schema) when schema'd, a one-entry dict otherwise. ``42`` becomes ``{"id": 42}``."""

    purpose = "HoistField"
    config_def = ConfigDef().define("field", ConfigType.STRING, validator=non_empty,
                                    doc="Name of the single field of the resulting Struct or map.")

    def configure(self, configs: Mapping[str, Any]) -> None:
        self._field = parse_config(self, configs)["field"]
        self._cache = SchemaCache()

    def apply(self, record):
        schema, value = self.operand(record)
        if schema is None:
            return self.updated(record, None, {self._field: value})
        new_schema = self._cache.get(schema, lambda s: SchemaBuilder.struct().field(self._field, s).build())
        return self.updated(record, new_schema, checked_struct(new_schema, [value]))


__all__ = ["ExtractField", "HoistField"]
