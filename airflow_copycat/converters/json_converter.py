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

The converter is this module (its config, the envelope, the caches and the fast path for
envelopes read lately); the rest is by concept: :mod:`.json_schemas` (Connect schemas in the
envelope), :mod:`.json_encoding` (Connect values to JSON text), :mod:`.json_decoding` (parsed JSON
to Connect values), :mod:`.json_text` (Jackson's string escaping and reading JSON text) and
:mod:`.java_numbers` (Java's float and double text).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType, in_range, one_of
from ..connect.converters import Converter, SchemaAndValue
from ..connect.data import Schema
from ..connect.errors import DataException
from .json_decoding import JsonDecoderMixin
from .json_encoding import JsonEncoderMixin
from .json_schemas import JsonSchemaMixin
from .json_text import _ENVELOPE_END, _loads, _raw_decode_deep, _split_envelope

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

_LEARNED_ENVELOPES = 8


class JsonConverter(JsonSchemaMixin, JsonEncoderMixin, JsonDecoderMixin, Converter):
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
