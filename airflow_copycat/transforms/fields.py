"""Transforms that add, drop, rename and copy the fields of a key or value (Kafka Connect's
InsertField, ReplaceField and ValueToKey).

Each works on a Struct with its schema and on a schemaless dict. Updated schemas
are built once per input schema and cached. The other field transforms are in
:mod:`.mask` (MaskField) and :mod:`.extract_hoist` (ExtractField, HoistField).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigProblem, ConfigType, non_empty
from ..connect.data import Schema, SchemaBuilder, Timestamp
from ..connect.errors import ConfigException, DataException
from ._keyvalue import (
    KAFKA_PACKAGE,
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    config_error,
    copy_schema_basics,
    define_replace_null_with_default,
    field_value,
    key_and_value,
    parse_config,
    require_sink_record,
    struct_values,
    trusted_struct,
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


# the other field transforms, also importable from here: ``module:Class`` names in connector configs
# (``airflow_copycat.transforms.fields:MaskField$Value``) resolve as before
from .extract_hoist import ExtractField, HoistField  # noqa: E402
from .mask import MaskField  # noqa: E402

__all__ = ["ExtractField", "HoistField", "InsertField", "MaskField", "ReplaceField", "ValueToKey"]
