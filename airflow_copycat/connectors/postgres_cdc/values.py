"""PostgreSQL column types -> Connect schemas, and PostgreSQL text values -> Connect values, as Debezium maps them.

One mapping for snapshot rows and streamed changes alike: values arrive as PostgreSQL's text output
(``COPY ... TO STDOUT``, pgoutput in text mode), ``None`` for NULL, or
:data:`~.model.UNCHANGED_TOAST`. Text output is read in PostgreSQL's defaults, which the snapshot
and the slot sessions set: ``DateStyle=ISO``, ``IntervalStyle=postgres``, ``bytea_output=hex``,
``extra_float_digits`` >= 1.

==============================  ========================================================================
PostgreSQL                      Connect schema (Debezium's semantic name)
==============================  ========================================================================
boolean, bit(1)                 boolean
smallint / integer / bigint,    int16 / int32 / int64
oid
real / double precision         float32 / float64
numeric(p,s), money             ``org.apache.kafka.connect.data.Decimal`` (scale s; money: money.fraction.digits),
                                numeric without scale: ``io.debezium.data.VariableScaleDecimal``
                                struct {scale int32, value bytes}; decimal.handling.mode double: float64,
                                string: string (NaN as ``NAN``, infinities as ``POSITIVE_INFINITY``...)
text, varchar, char, name,      string
citext, inet, cidr, macaddr,
ranges
bytea                           bytes, or string per binary.handling.mode (base64, base64-url-safe, hex)
json, jsonb / xml / uuid        string ``io.debezium.data.Json`` / ``...Xml`` / ``...Uuid``
ltree / tsvector                string ``io.debezium.data.Ltree`` / ``...Tsvector``
hstore                          string ``io.debezium.data.Json`` (hstore.handling.mode json) or map<string,string>
enum                            string ``io.debezium.data.Enum``, parameter ``allowed`` (labels in sort order)
bit(n>1), varbit                bytes ``io.debezium.data.Bits`` (little-endian), parameter ``length``
point                           struct ``io.debezium.data.geometry.Point`` {x, y, wkb, srid}
date                            int32 ``io.debezium.time.Date`` (days); connect: ``...connect.data.Date``
time(p)                         adaptive: p <= 3 int32 ``io.debezium.time.Time`` (ms), else int64
                                ``io.debezium.time.MicroTime`` (µs); adaptive_time_microseconds and
                                microseconds: MicroTime; connect: ``...connect.data.Time`` (ms)
timestamp(p)                    adaptive / adaptive_time_microseconds: p <= 3 int64 ``io.debezium.time.Timestamp``
                                (ms), else ``io.debezium.time.MicroTimestamp`` (µs); microseconds: MicroTimestamp;
                                connect: ``...connect.data.Timestamp`` (ms). Values as if in UTC.
                                nanoseconds: NanoTime / NanoTimestamp (ns); isostring: string IsoDate /
                                IsoTime / IsoTimestamp (``2024-02-29Z``, ``13:45:07.5Z``, ``...T00:00:01.2Z``)
timestamptz(p) / timetz         string ``io.debezium.time.ZonedTimestamp`` / ``...ZonedTime``, in UTC (``Z``), with
                                p fraction digits (6 without a declared precision); ``infinity`` as is
interval                        int64 ``io.debezium.time.MicroDuration`` (months of 365.25/12 days), or string
                                ``io.debezium.time.Interval`` (``P1Y2M3DT4H5M6.78S``) per interval.handling.mode
arrays (one dimension)          array of the element's optional schema
domains                         their base type (with the domain's modifier)
anything else                   string (the text), parameter ``__debezium.source.column.type`` = type name
==============================  ========================================================================

A column whose value may be NULL (``Column.optional``) has an optional schema; its default
expression becomes the schema's default as Debezium derives it (a literal's value, the type's zero
for a generated default such as ``nextval(...)`` or ``now()``). Timestamps and dates
at ``infinity`` take Debezium's values (PostgreSQL JDBC's ``DATE_POSITIVE_INFINITY`` etc.).

Why over 500 lines: Debezium's type mapping is one table of PostgreSQL types, each with its schema
and its value conversion side by side; splitting it would separate a type's schema from its value.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from airflow_copycat.connect import Schema, SchemaBuilder
from airflow_copycat.connect.data import Date, Decimal, Struct, Time, Timestamp, Type
from airflow_copycat.connect.errors import DataException

from . import config as cfg
from .model import UNCHANGED_TOAST, Column
from .pgtext import (  # noqa: F401 (the infinity constants are part of this module's contract)
    NEGATIVE_INFINITY_DAYS, NEGATIVE_INFINITY_MICROS, POSITIVE_INFINITY_DAYS, POSITIVE_INFINITY_MICROS,
    interval_iso, interval_micros, iso_date, iso_time, parse_array, parse_bytea, parse_date_days, parse_float32, parse_hstore,
    parse_money, parse_time_micros, parse_timestamp_micros, unscaled_bytes, zoned_time, zoned_timestamp)

from .pgtypes import (  # noqa: F401 (re-exported: the OIDs and PgType are part of this module's contract)
    ARRAY_ELEMENTS, BIT, BOOL, BPCHAR, BYTEA, CHAR, CIDR, DATE, FLOAT4, FLOAT8, INET, INT2, INT4, INT8, INTERVAL_OID,
    JSON_OID, JSONB, MACADDR, MACADDR8, MONEY, NAME, NUMERIC, OID, POINT_OID, STRINGS, TEXT, TIME_OID, TIMESTAMP,
    TIMESTAMPTZ, TIMETZ, TSVECTOR_OID, UUID_OID, VARBIT, VARCHAR, XML_OID, PgType, numeric_precision_scale,
    time_precision)

_SPECIAL_NUMERIC = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}
"""numeric's special values, as Debezium's string mode writes them."""

# ---------------------------------------------------------------- Debezium's semantic type names

DEBEZIUM_DATE = "io.debezium.time.Date"
DEBEZIUM_TIME = "io.debezium.time.Time"
MICRO_TIME = "io.debezium.time.MicroTime"
DEBEZIUM_TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
ZONED_TIME = "io.debezium.time.ZonedTime"
MICRO_DURATION = "io.debezium.time.MicroDuration"
INTERVAL = "io.debezium.time.Interval"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
JSON = "io.debezium.data.Json"
XML = "io.debezium.data.Xml"
UUID = "io.debezium.data.Uuid"
ENUM = "io.debezium.data.Enum"
BITS = "io.debezium.data.Bits"
LTREE = "io.debezium.data.Ltree"
TSVECTOR = "io.debezium.data.Tsvector"
POINT = "io.debezium.data.geometry.Point"
ISO_DATE = "io.debezium.time.IsoDate"
ISO_TIME = "io.debezium.time.IsoTime"
ISO_TIMESTAMP = "io.debezium.time.IsoTimestamp"
NANO_TIME = "io.debezium.time.NanoTime"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
SOURCE_TYPE_PARAMETER = "__debezium.source.column.type"
PRECISION_PARAMETER = "connect.decimal.precision"

Converter = Callable[[Any], Any]
"""Turns one text value (or None, or UNCHANGED_TOAST) into the Connect value of a field's schema."""


@dataclass(frozen=True)
class FieldMapping:
    """A column's Connect schema and the function from its text values to Connect values.

    ``missing`` is what ``convert(None)`` returns (a column the WAL did not carry: None when the
    column is optional, else its default or its type's zero). ``text_exact``: where Arrow casts a
    text to the schema's Arrow type (:func:`.column_casts.cast_texts`), it gives what ``convert`` gives
    -- strings as they are; integers; decimals of the column's scale; floats, correctly rounded to a
    double as Python's ``float`` reads them (a float32 for ``real`` from that double) -- so a batch
    converts a whole column in one cast, and value by value where the cast fails. ``zoned_width``: the
    column is a ``timestamptz`` converted to a ``ZonedTimestamp`` with that many fraction digits, which
    :func:`.column_casts.zoned_timestamps` converts a whole column at a time the same way."""

    schema: Schema
    convert: Converter
    missing: Any = None
    text_exact: bool = False
    zoned_width: int | None = None


def _optional(builder: SchemaBuilder, optional: bool) -> Schema:
    return (builder.optional() if optional else builder).build()


def _fallback(schema: Schema) -> Any:
    """What Debezium puts in a NOT NULL column's field when the WAL has no value for it (the old row
    of an update or delete under REPLICA IDENTITY DEFAULT carries only the key): the schema's zero."""
    name = schema.name
    if name == ZONED_TIMESTAMP:
        return "1970-01-01T00:00:00Z"
    if name == ZONED_TIME:
        return "00:00:00Z"
    if name == Decimal.LOGICAL_NAME:
        return decimal.Decimal(0).scaleb(-Decimal.scale(schema))
    if name == Date.LOGICAL_NAME:
        return dt.date(1970, 1, 1)
    if name == Time.LOGICAL_NAME:
        return dt.time(0)
    if name == Timestamp.LOGICAL_NAME:
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    if name == VARIABLE_SCALE_DECIMAL:
        return Struct._trusted(schema, [0, b"\x00"])
    return {Type.INT8: 0, Type.INT16: 0, Type.INT32: 0, Type.INT64: 0, Type.FLOAT32: 0.0, Type.FLOAT64: 0.0,
            Type.BOOLEAN: False, Type.STRING: "", Type.BYTES: b"", Type.ARRAY: [], Type.MAP: {}}.get(schema.type)


_LITERAL_DEFAULT = re.compile(r"'([^']*(?:''[^']*)*)'")
_FUNCTION_DEFAULT = re.compile(r"^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)")
_CURRENT_DATE_TIMES = {"current_timestamp", "current_time", "current_date", "localtime", "localtimestamp"}
_GENERATED_DEFAULTS = {
    BOOL: "f", BPCHAR: "", VARCHAR: "", TEXT: "", NUMERIC: "0.0", FLOAT4: "0.0", FLOAT8: "0.0", INT2: "0",
    INT4: "0", INT8: "0", JSON_OID: "{}", JSONB: "{}", XML_OID: "", UUID_OID: "00000000-0000-0000-0000-000000000000",
    DATE: "1970-01-01", TIME_OID: "00:00:00", TIMESTAMP: "1970-01-01 00:00:00",
    TIMESTAMPTZ: "1970-01-01 00:00:00+00", INTERVAL_OID: "00:00:00", BIT: "0", VARBIT: "0",
}
"""Types whose column defaults Debezium puts in schemas, with the value it uses for a generated
default (a function call such as ``nextval(...)`` or ``now()``, or ``CURRENT_TIMESTAMP``)."""
_TRIMMED_DEFAULTS = {BIT, VARBIT, NUMERIC, FLOAT4, FLOAT8, INT2, INT4, INT8, UUID_OID, DATE, TIME_OID, TIMESTAMP,
                     TIMESTAMPTZ, INTERVAL_OID}

_WKB_POINT = struct.Struct("<BIdd")


def _point(text: str) -> list:
    """``(1.5,-2)`` -> Debezium's Point fields: x, y, the OGC WKB of the point (little-endian), no SRID."""
    x, _, y = text.strip("()").partition(",")
    x, y = float(x), float(y)
    return [x, y, _WKB_POINT.pack(1, 1, x, y), None]


def _bind(schema: Schema, parse: Callable) -> Callable:
    """``parse`` made to return values of ``schema`` itself (struct values are built with the final,
    possibly optional, schema they are written with)."""
    if schema.type is Type.STRUCT:  # parsers of struct types return the field values
        return lambda t: Struct._trusted(schema, parse(t))
    return parse


# ---------------------------------------------------------------- the mapper

class ValueMapper:
    """Maps columns to Connect schemas and converters per a connector's handling modes.

    ``config`` is a :class:`~.config.CdcConfig` (or any mapping of its keys); ``types`` the catalog's
    description of the non-built-in types the columns use (enums, domains, extension types and arrays
    of them: :func:`.snapshot.load_types`), by OID. A type in neither falls back to a string.
    """

    def __init__(self, config: Mapping[str, Any] | Any = None, types: Mapping[int, PgType] | None = None):
        get = (config.get if config is not None else {}.get)
        self.decimal_mode = str(get(cfg.DECIMAL_HANDLING_MODE) or "precise").lower()
        self.time_mode = str(get(cfg.TIME_PRECISION_MODE) or "adaptive").lower()
        self.binary_mode = str(get(cfg.BINARY_HANDLING_MODE) or "bytes").lower()
        self.hstore_mode = str(get(cfg.HSTORE_HANDLING_MODE) or "json").lower()
        self.interval_mode = str(get(cfg.INTERVAL_HANDLING_MODE) or "numeric").lower()
        money_digits = get(cfg.MONEY_FRACTION_DIGITS)
        self.money_digits = 2 if money_digits is None else int(money_digits)
        self.placeholder = str(get(cfg.UNAVAILABLE_VALUE_PLACEHOLDER) or "__debezium_unavailable_value")
        self.types = dict(types or {})

    def field(self, column: Column) -> FieldMapping:
        """The schema (optional when the column may be NULL) and converter of ``column``'s values.

        The converter takes the column's text, None or UNCHANGED_TOAST and returns the Connect value;
        it raises :class:`DataException` naming the column when the text does not parse."""
        schema, parse = self._resolve(column.type_oid, column.type_modifier, column.type_name, 0)
        if column.optional:
            schema = schema.copy(optional=True)
        parse = _bind(schema, parse)
        default = self._default(column, schema, parse)
        if default is not None:
            schema = schema.copy(default=default)
        toast = self._toast_value(schema)
        missing = None if column.optional else (default if default is not None else _fallback(schema))
        name = column.name

        def convert(text, _parse=parse, _toast=toast):
            if text is None:
                return missing
            if text is UNCHANGED_TOAST:
                if _toast is None:
                    raise DataException(f"column {name!r}: an unchanged TOASTed value has no placeholder in a "
                                        f"{schema.name or schema.type.value} field; set REPLICA IDENTITY FULL on "
                                        "the table to have it in the WAL")
                return _toast
            try:
                return _parse(text)
            except DataException as e:
                raise DataException(f"column {name!r}: {e}") from None
            except (ValueError, decimal.InvalidOperation, IndexError, AttributeError) as e:
                raise DataException(f"column {name!r}: cannot read {str(text)[:60]!r} ({e})") from None

        exact = parse in (int, str, float, parse_float32) or getattr(parse, "arrow_exact", False)
        return FieldMapping(schema, convert, missing, exact, getattr(parse, "zoned_width", None))

    def _default(self, column: Column, schema: Schema, parse: Callable) -> Any:
        """The schema default Debezium derives from the column's default expression: a literal's value;
        for a function or CURRENT_* the type's zero; None for other types, NULL and struct values."""
        expression = (column.default or "").strip()
        oid = column.type_oid
        info = self.types.get(oid)
        is_enum = info is not None and info.kind == "e"
        if not expression or expression.startswith("NULL::") or schema.type is Type.STRUCT:
            return None
        if oid not in _GENERATED_DEFAULTS and not is_enum:
            return None
        if _FUNCTION_DEFAULT.match(expression) or expression.lower() in _CURRENT_DATE_TIMES:
            text = None if is_enum else _GENERATED_DEFAULTS[oid]
        elif "'" in expression:
            m = _LITERAL_DEFAULT.search(expression)
            text = m.group(1).replace("''", "'") if m else None
        else:
            text = expression
        if text is None:
            return None
        if oid == BOOL:
            text = "t" if text.strip().lower() in ("true", "t", "yes", "on", "1") else "f"
        elif oid in _TRIMMED_DEFAULTS:
            text = text.strip()
        try:
            return parse(text)
        except (DataException, ValueError, ArithmeticError, IndexError, AttributeError):
            return None  # as Debezium: a default it cannot read is left out of the schema

    def _toast_value(self, schema: Schema):
        if schema.type is Type.STRING:
            return self.placeholder
        if schema.type is Type.BYTES and schema.name is None:
            return self.placeholder.encode()
        if schema.type is Type.ARRAY:
            inner = self._toast_value(schema.value_schema)
            return None if inner is None else [inner]
        if schema.type is Type.MAP:
            return {self.placeholder: self.placeholder}
        return None

    # (schema without optional, parser of one non-null text)
    def _resolve(self, oid: int, modifier: int, type_name: str, depth: int) -> tuple[Schema, Callable]:
        if depth > 8:
            return self._unknown(type_name)
        b = SchemaBuilder
        if oid == BOOL:
            return Schema.BOOLEAN, lambda t: t == "t"
        if oid == INT2:
            return Schema.INT16, int
        if oid == INT4:
            return Schema.INT32, int
        if oid in (INT8, OID):
            return Schema.INT64, int
        if oid == FLOAT4:
            return Schema.FLOAT32, parse_float32
        if oid == FLOAT8:
            return Schema.FLOAT64, float
        if oid in STRINGS:
            return Schema.STRING, str
        if oid == NUMERIC:
            return self._numeric(numeric_precision_scale(modifier))
        if oid == MONEY:
            return self._money_field()
        if oid == BYTEA:
            return self._binary()
        if oid in (JSON_OID, JSONB):
            return b.string().name(JSON).version(1).build(), str
        if oid == XML_OID:
            return b.string().name(XML).version(1).build(), str
        if oid == UUID_OID:
            return b.string().name(UUID).version(1).build(), str
        if oid == TSVECTOR_OID:
            return b.string().name(TSVECTOR).version(1).build(), str
        if oid in (BIT, VARBIT):
            length = modifier if modifier > 0 else (2**31 - 1)
            if oid == BIT and length == 1:
                return Schema.BOOLEAN, lambda t: t == "1"
            return (b.bytes().name(BITS).version(1).parameter("length", str(length)).build(),
                    lambda t: int(t, 2).to_bytes((len(t) + 7) // 8, "little") if t else b"")
        if oid == DATE:
            return self._date()
        if oid == TIME_OID:
            return self._time(time_precision(modifier))
        if oid == TIMESTAMP:
            return self._timestamp(time_precision(modifier))
        if oid == TIMESTAMPTZ:
            width = time_precision(modifier)

            def zoned(t):
                return zoned_timestamp(t, width)
            zoned.zoned_width = width  # a batch may convert a column at once (FieldMapping.zoned_width)
            return b.string().name(ZONED_TIMESTAMP).version(1).build(), zoned
        if oid == POINT_OID:
            return (b.struct().name(POINT).version(1).doc("Geometry (POINT)").field("x", Schema.FLOAT64)
                    .field("y", Schema.FLOAT64).field("wkb", Schema.OPTIONAL_BYTES).field("srid", Schema.OPTIONAL_INT32)
                    .build(), _point)
        if oid == TIMETZ:
            return b.string().name(ZONED_TIME).version(1).build(), zoned_time
        if oid == INTERVAL_OID:
            if self.interval_mode == "string":
                return b.string().name(INTERVAL).version(1).build(), interval_iso
            return b.int64().name(MICRO_DURATION).version(1).build(), interval_micros
        element = ARRAY_ELEMENTS.get(oid)
        info = self.types.get(oid)
        if element is None and info is not None and info.element_oid:
            element = info.element_oid
        if element is not None:
            element_info = self.types.get(element)
            element_name = element_info.name if element_info else type_name.lstrip("_")
            inner, parse = self._resolve(element, modifier, element_name, depth + 1)
            inner = inner.copy(optional=True)
            parse = _bind(inner, parse)

            def parse_array_of(t, _p=parse):
                return [None if x is None else _p(x) for x in parse_array(t)]

            return SchemaBuilder.array(inner).build(), parse_array_of
        if info is not None:
            if info.kind == "e":
                return (b.string().name(ENUM).version(1).parameter("allowed", ",".join(info.enum_labels)).build(),
                        str)
            if info.kind == "d" and info.base_oid:
                base_modifier = modifier if modifier >= 0 else info.base_modifier
                base = self.types.get(info.base_oid)
                return self._resolve(info.base_oid, base_modifier, base.name if base else type_name, depth + 1)
            type_name = info.name or type_name
        name = type_name.lower()
        if name == "hstore":
            if self.hstore_mode == "map":
                return SchemaBuilder.map(Schema.STRING, Schema.OPTIONAL_STRING).build(), parse_hstore
            return (b.string().name(JSON).version(1).build(),
                    lambda t: json.dumps(parse_hstore(t), separators=(",", ":"), ensure_ascii=False))
        if name == "ltree":
            return b.string().name(LTREE).version(1).build(), str
        if name in ("citext", "isbn"):
            return Schema.STRING, str
        return self._unknown(type_name)

    def _unknown(self, type_name: str):
        return SchemaBuilder.string().parameter(SOURCE_TYPE_PARAMETER, type_name.upper()).build(), str

    def _numeric(self, precision_scale):
        mode = self.decimal_mode
        if mode == "double":
            return Schema.FLOAT64, float
        if mode == "string":
            return Schema.STRING, lambda t: _SPECIAL_NUMERIC.get(t, t)
        if precision_scale is None or precision_scale[1] < 0:
            schema = (SchemaBuilder.struct().name(VARIABLE_SCALE_DECIMAL).version(1).doc("Variable scaled decimal")
                      .field("scale", Schema.INT32).field("value", Schema.BYTES).build())

            def variable(t):
                if t in _SPECIAL_NUMERIC:
                    raise DataException(f"{t} cannot be sent in decimal.handling.mode=precise; set "
                                        "decimal.handling.mode=string (or double) to capture it")
                sign, digits, exponent = decimal.Decimal(t).as_tuple()
                n = int("".join(map(str, digits)) or "0") * 10 ** max(0, exponent)
                return [max(0, -exponent), unscaled_bytes(-n if sign else n)]  # fields; _bind makes the Struct

            return schema, variable
        precision, scale = precision_scale
        schema = Decimal.builder(scale).parameter(PRECISION_PARAMETER, str(precision)).build()
        return schema, self._decimal_parser(scale)

    def _decimal_parser(self, scale: int):
        quantum = decimal.Decimal(1).scaleb(-scale)
        context = decimal.Context(prec=1100)

        def parse(t):
            dot = t.find(".")
            if (len(t) - dot - 1 if dot >= 0 else 0) == scale and t[-1:].isdigit():
                return decimal.Decimal(t)  # PostgreSQL prints numeric(p,s) with exactly s digits
            if t in _SPECIAL_NUMERIC:
                raise DataException(f"{t} cannot be sent in decimal.handling.mode=precise; set "
                                    "decimal.handling.mode=string (or double) to capture it")
            return decimal.Decimal(t).quantize(quantum, context=context)

        parse.arrow_exact = True  # Arrow casts the s-digit text exactly and refuses the others (FieldMapping)
        return parse

    def _money_field(self):
        mode = self.decimal_mode
        if mode == "double":
            return Schema.FLOAT64, lambda t: float(parse_money(t))
        if mode == "string":
            return Schema.STRING, lambda t: format(parse_money(t), "f")
        quantum = decimal.Decimal(1).scaleb(-self.money_digits)
        return Decimal.builder(self.money_digits).build(), lambda t: parse_money(t).quantize(quantum)

    def _binary(self):
        mode = self.binary_mode
        if mode == "base64":
            return Schema.STRING, lambda t: base64.b64encode(parse_bytea(t)).decode("ascii")
        if mode == "base64-url-safe":
            return Schema.STRING, lambda t: base64.urlsafe_b64encode(parse_bytea(t)).decode("ascii")
        if mode == "hex":
            return Schema.STRING, lambda t: parse_bytea(t).hex()
        return Schema.BYTES, parse_bytea

    def _date(self):
        if self.time_mode == "connect":
            def connect_date(t):
                days = parse_date_days(t) if t not in ("infinity", "-infinity") else None
                if days is None:
                    raise DataException(f"date {t} cannot be a Connect Date; use time.precision.mode=adaptive")
                try:
                    return Date.to_logical(days)
                except OverflowError:
                    raise DataException(f"date {t} is outside the years a Connect Date holds") from None
            return Date.builder().build(), connect_date

        if self.time_mode == "isostring":
            return (SchemaBuilder.string().name(ISO_DATE).version(1).build(),
                    lambda t: t if t in ("infinity", "-infinity") else iso_date(parse_date_days(t)))

        def days(t):
            if t == "infinity":
                return POSITIVE_INFINITY_DAYS
            if t == "-infinity":
                return NEGATIVE_INFINITY_DAYS
            return parse_date_days(t)

        return SchemaBuilder.int32().name(DEBEZIUM_DATE).version(1).build(), days

    def _time(self, precision: int):
        mode = self.time_mode
        if mode == "connect":
            return Time.builder().build(), lambda t: Time.to_logical(min(parse_time_micros(t), 86_399_999_999) // 1000)
        if mode == "adaptive" and precision <= 3:
            return SchemaBuilder.int32().name(DEBEZIUM_TIME).version(1).build(), lambda t: parse_time_micros(t) // 1000
        if mode == "isostring":
            return SchemaBuilder.string().name(ISO_TIME).version(1).build(), lambda t: iso_time(parse_time_micros(t))
        if mode == "nanoseconds":
            return SchemaBuilder.int64().name(NANO_TIME).version(1).build(), lambda t: parse_time_micros(t) * 1000
        return SchemaBuilder.int64().name(MICRO_TIME).version(1).build(), parse_time_micros

    def _timestamp(self, precision: int):
        mode = self.time_mode

        def micros(t):
            if t == "infinity":
                return POSITIVE_INFINITY_MICROS
            if t == "-infinity":
                return NEGATIVE_INFINITY_MICROS
            return parse_timestamp_micros(t)

        if mode == "connect":
            def connect_ts(t):
                if t in ("infinity", "-infinity"):
                    raise DataException(f"timestamp {t} cannot be a Connect Timestamp; use time.precision.mode="
                                        "adaptive")
                return Timestamp.to_logical(parse_timestamp_micros(t) // 1000)
            return Timestamp.builder().build(), connect_ts
        if mode == "isostring":
            return (SchemaBuilder.string().name(ISO_TIMESTAMP).version(1).build(),
                    lambda t: t if t in ("infinity", "-infinity") else zoned_timestamp(
                        t[:-3] + "+00 BC" if t.endswith(" BC") else t + "+00", 0))
        if mode == "nanoseconds":
            def nanos(t):
                if t in ("infinity", "-infinity"):
                    return 2**63 - 1 if t == "infinity" else -(2**63)
                n = parse_timestamp_micros(t) * 1000
                if not -(2**63) <= n < 2**63:
                    raise DataException(f"timestamp {t} is outside what nanoseconds since the epoch hold in 64 bits "
                                        "(1677-2262); use time.precision.mode=microseconds")
                return n
            return SchemaBuilder.int64().name(NANO_TIMESTAMP).version(1).build(), nanos
        if mode in ("adaptive", "adaptive_time_microseconds") and precision <= 3:
            return (SchemaBuilder.int64().name(DEBEZIUM_TIMESTAMP).version(1).build(),
                    lambda t: micros(t) // 1000)
        return SchemaBuilder.int64().name(MICRO_TIMESTAMP).version(1).build(), micros


def as_datetime_utc(micros: int) -> dt.datetime:
    """µs since the epoch -> an aware UTC datetime (tests and transforms that want Python values)."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
