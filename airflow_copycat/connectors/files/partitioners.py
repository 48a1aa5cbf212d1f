"""Partitioners: which directory a record's file goes to (Confluent's storage-common partitioners).

A partitioner turns a record into an *encoded partition* (``partition=0``,
``country=NL/type=order``, ``year=2024/month=05/day=01``); the record's file
lives at ``<topics.dir>/<topic>/<encoded partition>/`` as with Confluent's
S3 and HDFS sinks. Every partitioner here is deterministic: it depends only on
the record, never on the clock, so a rerun writes the same paths.

=========================================================================  ==========  ===========================================
``partitioner.class``                                                      alias       directory under ``<topics.dir>/<topic>/``
=========================================================================  ==========  ===========================================
io.confluent.connect.storage.partitioner.DefaultPartitioner                ``default`` ``partition=<kafka partition>``
io.confluent.connect.storage.partitioner.FieldPartitioner                  ``field``   ``<f1>=<v1>/<f2>=<v2>`` (``partition.field.name``)
io.confluent.connect.storage.partitioner.TimeBasedPartitioner              ``time``    ``path.format`` of the time bucket
io.confluent.connect.storage.partitioner.DailyPartitioner                  ``daily``   ``'year'=YYYY/'month'=MM/'day'=dd``
io.confluent.connect.storage.partitioner.HourlyPartitioner                 ``hourly``  ``'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH``
=========================================================================  ==========  ===========================================

Time-based partitioners bucket a timestamp taken by ``timestamp.extractor``:
``Record`` (the Kafka record timestamp, the default here) or ``RecordField``
(the value's ``timestamp.field``, dotted for nested fields; epoch
milliseconds, a Timestamp/Date value or an ISO-8601 string). Confluent's
default, ``Wallclock``, is refused: it depends on when the sink runs, so a
rerun would write different paths and exactly-once would be lost.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any
from zoneinfo import ZoneInfo

from ...connect.data import Struct, Timestamp, Type
from ...connect.errors import DataException
from ...connect.records import SinkRecord
from .timeformat import compile_pattern

_PKG = "io.confluent.connect.storage.partitioner."
DEFAULT, FIELD, TIME, DAILY, HOURLY = "default", "field", "time", "daily", "hourly"
PARTITIONER_ALIASES = {
    DEFAULT: DEFAULT, _PKG + "DefaultPartitioner": DEFAULT,
    FIELD: FIELD, _PKG + "FieldPartitioner": FIELD,
    TIME: TIME, "timebased": TIME, _PKG + "TimeBasedPartitioner": TIME,
    DAILY: DAILY, _PKG + "DailyPartitioner": DAILY,
    HOURLY: HOURLY, _PKG + "HourlyPartitioner": HOURLY,
}
DAILY_PATH_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd"
HOURLY_PATH_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH"
FIXED_FORMATS = {DAILY: (DAILY_PATH_FORMAT, 86_400_000), HOURLY: (HOURLY_PATH_FORMAT, 3_600_000)}

_EXTRACTOR_PKG = _PKG + "TimeBasedPartitioner$"
EXTRACTOR_ALIASES = {
    "record": "Record", _EXTRACTOR_PKG.lower() + "recordtimestampextractor": "Record",
    "recordfield": "RecordField", _EXTRACTOR_PKG.lower() + "recordfieldtimestampextractor": "RecordField",
    "wallclock": "Wallclock", _EXTRACTOR_PKG.lower() + "wallclocktimestampextractor": "Wallclock",
}


def resolve_partitioner(name: str) -> str | None:
    """The short kind (``default``, ``field``, ``time``, ``daily``, ``hourly``) of a
    ``partitioner.class`` value, or ``None`` if it names no partitioner this sink has."""
    key = (name or "").strip()
    return PARTITIONER_ALIASES.get(key) or PARTITIONER_ALIASES.get(key.lower())


def resolve_extractor(name: str) -> str | None:
    """``Record``, ``RecordField`` or ``Wallclock`` for a ``timestamp.extractor`` value, else ``None``."""
    return EXTRACTOR_ALIASES.get((name or "").strip().lower())


def _where(record: SinkRecord) -> str:
    return f"record {record.topic}-{record.kafka_partition}@{record.kafka_offset}"


def field_value(record: SinkRecord, dotted: str) -> tuple[Any, Any]:
    """``(value, schema)`` of the (possibly nested, ``a.b``) field ``dotted`` of the record
    value; the schema is ``None`` for schemaless values. Raises :class:`DataException`
    when the value is no struct/dict or lacks the field."""
    value, schema = record.value, record.value_schema
    for part in dotted.split("."):
        if isinstance(value, Struct):
            f = value.schema.field(part)
            if f is None:
                raise DataException(f"{_where(record)}: value has no field {part!r} (looking up {dotted!r})")
            value, schema = value.get(part), f.schema
        elif isinstance(value, dict):
            if part not in value:
                raise DataException(f"{_where(record)}: value has no key {part!r} (looking up {dotted!r})")
            value, schema = value[part], None
        else:
            raise DataException(f"{_where(record)}: cannot look up {dotted!r} in a {type(value).__name__} value; "
                                "the value must be a struct or a map")
    return value, schema


class Partitioner:
    """Maps a record to its encoded partition and directory."""

    kind = DEFAULT
    time_based = False

    def encode(self, record: SinkRecord) -> str:
        """The encoded partition of ``record`` (``partition=0``)."""
        raise NotImplementedError

    def path(self, topic: str, encoded: str) -> str:
        """The directory, relative to ``topics.dir``, of files of ``topic`` in ``encoded``."""
        return f"{topic}/{encoded}"

    def timestamp(self, record: SinkRecord) -> int | None:
        """The record's timestamp (ms) as this partitioner sees it: its extractor's
        for time-based partitioners, the Kafka timestamp otherwise."""
        return record.timestamp


class DefaultPartitioner(Partitioner):
    """``partition=<kafka partition>``: one directory per Kafka partition."""

    def encode(self, record):
        return self.encode_partition(record.kafka_partition)

    @staticmethod
    def encode_partition(kafka_partition: int) -> str:
        """The encoded partition of every record of ``kafka_partition``."""
        return f"partition={kafka_partition}"


class FieldPartitioner(Partitioner):
    """``<field>=<value>`` per name of ``partition.field.name``, joined with ``/``.

    Field values must be integers, strings or booleans (Connect's INT8..INT64,
    STRING, BOOLEAN, as Confluent's); a null, another type, or a string holding
    ``/`` is a :class:`DataException` naming the record and field.
    """

    kind = FIELD

    def __init__(self, fields: list[str]):
        if not fields:
            raise ValueError("FieldPartitioner needs at least one name in partition.field.name")
        self.fields = list(fields)

    def encode(self, record):
        parts = []
        for name in self.fields:
            value, schema = field_value(record, name)
            if schema is not None and schema.type not in (Type.INT8, Type.INT16, Type.INT32, Type.INT64,
                                                           Type.STRING, Type.BOOLEAN):
                raise DataException(f"{_where(record)}: field {name!r} has type {schema.type.value}, "
                                    "which cannot name a directory; partition on an integer, string or boolean field")
            if value is None:
                raise DataException(f"{_where(record)}: partition field {name!r} is null; "
                                    "filter such records out (a transform) or partition on a required field")
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, (int, str)):
                text = str(value)
            else:
                raise DataException(f"{_where(record)}: partition field {name!r} holds a {type(value).__name__}; "
                                    "only integers, strings and booleans can name a directory")
            if "/" in text or text in ("", ".", ".."):
                raise DataException(f"{_where(record)}: partition field {name!r} value {text!r} cannot be a "
                                    "directory name (empty, '.', '..' or containing '/')")
            parts.append(f"{name}={text}")
        return "/".join(parts)


class TimeBasedPartitioner(Partitioner):
    """The ``path.format`` of the record's time bucket.

    The bucket is the extracted timestamp floored to ``partition.duration.ms`` in
    local time of ``timezone`` (Confluent's ``getPartition``), formatted with the
    Joda-Time pattern ``path.format`` (see :mod:`.timeformat`).
    """

    kind = TIME
    time_based = True

    def __init__(self, path_format: str, duration_ms: int, locale: str = "en", timezone: str = "UTC",
                 extractor: str = "Record", timestamp_field: str = "timestamp"):
        if duration_ms <= 0:
            raise ValueError("partition.duration.ms must be a positive number of milliseconds")
        kind = resolve_extractor(extractor)
        if kind is None:
            raise ValueError(f"unknown timestamp.extractor {extractor!r}; use Record or RecordField")
        if kind == "Wallclock":
            raise ValueError("timestamp.extractor=Wallclock depends on when the sink runs, so reruns would write "
                             "different paths and exactly-once would be lost; use Record or RecordField")
        self.format = compile_pattern(path_format, locale)
        self.duration_ms = int(duration_ms)
        self.zone = ZoneInfo(timezone)
        self.extractor = kind
        self.timestamp_field = timestamp_field

    def timestamp(self, record):
        if self.extractor == "Record":
            if record.timestamp is None:
                raise DataException(f"{_where(record)} has no timestamp, which timestamp.extractor=Record needs; "
                                    "use timestamp.extractor=RecordField with timestamp.field")
            return int(record.timestamp)
        value, _ = field_value(record, self.timestamp_field)
        return _to_millis(value, record, self.timestamp_field)

    def bucket(self, ts_ms: int) -> _dt.datetime:
        """The start of the bucket holding ``ts_ms``, as a datetime in ``timezone``."""
        utc = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=ts_ms)
        local = utc.astimezone(self.zone)
        local_ms = ts_ms + int(local.utcoffset().total_seconds() * 1000)
        start_local = (local_ms // self.duration_ms) * self.duration_ms
        naive = _dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=start_local)
        return naive.replace(tzinfo=self.zone)

    def encode(self, record):
        return self.format(self.bucket(self.timestamp(record)))


def _to_millis(value: Any, record: SinkRecord, name: str) -> int:
    if isinstance(value, bool) or value is None:
        raise DataException(f"{_where(record)}: timestamp field {name!r} is {value!r}; it must hold epoch "
                            "milliseconds, a timestamp or an ISO-8601 string")
    if isinstance(value, int):
        return value
    if isinstance(value, _dt.datetime):
        return Timestamp.from_logical(value)
    if isinstance(value, _dt.date):
        return Timestamp.from_logical(_dt.datetime(value.year, value.month, value.day, tzinfo=_dt.timezone.utc))
    if isinstance(value, str):
        try:
            parsed = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise DataException(f"{_where(record)}: timestamp field {name!r} value {value!r} is not ISO-8601") from None
        return Timestamp.from_logical(parsed)
    raise DataException(f"{_where(record)}: timestamp field {name!r} holds a {type(value).__name__}; it must hold "
                        "epoch milliseconds, a timestamp or an ISO-8601 string")


def build_partitioner(config: dict) -> Partitioner:
    """The partitioner a parsed sink config asks for. Raises ``ValueError`` saying
    which key is wrong (the connector's ``validate`` reports the same problems)."""
    kind = resolve_partitioner(config.get("partitioner.class") or DEFAULT)
    if kind is None:
        raise ValueError(f"unknown partitioner.class {config.get('partitioner.class')!r}")
    if kind == DEFAULT:
        return DefaultPartitioner()
    if kind == FIELD:
        return FieldPartitioner(config.get("partition.field.name") or [])
    if kind in FIXED_FORMATS:
        path_format, duration = FIXED_FORMATS[kind]
    else:
        path_format, duration = config.get("path.format") or "", int(config.get("partition.duration.ms") or -1)
        if not path_format:
            raise ValueError("TimeBasedPartitioner needs path.format")
    p = TimeBasedPartitioner(path_format, duration, config.get("locale") or "en", config.get("timezone") or "UTC",
                             config.get("timestamp.extractor") or "Record", config.get("timestamp.field") or "timestamp")
    p.kind = kind
    return p
