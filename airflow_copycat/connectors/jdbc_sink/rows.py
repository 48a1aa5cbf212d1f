"""From a sink record to a database row: the table, the primary key per ``pk.mode``, the column values.

:func:`row_of` is called by the sink task for each record ``put`` gives it, in order.
It returns a :class:`Row` -- a write (insert, upsert or update) or, for a
tombstone with ``delete.enabled``, a delete -- or ``None`` for a tombstone the
sink skips. It raises :class:`RecordError` for a record the sink cannot write at
all (no value schema, a key the primary key mode cannot use, a Timestamp whose
local time in ``db.timezone`` falls outside the years 1 to 9999); the task hands
such a record to the framework's error handling (fail, or dead-letter). A config
that does not fit the records (``pk.fields`` naming no field of the key or the
value, more than one for a primitive key) is no record's fault: a
``ConnectException`` fails the run, as Confluent's sink does, instead of every
record of the topic going to the dead-letter queue.

Column values are what the database drivers take: ``Decimal``, ``date``,
``time``, naive ``datetime`` in ``db.timezone`` (Connect timestamps are UTC),
``bytes``, and JSON text for structs, arrays and maps (bytes in them as base64,
decimals as their digits, dates and timestamps in ISO form).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import functools
import decimal
import json
import re
from typing import Any, Sequence
from zoneinfo import ZoneInfo

from airflow_copycat.connect.data import Date, Decimal, Schema, Struct, Time, Timestamp, Type
from airflow_copycat.connect.errors import ConnectException
from airflow_copycat.connect.records import SinkRecord

from .config import KAFKA_PK_DEFAULTS, SinkSettings

_KAFKA_SCHEMAS = (Schema(Type.STRING), Schema(Type.INT32), Schema(Type.INT64))


class RecordError(Exception):
    """A record the sink cannot turn into a row (its message says why)."""


@dataclasses.dataclass
class Row:
    """One record's effect on ``table``: ``values`` by column (``None`` for a delete); ``key`` the
    primary key values in ``key_columns`` order; ``columns`` the column schemas, keys first."""

    table: str
    record: SinkRecord
    key_columns: tuple[str, ...]
    key: tuple
    columns: tuple[tuple[str, Schema, bool], ...]  # (name, schema, part of the primary key)
    values: dict[str, Any] | None

    @property
    def delete(self) -> bool:
        return self.values is None

    @property
    def where(self) -> str:
        """Where the row's record came from, as errors name it: ``topic T partition P offset O``."""
        return "topic {} partition {} offset {}".format(*self.record.read_from)

    def signature(self) -> tuple:
        """Rows with equal signatures can share one statement: same table, kind and columns (names,
        schemas -- compared by their cached hash and, mostly, by identity -- and key flags)."""
        return self.table, self.values is None, self.columns


def table_name(settings: SinkSettings, topic: str) -> str:
    """The table of ``topic``'s records: ``table.name.format`` with ``${topic}`` replaced by the topic, its
    dots replaced by ``_`` first with Debezium's connector class (:data:`.config.DEBEZIUM_CLASS`). A dot in
    the result separates schema and table."""
    if settings.topic_dots_to_underscores:
        topic = topic.replace(".", "_")
    return settings.table_name_format.replace("${topic}", topic)


def _struct_fields(schema: Schema) -> list[str]:
    return [f.name for f in schema.fields]


def row_of(record: SinkRecord, settings: SinkSettings, zone: ZoneInfo) -> Row | None:
    """The row of ``record`` (see the module docstring); raises :class:`RecordError`."""
    table = table_name(settings, record.topic)
    where = "topic {} partition {} offset {}".format(*record.read_from)
    if record.value is None:
        if not settings.delete_enabled:
            return None
        key_columns, key, columns = _record_key(record, settings, where, zone)
        return Row(table, record, key_columns, key, columns, None)
    schema = record.value_schema
    if schema is None or schema.type is not Type.STRUCT or not isinstance(record.value, Struct):
        raise RecordError(f"{where}: the JDBC sink needs a struct value with a schema (JsonConverter with "
                          "schemas.enable=true, or the AvroConverter); this record has "
                          + ("no value schema" if schema is None else f"a {schema.type.value} value"))
    value = record.value
    mode = settings.pk_mode
    if mode == "kafka":
        names = settings.pk_fields or KAFKA_PK_DEFAULTS
        key_columns = tuple(names)
        key = (record.topic, record.kafka_partition, record.kafka_offset)
        columns = [(n, s, True) for n, s in zip(names, _KAFKA_SCHEMAS)]
        values = dict(zip(names, key))
    elif mode == "record_key":
        key_columns, key, columns = _record_key(record, settings, where, zone)
        columns = list(columns)
        values = dict(zip(key_columns, key))
    elif mode == "record_value":
        names = settings.pk_fields or tuple(_struct_fields(schema))
        missing = [n for n in names if schema.field(n) is None]
        if missing:
            raise ConnectException(f"{where}: pk.fields {missing} are not fields of the value "
                              f"(fields: {_struct_fields(schema)})")
        key_columns = tuple(names)
        key = tuple(_converted(schema.field(n).schema, value.get(n), zone, where, n) for n in names)
        if any(k is None for k in key):
            raise RecordError(f"{where}: a primary key field of the value is null")
        columns = [(n, schema.field(n).schema, True) for n in names]
        values = dict(zip(names, key))
    else:
        key_columns, key, columns, values = (), (), [], {}
    fields, more = _value_columns(schema, tuple(key_columns), record.topic,
                                  (settings.fields_whitelist, settings.field_include, settings.field_exclude))
    get = value.get_without_default  # a NULL stays NULL: Struct.get would give an optional field's default
    for name, field_schema, plain in fields:
        v = get(name)
        if v is None and not field_schema.optional:  # a required field never put: its default, as Struct.get
            v = field_schema.default
        values[name] = v if plain or v is None else _converted(field_schema, v, zone, where, name)
    return Row(table, record, key_columns, key, tuple(columns) + more, values)


@functools.lru_cache(maxsize=512)
def _value_columns(schema: Schema, keys: tuple, topic: str, selection: tuple) -> tuple[tuple, tuple]:
    """The value fields written as columns besides the key's: ``((name, schema, plain), ...)`` --
    ``plain`` when the driver takes the value as it is -- and their column entries. ``selection`` is
    ``(fields.whitelist, field.include.list, field.exclude.list)`` (:func:`field_wanted`)."""
    fields = tuple((f.name, f.schema, f.schema.name is None and f.schema.type.is_primitive
                    and f.schema.type is not Type.BYTES)
                   for f in schema.fields if f.name not in keys and field_wanted(topic, f.name, *selection))
    return fields, tuple((n, fs, False) for n, fs, _ in fields)


def field_wanted(topic: str, field: str, whitelist: Sequence[str], include: Sequence[str],
                 exclude: Sequence[str]) -> bool:
    """Whether the value field ``field`` of a record of ``topic`` is written (at most one list is given):

    * ``whitelist`` (Confluent's ``fields.whitelist``): plain field names; empty: every field;
    * ``include`` / ``exclude`` (Debezium's ``field.include.list`` / ``field.exclude.list``): regular
      expressions, each matching the whole of ``<topic>:<field>``, or, without a ``:``, the whole field
      name; ``field`` is written when an ``include`` entry matches it, or no ``exclude`` entry does."""
    if exclude:
        return not _matches(tuple(exclude), topic, field)
    if include:
        return _matches(tuple(include), topic, field)
    return not whitelist or field in whitelist


def _matches(entries: tuple[str, ...], topic: str, field: str) -> bool:
    return any(pattern.fullmatch(f"{topic}:{field}" if qualified else field)
               for qualified, pattern in _patterns(entries))


@functools.lru_cache(maxsize=64)
def _patterns(entries: tuple[str, ...]) -> tuple[tuple[bool, re.Pattern], ...]:
    """Each entry compiled, and whether it names ``<topic>:<field>`` (has a ``:``) or the field alone."""
    return tuple((":" in e, re.compile(e)) for e in entries)


def _record_key(record: SinkRecord, settings: SinkSettings, where: str, zone: ZoneInfo | None):
    schema, key = record.key_schema, record.key
    if key is None:
        raise RecordError(f"{where}: pk.mode=record_key but the record has no key")
    if schema is None:
        raise RecordError(f"{where}: pk.mode=record_key needs a key with a schema")
    if schema.type is Type.STRUCT:
        names = settings.pk_fields or tuple(_struct_fields(schema))
        missing = [n for n in names if schema.field(n) is None]
        if missing:
            raise ConnectException(f"{where}: pk.fields {missing} are not fields of the key (fields: "
                              f"{_struct_fields(schema)})")
        values = tuple(_converted(schema.field(n).schema, key.get(n), zone, where, n) for n in names)
        columns = tuple((n, schema.field(n).schema, True) for n in names)
        if any(v is None for v in values):
            raise RecordError(f"{where}: a primary key field of the key is null")
        return tuple(names), values, columns
    if not schema.type.is_primitive:
        raise RecordError(f"{where}: pk.mode=record_key takes a primitive or struct key, not {schema.type.value}")
    if len(settings.pk_fields) != 1:
        raise ConnectException(f"{where}: the key is a primitive ({schema.type.value}): pk.fields must name "
                               "exactly one column for it")
    name = settings.pk_fields[0]
    return (name,), (_converted(schema, key, zone, where, name),), ((name, schema, True),)


def _converted(schema: Schema, value: Any, zone: ZoneInfo | None, where: str, name: str) -> Any:
    """:func:`_column_value`; raises :class:`RecordError` naming the record and the field for a value
    the database's types cannot hold (a Timestamp whose local time in ``db.timezone`` falls outside the
    years 1 to 9999)."""
    try:
        return _column_value(schema, value, zone)
    except OverflowError:
        raise RecordError(f"{where}: field {name}: {value} is outside the years 1 to 9999 as local time of "
                          f"db.timezone {zone}") from None


def _column_value(schema: Schema, value: Any, zone: ZoneInfo | None) -> Any:
    if value is None:
        return None
    name = schema.name
    if name == Timestamp.LOGICAL_NAME:
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(zone or dt.timezone.utc).replace(tzinfo=None)
    if name in (Decimal.LOGICAL_NAME, Date.LOGICAL_NAME, Time.LOGICAL_NAME):
        return value
    if schema.type in (Type.STRUCT, Type.ARRAY, Type.MAP):
        return json.dumps(_jsonable(value), ensure_ascii=False, separators=(",", ":"))
    if schema.type is Type.BYTES:
        return bytes(value)
    return value


def _jsonable(v: Any) -> Any:
    if isinstance(v, Struct):
        return {f.name: _jsonable(_put_or_required_default(v, f)) for f in v.schema.fields}
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    return v


def _put_or_required_default(struct: Struct, field) -> Any:
    """The value put for ``field`` of ``struct``, as :func:`row_of` takes a column's: a null stays null
    (``Struct.get`` would give an optional field's default); a required field never put gets its default."""
    v = struct.get_without_default(field.name)
    return field.schema.default if v is None and not field.schema.optional else v


def params(row: Row, columns: Sequence[str]) -> tuple:
    values = row.values or {}
    return tuple(values.get(c) for c in columns)
