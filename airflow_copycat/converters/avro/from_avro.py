"""Avro schemas and defaults -> Connect schemas, as Confluent's ``AvroData.toConnectSchema`` (the mapping table
is in :mod:`.data`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...connect.data import Date, Decimal, Field, Schema, Struct, Time, Timestamp, Type
from ...connect.errors import DataException
from .names import (
    _COMPLEX,
    _DEFAULT_NAME,
    _MAP_ENTRY_NAME,
    _NO,
    _PRIMITIVES,
    AVRO_ENUM_DEFAULT_PREFIX_PROP,
    AVRO_ENUM_DOC_PREFIX_PROP,
    AVRO_FIELD_DEFAULT_FLAG_PROP,
    AVRO_FIELD_DOC_PREFIX_PROP,
    AVRO_RECORD_DOC_PROP,
    AVRO_TYPE_ANYTHING,
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
    KEY_FIELD,
    MAP_ENTRY_TYPE_NAME,
    VALUE_FIELD,
    _split,
)

if TYPE_CHECKING:  # data imports this module
    from .data import AvroData


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
