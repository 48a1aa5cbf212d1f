"""Configuration of the PostgreSQL change-data-capture source: Debezium's ``PostgresConnector`` keys, as is.

:func:`CdcConfig.parse` turns a flat connector config into a :class:`CdcConfig` or raises one
:class:`~airflow_copycat.connect.errors.ConfigException` naming every bad key (never a password).

The database is named either by Debezium's keys (``database.hostname``, ``database.port``,
``database.user``, ``database.password``, ``database.dbname``, ``database.ssl*``) or by the keys the
Airflow layer fills from ``airflow.conn.id`` (``connection.url``, ``connection.user``,
``connection.password``, as for the JDBC connectors); giving both is a problem (one source of truth).

Keys fall in four groups:

* keys this connector acts on (:data:`CONFIG_DEF`);
* Debezium keys accepted because they only tune what Debezium's engine does inside one JVM (queue
  sizes, metrics, retry delays: :data:`ACCEPTED_NO_EFFECT`); a bounded run has no equivalent, the
  events are the same;
* Debezium keys accepted only at their default, because any other value changes the events or the
  slot's handling in a way this connector does not implement (:data:`DEFAULT_ONLY`): another value is
  a problem naming the key;
* Debezium keys this connector cannot honour at all (:data:`NOT_SUPPORTED`): giving one is a problem.

Other keys pass through (Kafka Connect's ``name``, ``connector.class``, ``tasks.max``, converters,
transforms, ``errors.*``) as the framework reads them.

Table and column filters follow Debezium's matching rules: comma-separated regular expressions
(``\\,`` for a literal comma), each matched case-insensitively against the whole fully-qualified
name (``schema.table``, ``schema.table.column``), never a substring; ``pg_catalog`` and
``information_schema`` tables, ``pg_temp*`` schemas and ``spatial_ref_sys`` are never captured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from airflow_copycat.connect import ConfigDef, ConfigProblem, ConfigType
from airflow_copycat.connect.config import Password, in_range, one_of
from airflow_copycat.connect.errors import ConfigException

from .filters import Filters, key_columns_problem, regex_list_problem, split_regexes

HOSTNAME = "database.hostname"
PORT = "database.port"
USER = "database.user"
PASSWORD = "database.password"
DBNAME = "database.dbname"
SSLMODE = "database.sslmode"
SSLROOTCERT = "database.sslrootcert"
SSLCERT = "database.sslcert"
SSLKEY = "database.sslkey"
SSLPASSWORD = "database.sslpassword"
INITIAL_STATEMENTS = "database.initial.statements"
CONNECTION_URL = "connection.url"
CONNECTION_USER = "connection.user"
CONNECTION_PASSWORD = "connection.password"
AIRFLOW_CONN_ID = "airflow.conn.id"
TOPIC_PREFIX = "topic.prefix"
SERVER_NAME = "database.server.name"
PLUGIN_NAME = "plugin.name"
SLOT_NAME = "slot.name"
SLOT_DROP_ON_STOP = "slot.drop.on.stop"
PUBLICATION_NAME = "publication.name"
PUBLICATION_AUTOCREATE_MODE = "publication.autocreate.mode"
SCHEMA_INCLUDE = "schema.include.list"
SCHEMA_EXCLUDE = "schema.exclude.list"
TABLE_INCLUDE = "table.include.list"
TABLE_EXCLUDE = "table.exclude.list"
COLUMN_INCLUDE = "column.include.list"
COLUMN_EXCLUDE = "column.exclude.list"
SNAPSHOT_MODE = "snapshot.mode"
SNAPSHOT_INCLUDE = "snapshot.include.collection.list"
SNAPSHOT_FETCH_SIZE = "snapshot.fetch.size"
TOMBSTONES_ON_DELETE = "tombstones.on.delete"
SKIPPED_OPERATIONS = "skipped.operations"
HEARTBEAT_INTERVAL_MS = "heartbeat.interval.ms"
HEARTBEAT_ACTION_QUERY = "heartbeat.action.query"
HEARTBEAT_TOPIC_PREFIX = "topic.heartbeat.prefix"
DECIMAL_HANDLING_MODE = "decimal.handling.mode"
TIME_PRECISION_MODE = "time.precision.mode"
BINARY_HANDLING_MODE = "binary.handling.mode"
HSTORE_HANDLING_MODE = "hstore.handling.mode"
INTERVAL_HANDLING_MODE = "interval.handling.mode"
MONEY_FRACTION_DIGITS = "money.fraction.digits"
UNAVAILABLE_VALUE_PLACEHOLDER = "unavailable.value.placeholder"
SCHEMA_NAME_ADJUSTMENT_MODE = "schema.name.adjustment.mode"
FIELD_NAME_ADJUSTMENT_MODE = "field.name.adjustment.mode"
MESSAGE_KEY_COLUMNS = "message.key.columns"
MAX_BATCH_SIZE = "max.batch.size"
BATCH_ENABLED = "copycat.batch.enabled"
POLL_INTERVAL_MS = "poll.interval.ms"
OFFSET_MISMATCH_STRATEGY = "offset.mismatch.strategy"
INCLUDE_UNKNOWN_DATATYPES = "include.unknown.datatypes"

PLUGINS = ("pgoutput",)
AUTOCREATE_MODES = ("all_tables", "disabled", "filtered", "no_tables")
SNAPSHOT_MODES = ("initial", "initial_only", "no_data", "when_needed")
SNAPSHOT_MODE_ALIASES = {"never": "no_data", "schema_only": "no_data", "exported": "initial"}
"""Older Debezium names of snapshot modes (1.x/2.x), read as the mode they became."""
DECIMAL_MODES = ("precise", "double", "string")
TIME_PRECISION_MODES = ("adaptive", "adaptive_time_microseconds", "connect", "microseconds", "nanoseconds",
                        "isostring")
BINARY_MODES = ("bytes", "base64", "base64-url-safe", "hex")
HSTORE_MODES = ("json", "map")
INTERVAL_MODES = ("numeric", "string")
NAME_ADJUSTMENT_MODES = ("none", "avro", "avro_unicode")
OPERATIONS = ("c", "u", "d", "t")
OFFSET_MISMATCH_STRATEGIES = ("no_validation", "trust_offset", "trust_slot", "trust_greater_lsn")


ACCEPTED_NO_EFFECT = frozenset({
    "tasks.max", "snapshot.max.threads", "legacy.snapshot.max.threads", "max.queue.size", "max.queue.size.in.bytes",
    "poll.dispatch.interval.ms", "status.update.interval.ms", "slot.max.retries", "slot.retry.delay.ms",
    "statistics.metrics.enabled", "custom.metric.tags", "custom.sanitize.pattern", "retriable.restart.connector.wait.ms",
    "errors.max.retries", "database.tcpKeepAlive", "database.query.timeout.ms", "snapshot.delay.ms",
    "streaming.delay.ms", "snapshot.lock.timeout.ms", "topic.cache.size", "snapshot.isolation.mode",
    "extended.headers.enabled", "schema.history.internal",
    "guardrail.collections.max", "guardrail.collections.limit.action", "slot.failover",
})
"""Debezium keys that tune its engine's threads, queues, metrics and retries: accepted, no effect here."""

DEFAULT_ONLY = {
    "snapshot.locking.mode": "none",
    "snapshot.query.mode": "select_all",
    "provide.transaction.metadata": "false",
    "topic.naming.strategy": "io.debezium.schema.SchemaTopicNamingStrategy",
    "topic.delimiter": ".",
    "schema.refresh.mode": "columns_diff",
    "publish.via.partition.root": "false",
    "lsn.flush.mode": "connector",
    "flush.lsn.source": "true",
    "xmin.fetch.interval.ms": "0",
    "event.processing.failure.handling.mode": "fail",
    "skip.messages.without.change": "false",
    "column.propagate.source.type": "",
    "datatype.propagate.source.type": "",
    "slot.stream.params": "",
    "signal.data.collection": "",
    "snapshot.select.statement.overrides": "",
    "converters": "",
    "database.connection.factory.class": "",
}
"""Debezium keys accepted only at these (Debezium's default) values; another value is a problem."""

NOT_SUPPORTED_PREFIXES = ("column.mask.", "column.truncate.to.", "snapshot.mode.configuration.based.",
                          "snapshot.mode.custom.", "incremental.snapshot.", "signal.kafka.", "notification.")
"""Debezium key families this connector cannot honour: giving any is a problem."""


def _operations(key: str, value: Any) -> str | None:
    ops = [o.strip().lower() for o in str(value or "").split(",") if o.strip()]
    if ops == ["none"]:
        return None
    bad = [o for o in ops if o not in OPERATIONS]
    return f"has unknown operation(s) {bad}: use a comma-separated subset of c, u, d, t, or none" if bad else None


def _snapshot_mode(key: str, value: Any) -> str | None:
    if value is None:
        return None
    mode = str(value).strip().lower()
    if mode in SNAPSHOT_MODES or mode in SNAPSHOT_MODE_ALIASES:
        return None
    if mode == "always":
        return ("always cannot be honoured: every bounded run starts the connector, so it would re-read every "
                "table on every run; use initial (snapshot once) or when_needed (snapshot again when the slot "
                "or offset is lost)")
    if mode in ("configuration_based", "custom", "schema_only_recovery", "recovery"):
        return f"{mode} is not supported; use one of " + ", ".join(SNAPSHOT_MODES)
    return "must be one of " + ", ".join(SNAPSHOT_MODES)


def _plugin(key: str, value: Any) -> str | None:
    if value is None or str(value).strip().lower() == "pgoutput":
        return None
    if str(value).strip().lower() in ("decoderbufs", "wal2json", "wal2json_streaming", "wal2json_rds",
                                      "wal2json_rds_streaming"):
        return (f"{value} is not supported: this connector reads pgoutput, the logical decoding plug-in built "
                "into every PostgreSQL >= 10 (managed services included); set plugin.name=pgoutput (the events "
                "are the same)")
    return "must be pgoutput"


def _slot_name(key: str, value: Any) -> str | None:
    if value is None or re.fullmatch(r"[a-z0-9_]{1,63}", str(value)):
        return None
    return "must be 1-63 lower-case letters, digits or underscores (PostgreSQL's replication slot naming rule)"


def _topic_prefix(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not re.fullmatch(r"[A-Za-z0-9._\-]+", str(value)):
        return "may only hold letters, digits, '.', '_' and '-' (it starts every topic name)"
    return None


CONFIG_DEF = (
    ConfigDef()
    .define(HOSTNAME, ConfigType.STRING, None, importance="high", doc="The PostgreSQL server's host name or address.")
    .define(PORT, ConfigType.INT, 5432, validator=in_range(1, 65535), importance="high", doc="Its port.")
    .define(USER, ConfigType.STRING, None, importance="high",
            doc="The user: needs REPLICATION (and CREATE on the database for publication.autocreate.mode) and "
                "SELECT on the captured tables.")
    .define(PASSWORD, ConfigType.PASSWORD, None, importance="high", doc="The user's password.")
    .define(DBNAME, ConfigType.STRING, None, importance="high", doc="The database to capture.")
    .define(SSLMODE, ConfigType.STRING, "prefer",
            validator=one_of("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
            doc="libpq's sslmode.")
    .define(SSLROOTCERT, ConfigType.STRING, None, doc="File of the CA certificate(s) that signed the server's.")
    .define(SSLCERT, ConfigType.STRING, None, doc="File of the client certificate.")
    .define(SSLKEY, ConfigType.STRING, None, doc="File of the client certificate's key.")
    .define(SSLPASSWORD, ConfigType.PASSWORD, None, doc="Password of the client key.")
    .define(INITIAL_STATEMENTS, ConfigType.STRING, None,
            doc="SQL statements run on every new database connection, separated by ';' (';;' for a literal ';').")
    .define(CONNECTION_URL, ConfigType.STRING, None,
            doc="Filled by the Airflow layer from airflow.conn.id (a SQLAlchemy postgresql URL without password); "
                "give the database.* keys instead outside Airflow.")
    .define(CONNECTION_USER, ConfigType.STRING, None, doc="Filled from airflow.conn.id: the connection's login.")
    .define(CONNECTION_PASSWORD, ConfigType.PASSWORD, None, doc="Filled from airflow.conn.id: its password.")
    .define(TOPIC_PREFIX, ConfigType.STRING, None, validator=_topic_prefix, importance="high",
            doc="Namespace of this server's topics (<prefix>.<schema>.<table>), of the schema names and of the "
                "offsets (the 'server' of the source partition). Never change it once events were produced.")
    .define(SERVER_NAME, ConfigType.STRING, None, validator=_topic_prefix,
            doc="Debezium 1.x's name for topic.prefix; read when topic.prefix is absent.")
    .define(PLUGIN_NAME, ConfigType.STRING, "pgoutput", validator=_plugin, importance="high",
            doc="The logical decoding plug-in: pgoutput (built into PostgreSQL >= 10). Debezium's default, "
                "decoderbufs, needs a server extension and is not supported.")
    .define(SLOT_NAME, ConfigType.STRING, "debezium", validator=_slot_name, importance="high",
            doc="The logical replication slot; created when missing. One slot per connector.")
    .define(SLOT_DROP_ON_STOP, ConfigType.BOOLEAN, False,
            doc="Drop the slot when the connector is deleted (test and development only: the next start "
                "snapshots again or loses changes).")
    .define(PUBLICATION_NAME, ConfigType.STRING, "dbz_publication", doc="The pgoutput publication.")
    .define(PUBLICATION_AUTOCREATE_MODE, ConfigType.STRING, "all_tables", validator=one_of(*AUTOCREATE_MODES),
            doc="When the publication is missing: all_tables (CREATE PUBLICATION ... FOR ALL TABLES, needs a "
                "superuser), filtered (for the included tables, kept in step with the filters), no_tables, or "
                "disabled (it must exist).")
    .define(SCHEMA_INCLUDE, ConfigType.STRING, None, validator=regex_list_problem,
            doc="Regular expressions of the schema names to capture (anchored, case-insensitive).")
    .define(SCHEMA_EXCLUDE, ConfigType.STRING, None, validator=regex_list_problem,
            doc="Regular expressions of the schema names not to capture.")
    .define(TABLE_INCLUDE, ConfigType.STRING, None, validator=regex_list_problem,
            doc="Regular expressions of the tables to capture, matched against <schema>.<table>.")
    .define(TABLE_EXCLUDE, ConfigType.STRING, None, validator=regex_list_problem,
            doc="Regular expressions of the tables not to capture (<schema>.<table>).")
    .define(COLUMN_INCLUDE, ConfigType.STRING, None, validator=regex_list_problem,
            doc="Regular expressions of the columns in event values, matched against <schema>.<table>.<column>. "
                "Key columns are always in the key.")
    .define(COLUMN_EXCLUDE, ConfigType.STRING, None, validator=regex_list_problem,
            doc="Regular expressions of the columns left out of event values (<schema>.<table>.<column>).")
    .define(SNAPSHOT_MODE, ConfigType.STRING, "initial", validator=_snapshot_mode, importance="high",
            doc="initial: snapshot the tables once, then stream; initial_only: snapshot, never stream; no_data: "
                "never snapshot, stream from the slot's start; when_needed: snapshot when there is no offset or "
                "the slot no longer has it. Older names: never and schema_only (no_data), exported (initial).")
    .define(SNAPSHOT_INCLUDE, ConfigType.STRING, None, validator=regex_list_problem,
            doc="Regular expressions (<schema>.<table>) of the captured tables the snapshot reads; all when unset.")
    .define(SNAPSHOT_FETCH_SIZE, ConfigType.INT, 10240, validator=in_range(1, None),
            doc="Rows the snapshot reads per query: a table is read in primary-key order, this many rows at a "
                "time, and a stopped run continues after the last key read.")
    .define(TOMBSTONES_ON_DELETE, ConfigType.BOOLEAN, True,
            doc="Follow each delete event with a tombstone (same key, null value) so compaction can drop the key.")
    .define(SKIPPED_OPERATIONS, ConfigType.STRING, "t", validator=_operations,
            doc="Operations not to emit: a comma-separated subset of c, u, d, t, or none. Debezium's default "
                "skips truncates (t); none emits op=t events.")
    .define(HEARTBEAT_INTERVAL_MS, ConfigType.LONG, 0, validator=in_range(0, None),
            doc="How often a run confirms the slot while its tables are quiet (0 = off), so WAL of other "
                "databases' or tables' changes is not retained.")
    .define(HEARTBEAT_ACTION_QUERY, ConfigType.STRING, None,
            doc="A statement run on each heartbeat (e.g. an UPDATE of a heartbeat table) so the slot has a "
                "change of its own to confirm on an otherwise quiet database.")
    .define(HEARTBEAT_TOPIC_PREFIX, ConfigType.STRING, "__debezium-heartbeat", doc="Prefix of the heartbeat topic.")
    .define(DECIMAL_HANDLING_MODE, ConfigType.STRING, "precise", validator=one_of(*DECIMAL_MODES),
            doc="numeric/decimal/money as precise (Connect Decimal; VariableScaleDecimal for numeric without "
                "scale), double, or string.")
    .define(TIME_PRECISION_MODE, ConfigType.STRING, "adaptive", validator=one_of(*TIME_PRECISION_MODES),
            doc="adaptive (the column's precision decides ms or µs), adaptive_time_microseconds (time always in "
                "µs), microseconds, nanoseconds (timestamps of 1677-2262 only), isostring (ISO-8601 strings in UTC), "
                "or connect (Kafka Connect's "
                "Date/Time/Timestamp, ms: loses µs).")
    .define(BINARY_HANDLING_MODE, ConfigType.STRING, "bytes", validator=one_of(*BINARY_MODES),
            doc="bytea as bytes, base64, base64-url-safe or hex strings.")
    .define(HSTORE_HANDLING_MODE, ConfigType.STRING, "json", validator=one_of(*HSTORE_MODES),
            doc="hstore as a JSON string (io.debezium.data.Json) or a map of strings.")
    .define(INTERVAL_HANDLING_MODE, ConfigType.STRING, "numeric", validator=one_of(*INTERVAL_MODES),
            doc="interval as µs (io.debezium.time.MicroDuration, months of 365.25/12 days) or an ISO-8601 string.")
    .define(MONEY_FRACTION_DIGITS, ConfigType.INT, 2, validator=in_range(0, None),
            doc="The scale of money values (precise mode).")
    .define(UNAVAILABLE_VALUE_PLACEHOLDER, ConfigType.STRING, "__debezium_unavailable_value",
            doc="Stands for an unchanged TOASTed value the WAL does not carry (strings; its UTF-8 bytes for "
                "bytea).")
    .define(SCHEMA_NAME_ADJUSTMENT_MODE, ConfigType.STRING, "none", validator=one_of(*NAME_ADJUSTMENT_MODES),
            doc="none, or avro/avro_unicode: characters not valid in Avro names become '_' in schema names.")
    .define(FIELD_NAME_ADJUSTMENT_MODE, ConfigType.STRING, "none", validator=one_of(*NAME_ADJUSTMENT_MODES),
            doc="none, or avro/avro_unicode: characters not valid in Avro names become '_' in field names.")
    .define(INCLUDE_UNKNOWN_DATATYPES, ConfigType.BOOLEAN, False,
            doc="Accepted; columns of types without a mapping are always sent as strings (their PostgreSQL text, "
                "type name in the __debezium.source.column.type parameter) since the values are read as text.")
    .define(MESSAGE_KEY_COLUMNS, ConfigType.STRING, None, validator=key_columns_problem,
            doc="Event keys other than the primary key: <schema.table regex>:<column>,<column>;... (a table "
                "without a primary key gets keys this way). Give such tables REPLICA IDENTITY FULL so deletes "
                "carry the key columns.")
    .define(MAX_BATCH_SIZE, ConfigType.INT, 2048, validator=in_range(1, None),
            doc="The most events one poll returns.")
    .define(BATCH_ENABLED, ConfigType.BOOLEAN, True,
            doc="Stream runs of one table's changes as Arrow batches (fast); false: one record per event. The "
                "same records, offsets and errors (ts_*: read once per batch); see docs/cdc.md.")
    .define(POLL_INTERVAL_MS, ConfigType.LONG, 500, validator=in_range(0, None),
            doc="Accepted for compatibility; a bounded run reads until it reaches the WAL position current at "
                "its start.")
    .define(OFFSET_MISMATCH_STRATEGY, ConfigType.STRING, "no_validation",
            validator=one_of(*OFFSET_MISMATCH_STRATEGIES),
            doc="What to do when the stored offset and the slot's confirmed position differ at the start of a run.")
)

_DATABASE_KEYS = (HOSTNAME, USER, PASSWORD, DBNAME)
_URL_KEYS = (CONNECTION_URL, CONNECTION_USER, CONNECTION_PASSWORD)


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _normalise(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with list-valued regex keys joined into Debezium's string form (commas escaped)."""
    out = dict(raw)
    for key in (SCHEMA_INCLUDE, SCHEMA_EXCLUDE, TABLE_INCLUDE, TABLE_EXCLUDE, COLUMN_INCLUDE, COLUMN_EXCLUDE,
                SNAPSHOT_INCLUDE):
        if isinstance(out.get(key), (list, tuple)):
            out[key] = ",".join(str(v).replace(",", "\\,") for v in out[key])
    return out


def _cross_key_problems(raw: Mapping[str, Any], values: Mapping[str, Any]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    given = {k for k, v in raw.items() if _text(v) != ""}
    # the database: Debezium's keys, or the ones the Airflow layer filled from airflow.conn.id
    url_keys = [k for k in _URL_KEYS if k in given]
    db_keys = [k for k in (HOSTNAME, DBNAME) if k in given]
    if url_keys and db_keys:
        problems.append(ConfigProblem(db_keys[0], raw.get(db_keys[0]),
                                      f"cannot be combined with {url_keys[0]} (filled from {AIRFLOW_CONN_ID}): name "
                                      f"the database one way"))
    elif not url_keys:
        if AIRFLOW_CONN_ID in given:
            problems.append(ConfigProblem(AIRFLOW_CONN_ID, raw.get(AIRFLOW_CONN_ID),
                                          "is resolved only by the Airflow operators and sensors; outside Airflow "
                                          "give database.hostname, database.dbname, database.user and "
                                          "database.password"))
        else:
            for key, what in ((HOSTNAME, "the PostgreSQL server's host"), (DBNAME, "the database to capture"),
                              (USER, "the replication user")):
                if key not in given:
                    problems.append(ConfigProblem(key, None, f"is required: {what} (or {AIRFLOW_CONN_ID}, an "
                                                  f"Airflow connection, in a DAG)"))
    else:
        url = _text(raw.get(CONNECTION_URL))
        if not re.match(r"^(postgres|postgresql)(\+\w+)?://", url):
            problems.append(ConfigProblem(CONNECTION_URL, url.split(":")[0] + ":...",
                                          "must be a PostgreSQL URL (the Airflow connection must be of type postgres)"))
    prefix, server = _text(raw.get(TOPIC_PREFIX)), _text(raw.get(SERVER_NAME))
    if not prefix and not server:
        problems.append(ConfigProblem(TOPIC_PREFIX, None, "is required: the namespace of this server's topics, "
                                      "schema names and offsets"))
    elif prefix and server and prefix != server:
        problems.append(ConfigProblem(SERVER_NAME, server, f"differs from topic.prefix={prefix!r}: they name the same "
                                      "thing (database.server.name is the older key); give one"))
    for include, exclude in ((SCHEMA_INCLUDE, SCHEMA_EXCLUDE), (TABLE_INCLUDE, TABLE_EXCLUDE),
                             (COLUMN_INCLUDE, COLUMN_EXCLUDE)):
        if split_regexes(values.get(include)) and split_regexes(values.get(exclude)):
            problems.append(ConfigProblem(exclude, values.get(exclude), f"cannot be combined with {include}: "
                                          "give an include list or an exclude list"))
    for key, value in raw.items():
        if key in DEFAULT_ONLY and _text(value).lower() != DEFAULT_ONLY[key].lower():
            problems.append(ConfigProblem(key, value, f"is only supported at Debezium's default "
                                          f"({DEFAULT_ONLY[key] or 'unset'}): another value changes the events or "
                                          "the slot's handling in a way this connector does not implement"))
        elif key.startswith(NOT_SUPPORTED_PREFIXES) and _text(value):
            problems.append(ConfigProblem(key, value, "is not supported by this connector (column masking and "
                                          "truncation, signals, incremental and custom snapshots): remove it"))
    return problems


@dataclass(frozen=True)
class CdcConfig:
    """A parsed, valid PostgreSQL CDC connector config. Build it with :meth:`parse`.

    ``values`` holds every key typed (defaults filled in) plus unknown keys as given; the attributes
    are the ones the connector and the event builder read.
    """

    values: dict = field(repr=False)
    topic_prefix: str
    snapshot_mode: str
    skipped_operations: frozenset
    filters: Filters = field(repr=False, default_factory=lambda: Filters())

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, context: str | None = None) -> "CdcConfig":
        """The config of ``raw``; raises :class:`ConfigException` listing every problem (secrets hidden)."""
        raw = _normalise(raw)
        values, problems = CONFIG_DEF._parse(raw)
        problems += _cross_key_problems(raw, values)
        if problems:
            raise ConfigException(problems, context=context or (f"connector {raw.get('name')!r}"
                                                                  if raw.get("name") else None))
        mode = str(values[SNAPSHOT_MODE]).strip().lower()
        skipped = {o.strip().lower() for o in str(values[SKIPPED_OPERATIONS] or "").split(",") if o.strip()}

        return cls(
            values=values,
            topic_prefix=_text(values.get(TOPIC_PREFIX)) or _text(values.get(SERVER_NAME)),
            snapshot_mode=SNAPSHOT_MODE_ALIASES.get(mode, mode),
            skipped_operations=frozenset(skipped - {"none"}),
            filters=Filters.of(values),
        )

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    # ---------------------------------------------------------------- filters (see .filters)

    def table_included(self, schema: str, table: str) -> bool:
        """Whether changes of ``schema.table`` are captured (schema and table filters, system tables never)."""
        return self.filters.table_included(schema, table)

    def snapshot_included(self, schema: str, table: str) -> bool:
        """Whether the snapshot reads ``schema.table`` (captured, and in ``snapshot.include.collection.list``)."""
        return self.filters.snapshot_included(schema, table)

    def column_included(self, schema: str, table: str, column: str) -> bool:
        """Whether ``column`` is a field of the table's event values (``column.include/exclude.list``)."""
        return self.filters.column_included(schema, table, column)

    def message_key_columns(self, schema: str, table: str, columns) -> list[str] | None:
        """The columns ``message.key.columns`` makes the key of ``schema.table``; None: the primary key."""
        return self.filters.message_key_columns(schema, table, columns)

    @property
    def tombstones_on_delete(self) -> bool:
        return bool(self.values[TOMBSTONES_ON_DELETE])

    # ---------------------------------------------------------------- the database

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect`` (libpq's names: host, port, dbname, user, password,
        ssl*). Holds the password in clear: pass it on, never log or return it."""
        v = self.values
        if _text(v.get(CONNECTION_URL)):
            from sqlalchemy.engine import make_url

            url = make_url(_text(v[CONNECTION_URL]))
            kwargs: dict[str, Any] = {k: val for k, val in url.query.items()}
            kwargs.update(host=url.host, port=url.port or 5432, dbname=url.database,
                          user=_text(v.get(CONNECTION_USER)) or url.username)
            password = v.get(CONNECTION_PASSWORD)
            password = password.value if isinstance(password, Password) else (password or url.password)
        else:
            kwargs = {"host": v[HOSTNAME], "port": v[PORT], "dbname": v[DBNAME], "user": v[USER],
                      "sslmode": v[SSLMODE]}
            for key, libpq in ((SSLROOTCERT, "sslrootcert"), (SSLCERT, "sslcert"), (SSLKEY, "sslkey")):
                if _text(v.get(key)):
                    kwargs[libpq] = v[key]
            if v.get(SSLPASSWORD) is not None:
                kwargs["sslpassword"] = v[SSLPASSWORD].value
            password = v.get(PASSWORD)
            password = password.value if isinstance(password, Password) else password
        if password:
            kwargs["password"] = password
        return {k: val for k, val in kwargs.items() if val is not None}

    @property
    def database(self) -> str:
        """The database name (``source.db`` of every event)."""
        if _text(self.values.get(CONNECTION_URL)):
            from sqlalchemy.engine import make_url

            return make_url(_text(self.values[CONNECTION_URL])).database or ""
        return _text(self.values.get(DBNAME))

    def initial_statements(self) -> list[str]:
        """``database.initial.statements`` split as Debezium does (';' separates, ';;' is a literal ';')."""
        text = _text(self.values.get(INITIAL_STATEMENTS))
        if not text:
            return []
        parts = text.replace(";;", "\x00").split(";")
        return [p.replace("\x00", ";").strip() for p in parts if p.strip()]


def validate(raw: Mapping[str, Any]) -> list[ConfigProblem]:
    """Every problem with ``raw`` (an empty list when :meth:`CdcConfig.parse` would accept it)."""
    try:
        CdcConfig.parse(raw)
    except ConfigException as e:
        return e.problems
    return []
