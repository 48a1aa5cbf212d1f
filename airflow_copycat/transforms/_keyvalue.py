"""What key-or-value transforms share: the side they work on, their checks and their schema cache.

Kafka Connect writes most transforms once and derives ``$Key`` and ``$Value``
classes that differ only in which schema and value they read and replace.
:func:`key_and_value` does the same here: ``@key_and_value("InsertField")``
on a :class:`KeyOrValue` subclass adds ``InsertField.Key`` and
``InsertField.Value``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, ClassVar, Mapping

from ..connect.config import ConfigDef, ConfigProblem, ConfigType
from ..connect.data import Date, Decimal, Schema, SchemaBuilder, Struct, Time, Timestamp, validate_value
from ..connect.errors import ConfigException, DataException
from ..connect.records import ConnectRecord, SinkRecord
from ..connect.transforms import Transformation

KAFKA_PACKAGE = "org.apache.kafka.connect.transforms."

LOGICAL_NAMES = frozenset({Date.LOGICAL_NAME, Time.LOGICAL_NAME, Timestamp.LOGICAL_NAME, Decimal.LOGICAL_NAME})

REPLACE_NULL_WITH_DEFAULT = "replace.null.with.default"
_REPLACE_NULL_DOC = ("Whether a null field that has a default value is read as that default (true) "
                     "or as null (false).")


def define_replace_null_with_default(config_def: ConfigDef) -> ConfigDef:
    return config_def.define(REPLACE_NULL_WITH_DEFAULT, ConfigType.BOOLEAN, True, doc=_REPLACE_NULL_DOC)


def config_error(key: str, value: Any, message: str) -> ConfigException:
    """One problem with one key, as the exception ``configure`` raises."""
    return ConfigException([ConfigProblem(key, value, message)])


def parse_config(transform, configs: Mapping[str, Any]) -> dict[str, Any]:
    """``configs`` parsed against the transform's ``config_def``; raises listing every problem."""
    return transform.config_def.parse(configs, context=type(transform).__qualname__)


class SchemaCache:
    """A small LRU map from input schema to what a transform derived from it (an updated
    schema, a plan), as Kafka Connect's ``LRUCache<Schema, Schema>(16)``: records of one
    schema build it once. Lookups hit on the same schema object by identity first."""

    __slots__ = ("_entries", "_size")

    def __init__(self, size: int = 16):
        self._entries: OrderedDict = OrderedDict()
        self._size = size

    def get(self, schema: Schema, build: Callable[[Schema], Any]) -> Any:
        entries = self._entries
        try:
            found = entries[schema]
        except KeyError:
            found = entries[schema] = build(schema)
            if len(entries) > self._size:
                entries.popitem(last=False)
            return found
        entries.move_to_end(schema)
        return found

    def clear(self) -> None:
        self._entries.clear()


class KeyOrValue(Transformation):
    """A transform of the record's key (``.Key``) or value (``.Value``)."""

    is_key: ClassVar[bool] = False
    purpose: ClassVar[str] = "transforming"

    @property
    def side(self) -> str:
        return "key" if self.is_key else "value"

    def operand(self, record: ConnectRecord) -> tuple[Schema | None, Any]:
        if self.is_key:
            return record.key_schema, record.key
        return record.value_schema, record.value

    def updated(self, record: ConnectRecord, schema: Schema | None, value: Any, **changes) -> ConnectRecord:
        if self.is_key:
            return record.new_record(key_schema=schema, key=value, **changes)
        return record.new_record(value_schema=schema, value=value, **changes)

    def require_struct(self, value: Any) -> Struct:
        if not isinstance(value, Struct):
            raise DataException(
                f"{self.purpose} needs the record {self.side} to be a Struct when it has a schema, "
                f"got {type_name(value)}")
        return value

    def require_map(self, value: Any) -> dict:
        if not isinstance(value, dict):
            raise DataException(
                f"{self.purpose} needs the record {self.side} to be a map (dict) when it has no schema, "
                f"got {type_name(value)}; a schema'd {self.side} needs a converter with schemas enabled")
        return value

    def close(self) -> None:
        cache = getattr(self, "_cache", None)
        if isinstance(cache, SchemaCache):
            cache.clear()


def key_and_value(kafka_name: str):
    """Class decorator: add ``Key`` and ``Value`` subclasses to a :class:`KeyOrValue`
    transform, named ``<kafka_name>$Key`` / ``$Value`` in Kafka Connect."""

    def decorate(cls: type) -> type:
        for side in ("Key", "Value"):
            sub = type(cls)(side, (cls,), {
                "is_key": side == "Key",
                "kafka_class": f"{KAFKA_PACKAGE}{kafka_name}${side}",
                "__module__": cls.__module__,
                "__qualname__": f"{cls.__qualname__}.{side}",
                "__doc__": f"{cls.__name__} on the record's {side.lower()}: see :class:`{cls.__name__}`.",
            })
            setattr(cls, side, sub)
        return cls

    return decorate


def require_sink_record(record: ConnectRecord, purpose: str) -> SinkRecord:
    if not isinstance(record, SinkRecord):
        raise DataException(f"{purpose} needs a SinkRecord (a sink connector's record, which has a Kafka offset), "
                            f"got a {type(record).__name__}: use offset.field only in sink connectors")
    return record


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return type(value).__name__


def copy_schema_basics(schema: Schema, builder: SchemaBuilder) -> SchemaBuilder:
    """Copy name, version, doc and parameters of ``schema`` onto ``builder`` (Kafka Connect's
    ``SchemaUtil.copySchemaBasics``)."""
    if schema.name is not None:
        builder.name(schema.name)
    if schema.version is not None:
        builder.version(schema.version)
    if schema.doc is not None:
        builder.doc(schema.doc)
    if schema._parameters:
        builder.parameters(schema.parameters)
    return builder


def struct_values(struct: Struct, with_default: bool) -> list[Any]:
    """The field values of ``struct`` in field order; a null field reads as its default
    when ``with_default`` (Kafka Connect's ``replace.null.with.default``)."""
    if with_default:
        return struct.values()
    if struct.schema._positional:
        return list(struct._values)
    return [struct.get_without_default(f.name) for f in struct.schema._fields]


def field_value(struct: Struct, name: str, with_default: bool) -> Any:
    return struct.get(name) if with_default else struct.get_without_default(name)


def trusted_struct(schema: Schema, values: list[Any]) -> Struct:
    """A Struct of ``schema`` holding ``values`` that already fit their fields (copied from a
    Struct whose fields had the same schemas): no per-record validation."""
    return Struct._trusted(schema, values)


def checked_struct(schema: Schema, values: list[Any], checked: frozenset[int] | None = None) -> Struct:
    """A Struct of ``schema`` holding ``values``; the fields at positions ``checked`` (all
    when ``None``) are validated against their schemas, naming the field when one does not fit."""
    fields = schema._fields
    for i, f in enumerate(fields):
        if checked is None or i in checked:
            validate_value(f.schema, values[i], f"field {f.name!r}")
    return Struct._trusted(schema, values)
