"""Connect schemas in the JSON envelope, as Kafka's ``JsonConverter.asJsonSchema`` /
``asConnectSchema``, and the per-schema tables the encoder and decoder share.

Contract: ``JsonSchemaMixin.as_json_schema(schema)`` returns the schema's JSON text exactly as
Kafka writes it in the envelope (members in Jackson ``ObjectNode`` insertion order: ``type``,
then ``items`` | ``keys``,``values`` | ``fields``, then ``optional``, ``name``, ``version``,
``doc``, ``parameters``, ``default``; a struct field's schema gets ``field`` last);
``as_connect_schema(node)`` is the inverse from the parsed JSON (``None`` for JSON null) and
raises ``DataException`` with Kafka's messages for a malformed schema. Both cache in the
converter's LRU caches (``schemas.cache.size``). The mixin is only used by
:class:`~.json_converter.JsonConverter`, which supplies the caches, ``_to_json`` (a default's
text) and ``_to_connect`` (a default's value).
"""

from __future__ import annotations

from typing import Any

from ..connect.data import Field, Schema, Type
from ..connect.errors import DataException
from .json_text import _quote

_TYPE_TO_JSON = {
    Type.BOOLEAN: "boolean", Type.INT8: "int8", Type.INT16: "int16", Type.INT32: "int32",
    Type.INT64: "int64", Type.FLOAT32: "float", Type.FLOAT64: "double", Type.BYTES: "bytes",
    Type.STRING: "string", Type.ARRAY: "array", Type.MAP: "map", Type.STRUCT: "struct",
}
_JSON_TO_TYPE = {v: k for k, v in _TYPE_TO_JSON.items()}
_INT_RANGES = {
    Type.INT8: (-(2**7), 2**7 - 1), Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1), Type.INT64: (-(2**63), 2**63 - 1),
}
_INT32_RANGE = _INT_RANGES[Type.INT32]
_INT_BOUNDS = {id(t): bounds for t, bounds in _INT_RANGES.items()}  # by id: Enum hashing is a Python call
_STRING, _INT8, _INT16, _INT32, _INT64 = Type.STRING, Type.INT8, Type.INT16, Type.INT32, Type.INT64


class JsonSchemaMixin:
    """Schema <-> JSON schema for :class:`~.json_converter.JsonConverter` (see the module docstring)."""

    def as_json_schema(self, schema: Schema) -> str:
        """The schema as Kafka writes it in the envelope (``JsonConverter.asJsonSchema``)."""
        last = self._last_schema_json
        if last is not None and last[0] is schema:
            # the cache's most recent entry is this schema's: the lookup would only return its text
            return last[1]
        text = self._schema_json(schema)[1]
        if self.cache_size > 0:
            self._last_schema_json = (schema, text)
        return text

    def _schema_json(self, schema: Schema) -> tuple[list[str], str]:
        """The schema's JSON members and the object they make, from the LRU cache (by schema
        equality, as Kafka's) or computed and cached."""
        self._last_schema_json = None  # (whatever happens here, the cache's order may change)
        try:
            cached = self._cached(self._schema_cache, schema)
            if cached is not None:
                return cached
            t = schema.type
            members = ['"type":"' + _TYPE_TO_JSON[t] + '"']
            if t is Type.ARRAY:
                members.append('"items":' + self.as_json_schema(schema.value_schema))
            elif t is Type.MAP:
                members.append('"keys":' + self.as_json_schema(schema.key_schema))
                members.append('"values":' + self.as_json_schema(schema.value_schema))
            elif t is Type.STRUCT:
                fields = ("{" + ",".join(self._schema_json(f.schema)[0] + ['"field":' + _quote(f.name)]) + "}"
                          for f in schema.fields)
                members.append('"fields":[' + ",".join(fields) + "]")
            members.append('"optional":' + ("true" if schema.optional else "false"))
            if schema.name is not None:
                members.append('"name":' + _quote(schema.name))
            if schema.version is not None:
                members.append('"version":' + str(int(schema.version)))
            if schema.doc is not None:
                members.append('"doc":' + _quote(schema.doc))
            if schema.parameters:
                members.append('"parameters":{' + ",".join(
                    _quote(k) + ":" + _quote(v) for k, v in schema.parameters.items()) + "}")
            if schema.default is not None:
                members.append('"default":' + self._to_json(schema, schema.default, "default"))
            entry = (members, "{" + ",".join(members) + "}")
            self._cache(self._schema_cache, schema, entry)
            return entry
        finally:
            self._last_schema_json = None

    def as_connect_schema(self, node: Any) -> Schema | None:
        """A Schema from its parsed JSON form (Kafka's ``asConnectSchema``); ``None`` for JSON null."""
        if node is None:
            return None
        type_name = node.get("type") if isinstance(node, dict) else None
        if not isinstance(type_name, str):
            raise DataException("Schema must contain 'type' field")
        t = _JSON_TO_TYPE.get(type_name)
        if t is None:
            raise DataException(f"Unknown schema type: {type_name}")
        args: dict[str, Any] = {}
        if t is Type.ARRAY:
            if node.get("items") is None:
                raise DataException("Array schema did not specify the element type")
            args["value_schema"] = self.as_connect_schema(node["items"])
        elif t is Type.MAP:
            if node.get("keys") is None:
                raise DataException("Map schema did not specify the key type")
            if node.get("values") is None:
                raise DataException("Map schema did not specify the value type")
            args["key_schema"] = self.as_connect_schema(node["keys"])
            args["value_schema"] = self.as_connect_schema(node["values"])
        elif t is Type.STRUCT:
            fields = node.get("fields")
            if not isinstance(fields, list):
                raise DataException('Struct schema\'s "fields" argument is not an array.')
            built: list[Field] = []
            for f in fields:
                name = f.get("field") if isinstance(f, dict) else None
                if not isinstance(name, str):
                    raise DataException("Struct schema's field name not specified properly")
                if any(b.name == name for b in built):
                    raise DataException(f"Struct schema has a duplicate field {name!r}")
                built.append(Field(name, len(built), self.as_connect_schema(f)))
            args["fields"] = built
        args["optional"] = node.get("optional") is True
        if isinstance(node.get("name"), str):
            args["name"] = node["name"]
        version = node.get("version")
        if isinstance(version, int) and not isinstance(version, bool):
            args["version"] = version
        if isinstance(node.get("doc"), str):
            args["doc"] = node["doc"]
        params = node.get("parameters")
        if isinstance(params, dict):
            if not all(isinstance(v, str) for v in params.values()):
                raise DataException("Schema parameters must have string values.")
            args["parameters"] = params
        schema = Schema(t, **args)
        if "default" in node:
            default = self._to_connect(schema, node["default"], "default")
            if default is not None:
                schema = schema.copy(default=default)
        return schema


_STR_FIELD, _INT_FIELD, _OTHER_FIELD = "string", "integer", "other"


def _field_plan(schema: Schema) -> list[tuple[str, str, Schema, str, str, int, int]]:
    """Per field of a struct schema whose names are str: its name, its JSON member start ``"name":``, its
    schema, its error-path suffix ``.name``, whether it is a plain (unnamed) string or integer
    schema, and the integer's bounds."""
    plan = []
    for f in schema._fields:
        fs = f.schema
        kind, (lo, hi) = _OTHER_FIELD, (0, 0)
        if fs.name is None and fs.type is Type.STRING:
            kind = _STR_FIELD
        elif fs.name is None and fs.type in _INT_RANGES:
            kind, (lo, hi) = _INT_FIELD, _INT_RANGES[fs.type]
        plan.append((f.name, _quote(f.name) + ":", fs, "." + f.name, kind, lo, hi))
    return plan
