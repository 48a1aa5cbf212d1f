"""What a dead-lettered record looks like, so it can be read back and replayed.

Kafka Connect's dead-letter queue (sinks only) holds the record's original key
and value bytes and, with ``errors.deadletterqueue.context.headers.enable``, the
``__connect.errors.*`` headers saying where it came from and why it failed.
Ours holds the same for sinks. A *source* record fails before it ever was
bytes, so the runtime writes it with :func:`encode_source_record`:

* the record as the connector made it, before any transform (a replay runs
  the transforms again);
* key and value as Kafka Connect JSON envelopes (``{"schema": ..., "payload": ...}``),
  which keep the schema; a value that does not fit its schema (often why it
  failed) as schemaless JSON with its schema apart, in header
  ``__copycat.record.value.schema`` (``...key.schema`` for keys); failing that, as text,
  which cannot be replayed;
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

from ..connect.data import Schema, Struct, Type
from ..connect.errors import DataException
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
    """Key bytes, value bytes and the ``__copycat.record.*`` headers of a failed source record
    (the record as the connector made it, before any transform)."""
    headers = [(H_RECORD_TOPIC, record.topic.encode("utf-8"))]

    def encode(schema, value, is_key):
        side = "key" if is_key else "value"
        try:
            data, fmt = _converter(True, is_key).from_connect_data(record.topic, schema, value), FORMAT_ENVELOPE
        except Exception:  # noqa: BLE001 - the value does not fit its schema: keep both apart
            try:
                data, fmt = _converter(False, is_key).from_connect_data(record.topic, None, value), FORMAT_JSON
            except Exception:  # noqa: BLE001 - not even JSON holds it
                data, fmt = (None if value is None else str(value).encode("utf-8", "replace")), FORMAT_TEXT
            if schema is not None:
                headers.append((f"{RECORD_HEADER_PREFIX}{side}.schema",
                                _converter(True, is_key).as_json_schema(schema).encode("utf-8")))
        headers.append((f"{RECORD_HEADER_PREFIX}{side}.format", fmt.encode("utf-8")))
        return data

    key = encode(record.key_schema, record.key, True)
    value = encode(record.value_schema, record.value, False)
    return key, value, headers


def raw_data_headers(topic: str | None) -> list[tuple[str, bytes]]:
    """The ``__copycat.record.*`` headers of raw data a source task reported as undecodable
    (``topic``: the connector's ``topic`` key, when it has one)."""
    headers = [(H_VALUE_FORMAT, FORMAT_RAW.encode())]
    return headers + [(H_RECORD_TOPIC, topic.encode("utf-8"))] if topic else headers


def decode_source_record(data: bytes | None, fmt: str, is_key: bool,
                         schema_json: bytes | None = None) -> tuple[Schema | None, Any]:
    """``(schema, value)`` of a key or value :func:`encode_source_record` wrote in format ``fmt``.

    A ``json`` payload gets its schema back from ``schema_json`` (the ``...schema`` header),
    *unchecked*: it did not fit, which is why it was dead-lettered, so the replay's (fixed)
    transforms get the chance to make it fit before the converter checks it. Raises
    :class:`DataException` for ``text`` payloads (``str()`` of a value JSON could not hold:
    it cannot be rebuilt) and bytes that are not what ``fmt`` says.
    """
    if data is None:
        return None, None
    if fmt == FORMAT_ENVELOPE:
        return tuple(_converter(True, is_key).to_connect_data("", data))
    if fmt == FORMAT_JSON:
        value = _converter(False, is_key).to_connect_data("", data).value
        if schema_json is None:
            return None, value
        import json

        schema = _converter(True, is_key).as_connect_schema(json.loads(schema_json))
        return schema, _unchecked(schema, value)
    if fmt == FORMAT_RAW:
        return Schema.OPTIONAL_BYTES, data
    if fmt == FORMAT_TEXT:
        raise DataException("it holds only the text of a value that JSON could not represent, so the record cannot "
                            "be rebuilt; rewind the connector's offset to read it again from the source instead")
    raise DataException(f"unknown dead-letter payload format {fmt!r}")


def _unchecked(schema: Schema | None, value: Any) -> Any:
    """``value`` (plain JSON data) shaped by ``schema`` without checking it fits: structs from
    maps by field name, recursively."""
    if schema is None or value is None:
        return value
    if schema.type is Type.STRUCT and isinstance(value, dict):
        return Struct._trusted(schema, [_unchecked(f.schema, value.get(f.name)) for f in schema.fields])
    if schema.type is Type.ARRAY and isinstance(value, list):
        return [_unchecked(schema.value_schema, v) for v in value]
    if schema.type is Type.MAP and isinstance(value, dict):
        return {k: _unchecked(schema.value_schema, v) for k, v in value.items()}
    return value
