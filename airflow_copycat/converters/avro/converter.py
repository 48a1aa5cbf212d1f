"""Avro converter: Connect data <-> Avro bytes, with a Confluent Schema Registry or without one.

Use it as ``value.converter=io.confluent.connect.avro.AvroConverter`` (or ``avro``,
``AvroConverter``); its keys come with the ``value.converter.`` prefix (``key.converter.``
for keys), stripped before :meth:`AvroConverter.configure`. Schemas map as Confluent's
``AvroData`` maps them (:mod:`.avro_data`).

With a registry (``schema.registry.url`` set)
---------------------------------------------
Records are in the Confluent wire format, readable by every Confluent
deserializer::

    byte 0      0x00                      magic byte
    bytes 1-4   schema id                 4-byte big-endian, the registry's id of the writer schema
    bytes 5-    the value                 Avro binary encoding with that schema

Writing looks the value's Avro schema up under its subject, registering it first
when ``auto.register.schemas`` (default true) -- the registry then checks it against
the subject's compatibility level (BACKWARD by default) and an incompatible schema
fails with :class:`~.errors.DataException` naming the subject. With
``use.latest.version=true`` records are written with the subject's latest schema
instead (its id; the value's fields matched by name, missing ones taking their
defaults) and read with it as the reader schema. Subjects follow
``key.subject.name.strategy`` / ``value.subject.name.strategy``:
``TopicNameStrategy`` (default, ``<topic>-key`` / ``<topic>-value``),
``RecordNameStrategy`` (the record's full name) or ``TopicRecordNameStrategy``
(``<topic>-<record full name>``); Confluent's class names work too. Reading fetches
the writer schema by id (once per id) and, as Confluent's converter does, takes the
Connect schema version from the schema's version under the subject.

Credentials: ``basic.auth.credentials.source=URL`` (default) takes them from
``http://user:password@host:8081`` (percent-encoded: a raw ``@`` or ``/`` in the user
info is refused, as it would make the URL name another host), ``USER_INFO`` from ``basic.auth.user.info``
(``user:password``; also ``schema.registry.basic.auth.user.info``). TLS:
``schema.registry.ssl.ca.location``, ``.certificate.location``, ``.key.location``,
``.key.password``. (Credentials in the URL are handed to the client as user info, so
the URLs its HTTP library logs carry none.) Retries of failed requests: ``max.retries`` (3), ``retries.wait.ms``
(1000), ``retries.max.wait.ms`` (20000). Secrets never appear in logs or exceptions (URLs are shown
without their user info). A registry that cannot be reached, or answers 5xx,
raises :class:`~.errors.RetriableException`; a refused login raises
:class:`~.errors.ConnectException`.

Without a registry (``schema.registry.url`` unset)
--------------------------------------------------
``embedded.schema.format`` chooses the layout; all three are read by the converter
whatever the key says (told apart by their first bytes), so a topic may hold a mix:

``framed`` (default; the schema in every record; this project's own layout)::

    bytes 0-1   0xC3 0x53                 magic ("Avro, schema embedded", version 1 of this framing;
                                          Confluent's is 0x00, Avro single-object encoding 0xC3 0x01)
    varint      n                         schema length in bytes: an Avro "long" (zig-zag varint)
    n bytes     writer schema             the Avro schema as compact JSON, UTF-8, with its
                                          properties (logicalType, connect.name, ...)
    rest        the value                 Avro binary encoding with that schema

  i.e. after the two magic bytes, an Avro ``string`` (the schema) followed by the
  Avro datum. Reading needs nothing but the bytes; another Avro library reads it by
  skipping 2 bytes, reading a long ``n``, parsing the next ``n`` bytes as the schema and
  decoding the rest with it.

``single-object``: Avro's own single-object encoding (the Avro specification's
"Single-object encoding"; Java's ``BinaryMessageEncoder``/``BinaryMessageDecoder``
and every Avro library that implements the specification read and write it)::

    bytes 0-1   0xC3 0x01                 marker, format version 1
    bytes 2-9   fingerprint               CRC-64-AVRO of the writer schema's Parsing Canonical Form,
                                          little-endian
    bytes 10-   the value                 Avro binary encoding with that schema

  Compact (10 bytes of header), but the bytes carry no schema: a reader must know the
  writer schema by its fingerprint (:mod:`.avro_single_object`). This converter looks a
  fingerprint up in, in order: the schemas it wrote itself; ``known.schemas`` (a JSON
  array of Avro schemas, or one schema); ``known.schemas.files`` (comma-separated
  ``.avsc`` files, or directories whose ``*.avsc`` files are read); ``reader.schema``;
  the schemas any converter of this process wrote. A fingerprint none of them knows
  raises :class:`~.errors.DataException` naming it (its bytes, and the signed long
  Java's ``SchemaNormalization.parsingFingerprint64`` prints). Give readers every
  writer schema still on the topic: the canonical form drops logical types and
  ``connect.*`` properties, so the schema a reader knows supplies them (two schemas
  differing only there share a fingerprint; the first known wins).

``container``: each record is a complete Avro Object Container File holding one
record (magic ``Obj\\x01``, metadata ``avro.schema`` and ``avro.codec=null``, a
16-byte sync marker derived from the schema, one block). About 50 bytes more per
record than ``framed``, but ``DataFileReader``/``fastavro.reader``/``avro-tools``
read it as it is, and every version of this converter reads it.

Which to write: ``framed`` stays the default, because every reader of this converter
(old and new) reads it and needs no configuration. ``container`` is standard and
self-describing, and readable by earlier versions of this converter too: the choice
when other tools read the topic and nobody configures schemas. ``single-object`` is
the standard compact form, for topics whose readers are given the schemas; earlier
versions of this converter do not read it, so upgrade the readers first (docs/avro.md,
"Avro without a registry").

Reading detects the layout from the first bytes, so one converter reads all four
(the Confluent layout only with a registry). ``reader.schema`` (an Avro schema,
JSON) resolves every record onto that schema (Avro schema resolution), in either
mode.

Schema evolution: adding an *optional* field (an optional Connect field is an Avro
union ``["null", T]`` with default ``null``) is compatible both ways -- data
written with the old schema reads with the new one (the field is ``None``) and
data written with the new schema reads with the old one (the field is
skipped). A registry at BACKWARD accepts it; adding a *required* field without a
default is rejected, and the converter says so naming the subject.

Other keys: ``connect.meta.data`` (default true: write/read ``connect.*``
annotations), ``enhanced.avro.schema.support`` (default false: write Avro enums
back as enums), ``scrub.invalid.names`` (default false: a record, namespace or field
name Avro does not allow fails the record; true: its invalid characters become ``_``,
as Confluent's), ``schemas.cache.size`` (default 1000; bounds every cache of schemas,
ids and headers), ``normalize.schemas`` (default false: ask the registry to normalize
on register/lookup).

A tombstone is ``None`` both ways: a ``None`` value gives ``None``; ``None`` or
empty bytes give ``SchemaAndValue(None, None)``. Bytes that are none of the layouts,
are truncated, or do not decode with their schema raise :class:`~.errors.DataException`
naming the topic and the problem.

The parts, by concept: :mod:`.config` (the keys), :mod:`.registry` (the Schema Registry
client: caches, retries, errors without secrets), :mod:`.layouts` (the bytes of the Confluent
wire format and of the registry-less layouts); the schema mapping is :mod:`.data`.
"""

from __future__ import annotations

import json
import logging
import re
import struct as _struct
from typing import Any, Mapping
from urllib.parse import unquote

from ...connect.config import ConfigDef, ConfigProblem, Password
from ...connect.converters import Converter, SchemaAndValue
from ...connect.data import Schema, Struct
from ...connect.errors import ConfigException, DataException, RetriableException
from .codec import AvroWriter
from .config import (
    _SSL_KEYS,
    _STRATEGIES,
    _STRATEGY_PACKAGE,
    AUTO_REGISTER,
    CONFIG_DEF,
    CREDENTIALS_SOURCE,
    EMBEDDED_FORMAT,
    KEY_STRATEGY,
    NORMALIZE,
    READER_SCHEMA,
    SCHEMA_REGISTRY_URL,
    SR_USER_INFO,
    USE_LATEST,
    USER_INFO,
    VALUE_STRATEGY,
)
from .data import AvroData
from .layouts import CONFLUENT_MAGIC, CONTAINER_MAGIC, FRAMED_MAGIC, LayoutsMixin, _describe
from .names import _LRU, avro_name_problems, schema_json
from .registry import _Registry, _safe_url, _user_info
from .resolution import _parse, compatibility_problems
from .single_object import (
    KNOWN_SCHEMAS,
    KNOWN_SCHEMAS_FILES,
    SINGLE_OBJECT_MAGIC,
    SchemaStore,
    known_schemas,
)

__all__ = ["AvroConverter", "CONFIG_DEF", "FRAMED_MAGIC", "CONFLUENT_MAGIC", "SINGLE_OBJECT_MAGIC"]

log = logging.getLogger("airflow_copycat.avro")


class AvroConverter(LayoutsMixin, Converter):
    """Avro with or without a schema registry; see the module docstring for the contract and the bytes."""

    def __init__(self):
        self._is_key = False
        self._data = AvroData()
        self._registry: _Registry | None = None
        self._auto_register = True
        self._use_latest = False
        self._strategy = "TopicNameStrategy"
        self._container = False
        self._single_object = False
        self._known = SchemaStore()  # fingerprint -> schema: known.schemas, known.schemas.files, reader.schema
        self._written = SchemaStore(size=1000)  # fingerprint -> the schemas this converter wrote single-object
        self._reader_schema: str | None = None
        self._headers = _LRU(1000)  # schema text -> the framed/container header
        self._readers = _LRU(1000)
        self._latest_checked = _LRU(1000)  # (subject, schema text) -> (latest id, its parsed schema)

    @staticmethod
    def config() -> ConfigDef:
        return CONFIG_DEF

    def configure(self, configs: Mapping[str, Any], is_key: bool) -> None:
        """Check and take the converter's keys (prefix stripped). Contacts no registry: the client
        is made on first use. Raises one :class:`ConfigException` listing every problem."""
        values, problems = CONFIG_DEF._parse(configs)
        urls = values.get(SCHEMA_REGISTRY_URL) or []
        for url in urls:
            if not re.match(r"(?i)https?://", url):
                problems.append(ConfigProblem(SCHEMA_REGISTRY_URL, _safe_url(url), "must be an http:// or https:// URL"))
            info = _user_info(url)
            if info is not None and any(c in info for c in "@/?#"):
                # the URL would name another host and the password would show in it: never echo it
                problems.append(ConfigProblem(
                    SCHEMA_REGISTRY_URL, _safe_url(url), "its user info holds a raw '@', '/', '?' or '#': "
                    "percent-encode them in the user name and password (@ as %40, / as %2F, ? as %3F, # as %23, "
                    f": in a user name as %3A), or set {CREDENTIALS_SOURCE}=USER_INFO and {USER_INFO}"))
        source = str(values.get(CREDENTIALS_SOURCE) or "URL").upper()
        user_info = values.get(USER_INFO) or values.get(SR_USER_INFO)
        if source == "SASL_INHERIT":
            problems.append(ConfigProblem(CREDENTIALS_SOURCE, source, "SASL_INHERIT is not supported; use URL or USER_INFO"))
        if source == "USER_INFO":
            if not user_info:
                problems.append(ConfigProblem(USER_INFO, None, "is required with basic.auth.credentials.source=USER_INFO"))
            elif ":" not in user_info.value:
                problems.append(ConfigProblem(USER_INFO, "[hidden]", "must be user:password"))
        reader_schema = values.get(READER_SCHEMA)
        if reader_schema:
            try:
                parsed = json.loads(reader_schema) if reader_schema.strip()[:1] in ("{", "[", '"') else reader_schema
                names = avro_name_problems(parsed)
                if names:
                    raise DataException("; ".join(names))
                _parse(parsed)
                AvroData().to_connect_schema(parsed)  # it must also have a Connect form (no recursion, ...)
            except (ValueError, DataException) as e:
                problems.append(ConfigProblem(READER_SCHEMA, reader_schema[:80], f"is not an Avro schema: {e}"))
            if values.get(USE_LATEST) and urls:
                problems.append(ConfigProblem(READER_SCHEMA, reader_schema[:80],
                                              f"set either {READER_SCHEMA} or {USE_LATEST}, not both"))
        known = known_schemas(values.get(KNOWN_SCHEMAS), values.get(KNOWN_SCHEMAS_FILES), problems)
        if problems:
            raise ConfigException(problems, context="AvroConverter")

        self._is_key = is_key
        cache = values["schemas.cache.size"]
        self._data = AvroData(connect_meta_data=values["connect.meta.data"],
                              enhanced_schema_support=values["enhanced.avro.schema.support"],
                              scrub_invalid_names=values["scrub.invalid.names"], cache_size=cache)
        self._readers = _LRU(cache)
        self._auto_register = values[AUTO_REGISTER]
        self._use_latest = values[USE_LATEST]
        strategy = values[KEY_STRATEGY if is_key else VALUE_STRATEGY]
        self._strategy = next(s for s in _STRATEGIES if strategy.lower().endswith(s.lower()) and
                              (strategy.lower() == s.lower() or strategy.lower() == (_STRATEGY_PACKAGE + s).lower()))
        self._container = values[EMBEDDED_FORMAT].lower() == "container"
        self._single_object = values[EMBEDDED_FORMAT].lower() == "single-object"
        self._reader_schema = schema_json(json.loads(reader_schema)) if reader_schema and \
            reader_schema.strip()[:1] in ("{", "[", '"') else (reader_schema or None)
        self._written = SchemaStore(size=cache)
        self._known = SchemaStore(known + ([self._reader_schema] if self._reader_schema else []))
        self._headers = _LRU(cache)
        self._latest_checked = _LRU(cache)
        if urls:
            conf: dict[str, Any] = {k: values[k] for k in ("max.retries", "retries.wait.ms", "retries.max.wait.ms")}
            secrets = []
            for key, client_key in _SSL_KEYS.items():
                v = values.get(key)
                if v not in (None, ""):
                    conf[client_key] = v.value if isinstance(v, Password) else v
                    if isinstance(v, Password):
                        secrets.append(v.value)
            if source == "USER_INFO":
                conf["basic.auth.user.info"] = user_info.value
                secrets += [user_info.value, user_info.value.partition(":")[2]]
            elif user_info:
                log.warning("%s is set but %s is URL: the credentials in the URL are used, %s is ignored "
                            "(set %s=USER_INFO to use it)", USER_INFO, CREDENTIALS_SOURCE, USER_INFO, CREDENTIALS_SOURCE)
            for url in urls:
                info = _user_info(url)
                if info:
                    secrets += [info, info.partition(":")[2], unquote(info.partition(":")[2])]
                    if source == "URL" and "basic.auth.user.info" not in conf:
                        # handed to the client as user info: its HTTP library logs request URLs
                        user, _, password = info.partition(":")
                        conf["basic.auth.user.info"] = f"{unquote(user)}:{unquote(password)}"
            if "basic.auth.user.info" in conf:
                urls = [_safe_url(u) for u in urls]
            self._registry = _Registry(urls, conf, secrets, values[NORMALIZE], cache)
        else:
            self._registry = None

    # ------------------------------------------------------------------ subjects

    def _subject(self, topic: str, avro_schema: Any) -> str:
        if self._strategy == "TopicNameStrategy":
            return f"{topic}-{'key' if self._is_key else 'value'}"
        name = _record_name(avro_schema)
        if name is None:
            raise DataException(f"{self._strategy} needs a named Avro type (a record), but the "
                                f"{'key' if self._is_key else 'value'} schema of topic {topic} is "
                                f"{schema_json(avro_schema)[:60]}; use TopicNameStrategy")
        return name if self._strategy == "RecordNameStrategy" else f"{topic}-{name}"

    # ------------------------------------------------------------------ Connect -> bytes

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any, headers=None) -> bytes | None:
        if value is None:
            return None
        if schema is None and isinstance(value, Struct):
            schema = value.schema
        try:
            writer = self._data.writer(schema)
            registry = self._registry
            if registry is None:
                return self._embedded_header(writer) + writer.write(value) if not self._container \
                    else self._container_bytes(writer, writer.write(value))
            subject = self._subject(topic, writer.avro_schema)
            if self._use_latest:
                schema_id, parsed = self._latest_for_writing(subject, writer)
                body = writer.write(value, parsed)
            else:
                text = writer.schema_json
                schema_id = registry.register(subject, text) if self._auto_register else registry.lookup(subject, text)
                body = writer.write(value)
            return _struct.pack(">bI", CONFLUENT_MAGIC, schema_id) + body
        except RetriableException as e:
            raise RetriableException(f"topic {topic}: {e}") from None
        except DataException as e:
            raise DataException(f"topic {topic}: {e}") from None

    def _latest_for_writing(self, subject: str, writer: AvroWriter):
        key = (subject, writer.schema_json)
        hit = self._latest_checked.get(key)
        if hit is None:
            schema_id, text, _ = self._registry.latest(subject)
            problems = compatibility_problems(text, writer.schema_json)
            if problems:
                raise DataException(f"{USE_LATEST}: the latest schema of subject {subject!r} (id {schema_id}) "
                                    f"cannot hold this record's schema: {'; '.join(problems)}")
            hit = self._latest_checked.put(key, (schema_id, _parse(json.loads(text))))
        return hit

    # ------------------------------------------------------------------ bytes -> Connect

    def to_connect_data(self, topic: str, data: bytes | None, headers=None) -> SchemaAndValue:
        if not data:
            return SchemaAndValue(None, None)
        try:
            first = data[0]
            if first == CONFLUENT_MAGIC:
                reader, offset = self._confluent_reader(topic, data)
            elif data[:2] == FRAMED_MAGIC:
                reader, offset = self._framed_reader(data)
            elif data[:2] == SINGLE_OBJECT_MAGIC:
                reader, offset = self._single_object_reader(data)
            elif data[:4] == CONTAINER_MAGIC:
                return self._read_container(data)
            else:
                raise DataException(f"{len(data)} bytes are not Avro this converter reads: {_describe(data)}")
            return SchemaAndValue(reader.connect_schema, reader.read(data, offset))
        except RetriableException as e:
            raise RetriableException(f"topic {topic}: {e}") from None
        except DataException as e:
            raise DataException(f"topic {topic}: {e}") from None


def _record_name(avro_schema: Any) -> str | None:
    """The full name of the named type at the top of a schema (the first named branch of a union)."""
    if isinstance(avro_schema, list):
        for branch in avro_schema:
            name = _record_name(branch)
            if name:
                return name
        return None
    if isinstance(avro_schema, dict) and avro_schema.get("type") in ("record", "error", "enum", "fixed"):
        name = avro_schema.get("name", "")
        ns = avro_schema.get("namespace")
        return name if "." in name or not ns else f"{ns}.{name}"
    return None
