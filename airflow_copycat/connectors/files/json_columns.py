"""JsonConverter values decoded a batch at a time, straight into the Arrow table the Parquet writer writes.

The records way to write a Parquet file decodes every message through
``JsonConverter.to_connect_data`` (a Struct per record), then turns the values
back into Arrow columns (:func:`.formats.to_arrow_table`). For messages that
all carry the same schema envelope, :func:`decode_envelopes` does the same in
columns: it cuts the envelope head ``{"schema":<schema>,"payload":`` off every
value, parses the payloads with ``pyarrow.json`` into the Arrow types of the
JSON, and converts those to the writer's types (:func:`.formats.arrow_type`).

Its contract is the records': the table it returns equals ``to_arrow_table``
of the records' ``(schema, value)`` pairs, value for value. Wherever it
cannot be sure of that it returns ``None`` and the caller decodes records, so
the records decide (and report errors through ``errors.*``). ``None`` for:

* a converter that is not a :class:`JsonConverter` with ``schemas.enable``
  (schemaless values: pyarrow would infer other types than the records give);
* a null or empty value (a tombstone), or a value without the first value's
  envelope head byte for byte (another schema, another layout);
* a schema with a map, a struct without fields, or a logical type on another
  base type than its own;
* a payload pyarrow cannot parse into the schema's types (bad JSON, a number
  with leading zeros, ``"NaN"``, an integral ``1.0`` for an integer, a field
  twice, a field the schema does not have, a lone surrogate), invalid UTF-8,
  a line break in a value, a row count other than the values';
* a null where the records would substitute a default or fail (a required
  field, a field with a default), a top-level null;
* a value outside what the records' Python types hold (a Date beyond year 9999,
  a Time outside one day, a Timestamp outside years 1..9999), base64 that does
  not decode, a Decimal that does not fit its Arrow type;
* the integer ``-0`` for a float, any negative zero for a float32 (the records read 0.0, pyarrow -0.0);
* a float that is not finite (pyarrow reads the bare ``NaN``/``Infinity`` the records refuse as not
  JSON, and an integer too large for a double as an infinity the records refuse as out of range), an
  exponent of 18 digits or more (pyarrow reads ``1e-1999999999999999998`` as 0.0; the records refuse it);
* anything else that fails while the columns are built (a schema nested too deep to rebuild its text...).
"""

from __future__ import annotations

import base64
import binascii
import re
from itertools import repeat
from typing import Any, Sequence

from ...connect.data import Date, Decimal, Schema, Time, Timestamp, Type
from ...converters.json_converter import JsonConverter
from .formats import arrow_field, arrow_type

_LOGICAL_BASE = {Date.LOGICAL_NAME: Type.INT32, Time.LOGICAL_NAME: Type.INT32, Timestamp.LOGICAL_NAME: Type.INT64,
                 Decimal.LOGICAL_NAME: Type.BYTES}
_DAYS = (-719_162, 2_932_896)  # datetime.date.min .. max, in days since 1970-01-01
_MILLIS = (-62_135_596_800_000, 253_402_300_799_999)  # datetime min .. max (UTC), in ms since the epoch
_NEGATIVE_ZERO_INT = re.compile(rb"-0(?![0-9.eE])")
_HUGE_EXPONENT = re.compile(rb'(?<![\w."\\-])-?[0-9]+(?:\.[0-9]+)?[eE][-+]?0*[1-9][0-9]{17}')
"""A number with an exponent of 18 digits or more (not preceded by what a number in JSON text never is:
inside a string such as a hash, the digits before an ``e`` follow a letter, a digit or a quote)."""


class _Unsure(Exception):
    """The columns cannot promise the records' result: decode records instead."""


def decode_envelopes(values: Sequence[bytes | None], converter: Any, topic: str) -> tuple[Schema, Any] | None:
    """``(value schema, pyarrow.Table)`` of ``values`` (the raw values of one topic-partition's
    messages, in order) as :func:`.formats.to_arrow_table` makes it from their records; ``None``
    when the records must decide (see the module docstring). Never raises for bad data."""
    if type(converter) is not JsonConverter or not converter.schemas_enable or not values:
        return None
    if None in values or b"" in values:
        return None
    try:
        schema = converter.to_connect_data(topic, values[0]).schema
    except Exception:  # noqa: BLE001 - the records report it
        return None
    if schema is None:
        return None
    try:
        read_type = _read_type(schema)
        head = b'{"schema":' + converter.as_json_schema(schema).encode("utf-8") + b',"payload":'
        column = _parse(values, head, read_type, _has_floats(schema))
        if column.null_count:
            return None
        array = _convert(column, schema, 0)
    except Exception:  # noqa: BLE001 - _Unsure, or anything the columns cannot build: the records decide
        return None
    import pyarrow as pa

    if schema.type is Type.STRUCT:
        arrow_schema = pa.schema([arrow_field(f.name, f.schema) for f in schema.fields])
        return schema, pa.Table.from_arrays([array.field(i) for i in range(len(schema.fields))], schema=arrow_schema)
    return schema, pa.Table.from_arrays([array], schema=pa.schema([arrow_field("value", schema)]))


def _parse(values: Sequence[bytes], head: bytes, read_type, floats: bool):
    """The payloads parsed into ``read_type`` (one Arrow array, a row per value)."""
    import pyarrow as pa
    import pyarrow.json as pj

    cut = len(head)
    if not all(map(bytes.startswith, values, repeat(head))):
        raise _Unsure()
    # every line is {"v":<payload>} (the value's closing brace ends it): with no line break in a
    # value, one line per value, and each line opens a new object, so n rows means one per line
    lines = b'{"v":' + b'\n{"v":'.join([v[cut:] for v in values])
    if lines.count(b"\n") != len(values) - 1:
        raise _Unsure()
    if not lines.isascii():
        try:
            lines.decode("utf-8")  # pyarrow would pass invalid UTF-8 through
        except UnicodeDecodeError:
            raise _Unsure() from None
    options = pj.ParseOptions(explicit_schema=pa.schema([pa.field("v", read_type)]),
                              unexpected_field_behavior="error")
    try:
        table = pj.read_json(pa.py_buffer(lines), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise _Unsure() from None
    if table.num_rows != len(values):
        raise _Unsure()
    column = table.column("v").combine_chunks()
    # an integer -0 reads as 0 in the records, -0.0 here: look for one only where a -0.0 came out
    if floats and b"-0" in lines and _negative_zeros(column) and _NEGATIVE_ZERO_INT.search(lines):
        raise _Unsure()
    # never a value of the records: they refuse the texts pyarrow reads as these (a huge negative
    # exponent reads as a zero: looked for only where one came out)
    if floats and (_floats_where(column, _not_finite) or
                   (_floats_where(column, _zeros) and _HUGE_EXPONENT.search(lines))):
        raise _Unsure()
    return column


def _floats_where(array, test) -> bool:
    """Whether ``test`` holds for a float array anywhere in ``array`` (nested in structs and lists too)."""
    import pyarrow as pa

    t = array.type
    if pa.types.is_struct(t):
        return any(_floats_where(array.field(i), test) for i in range(t.num_fields))
    if pa.types.is_list(t):
        return _floats_where(array.values, test)
    return pa.types.is_floating(t) and test(array)


def _negative_zeros(array) -> bool:
    """Whether a float anywhere in ``array`` (nested in structs and lists too) holds -0.0."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def test(floats) -> bool:
        bits = pa.int64() if floats.type.bit_width == 64 else pa.int32()
        return pc.any(pc.equal(floats.view(bits), -(2 ** (bits.bit_width - 1)))).as_py() or False

    return _floats_where(array, test)


def _zeros(floats) -> bool:
    import pyarrow.compute as pc

    return bool(pc.any(pc.equal(floats, 0)).as_py())


def _not_finite(floats) -> bool:
    import pyarrow.compute as pc

    return not pc.all(pc.is_finite(floats)).as_py() if floats.null_count < len(floats) else False


def _has_floats(schema: Schema) -> bool:
    t = schema.type
    if t is Type.FLOAT32 or t is Type.FLOAT64:
        return True
    if t is Type.STRUCT:
        return any(_has_floats(f.schema) for f in schema.fields)
    if t is Type.ARRAY:
        return _has_floats(schema.value_schema)
    return False


def _read_type(schema: Schema):
    """The Arrow type pyarrow parses a payload of ``schema`` into (JSON's own types)."""
    import pyarrow as pa

    name = schema.name
    if name in _LOGICAL_BASE:
        if schema.type is not _LOGICAL_BASE[name]:
            raise _Unsure()
        return pa.string() if name == Decimal.LOGICAL_NAME else (pa.int64() if name == Timestamp.LOGICAL_NAME
                                                                  else pa.int32())
    t = schema.type
    if t is Type.STRUCT:
        if not schema.fields:
            raise _Unsure()
        return pa.struct([pa.field(f.name, _read_type(f.schema)) for f in schema.fields])
    if t is Type.ARRAY:
        return pa.list_(_read_type(schema.value_schema))
    if t is Type.MAP:
        raise _Unsure()
    if t is Type.BYTES:
        return pa.string()
    return arrow_type(schema)


def _convert(array, schema: Schema, inherited_nulls: int):
    """``array`` (of :func:`_read_type`) as :func:`.formats.arrow_type` of ``schema``. Its nulls
    include ``inherited_nulls`` of enclosing structs; a null of its own must be one the records
    keep as null."""
    import pyarrow as pa

    if array.null_count > inherited_nulls and (schema.default is not None or not schema.optional):
        raise _Unsure()
    name, t = schema.name, schema.type
    target = arrow_type(schema)
    if name == Timestamp.LOGICAL_NAME:
        return _view(_in_range(array, _MILLIS), target)
    if name == Date.LOGICAL_NAME:
        return _view(_in_range(array, _DAYS), target)
    if name == Time.LOGICAL_NAME:
        return _view(_in_range(array, (0, 86_399_999)), target)
    if name == Decimal.LOGICAL_NAME:
        fast = _small_decimals(array, target)
        if fast is not None:
            return fast
        scale_schema = schema
        try:
            return pa.array([None if s is None else Decimal.to_logical(scale_schema, _unbase64(s))
                             for s in array.to_pylist()], type=target)
        except Exception:  # noqa: BLE001 - no bytes, bad base64, too many digits: the records decide
            raise _Unsure() from None
    if t is Type.BYTES:
        try:
            return pa.array([None if s is None else base64.b64decode(s, validate=True) for s in array.to_pylist()],
                            type=target)
        except (binascii.Error, ValueError):
            raise _Unsure() from None
    if t is Type.STRUCT:
        children = array.flatten()  # each child's nulls include the struct's
        converted = [_convert(c, f.schema, array.null_count) for c, f in zip(children, schema.fields)]
        # a required field is null only where the struct is (checked above): the records hold some
        # value there, which the Parquet writer never reads under a null struct, but it refuses nulls
        converted = [c if f.schema.optional or not c.null_count else _without_validity(c)
                     for c, f in zip(converted, schema.fields)]
        validity = array.is_valid().buffers()[1] if array.null_count else None
        return pa.Array.from_buffers(target, len(array), [validity], null_count=array.null_count, children=converted)
    if t is Type.ARRAY:
        items = array.flatten()
        if len(items) != len(array.values) or array.offset:
            raise _Unsure()
        converted = _convert(items, schema.value_schema, 0)
        return pa.ListArray.from_arrays(array.offsets, converted, type=target,
                                        mask=array.is_null() if array.null_count else None)
    if array.type != target:
        raise _Unsure()
    if t is Type.FLOAT32 and _has_negative_zero(array):
        raise _Unsure()  # the records read every zero, -0.0 too, as the float32 0.0
    return array


_B64 = None


def _small_decimals(array, target):
    """Base64 decimals whose unscaled values fit 8 bytes (what prices and amounts are), decoded in
    columns into ``target`` (decimal128): the values ``Decimal.to_logical`` gives, or ``None`` when
    any value is not such a canonical base64 text (the per-value decoder then decides, and raises
    where the records fail). Raises :class:`_Unsure` for a value beyond ``target``'s precision."""
    import numpy as np
    import pyarrow as pa

    global _B64
    if _B64 is None:
        lut = np.full(256, 255, np.uint8)
        alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        lut[np.frombuffer(alphabet, np.uint8)] = np.arange(64, dtype=np.uint8)
        _B64 = lut
    n = len(array)
    if not n or array.null_count == n or not pa.types.is_string(array.type) \
            or not 0 <= target.scale <= target.precision:
        return None
    valid = np.ones(n, bool) if not array.null_count else array.is_valid().to_numpy(zero_copy_only=False)
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, np.int32)[array.offset:array.offset + n + 1]
    lengths = np.where(valid, np.diff(offsets), 4)
    if lengths.min() < 4 or lengths.max() > 12 or (lengths % 4).any():
        return None
    width = np.arange(12)
    inside = width[None, :] < lengths[:, None]
    text = np.frombuffer(data, np.uint8) if data is not None else np.zeros(1, np.uint8)
    chars = np.where(inside & valid[:, None], text[np.minimum(offsets[:-1, None] + width[None, :], len(text) - 1)],
                     ord("A"))
    rows = np.arange(n)
    pad = chars[rows, lengths - 1] == ord("=")
    pads = pad.astype(np.int64) + (pad & (chars[rows, lengths - 2] == ord("=")))
    sextets = _B64[chars]
    data_chars = width[None, :] < (lengths - pads)[:, None]
    if (sextets[data_chars] == 255).any():
        return None  # not base64, or padding inside
    sextets = np.where(data_chars, sextets, 0).astype(np.uint64)
    nbytes = lengths // 4 * 3 - pads
    if nbytes.max() > 8:
        return None
    groups = (sextets[:, 0::4] << 18) | (sextets[:, 1::4] << 12) | (sextets[:, 2::4] << 6) | sextets[:, 3::4]
    raw = np.stack([groups >> 16, groups >> 8, groups], axis=2).reshape(n, 9) & 0xFF
    acc = np.zeros(n, np.uint64)
    for i in range(8):
        acc = np.where(i < nbytes, (acc << np.uint64(8)) | raw[:, i], acc)
    shift = (64 - 8 * nbytes).astype(np.uint64)
    unscaled = ((acc << shift).view(np.int64) >> shift.astype(np.int64)) * valid
    if target.precision < 19 and (unscaled.max() >= 10 ** target.precision or unscaled.min() <= -10 ** target.precision):
        raise _Unsure()
    words = np.empty((n, 2), np.int64)
    words[:, 0], words[:, 1] = unscaled, unscaled >> 63
    validity = array.is_valid().buffers()[1] if array.null_count else None
    return pa.Array.from_buffers(target, n, [validity, pa.py_buffer(words.tobytes())], null_count=array.null_count)


def _has_negative_zero(array) -> bool:
    import math

    import pyarrow.compute as pc

    zeros = array.filter(pc.equal(array, 0))
    return any(math.copysign(1.0, z) < 0 for z in zeros.to_pylist())


def _without_validity(array):
    """``array`` with every slot valid (what its buffers hold where it was null)."""
    import pyarrow as pa

    t = array.type
    if pa.types.is_struct(t):
        return pa.Array.from_buffers(t, len(array), [None], null_count=0, offset=array.offset,
                                     children=[array.field(i) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.Array.from_buffers(t, len(array), [None, array.buffers()[1]], null_count=0, offset=array.offset,
                                     children=[array.values])
    return pa.Array.from_buffers(t, len(array), [None] + array.buffers()[1:], null_count=0, offset=array.offset)


def _in_range(array, bounds: tuple[int, int]):
    import pyarrow.compute as pc

    if len(array) - array.null_count:
        lo, hi = pc.min_max(array).values()
        if lo.as_py() < bounds[0] or hi.as_py() > bounds[1]:
            raise _Unsure()
    return array


def _view(array, target):
    """The same integers as ``target`` (date32/time32 over int32, timestamp over int64)."""
    return array.view(target)


def _unbase64(text: str) -> bytes:
    raw = base64.b64decode(text, validate=True)
    if not raw:
        raise ValueError("no bytes")
    return raw
