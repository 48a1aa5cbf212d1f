"""Parsed JSON to Connect values, as Kafka's ``JsonConverter.convertToConnect`` reads them.

Contract: ``JsonDecoderMixin._to_connect(schema, node, path)`` turns one value parsed from JSON
text (numbers other than integers as ``decimal.Decimal``, see :mod:`.json_text`) into the
Connect value of ``schema``: a ``Struct`` for a struct, ``dict`` for a map (an object, or an
array of ``[key, value]`` pairs for non-string keys), ``bytes`` from base64, the logical
types' Python values, ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"`` as the floats they stand
for, float32 as ``Float.parseFloat`` reads it. ``null`` takes the schema's default (with
``replace.null.with.default``) or ``None`` if optional. A node whose JSON type does not match
the schema raises ``DataException`` naming ``path`` (Kafka would yield ``0`` / ``null``).
Without a schema the value is plain Python, numbers as ``float``. The mixin is only used by
:class:`~.json_converter.JsonConverter`, which supplies ``replace_null_with_default``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import decimal as _decimal
import json
from typing import Any

from ..connect.data import Date, Decimal, Schema, Struct, Time, Timestamp, Type
from ..connect.errors import DataException
from .java_numbers import _to_f32
from .json_schemas import (
    _INT8,
    _INT16,
    _INT32,
    _INT32_RANGE,
    _INT64,
    _INT_BOUNDS,
    _INT_FIELD,
    _STR_FIELD,
    _STRING,
    _field_plan,
)

_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class JsonDecoderMixin:
    """Parsed JSON -> Connect values for :class:`~.json_converter.JsonConverter` (see the module docstring)."""

    def _to_connect(self, schema: Schema | None, node: Any, path: str) -> Any:
        """One parsed JSON value as a Connect value (Kafka's ``convertToConnect``)."""
        if schema is None:
            return _schemaless(node)
        t = schema.type
        if node is None:
            if schema.default is not None and self.replace_null_with_default:
                return schema.default
            if schema.optional:
                return None
            raise DataException(f"{path}: invalid null value for required {t.value} field")

        if schema.name is not None:
            logical = _LOGICAL_TO_CONNECT.get(schema.name)
            if logical is not None:
                return logical(schema, node, path)

        # each type's checks as before; the commonest types are tested first, by identity
        if t is _STRING:
            if not isinstance(node, str):
                raise _wrong_json(path, t, node)
            return node
        if t is _INT32 or t is _INT64 or t is _INT16 or t is _INT8:
            n = node if type(node) is int else _json_int(node)
            if n is None:
                raise _wrong_json(path, t, node)
            lo, hi = _INT_BOUNDS[id(t)]
            if not lo <= n <= hi:
                raise DataException(f"{path}: {n} is out of range for {t.value}")
            return n
        if t is Type.FLOAT64 or t is Type.FLOAT32:
            if isinstance(node, str) and node in _NON_FINITE:
                return _NON_FINITE[node]
            if isinstance(node, bool) or not isinstance(node, (int, _decimal.Decimal)):
                raise _wrong_json(path, t, node)
            if t is Type.FLOAT32:
                return _to_f32(node)
            try:
                return float(node)
            except OverflowError:
                raise DataException(f"{path}: {node} is out of range for float64") from None
        if t is Type.BOOLEAN:
            if not isinstance(node, bool):
                raise _wrong_json(path, t, node)
            return node
        if t is Type.BYTES:
            if not isinstance(node, str):
                raise _wrong_json(path, t, node)
            return _b64decode(node, path)
        if t is Type.ARRAY:
            if not isinstance(node, list):
                raise _wrong_json(path, t, node)
            return [self._to_connect(schema.value_schema, v, f"{path}[{i}]") for i, v in enumerate(node)]
        if t is Type.MAP:
            return self._map_to_connect(schema, node, path)
        # STRUCT
        if not isinstance(node, dict):
            raise DataException(f"{path}: Structs should be encoded as JSON objects, but found {_json_type(node)}")
        if schema._memoized("json.unchecked", _fits_unchecked):
            # every value converted here is one Struct.put accepts: skip its checks; a str or int
            # of a plain string or integer field is taken as _to_connect takes it (a loop, not a
            # comprehension, so that nesting takes as many frames as before)
            values: list[Any] = []
            append, get = values.append, node.get
            for name, _, field_schema, suffix, kind, lo, hi in schema._memoized("json.fields", _field_plan):
                v = get(name)
                if (kind is _STR_FIELD and type(v) is str) or (kind is _INT_FIELD and type(v) is int and lo <= v <= hi):
                    append(v)
                else:
                    append(self._to_connect(field_schema, v, path + suffix))
            return Struct._trusted(schema, values)
        result = Struct(schema)
        for f in schema.fields:
            result.put(f.name, self._to_connect(f.schema, node.get(f.name), f"{path}.{f.name}"))
        return result

    def _map_to_connect(self, schema: Schema, node: Any, path: str) -> dict:
        ks, vs = schema.key_schema, schema.value_schema
        if ks.type is Type.STRING:
            if not isinstance(node, dict):
                raise DataException(
                    f"{path}: Maps with string fields should be encoded as JSON objects, but found {_json_type(node)}")
            return {k: self._to_connect(vs, v, f"{path}[{k!r}]") for k, v in node.items()}
        if not isinstance(node, list):
            raise DataException(
                f"{path}: Maps with non-string fields should be encoded as JSON array of tuples, "
                f"but found {_json_type(node)}")
        result = {}
        for i, entry in enumerate(node):
            if not isinstance(entry, list) or len(entry) != 2:
                raise DataException(f"{path}[{i}]: a map entry must be a [key, value] array, found {entry!r:.60}")
            key = self._to_connect(ks, entry[0], f"{path}[{i}] key")
            value = self._to_connect(vs, entry[1], f"{path}[{key!r}]")
            try:
                result[key] = value
            except TypeError:
                raise DataException(f"{path}[{i}]: a {ks.type.value} key cannot be a Python dict key") from None
        return result


def _decimal_to_connect(schema: Schema, node: Any, path: str) -> _decimal.Decimal:
    if isinstance(node, (int, _decimal.Decimal)) and not isinstance(node, bool):
        return _decimal.Decimal(node)  # as written, like Jackson's decimalValue()
    if isinstance(node, str):
        raw = _b64decode(node, path)
        if not raw:
            raise DataException(f"{path}: Invalid bytes for Decimal field: no bytes")
        return Decimal.to_logical(schema, raw)
    raise DataException(
        f"{path}: Invalid type for Decimal, underlying representation should be numeric or bytes "
        f"but was {_json_type(node)}")


def _int32_node(node: Any, name: str, path: str) -> int:
    if isinstance(node, bool) or not isinstance(node, int) or not _INT32_RANGE[0] <= node <= _INT32_RANGE[1]:
        raise DataException(
            f"{path}: Invalid type for {name}, underlying representation should be integer but was {_json_type(node)}")
    return node


def _date_to_connect(schema, node, path) -> _dt.date:
    try:
        return Date.to_logical(_int32_node(node, "Date", path))
    except OverflowError:
        raise DataException(f"{path}: {node} days is outside the dates Python can hold") from None


def _time_to_connect(schema, node, path) -> _dt.time:
    try:
        return Time.to_logical(_int32_node(node, "Time", path))
    except DataException as e:
        raise DataException(f"{path}: {e}") from None


def _timestamp_to_connect(schema, node, path) -> _dt.datetime:
    if isinstance(node, bool) or not isinstance(node, int):
        raise DataException(
            f"{path}: Invalid type for Timestamp, underlying representation should be integral "
            f"but was {_json_type(node)}")
    try:
        return Timestamp.to_logical(node)
    except OverflowError:
        raise DataException(f"{path}: {node} ms is outside the datetimes Python can hold") from None


_LOGICAL_TO_CONNECT = {
    Decimal.LOGICAL_NAME: _decimal_to_connect,
    Date.LOGICAL_NAME: _date_to_connect,
    Time.LOGICAL_NAME: _time_to_connect,
    Timestamp.LOGICAL_NAME: _timestamp_to_connect,
}


_IMMUTABLE_DEFAULTS = frozenset({bool, int, float, str, bytes, _decimal.Decimal, _dt.date, _dt.datetime, _dt.time})
_UNCHECKED_MAX_DEPTH = 32


def _fits_unchecked(schema: Schema) -> bool:
    """Whether every value ``_to_connect`` makes for a field of the struct ``schema`` is one
    ``Struct.put`` accepts, so that its check can be skipped. True unless the schema has
    (anywhere inside, up to a depth where its nesting stays far from the recursion limit):
    a struct whose field names are not plain positions, a default that is a container (a
    Struct default, say, does not match its own schema once that has the default), or a map
    whose string keys (taken as they are) have a logical-type key schema that put refuses."""
    stack = [(schema, 0)]
    while stack:
        s, depth = stack.pop()
        if depth > _UNCHECKED_MAX_DEPTH:
            return False
        if s.default is not None and type(s.default) not in _IMMUTABLE_DEFAULTS:
            return False
        t = s.type
        if t is Type.STRUCT:
            if not s._positional:
                return False
            stack.extend((f.schema, depth + 1) for f in s._fields)
        elif t is Type.ARRAY:
            stack.append((s.value_schema, depth + 1))
        elif t is Type.MAP:
            if s.key_schema.type is Type.STRING and s.key_schema.name in _LOGICAL_TO_CONNECT:
                return False
            stack.append((s.key_schema, depth + 1))
            stack.append((s.value_schema, depth + 1))
    return True


def _json_type(node: Any) -> str:
    if node is None:
        return "NULL"
    if isinstance(node, bool):
        return "BOOLEAN"
    if isinstance(node, (int, _decimal.Decimal)):
        return "NUMBER"
    return {str: "STRING", list: "ARRAY", dict: "OBJECT"}.get(type(node), type(node).__name__)


def _wrong_json(path: str, t: Type, node: Any) -> DataException:
    return DataException(f"{path}: JSON {_json_type(node)} {json.dumps(node, default=str)[:50]} is not a valid {t.value}")


def _json_int(node: Any) -> int | None:
    if isinstance(node, bool):
        return None
    if isinstance(node, int):
        return node
    if isinstance(node, _decimal.Decimal) and node.is_finite() and node == node.to_integral_value():
        return int(node)
    return None


def _schemaless(node: Any) -> Any:
    if isinstance(node, _decimal.Decimal):
        return float(node)
    if isinstance(node, list):
        return [_schemaless(v) for v in node]
    if isinstance(node, dict):
        return {k: _schemaless(v) for k, v in node.items()}
    return node


def _b64decode(text: str, path: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DataException(f"{path}: invalid base64 bytes: {e}") from None
