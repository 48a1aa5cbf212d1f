"""What a dead-lettered record looks like, so it can be read back and replayed.

Kafka Connect's dead-letter queue (sinks only) holds the record's original key
and value bytes and, with ``errors.deadletterqueue.context.headers.enable``, the
``__connect.errors.*`` headers saying where it came from and why it failed.
Ours holds the same for sinks. A *source* record fails before it ever was
bytes, so the runtime writes it with :func:`encode_source_record`:

* key and value as Kafka Connect JSON envelopes (``{"schema": ..., "payload": ...}``),
  which keep the schema; a value that does not fit its schema (often why it
  failed) as schemaless JSON; failing that, as text;
* headers ``__copycat.record.topic`` (the topic it was headed for),
  ``__copycat.record.key.format`` and ``__copycat.record.value.format``
  (``connect-json`` | ``json`` | ``text``), always, plus the record's own headers.

Data a source task could not turn into a record at all (an undecodable line,
reported with ``SourceTaskContext.report_error``) is written as the raw bytes
the task read, value format ``raw``; it replays as a bytes value. The usual fix
for those is in the connector (an ``encoding`` key): rewind its offset instead.

:func:`decode_source_record` turns such a key and value back into Connect data.
"""

from __future__ import annotations

from typing import Any

from .data import Schema
from .errors import DataException
from .json_converter import JsonConverter

ERRORS_HEADER_PREFIX = "__connect.errors."
"""Kafka Connect's context headers (``__connect.errors.topic``, ``...partition``, ``...offset``, ...)."""
H_ORIGINAL_TOPIC = ERRORS_HEADER_PREFIX + "topic"
RECORD_HEADER_PREFIX = "__copycat.record."
H_RECORD_TOPIC = RECORD_HEADER_PREFIX + "topic"
H_KEY_FORMAT = RECORD_HEADER_PREFIX + "key.format"
H_VALUE_FORMAT = RECORD_HEADER_PREFIX + "value.format"
FORMAT_ENVELOPE = "connect-json"
FORMAT_JSON = "json"
FORMAT_TEXT = "text"
FORMAT_RAW = "raw"  # data a source task could not decode itself (SourceTaskContext.report_error)


def _converter(schemas: bool, is_key: bool) -> JsonConverter:
    conv = JsonConverter()
    conv.configure({"schemas.enable": schemas}, is_key)
    return conv


def encode_source_record(record) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """Key bytes, value bytes and the ``__copycat.record.*`` headers of a failed source record."""

    def encode(schema, value, is_key):
        for fmt, schemas in ((FORMAT_ENVELOPE, True), (FORMAT_JSON, False)):
            try:
                return fmt, _converter(schemas, is_key).from_connect_data(record.topic, schema if schemas else None,
                                                                          value)
            except Exception:  # noqa: BLE001 - the next format may hold it
                continue
        return FORMAT_TEXT, None if value is None else str(value).encode("utf-8", "replace")

    key_fmt, key = encode(record.key_schema, record.key, True)
    value_fmt, value = encode(record.value_schema, record.value, False)
    return key, value, [(H_RECORD_TOPIC, record.topic.encode("utf-8")), (H_KEY_FORMAT, key_fmt.encode("utf-8")),
                        (H_VALUE_FORMAT, value_fmt.encode("utf-8"))]


def raw_data_headers(topic: str | None) -> list[tuple[str, bytes]]:
    """The ``__copycat.record.*`` headers of raw data a source task reported as undecodable."""
    headers = [(H_VALUE_FORMAT, FORMAT_RAW.encode())]
    return headers + [(H_RECORD_TOPIC, topic.encode("utf-8"))] if topic else headers


def decode_source_record(data: bytes | None, fmt: str, is_key: bool) -> tuple[Schema | None, Any]:
    """``(schema, value)`` of a key or value :func:`encode_source_record` wrote in format ``fmt``.
    Raises :class:`DataException` for bytes that are not what ``fmt`` says."""
    if data is None:
        return None, None
    if fmt == FORMAT_ENVELOPE:
        return tuple(_converter(True, is_key).to_connect_data("", data))
    if fmt == FORMAT_JSON:
        return tuple(_converter(False, is_key).to_connect_data("", data))
    if fmt == FORMAT_TEXT:
        return Schema.OPTIONAL_STRING, data.decode("utf-8", "replace")
    if fmt == FORMAT_RAW:
        return Schema.OPTIONAL_BYTES, data
    raise DataException(f"unknown dead-letter payload format {fmt!r}")
