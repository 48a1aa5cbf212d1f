"""Connect schemas and values <-> Avro, mapped as Confluent's ``io.confluent.connect.avro.AvroData`` maps them.

Schemas (``AvroData.from_connect_schema`` / ``to_connect_schema``; an Avro schema
is its JSON as Python: ``"string"``, ``{"type": "record", ...}``, ``[...]``):

=======================  ======================================================================
Connect                  Avro
=======================  ======================================================================
int8, int16              ``int`` with ``"connect.type": "int8"`` / ``"int16"``
int32, int64             ``int``, ``long``
float32, float64         ``float``, ``double``
boolean, string, bytes   ``boolean``, ``string``, ``bytes``
array                    ``array``
map, string keys         ``map``
map, other keys          ``array`` of records ``io.confluent.connect.avro.MapEntry`` {key, value}
                         (a named map: a record of the map's name, ``"connect.internal.type":
                         "MapEntry"``)
struct                   ``record``: the schema's name split at its last dot into namespace and
                         name; an unnamed struct is ``io.confluent.connect.avro.ConnectDefault``
optional schema          union ``["null", T]``, a field of it defaulting to ``null``
                         (``[T, "null"]`` when the schema has a non-null default)
default                  the record field's ``default`` and ``"connect.default"``
Date                     ``int``, ``"logicalType": "date"``
Time                     ``int``, ``"logicalType": "time-millis"``
Timestamp                ``long``, ``"logicalType": "timestamp-millis"``
Decimal                  ``bytes``, ``"logicalType": "decimal"``, ``"scale"`` and ``"precision"``
                         (the parameter ``connect.decimal.precision``, else 64)
named bytes with         ``fixed`` of that name and size (a Decimal: named by the parameter
``connect.fixed.size``   ``connect.fixed.name``, else ``...connect.data.Decimal``)
name, version, doc,      ``"connect.name"``, ``"connect.version"``, ``"connect.doc"``,
parameters               ``"connect.parameters"`` (a JSON object of strings); parameters whose
                         key starts with ``avro`` are also copied as Avro properties
struct ``io.confluent.   a union of its fields' schemas (Avro unions other than ``[null, T]``
connect.avro.Union``     read as such a struct, one optional field per branch, named by the
                         branch's type, or its name for a record, enum or fixed); a value is
                         written in the branch of its first non-null field and read into the
                         field of the branch it was written in
no schema                ``io.confluent.connect.avro.Anything`` (Confluent's schemaless record)
=======================  ======================================================================

Reading Avro that Connect did not write: ``enum`` becomes ``string`` with the
parameters ``io.confluent.connect.avro.Enum`` (full name) and
``io.confluent.connect.avro.Enum.<symbol>``; ``fixed`` becomes ``bytes`` named by the
fixed's full name with the parameter ``connect.fixed.size`` (so it is written back as
that ``fixed``); a decimal's scale defaults to 0, as the spec says; a
record's and its fields' ``doc`` become the parameters
``io.confluent.connect.avro.record.doc`` / ``...field.doc.<field>``; a field
default without ``connect.default`` becomes the Connect default plus the
parameter ``io.confluent.connect.avro.field.default=true``; other logical types
(``timestamp-micros``, ``uuid``, ...) stay their primitive type; the version is
``connect.version`` or, failing that, the one passed in (the registry's).
Recursive Avro schemas cannot become Connect schemas and raise :class:`DataException`.
So ``to_connect_schema(from_connect_schema(s)) == s`` for every Connect schema
``s`` (but a schema read from a registry gains the registry's version when it
had none).

Deliberate differences from Confluent (each where Java would fail or write
invalid Avro): different unnamed structs (or non-string-keyed maps) in one
schema become ``ConnectDefault``, ``ConnectDefault2``, ... (``MapEntry``,
``MapEntry2``, ...; both read back as unnamed) instead of "Can't redefine";
an optional struct with a non-null default is ``[record, "null"]``; a
non-string-keyed map's field default is written as Avro requires (an array of
``{"key":…, "value":…}``); a decimal on a ``fixed`` reads as Decimal, its fixed's name
kept in the parameter ``connect.fixed.name`` (Java fails: "Mismatched names"), and is
written sign-extended to the fixed's size; a union with an enum branch and a string
branch writes the enum as an Avro ``enum`` even without enhanced support (Java would
write two ``string`` branches, which Avro refuses); a named type used with different
field defaults is defined once (those defaults are the fields'). Names Avro does not
allow (``my-field``, ``1st``, ``com.ex.my-record``) raise :class:`DataException`, as
Java's Avro refuses them (it checks names, not namespaces, and takes non-ASCII letters);
``scrub.invalid.names`` replaces invalid characters with ``_`` as Confluent does. A struct without namespace used twice inside a
namespaced one is referred to by its bare name, as Java writes it: the spec reads that
name in the enclosing namespace, Java's Avro (and this module) falls back to the
type without namespace, but spec-strict readers (fastavro, Python's ``avro``) refuse
the schema -- give such structs a namespace.

Values: :meth:`AvroData.writer` compiles, once per Connect schema, what turns a
Connect value into the bytes of Avro's binary encoding (logical values as
Kafka Connect defines them: :class:`~.data.Date` days, :class:`~.data.Time` ms,
:class:`~.data.Timestamp` ms, :class:`~.data.Decimal` big-endian unscaled
bytes; a union's value as fastavro's ``(branch name, datum)``, so that the branch
written is the value's); :meth:`AvroData.reader` compiles, once per writer (and reader) schema,
the inverse, resolving the writer's data onto a reader schema when one is given
(Avro schema resolution: added fields take their defaults, removed fields are
skipped, ``int`` widens to ``long``, ...). Encoding and decoding run in
``fastavro``. Both are cached (``schemas.cache.size`` entries each), so a
record costs one dictionary lookup plus the encoding itself.

Why over 500 lines: this is Confluent's ``AvroData`` in both directions -- Connect schema to
Avro and back, with defaults, logical types, named types, unions, enums, the ``connect.*``
properties, and the caches -- and the two directions must agree exactly (the round-trip tests
check it). It is an implementation, not API: issue 15 moves it out of ``connect/`` into the Avro
converter's own package, where it splits into ``to_avro`` (schemas, values), ``from_avro``
(schemas, values) and the shared naming rules; it is kept whole until then so that the move and
the split are one reviewed step.
"""

from __future__ import annotations

import decimal as _decimal
import io
import json
import re
import threading
from collections import OrderedDict
from typing import Any, Callable

from .data import Date, Decimal, Field, Schema, Struct, Time, Timestamp, Type, validate_value
from .errors import DataException

__all__ = ["AvroData", "AvroWriter", "AvroReader", "ANYTHING_SCHEMA", "schema_json", "compatibility_problems"]

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


class _FromConnect:
    """One conversion of a Connect schema: names defined so far (Avro defines each once), and the
    branch names of every union (for writing values by branch)."""

    def __init__(self, data: "AvroData"):
        self.data = data
        self.scrub = data.scrub_invalid_names
        self.by_name: dict[str, _Named] = {}
        self.by_schema: dict[Schema, _Named] = {}
        self.unions: dict[Schema, list[str]] = {}

    def avro_name(self, name: str, owner: str | None = None) -> str:
        """A field name as Avro gets it: scrubbed with ``scrub.invalid.names``, else checked."""
        if self.scrub:
            return _scrub_name(name)
        if _valid_name(name):
            return name
        of = f" of {owner!r}" if owner else ""
        raise DataException(f"field name {name!r}{of} is not a valid Avro name ({_NAME_RULE}); rename it, or set "
                            "scrub.invalid.names=true to replace the invalid characters with _")

    def named(self, connect: Schema, full: str, build: Callable[[str], _Named], default_kind: str | None) -> _Named:
        """The named type for ``connect`` called ``full``: the one built before for an equal
        schema, or a new one. Clashing default names are numbered; other clashes fail."""
        key = _def_key(connect)
        hit = self.by_schema.get(key)
        if hit is not None:
            return hit
        if self.scrub:
            full = _scrub_full_name(full)
        _check_full_name(full, "the name")
        if full in self.by_name:
            if default_kind is None:
                raise DataException(
                    f"two different schemas are both named {full!r}; Avro defines a name once per schema: "
                    "give them different names")
            base = re.sub(r"\d+$", "", full)
            n = 2
            while f"{base}{n}" in self.by_name:
                n += 1
            full = f"{base}{n}"
        self.by_name[full] = None  # reserved: types nested in this one must not take its name
        node = build(full)
        node.connect = connect
        self.by_name[full] = node
        self.by_schema[key] = node
        return node

    def convert(self, schema: Schema, ignore_optional: bool = False, as_enum: bool = False,
                default_name: str | None = None) -> Any:
        """The Avro schema of ``schema`` (built, named types as :class:`_Named`). ``as_enum``: a
        string with Avro enum parameters is an enum; ``default_name``: the name an unnamed struct
        takes if free (else ``ConnectDefault``, numbered)."""
        data = self.data
        t = schema.type
        name = schema.name
        params = schema.parameters
        connect_type = None
        base: Any
        if t is Type.INT8 or t is Type.INT16:
            connect_type = t.value
            base = {"type": "int"}
        elif t is Type.STRING and (data.enhanced_schema_support or as_enum) and AVRO_TYPE_ENUM in params:
            enum_name = params[AVRO_TYPE_ENUM]
            short = _split(enum_name)[1]
            symbols = [v for k, v in params.items() if k.startswith(AVRO_TYPE_ENUM + ".")]
            bad = [s for s in symbols if not _valid_name(s)]
            if bad:
                raise DataException(f"enum {enum_name!r}: symbol {bad[0]!r} is not a valid Avro name ({_NAME_RULE})")

            def build_enum(full):
                node = _Named(type="enum", name=full)
                if params.get(AVRO_ENUM_DOC_PREFIX_PROP + short) is not None:
                    node["doc"] = params[AVRO_ENUM_DOC_PREFIX_PROP + short]
                node["symbols"] = symbols
                if params.get(AVRO_ENUM_DEFAULT_PREFIX_PROP + short) is not None:
                    node["default"] = params[AVRO_ENUM_DEFAULT_PREFIX_PROP + short]
                self.metadata(schema, node, None)
                return node

            base = self.named(schema, enum_name, build_enum, None)
        elif t is Type.BYTES and name is not None and CONNECT_AVRO_FIXED_SIZE_PROP in params:
            size = _int_param(schema, CONNECT_AVRO_FIXED_SIZE_PROP)
            if size < 0:
                raise DataException(f"{name} schema: parameter {CONNECT_AVRO_FIXED_SIZE_PROP!r} must not be negative")
            decimal = name == Decimal.LOGICAL_NAME

            def build_fixed(full):
                node = _Named(type="fixed", name=full)
                node["size"] = size
                if decimal:
                    node["scale"] = Decimal.scale(schema)
                    node["precision"] = self.precision(schema)
                self.metadata(schema, node, None)
                return node

            base = self.named(schema, params.get(CONNECT_AVRO_FIXED_NAME_PROP) or name, build_fixed, None)
        elif t in _TYPE_NAMES and t not in (Type.ARRAY, Type.MAP):
            base = {"type": _TYPE_NAMES[t]}
            if t is Type.BYTES and name == Decimal.LOGICAL_NAME:
                base["scale"] = Decimal.scale(schema)
                base["precision"] = self.precision(schema)
        elif t is Type.ARRAY:
            base = {"type": "array", "items": self.convert(schema.value_schema)}
        elif t is Type.MAP:
            key = schema.key_schema
            if key.type is Type.STRING and not key.optional:
                base = {"type": "map", "values": self.convert(schema.value_schema)}
            else:
                full = name if name else NAMESPACE + "." + MAP_ENTRY_TYPE_NAME

                def build_entry(full_name):
                    node = _Named(type="record", name=full_name)
                    node["fields"] = [self.field(KEY_FIELD, key, None), self.field(VALUE_FIELD, schema.value_schema, None)]
                    if name or full_name != full:
                        node[CONNECT_INTERNAL_TYPE_NAME] = MAP_ENTRY_TYPE_NAME
                    return node

                entry_key = Schema(Type.MAP, key_schema=key, value_schema=schema.value_schema, name=name)
                base = {"type": "array", "items": self.named(entry_key, full, build_entry, None if name else "MapEntry")}
        else:  # STRUCT
            if name == AVRO_TYPE_UNION:
                return self.union(schema)
            if schema.optional:
                inner = self.convert(schema.copy(optional=False))
                if ignore_optional:
                    return inner
                return [inner, "null"] if schema.default is not None else ["null", inner]
            full = name or default_name or DEFAULT_SCHEMA_FULL_NAME

            def build_record(full_name):
                node = _Named(type="record", name=full_name)
                if params.get(AVRO_RECORD_DOC_PROP) is not None:
                    node["doc"] = params[AVRO_RECORD_DOC_PROP]
                fields = []
                seen: dict[str, str] = {}
                for f in schema.fields:
                    avro_name = self.avro_name(f.name, full_name)
                    if avro_name in seen:
                        raise DataException(f"fields {seen[avro_name]!r} and {f.name!r} of {full_name!r} are both "
                                            f"{avro_name!r} in Avro")
                    seen[avro_name] = f.name
                    fields.append(self.field(avro_name, f.schema, params.get(AVRO_FIELD_DOC_PREFIX_PROP + f.name)))
                node["fields"] = fields
                self.metadata(schema, node, None)
                return node

            return self.named(schema, full, build_record, None if name else "ConnectDefault")

        if not isinstance(base, _Named):  # (named types got their metadata where they are defined)
            self.metadata(schema, base, connect_type)
        if schema.optional and not ignore_optional:
            return [base, "null"] if schema.default is not None else ["null", base]
        return base

    def precision(self, schema: Schema) -> int:
        if CONNECT_AVRO_DECIMAL_PRECISION_PROP not in schema.parameters:
            return DECIMAL_PRECISION_DEFAULT
        return _int_param(schema, CONNECT_AVRO_DECIMAL_PRECISION_PROP)

    def union(self, schema: Schema) -> list:
        """Confluent's union struct as the Avro union of its fields' schemas. Branch names are kept
        in ``unions``. Without enhanced support an enum branch is written as an enum all the same
        when another branch is a string (a union cannot hold two strings)."""
        fields = schema.fields
        strings = sum(1 for f in fields if f.schema.type is Type.STRING)
        members: list[Any] = ["null"] if schema.optional else []
        names: dict[str, str] = {"null": "null"} if schema.optional else {}
        branches = []
        for f in fields:
            fs = f.schema.copy(optional=False) if f.schema.optional else f.schema
            if fs.type is Type.STRUCT and fs.name == AVRO_TYPE_UNION:
                raise DataException(f"union field {f.name!r} is itself a union; Avro unions cannot hold unions")
            # a branch read from an unnamed struct's record keeps its name (ConnectDefault2, ...), so the
            # union written back has the records it was read with
            hint = f"{NAMESPACE}.{f.name}" if fs.type is Type.STRUCT and _DEFAULT_NAME.fullmatch(
                f"{NAMESPACE}.{f.name}") else None
            member = self.convert(fs, True, as_enum=strings > 1, default_name=hint)
            branch = _branch_name(member)
            if branch in names:
                raise DataException(f"union fields {names[branch]!r} and {f.name!r} are both Avro {branch!r}; an "
                                    "Avro union holds one branch per type (and per name)")
            names[branch] = f.name
            members.append(member)
            branches.append(branch)
        self.unions[schema] = branches
        return members

    def metadata(self, schema: Schema, node: dict, connect_type: str | None) -> None:
        """Confluent's annotations of ``node`` (never a union): Connect metadata, logical types,
        ``avro*`` parameters."""
        params = schema.parameters
        name = schema.name
        if self.data.connect_meta_data:
            if schema.doc is not None:
                node[CONNECT_DOC_PROP] = schema.doc
            if schema.version is not None:
                node[CONNECT_VERSION_PROP] = schema.version
            shown = {k: v for k, v in params.items() if k != AVRO_FIELD_DEFAULT_FLAG_PROP}
            if shown:
                node[CONNECT_PARAMETERS_PROP] = shown
            if schema.default is not None and AVRO_FIELD_DEFAULT_FLAG_PROP not in params:
                node[CONNECT_DEFAULT_VALUE_PROP] = _default_json(schema, schema.default, connect_form=True,
                                                                 name_of=self.avro_name)
            if name is not None:
                node[CONNECT_NAME_PROP] = name
            if connect_type is not None:
                node[CONNECT_TYPE_PROP] = connect_type
        if name == Decimal.LOGICAL_NAME:
            # also when scale < 0 or scale > precision, which Avro's spec forbids: Confluent then writes
            # the property without validating it, and reads it back as Decimal all the same
            node["logicalType"] = "decimal"
        elif name == Time.LOGICAL_NAME:
            node["logicalType"] = "time-millis"
        elif name == Timestamp.LOGICAL_NAME:
            node["logicalType"] = "timestamp-millis"
        elif name == Date.LOGICAL_NAME:
            node["logicalType"] = "date"
        for k, v in params.items():
            if k.startswith("avro"):
                node[k] = v

    def field(self, name: str, schema: Schema, doc: str | None) -> dict:
        node: dict[str, Any] = {"name": name, "type": self.convert(schema)}
        if doc is not None:
            node["doc"] = doc
        if schema.default is not None:
            node["default"] = _default_json(schema, schema.default, connect_form=False, name_of=self.avro_name)
        elif schema.optional:
            node["default"] = None
        return node


def _default_json(schema: Schema, value: Any, *, connect_form: bool, name_of: Callable[[str], str] = str) -> Any:
    """A Connect default as Avro JSON (Confluent's ``defaultValueFromConnect``). ``connect_form``:
    a non-string-keyed map as ``[[k, v], ...]`` (``connect.default``), else as Avro requires.
    ``name_of``: a struct field's Avro name."""
    if value is None:
        return None
    name = schema.name
    if name == Date.LOGICAL_NAME:
        return Date.from_logical(value)
    if name == Time.LOGICAL_NAME:
        return Time.from_logical(value)
    if name == Timestamp.LOGICAL_NAME:
        return Timestamp.from_logical(value)
    if name == Decimal.LOGICAL_NAME:
        return _decimal_bytes(schema)(value).decode("latin-1")
    t = schema.type
    if t is Type.BYTES:
        return bytes(value).decode("latin-1")
    if t is Type.ARRAY:
        return [_default_json(schema.value_schema, v, connect_form=connect_form, name_of=name_of) for v in value]
    if t is Type.MAP:
        ks, vs = schema.key_schema, schema.value_schema
        if ks.type is Type.STRING and not ks.optional:
            return {k: _default_json(vs, v, connect_form=connect_form, name_of=name_of) for k, v in value.items()}
        if connect_form:
            return [[_default_json(ks, k, connect_form=True, name_of=name_of),
                     _default_json(vs, v, connect_form=True, name_of=name_of)] for k, v in value.items()]
        return [{KEY_FIELD: _default_json(ks, k, connect_form=False, name_of=name_of),
                 VALUE_FIELD: _default_json(vs, v, connect_form=False, name_of=name_of)} for k, v in value.items()]
    if t is Type.STRUCT:
        if name == AVRO_TYPE_UNION:  # a union's default is its first non-null field's value, as Avro's
            return next((_default_json(f.schema, value.get(f.name), connect_form=connect_form, name_of=name_of)
                         for f in schema.fields if value.get(f.name) is not None), None)
        return {name_of(f.name): _default_json(f.schema, value.get(f.name), connect_form=connect_form, name_of=name_of)
                for f in schema.fields}
    if t in (Type.FLOAT32, Type.FLOAT64):
        return float(value)
    return value


def _emit(node: Any, space: str | None, written: set) -> Any:
    """The JSON form of a built schema: named types relative to the enclosing namespace
    ``space`` the first time, by name after that."""
    if isinstance(node, list):
        return [_emit(n, space, written) for n in node]
    if isinstance(node, str):
        return node
    if isinstance(node, _Named):
        full = node["name"]
        ns, short = _split(full)
        if full in written:
            return short if ns == space else full
        written.add(full)
        out: dict[str, Any] = {"type": node["type"], "name": short}
        if ns != space:
            out["namespace"] = ns or ""
        inner_space = ns
        for k, v in node.items():
            if k in ("type", "name"):
                continue
            if k == "fields":
                out["fields"] = [_emit_field(f, inner_space, written) for f in v]
            else:
                out[k] = v
        return out
    if len(node) == 1 and node.get("type") in _PRIMITIVES:
        return node["type"]  # Avro writes a primitive without properties as its name
    out = {}
    for k, v in node.items():
        out[k] = _emit(v, space, written) if k in ("items", "values") else v
    return out


def _emit_field(field: dict, space: str | None, written: set) -> dict:
    out = {}
    for k, v in field.items():
        out[k] = _emit(v, space, written) if k == "type" else v
    return out


# ---------------------------------------------------------------- Avro -> Connect schema

class _ToConnect:
    """One conversion of an Avro schema: named types by full name, records in progress."""

    def __init__(self, data: "AvroData"):
        self.data = data
        self.names: dict[str, dict] = {}
        self.spaces: dict[str, str | None] = {}
        self.in_progress: set[str] = set()

    def resolve(self, node: Any, space: str | None) -> tuple[Any, str | None]:
        """``(definition, its namespace)`` for a reference; the node itself otherwise."""
        if isinstance(node, str) and node not in _PRIMITIVES:
            full = node if "." in node or space is None else f"{space}.{node}"
            if full not in self.names and node in self.names:
                full = node
            if full not in self.names:
                raise DataException(f"Avro schema refers to unknown type {node!r}")
            if full in self.in_progress:
                raise DataException(f"Avro record {full!r} refers to itself; Connect schemas cannot be recursive")
            return self.names[full], self.spaces[full]
        return node, space

    def define(self, node: dict, space: str | None) -> tuple[str, str | None]:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise DataException(f"Avro {node.get('type')} has no name")
        if "." in name:
            full = name
        else:
            ns = node["namespace"] if "namespace" in node else space
            full = f"{ns}.{name}" if ns else name
        own_space = _split(full)[0]
        self.names[full] = node
        self.spaces[full] = own_space
        return full, own_space

    def convert(self, node: Any, space: str | None, *, force_optional: bool = False, field_default: Any = _NO,
                version: int | None = None) -> Schema:
        node, space = self.resolve(node, space)
        if isinstance(node, list):
            return self.union(node, space)
        if isinstance(node, str):
            node = {"type": node}
        if not isinstance(node, dict) or "type" not in node:
            raise DataException(f"not an Avro schema: {node!r:.80}")
        kind = node["type"]
        if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _PRIMITIVES and kind not in _COMPLEX):
            return self.convert(kind, space, force_optional=force_optional, field_default=field_default, version=version)
        data = self.data
        logical = node.get("logicalType")
        logical = logical.lower() if isinstance(logical, str) else None
        connect_type = node.get(CONNECT_TYPE_PROP)
        args: dict[str, Any] = {}
        params: dict[str, str] = {}
        fields = None
        key_schema = value_schema = None
        name = None
        full = None
        if kind == "boolean":
            t = Type.BOOLEAN
        elif kind in ("bytes", "fixed"):
            t = Type.BYTES
            if logical == "decimal":
                scale = node.get("scale", 0)  # the spec's (and Confluent's) default
                if not isinstance(scale, int) or isinstance(scale, bool):
                    raise DataException(f"Avro decimal: scale must be a JSON integer, not {scale!r:.40}")
                params["scale"] = str(scale)
                name = Decimal.LOGICAL_NAME
                args["version"] = 1
                precision = node.get("precision")
                if precision is not None:
                    if not isinstance(precision, int) or isinstance(precision, bool):
                        raise DataException("Avro decimal: precision must be a JSON integer")
                    if precision != DECIMAL_PRECISION_DEFAULT:
                        params[CONNECT_AVRO_DECIMAL_PRECISION_PROP] = str(precision)
            if kind == "fixed":
                full, _ = self.define(node, space)
                size = node.get("size")
                if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                    raise DataException(f"Avro fixed {full!r}: size must be a non-negative JSON integer")
                params[CONNECT_AVRO_FIXED_SIZE_PROP] = str(size)
        elif kind == "double":
            t = Type.FLOAT64
        elif kind == "float":
            t = Type.FLOAT32
        elif kind == "int":
            t = Type.INT32
            if logical == "date":
                name, args["version"] = Date.LOGICAL_NAME, 1
            elif logical == "time-millis":
                name, args["version"] = Time.LOGICAL_NAME, 1
            elif logical is None and connect_type is not None:
                if connect_type not in ("int8", "int16"):
                    raise DataException(f"Avro int has an unknown connect.type {connect_type!r}")
                t = Type(connect_type)
        elif kind == "long":
            t = Type.INT64
            if logical == "timestamp-millis":
                name, args["version"] = Timestamp.LOGICAL_NAME, 1
        elif kind == "string":
            t = Type.STRING
        elif kind == "array":
            items, items_space = self.resolve(node.get("items"), space)
            if self.is_map_entry(items, items_space):
                names = [f.get("name") for f in items.get("fields", [])]
                if sorted(names) != [KEY_FIELD, VALUE_FIELD]:
                    raise DataException("Found map encoded as array of key-value pairs, but array elements do not "
                                        "match the expected format.")
                full_entry, entry_space = self.define(items, items_space)
                by_name = {f["name"]: f for f in items["fields"]}
                self.in_progress.add(full_entry)
                t = Type.MAP
                key_schema = self.convert(by_name[KEY_FIELD]["type"], entry_space)
                value_schema = self.convert(by_name[VALUE_FIELD]["type"], entry_space)
                self.in_progress.discard(full_entry)
            else:
                t = Type.ARRAY
                value_schema = self.convert(node.get("items"), space)
        elif kind == "map":
            t = Type.MAP
            key_schema = Schema.STRING
            value_schema = self.convert(node.get("values"), space)
        elif kind in ("record", "error"):
            t = Type.STRUCT
            full, own_space = self.define(node, space)
            if full == AVRO_TYPE_ANYTHING:
                raise DataException("the schemaless Anything record cannot be nested in a schema")
            self.in_progress.add(full)
            if data.connect_meta_data and node.get("doc") is not None:
                params[AVRO_RECORD_DOC_PROP] = node["doc"]
            fields = []
            for i, f in enumerate(node.get("fields", [])):
                if data.connect_meta_data and f.get("doc") is not None:
                    params[AVRO_FIELD_DOC_PREFIX_PROP + f["name"]] = f["doc"]
                fs = self.convert(f["type"], own_space, field_default=f.get("default", _NO))
                fields.append(Field(f["name"], i, fs))
            self.in_progress.discard(full)
        elif kind == "enum":
            t = Type.STRING
            full, _ = self.define(node, space)
            short = _split(full)[1]
            if data.connect_meta_data:
                if node.get("doc") is not None:
                    params[AVRO_ENUM_DOC_PREFIX_PROP + short] = node["doc"]
                if node.get("default") is not None:
                    params[AVRO_ENUM_DEFAULT_PREFIX_PROP + short] = node["default"]
            params[AVRO_TYPE_ENUM] = full
            for symbol in node.get("symbols", []):
                params[AVRO_TYPE_ENUM + "." + symbol] = symbol
        elif kind == "null":
            raise DataException("Standalone null schemas are not supported by this converter")
        else:
            raise DataException(f"Couldn't translate unsupported schema type {kind!r}")

        if data.connect_meta_data and node.get(CONNECT_DOC_PROP) is not None:
            args["doc"] = node[CONNECT_DOC_PROP]
        v = node.get(CONNECT_VERSION_PROP)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool):
                raise DataException(f"Invalid Connect version found: {v!r}")
        elif version is not None:
            v = version
        if v is not None and v >= 0:
            if args.get("version") is not None and args["version"] != v:
                raise DataException(f"Mismatched versions: {args['version']} from the logical type differs from "
                                    f"version {v} in the Avro schema")
            args["version"] = v
        extra = node.get(CONNECT_PARAMETERS_PROP)
        if data.connect_meta_data and extra is not None:
            if not isinstance(extra, dict):
                raise DataException(f"Expected JSON object for schema parameters but found: {extra!r}")
            for k, pv in extra.items():
                if not isinstance(pv, str):
                    raise DataException(f"Expected schema parameter values to be strings but found: {pv!r}")
                params[k] = pv
        for k, pv in node.items():
            if isinstance(k, str) and k.startswith("avro"):
                params[k] = pv if isinstance(pv, str) else json.dumps(pv)
        connect_default = node.get(CONNECT_DEFAULT_VALUE_PROP, _NO)
        default_json = field_default
        if default_json is _NO:
            default_json = connect_default
        elif connect_default is _NO and default_json is not None:
            params[AVRO_FIELD_DEFAULT_FLAG_PROP] = "true"
        connect_name = node.get(CONNECT_NAME_PROP)
        if connect_name is not None:
            if not isinstance(connect_name, str):
                raise DataException(f"Invalid schema name: {connect_name!r}")
            if name is not None and connect_name != name:
                raise DataException(f"Mismatched names: {name!r} from the logical type differs from name "
                                    f"{connect_name!r} in the Avro schema")
            name = connect_name
        elif kind in ("record", "error", "enum", "fixed") and name is None:
            name = full
        if kind == "fixed" and name != full and full != Decimal.LOGICAL_NAME:
            # a decimal's Connect name is Decimal's: the fixed keeps its own name in a parameter, so that
            # writing the schema back defines the same fixed (Confluent fails with "Mismatched names")
            params[CONNECT_AVRO_FIXED_NAME_PROP] = full
        if name is not None and _DEFAULT_NAME.fullmatch(name):
            name = None
        schema = Schema(t, optional=force_optional, name=name, parameters=params or None, fields=fields,
                        key_schema=key_schema, value_schema=value_schema, **args)
        if default_json is not _NO and default_json is not None:
            try:
                value = _default_from_avro(schema, node, default_json, self)
            except DataException:
                raise
            except (TypeError, ValueError, KeyError, AttributeError) as e:
                raise DataException(f"invalid default {default_json!r:.60} for {kind}: {e}") from None
            if value is not None:
                schema = schema.copy(default=value)
        return schema

    def union(self, members: list, space: str | None) -> Schema:
        if len(members) == 2 and "null" in members:
            other = members[1] if members[0] == "null" else members[0]
            return self.convert(other, space, force_optional=True)
        fields = []
        optional = False
        seen = set()
        for m in members:
            if m == "null":
                optional = True
                continue
            resolved, resolved_space = self.resolve(m, space)
            fname = self.member_field_name(resolved, resolved_space)
            if fname in seen:
                raise DataException("Multiple union schemas map to the Connect union field name")
            seen.add(fname)
            fields.append(Field(fname, len(fields), self.convert(m, space, force_optional=True)))
        return Schema(Type.STRUCT, name=AVRO_TYPE_UNION, optional=optional, fields=fields)

    def member_field_name(self, node: Any, space: str | None) -> str:
        if isinstance(node, str):
            return node
        if isinstance(node, list):
            raise DataException("Avro unions cannot contain unions")
        kind = node.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            name = node["name"]
            if "." not in name:
                ns = node["namespace"] if "namespace" in node else space
                name = f"{ns}.{name}" if ns else name
            return name if self.data.enhanced_schema_support else _split(name)[1]
        if isinstance(kind, (dict, list)):
            return self.member_field_name(kind, space)
        return kind

    def is_map_entry(self, node: Any, space: str | None) -> bool:
        if not isinstance(node, dict) or node.get("type") not in ("record", "error"):
            return False
        if node.get(CONNECT_INTERNAL_TYPE_NAME) == MAP_ENTRY_TYPE_NAME:
            return True
        name = node.get("name", "")
        if "." not in name:
            ns = node["namespace"] if "namespace" in node else space
            name = f"{ns}.{name}" if ns else name
        return bool(_MAP_ENTRY_NAME.fullmatch(name))


def _default_from_avro(schema: Schema, node: Any, value: Any, ctx: _ToConnect) -> Any:
    """A JSON default of the Avro ``node`` as a Connect value of ``schema``."""
    if value is None:
        return None
    node, _ = ctx.resolve(node, None) if isinstance(node, str) and node not in _PRIMITIVES else (node, None)
    if isinstance(node, list):  # a union's default is its first branch's
        first = node[0]
        if first == "null":
            return None
        if schema.name == AVRO_TYPE_UNION:
            f = schema.fields[0]
            return Struct(schema.copy(default=None)).put(f.name, _default_from_avro(f.schema, first, value, ctx))
        return _default_from_avro(schema, first, value, ctx)
    kind = node["type"] if isinstance(node, dict) else node
    if isinstance(kind, (dict, list)):
        return _default_from_avro(schema, kind, value, ctx)
    t = schema.type
    if t is Type.STRUCT:
        struct = Struct(schema)
        by_name = {f["name"]: f for f in node.get("fields", [])}
        for f in schema.fields:
            if f.name in value:
                struct.put(f.name, _default_from_avro(f.schema, by_name[f.name]["type"], value[f.name], ctx))
        return struct
    if t is Type.ARRAY:
        items = node.get("items") if isinstance(node, dict) else None
        return [_default_from_avro(schema.value_schema, items, v, ctx) for v in value]
    if t is Type.MAP:
        if isinstance(value, dict):
            values = node.get("values") if isinstance(node, dict) else None
            return {k: _default_from_avro(schema.value_schema, values, v, ctx) for k, v in value.items()}
        entries = [(e[KEY_FIELD], e[VALUE_FIELD]) if isinstance(e, dict) else (e[0], e[1]) for e in value]
        return {_default_from_avro(schema.key_schema, None, k, ctx): _default_from_avro(schema.value_schema, None, v, ctx)
                for k, v in entries}
    if schema.name == Decimal.LOGICAL_NAME:
        return Decimal.to_logical(schema, value.encode("latin-1") if isinstance(value, str) else bytes(value))
    if schema.name == Date.LOGICAL_NAME:
        return Date.to_logical(value)
    if schema.name == Time.LOGICAL_NAME:
        return Time.to_logical(value)
    if schema.name == Timestamp.LOGICAL_NAME:
        return Timestamp.to_logical(value)
    if t is Type.BYTES:
        return value.encode("latin-1") if isinstance(value, str) else bytes(value)
    if t in (Type.FLOAT32, Type.FLOAT64):
        return float(value)
    if t in (Type.INT8, Type.INT16, Type.INT32, Type.INT64):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DataException(f"default {value!r} is not a number")
        return int(value)
    if t is Type.BOOLEAN:
        return bool(value)
    return str(value)


# ---------------------------------------------------------------- values

_fastavro_module = None


def _fastavro():
    """fastavro, imported once (on first use: importing this module does not need it)."""
    global _fastavro_module
    if _fastavro_module is None:
        import fastavro

        _fastavro_module = fastavro
    return _fastavro_module


def _strip_logical(node: Any) -> Any:
    """A copy of an Avro schema without ``logicalType`` (the binary encoding is the same): fastavro
    then reads and writes the primitive values, which the compiled converters map as Connect does."""
    if isinstance(node, list):
        return [_strip_logical(n) for n in node]
    if isinstance(node, dict):
        return {k: (_strip_logical(v) if k in ("type", "items", "values", "fields") else v)
                for k, v in node.items() if k != "logicalType"}
    return node


def _resolve(node: Any, space: str | None, names: dict) -> tuple[Any, str | None]:
    """``(definition, its namespace)`` of what ``node`` stands for: a reference resolved (a name
    without a dot in the enclosing namespace, else -- as Java's Avro does -- without namespace),
    ``{"type": <schema>}`` unwrapped; any other node as it is."""
    while True:
        if isinstance(node, str) and node not in _PRIMITIVES:
            full = node if "." in node or not space else f"{space}.{node}"
            if full not in names and node in names:
                full = node
            if full not in names:
                raise DataException(f"Avro schema refers to unknown type {node!r}")
            node, space = names[full]
        elif isinstance(node, dict) and (isinstance(node.get("type"), (dict, list)) or (
                isinstance(node.get("type"), str) and node["type"] not in _PRIMITIVES and node["type"] not in _COMPLEX)):
            node = node["type"]
        else:
            return node, space


def _null_namespace_refs(schema: Any) -> list[tuple[str, str]]:
    """References that only Java's lenient lookup resolves: a name without a dot, used inside a
    namespace ``ns``, for a type defined without namespace (``ns.Name`` not being defined).
    ``[(ns.Name, Name), ...]``; the Avro spec (and fastavro) would look for ``ns.Name``."""
    names = _named_types(schema)
    out: list[tuple[str, str]] = []

    def ref(name, space):
        if isinstance(name, str) and name not in _PRIMITIVES and name not in _COMPLEX and "." not in name and space:
            full = f"{space}.{name}"
            if full not in names and name in names and (full, name) not in out:
                out.append((full, name))

    def walk(node, space):
        if isinstance(node, str):
            ref(node, space)
        elif isinstance(node, list):
            for n in node:
                walk(n, space)
        elif isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, (dict, list)):
                walk(kind, space)
                return
            if isinstance(kind, str) and kind not in _PRIMITIVES and kind not in _COMPLEX:
                ref(kind, space)
                return
            if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
                name = node["name"]
                ns = node["namespace"] if "namespace" in node else space
                space = _split(name if "." in name else (f"{ns}.{name}" if ns else name))[0]
            for f in node.get("fields", []) if kind in ("record", "error") else []:
                walk(f.get("type"), space)
            if kind == "array":
                walk(node.get("items"), space)
            if kind == "map":
                walk(node.get("values"), space)

    walk(schema, None)
    return out


def _parse(avro_schema: Any):
    """fastavro's parsed form of an Avro schema (without logical types, see :func:`_strip_logical`).
    A name that only Java's lenient lookup resolves (see :func:`_null_namespace_refs`) is
    registered under the name fastavro looks for, so such schemas (which Confluent's Java
    converter writes for a struct without namespace used twice in a namespaced one) parse."""
    fastavro = _fastavro()
    schema = _strip_logical(avro_schema)
    try:
        refs = _null_namespace_refs(schema)
        if not refs:
            return fastavro.parse_schema(schema)
        probe: dict = {full: {} for full, _ in refs}
        fastavro.parse_schema(schema, named_schemas=probe)  # parses every definition
        return fastavro.parse_schema(schema, named_schemas={full: probe[name] for full, name in refs})
    except DataException:
        raise
    except Exception as e:  # fastavro raises several kinds for a bad schema
        raise DataException(f"invalid Avro schema: {e}") from None


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


# Reading a general union (more than one non-null branch) with fastavro gives the value alone, so
# int vs long, float vs double, an enum vs a string could not be told apart. Readers therefore
# decode with a view of the schema in which every such union's branch j is a record
# "__cc_u<k>_<j>" of one field "__cc_b<j>": a record of one field is encoded as that field, so
# the bytes are the same, and fastavro returns {"__cc_b<j>": value} -- the branch. With a reader
# schema, the writer's branches get records of their own names that the reader's branch records
# list as aliases (the branch Avro schema resolution picks), so resolution still works.
_WRAP_RECORD = "__cc_u{}_{}"
_WRAP_WRITER = "__cc_w{}"
_WRAP_FIELD = "__cc_b{}"


def _is_general_union(node: Any) -> bool:
    return isinstance(node, list) and sum(1 for m in node if m != "null") >= 2


def _kind(node: Any) -> str:
    k = node if isinstance(node, str) else ("union" if isinstance(node, list) else node.get("type"))
    return "record" if k == "error" else k


def _full_name(node: dict, space: str | None) -> str:
    name = node.get("name", "")
    ns = node["namespace"] if "namespace" in node else space
    return name if "." in name else (f"{ns}.{name}" if ns else name)


def _names_match(r: dict, rs: str | None, w: dict, ws: str | None) -> bool:
    wf, rf = _full_name(w, ws), _full_name(r, rs)
    aliases = r.get("aliases") or []
    return _split(wf)[1] == _split(rf)[1] or wf in aliases or _split(wf)[1] in aliases


class _Views:
    """The read views (see above) of a writer schema and, if given, a reader schema."""

    def __init__(self, writer: Any, reader: Any):
        self.writer, self.reader = writer, reader
        self.w_names = _named_types(writer)
        self.r_names = _named_types(reader) if reader is not None else self.w_names
        self.k = 0
        self.union_k: dict[int, int] = {}  # id(reader union) -> k
        self.aliases: dict[tuple[int, int], list[str]] = {}  # (k, j) -> writer records read as branch j
        self.w_wraps: dict[tuple[int | None, Any], tuple[int, str]] = {}  # writer position -> (j, record name)
        self.seen: set[tuple[int, int]] = set()
        self.keep: list = []  # nodes whose id() is a key above stay alive

    def build(self) -> tuple[Any, Any]:
        if self.reader is None:
            return self.copy_reader(self.writer), None
        self.pair((None, None), self.writer, None, self.reader, None)
        return self.copy_writer(self.writer, (None, None)), self.copy_reader(self.reader)

    # --- pairing writer and reader nodes (as Avro schema resolution does)
    def k_of(self, union: list) -> int:
        k = self.union_k.get(id(union))
        if k is None:
            k = self.union_k[id(union)] = self.k
            self.keep.append(union)
            self.k += 1
        return k

    def branch(self, w: Any, ws: str | None, union: list, rs: str | None) -> int | None:
        """The reader union's non-null branch (its index among those) that reads the writer's ``w``."""
        wd, ws = _resolve(w, ws, self.w_names)
        wk = _kind(wd)
        candidates = []
        for m in union:
            if m == "null":
                continue
            rd, rds = _resolve(m, rs, self.r_names)
            candidates.append((rd, rds, _kind(rd)))
        for j, (rd, rds, rk) in enumerate(candidates):
            if rk == wk and (wk not in ("record", "enum", "fixed") or _names_match(rd, rds, wd, ws)) and \
                    (wk != "fixed" or rd.get("size") == wd.get("size")):
                return j
        for j, (_, _, rk) in enumerate(candidates):
            if (wk, rk) in _PROMOTIONS:
                return j
        return None

    def wrap_writer(self, pos: tuple, k: int, j: int) -> str:
        name = _WRAP_WRITER.format(len(self.w_wraps))
        self.w_wraps[pos] = (j, name)
        self.aliases.setdefault((k, j), []).append(name)
        return name

    def pair(self, wpos: tuple, w: Any, ws: str | None, r: Any, rs: str | None) -> None:
        wd, wds = _resolve(w, ws, self.w_names)
        rd, rds = _resolve(r, rs, self.r_names)
        if _is_general_union(rd):
            k = self.k_of(rd)
            r_members = [m for m in rd if m != "null"]
            if isinstance(wd, list):
                self.keep.append(wd)
                for i, wm in enumerate(wd):
                    if wm == "null":
                        continue
                    j = self.branch(wm, wds, rd, rds)
                    if j is not None:
                        self.wrap_writer((id(wd), i), k, j)
                        self.pair((id(wd), i), wm, wds, r_members[j], rds)
            else:
                j = self.branch(w, ws, rd, rds)
                if j is not None:
                    self.wrap_writer(wpos, k, j)
                    self.pair(wpos, w, ws, r_members[j], rds)
            return
        if isinstance(rd, list):  # [null, T], [T]: read as they are
            r_members = [m for m in rd if m != "null"]
            if isinstance(wd, list):
                self.keep.append(wd)
                for i, wm in enumerate(wd):
                    if wm != "null" and r_members:
                        self.pair((id(wd), i), wm, wds, r_members[0], rds)
            elif r_members:
                self.pair(wpos, w, ws, r_members[0], rds)
            return
        if isinstance(wd, list):
            self.keep.append(wd)
            for i, wm in enumerate(wd):
                if wm != "null":
                    self.pair((id(wd), i), wm, wds, rd, rds)
            return
        wk, rk = _kind(wd), _kind(rd)
        if wk != rk:
            return
        self.keep += [wd, rd]
        if wk == "array":
            self.pair((id(wd), "items"), wd.get("items"), wds, rd.get("items"), rds)
        elif wk == "map":
            self.pair((id(wd), "values"), wd.get("values"), wds, rd.get("values"), rds)
        elif wk == "record":
            if (id(wd), id(rd)) in self.seen:
                return
            self.seen.add((id(wd), id(rd)))
            w_space = _split(_full_name(wd, wds))[0]
            r_space = _split(_full_name(rd, rds))[0]
            w_fields = {f.get("name"): f for f in wd.get("fields", [])}
            for f in rd.get("fields", []):
                wf = w_fields.get(f.get("name"))
                if wf is None:
                    wf = next((w_fields[a] for a in f.get("aliases") or [] if a in w_fields), None)
                if wf is not None:
                    self.pair((id(wf), "type"), wf.get("type"), w_space, f.get("type"), r_space)

    # --- copies
    def copy_writer(self, node: Any, pos: tuple) -> Any:
        out = self._copy(node, self.copy_writer)
        wrap = self.w_wraps.get(pos)
        if wrap is not None:
            j, name = wrap
            out = {"type": "record", "name": name, "fields": [{"name": _WRAP_FIELD.format(j), "type": out}]}
        return out

    def _copy(self, node: Any, again: Callable) -> Any:
        if isinstance(node, list):
            return [again(m, (id(node), i)) for i, m in enumerate(node)]
        if not isinstance(node, dict):
            return node
        out = dict(node)
        if isinstance(node.get("type"), (dict, list)):
            out["type"] = again(node["type"], (id(node), "type"))
        if "fields" in node and isinstance(node["fields"], list):
            out["fields"] = [dict(f, type=again(f.get("type"), (id(f), "type"))) if isinstance(f, dict) else f
                             for f in node["fields"]]
        for key in ("items", "values"):
            if key in node:
                out[key] = again(node[key], (id(node), key))
        return out

    def copy_reader(self, node: Any, pos: tuple = (None, None)) -> Any:
        if _is_general_union(node):
            k = self.k_of(node)
            out = []
            j = 0
            for m in node:
                if m == "null":
                    out.append(m)
                    continue
                wrapper = {"type": "record", "name": _WRAP_RECORD.format(k, j)}
                if self.aliases.get((k, j)):
                    wrapper["aliases"] = self.aliases[(k, j)]
                wrapper["fields"] = [{"name": _WRAP_FIELD.format(j), "type": self._copy(m, self.copy_reader)}]
                out.append(wrapper)
                j += 1
            return out
        out = self._copy(node, self.copy_reader)
        if isinstance(node, dict) and "fields" in node and isinstance(node["fields"], list):
            for f, g in zip(node["fields"], out["fields"]):
                # a union's default is its first branch's value: in the view, that branch's record
                if isinstance(f, dict) and "default" in f and _is_general_union(f.get("type")) and f["type"][0] != "null":
                    g["default"] = {_WRAP_FIELD.format(0): f["default"]}
        return out


def _read_views(writer: Any, reader: Any | None) -> tuple[Any, Any]:
    """``(writer view, reader view)`` to decode with (see above); the schemas themselves when
    they hold no union of more than one non-null branch."""
    if not _has_general_union(writer) and (reader is None or not _has_general_union(reader)):
        return writer, reader
    return _Views(writer, reader).build()


def _has_general_union(node: Any) -> bool:
    if isinstance(node, list):
        return _is_general_union(node) or any(_has_general_union(m) for m in node)
    if isinstance(node, dict):
        return any(_has_general_union(node.get(k)) for k in ("type", "items", "values")) or any(
            isinstance(f, dict) and _has_general_union(f.get("type")) for f in node.get("fields") or [])
    return False


# --- Connect value -> Avro datum

_FLOAT32_MAX = 3.4028234663852886e38
_INF = float("inf")


def _float32(v):
    if -_FLOAT32_MAX <= v <= _FLOAT32_MAX or v != v or v == _INF or v == -_INF:
        return v
    raise DataException(f"{v!r} is out of range for float32 (an Avro float would hold infinity)")


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
            ctx = _FromConnect(AvroData())
            ctx.convert(schema)
        if name == AVRO_TYPE_UNION:
            return _union_encoder(schema, ctx)
        names = [ctx.avro_name(f.name) for f in schema.fields]
        encs = [_encoder(f.schema, ctx) for f in schema.fields]
        plain = all(e is None for e in encs)
        pairs = list(zip(names, encs))

        def struct(value, schema=schema):
            if not isinstance(value, Struct):
                raise DataException(f"{type(value).__name__} is not a Struct")
            if value.schema is not schema and value.schema != schema:
                raise DataException(f"Struct schema {value.schema!r} does not match {schema!r}")
            values = value.values()
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


class AvroData:
    """Confluent's Connect <-> Avro mapping (see the module docstring), with caches.

    ``connect_meta_data`` (``connect.meta.data``, default true) writes and reads the
    ``connect.*`` annotations; ``enhanced_schema_support``
    (``enhanced.avro.schema.support``, default false) writes strings carrying Avro enum
    parameters back as Avro enums and names union branches by full name;
    ``scrub_invalid_names`` (``scrub.invalid.names``, default false) replaces characters
    Avro does not allow in names with ``_`` (else such a name raises :class:`DataException`);
    ``cache_size`` (``schemas.cache.size``) bounds each cache. Thread-safe.
    """

    def __init__(self, *, connect_meta_data: bool = True, enhanced_schema_support: bool = False,
                 scrub_invalid_names: bool = False, cache_size: int = 1000):
        self.connect_meta_data = connect_meta_data
        self.enhanced_schema_support = enhanced_schema_support
        self.scrub_invalid_names = scrub_invalid_names
        self.cache_size = cache_size
        self._writers = _LRU(cache_size)
        self._readers = _LRU(cache_size)
        self._schemas = _LRU(cache_size)
        self._last: tuple[Schema, AvroWriter] | None = None

    # schemas
    def from_connect_schema(self, schema: Schema | None) -> Any:
        """The Avro schema (JSON as Python) of a Connect schema; ``None`` gives ``ANYTHING_SCHEMA``."""
        if schema is None:
            return ANYTHING_SCHEMA
        return _emit(_FromConnect(self).convert(schema), None, set())

    def to_connect_schema(self, avro_schema: Any, version: int | None = None) -> Schema | None:
        """The Connect schema of an Avro schema (JSON text or as Python); ``None`` for
        :data:`ANYTHING_SCHEMA`. ``version``: the Connect version when the schema has no
        ``connect.version`` (the registry's version of it)."""
        if isinstance(avro_schema, (str, bytes)) and not (isinstance(avro_schema, str) and avro_schema in _PRIMITIVES):
            try:
                avro_schema = json.loads(avro_schema)
            except ValueError as e:
                raise DataException(f"Avro schema is not valid JSON: {e}") from None
        return self._to_connect(avro_schema, version)

    def _to_connect(self, avro_schema: Any, version: int | None) -> Schema | None:
        if _is_anything(avro_schema):
            return None
        return _ToConnect(self).convert(avro_schema, None, version=version)

    # values
    def writer(self, schema: Schema | None) -> AvroWriter:
        """The (cached) :class:`AvroWriter` of a Connect schema."""
        last = self._last
        if last is not None and last[0] is schema:
            return last[1]
        key = schema if schema is not None else _ANYTHING_KEY
        w = self._writers.get(key)
        if w is None:
            if schema is None:
                w = AvroWriter(None, ANYTHING_SCHEMA)
            else:
                ctx = _FromConnect(self)
                w = AvroWriter(schema, _emit(ctx.convert(schema), None, set()), ctx)
            w = self._writers.put(key, w)
        self._last = (schema, w)
        return w

    def reader(self, writer_schema: str, reader_schema: str | None = None, *, version: int | None = None,
               key: Any = None) -> AvroReader:
        """The (cached) :class:`AvroReader` for data written with ``writer_schema`` (JSON text),
        read as ``reader_schema`` (JSON text) if given. ``key`` caches it under something
        cheaper than the schema text (a registry id)."""
        cache_key = key if key is not None else (writer_schema, reader_schema, version)
        r = self._readers.get(cache_key)
        if r is not None:
            return r
        writer = self._avro(writer_schema, "writer")
        reader = self._avro(reader_schema, "reader") if reader_schema is not None else None
        connect = self._to_connect(reader if reader is not None else writer, version)
        if reader is not None:
            problems = compatibility_problems(reader, writer)
            if problems:
                raise DataException("data of the writer schema cannot be read with the reader schema: "
                                    + "; ".join(problems))
        writer_view, reader_view = _read_views(writer, reader)
        writer_parsed = _parse(writer_view)
        reader_parsed = _parse(reader_view) if reader_view is not None else None
        return self._readers.put(cache_key, AvroReader(connect, writer_parsed, reader_parsed))

    def _avro(self, text: str, which: str) -> Any:
        hit = self._schemas.get(text)
        if hit is None:
            try:
                hit = self._schemas.put(text, json.loads(text))
            except ValueError as e:
                raise DataException(f"the {which} schema is not valid JSON: {e}") from None
        return hit

    def from_connect_data(self, schema: Schema | None, value: Any) -> Any:
        """A Connect value as the Avro datum of ``from_connect_schema(schema)`` (logical values
        as their primitives, maps of non-string keys as key/value records, a union's value as
        fastavro's ``(branch name, datum)``)."""
        if value is None:
            return None
        return self.writer(schema).datum(value)

    def to_connect_data(self, avro_schema: Any, datum: Any) -> Any:
        """The Connect value of an Avro datum (as fastavro reads it, logical values as their
        primitives) of ``avro_schema``. (A general union's branch is then told by the value's
        type: bytes read through :meth:`reader` keep the branch written.)"""
        schema = self.to_connect_schema(avro_schema)
        return AvroReader(schema, None, None).convert(datum)


_ANYTHING_KEY = ("anything",)


def _is_anything(avro_schema: Any) -> bool:
    if not isinstance(avro_schema, dict) or avro_schema.get("type") != "record":
        return False
    name = avro_schema.get("name", "")
    full = name if "." in name else f"{avro_schema.get('namespace', '')}.{name}"
    return full == AVRO_TYPE_ANYTHING


def _named_types(schema: Any) -> dict[str, tuple[dict, str | None]]:
    """Every named type defined in an Avro schema: full name -> (definition, its namespace)."""
    out: dict[str, tuple[dict, str | None]] = {}

    def walk(node, space):
        if isinstance(node, list):
            for n in node:
                walk(n, space)
        elif isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, (dict, list)):
                walk(kind, space)
                return
            if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
                name = node["name"]
                ns = node["namespace"] if "namespace" in node else space
                full = name if "." in name else (f"{ns}.{name}" if ns else name)
                space = _split(full)[0]
                out.setdefault(full, (node, space))
            for f in node.get("fields", []) if kind in ("record", "error") else []:
                walk(f.get("type"), space)
            if kind == "array":
                walk(node.get("items"), space)
            if kind == "map":
                walk(node.get("values"), space)

    walk(schema, None)
    return out


_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}


def compatibility_problems(reader: Any, writer: Any) -> list[str]:
    """Why data written with the Avro schema ``writer`` cannot be read with ``reader`` (Avro's
    schema resolution rules); an empty list when it can. Both are JSON text or as Python.

    This is the check behind a registry's compatibility levels: BACKWARD asks whether the
    new schema (reader) reads data of the latest (writer), FORWARD the other way round."""
    reader = json.loads(reader) if isinstance(reader, str) and reader not in _PRIMITIVES else reader
    writer = json.loads(writer) if isinstance(writer, str) and writer not in _PRIMITIVES else writer
    r_names, w_names = _named_types(reader), _named_types(writer)
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()

    def resolve(node, space, names):
        while True:
            if isinstance(node, str) and node not in _PRIMITIVES:
                full = node if "." in node or not space else f"{space}.{node}"
                if full not in names:
                    full = node
                if full not in names:
                    raise DataException(f"Avro schema refers to unknown type {node!r}")
                node, space = names[full]
            elif isinstance(node, dict) and isinstance(node.get("type"), (dict, list)):
                node = node["type"]
            elif isinstance(node, dict) and node.get("type") not in _PRIMITIVES | _COMPLEX and isinstance(node.get("type"), str):
                node = node["type"]
            else:
                return node, space

    def kind(node):
        k = node if isinstance(node, str) else node.get("type")
        return "record" if k == "error" else k

    def full_name(node, space):
        name = node.get("name", "")
        ns = node["namespace"] if "namespace" in node else space
        return name if "." in name else (f"{ns}.{name}" if ns else name)

    def names_match(r, rs, w, ws) -> bool:
        wf, rf = full_name(w, ws), full_name(r, rs)
        aliases = r.get("aliases") or []
        return _split(wf)[1] == _split(rf)[1] or wf in aliases or _split(wf)[1] in aliases

    def check(r, rs, w, ws, path) -> list[str]:
        r, rs = resolve(r, rs, r_names)
        w, ws = resolve(w, ws, w_names)
        if isinstance(w, list):
            out = []
            for i, branch in enumerate(w):
                out += check(r, rs, branch, ws, f"{path}/union[{i}]")
            return out
        if isinstance(r, list):
            wk = kind(w)
            candidates = [b for b in r if kind(resolve(b, rs, r_names)[0]) == wk] or r
            for b in candidates:
                if not check(b, rs, w, ws, path):
                    return []
            return [f"{path}: the reader's union {schema_json(r)[:120]} has no branch for the writer's "
                    f"{wk if wk in _PRIMITIVES else schema_json(w)[:80]}"]
        rk, wk = kind(r), kind(w)
        if rk != wk:
            if (wk, rk) in _PROMOTIONS:
                return []
            return [f"{path}: the writer's {wk} cannot be read as {rk}"]
        if rk in _PRIMITIVES:
            return []
        if rk == "array":
            return check(r.get("items"), rs, w.get("items"), ws, f"{path}/items")
        if rk == "map":
            return check(r.get("values"), rs, w.get("values"), ws, f"{path}/values")
        if not names_match(r, rs, w, ws):
            return [f"{path}: the writer's {rk} {full_name(w, ws)!r} has another name than the reader's "
                    f"{full_name(r, rs)!r} (and is not one of its aliases)"]
        if rk == "fixed":
            if r.get("size") != w.get("size"):
                return [f"{path}: fixed {full_name(r, rs)!r} has size {w.get('size')} in the writer, "
                        f"{r.get('size')} in the reader"]
            return []
        if rk == "enum":
            missing = [s for s in w.get("symbols", []) if s not in r.get("symbols", [])]
            if missing and r.get("default") is None:
                return [f"{path}: the reader's enum {full_name(r, rs)!r} lacks the writer's symbols {missing} "
                        "and has no default"]
            return []
        pair = (full_name(r, rs), full_name(w, ws))
        if pair in seen:
            return []
        seen.add(pair)
        r_space, w_space = _split(pair[0])[0], _split(pair[1])[0]
        w_fields = {f["name"]: f for f in w.get("fields", [])}
        out = []
        for f in r.get("fields", []):
            wf = w_fields.get(f["name"])
            if wf is None:
                wf = next((w_fields[a] for a in f.get("aliases") or [] if a in w_fields), None)
            if wf is None:
                if "default" not in f:
                    out.append(f"{path}/fields/{f['name']}: the reader's field {f['name']!r} is missing from the "
                               "writer's schema and has no default")
                continue
            out += check(f["type"], r_space, wf["type"], w_space, f"{path}/fields/{f['name']}")
        return out

    try:
        problems = check(reader, None, writer, None, "")
    except DataException as e:
        problems = [str(e)]
    return [p if not p.startswith(": ") else p[2:] for p in problems]
