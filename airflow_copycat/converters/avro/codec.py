"""Avro's binary encoding and decoding of Connect values, compiled once per schema: :class:`AvroWriter` and
:class:`AvroReader`.
"""

from __future__ import annotations

import decimal as _decimal
import io
from typing import Any, Callable

from ...connect.data import Date, Decimal, Schema, Struct, Time, Timestamp, Type, validate_value
from ...connect.errors import DataException
from .names import (
    _ANYTHING_FIELDS,
    _INT_RANGES,
    ANYTHING_SCHEMA,
    AVRO_TYPE_UNION,
    CONNECT_AVRO_FIXED_SIZE_PROP,
    DEFAULT_SCHEMA_FULL_NAME,
    KEY_FIELD,
    VALUE_FIELD,
    _decimal_bytes,
    _int_param,
    _split,
    schema_json,
)
from .resolution import _WRAP_FIELD, _fastavro, _parse
from .to_avro import _FromConnect

# --- Connect value -> Avro datum

_FLOAT32_MAX = 3.4028234663852886e38
_INF = float("inf")


def _float32(v):
    if -_FLOAT32_MAX <= v <= _FLOAT32_MAX or v != v or v == _INF or v == -_INF:
        return v
    raise DataException(f"{v!r} is out of range for float32 (an Avro float would hold infinity)")


def _fixed_bytes(schema: Schema) -> Callable[[Any], Any]:
    size = _int_param(schema, CONNECT_AVRO_FIXED_SIZE_PROP)

    def check(value):
        if len(value) != size:
            raise DataException(f"{len(value)} bytes for the Avro fixed {schema.name!r} of {size} bytes")
        return value

    return check


def _encoder(schema: Schema | None, ctx: "_FromConnect | None" = None) -> Callable[[Any], Any] | None:
    """A function from a Connect value of ``schema`` (not None) to the Avro datum fastavro writes,
    or ``None`` when the value is its own datum. ``ctx``: the conversion that made the Avro
    schema (its union branch names, Avro field names)."""
    if schema is None:
        return _anything_datum
    name = schema.name
    if name == Date.LOGICAL_NAME:
        return Date.from_logical
    if name == Time.LOGICAL_NAME:
        return Time.from_logical
    if name == Timestamp.LOGICAL_NAME:
        return Timestamp.from_logical
    if name == Decimal.LOGICAL_NAME:
        return _decimal_bytes(schema)
    t = schema.type
    if t is Type.FLOAT32:
        return _float32
    if t is Type.BYTES and name is not None and CONNECT_AVRO_FIXED_SIZE_PROP in schema.parameters:
        return _fixed_bytes(schema)
    if t is Type.ARRAY:
        e = _encoder(schema.value_schema, ctx)
        if e is None:
            return None
        return lambda v: [None if x is None else e(x) for x in v]
    if t is Type.MAP:
        ks = schema.key_schema
        ke, ve = _encoder(ks, ctx), _encoder(schema.value_schema, ctx)
        if ks.type is Type.STRING and not ks.optional:
            if ve is None:
                return None
            return lambda v: {k: None if x is None else ve(x) for k, x in v.items()}
        return lambda v: [{KEY_FIELD: k if k is None or ke is None else ke(k),
                           VALUE_FIELD: x if x is None or ve is None else ve(x)} for k, x in v.items()]
    if t is Type.STRUCT:
        if ctx is None:  # made again, with the default options
            from .data import AvroData  # the default options; data imports this module

            ctx = _FromConnect(AvroData())
            ctx.convert(schema)
        if name == AVRO_TYPE_UNION:
            return _union_encoder(schema, ctx)
        names = [ctx.avro_name(f.name) for f in schema.fields]
        encs = [_encoder(f.schema, ctx) for f in schema.fields]
        plain = all(e is None for e in encs)
        pairs = list(zip(names, encs))
        # fastavro writes None as false for a boolean: a required one is checked here (a Struct made without
        # validation -- a batch's record -- may hold one); a None of any other type fastavro refuses itself
        booleans = [i for i, f in enumerate(schema.fields) if f.schema.type is Type.BOOLEAN and not f.schema.optional]

        def struct(value, schema=schema):
            if not isinstance(value, Struct):
                raise DataException(f"{type(value).__name__} is not a Struct")
            if value.schema is not schema and value.schema != schema:
                raise DataException(f"Struct schema {value.schema!r} does not match {schema!r}")
            values = value.values()
            for i in booleans:
                if values[i] is None:
                    raise DataException(f"value.{schema.fields[i].name}: null for a required boolean schema "
                                        "that has no default")
            if plain:
                return dict(zip(names, values))
            return {n: (v if e is None or v is None else e(v)) for (n, e), v in zip(pairs, values)}

        return struct
    return None


def _union_encoder(schema: Schema, ctx: "_FromConnect"):
    """A Connect union struct -> fastavro's ``(branch name, datum)`` of its first non-null field
    (as Confluent writes it): the branch written is the field's, never one fastavro guesses."""
    names = ctx.unions.get(schema)
    if names is None:
        ctx.convert(schema)
        names = ctx.unions[schema]
    branches = list(zip(names, [_encoder(f.schema, ctx) for f in schema.fields]))

    def union(value, schema=schema):
        if not isinstance(value, Struct):
            raise DataException(f"{type(value).__name__} is not a Struct of the union {schema!r}")
        if value.schema is not schema and value.schema != schema:
            raise DataException(f"Struct schema {value.schema!r} does not match {schema!r}")
        for (branch, e), v in zip(branches, value.values()):
            if v is not None:
                return (branch, v if e is None else e(v))
        return None

    return union


# --- Avro datum -> Connect value

def _decoder(schema: Schema | None) -> Callable[[Any], Any] | None:
    """A function from an Avro datum (as fastavro reads it, without logical types) to the Connect
    value of ``schema``, or ``None`` when the datum is the value."""
    if schema is None:
        return _anything_value
    name = schema.name
    if name == Date.LOGICAL_NAME:
        return Date.to_logical
    if name == Time.LOGICAL_NAME:
        return Time.to_logical
    if name == Timestamp.LOGICAL_NAME:
        return Timestamp.to_logical
    if name == Decimal.LOGICAL_NAME:
        exp = f"E{-Decimal.scale(schema)}"
        from_bytes, make = int.from_bytes, _decimal.Decimal
        # from a string: no decimal context rounds it (Kafka's BigDecimal is exact)
        return lambda v: make(f"{from_bytes(v, 'big', signed=True)}{exp}")
    t = schema.type
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]

        def small(v, lo=lo, hi=hi, t=t):
            if not lo <= v <= hi:
                raise DataException(f"{v} is out of range for {t.value}")
            return v

        return small
    if t is Type.ARRAY:
        d = _decoder(schema.value_schema)
        if d is None:
            return None
        return lambda v: [None if x is None else d(x) for x in v]
    if t is Type.MAP:
        ks = schema.key_schema
        kd, vd = _decoder(ks), _decoder(schema.value_schema)
        if ks.type is Type.STRING and not ks.optional:
            if vd is None:
                return None
            return lambda v: {k: None if x is None else vd(x) for k, x in v.items()}

        def entries(v):
            out = {}
            for e in v:
                k, x = e[KEY_FIELD], e[VALUE_FIELD]
                try:
                    out[k if k is None or kd is None else kd(k)] = x if x is None or vd is None else vd(x)
                except TypeError as err:  # an unhashable key (a list)
                    raise DataException(f"map key {k!r:.40} cannot be a Python dict key: {err}") from None
            return out

        return entries
    if t is Type.STRUCT:
        if name == AVRO_TYPE_UNION:
            return _union_decoder(schema)
        names = [f.name for f in schema.fields]
        decs = [_decoder(f.schema) for f in schema.fields]
        trusted = Struct._trusted
        if all(d is None for d in decs):
            return lambda v: trusted(schema, [v[n] for n in names])
        pairs = list(zip(names, decs))
        return lambda v: trusted(schema, [(x if d is None or x is None else d(x))
                                          for n, d in pairs for x in (v[n],)])
    return None


def _union_decoder(schema: Schema):
    """A union datum -> Confluent's union struct, the field of the branch set. The read views give
    ``{"__cc_b<j>": value}`` (branch j); a union of one branch, a datum fastavro read from the
    schema itself (:meth:`AvroData.to_connect_data`) and a default from inside another default
    are matched by the value's type instead."""
    fields = schema.fields
    n = len(fields)
    decs = [_decoder(f.schema) for f in fields]
    keys = {_WRAP_FIELD.format(j): j for j in range(n)}
    struct_fields = {f.schema.name or DEFAULT_SCHEMA_FULL_NAME: i for i, f in enumerate(fields)
                     if f.schema.type is Type.STRUCT}
    trusted = Struct._trusted

    def matches(s: Schema, v) -> bool:
        t = s.type
        if t is Type.BOOLEAN:
            return isinstance(v, bool)
        if t in (Type.INT8, Type.INT16, Type.INT32, Type.INT64):
            if isinstance(v, bool) or not isinstance(v, int):
                return False
            lo, hi = _INT_RANGES.get(t, (-(2**31), 2**31 - 1) if t is Type.INT32 else (-(2**63), 2**63 - 1))
            return lo <= v <= hi
        if t in (Type.FLOAT32, Type.FLOAT64):
            return isinstance(v, float)
        if t is Type.STRING:
            return isinstance(v, str)
        if t is Type.BYTES:
            if not isinstance(v, (bytes, bytearray)):
                return False
            size = s.parameters.get(CONNECT_AVRO_FIXED_SIZE_PROP) if s.name is not None else None
            return size is None or str(len(v)) == size
        if t is Type.ARRAY:
            return isinstance(v, list) and s.name is None
        if t is Type.MAP:
            ks = s.key_schema
            return isinstance(v, dict) if ks.type is Type.STRING and not ks.optional else isinstance(v, list)
        if t is Type.STRUCT:
            return isinstance(v, dict) and set(v) == {f.name for f in s.fields}
        return False

    def union(v):
        if v is None:
            return None
        index = None
        if type(v) is dict and len(v) == 1:
            for key, x in v.items():
                index = keys.get(key)
            if index is not None:
                v = x
        if index is None and n == 1:
            index = 0
        if index is None and isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
            index = struct_fields.get(v[0])
            if index is None:
                index = next((i for name, i in struct_fields.items() if _split(name)[1] == _split(v[0])[1]), None)
            v = v[1]
        if index is None:
            index = next((i for i, f in enumerate(fields) if matches(f.schema, v)), None)
        if index is None:
            raise DataException(f"Did not find matching union field for data: {v!r:.60}")
        values = [None] * n
        d = decs[index]
        values[index] = v if d is None or v is None else d(v)
        return trusted(schema, values)

    return union


def _anything_datum(value: Any) -> dict:
    """A schemaless Connect value as a record of :data:`ANYTHING_SCHEMA`."""
    out = dict.fromkeys([f["name"] for f in ANYTHING_SCHEMA["fields"]])
    if value is None:
        return out
    if isinstance(value, bool):
        out["boolean"] = value
    elif isinstance(value, int):
        out["long"] = value
    elif isinstance(value, float):
        out["double"] = value
    elif isinstance(value, str):
        out["string"] = value
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out["bytes"] = bytes(value)
    elif isinstance(value, (list, tuple)):
        out["array"] = [_anything_datum(v) for v in value]
    elif isinstance(value, dict):
        out["map"] = [{KEY_FIELD: _anything_datum(k), VALUE_FIELD: _anything_datum(v)} for k, v in value.items()]
    else:
        raise DataException(f"Unknown Python type for schemaless data: {type(value).__name__}; "
                            "give the record a schema")
    return out


def _anything_value(datum: dict) -> Any:
    for kind in _ANYTHING_FIELDS:
        v = datum.get(kind)
        if v is not None:
            return v
    if datum.get("array") is not None:
        return [_anything_value(v) for v in datum["array"]]
    if datum.get("map") is not None:
        out = {}
        for e in datum["map"]:
            k = _anything_value(e[KEY_FIELD])
            try:
                out[k] = _anything_value(e[VALUE_FIELD])
            except TypeError:
                raise DataException(f"map key {k!r:.40} cannot be a Python dict key") from None
        return out
    return None


# ---------------------------------------------------------------- codecs

class AvroWriter:
    """Writes Connect values of one Connect schema (``None``: schemaless) as Avro.

    ``avro_schema`` is the Avro schema (JSON as Python), ``schema_json`` its compact
    text, ``datum(value)`` the value as the Avro datum, ``write(value)`` the bytes of
    Avro's binary encoding. ``write`` raises :class:`DataException` naming where the
    value does not fit (``value.after.id: null for a required int32 schema``). ``ctx``:
    the conversion that made ``avro_schema`` (made again when not given)."""

    __slots__ = ("connect_schema", "avro_schema", "schema_json", "parsed", "_encode", "_write")

    def __init__(self, connect_schema: Schema | None, avro_schema: Any, ctx: "_FromConnect | None" = None):
        self.connect_schema = connect_schema
        self.avro_schema = avro_schema
        self.schema_json = schema_json(avro_schema)
        self.parsed = _parse(avro_schema)
        self._encode = _encoder(connect_schema, ctx)
        self._write = _fastavro().schemaless_writer

    def datum(self, value: Any) -> Any:
        try:
            return value if self._encode is None else self._encode(value)
        except DataException:
            raise
        except Exception as e:  # noqa: BLE001 - explained by the validating pass
            raise self._explain(value, e) from None

    def write(self, value: Any, parsed: Any = None) -> bytes:
        """``value`` in Avro binary; ``parsed``: write with that (fastavro-parsed) schema instead,
        field by field name (``use.latest.version``)."""
        if type(value) is not Struct and self.connect_schema is not None:
            # a Struct's values were checked when put; fastavro itself would write an int32 of 2**40
            validate_value(self.connect_schema, value, "value")
        datum = self.datum(value)
        out = io.BytesIO()
        try:
            self._write(out, self.parsed if parsed is None else parsed, datum)
        except Exception as e:  # noqa: BLE001 - fastavro's TypeError/ValueError/... per bad value
            raise self._explain(value, e) from None
        return out.getvalue()

    def _explain(self, value: Any, error: Exception) -> DataException:
        if self.connect_schema is not None:
            try:
                validate_value(self.connect_schema, value, "value")
            except DataException as e:
                return e
        return DataException(f"value does not fit its Avro schema: {error}")


class AvroReader:
    """Reads Avro binary written with one writer schema, resolved onto a reader schema if given.

    ``connect_schema`` is the Connect schema of the values ``read`` returns (from the reader
    schema when there is one); ``read(data, offset)`` decodes ``data[offset:]``;
    ``writer_parsed``/``reader_parsed`` are fastavro's parsed read views (see
    :func:`_read_views`)."""

    __slots__ = ("connect_schema", "writer_parsed", "reader_parsed", "_decode", "_read")

    def __init__(self, connect_schema: Schema | None, writer_parsed: Any, reader_parsed: Any):
        self.connect_schema = connect_schema
        self.writer_parsed = writer_parsed
        self.reader_parsed = reader_parsed
        self._decode = _decoder(connect_schema)
        self._read = _fastavro().schemaless_reader

    def read(self, data: bytes, offset: int = 0) -> Any:
        buf = io.BytesIO(data)
        buf.seek(offset)
        value = self.read_from(buf)
        if buf.tell() != len(data):
            raise DataException(f"{len(data) - buf.tell()} byte(s) left after the Avro value: the bytes do not match "
                                "the writer schema")
        return value

    def read_from(self, buf: io.BytesIO) -> Any:
        """The Connect value of the Avro datum at ``buf``'s position (left after it)."""
        try:
            datum = self._read(buf, self.writer_parsed, self.reader_parsed)
        except DataException:
            raise
        except Exception as e:  # noqa: BLE001 - truncated or corrupt bytes raise all kinds
            raise DataException(f"bytes are not Avro of the writer schema ({type(e).__name__}: {e})") from None
        return self.convert(datum)

    def convert(self, datum: Any) -> Any:
        """The Connect value of a datum fastavro read."""
        if datum is None or self._decode is None:
            return datum
        try:
            return self._decode(datum)
        except DataException:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, AttributeError) as e:
            raise DataException(f"Avro value does not fit Connect schema {self.connect_schema!r}: {e}") from None
