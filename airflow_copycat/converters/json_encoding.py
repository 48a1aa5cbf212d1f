"""Connect values to JSON text, as Kafka's ``JsonConverter.convertToJson`` writes them.

Contract: ``JsonEncoderMixin._to_json(schema, value, path)`` returns one value's compact JSON
text, byte for byte Kafka's: ``bytes`` as padded base64; ``Decimal`` as base64 of the unscaled
value or, with ``decimal.format=NUMERIC``, a number as ``BigDecimal.toString()`` writes it;
``Date`` / ``Time`` / ``Timestamp`` as ints; floats as Java writes them
(:mod:`.java_numbers`); strings escaped as Jackson does (:mod:`.json_text`); maps with string
keys as objects, other maps as ``[key, value]`` arrays. ``None`` takes the schema's default
(with ``replace.null.with.default``) or ``null`` if optional. A value that does not fit its
schema raises ``DataException`` naming ``path``. Without a schema the type is inferred
(Kafka's ``ConnectSchema.schemaType``). The mixin is only used by
:class:`~.json_converter.JsonConverter`, which supplies ``decimal_numeric`` and
``replace_null_with_default``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal as _decimal
from typing import Any, Mapping

from ..connect.data import Date, Decimal, Schema, Struct, Time, Timestamp, Type
from ..connect.errors import DataException
from .java_numbers import _as_float32, _java_double_json, _java_float_json
from .json_schemas import (
    _INT8,
    _INT16,
    _INT32,
    _INT64,
    _INT_BOUNDS,
    _INT_FIELD,
    _INT_RANGES,
    _STR_FIELD,
    _STRING,
    _field_plan,
)
from .json_text import _quote


class JsonEncoderMixin:
    """Connect values -> JSON text for :class:`~.json_converter.JsonConverter` (see the module docstring)."""

    def _to_json(self, schema: Schema | None, value: Any, path: str) -> str:
        """One value as JSON text (Kafka's ``convertToJson``)."""
        if value is None:
            if schema is None:
                return "null"
            if schema.default is not None and self.replace_null_with_default:
                return self._to_json(schema, schema.default, path)
            if schema.optional:
                return "null"
            raise DataException(f"{path}: null for a required {schema.type.value} schema that has no default")

        if schema is not None:
            if schema.name is not None:
                logical = _LOGICAL_TO_JSON.get(schema.name)
                if logical is not None:
                    return logical(self, schema, value, path)
            t = schema.type
        else:
            t = _infer_type(value, path)
            if t is Type.STRUCT:
                schema = value.schema  # Kafka raises here; the Struct knows its schema

        # each type's checks as before; the commonest types are tested first, by identity
        if t is _STRING:
            if not isinstance(value, str):
                raise _wrong_type(path, t, value)
            return _quote(value)
        if t is _INT32 or t is _INT64 or t is _INT16 or t is _INT8:
            if not isinstance(value, int) or isinstance(value, bool):
                raise _wrong_type(path, t, value)
            lo, hi = _INT_BOUNDS[id(t)]
            if not lo <= value <= hi:
                raise DataException(f"{path}: {value} is out of range for {t.value}")
            return str(value)
        if t is Type.FLOAT64:
            return _java_double_json(_as_float(value, t, path))
        if t is Type.FLOAT32:
            return _java_float_json(_as_float32(_as_float(value, t, path), path))
        if t is Type.BOOLEAN:
            if not isinstance(value, bool):
                raise _wrong_type(path, t, value)
            return "true" if value else "false"
        if t is Type.BYTES:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise _wrong_type(path, t, value)
            return '"' + base64.b64encode(value).decode("ascii") + '"'
        if t is Type.ARRAY:
            if not isinstance(value, (list, tuple)):
                raise _wrong_type(path, t, value)
            items = None if schema is None else schema.value_schema
            return "[" + ",".join(self._to_json(items, v, f"{path}[{i}]") for i, v in enumerate(value)) + "]"
        if t is Type.MAP:
            if not isinstance(value, Mapping):
                raise _wrong_type(path, t, value)
            return self._map_to_json(schema, value, path)
        # STRUCT
        if not isinstance(value, Struct):
            raise _wrong_type(path, t, value)
        if value.schema is not schema and value.schema != schema:
            raise DataException(f"{path}: the Struct's schema {value.schema!r} does not match {schema!r}")
        if schema._positional:
            # value.get_without_default(f.name) is the value at f's position (equal schemas have
            # equal fields); a str or int of a plain string or integer field is written here,
            # as _to_json would write it
            to_json, quote = self._to_json, _quote
            return "{" + ",".join([
                member + (quote(v) if kind is _STR_FIELD and type(v) is str
                          else str(v) if kind is _INT_FIELD and type(v) is int and lo <= v <= hi
                          else to_json(field_schema, v, path + suffix))
                for v, (_, member, field_schema, suffix, kind, lo, hi)
                in zip(value._values, schema._memoized("json.fields", _field_plan))
            ]) + "}"
        return "{" + ",".join(
            _quote(f.name) + ":" + self._to_json(f.schema, value.get_without_default(f.name), f"{path}.{f.name}")
            for f in schema.fields) + "}"

    def _map_to_json(self, schema: Schema | None, value: Mapping, path: str) -> str:
        if schema is None:
            ks = vs = None
            object_mode = all(isinstance(k, str) for k in value)
        else:
            ks, vs = schema.key_schema, schema.value_schema
            object_mode = ks.type is Type.STRING
        parts = []
        for k, v in value.items():
            key = self._to_json(ks, k, f"{path} key {k!r}")
            val = self._to_json(vs, v, f"{path}[{k!r}]")
            if object_mode:
                parts.append(('"null"' if key == "null" else key) + ":" + val)  # Jackson's asText() of a null key
            else:
                parts.append("[" + key + "," + val + "]")
        return ("{" + ",".join(parts) + "}") if object_mode else ("[" + ",".join(parts) + "]")


# ---------------------------------------------------------------------- logical types


def _decimal_to_json(conv: JsonEncoderMixin, schema: Schema, value: Any, path: str) -> str:
    if not isinstance(value, _decimal.Decimal):
        raise DataException(f"{path}: Invalid type for Decimal, expected decimal.Decimal but was {type(value).__name__}")
    try:
        if conv.decimal_numeric:
            # BigDecimal.toString() and Python's to-sci-string follow the same rules
            return str(_decimal.Decimal(f"{Decimal.unscaled(schema, value)}E{-Decimal.scale(schema)}"))
        return '"' + base64.b64encode(Decimal.from_logical(schema, value)).decode("ascii") + '"'
    except DataException as e:
        raise DataException(f"{path}: {e}") from None


def _date_to_json(conv, schema, value, path) -> str:
    if not isinstance(value, _dt.date) or isinstance(value, _dt.datetime):
        raise DataException(f"{path}: Invalid type for Date, expected datetime.date but was {type(value).__name__}")
    return str(Date.from_logical(value))


def _time_to_json(conv, schema, value, path) -> str:
    if not isinstance(value, _dt.time):
        raise DataException(f"{path}: Invalid type for Time, expected datetime.time but was {type(value).__name__}")
    return str(Time.from_logical(value))


def _timestamp_to_json(conv, schema, value, path) -> str:
    if not isinstance(value, _dt.datetime):
        raise DataException(
            f"{path}: Invalid type for Timestamp, expected datetime.datetime but was {type(value).__name__}")
    return str(Timestamp.from_logical(value))


_LOGICAL_TO_JSON = {
    Decimal.LOGICAL_NAME: _decimal_to_json,
    Date.LOGICAL_NAME: _date_to_json,
    Time.LOGICAL_NAME: _time_to_json,
    Timestamp.LOGICAL_NAME: _timestamp_to_json,
}


# ---------------------------------------------------------------------- helpers


def _infer_type(value: Any, path: str) -> Type:
    """The Connect type of a value written without a schema (Kafka's ``ConnectSchema.schemaType``)."""
    if isinstance(value, bool):
        return Type.BOOLEAN
    if isinstance(value, int):
        if not _INT_RANGES[Type.INT64][0] <= value <= _INT_RANGES[Type.INT64][1]:
            raise DataException(f"{path}: {value} does not fit in an int64")
        return Type.INT64
    for py, t in ((float, Type.FLOAT64), (str, Type.STRING), ((bytes, bytearray, memoryview), Type.BYTES),
                  ((list, tuple), Type.ARRAY), (Mapping, Type.MAP), (Struct, Type.STRUCT)):
        if isinstance(value, py):
            return t
    raise DataException(
        f"{path}: {type(value).__name__} has no Connect type without a schema"
        + ("; give the value a logical-type schema" if isinstance(value, (_decimal.Decimal, _dt.date, _dt.time)) else ""))


def _wrong_type(path: str, t: Type, value: Any) -> DataException:
    return DataException(f"{path}: {type(value).__name__} {value!r:.50} is not valid for a {t.value} schema")


def _as_float(value: Any, t: Type, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong_type(path, t, value)
    try:
        return float(value)
    except OverflowError:
        raise DataException(f"{path}: {value} is out of range for {t.value}") from None
