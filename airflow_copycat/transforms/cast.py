"""Cast: change the type of fields, or of the whole key or value (Kafka Connect's ``Cast``).

Casts follow Java's conversions, as Kafka Connect's do: integers narrow by
keeping the low bits (``int64 300`` to ``int8`` is ``44``), floats truncate
toward zero, booleans are ``1``/``0``, strings parse strictly
(``"42"`` to ``int32`` is ``42``; ``"4x"`` or an out-of-range number is a
``DataException`` naming the field), any number but zero is ``true``, a string
is ``true`` only when it says so. Bytes cast only to ``string``, as base64.
Logical types cast to their underlying number (Date: days, Time and Timestamp:
milliseconds) or to an ISO-8601 string; Decimal casts to any number (truncating)
or to its plain string.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal as _decimal
import math
import re
import struct as _struct
from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType
from ..connect.data import Date, Decimal, Schema, SchemaBuilder, Time, Timestamp, Type
from ..connect.errors import DataException
from ._keyvalue import (
    LOGICAL_NAMES,
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    checked_struct,
    copy_schema_basics,
    define_replace_null_with_default,
    key_and_value,
    parse_config,
    struct_values,
    type_name,
)

_OUTPUT_TYPES = (Type.INT8, Type.INT16, Type.INT32, Type.INT64, Type.FLOAT32, Type.FLOAT64, Type.BOOLEAN, Type.STRING)
_INPUT_TYPES = frozenset(_OUTPUT_TYPES + (Type.BYTES,))
_BITS = {Type.INT8: 8, Type.INT16: 16, Type.INT32: 32, Type.INT64: 64}
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_SUFFIX = re.compile(r"[fFdD]\Z")


def parse_spec(spec: list[str]) -> tuple[Type | None, dict[str, Type]]:
    """``["int8"]`` (the whole value) or ``["age:int32", "price:float64"]`` (fields).
    Raises ``ValueError`` saying what is wrong."""
    if not spec:
        raise ValueError("must name at least one cast: a type for the whole value (int32) or field:type pairs")
    whole, fields = None, {}
    for entry in spec:
        parts = entry.split(":")
        if len(parts) > 2:
            raise ValueError(f"invalid cast {entry!r}: write field:type, e.g. age:int32")
        type_text = parts[-1].strip()
        try:
            target = Type(type_text.lower())
        except ValueError:
            raise ValueError(f"invalid type {type_text!r} in cast {entry!r}: use one of "
                             + ", ".join(t.value for t in _OUTPUT_TYPES)) from None
        if target not in _OUTPUT_TYPES:
            raise ValueError(f"cannot cast to {target.value} (in {entry!r}): use one of "
                             + ", ".join(t.value for t in _OUTPUT_TYPES))
        if len(parts) == 1:
            whole = target
        else:
            fields[parts[0].strip()] = target
    if whole is not None and len(spec) > 1:
        raise ValueError("a cast of the whole value (a type alone) must be the only entry of spec")
    return whole, fields


def _valid_spec(key, value):
    try:
        parse_spec(value or [])
    except ValueError as e:
        return str(e)
    return None


_valid_spec.describe = "a type (int8, int16, int32, int64, float32, float64, boolean, string) or field:type pairs"


@key_and_value("Cast")
class Cast(KeyOrValue):
    """Cast fields (``spec=age:int32,price:float64``) or the whole key or value
    (``spec=int64``) to int8, int16, int32, int64, float32, float64, boolean or string.
    Works on Structs with schemas (the schema changes with the value) and on schemaless
    dicts or primitives. A null key or value passes through."""

    purpose = "Cast"
    config_def = define_replace_null_with_default(
        ConfigDef().define("spec", ConfigType.LIST, validator=_valid_spec, importance="high",
                           doc="field:type pairs to cast fields of a Struct or map, or a single type to cast "
                               "the whole value. Types: int8, int16, int32, int64, float32, float64, boolean, "
                               "string; bytes cast only to string.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._whole, self._casts = parse_spec(c["spec"])
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()

    def apply(self, record):
        schema, value = self.operand(record)
        if value is None:
            return record
        if schema is None:
            if self._whole is not None:
                return self.updated(record, None, cast_value(value, None, self._whole, f"the {self.side}"))
            updated = dict(self.require_map(value))
            for name, target in self._casts.items():
                if name in updated:
                    updated[name] = cast_value(updated[name], None, target, f"field {name!r}")
            return self.updated(record, None, updated)
        new_schema, plan, checked = self._cache.get(schema, self._plan)
        if self._whole is not None:
            return self.updated(record, new_schema, cast_value(value, schema, self._whole, f"the {self.side}"))
        struct = self.require_struct(value)
        values = struct_values(struct, self._with_default)
        for i, field_schema, target, where in plan:
            values[i] = cast_value(values[i], field_schema, target, where)
        return self.updated(record, new_schema, checked_struct(new_schema, values, checked))

    def _plan(self, schema: Schema):
        if self._whole is not None:
            builder = SchemaBuilder.type(self._whole)
            if schema.name not in LOGICAL_NAMES:  # a string named Timestamp would claim to be one
                copy_schema_basics(schema, builder)
            if schema.optional:
                builder.optional()
            if schema.default is not None:
                builder.default_value(cast_value(schema.default, schema, self._whole, "the schema's default"))
            return builder.build(), [], frozenset()
        if schema.type is not Type.STRUCT:
            raise DataException(f"Cast of fields needs a struct {self.side} schema, got {schema.type.value}; "
                                "give a single type in spec to cast the whole value")
        builder = copy_schema_basics(schema, SchemaBuilder.struct())
        if schema.optional:
            builder.optional()
        plan = []
        for i, f in enumerate(schema.fields):
            target = self._casts.get(f.name)
            if target is None:
                builder.field(f.name, f.schema)
                continue
            where = f"field {f.name!r}"
            field_builder = SchemaBuilder.type(target)
            if f.schema.optional:
                field_builder.optional()
            if f.schema.default is not None:
                field_builder.default_value(cast_value(f.schema.default, f.schema, target, f"default of {where}"))
            builder.field(f.name, field_builder.build())
            plan.append((i, f.schema, target, where))
        return builder.build(), plan, frozenset(i for i, *_ in plan)


def cast_value(value: Any, schema: Schema | None, target: Type, where: str) -> Any:
    """``value`` (of ``schema``, or schemaless) cast to ``target``; ``DataException`` naming ``where``."""
    if value is None:
        return None
    if schema is not None:
        if schema.type not in _INPUT_TYPES:
            raise DataException(f"Cast of {where}: cannot cast from {schema.type.value}; only from "
                                + ", ".join(sorted(t.value for t in _INPUT_TYPES)))
        is_bytes = schema.type is Type.BYTES and schema.name != Decimal.LOGICAL_NAME
    else:
        if isinstance(value, (list, tuple, dict)) or not isinstance(
                value, (bool, int, float, str, bytes, bytearray, memoryview, _decimal.Decimal, _dt.date, _dt.time)):
            raise DataException(f"Cast of {where}: cannot cast a {type_name(value)}; only numbers, booleans, "
                                "strings, bytes and dates")
        is_bytes = isinstance(value, (bytes, bytearray, memoryview))
    if target is Type.STRING:
        return _to_string(value, schema)
    if is_bytes:
        raise DataException(f"Cast of {where}: bytes cast only to string (base64), not to {target.value}")
    value = _underlying(value)
    try:
        if target in _BITS:
            return _to_int(value, _BITS[target])
        if target is Type.BOOLEAN:
            if isinstance(value, str):
                return value.lower() == "true"
            if isinstance(value, float):
                return not math.isnan(value) and (math.isinf(value) or int(value) != 0)
            return int(value) != 0
        if isinstance(value, str):
            text = value.strip()
            return float(text[:-1] if _FLOAT_SUFFIX.search(text) else text)
        return float(value)
    except (ValueError, OverflowError):
        raise DataException(f"Cast of {where}: {value!r:.60} is not a valid {target.value} "
                            "(or is out of its range)") from None


def _underlying(value: Any) -> Any:
    """Logical values as the numbers that represent them: Timestamp and Time in ms, Date in days."""
    if isinstance(value, _dt.datetime):
        return Timestamp.from_logical(value)
    if isinstance(value, _dt.date):
        return Date.from_logical(value)
    if isinstance(value, _dt.time):
        return Time.from_logical(value)
    return value


def _wrap(n: int, bits: int) -> int:
    """Java's narrowing of an integer: keep the low ``bits`` bits, two's complement."""
    n &= (1 << bits) - 1
    return n - (1 << bits) if n >> (bits - 1) else n


def _to_int(value: Any, bits: int) -> int:
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, int):
        return _wrap(value, bits)
    if isinstance(value, float):  # Java: (int) or (long) saturates, then narrowing keeps low bits
        if math.isnan(value):
            return 0
        wide = 64 if bits == 64 else 32
        lo, hi = -(1 << (wide - 1)), (1 << (wide - 1)) - 1
        n = hi if value >= hi else lo if value <= lo else int(value)
        return _wrap(n, bits)
    if isinstance(value, _decimal.Decimal):
        if not value.is_finite():
            raise ValueError(value)
        return _wrap(int(value), bits)
    text = str(value)
    if not _INTEGER.match(text):
        raise ValueError(text)
    n = int(text)
    if n != _wrap(n, bits):
        raise ValueError(text)
    return n


def _to_string(value: Any, schema: Schema | None) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if schema is not None and schema.type is Type.FLOAT32:
            return java_float_string(value)
        return java_double_string(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (_dt.date, _dt.time)):
        return iso_string(value)
    return str(value)


def iso_string(value: _dt.date | _dt.time) -> str:
    """Kafka Connect's ISO-8601 text of a Date (``2024-05-01``), Time (``13:05:00.042Z``) or
    Timestamp (``2024-05-01T13:05:00.042Z``), in UTC with milliseconds."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc)
        return f"{value:%Y-%m-%d}T{value:%H:%M:%S}.{value.microsecond // 1000:03d}Z"
    if isinstance(value, _dt.date):
        return f"{value:%Y-%m-%d}"
    return f"{value:%H:%M:%S}.{value.microsecond // 1000:03d}Z"


def java_double_string(x: float) -> str:
    """``Double.toString``: ``42.0``, ``0.001``, ``1.0E7``, ``1.234E-5``, ``NaN``, ``Infinity``."""
    return _java_float_text(x, repr(x))


def java_float_string(x: float) -> str:
    """``Float.toString`` of a float32 value: the shortest digits that read back as the same float32."""
    if math.isfinite(x):
        try:
            single = _struct.unpack("f", _struct.pack("f", x))[0]
        except OverflowError:
            return "Infinity" if x > 0 else "-Infinity"
        for digits in range(1, 10):
            text = f"{x:.{digits}g}"
            if _struct.unpack("f", _struct.pack("f", float(text)))[0] == single:
                return _java_float_text(x, text)
    return _java_float_text(x, repr(x))


def _java_float_text(x: float, shortest: str) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign, digits, exponent = _decimal.Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + exponent  # position of the decimal point in the digits
    minus = "-" if sign else ""
    if 1e-3 <= abs(x) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{text}"
        if point >= len(text):
            return f"{minus}{text}{'0' * (point - len(text))}.0"
        return f"{minus}{text[:point]}.{text[point:]}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{point - 1}"
