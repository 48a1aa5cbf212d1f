"""Configuration of the JDBC sink: Confluent's ``JdbcSinkConfig`` keys as is, Debezium's JDBC sink keys too.

Confluent's keys are the sink's own (``insert.mode``, ``pk.mode``, ``pk.fields``,
``auto.create``, ``auto.evolve``, ...). Debezium's JDBC sink
(``io.debezium.connector.jdbc.JdbcSinkConnector``) names some of them differently;
those are accepted and mean the same (:data:`DEBEZIUM_KEYS`):

=============================  ===========================================
Debezium                       Confluent (what the sink uses)
=============================  ===========================================
``connection.username``        ``connection.user``
``primary.key.mode``           ``pk.mode``
``primary.key.fields``         ``pk.fields``
``schema.evolution=basic``     ``auto.create=true`` + ``auto.evolve=true``
``database.time_zone``         ``db.timezone``
``use.time.zone``              ``db.timezone``
``collection.name.format``     ``table.name.format``
``quote.identifiers``          ``quote.sql.identifiers`` (true = always)
=============================  ===========================================

Giving both names of one setting with different values is a config problem, and so is
a Debezium key that would change what is written and that the sink does not implement
(:data:`DEBEZIUM_UNSUPPORTED`).

Debezium's ``field.include.list`` / ``field.exclude.list`` are not ``fields.whitelist``:
each entry is a regular expression matched against the whole of ``<topic>:<field>``
(``server1.inventory.customers:email``), or, without a ``:``, against the whole field
name, in every topic (:func:`.rows.field_wanted`). ``fields.whitelist`` keeps
Confluent's meaning: plain field names. Only one of the three may be given.
:func:`effective` turns the parsed values into :class:`SinkSettings`, the one
typed view the task uses.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from airflow_copycat.connect import ConfigDef, ConfigProblem, ConfigType
from airflow_copycat.connect.config import in_range, one_of

from ..jdbc.config import (BATCH_ENABLED, CONNECTION_USER, _timezone, connection_problems,
                           define_connection)

INSERT_MODE = "insert.mode"
PK_MODE = "pk.mode"
PK_FIELDS = "pk.fields"
DELETE_ENABLED = "delete.enabled"
AUTO_CREATE = "auto.create"
AUTO_EVOLVE = "auto.evolve"
TABLE_NAME_FORMAT = "table.name.format"
FIELDS_WHITELIST = "fields.whitelist"
BATCH_SIZE = "batch.size"
DB_TIMEZONE = "db.timezone"
QUOTE_IDENTIFIERS = "quote.sql.identifiers"
MAX_RETRIES = "max.retries"
RETRY_BACKOFF_MS = "retry.backoff.ms"
OFFSETS_TABLE = "copycat.offsets.table"

INSERT_MODES = ("insert", "upsert", "update")
PK_MODES = ("none", "kafka", "record_key", "record_value")
KAFKA_PK_DEFAULTS = ("__connect_topic", "__connect_partition", "__connect_offset")

DEBEZIUM_KEYS = {
    "connection.username": CONNECTION_USER,
    "primary.key.mode": PK_MODE,
    "primary.key.fields": PK_FIELDS,
    "database.time_zone": DB_TIMEZONE,
    "use.time.zone": DB_TIMEZONE,
    "collection.name.format": TABLE_NAME_FORMAT,
    "quote.identifiers": QUOTE_IDENTIFIERS,
}
DEBEZIUM_CLASS = "io.debezium.connector.jdbc.JdbcSinkConnector"
"""With this connector class, ``${topic}`` is the topic with its dots replaced by ``_`` (Debezium's
default table naming: ``server1.inventory.customers`` -> ``server1_inventory_customers``)."""
DEBEZIUM_UNSUPPORTED = ("truncate.enabled", "collection.naming.strategy", "column.naming.strategy")
"""Debezium keys that would change what is written and that this sink does not implement: a config
problem when given (``truncate.enabled`` only when true), rather than silently ignored."""
FIELD_INCLUDE_LIST = "field.include.list"
FIELD_EXCLUDE_LIST = "field.exclude.list"
SCHEMA_EVOLUTION = "schema.evolution"


def _zone(key: str, value: Any) -> str | None:
    return None if value in (None, "") else _timezone(key, value)


def _regexes(key: str, value: Any) -> str | None:
    for entry in value or []:
        try:
            re.compile(entry)
        except re.error as e:
            return f"entry {entry!r} is not a regular expression: {e}"
    return None


def _quote(key: str, value: Any) -> str | None:
    if value in (None, "") or str(value).lower() in ("always", "never", "true", "false"):
        return None
    return "must be always or never (Debezium's quote.identifiers: true or false)"


CONFIG_DEF = (
    define_connection(ConfigDef())
    .define("connection.username", ConfigType.STRING, None, doc="Debezium's name of connection.user.")
    .define("topics", ConfigType.LIST, [], importance="high", doc="The topics to write.")
    .define("topics.regex", ConfigType.STRING, None, doc="Write every topic whose name matches this regex.")
    .define(INSERT_MODE, ConfigType.STRING, "insert", validator=one_of(*INSERT_MODES), importance="high",
            doc="insert: plain INSERTs (a duplicate key fails the record); upsert: insert or update on the primary "
                "key with the database's own statement (ON CONFLICT / ON DUPLICATE KEY UPDATE); update: UPDATE "
                "only, rows that do not exist are left alone.")
    .define(PK_MODE, ConfigType.STRING, "none", validator=one_of(*PK_MODES), importance="high",
            doc="Where the primary key comes from: none; kafka (topic, partition and offset, columns named by "
                "pk.fields or __connect_topic/__connect_partition/__connect_offset); record_key (the record key: "
                "a primitive key into the one column pk.fields names, a struct key's fields, all or those "
                "pk.fields lists); record_value (fields of the value: those pk.fields lists, else all).")
    .define("primary.key.mode", ConfigType.STRING, None, validator=lambda k, v: None if v in (None, "") else
            one_of(*PK_MODES)(k, v),
            doc="Debezium's name of pk.mode.")
    .define(PK_FIELDS, ConfigType.LIST, [], doc="The primary key's columns; see pk.mode.")
    .define("primary.key.fields", ConfigType.LIST, None, doc="Debezium's name of pk.fields.")
    .define(DELETE_ENABLED, ConfigType.BOOLEAN, False,
            doc="A tombstone (a record with a key and a null value) deletes the row with that key. Needs "
                "pk.mode=record_key.")
    .define(AUTO_CREATE, ConfigType.BOOLEAN, False,
            doc="Create a missing table from the first record's schema (primary key per pk.mode).")
    .define(AUTO_EVOLVE, ConfigType.BOOLEAN, False,
            doc="Add the columns of new optional fields (or fields with a default) to an existing table. A change "
                "that cannot be applied (a new required field without default) fails the run before it writes, "
                "naming the topic, partition, offset, table and column.")
    .define(SCHEMA_EVOLUTION, ConfigType.STRING, None, validator=lambda k, v: None if v in (None, "") else
            one_of("none", "basic")(k, v),
            doc="Debezium's: basic = auto.create and auto.evolve.")
    .define(TABLE_NAME_FORMAT, ConfigType.STRING, "${topic}",
            doc="The table of a topic's records; ${topic} is replaced by the topic name (with Debezium's connector "
                "class, its dots replaced by _, as Debezium names tables). A dot in the result separates schema "
                "and table: schema.table names a schema (use a RegexRouter transform for other names).")
    .define("collection.name.format", ConfigType.STRING, None,
            doc="Debezium's name of table.name.format (${topic} as there).")
    .define(FIELDS_WHITELIST, ConfigType.LIST, [],
            doc="The value fields written (all when empty); primary key columns are always written.")
    .define(FIELD_INCLUDE_LIST, ConfigType.LIST, None, validator=_regexes,
            doc="Debezium's: the value fields written (primary key columns are always written), as regular "
                "expressions, each matching the whole of topic:field (server1.inventory.customers:email) or, "
                "without a ':', the whole field name.")
    .define(FIELD_EXCLUDE_LIST, ConfigType.LIST, None, validator=_regexes,
            doc="Debezium's: the value fields not written, as field.include.list names them.")
    .define(BATCH_SIZE, ConfigType.INT, 3000, validator=in_range(1, None),
            doc="The most rows one statement writes; a consume round's records are written in one transaction.")
    .define(DB_TIMEZONE, ConfigType.STRING, "UTC", validator=_zone,
            doc="Timestamps are written as local time of this zone into columns without a time zone.")
    .define("database.time_zone", ConfigType.STRING, None, validator=_zone, doc="Debezium's name of db.timezone.")
    .define("use.time.zone", ConfigType.STRING, None, validator=_zone,
            doc="Debezium's current name of db.timezone.")
    .define(QUOTE_IDENTIFIERS, ConfigType.STRING, "always", validator=_quote,
            doc="always: table and column names are quoted (case and any character kept); never: written as "
                "given, so the database folds their case; a name that is not a plain identifier (letters, digits, _ "
                "and $) then fails the run naming the record.")
    .define("quote.identifiers", ConfigType.STRING, None, validator=_quote,
            doc="Debezium's name of quote.sql.identifiers (true = always).")
    .define(MAX_RETRIES, ConfigType.INT, 10, validator=in_range(0, None),
            doc="How often a write that failed for a reason that may pass (connection lost, deadlock, "
                "serialization failure) is tried again, the whole transaction each time.")
    .define(RETRY_BACKOFF_MS, ConfigType.INT, 3000, validator=in_range(0, None),
            doc="The wait before each retry of max.retries.")
    .define(OFFSETS_TABLE, ConfigType.STRING, "copycat_sink_offsets",
            doc="The table in the target database holding the sink's Kafka offsets, written in the same "
                "transaction as the rows (exactly-once); created when missing. schema.table names a schema.")
    .define(BATCH_ENABLED, ConfigType.BOOLEAN, True,
            doc="PostgreSQL: write a consume round's JsonConverter messages in columns (Arrow, bulk-loaded through "
                "ADBC), the fast path; false: through one record per message. Both give the same rows, offsets and "
                "errors; what the columns cannot write exactly as the records (other converters, tombstones, "
                "nested fields, update mode, a row the database refuses) is written through the records.")
)


@dataclasses.dataclass(frozen=True)
class SinkSettings:
    """The sink's settings, Debezium's names resolved (see the module docstring)."""

    insert_mode: str
    pk_mode: str
    pk_fields: tuple[str, ...]
    delete_enabled: bool
    auto_create: bool
    auto_evolve: bool
    table_name_format: str
    fields_whitelist: tuple[str, ...]
    batch_size: int
    db_timezone: str
    quote: bool
    max_retries: int
    retry_backoff_ms: int
    offsets_table: str
    batch_enabled: bool = True
    topic_dots_to_underscores: bool = False  # Debezium's connector class: its table naming
    field_include: tuple[str, ...] = ()  # Debezium's regexes (see the module docstring)
    field_exclude: tuple[str, ...] = ()


def _resolved(config: dict[str, Any]) -> tuple[dict[str, Any], list[ConfigProblem]]:
    """``config`` with every Debezium key moved to its Confluent name; a clash is a problem."""
    out, problems = dict(config), []
    for theirs, ours in DEBEZIUM_KEYS.items():
        value = config.get(theirs)
        if value in (None, "") or value == []:
            continue
        if theirs in ("quote.identifiers",):
            value = "always" if str(value).lower() in ("true", "always") else "never"
        default = CONFIG_DEF.keys[ours].default
        mine = config.get(ours)
        if mine not in (None, "", default) and mine != value:
            problems.append(ConfigProblem(theirs, value, f"says something else than {ours}={mine!r}: give one"))
        out[ours] = value
    evolution = str(config.get(SCHEMA_EVOLUTION) or "").lower()
    if evolution == "basic":
        out[AUTO_CREATE] = out[AUTO_EVOLVE] = True
    return out, problems


def effective(config: dict[str, Any]) -> SinkSettings:
    """The settings of a parsed config (Debezium keys resolved)."""
    c, _ = _resolved(config)
    quote = str(c.get(QUOTE_IDENTIFIERS) or "always").lower() in ("always", "true")
    return SinkSettings(
        insert_mode=str(c[INSERT_MODE]).lower(), pk_mode=str(c[PK_MODE]).lower(),
        pk_fields=tuple(f for f in c.get(PK_FIELDS) or [] if f), delete_enabled=bool(c[DELETE_ENABLED]),
        auto_create=bool(c[AUTO_CREATE]), auto_evolve=bool(c[AUTO_EVOLVE]),
        table_name_format=str(c[TABLE_NAME_FORMAT]), fields_whitelist=tuple(f for f in c.get(FIELDS_WHITELIST) or []
                                                                             if f),
        batch_size=int(c[BATCH_SIZE]), db_timezone=str(c[DB_TIMEZONE]), quote=quote,
        max_retries=int(c[MAX_RETRIES]), retry_backoff_ms=int(c[RETRY_BACKOFF_MS]),
        offsets_table=str(c[OFFSETS_TABLE]), batch_enabled=bool(c.get(BATCH_ENABLED, True)),
        field_include=_entries(c.get(FIELD_INCLUDE_LIST)), field_exclude=_entries(c.get(FIELD_EXCLUDE_LIST)),
        topic_dots_to_underscores=str(c.get("connector.class") or "") == DEBEZIUM_CLASS)


def _entries(value: Any) -> tuple[str, ...]:
    return tuple(e.strip() for e in value or [] if e and e.strip())


def validate(config: dict[str, Any]) -> list[ConfigProblem]:
    """Cross-key problems, every one of them (Confluent's rules: upsert and update need a primary key,
    deletes need ``pk.mode=record_key``, ``pk.mode=kafka`` takes three column names or none)."""
    c, problems = _resolved(config)
    problems += connection_problems(c)
    if not c.get("topics") and not c.get("topics.regex"):
        problems.append(ConfigProblem("topics", c.get("topics"), "is required (or topics.regex): the topics to write"))
    problems += _name_problems(c)
    mode, pk_mode = str(c.get(INSERT_MODE) or "").lower(), str(c.get(PK_MODE) or "").lower()
    pk_fields = [f for f in c.get(PK_FIELDS) or [] if f]
    if mode in ("upsert", "update") and pk_mode == "none":
        problems.append(ConfigProblem(PK_MODE, pk_mode, f"insert.mode={mode} needs a primary key: set pk.mode to "
                                      "record_key, record_value or kafka"))
    if c.get(DELETE_ENABLED) in (True, "true") and pk_mode != "record_key":
        problems.append(ConfigProblem(DELETE_ENABLED, True, "needs pk.mode=record_key: a tombstone carries only the "
                                      "record key"))
    if len(set(pk_fields)) != len(pk_fields):
        problems.append(ConfigProblem(PK_FIELDS, pk_fields, "names a column twice"))
    if pk_mode == "kafka" and pk_fields and len(pk_fields) != 3:
        problems.append(ConfigProblem(PK_FIELDS, pk_fields, "pk.mode=kafka takes three column names (topic, "
                                      "partition, offset) or none for __connect_topic, __connect_partition, "
                                      "__connect_offset"))
    for key in DEBEZIUM_UNSUPPORTED:
        given = c.get(key)
        if given not in (None, "") and (key != "truncate.enabled" or str(given).lower() == "true"):
            problems.append(ConfigProblem(key, given, "is Debezium's and not supported by this sink (it would "
                                          "change what is written): remove it"))
    selections = [k for k in (FIELDS_WHITELIST, FIELD_INCLUDE_LIST, FIELD_EXCLUDE_LIST) if c.get(k)]
    if len(selections) > 1:
        problems.append(ConfigProblem(selections[1], c.get(selections[1]), f"and {selections[0]} both choose the "
                                      "value fields: give one (field.include.list and field.exclude.list are "
                                      "regexes of topic:field, fields.whitelist plain field names)"))
    if pk_mode == "none" and pk_fields:
        problems.append(ConfigProblem(PK_FIELDS, pk_fields, "is set but pk.mode=none uses no primary key"))
    if "${topic}" not in str(c.get(TABLE_NAME_FORMAT) or "${topic}") and not c.get("topics"):
        problems.append(ConfigProblem(TABLE_NAME_FORMAT, c.get(TABLE_NAME_FORMAT),
                                      "without ${topic} writes every topic to one table: name the topics"))
    return problems


def _name_problems(c: dict[str, Any]) -> list[ConfigProblem]:
    """An empty table.name.format (it would name every table ''), and a copycat.offsets.table of more
    parts than schema.table."""
    problems = []
    if c.get(TABLE_NAME_FORMAT) is not None and not str(c.get(TABLE_NAME_FORMAT)).strip():
        problems.append(ConfigProblem(TABLE_NAME_FORMAT, c.get(TABLE_NAME_FORMAT), "is empty: give the table's "
                                      "name (${topic} is the topic's)"))
    offsets = str(c.get(OFFSETS_TABLE) or "")
    if offsets.count(".") > 1 or any(not part for part in offsets.split(".")):
        problems.append(ConfigProblem(OFFSETS_TABLE, offsets, "must be table or schema.table"))
    return problems
