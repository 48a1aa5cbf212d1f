"""Masking fields of a key or value (Kafka Connect's MaskField).

Each masked field gets the empty value of its type (``0``, ``""``, ``false``, the epoch for
the date and time types, an empty list or map), or with ``replacement`` that text as a
number or string of the field's type. Works on a Struct with its schema and on a
schemaless dict; the plan of which positions to mask is built once per input schema.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from typing import Any, Callable, Mapping

from ..connect.config import ConfigDef, ConfigType, non_empty
from ..connect.data import Date, Decimal, Schema, Time, Timestamp, Type
from ..connect.errors import DataException
from ._keyvalue import (
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    checked_struct,
    define_replace_null_with_default,
    key_and_value,
    parse_config,
    struct_values,
    type_name,
)

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

_MASK_BY_LOGICAL: dict[str, Any] = {
    Date.LOGICAL_NAME: _dt.date(1970, 1, 1),
    Time.LOGICAL_NAME: _dt.time(0),
    Timestamp.LOGICAL_NAME: _EPOCH,
    Decimal.LOGICAL_NAME: _decimal.Decimal(0),
}
_MASK_BY_TYPE: dict[Type, Any] = {
    Type.INT8: 0, Type.INT16: 0, Type.INT32: 0, Type.INT64: 0,
    Type.FLOAT32: 0.0, Type.FLOAT64: 0.0,
    Type.BOOLEAN: False, Type.STRING: "", Type.BYTES: b"",
}


def _empty_of(kind: type) -> Callable[[Any], Any]:
    return lambda v: kind()  # a fresh list or dict for every record: callers may mutate theirs


def _constant(masked: Any) -> Callable[[Any], Any]:
    return lambda v: masked


def _unmaskable(what: str, with_replacement: bool) -> Callable[[Any], Any]:
    def fail(v):
        raise DataException(f"cannot mask a {what} value" + (" with a custom replacement, which applies to "
                            "numeric and string fields only" if with_replacement else ""))
    return fail


def _replacement(kind: str, text: str) -> Callable[[Any], Any]:
    """A masker putting ``text`` converted to ``kind`` (int, float, decimal, string)."""
    try:
        if kind == "int":
            masked: Any = int(text.strip())
        elif kind == "float":
            masked = float(text)
        elif kind == "decimal":
            masked = _decimal.Decimal(text.strip())
            if not masked.is_finite():
                raise ValueError(text)
        else:
            masked = text
    except (ValueError, _decimal.InvalidOperation):
        def fail(v):
            raise DataException(f"replacement {text!r} is not a valid {kind}, the field's type; set a "
                                "replacement that converts to the type of every masked field") from None
        return fail
    return _constant(masked)


def _decimal_replacement(text: str, scale: int) -> Callable[[Any], Any]:
    """A masker putting ``text`` as a Decimal of ``scale`` fractional digits at most."""
    masker = _replacement("decimal", text)
    try:
        masked = masker(None)
    except DataException:
        return masker
    if masked.as_tuple().exponent < -scale:
        def fail(v):
            raise DataException(f"replacement {text!r} has more fractional digits than the field's Decimal "
                                f"scale {scale} allows; set a replacement with at most {scale}")
        return fail
    return masker


@key_and_value("MaskField")
class MaskField(KeyOrValue):
    """Replace the values of ``fields`` with their type's empty value -- 0, 0.0, false, "",
    empty bytes, empty list or map, Decimal 0, the epoch for Date/Time/Timestamp -- or with
    ``replacement`` converted to the field's type (numeric and string fields only).
    Null field values stay null; fields not present are left alone."""

    purpose = "MaskField"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("fields", ConfigType.LIST, validator=non_empty, importance="high", doc="Names of fields to mask.")
        .define("replacement", ConfigType.STRING, None,
                lambda k, v: "must not be empty (leave it unset to mask with empty values)" if v == "" else None,
                importance="low", doc="Custom replacement for every masked value (numeric or string fields only).")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._fields = frozenset(c["fields"])
        self._text = c["replacement"]
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()
        text = self._text
        if text is None:
            self._by_py_type: dict[type, Callable[[Any], Any]] = {
                bool: _constant(False), int: _constant(0), float: _constant(0.0), str: _constant(""),
                bytes: _constant(b""), bytearray: _constant(b""), _decimal.Decimal: _constant(_decimal.Decimal(0)),
                _dt.datetime: _constant(_EPOCH), _dt.date: _constant(_dt.date(1970, 1, 1)),
                _dt.time: _constant(_dt.time(0)), list: _empty_of(list), dict: _empty_of(dict),
            }
        else:
            self._by_py_type = {
                int: _replacement("int", text), float: _replacement("float", text), str: _replacement("string", text),
                _decimal.Decimal: _replacement("decimal", text),
            }

    def _masker_for(self, schema: Schema) -> Callable[[Any], Any]:
        what = schema.name if schema.name in _MASK_BY_LOGICAL else schema.type.value
        if self._text is not None:
            if schema.name == Decimal.LOGICAL_NAME:
                return _decimal_replacement(self._text, Decimal.scale(schema))
            if schema.name is None or schema.name not in _MASK_BY_LOGICAL:
                if schema.type in (Type.INT8, Type.INT16, Type.INT32, Type.INT64):
                    return _replacement("int", self._text)
                if schema.type in (Type.FLOAT32, Type.FLOAT64):
                    return _replacement("float", self._text)
                if schema.type is Type.STRING:
                    return _replacement("string", self._text)
            return _unmaskable(what, True)
        if schema.name in _MASK_BY_LOGICAL:
            return _constant(_MASK_BY_LOGICAL[schema.name])
        if schema.type in _MASK_BY_TYPE:
            return _constant(_MASK_BY_TYPE[schema.type])
        if schema.type is Type.ARRAY:
            return _empty_of(list)
        if schema.type is Type.MAP:
            return _empty_of(dict)
        return _unmaskable(what, False)

    def _plan(self, schema: Schema) -> tuple[list[tuple[int, Callable]], frozenset[int]]:
        plan = [(i, self._masker_for(f.schema)) for i, f in enumerate(schema.fields) if f.name in self._fields]
        return plan, frozenset(i for i, _ in plan)

    def _mask_plain(self, name: str, v: Any) -> Any:
        if v is None:
            return None
        masker = self._by_py_type.get(type(v))
        if masker is None and not isinstance(v, bool):  # a bool is an int, but never masked with a number
            for kind, m in self._by_py_type.items():
                if isinstance(v, kind):
                    masker = m
                    break
        if masker is None:
            masker = _unmaskable(type_name(v), self._text is not None)
        try:
            return masker(v)
        except DataException as e:
            raise DataException(f"MaskField, field {name!r}: {e}") from None

    def apply(self, record):
        schema, value = self.operand(record)
        if schema is None:
            if value is None:
                return record
            updated = dict(self.require_map(value))
            for name in self._fields:
                if name in updated:
                    updated[name] = self._mask_plain(name, updated[name])
            return self.updated(record, None, updated)
        if value is None:
            return record
        struct = self.require_struct(value)
        plan, checked = self._cache.get(struct.schema, self._plan)
        values = struct_values(struct, self._with_default)
        fields = struct.schema._fields
        for i, masker in plan:
            if values[i] is not None:
                try:
                    values[i] = masker(values[i])
                except DataException as e:
                    raise DataException(f"MaskField, field {fields[i].name!r}: {e}") from None
        return self.updated(record, struct.schema, checked_struct(struct.schema, values, checked))


__all__ = ["MaskField"]
