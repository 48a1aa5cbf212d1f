"""Whole-batch Avro: the AvroConverter's bytes for every row of a batch, written column by column.

The encoder of :mod:`.batch_encoders` for ``AvroConverter`` (see there for the
contract: the same bytes as ``from_connect_data`` for every row it encodes, the
rows it cannot left to the per-record path, ``None`` for a batch it cannot do).
Avro's binary encoding of a record is the concatenation of its fields'
encodings, so each field becomes an Arrow binary column -- zig-zag varints for
``int``/``long`` (dates, times, timestamp-millis included), little-endian IEEE
for ``float``/``double``, a varint length and the bytes for ``string``,
``bytes`` and ``decimal`` (minimal two's-complement, as ``BigInteger``), one
byte for ``boolean``, the branch index first in a ``["null", T]`` union -- and
each row is the header (Confluent's magic byte and schema id, the framed
embedded schema, or the single-object marker and schema fingerprint -- the
converter's own ``_embedded_header``, so the bytes are the per-record path's)
followed by its fields, joined in Arrow.

Done in columns: a record schema (the converter's own, from its AvroData) of
those field types, with the registry (the schema registered or looked up once
per batch), the ``framed`` embedded layout or ``single-object``. Anything else -- nested records,
arrays, maps, enums, fields with defaults, ``use.latest.version``, the
``container`` layout, a registry that does not answer -- goes row by row, where
the converter retries, fails or dead-letters as it always does.
"""

from __future__ import annotations

import struct as _struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..connect.data import Type
from ..converters.avro.layouts import CONFLUENT_MAGIC
from .batch_encoders import BatchEncoder, Encoded, _combined, _epoch_ms, _mask, _time_ms, decimal_bytes

_EMPTY = pa.scalar(b"", pa.large_binary())


class AvroBatchEncoder(BatchEncoder):
    def encode(self, batch, schema, columns):
        conv = self.converter
        n = len(batch)
        if columns is None:
            return Encoded(pa.nulls(n, pa.large_binary()), [])
        if schema.type is not Type.STRUCT or conv._container or conv._use_latest:
            return None
        try:
            writer = conv._data.writer(schema)
            avro = writer.avro_schema
            if not isinstance(avro, dict) or avro.get("type") != "record":
                return None
            header = self._header(batch.topic, writer)
        except Exception:  # noqa: BLE001 -- a registry error or refusal: the per-record path reports it
            return None
        slow = np.zeros(n, dtype=bool)
        parts = [pa.scalar(header, pa.large_binary())]
        for i, (node, field) in enumerate(zip(avro["fields"], schema.fields)):
            if node.get("name") != field.name or field.schema.default is not None:
                return None
            encoded = _field(node["type"], _combined(columns.column(i)), slow)
            if encoded is None:
                return None
            parts.append(encoded)
        data = pc.binary_join_element_wise(*parts, _EMPTY) if len(parts) > 1 else \
            pa.array([header] * n, pa.large_binary())
        return Encoded(data, np.flatnonzero(slow).tolist())

    def _header(self, topic: str, writer) -> bytes:
        conv = self.converter
        registry = conv._registry
        if registry is None:
            return conv._embedded_header(writer)
        subject = conv._subject(topic, writer.avro_schema)
        text = writer.schema_json
        schema_id = registry.register(subject, text) if conv._auto_register else registry.lookup(subject, text)
        return _struct.pack(">bI", CONFLUENT_MAGIC, schema_id)


def _field(node, arr: pa.Array, slow: np.ndarray) -> pa.Array | None:
    """One field's Avro encoding per row (``node``: its Avro type), or ``None`` when not done here."""
    if isinstance(node, list):
        if len(node) != 2 or "null" not in node:
            return None
        null_at = node.index("null")
        inner = _value(node[1 - null_at], arr)
        if inner is None:
            return None
        tag_null, tag_value = (b"\x00", b"\x02") if null_at == 0 else (b"\x02", b"\x00")
        value = pc.binary_join_element_wise(pa.scalar(tag_value, pa.large_binary()), inner, _EMPTY)
        if not arr.null_count:
            return value
        return pc.if_else(arr.is_null(), pa.scalar(tag_null, pa.large_binary()), value)
    out = _value(node, arr)
    if out is not None and arr.null_count:  # null for a required field: the converter's error, row by row
        slow |= _mask(arr.is_null())
        out = pc.if_else(arr.is_null(), _EMPTY, out)
    return out


def _value(node, arr: pa.Array) -> pa.Array | None:
    kind = node if isinstance(node, str) else node.get("type")
    logical = None if isinstance(node, str) else node.get("logicalType")
    at = arr.type
    if kind in ("int", "long"):
        if logical == "timestamp-millis" and pa.types.is_timestamp(at):
            ints = _epoch_ms(arr)
        elif logical == "date" and at == pa.date32():
            ints = arr.cast(pa.int32())
        elif logical == "time-millis" and pa.types.is_time(at):
            ints = _time_ms(arr)
        elif logical is None and pa.types.is_integer(at) and not pa.types.is_unsigned_integer(at):
            ints = arr
        else:
            return None
        values = np.asarray(ints.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        return _varints((values << 1) ^ (values >> 63))
    if logical is not None and not (kind == "bytes" and logical == "decimal"):
        return None
    if kind == "boolean" and at == pa.bool_():
        return _fixed(np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.uint8), 1)
    if kind == "float" and at == pa.float32():
        return _fixed(arr.fill_null(0.0).to_numpy(zero_copy_only=False).astype("<f4"), 4)
    if kind == "double" and at == pa.float64():
        return _fixed(arr.fill_null(0.0).to_numpy(zero_copy_only=False).astype("<f8"), 8)
    if kind == "string" and (pa.types.is_string(at) or pa.types.is_large_string(at)):
        return _length_prefixed(arr.cast(pa.large_binary()))
    if kind == "bytes" and logical == "decimal" and pa.types.is_decimal128(at) and at.scale == node.get("scale"):
        return _length_prefixed(decimal_bytes(arr))
    if kind == "bytes" and logical is None and (pa.types.is_binary(at) or pa.types.is_large_binary(at)):
        return _length_prefixed(arr.cast(pa.large_binary()))
    return None


def _binary(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1, [
        None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)])


def _fixed(values: np.ndarray, width: int) -> pa.Array:
    """Fixed-width little-endian values as one binary entry per row."""
    return _binary(np.arange(0, width * len(values) + 1, width), np.ascontiguousarray(values).view(np.uint8))


def _varints(z: np.ndarray) -> pa.Array:
    """Unsigned 64-bit values (already zig-zagged) as Avro varints, one binary entry per row."""
    z = z.view(np.uint64)
    n = len(z)
    lengths = np.ones(n, dtype=np.int64)
    rest = z >> np.uint64(7)
    while rest.any():
        lengths += rest != 0
        rest >>= np.uint64(7)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    out = np.empty(int(ends[-1]) if n else 0, dtype=np.uint8)
    rest = z.copy()
    for k in range(int(lengths.max()) if n else 0):
        rows = lengths > k
        more = (lengths[rows] > k + 1).astype(np.uint8) << 7
        out[starts[rows] + k] = (rest[rows] & np.uint64(0x7F)).astype(np.uint8) | more
        rest >>= np.uint64(7)
    return _binary(np.concatenate([[0], ends]), out)


def _length_prefixed(arr: pa.Array) -> pa.Array:
    """Each entry after its length as an Avro ``long`` (nulls become empty, their rows tagged null)."""
    lengths = np.asarray(pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return pc.binary_join_element_wise(_varints(lengths << 1), arr.fill_null(b""), _EMPTY)

