"""Transforms of the fields of a key or value: insert, filter and rename, mask, copy to the key,
extract one, wrap in one (Kafka Connect's InsertField, ReplaceField, MaskField, ValueToKey,
ExtractField, HoistField).

Each works on a Struct with its schema and on a schemaless dict. Updated schemas
are built once per input schema and cached.

Why over 500 lines: six of Kafka Connect's field transforms share one mechanism here -- the
field path walk, the schema rebuilt once per input schema and cached, the Struct/dict duality --
and each transform is about 80 lines on top of it. Splitting them apart would either copy that
mechanism or move it into a module of its own; that split (the mechanism beside ``transforms/``'s
base, one module per transform group) is part of issue 15's move of the transforms out of
``connect/``, and is not done piecemeal before it.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from typing import Any, Callable, Mapping

from ..connect.config import ConfigDef, ConfigProblem, ConfigType, non_empty, one_of
from ..connect.data import Date, Decimal, Schema, SchemaBuilder, Time, Timestamp, Type
from ..connect.errors import ConfigException, DataException
from ._keyvalue import (
    KAFKA_PACKAGE,
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    checked_struct,
    config_error,
    copy_schema_basics,
    define_replace_null_with_default,
    field_value,
    key_and_value,
    parse_config,
    require_sink_record,
    struct_values,
    trusted_struct,
    type_name,
)

_OPTIONALITY = "Suffix with ! to make the field required, or ? to keep it optional (the default)."


def _build(builder: SchemaBuilder, what: str) -> Schema:
    try:
        return builder.build()
    except DataException as e:
        raise DataException(f"{what}: {e}") from None


def _add_field(builder: SchemaBuilder, name: str, schema: Schema, what: str) -> None:
    try:
        builder.field(name, schema)
    except DataException:
        raise DataException(f"{what}: the result would have two fields named {name!r}; "
                            "rename one of them (ReplaceField renames) first") from None


# ----------------------------------------------------------------------------------- InsertField


class _Spec:
    """A field to insert: ``name`` (``name!`` required, ``name?`` or ``name`` optional)."""

    __slots__ = ("name", "optional")

    def __init__(self, spec: str):
        if spec.endswith("!"):
            self.name, self.optional = spec[:-1], False
        elif spec.endswith("?"):
            self.name, self.optional = spec[:-1], True
        else:
            self.name, self.optional = spec, True

    @classmethod
    def parse(cls, spec: str | None) -> "_Spec | None":
        return None if spec is None or spec == "" else cls(spec)


@key_and_value("InsertField")
class InsertField(KeyOrValue):
    """Insert fields holding the record's topic, Kafka partition, Kafka offset (sink records
    only), timestamp, or a static string.

    ``topic.field=src_topic!`` adds a required string field ``src_topic``;
    ``timestamp.field=ts`` an optional Timestamp field (schemaless: milliseconds);
    ``static.field=origin`` with ``static.value=dc1`` a string. A null key or value
    (a tombstone) passes through unchanged. A schema'd key or value must be a Struct,
    a schemaless one a dict.
    """

    purpose = "InsertField"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("topic.field", ConfigType.STRING, None, doc="Field name for the Kafka topic. " + _OPTIONALITY)
        .define("partition.field", ConfigType.STRING, None, doc="Field name for the Kafka partition. " + _OPTIONALITY)
        .define("offset.field", ConfigType.STRING, None,
                doc="Field name for the Kafka offset; sink connectors only. " + _OPTIONALITY)
        .define("timestamp.field", ConfigType.STRING, None, doc="Field name for the record timestamp. " + _OPTIONALITY)
        .define("static.field", ConfigType.STRING, None, doc="Field name for a static value. " + _OPTIONALITY)
        .define("static.value", ConfigType.STRING, None, doc="The static value, when static.field is set.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._topic = _Spec.parse(c["topic.field"])
        self._partition = _Spec.parse(c["partition.field"])
        self._offset = _Spec.parse(c["offset.field"])
        self._timestamp = _Spec.parse(c["timestamp.field"])
        self._static = _Spec.parse(c["static.field"])
        self._static_value = c["static.value"]
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        if not any((self._topic, self._partition, self._offset, self._timestamp, self._static)):
            raise config_error("topic.field", None, "no field to insert: set at least one of topic.field, "
                               "partition.field, offset.field, timestamp.field or static.field")
        if self._static is not None and self._static_value is None:
            raise config_error("static.value", None, f"is required when static.field is set "
                               f"({c['static.field']!r}): the value to put in that field")
        self._cache = SchemaCache()

    def _inserted(self, record, schemaless: bool) -> list[tuple[_Spec, Any]]:
        out = []
        if self._topic is not None:
            out.append((self._topic, record.topic))
        if self._partition is not None:
            out.append((self._partition, record.kafka_partition))
        if self._offset is not None:
            out.append((self._offset, require_sink_record(record, "InsertField offset.field").kafka_offset))
        if self._timestamp is not None:
            ts = record.timestamp
            out.append((self._timestamp, ts if schemaless or ts is None else Timestamp.to_logical(ts)))
        if self._static is not None:
            out.append((self._static, self._static_value))
        return out

    def apply(self, record):
        schema, value = self.operand(record)
        if value is None:
            return record
        if schema is None:
            updated = dict(self.require_map(value))
            for spec, v in self._inserted(record, True):
                if v is not None:
                    updated[spec.name] = v
            return self.updated(record, None, updated)
        struct = self.require_struct(value)
        new_schema = self._cache.get(struct.schema, self._make_schema)
        values = struct_values(struct, self._with_default)
        for spec, v in self._inserted(record, False):
            if v is None and not spec.optional:
                raise DataException(f"InsertField: field {spec.name!r} is required (it ends with '!') but the "
                                    f"record has no value for it; drop the '!' to insert null")
            values.append(v)
        return self.updated(record, new_schema, trusted_struct(new_schema, values))

    def _make_schema(self, schema: Schema) -> Schema:
        builder = copy_schema_basics(schema, SchemaBuilder.struct())
        if schema.optional:
            builder.optional()
        for f in schema.fields:
            builder.field(f.name, f.schema)
        what = f"InsertField on the {self.side} schema {schema.name or ''}".rstrip()
        for spec, optional_schema, required_schema in (
            (self._topic, Schema.OPTIONAL_STRING, Schema.STRING),
            (self._partition, Schema.OPTIONAL_INT32, Schema.INT32),
            (self._offset, Schema.OPTIONAL_INT64, Schema.INT64),
            (self._timestamp, Schema.OPTIONAL_TIMESTAMP, Schema.TIMESTAMP),
            (self._static, Schema.OPTIONAL_STRING, Schema.STRING),
        ):
            if spec is not None:
                _add_field(builder, spec.name, optional_schema if spec.optional else required_schema, what)
        return _build(builder, what)


# ---------------------------------------------------------------------------------- ReplaceField


def _parse_renames(mappings: list[str]) -> dict[str, str]:
    out = {}
    for mapping in mappings:
        parts = mapping.split(":")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"invalid rename mapping {mapping!r}: write old:new pairs, e.g. foo:bar,abc:xyz")
        out[parts[0]] = parts[1]
    return out


def _valid_renames(key, value):
    try:
        _parse_renames(value or [])
    except ValueError as e:
        return str(e)
    return None


_valid_renames.describe = "list of colon-delimited pairs, e.g. foo:bar,abc:xyz"


@key_and_value("ReplaceField")
class ReplaceField(KeyOrValue):
    """Keep (``include``), drop (``exclude``, which wins) and rename (``renames=old:new,...``)
    fields. ``whitelist`` / ``blacklist`` are the deprecated names of ``include`` / ``exclude``.
    A null key or value passes through."""

    purpose = "ReplaceField"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("exclude", ConfigType.LIST, [], doc="Fields to drop; takes precedence over include.")
        .define("include", ConfigType.LIST, [], doc="Fields to keep; if set, only these are kept.")
        .define("renames", ConfigType.LIST, [], _valid_renames, doc="Field renames, old:new pairs.")
        .define("blacklist", ConfigType.LIST, None, doc="Deprecated: use exclude.")
        .define("whitelist", ConfigType.LIST, None, doc="Deprecated: use include.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        problems = []
        for new, old in (("exclude", "blacklist"), ("include", "whitelist")):
            if c[old] is not None and c[new] and c[old] != c[new]:
                problems.append(ConfigProblem(old, ",".join(c[old]),
                                              f"is the deprecated name of {new}, which is also set differently; "
                                              f"keep only {new}"))
        if problems:
            raise ConfigException(problems)
        self._exclude = frozenset(c["exclude"] or c["blacklist"] or ())
        self._include = frozenset(c["include"] or c["whitelist"] or ())
        self._renames = _parse_renames(c["renames"])
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()

    def _keep(self, name: str) -> bool:
        return name not in self._exclude and (not self._include or name in self._include)

    def apply(self, record):
        schema, value = self.operand(record)
        if value is None:
            return record
        if schema is None:
            renames, keep = self._renames, self._keep
            updated = {renames.get(k, k): v for k, v in self.require_map(value).items() if keep(k)}
            return self.updated(record, None, updated)
        struct = self.require_struct(value)
        new_schema, positions = self._cache.get(struct.schema, self._plan)
        old = struct_values(struct, self._with_default)
        return self.updated(record, new_schema, trusted_struct(new_schema, [old[i] for i in positions]))

    def _plan(self, schema: Schema) -> tuple[Schema, list[int]]:
        builder = copy_schema_basics(schema, SchemaBuilder.struct())
        if schema.optional:
            builder.optional()
        positions = []
        what = f"ReplaceField on the {self.side} schema {schema.name or ''}".rstrip()
        for i, f in enumerate(schema.fields):
            if self._keep(f.name):
                _add_field(builder, self._renames.get(f.name, f.name), f.schema, what)
                positions.append(i)
        return _build(builder, what), positions


# ------------------------------------------------------------------------------------- MaskField

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

_MASK_BY_LOGICAL: dict[str, Any] = {
    Date.LOGICAL_NAME: _dt.date(1970, 1, 1),
    Time.LOGICAL_NAME: _dt.time(0),
    Timestamp.LOGICAL_NAME: _EPOCH,
    Decimal.LOGICAL_NAME: _decimal.Decimal(0),
}
_MASK_BY_TYPE: dict[Type, Any] = {
    Type.INT8: 0, Type.INT16: 0, Type.INT32: 0, Type.INT64: 0,
    Type.FLOAT32: 0.0, Type.FLOAT64: 0.0,
    Type.BOOLEAN: False, Type.STRING: "", Type.BYTES: b"",
}


def _empty_of(kind: type) -> Callable[[Any], Any]:
    return lambda v: kind()  # a fresh list or dict for every record: callers may mutate theirs


def _constant(masked: Any) -> Callable[[Any], Any]:
    return lambda v: masked


def _unmaskable(what: str, with_replacement: bool) -> Callable[[Any], Any]:
    def fail(v):
        raise DataException(f"cannot mask a {what} value" + (" with a custom replacement, which applies to "
                            "numeric and string fields only" if with_replacement else ""))
    return fail


def _replacement(kind: str, text: str) -> Callable[[Any], Any]:
    """A masker putting ``text`` converted to ``kind`` (int, float, decimal, string)."""
    try:
        if kind == "int":
            masked: Any = int(text.strip())
        elif kind == "float":
            masked = float(text)
        elif kind == "decimal":
            masked = _decimal.Decimal(text.strip())
            if not masked.is_finite():
                raise ValueError(text)
        else:
            masked = text
    except (ValueError, _decimal.InvalidOperation):
        def fail(v):
            raise DataException(f"replacement {text!r} is not a valid {kind}, the field's type; set a "
                                "replacement that converts to the type of every masked field") from None
        return fail
    return _constant(masked)


def _decimal_replacement(text: str, scale: int) -> Callable[[Any], Any]:
    """A masker putting ``text`` as a Decimal of ``scale`` fractional digits at most."""
    masker = _replacement("decimal", text)
    try:
        masked = masker(None)
    except DataException:
        return masker
    if masked.as_tuple().exponent < -scale:
        def fail(v):
            raise DataException(f"replacement {text!r} has more fractional digits than the field's Decimal "
                                f"scale {scale} allows; set a replacement with at most {scale}")
        return fail
    return masker


@key_and_value("MaskField")
class MaskField(KeyOrValue):
    """Replace the values of ``fields`` with their type's empty value -- 0, 0.0, false, "",
    empty bytes, empty list or map, Decimal 0, the epoch for Date/Time/Timestamp -- or with
    ``replacement`` converted to the field's type (numeric and string fields only).
    Null field values stay null; fields not present are left alone."""

    purpose = "MaskField"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("fields", ConfigType.LIST, validator=non_empty, importance="high", doc="Names of fields to mask.")
        .define("replacement", ConfigType.STRING, None,
                lambda k, v: "must not be empty (leave it unset to mask with empty values)" if v == "" else None,
                importance="low", doc="Custom replacement for every masked value (numeric or string fields only).")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._fields = frozenset(c["fields"])
        self._text = c["replacement"]
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()
        text = self._text
        if text is None:
            self._by_py_type: dict[type, Callable[[Any], Any]] = {
                bool: _constant(False), int: _constant(0), float: _constant(0.0), str: _constant(""),
                bytes: _constant(b""), bytearray: _constant(b""), _decimal.Decimal: _constant(_decimal.Decimal(0)),
                _dt.datetime: _constant(_EPOCH), _dt.date: _constant(_dt.date(1970, 1, 1)),
                _dt.time: _constant(_dt.time(0)), list: _empty_of(list), dict: _empty_of(dict),
            }
        else:
            self._by_py_type = {
                int: _replacement("int", text), float: _replacement("float", text), str: _replacement("string", text),
                _decimal.Decimal: _replacement("decimal", text),
            }

    def _masker_for(self, schema: Schema) -> Callable[[Any], Any]:
        what = schema.name if schema.name in _MASK_BY_LOGICAL else schema.type.value
        if self._text is not None:
            if schema.name == Decimal.LOGICAL_NAME:
                return _decimal_replacement(self._text, Decimal.scale(schema))
            if schema.name is None or schema.name not in _MASK_BY_LOGICAL:
                if schema.type in (Type.INT8, Type.INT16, Type.INT32, Type.INT64):
                    return _replacement("int", self._text)
                if schema.type in (Type.FLOAT32, Type.FLOAT64):
                    return _replacement("float", self._text)
                if schema.type is Type.STRING:
                    return _replacement("string", self._text)
            return _unmaskable(what, True)
        if schema.name in _MASK_BY_LOGICAL:
            return _constant(_MASK_BY_LOGICAL[schema.name])
        if schema.type in _MASK_BY_TYPE:
            return _constant(_MASK_BY_TYPE[schema.type])
        if schema.type is Type.ARRAY:
            return _empty_of(list)
        if schema.type is Type.MAP:
            return _empty_of(dict)
        return _unmaskable(what, False)

    def _plan(self, schema: Schema) -> tuple[list[tuple[int, Callable]], frozenset[int]]:
        plan = [(i, self._masker_for(f.schema)) for i, f in enumerate(schema.fields) if f.name in self._fields]
        return plan, frozenset(i for i, _ in plan)

    def _mask_plain(self, name: str, v: Any) -> Any:
        if v is None:
            return None
        masker = self._by_py_type.get(type(v))
        if masker is None and not isinstance(v, bool):  # a bool is an int, but never masked with a number
            for kind, m in self._by_py_type.items():
                if isinstance(v, kind):
                    masker = m
                    break
        if masker is None:
            masker = _unmaskable(type_name(v), self._text is not None)
        try:
            return masker(v)
        except DataException as e:
            raise DataException(f"MaskField, field {name!r}: {e}") from None

    def apply(self, record):
        schema, value = self.operand(record)
        if schema is None:
            if value is None:
                return record
            updated = dict(self.require_map(value))
            for name in self._fields:
                if name in updated:
                    updated[name] = self._mask_plain(name, updated[name])
            return self.updated(record, None, updated)
        if value is None:
            return record
        struct = self.require_struct(value)
        plan, checked = self._cache.get(struct.schema, self._plan)
        values = struct_values(struct, self._with_default)
        fields = struct.schema._fields
        for i, masker in plan:
            if values[i] is not None:
                try:
                    values[i] = masker(values[i])
                except DataException as e:
                    raise DataException(f"MaskField, field {fields[i].name!r}: {e}") from None
        return self.updated(record, struct.schema, checked_struct(struct.schema, values, checked))


# ------------------------------------------------------------------------------------ ValueToKey


class ValueToKey(KeyOrValue):
    """Replace the key with a new one made of ``fields`` of the value: a Struct of those
    fields (their schemas as in the value) when the value has a schema, a dict otherwise."""

    kafka_class = KAFKA_PACKAGE + "ValueToKey"
    purpose = "ValueToKey"
    is_key = False
    config_def = define_replace_null_with_default(
        ConfigDef().define("fields", ConfigType.LIST, validator=non_empty, importance="high",
                           doc="Field names of the value to make the key from.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._fields = list(dict.fromkeys(c["fields"]))
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()

    def apply(self, record):
        if record.value_schema is None:
            value = self.require_map(record.value)
            return record.new_record(key_schema=None, key={f: value.get(f) for f in self._fields})
        struct = self.require_struct(record.value)
        key_schema = self._cache.get(struct.schema, self._key_schema)
        key = trusted_struct(key_schema, [field_value(struct, f, self._with_default) for f in self._fields])
        return record.new_record(key_schema=key_schema, key=key)

    def _key_schema(self, schema: Schema) -> Schema:
        builder = SchemaBuilder.struct()
        for name in self._fields:
            f = schema.field(name)
            if f is None:
                raise DataException(f"ValueToKey: field {name!r} does not exist in the value schema "
                                    f"{schema.name or ''} (fields: {', '.join(x.name for x in schema.fields)})")
            builder.field(name, f.schema)
        return builder.build()


# ---------------------------------------------------------------------------------- ExtractField


def _parse_path_v2(path: str) -> list[str]:
    """Kafka Connect's KIP-821 dotted path: ``a.b.c``; backticks quote a name holding dots
    (```a.b`.c``), a backslash escapes a backtick inside them."""
    steps: list[str] = []
    i, n = 0, len(path)
    while 0 <= i < n:
        if path[i] != "`":
            dot = path.find(".", i)
            if dot >= 0:
                steps.append(path[i:dot])
                i = dot + 1
            else:
                steps.append(path[i:])
                i = n
            continue
        opened = i
        i += 1
        start, name = i, []
        while True:
            i = path.find("`", i)
            if i == -1:
                raise ValueError(f"incomplete backtick pair in path {path!r}: add a backslash before the "
                                 f"backtick at position {opened} to escape it")
            escaped = path[i - 1] == "\\"
            if i >= n - 1:
                if escaped:
                    raise ValueError(f"incomplete backtick pair in path {path!r}: add a backslash before the "
                                     f"backtick at position {opened} to escape it")
                name.append(path[start:i])
                steps.append("".join(name))
                i += 1
                break
            if path[i + 1] != ".":
                i += 1
                continue
            if escaped:
                name.append(path[start:i - 1] + "`")
                i += 1
                start = i
                continue
            name.append(path[start:i])
            steps.append("".join(name))
            i += 2
            break
    if path.endswith("."):
        steps.append("")
    return steps


def _field_path(version: str, path: str) -> list[str]:
    return _parse_path_v2(path) if version.upper() == "V2" else [path]


@key_and_value("ExtractField")
class ExtractField(KeyOrValue):
    """Replace the key or value with one of its fields (``field``); with
    ``field.syntax.version=V2``, a nested field by dotted path (``address.city``;
    backticks around a name holding dots). The schema becomes that field's schema.
    A null key or value, or a schemaless one without the field, gives null."""

    purpose = "ExtractField"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("field", ConfigType.STRING, validator=non_empty, doc="Field name (V2: dotted path) to extract.")
        .define("field.syntax.version", ConfigType.STRING, "V1", one_of("V1", "V2"),
                doc="V1: field names at the top level only; V2: dotted paths into nested fields.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._path_text = c["field"]
        try:
            self._path = _field_path(c["field.syntax.version"], c["field"])
        except ValueError as e:
            raise config_error("field", c["field"], str(e)) from None
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()

    def apply(self, record):
        schema, value = self.operand(record)
        if schema is None:
            if value is None:
                return self.updated(record, None, None)
            current: Any = self.require_map(value)
            for step in self._path[:-1]:
                current = current.get(step)
                if current is None:
                    return self.updated(record, None, None)
                if not isinstance(current, dict):
                    raise DataException(f"ExtractField {self._path_text!r}: {step!r} holds a {type_name(current)}, "
                                        "not a map, so it has no nested fields")
            return self.updated(record, None, current.get(self._path[-1]))
        field_schema = self._cache.get(schema, self._field_schema)
        if value is None:
            return self.updated(record, field_schema, None)
        current = self.require_struct(value)
        for step in self._path[:-1]:
            current = current.get(step)
            if current is None:
                return self.updated(record, field_schema, None)
        return self.updated(record, field_schema, field_value(current, self._path[-1], self._with_default))

    def _field_schema(self, schema: Schema) -> Schema:
        current = schema
        for i, step in enumerate(self._path):
            f = current.field(step) if current.type is Type.STRUCT else None
            if f is None:
                where = "the " + self.side + " schema" if i == 0 else repr(".".join(self._path[:i]))
                names = ", ".join(x.name for x in current.fields) if current.type is Type.STRUCT else "none"
                raise DataException(f"ExtractField: unknown field {self._path_text!r}: {where} has no field "
                                    f"{step!r} (fields: {names})")
            current = f.schema
        return current


# ------------------------------------------------------------------------------------ HoistField


@key_and_value("HoistField")
class HoistField(KeyOrValue):
    """Wrap the key or value in a single ``field``: a Struct with one field (of the old
    schema) when schema'd, a one-entry dict otherwise. ``42`` becomes ``{"id": 42}``."""

    purpose = "HoistField"
    config_def = ConfigDef().define("field", ConfigType.STRING, validator=non_empty,
                                    doc="Name of the single field of the resulting Struct or map.")

    def configure(self, configs: Mapping[str, Any]) -> None:
        self._field = parse_config(self, configs)["field"]
        self._cache = SchemaCache()

    def apply(self, record):
        schema, value = self.operand(record)
        if schema is None:
            return self.updated(record, None, {self._field: value})
        new_schema = self._cache.get(schema, lambda s: SchemaBuilder.struct().field(self._field, s).build())
        return self.updated(record, new_schema, checked_struct(new_schema, [value]))


__all__ = ["ExtractField", "HoistField", "InsertField", "MaskField", "ReplaceField", "ValueToKey"]
