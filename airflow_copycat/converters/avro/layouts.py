"""The bytes of an Avro record: the Confluent wire format and the registry-less layouts.

Contract: ``LayoutsMixin`` gives :class:`~.converter.AvroConverter` the writing and the reading
of each layout the docstring of :mod:`.converter` shows: ``_embedded_header`` (``framed``:
``0xC3 0x53``, the schema as an Avro string; ``single-object``: ``0xC3 0x01`` and the schema's
fingerprint, the schema then known to this converter and process), ``_container_bytes`` (an
Avro object container file of one record), and for reading ``_confluent_reader`` (magic 0, a
schema id the registry resolves), ``_framed_reader``, ``_single_object_reader`` (the schema
found by fingerprint) and ``_read_container``. Headers and readers are cached per schema in
the converter's LRU caches. Bytes that are truncated or of no layout raise ``DataException``.
"""

from __future__ import annotations

import hashlib
import io
import json

from ...connect.converters import SchemaAndValue
from ...connect.errors import DataException
from .codec import AvroWriter
from .config import EMBEDDED_FORMAT, SCHEMA_REGISTRY_URL
from .single_object import (
    HEADER_SIZE,
    KNOWN_SCHEMAS,
    KNOWN_SCHEMAS_FILES,
    WRITTEN,
    describe_fingerprint,
)
from .single_object import (
    header as single_object_header,
)

CONFLUENT_MAGIC = 0
FRAMED_MAGIC = b"\xc3\x53"
CONTAINER_MAGIC = b"Obj\x01"


def _zigzag(n: int) -> bytes:
    """An Avro ``long``: zig-zag, then base-128 varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_long(data, pos: int) -> tuple[int, int]:
    """An Avro ``long`` at ``data[pos:]``: ``(value, position after it)``."""
    shift = n = 0
    while True:
        if pos >= len(data):
            raise DataException("truncated: the bytes end inside a length")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise DataException("a length is longer than 10 bytes: not Avro")


def _describe(data: bytes) -> str:
    """A hint at what bytes that are not Avro might be."""
    head = bytes(data[:1])
    if head in (b"{", b"["):
        return "they look like JSON (written by JsonConverter?)"
    try:
        text = bytes(data[:40]).decode("utf-8")
        if text.isprintable():
            return "they look like text (written by StringConverter?)"
    except UnicodeDecodeError:
        pass
    return ("the first byte is neither 0x00 (Confluent), 0xC3 0x53 (schema embedded), 0xC3 0x01 (single-object) "
            "nor 'Obj\\x01' (container)")


class LayoutsMixin:
    """Writes and reads the layouts for :class:`~.converter.AvroConverter` (see the module docstring)."""

    def _embedded_header(self, writer: AvroWriter) -> bytes:
        """The bytes before the value without a registry: the framed header, or the single-object
        one (the schema then known by its fingerprint to this converter and this process)."""
        if self._single_object:
            key = ("single-object", writer.schema_json)
            hit = self._headers.get(key)
            if hit is None:
                try:
                    hit = single_object_header(writer.avro_schema)
                except (ValueError, KeyError, TypeError) as e:
                    raise DataException(f"no Parsing Canonical Form of the Avro schema: {e}") from None
                self._written.add(writer.schema_json, replace=True)
                WRITTEN.add(writer.schema_json, replace=True)
                self._headers.put(key, hit)
            return hit
        hit = self._headers.get(writer.schema_json)
        if hit is None:
            raw = writer.schema_json.encode("utf-8")
            hit = self._headers.put(writer.schema_json, FRAMED_MAGIC + _zigzag(len(raw)) + raw)
        return hit

    def _container_bytes(self, writer: AvroWriter, body: bytes) -> bytes:
        key = ("container", writer.schema_json)
        header = self._headers.get(key)
        if header is None:
            raw = writer.schema_json.encode("utf-8")
            sync = hashlib.md5(raw).digest()  # deterministic: the same record gives the same bytes
            meta = [(b"avro.schema", raw), (b"avro.codec", b"null")]
            head = bytearray(CONTAINER_MAGIC)
            head += _zigzag(len(meta))
            for k, v in meta:
                head += _zigzag(len(k)) + k + _zigzag(len(v)) + v
            head += _zigzag(0)
            header = self._headers.put(key, (bytes(head) + sync, sync))
        head, sync = header
        return head + _zigzag(1) + _zigzag(len(body)) + body + sync

    def _confluent_reader(self, topic: str, data: bytes):
        if len(data) < 5:
            raise DataException(f"{len(data)} bytes are too short for the Confluent wire format "
                                "(magic byte 0, a 4-byte schema id, then the Avro value)")
        schema_id = int.from_bytes(data[1:5], "big")
        registry = self._registry
        if registry is None:
            raise DataException(f"the record is in the Confluent wire format (schema id {schema_id}), which needs "
                                f"a schema registry: set the converter's {SCHEMA_REGISTRY_URL}")
        key = (schema_id, topic)
        reader = self._readers.get(key)
        if reader is None:
            text = registry.schema(schema_id)
            subject = self._subject(topic, json.loads(text))
            reader_schema = self._reader_schema
            if self._use_latest:
                reader_schema = registry.latest(subject)[1]
            version = registry.version(subject, text)
            reader = self._readers.put(key, self._data.reader(text, reader_schema, version=version,
                                                              key=("id", schema_id, topic, reader_schema)))
        return reader, 5

    def _framed_reader(self, data: bytes):
        n, pos = _read_long(data, 2)
        if n <= 0 or pos + n > len(data):
            raise DataException(f"truncated: the embedded schema is said to be {n} bytes, "
                                f"{len(data) - pos} bytes follow")
        raw = bytes(data[pos:pos + n])
        reader = self._readers.get(raw)
        if reader is None:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataException("the embedded schema is not UTF-8: the bytes are not a schema-embedded "
                                    "Avro record") from None
            reader = self._readers.put(raw, self._data.reader(text, self._reader_schema))
        return reader, pos + n

    def _single_object_reader(self, data: bytes):
        if len(data) < HEADER_SIZE:
            raise DataException(f"{len(data)} bytes are too short for Avro single-object encoding (0xC3 0x01, an "
                                "8-byte schema fingerprint, then the Avro value)")
        fp = bytes(data[2:HEADER_SIZE])
        reader = self._readers.get(("fp", fp))
        if reader is None:
            text = self._written.get(fp) or self._known.get(fp) or WRITTEN.get(fp)
            if text is None:
                raise DataException(
                    f"the record is in Avro single-object encoding with schema fingerprint {describe_fingerprint(fp)}, "
                    f"a schema this converter does not know: give the reader the writer's schema in {KNOWN_SCHEMAS} "
                    f"(JSON) or {KNOWN_SCHEMAS_FILES} (.avsc files), or have the writer embed it "
                    f"({EMBEDDED_FORMAT}=framed or container) or use a schema registry")
            reader = self._readers.put(("fp", fp), self._data.reader(text, self._reader_schema))
        return reader, HEADER_SIZE

    def _read_container(self, data: bytes) -> SchemaAndValue:
        pos = 4
        meta: dict[bytes, bytes] = {}
        while True:
            count, pos = _read_long(data, pos)
            if count == 0:
                break
            if count < 0:
                _, pos = _read_long(data, pos)
                count = -count
            for _ in range(count):
                klen, pos = _read_long(data, pos)
                k = bytes(data[pos:pos + klen])
                pos += klen
                vlen, pos = _read_long(data, pos)
                meta[k] = bytes(data[pos:pos + vlen])
                pos += vlen
        sync = bytes(data[pos:pos + 16])
        pos += 16
        if b"avro.schema" not in meta or len(sync) != 16:
            raise DataException("truncated Avro container: no schema in its header")
        codec = meta.get(b"avro.codec", b"null").decode("ascii", "replace")
        raw = meta[b"avro.schema"]
        reader = self._readers.get(("container", raw))
        if reader is None:
            reader = self._readers.put(("container", raw), self._data.reader(raw.decode("utf-8"), self._reader_schema))
        values = []
        while pos < len(data):
            count, pos = _read_long(data, pos)
            size, pos = _read_long(data, pos)
            block = bytes(data[pos:pos + size])
            pos += size
            if len(block) != size or bytes(data[pos:pos + 16]) != sync:
                raise DataException("truncated or corrupt Avro container: a block does not end with the sync marker")
            pos += 16
            if codec == "deflate":
                import zlib

                block = zlib.decompress(block, -15)
            elif codec != "null":
                raise DataException(f"Avro container codec {codec!r} is not supported here; use null or deflate")
            offset = 0
            for _ in range(count):
                value, offset = self._read_one(reader, block, offset)
                values.append(value)
        if len(values) != 1:
            raise DataException(f"an Avro container record must hold exactly one value, this one holds {len(values)}")
        return SchemaAndValue(reader.connect_schema, values[0])

    @staticmethod
    def _read_one(reader, block: bytes, offset: int):
        buf = io.BytesIO(block)
        buf.seek(offset)
        return reader.read_from(buf), buf.tell()
