"""The keys of the Avro converter (:class:`~.converter.AvroConverter`) and their definitions.

Contract: :data:`CONFIG_DEF` defines every key the converter takes (prefix stripped): the
registry's (``schema.registry.url``, subjects, credentials, TLS, retries), the schema mapping's
and the registry-less layouts' (``embedded.schema.format``, ``known.schemas``,
``reader.schema``); the constants name them for the converter's checks and messages.
What each key does is in the docstring of :mod:`.converter`.
"""

from __future__ import annotations

from ...connect.config import ConfigDef, ConfigType, in_range, one_of
from .single_object import KNOWN_SCHEMAS, KNOWN_SCHEMAS_FILES

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
