"""Configuration of the JDBC source: Confluent's ``JdbcSourceConnectorConfig`` keys, as is.

``connection.url`` is a SQLAlchemy URL (``postgresql+psycopg://h:5432/db``,
``mysql+pymysql://h:3306/db``, ``sqlite:///path.db``) or a JDBC URL that
:func:`to_sqlalchemy_url` translates (``jdbc:postgresql://h:p/db``,
``jdbc:mysql://``, ``jdbc:mariadb://``, ``jdbc:sqlite:path``).
``connection.password`` is a PASSWORD: never shown in problems, logs or repr.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

from sqlalchemy.engine import URL, make_url

from airflow_copycat.connect import ConfigDef, ConfigProblem, ConfigType
from airflow_copycat.connect.config import in_range, one_of

from . import splits

log = logging.getLogger(__name__)

CONNECTION_URL = "connection.url"
CONNECTION_USER = "connection.user"
CONNECTION_PASSWORD = "connection.password"
MODE = "mode"
INCREMENTING_COLUMN = "incrementing.column.name"
TIMESTAMP_COLUMN = "timestamp.column.name"
TABLE_WHITELIST = "table.whitelist"
TABLE_BLACKLIST = "table.blacklist"
TABLE_INCLUDE = "table.include.list"
TABLE_EXCLUDE = "table.exclude.list"
TABLE_TYPES = "table.types"
SCHEMA_PATTERN = "schema.pattern"
QUERY = "query"
TOPIC_PREFIX = "topic.prefix"
BATCH_MAX_ROWS = "batch.max.rows"
POLL_INTERVAL_MS = "poll.interval.ms"
TABLE_POLL_INTERVAL_MS = "table.poll.interval.ms"
TIMESTAMP_DELAY_MS = "timestamp.delay.interval.ms"
TIMESTAMP_INITIAL = "timestamp.initial"
DB_TIMEZONE = "db.timezone"
VALIDATE_NON_NULL = "validate.non.null"
NUMERIC_MAPPING = "numeric.mapping"
LOOKBACK_MS = "copycat.lookback.ms"
LOOKBACK_MAX_ROWS = "copycat.lookback.max.rows"
BATCH_ENABLED = "copycat.batch.enabled"

MODE_BULK = "bulk"
MODE_INCREMENTING = "incrementing"
MODE_TIMESTAMP = "timestamp"
MODE_TIMESTAMP_INCREMENTING = "timestamp+incrementing"
MODES = (MODE_BULK, MODE_TIMESTAMP, MODE_INCREMENTING, MODE_TIMESTAMP_INCREMENTING)
NUMERIC_MAPPINGS = ("none", "precision_only", "best_fit")
TIMESTAMP_INITIAL_CURRENT = -1


def _timezone(key: str, value: Any) -> str | None:
    if value is None:
        return None
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(str(value))
    except Exception:
        return "is not a known time zone (examples: UTC, Europe/Berlin, America/New_York)"
    return None


def _table_types(key: str, value: Any) -> str | None:
    bad = [t for t in value or [] if t.upper() not in ("TABLE", "VIEW")]
    return f"unsupported table type(s) {bad}: use TABLE and/or VIEW" if bad else None


def define_connection(config_def: ConfigDef) -> ConfigDef:
    """``config_def`` with the database keys every JDBC connector shares (``connection.url``,
    ``connection.user``, ``connection.password``); checked by :func:`connection_problems`."""
    return (config_def
            .define(CONNECTION_URL, ConfigType.STRING, None, importance="high",
                    doc="The database: a SQLAlchemy URL, or a JDBC URL (jdbc:postgresql://host:port/db, "
                        "jdbc:mysql://, jdbc:mariadb://, jdbc:sqlite:path).")
            .define(CONNECTION_USER, ConfigType.STRING, None, importance="high", doc="The database user.")
            .define(CONNECTION_PASSWORD, ConfigType.PASSWORD, None, importance="high",
                    doc="The database password."))


CONFIG_DEF = (
    define_connection(ConfigDef())
    .define(MODE, ConfigType.STRING, None, validator=one_of(*MODES), importance="high",
            doc="How each poll finds new rows: bulk (the whole table each run), incrementing (a strictly "
                "increasing column), timestamp (a last-modified column), or timestamp+incrementing (both: "
                "the only mode that sees updates and never misses rows that share a timestamp).")
    .define(INCREMENTING_COLUMN, ConfigType.STRING, "", importance="medium",
            doc="The strictly increasing column (incrementing and timestamp+incrementing modes).")
    .define(TIMESTAMP_COLUMN, ConfigType.LIST, [], importance="medium",
            doc="Timestamp column(s); several are coalesced in the order given (timestamp modes). Rows whose "
                "coalesced timestamp is NULL are never read in timestamp modes.")
    .define(TABLE_WHITELIST, ConfigType.LIST, [], doc="Tables to read (name or schema.name); all when empty.")
    .define(TABLE_BLACKLIST, ConfigType.LIST, [], doc="Tables not to read.")
    .define(TABLE_INCLUDE, ConfigType.LIST, [], doc="Same as table.whitelist (newer name).")
    .define(TABLE_EXCLUDE, ConfigType.LIST, [], doc="Same as table.blacklist (newer name).")
    .define(TABLE_TYPES, ConfigType.LIST, ["TABLE"], validator=_table_types, doc="TABLE and/or VIEW.")
    .define(SCHEMA_PATTERN, ConfigType.STRING, None,
            doc="SQL LIKE pattern of the schemas to read tables from; the connection's default schema when unset.")
    .define(QUERY, ConfigType.STRING, "", importance="medium",
            doc="Custom query mode: read the result of this SELECT instead of tables (one partition "
                "{\"query\": \"query\"}, records to the topic named topic.prefix exactly, no key). The connector "
                "reads SELECT * FROM (<query>) copycat_q WHERE <mode's conditions>, so the query may have its own "
                "WHERE/JOIN; the incrementing and timestamp columns must be columns of its result. Cannot be "
                "combined with a table list.")
    .define(TOPIC_PREFIX, ConfigType.STRING, None, importance="high",
            doc="Prefix of the topic names: a table's records go to <prefix><table name>.")
    .define(BATCH_MAX_ROWS, ConfigType.INT, 100, validator=in_range(1, None),
            doc="The most rows one poll returns (a batch may exceed it only in timestamp mode, to keep rows "
                "sharing one timestamp together).")
    .define(POLL_INTERVAL_MS, ConfigType.INT, 5000, validator=in_range(0, None),
            doc="Accepted for compatibility; a bounded run polls until caught up.")
    .define(TABLE_POLL_INTERVAL_MS, ConfigType.LONG, 60000, validator=in_range(0, None),
            doc="Accepted for compatibility; new tables are found when the connector is planned.")
    .define(TIMESTAMP_DELAY_MS, ConfigType.LONG, 0, validator=in_range(0, None),
            doc="Rows are read only once their timestamp is this much older than the database's clock, so a "
                "transaction that commits late with an older timestamp is still read.")
    .define(LOOKBACK_MS, ConfigType.LONG, 0, validator=in_range(0, None), importance="medium",
            doc="Timestamp modes: each run also re-reads the rows whose timestamp lies within this many ms before "
                "the committed one and emits those it has not emitted (de-duplicated on timestamp + primary key, "
                "or incrementing value, kept in the offset), so rows committed late with older timestamps are "
                "not lost. 0 = off.")
    .define(LOOKBACK_MAX_ROWS, ConfigType.INT, 10000, validator=in_range(1, None),
            doc="The most rows the look-back remembers per partition: more rows within copycat.lookback.ms of the "
                "last timestamp fail the task (never silently forget).")
    .define(TIMESTAMP_INITIAL, ConfigType.LONG, None,
            doc="Where timestamp modes start without a committed offset: epoch milliseconds, or -1 for the "
                "database's current time. Unset: from the beginning.")
    .define(DB_TIMEZONE, ConfigType.STRING, "UTC", validator=_timezone,
            doc="The time zone of timestamp columns without a time zone. Offsets are always UTC.")
    .define(VALIDATE_NON_NULL, ConfigType.BOOLEAN, True,
            doc="Fail when an incrementing or timestamp column is nullable.")
    .define(NUMERIC_MAPPING, ConfigType.STRING, "none", validator=one_of(*NUMERIC_MAPPINGS),
            doc="none: NUMERIC/DECIMAL as Connect Decimal; precision_only: NUMERIC(p,0) with p <= 18 as the "
                "smallest integer type; best_fit: that, plus NUMERIC(p,s>0) with p <= 15 as FLOAT64.")
    .define(splits.SPLIT_COLUMN, ConfigType.LIST, [], validator=splits.check_split_column, doc=splits.SPLIT_COLUMN_DOC)
    .define(splits.SPLIT_COUNT, ConfigType.INT, 1, validator=in_range(1, None), doc=splits.SPLIT_COUNT_DOC)
    .define(BATCH_ENABLED, ConfigType.BOOLEAN, True,
            doc="Read rows into columnar (Arrow) batches, the fast path; false: one record per row. Both give the "
                "same records, offsets and errors; tables with a column type batches cannot hold, and look-back "
                "reads, always use records.")
)


# JDBC URL properties PostgreSQL's JDBC driver shares with libpq (psycopg takes them as they are)
_LIBPQ_KEYS = {"sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "application_name", "options",
               "target_session_attrs"}

_JDBC_SCHEMES = {
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
}


def to_sqlalchemy_url(url: str, user: str | None = None, password: str | None = None) -> URL:
    """A SQLAlchemy URL for ``url`` (SQLAlchemy or JDBC form) with ``user``/``password`` set when given.

    Raises ``ValueError`` naming what is wrong (never the password)."""
    url = url.strip()
    if url.startswith("jdbc:"):
        rest = url[len("jdbc:"):]
        if rest.startswith("sqlite:"):
            path = rest[len("sqlite:"):]
            built = URL.create("sqlite", database=None if path in ("", ":memory:") else path)
        else:
            scheme, sep, _ = rest.partition("://")
            if not sep or scheme not in _JDBC_SCHEMES:
                raise ValueError("is not a supported JDBC URL (jdbc:postgresql://, jdbc:mysql://, jdbc:mariadb://, "
                                 "jdbc:sqlite:)")
            parts = urlsplit(rest)
            query = dict(parse_qsl(parts.query))
            if ";" in parts.path:
                raise ValueError("uses ';' properties; put them in the query string instead")
            qs_user, qs_password = query.pop("user", None), query.pop("password", None)
            keep = {k: v for k, v in query.items() if scheme == "postgresql" and k in _LIBPQ_KEYS}
            dropped = sorted(set(query) - set(keep))
            if any(k.lower().startswith(("ssl", "usessl", "requiressl", "verifyservercertificate")) for k in dropped):
                raise ValueError(f"has TLS properties {dropped} that cannot be translated (TLS would silently be off): "
                                 "give a SQLAlchemy URL with the driver's own parameters")
            if dropped:
                log.warning("JDBC URL properties %s have no SQLAlchemy equivalent and are ignored", dropped)
            built = URL.create(_JDBC_SCHEMES[scheme], username=parts.username or qs_user,
                               password=parts.password or qs_password, host=parts.hostname, port=_port(parts),
                               database=parts.path.lstrip("/") or None, query=keep)
    else:
        try:
            built = make_url(url)
        except Exception:
            raise ValueError("is neither a SQLAlchemy URL nor a JDBC URL") from None
        if built.drivername == "postgresql":
            built = built.set(drivername="postgresql+psycopg")
        elif built.drivername in ("mysql", "mariadb"):
            built = built.set(drivername="mysql+pymysql")
    if user:
        built = built.set(username=user)
    if password:
        built = built.set(password=password)
    return built


def _port(parts: SplitResult) -> int | None:
    """The port of a split JDBC URL. Raises ``ValueError`` with a fixed text when it is not a number:
    ``urlsplit`` ends the host part at the first '/', '?' or '#', so an unencoded one in the password
    leaves the password's head where the port should be, and the parser's own message would quote it."""
    try:
        return parts.port
    except ValueError:
        raise ValueError("has a port that is not a number; percent-encode '/', '?' and '#' in a password") from None


def _columns(config: dict) -> tuple[str, list[str]]:
    return str(config.get(INCREMENTING_COLUMN) or "").strip(), [c for c in config.get(TIMESTAMP_COLUMN) or [] if c]


def connection_problems(config: dict[str, Any]) -> list[ConfigProblem]:
    """What is wrong with the database a JDBC connector's config names (``connection.url``, or an
    ``airflow.conn.id`` only the Airflow layer resolves); shown values never hold a password."""
    url = config.get(CONNECTION_URL)
    if not str(url or "").strip():
        if config.get("airflow.conn.id"):
            return [ConfigProblem("airflow.conn.id", config.get("airflow.conn.id"),
                                  "is resolved only by the Airflow operators and sensors; outside Airflow "
                                  "give connection.url (and connection.user/connection.password)")]
        return [ConfigProblem(CONNECTION_URL, url, "is required: the database's SQLAlchemy or JDBC URL "
                              "(or airflow.conn.id, an Airflow connection, in a DAG)")]
    try:
        to_sqlalchemy_url(str(url))
    except ValueError as e:
        shown = str(url).split(":")[0] + ":..."  # never more: URLs come in forms that hide passwords differently
        return [ConfigProblem(CONNECTION_URL, shown, str(e))]
    return []


def validate(config: dict[str, Any]) -> list[ConfigProblem]:
    """Cross-key problems, every one of them."""
    problems = connection_problems(config)
    if config.get(TOPIC_PREFIX) is None:
        problems.append(ConfigProblem(TOPIC_PREFIX, None, "is required: the prefix of the topic names"))
    mode = str(config.get(MODE) or "")
    if mode not in MODES:
        problems.append(ConfigProblem(MODE, config.get(MODE), "is required: one of " + ", ".join(MODES)))
    inc, ts = _columns(config)
    if mode in (MODE_INCREMENTING, MODE_TIMESTAMP_INCREMENTING) and not inc:
        problems.append(ConfigProblem(INCREMENTING_COLUMN, config.get(INCREMENTING_COLUMN),
                                      f"is required in mode {mode}: the strictly increasing column"))
    if mode in (MODE_TIMESTAMP, MODE_TIMESTAMP_INCREMENTING) and not ts:
        problems.append(ConfigProblem(TIMESTAMP_COLUMN, config.get(TIMESTAMP_COLUMN),
                                      f"is required in mode {mode}: the last-modified timestamp column(s)"))
    if str(config.get(QUERY) or "").strip():
        lists = [k for k in (TABLE_WHITELIST, TABLE_INCLUDE, TABLE_BLACKLIST, TABLE_EXCLUDE) if config.get(k)]
        if lists:
            problems.append(ConfigProblem(QUERY, config.get(QUERY), f"cannot be combined with {', '.join(lists)}: "
                                          "give either a query or tables"))
    lookback = config.get(LOOKBACK_MS)
    if isinstance(lookback, int) and lookback > 0 and mode in (MODE_BULK, MODE_INCREMENTING):
        problems.append(ConfigProblem(LOOKBACK_MS, lookback, f"needs a timestamp mode (timestamp or "
                                      f"timestamp+incrementing), not mode {mode}"))
    if (config.get(TABLE_WHITELIST) or config.get(TABLE_INCLUDE)) and (
            config.get(TABLE_BLACKLIST) or config.get(TABLE_EXCLUDE)):
        problems.append(ConfigProblem(TABLE_BLACKLIST, config.get(TABLE_BLACKLIST) or config.get(TABLE_EXCLUDE),
                                      "cannot be combined with table.whitelist/table.include.list"))
    initial = config.get(TIMESTAMP_INITIAL)
    if initial is not None and isinstance(initial, int) and initial < 0 and initial != TIMESTAMP_INITIAL_CURRENT:
        problems.append(ConfigProblem(TIMESTAMP_INITIAL, initial,
                                      "must be epoch milliseconds (>= 0) or -1 for the database's current time"))
    problems += splits.config_problems(config)
    return problems
