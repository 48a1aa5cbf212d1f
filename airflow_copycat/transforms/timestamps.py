"""TimestampConverter: convert a timestamp between Unix time, text and Connect's
Date/Time/Timestamp (Kafka Connect's ``TimestampConverter``)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Callable, Mapping

from ..connect.config import ConfigDef, ConfigType, one_of
from ..connect.data import Date, Schema, SchemaBuilder, Struct, Time, Timestamp, Type
from ..connect.errors import DataException
from ._keyvalue import (
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    checked_struct,
    config_error,
    copy_schema_basics,
    define_replace_null_with_default,
    key_and_value,
    parse_config,
    struct_values,
    type_name,
)
from .dateformat import JavaDateFormat

_UTC = _dt.timezone.utc
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_UTC)
_TARGETS = {"string": "string", "unix": "unix", "date": "Date", "time": "Time", "timestamp": "Timestamp"}
_UNITS = {"seconds": (1000, 1), "milliseconds": (1, 1), "microseconds": (1, 1000), "nanoseconds": (1, 1000_000)}
"""Unix precision -> (milliseconds per unit, units per millisecond)."""
_SCHEMAS = {
    "string": (Schema.STRING, Schema.OPTIONAL_STRING),
    "unix": (Schema.INT64, Schema.OPTIONAL_INT64),
    "Date": (Schema.DATE, Schema.OPTIONAL_DATE),
    "Time": (Schema.TIME, Time.builder().optional().build()),
    "Timestamp": (Schema.TIMESTAMP, Schema.OPTIONAL_TIMESTAMP),
}


def _valid_format(key, value):
    if not value:
        return None
    try:
        JavaDateFormat(value)
    except ValueError as e:
        return f"is not a SimpleDateFormat pattern: {e}"
    return None


@key_and_value("TimestampConverter")
class TimestampConverter(KeyOrValue):
    """Convert the timestamp in ``field`` (or the whole key or value when ``field`` is empty)
    to ``target.type``: ``string`` (written with ``format``, a Java SimpleDateFormat
    pattern, in UTC), ``unix`` (an integer in ``unix.precision``), or Connect's ``Date``,
    ``Time`` or ``Timestamp`` (Python ``date``, ``time``, ``datetime``).

    The input's kind comes from its schema (Timestamp/Date/Time logical types, string,
    int64 = Unix time) or, schemaless, from its Python type (``datetime``, ``date``,
    ``time``, ``int``, ``str``). A string input is parsed with ``format``. Precision is
    milliseconds, as in Kafka Connect: finer Unix precisions and sub-millisecond
    datetimes are truncated. Nulls stay null.
    """

    purpose = "TimestampConverter"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("field", ConfigType.STRING, "", importance="high",
                doc="The field holding the timestamp, or empty if the entire value is the timestamp.")
        .define("target.type", ConfigType.STRING, validator=one_of("string", "unix", "Date", "Time", "Timestamp"),
                importance="high", doc="The timestamp representation to produce: string, unix, Date, Time or Timestamp.")
        .define("format", ConfigType.STRING, "", _valid_format,
                doc="A java.text.SimpleDateFormat pattern (yyyy-MM-dd HH:mm:ss.SSS): writes target.type=string "
                    "and parses string inputs.")
        .define("unix.precision", ConfigType.STRING, "milliseconds",
                one_of("seconds", "milliseconds", "microseconds", "nanoseconds"), importance="low",
                doc="Unit of Unix timestamps, read and written: seconds, milliseconds, microseconds or nanoseconds.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._field = c["field"]
        self._target = _TARGETS[c["target.type"].lower()]
        self._format = JavaDateFormat(c["format"]) if c["format"].strip() else None
        if self._target == "string" and self._format is None:
            raise config_error("format", c["format"] or None,
                               "is required when target.type=string: a SimpleDateFormat pattern such as "
                               "yyyy-MM-dd'T'HH:mm:ss.SSS")
        self._unit = _UNITS[c["unix.precision"].lower()]
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._to_target: Callable[[_dt.datetime], Any] = getattr(self, "_to_" + self._target.lower())
        self._cache = SchemaCache()

    # the value as a UTC datetime (milliseconds), from each kind

    def _raw(self, value: Any, kind: str | None, where: str) -> _dt.datetime:
        if kind is None:
            kind = _infer(value, where)
        if kind == "Timestamp":
            if not isinstance(value, _dt.datetime):
                raise DataException(f"TimestampConverter: {where} should be a datetime (Timestamp), "
                                    f"got {type_name(value)}")
            return Timestamp.to_logical(Timestamp.from_logical(value))
        if kind == "Date":
            if not isinstance(value, _dt.date):
                raise DataException(f"TimestampConverter: {where} should be a date (Date), got {type_name(value)}")
            return _dt.datetime(value.year, value.month, value.day, tzinfo=_UTC)
        if kind == "Time":
            if not isinstance(value, _dt.time):
                raise DataException(f"TimestampConverter: {where} should be a time (Time), got {type_name(value)}")
            return _EPOCH + _dt.timedelta(milliseconds=Time.from_logical(value))
        if kind == "unix":
            if not isinstance(value, int) or isinstance(value, bool):
                raise DataException(f"TimestampConverter: {where} should be an integer Unix timestamp, "
                                    f"got {type_name(value)}")
            per_unit, per_milli = self._unit
            millis = _truncate(value * per_unit, per_milli)
            try:
                return _EPOCH + _dt.timedelta(milliseconds=millis)
            except OverflowError:
                raise DataException(f"TimestampConverter: {where} = {value} is out of the range of dates") from None
        if not isinstance(value, str):
            raise DataException(f"TimestampConverter: {where} should be a string timestamp, got {type_name(value)}")
        if self._format is None:
            raise DataException(f"TimestampConverter: {where} is a string, and reading one needs format "
                                "(a SimpleDateFormat pattern) to be set")
        try:
            return self._format.parse(value)
        except ValueError as e:
            raise DataException(f"TimestampConverter: could not parse {where} {value!r}: {e}") from None

    def _to_string(self, raw: _dt.datetime) -> str:
        return self._format.format(raw)

    def _to_unix(self, raw: _dt.datetime) -> int:
        per_unit, per_milli = self._unit
        return _truncate(Timestamp.from_logical(raw), per_unit) * per_milli

    def _to_date(self, raw: _dt.datetime) -> _dt.date:
        return raw.date()

    def _to_time(self, raw: _dt.datetime) -> _dt.time:
        return raw.time().replace(tzinfo=None)

    def _to_timestamp(self, raw: _dt.datetime) -> _dt.datetime:
        return raw

    def _convert(self, value: Any, kind: str | None, where: str) -> Any:
        if value is None:
            return None
        return self._to_target(self._raw(value, kind, where))

    def apply(self, record):
        schema, value = self.operand(record)
        field = self._field
        if schema is None:
            if value is None or not field:
                return self.updated(record, None, self._convert(value, None, f"the {self.side}"))
            updated = dict(self.require_map(value))
            if field in updated:
                updated[field] = self._convert(updated[field], None, f"field {field!r}")
            return self.updated(record, None, updated)
        if not field:
            new_schema = _SCHEMAS[self._target][schema.optional]
            return self.updated(record, new_schema, self._convert(value, _kind(schema, f"the {self.side}"),
                                                                  f"the {self.side}"))
        new_schema, position, kind, checked = self._cache.get(schema, self._plan)
        if value is None:
            return self.updated(record, new_schema, None)
        struct: Struct = self.require_struct(value)
        values = struct_values(struct, self._with_default)
        if position is not None:
            values[position] = self._convert(values[position], kind, f"field {field!r}")
        return self.updated(record, new_schema, checked_struct(new_schema, values, checked))

    def _plan(self, schema: Schema):
        if schema.type is not Type.STRUCT:
            raise DataException(f"TimestampConverter with field={self._field!r} needs a struct {self.side} "
                                f"schema, got {schema.type.value}; leave field empty to convert the whole {self.side}")
        builder = copy_schema_basics(schema, SchemaBuilder.struct())
        if schema.optional:
            builder.optional()
        position, kind = None, None
        for i, f in enumerate(schema.fields):
            if f.name == self._field:
                position, kind = i, _kind(f.schema, f"field {f.name!r}")
                builder.field(f.name, _SCHEMAS[self._target][f.schema.optional])
            else:
                builder.field(f.name, f.schema)
        checked = frozenset() if position is None else frozenset({position})
        return builder.build(), position, kind, checked


def _truncate(n: int, divisor: int) -> int:
    """``n / divisor`` rounded toward zero, as Java's ``TimeUnit`` conversions."""
    q = abs(n) // divisor
    return -q if n < 0 else q


def _kind(schema: Schema, where: str) -> str:
    if schema.name == Timestamp.LOGICAL_NAME:
        return "Timestamp"
    if schema.name == Date.LOGICAL_NAME:
        return "Date"
    if schema.name == Time.LOGICAL_NAME:
        return "Time"
    if schema.type is Type.STRING:
        return "string"
    if schema.type is Type.INT64:
        return "unix"
    raise DataException(f"TimestampConverter: the schema of {where} ({schema!r}) is not a timestamp: expected "
                        "Timestamp, Date, Time, string or int64")


def _infer(value: Any, where: str) -> str:
    if isinstance(value, _dt.datetime):
        return "Timestamp"
    if isinstance(value, _dt.date):
        return "Date"
    if isinstance(value, _dt.time):
        return "Time"
    if isinstance(value, int) and not isinstance(value, bool):
        return "unix"
    if isinstance(value, str):
        return "string"
    raise DataException(f"TimestampConverter: {where} is a {type_name(value)}, which is not a timestamp "
                        "(expected datetime, date, time, an integer Unix time or a string)")
