"""Airflow connections for database connectors.

A connector config may name an Airflow connection instead of spelling out the
database: ``"airflow.conn.id": "shop_db"``. The Airflow layer (plan and run
operators, the partition sensor) calls :func:`resolve_db_connection` before
anything else, which fills Kafka Connect's keys from the connection:

* ``connection.url``  -- a SQLAlchemy URL *without* the password;
* ``connection.user`` -- the login;
* ``connection.password`` -- the password, a PASSWORD key: plans, XCom, the
  group JSON and logs show ``[hidden]``; Spark tasks get it through the
  environment (see :mod:`airflow_copycat.runtime.submit`), and it is registered
  with Airflow's secrets masker.

The URL comes from the connection's own SQL hook, as every common-sql operator
gets it: ``conn.get_hook()`` (a ``DbApiHook`` of the connection type's
provider) and its ``sqlalchemy_url`` (or ``get_uri()`` for hooks without one, as
``get_sqlalchemy_engine`` does). So any connection type whose provider is
installed and builds a SQLAlchemy URL works, with the hook's extras
(``sqlalchemy_scheme``, ``sqlalchemy_query``) and its ways of getting a password
(PostgreSQL's ``"iam": true``: the hook's IAM token becomes the password). Then:

* the driver: PostgreSQL runs on psycopg 3 (``postgresql+psycopg``) and
  MySQL/MariaDB on PyMySQL (``mysql+pymysql``), what the ``jdbc`` extra
  installs on every Spark executor, whatever driver the hook would use
  (psycopg2, mysqlclient) -- unless the extra names ``sqlalchemy_scheme``;
* connect parameters: for PostgreSQL, MySQL/MariaDB and SQLite the
  connection's scalar extras (``sslmode``, ``options``, ``connect_timeout``,
  ``charset``...) become URL query parameters the driver receives, as the
  providers' ``get_conn`` passes them, except the hooks' own keys (``cursor``,
  ``iam``, ``aws_conn_id``, ...). Other types keep exactly the hook's URL. The
  MySQL provider's TLS extras (``ssl``: ``{"ca": ...}``, ``ssl_mode``) become
  PyMySQL's ``ssl_*`` parameters: ``REQUIRED`` turns TLS on, ``VERIFY_*`` need
  the CA; TLS is never silently off.

Without the type's provider, ``postgres``, ``mysql``/``mariadb`` and ``sqlite``
connections are still read directly (host, port, schema, extras; SQLite: the
host is the database file's path). Outside Airflow (``copycat`` CLI) give
``connection.url`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import URL, make_url

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import mask_secret

from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException
from ..connect.secrets import is_secret_key, scrub

CONN_ID_KEY = "airflow.conn.id"

# the types read without their provider's hook (that provider not installed)
_DRIVERS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "sqlite": "sqlite",
}
# the driver the runtime connects with, per SQLAlchemy dialect (the jdbc extra installs them)
_RUNTIME_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql", "mariadb": "mysql+pymysql"}
# dialects whose providers hand the connection's extras to the driver as connect parameters
_EXTRAS_AS_PARAMS = {"postgresql", "mysql", "mariadb", "sqlite"}
_URL_KEYS = ("connection.url", "connection.user", "connection.password")
# extra keys of Airflow's own SQL hooks that are not database connect parameters
_NOT_URL_PARAMS = {"cursor", "iam", "redshift", "redshift-serverless", "cluster-identifier", "workgroup-name",
                   "aws_conn_id", "azure_conn_id", "local_infile", "client", "sql_alchemy_scheme",
                   "sqlalchemy_scheme", "sqlalchemy_query", "log_sql", "enable_log_db_messages", "ssl",
                   "unix_socket", "ssl_mode", "use_unicode"}


def resolve_db_connection(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the flat connector config ``raw`` with ``connection.url/user/password`` taken from
    the Airflow connection named by ``airflow.conn.id``; ``raw`` unchanged (copied) without that key.

    Raises :class:`~airflow_copycat.connect.errors.ConfigException` naming the key when the
    connection does not exist, is no SQL connection (its hook is not a ``DbApiHook``, or its
    provider is not installed), its hook cannot build a URL, or when ``connection.*`` keys are
    also set (one source of truth). Never puts the password in an error.
    """
    out = dict(raw)
    conn_id = str(raw.get(CONN_ID_KEY) or "").strip()
    if not conn_id:
        return out
    context = f"connector {raw.get('name')!r}"
    clash = [k for k in _URL_KEYS if raw.get(k) not in (None, "")]
    if clash:
        raise ConfigException([ConfigProblem(k, raw[k] if k == "connection.user" else None,  # a URL may hold a password
                                             f"cannot be combined with {CONN_ID_KEY}={conn_id!r}: give one or the other")
                               for k in clash], context=context)
    from airflow.sdk import BaseHook

    def problem(message: str) -> ConfigException:
        return ConfigException([ConfigProblem(CONN_ID_KEY, conn_id, message)], context=context)

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as e:  # AirflowNotFoundException, or the secrets backend failing
        raise problem(f"is not a usable Airflow connection: {e}") from None
    if conn.password:
        mask_secret(conn.password)  # before anything can fail with it in a message
    extra = conn.extra_dejson if conn.extra else {}
    hook = _sql_hook(conn, problem)
    if hook is None:
        url = _direct_url(conn, extra, problem)
    else:
        url = _hook_url(hook, conn, problem)
        if url.get_backend_name() in _EXTRAS_AS_PARAMS:
            url = url.update_query_dict(_connect_params(extra, set(getattr(hook, "ignored_extra_options", ()) or ())))
    if url.get_backend_name() in ("mysql", "mariadb"):
        url = url.update_query_dict(_mysql_tls(extra, problem))
    if url.get_backend_name() in _RUNTIME_DRIVERS and not extra.get("sqlalchemy_scheme"):
        url = url.set(drivername=_RUNTIME_DRIVERS[url.get_backend_name()])
    login, password = url.username, url.password  # the hook's: e.g. an IAM token in place of the password
    bare = URL.create(url.drivername, host=url.host, port=url.port, database=url.database, query=url.query)
    for key, value in url.query.items():  # e.g. libpq's sslpassword: the plan hides it (connect.secrets)
        if is_secret_key(key):
            for v in value if isinstance(value, tuple) else (value,):
                mask_secret(str(v))
    out["connection.url"] = bare.render_as_string(hide_password=False)
    if login:
        out["connection.user"] = login
    if password:
        mask_secret(password)
        out["connection.password"] = password
    return out


def _sql_hook(conn: Any, problem) -> Any:
    """The connection's SQL hook (a common-sql ``DbApiHook``); ``None`` when no installed provider has a
    hook for its type and it is one we read directly."""
    conn_type = str(conn.conn_type or "").lower()
    try:
        hook = conn.get_hook()
    except Exception as e:  # "Unknown hook type", or the provider's hook failing to import
        if conn_type in _DRIVERS:
            return None
        raise problem(f"has connection type {conn.conn_type!r}, whose SQL hook is not available ({_scrub(e, conn)}): "
                      f"install the provider of that type, or use one of {sorted(set(_DRIVERS))}") from None
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    if not isinstance(hook, DbApiHook):
        raise problem(f"has connection type {conn.conn_type!r}, which is no SQL database connection "
                      f"({type(hook).__name__} is not a DbApiHook of common-sql)")
    return hook


def _hook_url(hook: Any, conn: Any, problem) -> URL:
    """The hook's SQLAlchemy URL, with user and password (e.g. an IAM token the hook fetched)."""
    try:
        try:
            return hook.sqlalchemy_url
        except NotImplementedError:  # as DbApiHook.get_sqlalchemy_engine does
            return make_url(hook.get_uri())
    except Exception as e:  # noqa: BLE001 -- an IAM token not obtained, a malformed extra...
        raise problem(f"gives no SQLAlchemy URL through {type(hook).__name__}: {_scrub(e, conn)}") from None


def _direct_url(conn: Any, extra: Mapping[str, Any], problem) -> URL:
    """The URL of a postgres/mysql/sqlite connection read without its provider (not installed)."""
    driver = _DRIVERS[str(conn.conn_type or "").lower()]
    query = _connect_params(extra, set())
    if driver == "sqlite":
        return URL.create("sqlite", database=conn.host or conn.schema or None, query=query)
    if extra.get("iam"):
        raise problem("asks for IAM authentication (extra \"iam\"), which needs the provider's hook: "
                      "install apache-airflow-providers-postgres")
    return URL.create(driver, username=conn.login or None, password=conn.password or None, host=conn.host or None,
                      port=conn.port or None, database=conn.schema or None, query=query)


def _mysql_tls(extra: Mapping[str, Any], problem) -> dict[str, str]:
    """The MySQL provider's TLS extras (``ssl``: a dict or JSON of ``ca``/``cert``/``key``...; ``ssl_mode``,
    mysqlclient's) as PyMySQL's URL parameters, so that TLS is never silently off."""
    import json

    ssl = extra.get("ssl") or {}
    if isinstance(ssl, str):
        try:
            ssl = json.loads(ssl)
        except ValueError:
            raise problem("has an extra \"ssl\" that is not a JSON object (ca, cert, key...)") from None
    params = {f"ssl_{k}": str(v) for k, v in dict(ssl).items()
              if k in ("ca", "cert", "key", "capath", "cipher") and v not in (None, "")}
    if "check_hostname" in ssl:
        params["ssl_check_hostname"] = str(bool(ssl["check_hostname"])).lower()
    mode = str(extra.get("ssl_mode") or "").upper()
    if mode == "REQUIRED" or (mode == "VERIFY_CA" and params.get("ssl_ca")):
        params.setdefault("ssl_check_hostname", "false")  # TLS, the certificate checked against ssl_ca if given
    elif mode == "VERIFY_IDENTITY" and params.get("ssl_ca"):
        params["ssl_check_hostname"] = "true"
    elif mode in ("VERIFY_CA", "VERIFY_IDENTITY"):
        raise problem(f"has ssl_mode {mode}, which needs the CA: give the extra \"ssl\": {{\"ca\": \"/path/ca.pem\"}}")
    elif mode not in ("", "DISABLED", "PREFERRED"):
        raise problem(f"has ssl_mode {mode!r}: use DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY")
    return params


def _connect_params(extra: Mapping[str, Any], ignored: set[str]) -> dict[str, str]:
    """The connection's scalar extras that are driver connect parameters, as URL query values."""
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in extra.items()
            if k not in _NOT_URL_PARAMS and k not in ignored and isinstance(v, (str, int, float, bool))}


def _scrub(error: BaseException, conn: Any) -> str:
    return scrub(error, [conn.password])
