"""Connect schemas and values -> Avro schemas and defaults, as Confluent's ``AvroData.fromConnectSchema`` (the
mapping table is in :mod:`.data`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable

from ...connect.data import Date, Decimal, Schema, Time, Timestamp, Type
from ...connect.errors import DataException
from .names import (
    _DEFAULT_NAME,
    _NAME_RULE,
    _PRIMITIVES,
    _TYPE_NAMES,
    AVRO_ENUM_DEFAULT_PREFIX_PROP,
    AVRO_ENUM_DOC_PREFIX_PROP,
    AVRO_FIELD_DEFAULT_FLAG_PROP,
    AVRO_FIELD_DOC_PREFIX_PROP,
    AVRO_RECORD_DOC_PROP,
    AVRO_TYPE_ENUM,
    AVRO_TYPE_UNION,
    CONNECT_AVRO_DECIMAL_PRECISION_PROP,
    CONNECT_AVRO_FIXED_NAME_PROP,
    CONNECT_AVRO_FIXED_SIZE_PROP,
    CONNECT_DEFAULT_VALUE_PROP,
    CONNECT_DOC_PROP,
    CONNECT_INTERNAL_TYPE_NAME,
    CONNECT_NAME_PROP,
    CONNECT_PARAMETERS_PROP,
    CONNECT_TYPE_PROP,
    CONNECT_VERSION_PROP,
    DECIMAL_PRECISION_DEFAULT,
    DEFAULT_SCHEMA_FULL_NAME,
    KEY_FIELD,
    MAP_ENTRY_TYPE_NAME,
    NAMESPACE,
    VALUE_FIELD,
    _branch_name,
    _check_full_name,
    _decimal_bytes,
    _def_key,
    _int_param,
    _Named,
    _scrub_full_name,
    _scrub_name,
    _split,
    _valid_name,
)

if TYPE_CHECKING:  # data imports this module
    from .data import AvroData


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
