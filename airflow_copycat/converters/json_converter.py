"""JSON converter, byte-compatible with Kafka Connect's ``org.apache.kafka.connect.json.JsonConverter``.

Contract (as Kafka Connect's ``Converter``):

* ``configure(configs, is_key)`` is called once with the converter's own keys
  (``value.converter.`` prefix stripped): ``schemas.enable`` (default true),
  ``decimal.format`` (``BASE64`` default, or ``NUMERIC``; any case),
  ``replace.null.with.default`` (default true) and ``schemas.cache.size``
  (default 1000). Invalid values raise one ``ConfigException`` listing them all.
* ``from_connect_data(topic, schema, value)`` returns UTF-8 JSON bytes. With
  ``schemas.enable`` it writes the envelope ``{"schema":…,"payload":…}`` exactly
  as Kafka does; without, only the payload. A ``None`` value is a tombstone and
  returns ``None``. A value that does not fit its schema raises
  ``DataException`` naming where (``value.after.id``).
* ``to_connect_data(topic, data)`` is the inverse and returns
  ``SchemaAndValue``. ``None`` or empty bytes give ``SchemaAndValue(None, None)``.
  With ``schemas.enable`` the data must be the envelope; without, the schema is
  ``None`` and the value is plain Python (object → ``dict``, array → ``list``,
  integer → ``int``, other number → ``float``). Bad JSON raises ``DataException``
  naming the topic.

What "the same bytes" means, taken from Kafka's ``JsonConverter.asJsonSchema`` /
``convertToJson`` and Jackson's ``ObjectMapper`` defaults:

* schema keys in Jackson ``ObjectNode`` insertion order: ``type``, then
  ``items`` | ``keys``,``values`` | ``fields``, then ``optional``, ``name``,
  ``version``, ``doc``, ``parameters``, ``default``; a struct field's schema gets
  ``field`` appended last. Type names are Kafka's: ``float`` and ``double``.
* compact output, no spaces; strings escaped as Jackson 2.x does (``\\n`` style
  for ``\\b\\t\\n\\f\\r``, upper-case ``\\u00XX`` for other control characters,
  characters beyond U+FFFF as surrogate-pair escapes ``\\uD83D\\uDE00``, the
  rest raw UTF-8).
* ``bytes`` as standard padded base64; ``Decimal`` as base64 of the minimal
  big-endian two's-complement unscaled value, or with ``decimal.format=NUMERIC``
  as a JSON number written like ``BigDecimal.toString()`` (``1.56``,
  ``1.56E+4``); ``Date`` as int days, ``Time`` as int ms of the day,
  ``Timestamp`` as long ms since the epoch.
* ``float64`` / ``float32`` as ``Double.toString`` / ``Float.toString`` write
  them on JDK 19+ (Kafka's own image runs JDK 21): ``1.0``, ``12.34``,
  ``1.0E10``, ``1.0E-4``, ``4.9E-324``. JDK 17's older algorithm prints the same
  for decimal-looking values but a longer, non-shortest digit string for some
  full-precision ones (``1.0E23`` becomes ``9.999999999999999E22``).
  NaN and infinities as the quoted strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"`` (Jackson's ``QUOTE_NON_NUMERIC_NUMBERS`` default).
* maps whose key schema is ``string`` (or, schemaless, whose keys are all
  ``str``) as JSON objects, other maps as arrays of ``[key, value]`` pairs, in
  the dict's iteration order.

Deliberate differences from Kafka:

* ``None`` with a non-null schema is a tombstone here (Kafka writes an envelope
  with a null or default payload, or the 4 bytes ``null`` without schemas).
* a payload whose JSON type does not match the schema (``"12"`` for ``int32``,
  ``300`` for ``int8``) raises ``DataException``; Kafka's Jackson accessors
  silently yield ``0``/``false``/``null`` or wrap the integer.
* ``"NaN"``/``"Infinity"``/``"-Infinity"`` read back as the float they stand for
  (Kafka reads its own output back as ``0.0``).
* a ``Struct`` with no schema given is written with its own schema (Kafka
  raises "Mismatching schema."); a ``decimal.Decimal`` whose exponent differs
  from the schema's scale is rescaled if that loses no digit (Kafka raises).
* empty bytes are a tombstone even with ``schemas.enable`` (Kafka raises).
* text after the first JSON value is an error (Jackson's ``readTree`` ignores it).

Why over 500 lines: Kafka's JsonConverter byte for byte -- the envelope's schema text in
Jackson's order, Java's float and double text, Jackson's string escaping, decimals in both
formats, the logical types, and decoding with every check Kafka makes -- each rule backed by
differential tests. It is an implementation, not API: issue 15 moves it out of ``connect/`` into a
``json`` package of its own (as Kafka keeps connect/json apart), split into the encoder, the
decoder and the Java number and string text; until that move it stays one module.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import decimal as _decimal
import json
import re
import struct as _struct
import threading
from collections import OrderedDict
from fractions import Fraction
from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType, in_range, one_of
from ..connect.converters import Converter, SchemaAndValue
from ..connect.data import Date, Decimal, Field, Schema, Struct, Time, Timestamp, Type
from ..connect.errors import DataException

__all__ = ["JsonConverter", "CONFIG_DEF"]

SCHEMAS_ENABLE = "schemas.enable"
SCHEMAS_CACHE_SIZE = "schemas.cache.size"
DECIMAL_FORMAT = "decimal.format"
REPLACE_NULL_WITH_DEFAULT = "replace.null.with.default"

CONFIG_DEF = (
    ConfigDef()
    .define(SCHEMAS_ENABLE, ConfigType.BOOLEAN, True, importance="high",
            doc="Include schemas within each of the serialized values and keys.")
    .define(SCHEMAS_CACHE_SIZE, ConfigType.INT, 1000, in_range(0), importance="high",
            doc="The maximum number of schemas that can be cached in this converter instance.")
    .define(DECIMAL_FORMAT, ConfigType.STRING, "BASE64", one_of("BASE64", "NUMERIC"), importance="low",
            doc="Serialize decimals as 'BASE64' (default) or 'NUMERIC'; case insensitive.")
    .define(REPLACE_NULL_WITH_DEFAULT, ConfigType.BOOLEAN, True, importance="low",
            doc="Replace null fields that have a default value with the default (true) or keep null (false).")
)

ENVELOPE_ERROR = (
    'JsonConverter with schemas.enable requires "schema" and "payload" fields and may not contain '
    "additional fields. If you are trying to deserialize plain JSON data, set schemas.enable=false "
    "in your converter configuration."
)

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
_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class JsonConverter(Converter):
    """Kafka Connect's JsonConverter, byte for byte. See the module docstring for the contract."""

    def __init__(self):
        self.schemas_enable = True
        self.decimal_numeric = False
        self.replace_null_with_default = True
        self.cache_size = 1000
        self._root = "value"
        # LRU caches of schemas.cache.size entries each, as Kafka's: Schema -> JSON members,
        # and parsed JSON schema (by its repr) -> Schema
        self._schema_cache: OrderedDict[Schema, list[str]] = OrderedDict()
        self._connect_schema_cache: OrderedDict[str, Schema] = OrderedDict()
        self._lock = threading.Lock()
        # envelopes read lately, most recent first: (the bytes up to the payload,
        # '{"schema":<schema>,"payload":', where the payload starts in the text, the key of the
        # schema in _connect_schema_cache). A message starting with such bytes is parsed from there.
        self._envelopes: tuple[tuple[bytes, int, str], ...] = ()
        # (schema, its JSON) when the schema's entry is the most recent one of _schema_cache
        self._last_schema_json: tuple[Schema, str] | None = None

    @staticmethod
    def config() -> ConfigDef:
        return CONFIG_DEF

    def configure(self, configs: Mapping[str, Any], is_key: bool) -> None:
        values = CONFIG_DEF.parse(configs, context="JsonConverter")
        self.schemas_enable = values[SCHEMAS_ENABLE]
        self.decimal_numeric = values[DECIMAL_FORMAT].upper() == "NUMERIC"
        self.replace_null_with_default = values[REPLACE_NULL_WITH_DEFAULT]
        self.cache_size = values[SCHEMAS_CACHE_SIZE]
        self._root = "key" if is_key else "value"
        with self._lock:
            self._schema_cache.clear()
            self._connect_schema_cache.clear()
            self._envelopes = ()
            self._last_schema_json = None

    def _cached(self, cache: OrderedDict, key):
        with self._lock:
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
            return hit

    def _cache(self, cache: OrderedDict, key, value) -> None:
        if self.cache_size > 0:
            with self._lock:
                cache[key] = value
                if len(cache) > self.cache_size:
                    cache.popitem(last=False)

    # ------------------------------------------------------------------ Connect -> bytes

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any, headers=None) -> bytes | None:
        """As Kafka's: ``None`` (a tombstone) only when both schema and value are ``None``; a
        ``None`` value with a schema is written as its default or ``null`` (an error if required)."""
        if value is None and schema is None:
            return None
        try:
            payload = self._to_json(schema, value, self._root)
            if self.schemas_enable:
                schema_json = "null" if schema is None else self.as_json_schema(schema)
                text = '{"schema":' + schema_json + ',"payload":' + payload + "}"
            else:
                text = payload
            return text.encode("utf-8")  # cannot fail: _quote escapes every surrogate
        except DataException as e:
            raise DataException(f"topic {topic}: {e}") from None

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

    def _to_json(self, schema: Schema | None, value: Any, path: str) -> str:
        """One value as JSON text (Kafka's ``convertToJson``)."""
        if value is None:
            if schema is None:
                return "null"
            if schema.default is not None and self.replace_null_with_default:
                return self._to_json(schema, schema.default, path)
            if schema.optional:
                return "null"
            raise DataException(f"{path}: null for a required {schema.type.value} schema that has no default")

        if schema is not None:
            if schema.name is not None:
                logical = _LOGICAL_TO_JSON.get(schema.name)
                if logical is not None:
                    return logical(self, schema, value, path)
            t = schema.type
        else:
            t = _infer_type(value, path)
            if t is Type.STRUCT:
                schema = value.schema  # Kafka raises here; the Struct knows its schema

        # each type's checks as before; the commonest types are tested first, by identity
        if t is _STRING:
            if not isinstance(value, str):
                raise _wrong_type(path, t, value)
            return _quote(value)
        if t is _INT32 or t is _INT64 or t is _INT16 or t is _INT8:
            if not isinstance(value, int) or isinstance(value, bool):
                raise _wrong_type(path, t, value)
            lo, hi = _INT_BOUNDS[id(t)]
            if not lo <= value <= hi:
                raise DataException(f"{path}: {value} is out of range for {t.value}")
            return str(value)
        if t is Type.FLOAT64:
            return _java_double_json(_as_float(value, t, path))
        if t is Type.FLOAT32:
            return _java_float_json(_as_float32(_as_float(value, t, path), path))
        if t is Type.BOOLEAN:
            if not isinstance(value, bool):
                raise _wrong_type(path, t, value)
            return "true" if value else "false"
        if t is Type.BYTES:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise _wrong_type(path, t, value)
            return '"' + base64.b64encode(value).decode("ascii") + '"'
        if t is Type.ARRAY:
            if not isinstance(value, (list, tuple)):
                raise _wrong_type(path, t, value)
            items = None if schema is None else schema.value_schema
            return "[" + ",".join(self._to_json(items, v, f"{path}[{i}]") for i, v in enumerate(value)) + "]"
        if t is Type.MAP:
            if not isinstance(value, Mapping):
                raise _wrong_type(path, t, value)
            return self._map_to_json(schema, value, path)
        # STRUCT
        if not isinstance(value, Struct):
            raise _wrong_type(path, t, value)
        if value.schema is not schema and value.schema != schema:
            raise DataException(f"{path}: the Struct's schema {value.schema!r} does not match {schema!r}")
        if schema._positional:
            # value.get_without_default(f.name) is the value at f's position (equal schemas have
            # equal fields); a str or int of a plain string or integer field is written here,
            # as _to_json would write it
            to_json, quote = self._to_json, _quote
            return "{" + ",".join([
                member + (quote(v) if kind is _STR_FIELD and type(v) is str
                          else str(v) if kind is _INT_FIELD and type(v) is int and lo <= v <= hi
                          else to_json(field_schema, v, path + suffix))
                for v, (_, member, field_schema, suffix, kind, lo, hi)
                in zip(value._values, schema._memoized("json.fields", _field_plan))
            ]) + "}"
        return "{" + ",".join(
            _quote(f.name) + ":" + self._to_json(f.schema, value.get_without_default(f.name), f"{path}.{f.name}")
            for f in schema.fields) + "}"

    def _map_to_json(self, schema: Schema | None, value: Mapping, path: str) -> str:
        if schema is None:
            ks = vs = None
            object_mode = all(isinstance(k, str) for k in value)
        else:
            ks, vs = schema.key_schema, schema.value_schema
            object_mode = ks.type is Type.STRING
        parts = []
        for k, v in value.items():
            key = self._to_json(ks, k, f"{path} key {k!r}")
            val = self._to_json(vs, v, f"{path}[{k!r}]")
            if object_mode:
                parts.append(('"null"' if key == "null" else key) + ":" + val)  # Jackson's asText() of a null key
            else:
                parts.append("[" + key + "," + val + "]")
        return ("{" + ",".join(parts) + "}") if object_mode else ("[" + ",".join(parts) + "]")

    # ------------------------------------------------------------------ bytes -> Connect

    def to_connect_data(self, topic: str, data: bytes | None, headers=None) -> SchemaAndValue:
        if data is None or len(data) == 0:
            return SchemaAndValue(None, None)
        learned = split = None
        try:
            raw = data if type(data) is bytes else bytes(data)
            if self.schemas_enable:
                # fast paths for envelopes written as Kafka writes them; None when they do not apply
                if self._envelopes:
                    learned = self._learned_envelope(raw)
                if learned is None:
                    split = _split_envelope(raw)
            if learned is None and split is None:
                doc = _loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise DataException(f"topic {topic}: data is not valid JSON: {e}") from None
        if learned is not None:
            schema, payload = learned
        elif split is not None:
            raw_schema, payload = split[0], split[1]
        elif self.schemas_enable:
            if not (isinstance(doc, dict) and len(doc) == 2 and "schema" in doc and "payload" in doc):
                raise DataException(f"topic {topic}: {ENVELOPE_ERROR}")
            raw_schema, payload = doc["schema"], doc["payload"]
        else:
            raw_schema, payload = None, doc
        try:
            if learned is None:
                schema = None
                if raw_schema is not None:
                    key = repr(raw_schema)
                    schema = self._cached(self._connect_schema_cache, key)
                    if schema is None:
                        schema = self.as_connect_schema(raw_schema)
                        self._cache(self._connect_schema_cache, key, schema)
                    if split is not None and self.cache_size > 0:
                        self._learn_envelope(raw[:split[2]], split[3], key)
            return SchemaAndValue(schema, self._to_connect(schema, payload, self._root))
        except DataException as e:
            raise DataException(f"topic {topic}: {e}") from None
        except RecursionError:
            raise DataException(f"topic {topic}: data is nested too deeply") from None

    def _learned_envelope(self, raw: bytes) -> tuple[Schema, Any] | None:
        """``(schema, parsed payload)`` of ``raw`` when it is an envelope that starts with the
        bytes of one read lately: only the payload is parsed, the schema is the one cached
        for those bytes. ``None`` when that does not apply (not such an envelope, not valid
        JSON, the schema no longer cached): the caller then reads ``raw`` as before."""
        envelopes = self._envelopes
        for entry in envelopes:
            if raw.startswith(entry[0]):
                break
        else:
            return None
        try:
            text = raw.decode("utf-8")
            payload, end = _raw_decode_deep(text, entry[1])
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return None
        if not (end == len(text) - 1 and text[end] == "}") and _ENVELOPE_END.fullmatch(text, end) is None:
            return None
        # looked up only now, as before: a message that is not JSON leaves the LRU order alone
        schema = self._cached(self._connect_schema_cache, entry[2])
        if schema is None:
            return None
        if entry is not envelopes[0]:
            self._envelopes = (entry,) + tuple(e for e in envelopes if e is not entry)
        return schema, payload

    def _learn_envelope(self, prefix: bytes, payload_start: int, key: str) -> None:
        envelopes = self._envelopes
        if not any(e[0] == prefix for e in envelopes):
            self._envelopes = ((prefix, payload_start, key),) + envelopes[:_LEARNED_ENVELOPES - 1]

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

    def _to_connect(self, schema: Schema | None, node: Any, path: str) -> Any:
        """One parsed JSON value as a Connect value (Kafka's ``convertToConnect``)."""
        if schema is None:
            return _schemaless(node)
        t = schema.type
        if node is None:
            if schema.default is not None and self.replace_null_with_default:
                return schema.default
            if schema.optional:
                return None
            raise DataException(f"{path}: invalid null value for required {t.value} field")

        if schema.name is not None:
            logical = _LOGICAL_TO_CONNECT.get(schema.name)
            if logical is not None:
                return logical(schema, node, path)

        # each type's checks as before; the commonest types are tested first, by identity
        if t is _STRING:
            if not isinstance(node, str):
                raise _wrong_json(path, t, node)
            return node
        if t is _INT32 or t is _INT64 or t is _INT16 or t is _INT8:
            n = node if type(node) is int else _json_int(node)
            if n is None:
                raise _wrong_json(path, t, node)
            lo, hi = _INT_BOUNDS[id(t)]
            if not lo <= n <= hi:
                raise DataException(f"{path}: {n} is out of range for {t.value}")
            return n
        if t is Type.FLOAT64 or t is Type.FLOAT32:
            if isinstance(node, str) and node in _NON_FINITE:
                return _NON_FINITE[node]
            if isinstance(node, bool) or not isinstance(node, (int, _decimal.Decimal)):
                raise _wrong_json(path, t, node)
            if t is Type.FLOAT32:
                return _to_f32(node)
            try:
                return float(node)
            except OverflowError:
                raise DataException(f"{path}: {node} is out of range for float64") from None
        if t is Type.BOOLEAN:
            if not isinstance(node, bool):
                raise _wrong_json(path, t, node)
            return node
        if t is Type.BYTES:
            if not isinstance(node, str):
                raise _wrong_json(path, t, node)
            return _b64decode(node, path)
        if t is Type.ARRAY:
            if not isinstance(node, list):
                raise _wrong_json(path, t, node)
            return [self._to_connect(schema.value_schema, v, f"{path}[{i}]") for i, v in enumerate(node)]
        if t is Type.MAP:
            return self._map_to_connect(schema, node, path)
        # STRUCT
        if not isinstance(node, dict):
            raise DataException(f"{path}: Structs should be encoded as JSON objects, but found {_json_type(node)}")
        if schema._memoized("json.unchecked", _fits_unchecked):
            # every value converted here is one Struct.put accepts: skip its checks; a str or int
            # of a plain string or integer field is taken as _to_connect takes it (a loop, not a
            # comprehension, so that nesting takes as many frames as before)
            values: list[Any] = []
            append, get = values.append, node.get
            for name, _, field_schema, suffix, kind, lo, hi in schema._memoized("json.fields", _field_plan):
                v = get(name)
                if (kind is _STR_FIELD and type(v) is str) or (kind is _INT_FIELD and type(v) is int and lo <= v <= hi):
                    append(v)
                else:
                    append(self._to_connect(field_schema, v, path + suffix))
            return Struct._trusted(schema, values)
        result = Struct(schema)
        for f in schema.fields:
            result.put(f.name, self._to_connect(f.schema, node.get(f.name), f"{path}.{f.name}"))
        return result

    def _map_to_connect(self, schema: Schema, node: Any, path: str) -> dict:
        ks, vs = schema.key_schema, schema.value_schema
        if ks.type is Type.STRING:
            if not isinstance(node, dict):
                raise DataException(
                    f"{path}: Maps with string fields should be encoded as JSON objects, but found {_json_type(node)}")
            return {k: self._to_connect(vs, v, f"{path}[{k!r}]") for k, v in node.items()}
        if not isinstance(node, list):
            raise DataException(
                f"{path}: Maps with non-string fields should be encoded as JSON array of tuples, "
                f"but found {_json_type(node)}")
        result = {}
        for i, entry in enumerate(node):
            if not isinstance(entry, list) or len(entry) != 2:
                raise DataException(f"{path}[{i}]: a map entry must be a [key, value] array, found {entry!r:.60}")
            key = self._to_connect(ks, entry[0], f"{path}[{i}] key")
            value = self._to_connect(vs, entry[1], f"{path}[{key!r}]")
            try:
                result[key] = value
            except TypeError:
                raise DataException(f"{path}[{i}]: a {ks.type.value} key cannot be a Python dict key") from None
        return result


# ---------------------------------------------------------------------- logical types


def _decimal_to_json(conv: JsonConverter, schema: Schema, value: Any, path: str) -> str:
    if not isinstance(value, _decimal.Decimal):
        raise DataException(f"{path}: Invalid type for Decimal, expected decimal.Decimal but was {type(value).__name__}")
    try:
        if conv.decimal_numeric:
            # BigDecimal.toString() and Python's to-sci-string follow the same rules
            return str(_decimal.Decimal(f"{Decimal.unscaled(schema, value)}E{-Decimal.scale(schema)}"))
        return '"' + base64.b64encode(Decimal.from_logical(schema, value)).decode("ascii") + '"'
    except DataException as e:
        raise DataException(f"{path}: {e}") from None


def _date_to_json(conv, schema, value, path) -> str:
    if not isinstance(value, _dt.date) or isinstance(value, _dt.datetime):
        raise DataException(f"{path}: Invalid type for Date, expected datetime.date but was {type(value).__name__}")
    return str(Date.from_logical(value))


def _time_to_json(conv, schema, value, path) -> str:
    if not isinstance(value, _dt.time):
        raise DataException(f"{path}: Invalid type for Time, expected datetime.time but was {type(value).__name__}")
    return str(Time.from_logical(value))


def _timestamp_to_json(conv, schema, value, path) -> str:
    if not isinstance(value, _dt.datetime):
        raise DataException(
            f"{path}: Invalid type for Timestamp, expected datetime.datetime but was {type(value).__name__}")
    return str(Timestamp.from_logical(value))


_LOGICAL_TO_JSON = {
    Decimal.LOGICAL_NAME: _decimal_to_json,
    Date.LOGICAL_NAME: _date_to_json,
    Time.LOGICAL_NAME: _time_to_json,
    Timestamp.LOGICAL_NAME: _timestamp_to_json,
}


def _decimal_to_connect(schema: Schema, node: Any, path: str) -> _decimal.Decimal:
    if isinstance(node, (int, _decimal.Decimal)) and not isinstance(node, bool):
        return _decimal.Decimal(node)  # as written, like Jackson's decimalValue()
    if isinstance(node, str):
        raw = _b64decode(node, path)
        if not raw:
            raise DataException(f"{path}: Invalid bytes for Decimal field: no bytes")
        return Decimal.to_logical(schema, raw)
    raise DataException(
        f"{path}: Invalid type for Decimal, underlying representation should be numeric or bytes "
        f"but was {_json_type(node)}")


def _int32_node(node: Any, name: str, path: str) -> int:
    if isinstance(node, bool) or not isinstance(node, int) or not _INT32_RANGE[0] <= node <= _INT32_RANGE[1]:
        raise DataException(
            f"{path}: Invalid type for {name}, underlying representation should be integer but was {_json_type(node)}")
    return node


def _date_to_connect(schema, node, path) -> _dt.date:
    try:
        return Date.to_logical(_int32_node(node, "Date", path))
    except OverflowError:
        raise DataException(f"{path}: {node} days is outside the dates Python can hold") from None


def _time_to_connect(schema, node, path) -> _dt.time:
    try:
        return Time.to_logical(_int32_node(node, "Time", path))
    except DataException as e:
        raise DataException(f"{path}: {e}") from None


def _timestamp_to_connect(schema, node, path) -> _dt.datetime:
    if isinstance(node, bool) or not isinstance(node, int):
        raise DataException(
            f"{path}: Invalid type for Timestamp, underlying representation should be integral "
            f"but was {_json_type(node)}")
    try:
        return Timestamp.to_logical(node)
    except OverflowError:
        raise DataException(f"{path}: {node} ms is outside the datetimes Python can hold") from None


_LOGICAL_TO_CONNECT = {
    Decimal.LOGICAL_NAME: _decimal_to_connect,
    Date.LOGICAL_NAME: _date_to_connect,
    Time.LOGICAL_NAME: _time_to_connect,
    Timestamp.LOGICAL_NAME: _timestamp_to_connect,
}


# ---------------------------------------------------------------------- helpers


def _infer_type(value: Any, path: str) -> Type:
    """The Connect type of a value written without a schema (Kafka's ``ConnectSchema.schemaType``)."""
    if isinstance(value, bool):
        return Type.BOOLEAN
    if isinstance(value, int):
        if not _INT_RANGES[Type.INT64][0] <= value <= _INT_RANGES[Type.INT64][1]:
            raise DataException(f"{path}: {value} does not fit in an int64")
        return Type.INT64
    for py, t in ((float, Type.FLOAT64), (str, Type.STRING), ((bytes, bytearray, memoryview), Type.BYTES),
                  ((list, tuple), Type.ARRAY), (Mapping, Type.MAP), (Struct, Type.STRUCT)):
        if isinstance(value, py):
            return t
    raise DataException(
        f"{path}: {type(value).__name__} has no Connect type without a schema"
        + ("; give the value a logical-type schema" if isinstance(value, (_decimal.Decimal, _dt.date, _dt.time)) else ""))


_IMMUTABLE_DEFAULTS = frozenset({bool, int, float, str, bytes, _decimal.Decimal, _dt.date, _dt.datetime, _dt.time})
_UNCHECKED_MAX_DEPTH = 32


def _fits_unchecked(schema: Schema) -> bool:
    """Whether every value ``_to_connect`` makes for a field of the struct ``schema`` is one
    ``Struct.put`` accepts, so that its check can be skipped. True unless the schema has
    (anywhere inside, up to a depth where its nesting stays far from the recursion limit):
    a struct whose field names are not plain positions, a default that is a container (a
    Struct default, say, does not match its own schema once that has the default), or a map
    whose string keys (taken as they are) have a logical-type key schema that put refuses."""
    stack = [(schema, 0)]
    while stack:
        s, depth = stack.pop()
        if depth > _UNCHECKED_MAX_DEPTH:
            return False
        if s.default is not None and type(s.default) not in _IMMUTABLE_DEFAULTS:
            return False
        t = s.type
        if t is Type.STRUCT:
            if not s._positional:
                return False
            stack.extend((f.schema, depth + 1) for f in s._fields)
        elif t is Type.ARRAY:
            stack.append((s.value_schema, depth + 1))
        elif t is Type.MAP:
            if s.key_schema.type is Type.STRING and s.key_schema.name in _LOGICAL_TO_CONNECT:
                return False
            stack.append((s.key_schema, depth + 1))
            stack.append((s.value_schema, depth + 1))
    return True


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


def _wrong_type(path: str, t: Type, value: Any) -> DataException:
    return DataException(f"{path}: {type(value).__name__} {value!r:.50} is not valid for a {t.value} schema")


def _json_type(node: Any) -> str:
    if node is None:
        return "NULL"
    if isinstance(node, bool):
        return "BOOLEAN"
    if isinstance(node, (int, _decimal.Decimal)):
        return "NUMBER"
    return {str: "STRING", list: "ARRAY", dict: "OBJECT"}.get(type(node), type(node).__name__)


def _wrong_json(path: str, t: Type, node: Any) -> DataException:
    return DataException(f"{path}: JSON {_json_type(node)} {json.dumps(node, default=str)[:50]} is not a valid {t.value}")


def _json_int(node: Any) -> int | None:
    if isinstance(node, bool):
        return None
    if isinstance(node, int):
        return node
    if isinstance(node, _decimal.Decimal) and node.is_finite() and node == node.to_integral_value():
        return int(node)
    return None


def _schemaless(node: Any) -> Any:
    if isinstance(node, _decimal.Decimal):
        return float(node)
    if isinstance(node, list):
        return [_schemaless(v) for v in node]
    if isinstance(node, dict):
        return {k: _schemaless(v) for k, v in node.items()}
    return node


def _b64decode(text: str, path: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DataException(f"{path}: invalid base64 bytes: {e}") from None


def _as_float(value: Any, t: Type, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong_type(path, t, value)
    try:
        return float(value)
    except OverflowError:
        raise DataException(f"{path}: {value} is out of range for {t.value}") from None


# --- JSON text

# Jackson 2.x escapes control characters and, unless COMBINE_UNICODE_SURROGATES_IN_UTF8 (off by
# default) is set, every UTF-16 surrogate: an emoji is written as "\uD83D\uDE00", not as 4 bytes.
_ESCAPE = re.compile(r'[\x00-\x1f"\\\ud800-\udfff\U00010000-\U0010ffff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escape(m: re.Match) -> str:
    c = m.group()
    short = _SHORT_ESCAPES.get(c)
    if short is not None:
        return short
    n = ord(c)
    if n > 0xFFFF:
        n -= 0x10000
        return "\\u%04X\\u%04X" % (0xD800 + (n >> 10), 0xDC00 + (n & 0x3FF))
    return "\\u%04X" % n


def _jackson_quote(s: str) -> str:
    """A JSON string as Jackson's UTF8JsonGenerator writes it (upper-case hex escapes)."""
    return '"' + (_ESCAPE.sub(_escape, s) if _ESCAPE.search(s) else s) + '"'


# Python's C encoder writes what Jackson does (\" \\ \b \t \n \f \r, everything else raw) for
# every string without the characters it escapes differently: other control characters (it
# writes lower-case \u00xx) and surrogates and characters beyond U+FFFF (it writes them raw).
_c_quote = json.encoder.encode_basestring
_NOT_LIKE_JACKSON = re.compile(r"[\x00-\x07\x0b\x0e-\x1f\ud800-\udfff\U00010000-\U0010ffff]")


def _quote(s: str) -> str:
    """A JSON string as Jackson's UTF8JsonGenerator writes it (upper-case hex escapes)."""
    if s.isascii():
        # only a control character other than \b\t\n\f\r gives a \u escape (a backslash
        # followed by u in the text gives \\u: rare, and written by the slow path alike)
        quoted = _c_quote(s)
        return quoted if "\\u" not in quoted else _jackson_quote(s)
    if _NOT_LIKE_JACKSON.search(s) is None:
        return _c_quote(s)
    return _jackson_quote(s)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


# Jackson's ALLOW_LEADING_ZEROS_FOR_NUMBERS, which Kafka's JsonDeserializer enables: a string
# literal is matched (and kept) as a whole, so only zeros that start a number are dropped.
_LEADING_ZEROS = re.compile(r'"(?:[^"\\]|\\.)*"|(?<![0-9.eE+\-])(-?)0+(?=[0-9])')


_DECODER = json.JSONDecoder(parse_float=_decimal.Decimal, parse_constant=_reject_constant)
_ENVELOPE_START = b'{"schema":'
_PAYLOAD_KEY = ',"payload":'
_ENVELOPE_END = re.compile(r"[ \t\n\r]*\}[ \t\n\r]*")  # after the payload: the rest of a valid envelope
_LEARNED_ENVELOPES = 8

# Nesting depth: json.loads, called from _loads, parses each JSON value under a few Python frames
# (and a payload one level deeper still, inside its envelope). The fast paths below parse under
# at least as many (tests/connect/test_json_converter_fast_paths.py checks it), so that they
# never succeed where json.loads would have reached the recursion limit; when they reach it
# themselves, the caller takes the slow path, which decides as before.
_EXTRA_FRAMES = 4


def _raw_decode_deep(text: str, idx: int, frames: int = _EXTRA_FRAMES):
    if frames:
        return _raw_decode_deep(text, idx, frames - 1)
    return _DECODER.raw_decode(text, idx)


def _decode_deep(text: str, frames: int = _EXTRA_FRAMES):
    if frames:
        return _decode_deep(text, frames - 1)
    return _DECODER.decode(text)


def _split_envelope(raw: bytes) -> tuple[Any, Any, int, int] | None:
    """``raw`` parsed as the envelope ``{"schema":<schema>,"payload":<payload>}`` written
    compactly (as Kafka writes it; whitespace only after the payload): ``(schema, payload,
    length of the bytes up to the payload, where the payload starts in the text)``, the same
    values ``json.loads`` gives for them; ``None`` for anything else, even valid JSON (then
    :func:`_loads` reads it)."""
    if not raw.startswith(_ENVELOPE_START):
        return None
    try:
        text = raw.decode("utf-8")
        schema, end = _raw_decode_deep(text, len(_ENVELOPE_START))
        if not text.startswith(_PAYLOAD_KEY, end):
            return None
        start = end + len(_PAYLOAD_KEY)
        payload, end = _raw_decode_deep(text, start)
    except (ValueError, RecursionError):
        return None
    if _ENVELOPE_END.fullmatch(text, end) is None:
        return None
    prefix_length = start if text.isascii() else len(text[:start].encode("utf-8"))
    return schema, payload, prefix_length, start


def _loads(data: bytes) -> Any:
    try:
        # json.loads(bytes) decodes UTF-8 with surrogatepass: when a strict decode succeeds it is the
        # same text; every other input (BOM, UTF-16/32, encoded surrogates, leading zeros) and
        # every error go to json.loads as before (called from here, at the same depth as before)
        return _decode_deep(data.decode("utf-8"))
    except (ValueError, RecursionError):
        pass
    try:
        return json.loads(data, parse_float=_decimal.Decimal, parse_constant=_reject_constant)
    except json.JSONDecodeError:
        text = data.decode(json.detect_encoding(data))
        fixed = _LEADING_ZEROS.sub(lambda m: m.group() if m.group(1) is None else m.group(1), text)
        if fixed == text:
            raise
        return json.loads(fixed, parse_float=_decimal.Decimal, parse_constant=_reject_constant)


# --- Java's Double.toString / Float.toString (JDK 19+ specification)

def _f32_bits(x: float) -> int:
    return _struct.unpack("<I", _struct.pack("<f", x))[0]


def _f32(bits: int) -> float:
    return _struct.unpack("<f", _struct.pack("<I", bits))[0]


_F32_MAX_BITS = 0x7F7FFFFF


def _as_float32(x: float, path: str) -> float:
    try:
        return _struct.unpack("<f", _struct.pack("<f", x))[0]
    except OverflowError:
        raise DataException(f"{path}: {x} is out of range for float32") from None


def _to_f32(node: int | _decimal.Decimal) -> float:
    """``Float.parseFloat`` of the JSON number ``node``: the float32 nearest to its exact value.

    Fast path: the nearest float64, then the nearest float32 to that. Rounding twice gives the
    float32 nearest to the exact value unless the float64 lies exactly halfway between two
    float32s (every such midpoint is a float64, and rounding to the nearest float64 cannot cross
    one): that case, and values beyond float32's range, take the exact path (:func:`_round_f32`)."""
    try:
        f64 = float(node)
        f32 = _f32(_f32_bits(f64))
    except OverflowError:
        return _round_f32(Fraction(node))
    if f32 == f64 or f64 != f64:
        return f32
    bits = _f32_bits(abs(f32))
    other = _f32(bits + 1 if abs(f64) > abs(f32) else bits - 1)  # the float32 on f64's other side
    if abs(f64) == (abs(f32) + other) / 2:
        return _round_f32(Fraction(node))
    return f32


def _round_f32(q: Fraction) -> float:
    """The float32 nearest to the exact number ``q`` (ties to even), as a Python float."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    try:
        guess = _f32_bits(float(q))
    except OverflowError:
        guess = _F32_MAX_BITS
    cands = [b for b in (guess - 1, guess, guess + 1) if 0 <= b <= _F32_MAX_BITS]
    best = min(cands, key=lambda b: (abs(Fraction(_f32(b)) - q), b & 1))
    if best == _F32_MAX_BITS and q >= Fraction(_f32(best)) + (Fraction(_f32(best)) - Fraction(_f32(best - 1))) / 2:
        return sign * float("inf")
    return sign * _f32(best)


def _digits(m: int, k: int) -> tuple[int, int]:
    while m and m % 10 == 0:
        m //= 10
        k += 1
    return m, k


def _closest(x: float, p: int, in_range) -> tuple[int, int] | None:
    """Among the p-digit decimals next to ``x``, the one nearest ``x`` that rounds back to it
    (ties: even last digit), as (m, k) meaning m * 10**k; None when none rounds back."""
    mant, exp = f"{x:.{p - 1}e}".split("e")
    n, k = int(mant.replace(".", "")), int(exp) - p + 1
    exact = Fraction(x)
    scale = Fraction(10) ** k
    best = None
    for m in (n - 1, n, n + 1):
        q = m * scale
        if q > 0 and in_range(q):
            key = (abs(q - exact), m & 1)
            if best is None or key < best[0]:
                best = (key, m)
    return None if best is None else _digits(best[1], k)


def _java_format(negative: bool, m: int, k: int) -> str:
    """m * 10**k in Java's Double.toString layout: plain for 1e-3 <= |x| < 1e7, else d.dddE±n."""
    digits = str(m)
    e = len(digits) - 1 + k
    if -3 <= e < 7:
        if e >= 0:
            text = digits[: e + 1].ljust(e + 1, "0") + "." + (digits[e + 1:] or "0")
        else:
            text = "0." + "0" * (-e - 1) + digits
    else:
        text = digits[0] + "." + (digits[1:] or "0") + "E" + str(e)
    return "-" + text if negative else text


def _non_finite_json(x: float) -> str | None:
    if x != x:
        return '"NaN"'
    if x in (float("inf"), float("-inf")):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    return None


def _java_double_json(x: float) -> str:
    special = _non_finite_json(x)
    if special is not None:
        return special
    if x == 0:
        return "-0.0" if str(x)[0] == "-" else "0.0"
    ax = abs(x)
    sign, digits, exp = _decimal.Decimal(repr(ax)).as_tuple()  # repr: shortest, nearest
    m, k = _digits(int("".join(map(str, digits))), exp)
    if m < 10 and Fraction(m) * Fraction(10) ** k != Fraction(ax):
        # one digit: Java picks the closest of the 1- and 2-digit decimals (4.9E-324, not 5e-324)
        m, k = _closest(ax, 2, lambda q: float(q) == ax) or (m, k)
    return _java_format(x < 0, m, k)


def _java_float_json(x: float) -> str:
    """``x`` already holds a float32 value."""
    special = _non_finite_json(x)
    if special is not None:
        return special
    if x == 0:
        return "-0.0" if str(x)[0] == "-" else "0.0"
    ax = abs(x)
    bits = _f32_bits(ax)
    if 1e-3 <= ax < 1e7 and bits & 0x7FFFFF:
        # Fast path. Not a power of two, so the values that round back to ``ax`` lie symmetrically
        # around it: the nearest p-digit decimal (what correctly rounded "%.*e" gives) rounds back
        # whenever any p-digit decimal does, and float32 rounding (ties to even) decides the edges
        # as Java does. In this range Java writes plain digits, where one digit is as short as two.
        # If p digits round back, p + 1 do (the p-digit decimal is one of them): binary search.
        lo, hi = 1, 9  # 9 digits always round back
        while lo < hi:
            mid = (lo + hi) // 2
            if _f32_bits(float("%.*e" % (mid - 1, ax))) == bits:
                hi = mid
            else:
                lo = mid + 1
        mant, exp = ("%.*e" % (lo - 1, ax)).split("e")
        return _java_format(x < 0, *_digits(int(mant.replace(".", "")), int(exp) - lo + 1))
    here = Fraction(ax)
    below = Fraction(_f32(bits - 1)) if bits > 0 else Fraction(0)
    above = Fraction(_f32(bits + 1)) if bits < _F32_MAX_BITS else 2 * here - below
    lo, hi, inclusive = (below + here) / 2, (here + above) / 2, bits % 2 == 0

    def rounds_back(q: Fraction) -> bool:
        return lo < q < hi or (inclusive and (q == lo or q == hi))

    for p in range(1, 10):
        found = _closest(ax, p, rounds_back)
        if found is not None:
            if p == 1:
                found = _closest(ax, 2, rounds_back) or found
            return _java_format(x < 0, *found)
    raise AssertionError(f"no decimal rounds back to float32 {x!r}")  # 9 digits always do
