"""Whole-batch Avro: the AvroConverter's bytes for every row of a batch, written column by column.

The encoder of :mod:`.batch_encoders` for ``AvroConverter`` (see there for the
contract: the same bytes as ``from_connect_data`` for every row it encodes, the
rows it cannot left to the per-record path, ``None`` for a batch it cannot do).
Avro's binary encoding of a record is the concatenation of its fields'
encodings, so each field becomes an Arrow binary column -- zig-zag varints for
``int``/``long`` (dates, times, timestamp-millis included), little-endian IEEE
for ``float``/``double``, a varint length and the bytes for ``string``,
``bytes`` and ``decimal`` (minimal two's-complement, as ``BigInteger``), one
byte for ``boolean``, the branch index first in a ``["null", T]`` union, a nested
``record`` (an Arrow struct with a child named as each of its fields) as its
fields' encodings one after the other (spliced into the row's one join; an
optional field null in every row, or a column of one value in every row, is a
constant of that join, and an optional field's values are encoded over its
non-null rows only) -- and each row is the header (Confluent's
magic byte and schema id, the framed embedded schema, or the single-object
marker and schema fingerprint -- the converter's own ``_embedded_header``, so
the bytes are the per-record path's) followed by its fields, joined in Arrow.

Done in columns: a record schema (the converter's own, from its AvroData) of
those field types, nested records included (a record used again is named, not
defined: read as its definition), named Connect strings too (Debezium's
``io.debezium.data.Enum``, ``ZonedTimestamp``, ...: Avro ``string`` with
``connect.*`` properties; strings with Confluent's enum parameters are Avro
enums, not done here), with the registry (the schema registered or looked up
once per batch), the ``framed`` embedded layout or ``single-object``. A field
with a default is written as any other; a null in it (the converter writes the
default: ``Struct.values``) makes its row a fallback row, as a null in a
required field does -- unless a parent record is null there: its children's
values are not part of the record. Anything else -- arrays, maps, enums, fixed,
Connect unions, ``use.latest.version``, the ``container`` layout, a registry
that does not answer -- goes row by row, where the converter retries, fails or
dead-letters as it always does.
"""

from __future__ import annotations

import struct as _struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..connect.data import Schema, Type
from ..converters.avro.layouts import CONFLUENT_MAGIC
from ..converters.avro.names import AVRO_TYPE_UNION
from .batch_encoders import BatchEncoder, Encoded, _combined, _constant, _epoch_ms, _mask, _time_ms, decimal_bytes

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
        parts = _fields(_inlined(avro, None, {})["fields"], schema.fields,
                        [_combined(columns.column(i)) for i in range(columns.num_columns)], slow)
        if parts is None:
            return None
        data = _joined([header, *parts], n)
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


def _inlined(node, space: str | None, named: dict):
    """``node`` (a record, a union, a type) with each reference to a record by name replaced by the
    record's definition (Avro defines a name once, where it is first used, and refers to it by its
    full name, or its name alone within its namespace). ``space``: the enclosing namespace;
    ``named``: the records defined so far, by full name."""
    if isinstance(node, list):
        return [_inlined(n, space, named) for n in node]
    if isinstance(node, str):
        return named.get(node if "." in node or not space else f"{space}.{node}") or named.get(node, node)
    if node.get("type") != "record":
        return node
    name = node["name"]
    ns = node.get("namespace", space)
    full = name if "." in name or not ns else f"{ns}.{name}"
    inner = full.rpartition(".")[0] or None
    out = dict(node)
    named[full] = out  # before its fields: a field of it cannot refer to it (Connect schemas do not recurse)
    out["fields"] = [dict(f, type=_inlined(f["type"], inner, named)) for f in node["fields"]]
    return out


def _fields(nodes: list, fields: list, children: list, slow: np.ndarray) -> list | None:
    """The parts (see :func:`_joined`) of a record's fields' encodings (``nodes``: its Avro fields,
    ``fields`` its Connect fields, ``children`` their arrays, in that order), or ``None`` when one is
    not done here."""
    if len(nodes) != len(fields):
        return None
    parts: list = []
    for node, field, child in zip(nodes, fields, children):
        encoded = _field(node["type"], field.schema, child, slow) if node.get("name") == field.name else None
        if encoded is None:
            return None
        parts += encoded
    return parts


def _joined(parts: list, n: int) -> pa.Array:
    """The ``n`` rows of ``parts`` one after the other: constant ``bytes`` (adjacent ones merged) and binary
    arrays of ``n`` rows."""
    merged: list = []
    for p in parts:
        if isinstance(p, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += p
        else:
            merged.append(p)
    if not any(isinstance(p, pa.Array) for p in merged):
        return pa.repeat(pa.scalar(b"".join(merged), pa.large_binary()), n)
    return pc.binary_join_element_wise(*[pa.scalar(p, pa.large_binary()) if isinstance(p, bytes) else p
                                         for p in merged], _EMPTY)


def _field(node, schema: Schema, arr: pa.Array, slow: np.ndarray) -> list | None:
    """One field's Avro encoding as parts (``node``: its Avro type, ``schema`` its Connect schema), or
    ``None`` when not done here. An optional field (a ``["null", T]`` union) null in every row is its null
    branch's index, once; one without nulls is its value branch's index, once, then the value's parts;
    otherwise its values are encoded over its non-null rows only and the null branch's index fills the others."""
    if schema.default is not None and arr.null_count:  # written as the default: by the converter, row by row
        slow |= _mask(arr.is_null())
    n = len(arr)
    if isinstance(node, list):
        if len(node) != 2 or "null" not in node:
            return None
        null_at = node.index("null")
        tag_null, tag_value = (b"\x00", b"\x02") if null_at == 0 else (b"\x02", b"\x00")
        if n and arr.null_count == n:
            return [tag_null]
        if not arr.null_count:
            inner = _value_parts(node[1 - null_at], schema, arr, slow)
            return None if inner is None else [tag_value, *inner]
        present = arr.is_valid()
        values = arr.filter(present)
        values_slow = np.zeros(len(values), dtype=bool)
        inner = _value_parts(node[1 - null_at], schema, values, values_slow)
        if inner is None:
            return None
        slow[np.flatnonzero(_mask(present))] |= values_slow
        return [pc.replace_with_mask(pa.repeat(pa.scalar(tag_null, pa.large_binary()), n), present,
                                     _joined([tag_value, *inner], len(values)))]
    out = _value_parts(node, schema, arr, slow)
    if out is not None and arr.null_count:  # null for a required field: the converter's error, row by row
        slow |= _mask(arr.is_null())
        return [pc.if_else(arr.is_null(), _EMPTY, _joined(out, n))]
    return out


def _value_parts(node, schema: Schema, arr: pa.Array, slow: np.ndarray) -> list | None:
    """:func:`_value` as parts: a record's fields' parts (spliced into its parent's), a column holding one
    value in every row that value's encoding, once."""
    if not isinstance(node, str) and node.get("type") == "record":
        return _record(node, schema, arr, slow) if isinstance(arr, pa.StructArray) else None
    if _constant(arr):
        one = _value(node, schema, arr.slice(0, 1), np.zeros(1, dtype=bool))
        return None if one is None else [one[0].as_py()]
    value = _value(node, schema, arr, slow)
    return None if value is None else [value]


def _record(node, schema: Schema, arr: pa.StructArray, slow: np.ndarray) -> list | None:
    """A nested record from the StructArray's child of each field's name (other children ignored): its
    fields' parts. Only the rows where the parent is not null can be fallback rows because
    of its children. ``None`` (``slow`` untouched) when a field has no child of its name (or several)
    or is not done here."""
    index = [arr.type.get_field_index(f.name) for f in schema.fields]
    if -1 in index or schema.name == AVRO_TYPE_UNION:
        return None
    # field(i) is the child sliced as the parent (offset, length) but not masked by its nulls
    children_slow = np.zeros(len(arr), dtype=bool)
    parts = _fields(node["fields"], schema.fields, [arr.field(i) for i in index], children_slow)
    if parts is None:
        return None
    if arr.null_count:
        children_slow &= _mask(arr.is_valid())
    slow |= children_slow
    return parts


def _value(node, schema: Schema, arr: pa.Array, slow: np.ndarray) -> pa.Array | None:
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

