"""SetSchemaMetadata: set the name and/or version of the key or value schema (Kafka Connect's)."""

from __future__ import annotations

from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType
from ..connect.data import Schema, Struct
from ..connect.errors import DataException
from ._keyvalue import (
    REPLACE_NULL_WITH_DEFAULT,
    KeyOrValue,
    SchemaCache,
    config_error,
    define_replace_null_with_default,
    key_and_value,
    parse_config,
    struct_values,
    trusted_struct,
)


@key_and_value("SetSchemaMetadata")
class SetSchemaMetadata(KeyOrValue):
    """Set ``schema.name`` and/or ``schema.version`` on the key or value schema (for
    instance the record name an Avro converter registers). A Struct is re-attached to
    the renamed schema. A record without a schema is a DataException, unless its key or
    value is null too (then it passes through)."""

    purpose = "SetSchemaMetadata"
    config_def = define_replace_null_with_default(
        ConfigDef()
        .define("schema.name", ConfigType.STRING, None, importance="high", doc="Schema name to set.")
        .define("schema.version", ConfigType.INT, None, importance="high", doc="Schema version to set.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._name, self._version = c["schema.name"], c["schema.version"]
        if self._name is None and self._version is None:
            raise config_error("schema.name", None, "neither schema.name nor schema.version is set: set one or both")
        self._with_default = c[REPLACE_NULL_WITH_DEFAULT]
        self._cache = SchemaCache()

    def apply(self, record):
        schema, value = self.operand(record)
        if schema is None:
            if value is None:
                return record
            raise DataException(f"SetSchemaMetadata needs a {self.side} schema, but the record's {self.side} is "
                                "schemaless; use a converter with schemas enabled")
        new_schema = self._cache.get(schema, self._renamed)
        if isinstance(value, Struct):
            value = trusted_struct(new_schema, struct_values(value, self._with_default))
        return self.updated(record, new_schema, value)

    def _renamed(self, schema: Schema) -> Schema:
        return schema.copy(name=self._name if self._name is not None else schema.name,
                           version=self._version if self._version is not None else schema.version)
