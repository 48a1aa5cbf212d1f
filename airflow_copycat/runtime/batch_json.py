"""Whole-batch JSON: the JsonConverter's bytes for every row of a batch, written column by column.

The encoder of :mod:`.batch_encoders` for ``JsonConverter`` (see there for the contract: the same
bytes as ``from_connect_data`` for every row it encodes, the rows it cannot left to the per-record
path, ``None`` for a batch it cannot do).

The JsonConverter (both ``schemas.enable`` settings, both ``decimal.format``
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
of its fields) is done as the root struct, recursively: its fields' texts and
member names go into the one join of the whole row when it has no null row, and
are joined over its non-null rows only otherwise. A field null in every row, or
holding one value in every row (integers, booleans, strings, dates, times,
timestamps: values whose equality means equal text), is written once, as a
constant of the join -- a change event's ``source`` block and timestamps are
mostly such. Arrays, maps and bytes (and a struct column of another
shape) are written value by value by the converter's own ``_to_json``.
A null in a required field without a default, or a value the converter refuses,
makes its row a fallback row (not a null parent struct's children: a child's
value under a null parent is not part of the record).
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..connect.batch import _values
from ..connect.data import Date, Decimal, Schema, Time, Timestamp, Type
from ..connect.errors import DataException
from ..converters.java_numbers import _java_double_json, _java_float_json
from ..converters.json_converter import JsonConverter
from ..converters.json_text import _quote
from .batch_encoders import BatchEncoder, Encoded, _combined, _constant, _decimal_minimal, _epoch_ms, _mask, _time_ms

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


class JsonBatchEncoder(BatchEncoder):
    """The JsonConverter's batch encoder (see the module docstring)."""


    converter: JsonConverter

    def encode(self, batch, schema, columns):
        conv = self.converter
        n = len(batch)
        if columns is None:
            return Encoded(pa.nulls(n, pa.string()), [])
        slow = np.zeros(n, dtype=bool)
        envelope = ('{"schema":' + conv.as_json_schema(schema) + ',"payload":', "}") if conv.schemas_enable \
            else ("", "")
        if schema.type is Type.STRUCT:
            children = [_combined(columns.column(i)) for i in range(len(schema.fields))]
            parts = self._struct_parts(schema, children, n, slow, conv._root)
            if parts is None:
                return None
            payload = _joined([envelope[0], *parts, envelope[1]], n)  # one pass over every row's bytes
        else:
            payload = self._column(schema, _combined(columns), slow, conv._root)
            if payload is None:
                return None
            if conv.schemas_enable:
                payload = _join(envelope[0], payload, envelope[1])
        return Encoded(payload, np.flatnonzero(slow).tolist())

    # ---- one column -> its JSON text (a string array without nulls where the row is not slow)

    def _struct(self, schema: Schema, children: list, n: int, slow: np.ndarray, path: str) -> pa.Array | None:
        """The ``n`` rows of a struct's JSON text from ``children`` (its fields' arrays, in the
        schema's order): :meth:`_struct_parts` joined. ``None`` when a field cannot be done in columns."""
        parts = self._struct_parts(schema, children, n, slow, path)
        return None if parts is None else _joined(parts, n)

    def _struct_parts(self, schema: Schema, children: list, n: int, slow: np.ndarray, path: str) -> list | None:
        """A struct's JSON text as the parts :func:`_joined` concatenates row by row: constant texts (the
        member names, ``{}`` for a struct without fields, and the text of a field whose rows all hold the
        same value) and large_string arrays (a field's text per row). ``None`` when a field cannot be done
        in columns."""
        parts: list[Any] = []
        for i, (f, child) in enumerate(zip(schema.fields, children)):
            parts.append(("{" if i == 0 else ",") + _quote(f.name) + ":")
            member = self._member_parts(f.schema, child, n, slow, f"{path}.{f.name}")
            if member is None:
                return None
            parts += member
        parts.append("}" if parts else "{}")
        return parts

    def _member_parts(self, schema: Schema, arr: pa.Array, n: int, slow: np.ndarray, path: str) -> list | None:
        """One field's text over the rows as parts (see :meth:`_struct_parts`), the same text :meth:`_column`
        makes: a field null in every row is its null's text, once; a field holding one value in every row
        is that value's text (made by :meth:`_column` from the first row), once; a string field without
        nulls is its escaped strings between constant quotes; a struct without nulls is its own members'
        parts, spliced in (one join for the whole value, not one per nesting level)."""
        if n and arr.null_count == n:
            return [self._null_text(schema, arr, slow, path)]
        if _constant(arr):
            one_slow = np.zeros(1, dtype=bool)
            text = self._column(schema, arr.slice(0, 1), one_slow, path)
            if one_slow[0]:  # the converter refuses the value: every row holds it
                slow[:] = True
            return None if text is None else [text[0].as_py()]
        if schema.type is Type.STRING and not arr.null_count and \
                (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return ['"', _json_strings(arr, quoted=False), '"']  # the quotes in the constants
        if schema.type is Type.STRUCT and isinstance(arr, pa.StructArray):
            parts = self._struct_member(schema, arr, n, slow, path)
            if parts is not None:
                return parts
        text = self._column(schema, arr, slow, path)
        return None if text is None else [text]

    def _struct_member(self, schema: Schema, arr: pa.StructArray, n: int, slow: np.ndarray, path: str) -> list | None:
        """A nested struct field as parts: its members' parts when no row is null, else one array holding its
        non-null rows' text (their members encoded over those rows only) and its null's text in the
        others. ``None`` (``slow`` untouched) when a field has no child of its name (or several) or its
        members cannot be done in columns: :meth:`_column` then does the field its own way."""
        index = [arr.type.get_field_index(f.name) for f in schema.fields]
        if -1 in index:
            return None
        valid = arr if not arr.null_count else arr.filter(arr.is_valid())
        rows = len(valid)
        children_slow = np.zeros(rows, dtype=bool)
        parts = self._struct_parts(schema, [valid.field(i) for i in index], rows, children_slow, path)
        if parts is None:
            return None
        if not arr.null_count:
            slow |= children_slow
            return parts
        present = arr.is_valid()
        slow[np.flatnonzero(_mask(present))] |= children_slow
        null = pa.scalar(self._null_text(schema, arr, slow, path), pa.large_string())
        return [pc.replace_with_mask(pa.repeat(null, n), present, _joined(parts, rows))]

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
        # bytes, arrays, maps, structs not done in columns (a struct's members are, see _struct_member): the
        # converter's own code, value by value
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


def _joined(parts: list, n: int) -> pa.Array:
    """The ``n`` rows of ``parts`` (constant texts and large_string arrays) concatenated row by row, adjacent
    constants merged first (a constant-only text is repeated)."""
    merged: list[Any] = []
    for p in parts:
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        elif not (isinstance(p, str) and not p):
            merged.append(p)
    if all(isinstance(p, str) for p in merged):
        return pa.repeat(pa.scalar("".join(merged), pa.large_string()), n)
    return _join(*merged)


def _join(*parts) -> pa.Array:
    """Row-wise concatenation of large_string arrays and constant texts (a null part gives a null)."""
    return pc.binary_join_element_wise(*[pa.scalar(p, pa.large_string()) if isinstance(p, str) else p
                                         for p in parts], pa.scalar("", pa.large_string()))


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
