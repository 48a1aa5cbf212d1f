"""Names, constants and small helpers of the Avro mapping (:mod:`.data`): Confluent's property names, Avro's name
rules, a bounded cache, decimal bytes.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any, Callable

from ...connect.data import Decimal, Schema, Type
from ...connect.errors import DataException

NAMESPACE = "io.confluent.connect.avro"
DEFAULT_SCHEMA_NAME = "ConnectDefault"
DEFAULT_SCHEMA_FULL_NAME = NAMESPACE + "." + DEFAULT_SCHEMA_NAME
MAP_ENTRY_TYPE_NAME = "MapEntry"
KEY_FIELD, VALUE_FIELD = "key", "value"

CONNECT_NAME_PROP = "connect.name"
CONNECT_DOC_PROP = "connect.doc"
CONNECT_VERSION_PROP = "connect.version"
CONNECT_DEFAULT_VALUE_PROP = "connect.default"
CONNECT_PARAMETERS_PROP = "connect.parameters"
CONNECT_INTERNAL_TYPE_NAME = "connect.internal.type"
CONNECT_TYPE_PROP = "connect.type"
AVRO_RECORD_DOC_PROP = NAMESPACE + ".record.doc"
AVRO_ENUM_DOC_PREFIX_PROP = NAMESPACE + ".enum.doc."
AVRO_FIELD_DOC_PREFIX_PROP = NAMESPACE + ".field.doc."
AVRO_FIELD_DEFAULT_FLAG_PROP = NAMESPACE + ".field.default"
AVRO_ENUM_DEFAULT_PREFIX_PROP = NAMESPACE + ".enum.default."
AVRO_TYPE_UNION = NAMESPACE + ".Union"
AVRO_TYPE_ENUM = NAMESPACE + ".Enum"
AVRO_TYPE_ANYTHING = NAMESPACE + ".Anything"
CONNECT_AVRO_DECIMAL_PRECISION_PROP = "connect.decimal.precision"
CONNECT_AVRO_FIXED_SIZE_PROP = "connect.fixed.size"
CONNECT_AVRO_FIXED_NAME_PROP = "connect.fixed.name"  # ours: the name of a decimal's fixed (see the module doc)
DECIMAL_PRECISION_DEFAULT = 64

_DEFAULT_NAME = re.compile(re.escape(DEFAULT_SCHEMA_FULL_NAME) + r"\d*")
_MAP_ENTRY_NAME = re.compile(re.escape(NAMESPACE + "." + MAP_ENTRY_TYPE_NAME) + r"\d*")
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_COMPLEX = frozenset({"record", "error", "enum", "array", "map", "fixed"})
_NO = object()  # "no default given"

_ANYTHING_FIELDS = ("boolean", "bytes", "double", "float", "int", "long", "string")
ANYTHING_SCHEMA: dict = {
    "type": "record", "name": "Anything", "namespace": NAMESPACE,
    "fields": [{"name": t, "type": ["null", t], "default": None} for t in _ANYTHING_FIELDS] + [
        {"name": "array", "type": ["null", {"type": "array", "items": "Anything"}], "default": None},
        {"name": "map", "type": ["null", {"type": "array", "items": {
            "type": "record", "name": "MapEntry",
            "fields": [{"name": "key", "type": "Anything"}, {"name": "value", "type": "Anything"}]}}],
         "default": None},
    ],
}
"""Confluent's record for values without a Connect schema: one optional field per kind of value."""

_INT_RANGES = {Type.INT8: (-(2**7), 2**7 - 1), Type.INT16: (-(2**15), 2**15 - 1)}
_TYPE_NAMES = {
    Type.INT8: "int", Type.INT16: "int", Type.INT32: "int", Type.INT64: "long", Type.FLOAT32: "float",
    Type.FLOAT64: "double", Type.BOOLEAN: "boolean", Type.STRING: "string", Type.BYTES: "bytes",
    Type.ARRAY: "array", Type.MAP: "map",
}


def schema_json(avro_schema: Any) -> str:
    """The compact JSON text of an Avro schema (as Python), keys in the order given."""
    return json.dumps(avro_schema, separators=(",", ":"), ensure_ascii=False)


def _split(full: str) -> tuple[str | None, str]:
    ns, dot, name = full.rpartition(".")
    return (ns, name) if dot else (None, full)


class _LRU:
    """A small thread-safe LRU map."""

    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        # no lock: OrderedDict's get and move_to_end are each atomic under the GIL, and a key
        # evicted in between is just a miss
        d = self._d
        hit = d.get(key)
        if hit is not None:
            try:
                d.move_to_end(key)
            except KeyError:
                pass
        return hit

    def put(self, key, value):
        if self.size > 0:
            with self._lock:
                self._d[key] = value
                if len(self._d) > self.size:
                    self._d.popitem(last=False)
        return value


# ---------------------------------------------------------------- Connect -> Avro schema

class _Named(dict):
    """A named Avro type while a schema is built: ``name`` holds the full name; the
    emitting pass writes it relative to the enclosing namespace, or a reference to it
    when it was written before."""

    __slots__ = ("connect",)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # the spec's (and scrub.invalid.names') rule
_NAME_RULE = "an Avro name starts with a letter or _ and holds only letters, digits and _"


def _valid_name(name: Any) -> bool:
    """Java's Avro rule for a name (the part after the last dot), a field name and an enum symbol:
    a letter or ``_``, then letters, digits or ``_`` (letters and digits as Java's Character.isLetter
    and isDigit: not only ASCII). Java does not check namespaces, nor does this."""
    return (isinstance(name, str) and bool(name) and (name[0].isalpha() or name[0] == "_")
            and all(c.isalpha() or c.isdecimal() or c == "_" for c in name[1:]))


def _scrub_name(name: str) -> str:
    """Confluent's ``scrub.invalid.names``: ``name`` URL-encoded as Java's URLEncoder does, every
    character still invalid in an Avro name replaced with ``_``, and an ``x`` before a leading digit."""
    if _NAME.fullmatch(name) or not name:
        return name
    out = []
    for ch in name:
        if ch.isascii() and (ch.isalnum() or ch in ".-*_"):
            out.append(ch)
        elif ch == " ":
            out.append("+")
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
    encoded = "".join(out)
    if encoded[0].isdigit():
        encoded = "x" + encoded
    return re.sub(r"[^A-Za-z0-9_]", "_", encoded)


def _scrub_full_name(full: str) -> str:
    return ".".join(_scrub_name(part) for part in full.split("."))


def _check_full_name(full: str, what: str) -> None:
    short = full.rpartition(".")[2]
    if not _valid_name(short):
        raise DataException(f"{what} {full!r} is not a valid Avro name ({short!r}: {_NAME_RULE}); rename it, or "
                            "set scrub.invalid.names=true to replace the invalid characters with _")
    if full in _PRIMITIVES:
        raise DataException(f"{what} {full!r} is an Avro primitive type's: Avro names no type after a primitive")


def _def_key(schema: Schema) -> Schema:
    """What decides a named type's definition: the schema, required, without a default that came
    from an Avro field default (that default is the field's, not the type's)."""
    if schema.optional:
        schema = schema.copy(optional=False)
    params = schema.parameters
    if schema.default is not None and AVRO_FIELD_DEFAULT_FLAG_PROP in params:
        schema = schema.copy(default=None, parameters={k: v for k, v in params.items()
                                                       if k != AVRO_FIELD_DEFAULT_FLAG_PROP})
    return schema


def _int_param(schema: Schema, key: str) -> int:
    value = schema.parameters.get(key)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DataException(f"{schema.name or schema.type.value} schema: parameter {key!r} must be an integer, "
                            f"not {value!r:.40}") from None


def _branch_name(member: Any) -> str:
    """How fastavro's tuple notation names a union branch: a named type by full name, others by type."""
    if isinstance(member, _Named):
        return member["name"]
    return member["type"]


def avro_name_problems(avro_schema: Any) -> list[str]:
    """Names in an Avro schema (JSON as Python) that Java's Avro refuses (see :func:`_valid_name`):
    of named types, record fields and enum symbols."""
    problems: list[str] = []

    def bad(name):
        return not _valid_name(name)

    def walk(node):
        if isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, (dict, list)):
                walk(kind)
                return
            if kind in ("record", "error", "enum", "fixed"):
                name = node.get("name")
                if bad(name.rpartition(".")[2] if isinstance(name, str) else name):
                    problems.append(f"{kind} name {name!r}: {_NAME_RULE}")
                elif name in _PRIMITIVES:
                    problems.append(f"{kind} name {name!r}: Avro names no type after a primitive")
                for f in node.get("fields", []) if kind in ("record", "error") else []:
                    if bad(f.get("name")):
                        problems.append(f"field {f.get('name')!r} of {name!r}: {_NAME_RULE}")
                    walk(f.get("type"))
                for s in node.get("symbols", []) if kind == "enum" else []:
                    if bad(s):
                        problems.append(f"symbol {s!r} of enum {name!r}: {_NAME_RULE}")
            if kind == "array":
                walk(node.get("items"))
            if kind == "map":
                walk(node.get("values"))

    walk(avro_schema)
    return problems


def _decimal_bytes(schema: Schema) -> Callable[[Any], bytes]:
    """decimal.Decimal -> the two's-complement big-endian unscaled bytes of a Decimal schema
    (minimal, as Java's BigInteger.toByteArray; sign-extended to the size of a fixed)."""
    scale = Decimal.scale(schema)
    size = None
    if schema.name is not None and CONNECT_AVRO_FIXED_SIZE_PROP in schema.parameters:
        size = _int_param(schema, CONNECT_AVRO_FIXED_SIZE_PROP)

    def encode(value):
        try:
            n = Decimal.unscaled_at(value, scale)
        except AttributeError:
            raise DataException(f"{type(value).__name__} is not a decimal.Decimal") from None
        bits = n.bit_length() if n >= 0 else (~n).bit_length()
        if size is None:
            return n.to_bytes(bits // 8 + 1, "big", signed=True)
        if bits // 8 + 1 > size:
            raise DataException(f"Decimal {value} does not fit the {size} bytes of its Avro fixed")
        return n.to_bytes(size, "big", signed=True)

    return encode
