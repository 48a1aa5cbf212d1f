"""Whole-batch encoding: the key and value bytes of a :class:`~..connect.batch.SourceBatch`, column by column.

:func:`batch_encoder` returns, for a configured converter, an encoder whose
``encode(topic, batch, schema, columns)`` gives an Arrow binary/string array of
the bytes the converter's ``from_connect_data`` writes for each row (a null
where it returns ``None``) and the rows it could not encode in columns, or
``None`` when it cannot encode that batch at all. The caller sends those rows
through the per-record path, which writes the same bytes or raises the same
error, so a fast path never changes what reaches Kafka or the dead-letter queue.

How each converter is done:

* **JsonConverter** (both ``schemas.enable`` settings, both ``decimal.format``
  values): each field becomes an Arrow string column of its JSON text, then every
  row is joined with the constant member names (and the envelope's schema text).
  Integers, booleans, dates, times and timestamps (epoch ms, floored) are cast in
  Arrow; strings get Jackson's two-character escapes inserted with numpy in one
  pass over their UTF-8 bytes, and the rare string with another control character
  or a character beyond U+FFFF is quoted by the converter's own function; doubles and floats
  whose Java text is plain (``1e-3 <= |x| < 1e7``) take Arrow's shortest digits
  plus Java's ``.0``, others the converter's own function; decimals become base64
  of their minimal two's-complement bytes with numpy (``NUMERIC`` up to scale 6
  as Arrow's text). A nested struct (an Arrow struct with a child named as each
  of its fields) is done as the root struct, recursively: its fields' texts joined
  with its member names. Arrays, maps and bytes (and a struct column of another
  shape) are written value by value by the converter's own ``_to_json``.
  A null in a required field without a default, or a value the converter refuses,
  makes its row a fallback row (not a null parent struct's children: a child's
  value under a null parent is not part of the record).
* **StringConverter** (UTF-8): a string column as it is.
* **ByteArrayConverter**: a binary column as it is.
* **AvroConverter**: :mod:`.batch_avro`.
* Any other converter (a plugin): ``None``, the whole batch goes row by row.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..connect.batch import KEY_COLUMN, VALUE_COLUMN, SourceBatch, _values
from ..connect.converters import ByteArrayConverter, Converter, StringConverter
from ..connect.data import Date, Decimal, Schema, Time, Timestamp, Type
from ..connect.errors import DataException
from ..converters.java_numbers import _java_double_json, _java_float_json
from ..converters.json_converter import JsonConverter
from ..converters.json_text import _quote

_INTS = {Type.INT8: pa.int8(), Type.INT16: pa.int16(), Type.INT32: pa.int32(), Type.INT64: pa.int64()}
# the two-character escapes Jackson writes: the byte, and the letter after the backslash
_ESCAPES = {ord("\\"): "\\", ord('"'): '"', ord("\n"): "n", ord("\t"): "t", ord("\r"): "r", ord("\b"): "b", ord("\f"): "f"}
_ESCAPE_LETTER = np.arange(256, dtype=np.uint8)
for _byte, _letter in _ESCAPES.items():
    _ESCAPE_LETTER[_byte] = ord(_letter)
# the other control characters: Jackson writes them as \u00XX (upper case), and so do only the
# converter's own function and its rows (with the lead bytes 0xF0-0xF4 of characters beyond U+FFFF,
# which Jackson writes as a surrogate pair of escapes)
_UNLIKE_JACKSON_MASK = np.array([b < 0x20 and b not in _ESCAPES for b in range(256)])
# the same as characters: strings holding one are quoted by the converter's own function
_UNLIKE_JACKSON = r"[\x00-\x07\x0b\x0e-\x1f]|[\x{10000}-\x{10FFFF}]"
_FLOAT32_MIN_NORMAL = 1.1754943508222875e-38
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
        return _JsonBatchEncoder(converter)
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


class _JsonBatchEncoder(BatchEncoder):
    converter: JsonConverter

    def encode(self, batch, schema, columns):
        conv = self.converter
        n = len(batch)
        if columns is None:
            return Encoded(pa.nulls(n, pa.string()), [])
        slow = np.zeros(n, dtype=bool)
        if schema.type is Type.STRUCT:
            children = [_combined(columns.column(i)) for i in range(len(schema.fields))]
            payload = self._struct(schema, children, n, slow, conv._root)
        else:
            payload = self._column(schema, _combined(columns), slow, conv._root)
        if payload is None:
            return None
        if conv.schemas_enable:
            payload = _join('{"schema":' + conv.as_json_schema(schema) + ',"payload":', payload, "}")
        return Encoded(payload, np.flatnonzero(slow).tolist())

    # ---- one column -> its JSON text (a string array without nulls where the row is not slow)

    def _struct(self, schema: Schema, children: list, n: int, slow: np.ndarray, path: str) -> pa.Array | None:
        """The ``n`` rows of a struct's JSON text from ``children`` (its fields' arrays, in the
        schema's order): each field's text joined with the constant member names; ``{}`` per row
        for a struct without fields. ``None`` when a field cannot be done in columns."""
        parts: list[Any] = []
        close = ""  # a string field's closing quote, written with the next member's name
        for i, (f, child) in enumerate(zip(schema.fields, children)):
            member = close + ("{" if i == 0 else ",") + _quote(f.name) + ":"
            if f.schema.type is Type.STRING and not child.null_count and \
                    (pa.types.is_string(child.type) or pa.types.is_large_string(child.type)):
                parts += [member + '"', _json_strings(child, quoted=False)]  # the quotes in the constants
                close = '"'
                continue
            text = self._column(f.schema, child, slow, f"{path}.{f.name}")
            if text is None:
                return None
            parts += [member, text]
            close = ""
        if not parts:
            return pa.array(["{}"] * n, pa.large_string())
        return _join(*parts, close + "}")

    def _nested(self, schema: Schema, arr: pa.StructArray, slow: np.ndarray, path: str) -> pa.Array | None:
        """A nested struct column by :meth:`_struct`, from the StructArray's child of each field's
        name (other children ignored): only the rows where the parent is not null can be fallback
        rows because of its children. ``None`` (``slow`` untouched) when a field has no child of its
        name (or several) or cannot be done in columns."""
        index = [arr.type.get_field_index(f.name) for f in schema.fields]
        if -1 in index:
            return None
        # field(i) is the child sliced as the parent (offset, length) but not masked by its nulls
        children_slow = np.zeros(len(arr), dtype=bool)
        text = self._struct(schema, [arr.field(i) for i in index], len(arr), children_slow, path)
        if text is None:
            return None
        if arr.null_count:
            children_slow &= _mask(arr.is_valid())
        slow |= children_slow
        return text

    def _column(self, schema: Schema, arr: pa.Array, slow: np.ndarray, path: str) -> pa.Array | None:
        text = self._values(schema, arr, slow, path)
        if text is None:
            return None
        if text.type != pa.large_string():
            text = text.cast(pa.large_string())
        if arr.null_count:
            text = pc.if_else(arr.is_null(), pa.scalar(self._null_text(schema, arr, slow, path), text.type), text)
        return text

    def _null_text(self, schema: Schema, arr: pa.Array, slow: np.ndarray, path: str) -> str:
        """The text of a null of ``schema``: its default's (``replace.null.with.default``) or ``null``. A null
        for a required field without a default, or with a default the converter refuses (a Struct default
        of another schema), makes its row slow: the per-record path raises the converter's error."""
        conv = self.converter
        if schema.default is not None and conv.replace_null_with_default:
            try:
                return conv._to_json(schema, schema.default, path)
            except DataException:
                pass
        elif schema.optional:
            return "null"
        slow |= _mask(arr.is_null())
        return "null"

    def _values(self, schema: Schema, arr: pa.Array, slow: np.ndarray, path: str) -> pa.Array | None:
        t, name, at = schema.type, schema.name, arr.type
        if name is not None:
            if name == Timestamp.LOGICAL_NAME and pa.types.is_timestamp(at):
                return pc.cast(_epoch_ms(arr), pa.string())
            if name == Date.LOGICAL_NAME and at == pa.date32():
                return pc.cast(arr.cast(pa.int32()), pa.string())
            if name == Time.LOGICAL_NAME and pa.types.is_time(at):
                return pc.cast(_time_ms(arr), pa.string())
            if name == Decimal.LOGICAL_NAME and pa.types.is_decimal128(at) and at.scale == Decimal.scale(schema):
                return self._decimal(arr, slow, path, schema)
            if name in (Timestamp.LOGICAL_NAME, Date.LOGICAL_NAME, Time.LOGICAL_NAME, Decimal.LOGICAL_NAME):
                return None  # an Arrow type that does not carry this logical type
        if t in _INTS:
            return pc.cast(arr, pa.string()) if at == _INTS[t] else None
        if t is Type.BOOLEAN:
            return pc.if_else(arr, "true", "false") if at == pa.bool_() else None
        if t is Type.STRING:
            return _json_strings(arr) if pa.types.is_string(at) or pa.types.is_large_string(at) else None
        if t is Type.FLOAT64 or t is Type.FLOAT32:
            want = pa.float64() if t is Type.FLOAT64 else pa.float32()
            return _java_floats(arr, _java_double_json if t is Type.FLOAT64 else _java_float_json) \
                if at == want else None
        if t is Type.STRUCT and isinstance(arr, pa.StructArray):
            text = self._nested(schema, arr, slow, path)
            if text is not None:
                return text
        # bytes, arrays, maps, structs not done in columns: the converter's own code, value by value
        return self._python(schema, arr, slow, path)

    def _python(self, schema: Schema, arr: pa.Array, slow: np.ndarray, path: str) -> pa.Array | None:
        try:
            values = _values(arr, schema)
        except Exception:  # noqa: BLE001 -- an Arrow type the contract does not map: go row by row
            return None
        to_json = self.converter._to_json
        out: list[str | None] = []
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            try:
                out.append(to_json(schema, v, path))
            except DataException:
                slow[i] = True
                out.append("null")
        return pa.array(out, pa.string())

    def _decimal(self, arr: pa.Array, slow: np.ndarray, path: str, schema: Schema) -> pa.Array:
        if self.converter.decimal_numeric:
            if arr.type.scale <= 6:  # BigDecimal.toString is plain text for these: Arrow's text
                return pc.cast(arr, pa.string())
            return self._python(schema, arr, slow, path)
        return _decimal_base64(arr)


def _join(*parts) -> pa.Array:
    """Row-wise concatenation of large_string arrays and constant texts (a null part gives a null)."""
    return pc.binary_join_element_wise(*[pa.scalar(p, pa.large_string()) if isinstance(p, str) else p
                                         for p in parts], pa.scalar("", pa.large_string()))


def _mask(bools) -> np.ndarray:
    return np.asarray(bools.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _json_strings(arr: pa.Array, quoted: bool = True) -> pa.Array:
    """Each string as Jackson writes it, quotes included (nulls stay null); without them when not
    ``quoted`` (a struct's member puts them in its constant text).

    A few passes over the UTF-8 data as one numpy array: a string with a control character other than
    ``\\b\\t\\n\\f\\r`` or a character beyond U+FFFF (a 4-byte sequence) is quoted by the converter's
    own function; the two-character escapes are inserted with numpy in one go."""
    arr = arr.cast(pa.large_string())
    if arr.offset:
        arr = pa.concat_arrays([arr])  # offsets from 0: the buffers below are read as they are
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=n + 1)
    data = np.frombuffer(bufs[2], dtype=np.uint8, count=int(offsets[-1])) if bufs[2] is not None and n else \
        np.empty(0, np.uint8)
    control = data[data < 0x20]  # few: the control characters, escaped or not
    at = np.flatnonzero((data == 0x22) | (data == 0x5C) | (data < 0x20))
    if len(at):
        letters = data.copy()
        letters[at] = _ESCAPE_LETTER[data[at]]
        text = np.insert(letters, at, ord("\\"))
        offsets = offsets + np.searchsorted(at, offsets)  # each escape before a string's end shifts it
        out = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))
    else:
        out = pa.LargeStringArray.from_buffers(n, bufs[1], bufs[2])
    if quoted:
        out = _join('"', out, '"')
    if arr.null_count:
        out = pc.if_else(arr.is_null(), pa.scalar(None, pa.large_string()), out)
    if _UNLIKE_JACKSON_MASK[control].any() or (data >= 0xF0).any():
        odd = pc.match_substring_regex(arr, _UNLIKE_JACKSON)
        if pc.any(odd).as_py():
            rows = np.flatnonzero(_mask(odd))
            texts = [_quote(s) if quoted else _quote(s)[1:-1] for s in arr.take(pa.array(rows)).to_pylist()]
            out = pc.replace_with_mask(out, _mask(odd), pa.array(texts, out.type))
    return out


def _java_floats(arr: pa.Array, one) -> pa.Array:
    """Java's Double/Float.toString: Arrow's shortest digits where Java writes plain text
    (1e-3 <= |x| < 1e7, and zero), with the ``.0`` Java adds to whole numbers; the
    converter's own function elsewhere (exponent form, NaN, infinities)."""
    text = pc.cast(arr, pa.large_string())
    text = pc.if_else(pc.match_substring(text, "."), text, _join(text, ".0"))
    mag = pc.abs(arr)
    plain = pc.or_(pc.and_(pc.greater_equal(mag, 1e-3), pc.less(mag, 1e7)), pc.equal(mag, 0))
    odd = pc.invert(plain.fill_null(True))
    if pc.any(odd).as_py():
        mask = _mask(odd)
        rows = pa.array(np.flatnonzero(mask))
        shortest = pc.cast(arr.take(rows), pa.string()).to_pylist()
        texts = [_java_exponent(t, one, x) for t, x in zip(shortest, arr.take(rows).to_pylist())]
        text = pc.replace_with_mask(text, mask, pa.array(texts, pa.large_string()))
    return text


def _java_exponent(shortest: str, one, x: float) -> str:
    """Java's ``d.dddE±n`` text of a finite ``x`` from Arrow's shortest digits (``3.5e+09``,
    ``12345678``, ``1e-05``); ``one(x)`` (the converter's own function) for NaN, infinities and
    values below float32's smallest normal, where Java may pick a two-digit decimal closer to
    ``x`` than the shortest one (elsewhere the rounding interval is far too narrow for that)."""
    if not math.isfinite(x) or abs(x) < _FLOAT32_MIN_NORMAL:
        return one(x)
    t = shortest.lstrip("-")
    mantissa, _, exp = t.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    lead = len(whole.lstrip("0"))
    e10 = (lead - 1 if lead else -(len(frac) - len(frac.lstrip("0")) + 1)) + int(exp or 0)
    digits = digits.rstrip("0")
    return ("-" if x < 0 else "") + digits[0] + "." + (digits[1:] or "0") + "E" + str(e10)


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


def _decimal_base64(arr: pa.Array) -> pa.Array:
    """Each decimal128 as Kafka's ``"<base64>"`` text: base64 of the minimal big-endian
    two's-complement bytes of its unscaled value (``BigInteger.toByteArray``)."""
    n = len(arr)
    be, length = _decimal_minimal(arr)
    width = 2 + (length + 2) // 3 * 4  # quotes + base64
    ends = np.cumsum(width)
    starts = ends - width
    out = np.empty(int(ends[-1]) if n else 0, dtype=np.uint8)
    for size in np.unique(length):
        rows = np.flatnonzero(length == size)
        padded = (size + 2) // 3 * 3
        block = np.zeros((len(rows), padded), dtype=np.uint8)
        block[:, :size] = be[rows, 16 - size:]
        chars = np.frombuffer(base64.b64encode(block.tobytes()), dtype=np.uint8).reshape(len(rows), padded // 3 * 4)
        chars = chars.copy()
        if padded - size:
            chars[:, chars.shape[1] - (padded - size):] = ord("=")
        text = np.empty((len(rows), chars.shape[1] + 2), dtype=np.uint8)
        text[:, 0] = text[:, -1] = ord('"')
        text[:, 1:-1] = chars
        positions = starts[rows][:, None] + np.arange(text.shape[1])
        out[positions] = text
    offsets = np.concatenate([[0], ends]).astype(np.int32)
    text = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out))
    return pc.if_else(arr.is_null(), pa.scalar(None, pa.string()), text) if arr.null_count else text
