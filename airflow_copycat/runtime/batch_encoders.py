"""Whole-batch encoding: the key and value bytes of a :class:`~..connect.batch.SourceBatch`, column by column.

:func:`batch_encoder` returns, for a configured converter, an encoder whose
``encode(topic, batch, schema, columns)`` gives an Arrow binary/string array of
the bytes the converter's ``from_connect_data`` writes for each row (a null
where it returns ``None``) and the rows it could not encode in columns, or
``None`` when it cannot encode that batch at all. The caller sends those rows
through the per-record path, which writes the same bytes or raises the same
error, so a fast path never changes what reaches Kafka or the dead-letter queue.

How each converter is done:

* **JsonConverter**: :mod:`.batch_json`.
* **StringConverter** (UTF-8): a string column as it is.
* **ByteArrayConverter**: a binary column as it is.
* **AvroConverter**: :mod:`.batch_avro`.
* Any other converter (a plugin): ``None``, the whole batch goes row by row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..connect.batch import KEY_COLUMN, VALUE_COLUMN, SourceBatch
from ..connect.converters import ByteArrayConverter, Converter, StringConverter
from ..connect.data import Schema, Type
from ..converters.json_converter import JsonConverter

_TIMESTAMP_DIVISOR = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


class Encoded:
    """What an encoder made of one side of a batch: ``data`` (an Arrow binary or string array, one
    entry per row, null for ``None``) and ``slow`` (indexes of the rows to send through the
    per-record path instead, ascending)."""

    __slots__ = ("data", "slow")

    def __init__(self, data, slow: list[int]):
        self.data, self.slow = data, slow


class BatchEncoder:
    """Encodes one side (key or value) of batches, as ``converter`` would record by record."""

    def __init__(self, converter: Converter):
        self.converter = converter

    def encode(self, batch: SourceBatch, schema: Schema | None, columns) -> Encoded | None:
        """``columns``: the side's data (a Table of the struct's fields, or the one column of a
        primitive). ``None``: this encoder cannot do this batch; the caller goes row by row."""
        raise NotImplementedError


def batch_encoder(converter: Converter) -> BatchEncoder | None:
    """The batch encoder for a configured converter, or ``None`` when it has none."""
    t = type(converter)
    if t is JsonConverter:
        from .batch_json import JsonBatchEncoder

        return JsonBatchEncoder(converter)
    if t is StringConverter and converter.encoding.replace("-", "").lower() == "utf8":
        return _StringBatchEncoder(converter)
    if t is ByteArrayConverter:
        return _BytesBatchEncoder(converter)
    from ..converters.avro.converter import AvroConverter

    if t is AvroConverter:
        from .batch_avro import AvroBatchEncoder

        return AvroBatchEncoder(converter)
    return None


def side_columns(batch: SourceBatch, is_key: bool):
    """(schema, columns) of one side of ``batch``: a Table of a struct's fields or one Arrow column;
    (None, None) for a batch without a key."""
    if not is_key:
        schema = batch.value_schema
        if schema.type is Type.STRUCT:
            return schema, batch.data.select([f.name for f in schema.fields])
        return schema, batch.data.column(VALUE_COLUMN)
    if batch.key_fields:
        return batch.key_schema, batch.data.select(list(batch.key_fields))
    if batch.has_key:
        return batch.key_schema, batch.data.column(KEY_COLUMN)
    return None, None


def _combined(column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


class _StringBatchEncoder(BatchEncoder):
    def encode(self, batch, schema, columns):
        if columns is None:
            return Encoded(pa.nulls(len(batch), pa.binary()), [])
        if schema is not None and schema.type is Type.STRUCT or \
                not (pa.types.is_string(columns.type) or pa.types.is_large_string(columns.type)):
            return None  # str() of a Struct or another value: the converter's own way
        return Encoded(_combined(columns), [])


class _BytesBatchEncoder(BatchEncoder):
    def encode(self, batch, schema, columns):
        if columns is None:
            return Encoded(pa.nulls(len(batch), pa.binary()), [])
        if schema is not None and schema.type is not Type.BYTES:
            return None  # the converter refuses every row: the per-record path reports each
        if not (pa.types.is_binary(columns.type) or pa.types.is_large_binary(columns.type)):
            return None
        return Encoded(_combined(columns), [])


_CONSTANT_TYPES = (pa.types.is_integer, pa.types.is_boolean, pa.types.is_string, pa.types.is_large_string,
                   pa.types.is_timestamp, pa.types.is_date32, pa.types.is_time)


def _constant(arr: pa.Array) -> bool:
    """Whether ``arr`` (2 rows or more, no null) holds one value in every row, for the types whose equal
    values always have equal texts (not floats: 0.0 equals -0.0; not decimals or bytes, not nested)."""
    n = len(arr)
    if n < 2 or arr.null_count or not any(is_type(arr.type) for is_type in _CONSTANT_TYPES):
        return False
    first = arr[0]
    if not (first.equals(arr[n - 1]) and first.equals(arr[n // 2])):  # most columns: known at once
        return False
    bounds = pc.min_max(arr)
    return bounds["min"].equals(bounds["max"])


def _mask(bools) -> np.ndarray:
    return np.asarray(bools.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _epoch_ms(arr: pa.Array) -> pa.Array:
    """Timestamps as epoch milliseconds, floored (as ``Timestamp.from_logical``)."""
    unit = arr.type.unit
    raw = arr.cast(pa.int64()) if arr.type.tz is None else arr.cast(pa.timestamp(unit)).cast(pa.int64())
    divisor = _TIMESTAMP_DIVISOR[unit]
    if divisor is None:
        return pc.multiply(raw, 1000)
    if divisor == 1:
        return raw
    values = np.floor_divide(raw.fill_null(0).to_numpy(), divisor)
    return pa.array(values, pa.int64(), mask=_mask(raw.is_null()) if raw.null_count else None)


def _time_ms(arr: pa.Array) -> pa.Array:
    """Times of day as milliseconds (``Time.from_logical``: microseconds floored)."""
    unit = arr.type.unit
    raw = arr.cast(pa.int64() if pa.types.is_time64(arr.type) else pa.int32()).cast(pa.int64())
    if unit == "s":
        return pc.multiply(raw, 1000)
    if unit == "ms":
        return raw
    return pc.divide(raw, 1_000 if unit == "us" else 1_000_000)  # non-negative: truncation is the floor


def _decimal_minimal(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(big-endian 16-byte rows, how many trailing bytes of each are its minimal two's-complement
    form) of a decimal128 array's unscaled values (``BigInteger.toByteArray``)."""
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(arr.offset + n) * 16)[arr.offset * 16:]
    be = raw.reshape(n, 16)[:, ::-1]  # big-endian
    # a leading byte can go when it only extends the sign of the next one
    lead, nxt = be[:, :15], be[:, 1:]
    redundant = ((lead == 0) & (nxt < 0x80)) | ((lead == 0xFF) & (nxt >= 0x80))
    # the leading run of redundant bytes ends at the first that is not (all 15 are for 0 and -1)
    first = np.argmin(redundant, axis=1)
    run = np.where(np.take_along_axis(redundant, first[:, None], axis=1)[:, 0], 15, first)
    return be, 16 - run


def decimal_bytes(arr: pa.Array) -> pa.Array:
    """Each decimal128's unscaled value as its minimal big-endian two's-complement bytes (Connect's
    Decimal bytes, Avro's ``decimal``); nulls stay null."""
    be, length = _decimal_minimal(arr)
    ends = np.cumsum(length)
    keep = np.arange(16)[None, :] >= (16 - length)[:, None]  # row-major: each row's bytes in order
    data = np.ascontiguousarray(be[keep]) if len(arr) else np.empty(0, np.uint8)
    out = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(arr), [
        None, pa.py_buffer(np.concatenate([[0], ends]).astype(np.int64)), pa.py_buffer(data)])
    return pc.if_else(arr.is_null(), pa.scalar(None, pa.large_binary()), out) if arr.null_count else out
