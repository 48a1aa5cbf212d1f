"""Transforms of record headers: HeaderFrom, InsertHeader, DropHeaders (Kafka Connect's).

Record headers are ``(name, bytes)`` pairs. Values put into headers are written
as Kafka Connect's default header converter (``SimpleHeaderConverter``) writes
them: strings as UTF-8, numbers and booleans as their text (``42``, ``true``),
bytes as base64, dates as ISO-8601, and structs, maps and lists as Kafka
Connect's JSON-like text (``{"city":"Paris","zip":75001}``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal as _decimal
from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType, non_empty, one_of
from ..connect.data import Schema, SchemaBuilder, Struct, Type
from ..connect.errors import DataException
from ..connect.transforms import Transformation
from ._keyvalue import (
    KAFKA_PACKAGE,
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    config_error,
    copy_schema_basics,
    define_replace_null_with_default,
    field_value,
    key_and_value,
    parse_config,
    struct_values,
    trusted_struct,
    type_name,
)
from .cast import iso_string, java_double_string


def header_bytes(value: Any) -> bytes | None:
    """``value`` as the bytes of a header (``None`` stays ``None``)."""
    if value is None:
        return None
    out: list[str] = []
    _append(out, value, False)
    return "".join(out).encode("utf-8")


def _append(out: list[str], value: Any, embedded: bool) -> None:
    if value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, str):
        out.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' if embedded else value)
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(java_double_string(value))
    elif isinstance(value, _decimal.Decimal):
        out.append(str(value))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        text = base64.b64encode(bytes(value)).decode("ascii")
        out.append(f'"{text}"' if embedded else text)
    elif isinstance(value, (_dt.date, _dt.time)):
        out.append(iso_string(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _append(out, item, True)
        out.append("]")
    elif isinstance(value, (dict, Struct)):
        items = value.items() if isinstance(value, dict) else ((f.name, value.get(f.name)) for f in value.schema.fields)
        out.append("{")
        for i, (k, v) in enumerate(items):
            if i:
                out.append(",")
            _append(out, k, True)
            out.append(":")
            _append(out, v, True)
        out.append("}")
    else:
        raise DataException(f"cannot write a {type_name(value)} into a header")


@key_and_value("HeaderFrom")
class HeaderFrom(KeyOrValue):
    """Copy (``operation=copy``) or move (``operation=move``: also removed from the key or
    value) ``fields`` into ``headers``, the n-th field to the n-th header, appended after
    the record's existing headers (names may repeat). A null key or value passes through."""

    purpose = "HeaderFrom"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("fields", ConfigType.LIST, validator=non_empty, importance="high",
                doc="Field names whose values go to headers.")
        .define("headers", ConfigType.LIST, validator=non_empty, importance="high",
                doc="Header names, in the order of fields.")
        .define("operation", ConfigType.STRING, validator=one_of("move", "copy"), importance="high",
                doc="move: remove the fields from the key or value; copy: keep them.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._fields, self._headers = list(c["fields"]), list(c["headers"])
        if len(self._fields) != len(self._headers):
            raise config_error("headers", ",".join(self._headers),
                               f"must name as many headers ({len(self._headers)}) as fields lists fields "
                               f"({len(self._fields)}): the n-th field goes to the n-th header")
        self._move = c["operation"].lower() == "move"
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()

    def apply(self, record):
        schema, value = self.operand(record)
        if value is None:
            return record
        headers = list(record.headers)
        if schema is None:
            value = self.require_map(value)
            for field, header in zip(self._fields, self._headers):
                headers.append((header, header_bytes(value.get(field))))
            if self._move:
                moved = set(self._fields)
                value = {k: v for k, v in value.items() if k not in moved}
            return self.updated(record, None, value, headers=tuple(headers))
        struct = self.require_struct(value)
        new_schema, positions = self._cache.get(struct.schema, self._plan)
        for field, header in zip(self._fields, self._headers):
            headers.append((header, header_bytes(field_value(struct, field, self._with_default))))
        if self._move:
            old = struct_values(struct, self._with_default)
            struct = trusted_struct(new_schema, [old[i] for i in positions])
        return self.updated(record, new_schema, struct, headers=tuple(headers))

    def _plan(self, schema: Schema) -> tuple[Schema, list[int]]:
        if schema.type is not Type.STRUCT:
            raise DataException(f"HeaderFrom needs a struct {self.side} schema, got {schema.type.value}")
        for name in self._fields:
            if schema.field(name) is None:
                raise DataException(f"HeaderFrom: field {name!r} is not in the {self.side} schema "
                                    f"{schema.name or ''} (fields: {', '.join(f.name for f in schema.fields)})")
        if not self._move:
            return schema, []
        builder = copy_schema_basics(schema, SchemaBuilder.struct())
        if schema.optional:
            builder.optional()
        positions = []
        for i, f in enumerate(schema.fields):
            if f.name not in self._fields:
                builder.field(f.name, f.schema)
                positions.append(i)
        return builder.build(), positions


class InsertHeader(Transformation):
    """Append header ``header`` with the text ``value.literal`` (UTF-8) to every record."""

    kafka_class = KAFKA_PACKAGE + "InsertHeader"
    config_def = (
        ConfigDef()
        .define("header", ConfigType.STRING, validator=non_empty, importance="high", doc="The header's name.")
        .define("value.literal", ConfigType.STRING, importance="high",
                doc="The header's value on every record, as literal text.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._header = (c["header"], c["value.literal"].encode("utf-8"))

    def apply(self, record):
        return record.new_record(headers=record.headers + (self._header,))


class DropHeaders(Transformation):
    """Remove every header named in ``headers`` (all of its values)."""

    kafka_class = KAFKA_PACKAGE + "DropHeaders"
    config_def = ConfigDef().define("headers", ConfigType.LIST, validator=non_empty, importance="high",
                                    doc="Names of the headers to remove.")

    def configure(self, configs: Mapping[str, Any]) -> None:
        self._drop = frozenset(parse_config(self, configs)["headers"])

    def apply(self, record):
        drop = self._drop
        if not any(name in drop for name, _ in record.headers):
            return record
        return record.new_record(headers=tuple(h for h in record.headers if h[0] not in drop))
