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

Why over 500 lines: the converter, the Schema Registry client use (subjects and their naming
strategies, ids cached once, registry outages retried) and the Confluent wire format live
together because each step needs the others' state (the schema id cache, the reader schema). It
is an implementation, not API: issue 15 moves it with :mod:`.avro_data` into the Avro package,
where the subject strategies and the wire format become modules of their own.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import struct as _struct
from typing import Any, Mapping
from urllib.parse import unquote

from ...connect.config import ConfigDef, ConfigProblem, ConfigType, Password, in_range, one_of
from ...connect.converters import Converter, SchemaAndValue
from ...connect.data import Schema, Struct
from ...connect.errors import ConfigException, ConnectException, DataException, RetriableException
from ...connect.secrets import Scrubber
from .codec import AvroWriter
from .data import AvroData
from .names import _LRU, avro_name_problems, schema_json
from .resolution import _parse, compatibility_problems
from .single_object import (
    HEADER_SIZE,
    KNOWN_SCHEMAS,
    KNOWN_SCHEMAS_FILES,
    SINGLE_OBJECT_MAGIC,
    WRITTEN,
    SchemaStore,
    describe_fingerprint,
    known_schemas,
)
from .single_object import (
    header as single_object_header,
)

__all__ = ["AvroConverter", "CONFIG_DEF", "FRAMED_MAGIC", "CONFLUENT_MAGIC", "SINGLE_OBJECT_MAGIC"]

log = logging.getLogger("airflow_copycat.avro")

CONFLUENT_MAGIC = 0
FRAMED_MAGIC = b"\xc3\x53"
CONTAINER_MAGIC = b"Obj\x01"

SCHEMA_REGISTRY_URL = "schema.registry.url"
AUTO_REGISTER = "auto.register.schemas"
USE_LATEST = "use.latest.version"
NORMALIZE = "normalize.schemas"
KEY_STRATEGY = "key.subject.name.strategy"
VALUE_STRATEGY = "value.subject.name.strategy"
CREDENTIALS_SOURCE = "basic.auth.credentials.source"
USER_INFO = "basic.auth.user.info"
SR_USER_INFO = "schema.registry.basic.auth.user.info"
EMBEDDED_FORMAT = "embedded.schema.format"
READER_SCHEMA = "reader.schema"
_SSL_KEYS = {
    "schema.registry.ssl.ca.location": "ssl.ca.location",
    "schema.registry.ssl.certificate.location": "ssl.certificate.location",
    "schema.registry.ssl.key.location": "ssl.key.location",
    "schema.registry.ssl.key.password": "ssl.key.password",
}

_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."
_STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")

CONFIG_DEF = (
    ConfigDef()
    .define(SCHEMA_REGISTRY_URL, ConfigType.LIST, "", importance="high",
            doc="Comma-separated schema registry URLs. Unset: the schema is embedded in every record.")
    .define(AUTO_REGISTER, ConfigType.BOOLEAN, True, importance="medium",
            doc="Register a record's schema under its subject when it is not registered yet.")
    .define(USE_LATEST, ConfigType.BOOLEAN, False, importance="low",
            doc="Write with the subject's latest schema instead of the record's; read with it as reader schema.")
    .define(NORMALIZE, ConfigType.BOOLEAN, False, importance="low",
            doc="Ask the registry to normalize schemas on register and lookup.")
    .define(KEY_STRATEGY, ConfigType.STRING, "TopicNameStrategy",
            one_of(*_STRATEGIES, *(_STRATEGY_PACKAGE + s for s in _STRATEGIES)),
            doc="Subject of key schemas: TopicNameStrategy (<topic>-key), RecordNameStrategy, TopicRecordNameStrategy.")
    .define(VALUE_STRATEGY, ConfigType.STRING, "TopicNameStrategy",
            one_of(*_STRATEGIES, *(_STRATEGY_PACKAGE + s for s in _STRATEGIES)),
            doc="Subject of value schemas: TopicNameStrategy (<topic>-value), RecordNameStrategy, TopicRecordNameStrategy.")
    .define(CREDENTIALS_SOURCE, ConfigType.STRING, "URL", one_of("URL", "USER_INFO", "SASL_INHERIT"),
            doc="Where registry credentials come from: URL (user:password@ in the URL) or USER_INFO.")
    .define(USER_INFO, ConfigType.PASSWORD, None, doc="user:password for the registry (with USER_INFO).")
    .define(SR_USER_INFO, ConfigType.PASSWORD, None, doc="Alias of basic.auth.user.info.")
    .define("schema.registry.ssl.ca.location", ConfigType.STRING, None, doc="CA file or directory for https.")
    .define("schema.registry.ssl.certificate.location", ConfigType.STRING, None, doc="Client certificate (PEM).")
    .define("schema.registry.ssl.key.location", ConfigType.STRING, None, doc="Client private key (PEM).")
    .define("schema.registry.ssl.key.password", ConfigType.PASSWORD, None, doc="Password of the client key.")
    .define("max.retries", ConfigType.INT, 3, in_range(0), doc="Registry requests: retries of a failed request.")
    .define("retries.wait.ms", ConfigType.INT, 1000, in_range(0),
            doc="Registry requests: the first wait before a retry (doubling, with jitter).")
    .define("retries.max.wait.ms", ConfigType.INT, 20000, in_range(0),
            doc="Registry requests: the longest wait before a retry.")
    .define("connect.meta.data", ConfigType.BOOLEAN, True, doc="Write and read the connect.* Avro annotations.")
    .define("enhanced.avro.schema.support", ConfigType.BOOLEAN, False,
            doc="Write strings with Avro enum parameters back as Avro enums.")
    .define("scrub.invalid.names", ConfigType.BOOLEAN, False,
            doc="Replace characters Avro does not allow in names (record, field, namespace) with _; "
                "else such a name fails the record.")
    .define("schemas.cache.size", ConfigType.INT, 1000, in_range(0), doc="Schemas cached per cache.")
    .define(EMBEDDED_FORMAT, ConfigType.STRING, "framed", one_of("framed", "single-object", "container"),
            doc="Without a registry, the layout written: 'framed' (magic 0xC3 0x53, schema, value), "
                "'single-object' (Avro's single-object encoding: 0xC3 0x01, schema fingerprint, value; readers "
                "need the schema: known.schemas) or 'container' (an Avro object container file per record). "
                "All three are read whatever this says.")
    .define(KNOWN_SCHEMAS, ConfigType.STRING, None,
            doc="Avro schemas (JSON: an array of schemas, or one schema) that single-object records may be "
                "written with: the reader finds them by fingerprint.")
    .define(KNOWN_SCHEMAS_FILES, ConfigType.LIST, "",
            doc="Files of Avro schemas (.avsc, one schema each), or directories of them, that single-object "
                "records may be written with (read at configure).")
    .define(READER_SCHEMA, ConfigType.STRING, None,
            doc="An Avro schema (JSON) every record is resolved onto when read.")
)

# user info runs to the last @ of the URL (a password may hold a raw @ or /): all of it is cut
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?:(?!,[a-z][a-z0-9+.-]*://)\S)*@")


def _safe_url(url: str) -> str:
    """``url`` without any ``user:password@``."""
    return _USERINFO.sub(r"\1", url)


def _user_info(url: str) -> str | None:
    """What precedes the last ``@`` of an http(s) URL (its ``user:password`` when the URL is
    well-formed), ``None`` without an ``@``."""
    m = re.match(r"(?i)https?://", url)
    if not m:
        return None
    rest = url[m.end():]
    at = rest.rfind("@")
    return rest[:at] if at >= 0 else None


def _zigzag(n: int) -> bytes:
    """An Avro ``long``: zig-zag, then base-128 varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_long(data, pos: int) -> tuple[int, int]:
    """An Avro ``long`` at ``data[pos:]``: ``(value, position after it)``."""
    shift = n = 0
    while True:
        if pos >= len(data):
            raise DataException("truncated: the bytes end inside a length")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise DataException("a length is longer than 10 bytes: not Avro")


def _describe(data: bytes) -> str:
    """A hint at what bytes that are not Avro might be."""
    head = bytes(data[:1])
    if head in (b"{", b"["):
        return "they look like JSON (written by JsonConverter?)"
    try:
        text = bytes(data[:40]).decode("utf-8")
        if text.isprintable():
            return "they look like text (written by StringConverter?)"
    except UnicodeDecodeError:
        pass
    return ("the first byte is neither 0x00 (Confluent), 0xC3 0x53 (schema embedded), 0xC3 0x01 (single-object) "
            "nor 'Obj\\x01' (container)")


class _Registry:
    """The Confluent Schema Registry, through confluent-kafka's client, with caches; errors become
    the framework's exceptions with secrets removed."""

    def __init__(self, urls: list[str], conf: Mapping[str, Any], secrets: list[str], normalize: bool,
                 cache_size: int = 1000):
        self.shown = ", ".join(_safe_url(u) for u in urls)
        self._conf = dict(conf, url=",".join(urls))
        self._hide = Scrubber(secrets)
        self._normalize = normalize
        self._client = None
        # bounded as schemas.cache.size: (subject, schema text) -> id, id -> text, subject -> latest
        self._ids = _LRU(cache_size)
        self._schemas = _LRU(cache_size)
        self._latest = _LRU(cache_size)

    @property
    def client(self):
        if self._client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as e:  # pragma: no cover - a dependency of this package
                raise ConnectException(f"the schema registry client needs confluent-kafka[schemaregistry]: {e}") from None
            try:
                self._client = SchemaRegistryClient(self._conf)
            except (ValueError, TypeError, OSError) as e:
                raise ConnectException(f"schema registry {self.shown}: {self._scrub(str(e))}") from None
        return self._client

    def _scrub(self, text: str) -> str:
        return self._hide(_safe_url(str(text)))

    def _schema(self, text: str):
        from confluent_kafka.schema_registry import Schema as RegistrySchema

        return RegistrySchema(text, "AVRO")

    def register(self, subject: str, text: str) -> int:
        key = (subject, text)
        hit = self._ids.get(key)
        if hit is None:
            hit = self._call(lambda: self.client.register_schema(subject, self._schema(text), self._normalize),
                             "registering the schema", subject)
            log.info("schema registry %s: subject %s has the Avro schema as id %s", self.shown, subject, hit)
            self._ids.put(key, hit)
            if self._schemas.get(hit) is None:
                self._schemas.put(hit, text)
        return hit

    def lookup(self, subject: str, text: str) -> int:
        key = (subject, text)
        hit = self._ids.get(key)
        if hit is None:
            found = self._call(lambda: self.client.lookup_schema(subject, self._schema(text), self._normalize),
                               "looking the schema up", subject, auto_register_off=True)
            hit = found.schema_id
            self._ids.put(key, hit)
        return hit

    def latest(self, subject: str) -> tuple[int, str, int | None]:
        hit = self._latest.get(subject)
        if hit is None:
            found = self._call(lambda: self.client.get_latest_version(subject), "reading the latest schema", subject)
            hit = self._latest.put(subject, (found.schema_id, found.schema.schema_str, found.version))
            if self._schemas.get(found.schema_id) is None:
                self._schemas.put(found.schema_id, found.schema.schema_str)
        return hit

    def schema(self, schema_id: int) -> str:
        hit = self._schemas.get(schema_id)
        if hit is None:
            found = self._call(lambda: self.client.get_schema(schema_id), f"reading schema id {schema_id}", None,
                               schema_id=schema_id)
            if (found.schema_type or "AVRO").upper() != "AVRO":
                raise DataException(f"schema id {schema_id} in the schema registry {self.shown} is a "
                                    f"{found.schema_type} schema, not Avro: use the converter for that format")
            hit = found.schema_str
            self._schemas.put(schema_id, hit)
        return hit

    def version(self, subject: str, text: str) -> int | None:
        """The version of ``text`` under ``subject``, ``None`` when it is not registered there."""
        try:
            found = self.client.lookup_schema(subject, self._schema(text), self._normalize)
        except Exception as e:  # noqa: BLE001 - the version only names the Connect schema; reading goes on
            log.debug("schema registry %s: no version of the schema under %s: %s", self.shown, subject,
                      self._scrub(str(e)))
            return None
        return found.version

    def compatibility(self, subject: str) -> str:
        for args in ((subject,), ()):
            try:
                return self.client.get_compatibility(*args)
            except Exception:  # noqa: BLE001 - only for the message
                continue
        return "unknown"

    def _call(self, fn, what: str, subject: str | None, *, schema_id: int | None = None,
              auto_register_off: bool = False):
        try:
            return fn()
        except ConnectException:
            raise
        except Exception as e:  # noqa: BLE001 - translated below
            raise self._error(e, what, subject, schema_id, auto_register_off) from None

    def _error(self, e: Exception, what: str, subject, schema_id, auto_register_off) -> ConnectException:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        where = f"schema registry {self.shown}"
        about = f" for subject {subject!r}" if subject else ""
        if isinstance(e, SchemaRegistryError):
            status, code = e.http_status_code, e.error_code
            message = self._scrub(e.error_message or "")
            if status == 409:
                level = self.compatibility(subject) if subject else "unknown"
                return DataException(
                    f"{where} rejected the Avro schema{about}: it is incompatible with the subject's earlier "
                    f"versions (compatibility {level}): {message}. Evolve the schema compatibly -- add fields "
                    "with defaults (an optional field defaults to null), remove only fields that have defaults -- "
                    f"or change the subject's compatibility level (PUT /config/{subject})")
            if status in (401, 403):
                return ConnectException(
                    f"{where} refused the credentials while {what}{about} (HTTP {status}): check "
                    "basic.auth.credentials.source and basic.auth.user.info, or the user:password in the URL")
            if status == 404:
                if schema_id is not None:
                    return DataException(f"schema id {schema_id} is not in the {where} (HTTP 404, code {code}): "
                                         "was the record written against another registry?")
                if auto_register_off:
                    return DataException(f"the record's Avro schema is not registered{about} in the {where} and "
                                         f"{AUTO_REGISTER}=false: register it first, or set {AUTO_REGISTER}=true "
                                         f"({message})")
                return DataException(f"{where}: nothing{about} while {what} (HTTP 404): {message}")
            if status == 422:
                return DataException(f"{where} rejected the Avro schema{about} as invalid: {message}")
            if status >= 500 or status in (408, 429):
                return RetriableException(f"{where} failed while {what}{about} (HTTP {status}): {message}")
            return DataException(f"{where} failed while {what}{about} (HTTP {status}, code {code}): {message}")
        names = {c.__name__ for c in type(e).__mro__}
        if isinstance(e, (OSError, TimeoutError)) or names & {"TransportError", "TimeoutException", "NetworkError"}:
            return RetriableException(f"{where} is unreachable while {what}{about}: {type(e).__name__}: "
                                      f"{self._scrub(str(e))}")
        return ConnectException(f"{where} failed while {what}{about}: {type(e).__name__}: {self._scrub(str(e))}")


class AvroConverter(Converter):
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

    def _embedded_header(self, writer: AvroWriter) -> bytes:
        """The bytes before the value without a registry: the framed header, or the single-object
        one (the schema then known by its fingerprint to this converter and this process)."""
        if self._single_object:
            key = ("single-object", writer.schema_json)
            hit = self._headers.get(key)
            if hit is None:
                try:
                    hit = single_object_header(writer.avro_schema)
                except (ValueError, KeyError, TypeError) as e:
                    raise DataException(f"no Parsing Canonical Form of the Avro schema: {e}") from None
                self._written.add(writer.schema_json, replace=True)
                WRITTEN.add(writer.schema_json, replace=True)
                self._headers.put(key, hit)
            return hit
        hit = self._headers.get(writer.schema_json)
        if hit is None:
            raw = writer.schema_json.encode("utf-8")
            hit = self._headers.put(writer.schema_json, FRAMED_MAGIC + _zigzag(len(raw)) + raw)
        return hit

    def _container_bytes(self, writer: AvroWriter, body: bytes) -> bytes:
        key = ("container", writer.schema_json)
        header = self._headers.get(key)
        if header is None:
            raw = writer.schema_json.encode("utf-8")
            sync = hashlib.md5(raw).digest()  # deterministic: the same record gives the same bytes
            meta = [(b"avro.schema", raw), (b"avro.codec", b"null")]
            head = bytearray(CONTAINER_MAGIC)
            head += _zigzag(len(meta))
            for k, v in meta:
                head += _zigzag(len(k)) + k + _zigzag(len(v)) + v
            head += _zigzag(0)
            header = self._headers.put(key, (bytes(head) + sync, sync))
        head, sync = header
        return head + _zigzag(1) + _zigzag(len(body)) + body + sync

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

    def _confluent_reader(self, topic: str, data: bytes):
        if len(data) < 5:
            raise DataException(f"{len(data)} bytes are too short for the Confluent wire format "
                                "(magic byte 0, a 4-byte schema id, then the Avro value)")
        schema_id = int.from_bytes(data[1:5], "big")
        registry = self._registry
        if registry is None:
            raise DataException(f"the record is in the Confluent wire format (schema id {schema_id}), which needs "
                                f"a schema registry: set the converter's {SCHEMA_REGISTRY_URL}")
        key = (schema_id, topic)
        reader = self._readers.get(key)
        if reader is None:
            text = registry.schema(schema_id)
            subject = self._subject(topic, json.loads(text))
            reader_schema = self._reader_schema
            if self._use_latest:
                reader_schema = registry.latest(subject)[1]
            version = registry.version(subject, text)
            reader = self._readers.put(key, self._data.reader(text, reader_schema, version=version,
                                                              key=("id", schema_id, topic, reader_schema)))
        return reader, 5

    def _framed_reader(self, data: bytes):
        n, pos = _read_long(data, 2)
        if n <= 0 or pos + n > len(data):
            raise DataException(f"truncated: the embedded schema is said to be {n} bytes, "
                                f"{len(data) - pos} bytes follow")
        raw = bytes(data[pos:pos + n])
        reader = self._readers.get(raw)
        if reader is None:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataException("the embedded schema is not UTF-8: the bytes are not a schema-embedded "
                                    "Avro record") from None
            reader = self._readers.put(raw, self._data.reader(text, self._reader_schema))
        return reader, pos + n

    def _single_object_reader(self, data: bytes):
        if len(data) < HEADER_SIZE:
            raise DataException(f"{len(data)} bytes are too short for Avro single-object encoding (0xC3 0x01, an "
                                "8-byte schema fingerprint, then the Avro value)")
        fp = bytes(data[2:HEADER_SIZE])
        reader = self._readers.get(("fp", fp))
        if reader is None:
            text = self._written.get(fp) or self._known.get(fp) or WRITTEN.get(fp)
            if text is None:
                raise DataException(
                    f"the record is in Avro single-object encoding with schema fingerprint {describe_fingerprint(fp)}, "
                    f"a schema this converter does not know: give the reader the writer's schema in {KNOWN_SCHEMAS} "
                    f"(JSON) or {KNOWN_SCHEMAS_FILES} (.avsc files), or have the writer embed it "
                    f"({EMBEDDED_FORMAT}=framed or container) or use a schema registry")
            reader = self._readers.put(("fp", fp), self._data.reader(text, self._reader_schema))
        return reader, HEADER_SIZE

    def _read_container(self, data: bytes) -> SchemaAndValue:
        pos = 4
        meta: dict[bytes, bytes] = {}
        while True:
            count, pos = _read_long(data, pos)
            if count == 0:
                break
            if count < 0:
                _, pos = _read_long(data, pos)
                count = -count
            for _ in range(count):
                klen, pos = _read_long(data, pos)
                k = bytes(data[pos:pos + klen])
                pos += klen
                vlen, pos = _read_long(data, pos)
                meta[k] = bytes(data[pos:pos + vlen])
                pos += vlen
        sync = bytes(data[pos:pos + 16])
        pos += 16
        if b"avro.schema" not in meta or len(sync) != 16:
            raise DataException("truncated Avro container: no schema in its header")
        codec = meta.get(b"avro.codec", b"null").decode("ascii", "replace")
        raw = meta[b"avro.schema"]
        reader = self._readers.get(("container", raw))
        if reader is None:
            reader = self._readers.put(("container", raw), self._data.reader(raw.decode("utf-8"), self._reader_schema))
        values = []
        while pos < len(data):
            count, pos = _read_long(data, pos)
            size, pos = _read_long(data, pos)
            block = bytes(data[pos:pos + size])
            pos += size
            if len(block) != size or bytes(data[pos:pos + 16]) != sync:
                raise DataException("truncated or corrupt Avro container: a block does not end with the sync marker")
            pos += 16
            if codec == "deflate":
                import zlib

                block = zlib.decompress(block, -15)
            elif codec != "null":
                raise DataException(f"Avro container codec {codec!r} is not supported here; use null or deflate")
            offset = 0
            for _ in range(count):
                value, offset = self._read_one(reader, block, offset)
                values.append(value)
        if len(values) != 1:
            raise DataException(f"an Avro container record must hold exactly one value, this one holds {len(values)}")
        return SchemaAndValue(reader.connect_schema, values[0])

    @staticmethod
    def _read_one(reader, block: bytes, offset: int):
        buf = io.BytesIO(block)
        buf.seek(offset)
        return reader.read_from(buf), buf.tell()


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
