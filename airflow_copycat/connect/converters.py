"""Converters: between Connect data (schema + value) and the bytes stored in Kafka.

The framework, not the connector, converts: a source record's key and value go
through ``key.converter`` / ``value.converter`` on the way into Kafka, a sink
record's come back through them on the way out. Configure them with Kafka
Connect's keys: ``value.converter=org.apache.kafka.connect.json.JsonConverter``
and ``value.converter.schemas.enable=false`` (the ``value.converter.`` prefix is
stripped before :meth:`Converter.configure`).

A tombstone is ``None`` both ways: ``from_connect_data(topic, None, None)``
returns ``None`` and ``to_connect_data(topic, None)`` returns a ``None`` value.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from .data import Schema, Type
from .errors import DataException


class SchemaAndValue(NamedTuple):
    schema: Schema | None
    value: Any


class Converter:
    """Converts one side (key or value) of records of any topic."""

    def configure(self, configs: Mapping[str, Any], is_key: bool) -> None:
        """Called once before use with the converter's own keys (prefix stripped)."""

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any, headers=None) -> bytes | None:
        """Serialize; raise :class:`DataException` if ``value`` does not fit ``schema``."""
        raise NotImplementedError

    def to_connect_data(self, topic: str, data: bytes | None, headers=None) -> SchemaAndValue:
        """Deserialize; raise :class:`DataException` naming the problem for bad bytes."""
        raise NotImplementedError


class StringConverter(Converter):
    """UTF-8 strings (``converter.encoding`` changes the charset). Non-string values are
    written with ``str()``; reads give ``Schema.OPTIONAL_STRING``."""

    encoding = "utf-8"

    def configure(self, configs, is_key):
        self.encoding = configs.get("converter.encoding") or configs.get("encoding") or "utf-8"

    def from_connect_data(self, topic, schema, value, headers=None):
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        return str(value).encode(self.encoding)

    def to_connect_data(self, topic, data, headers=None):
        if data is None:
            return SchemaAndValue(Schema.OPTIONAL_STRING, None)
        try:
            return SchemaAndValue(Schema.OPTIONAL_STRING, bytes(data).decode(self.encoding))
        except UnicodeDecodeError as e:
            raise DataException(f"topic {topic}: bytes are not valid {self.encoding}: {e}") from None


class ByteArrayConverter(Converter):
    """Bytes as they are. Writes only ``bytes`` values (schema ``bytes`` or none)."""

    def from_connect_data(self, topic, schema, value, headers=None):
        if schema is not None and schema.type is not Type.BYTES:
            raise DataException(f"ByteArrayConverter cannot write a {schema.type.value} schema (topic {topic})")
        if value is None:
            return None
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise DataException(f"ByteArrayConverter needs bytes, got {type(value).__name__} (topic {topic})")
        return bytes(value)

    def to_connect_data(self, topic, data, headers=None):
        return SchemaAndValue(Schema.OPTIONAL_BYTES, None if data is None else bytes(data))
