"""Airflow connections for database connectors.

A connector config may name an Airflow connection instead of spelling out the
database: ``"airflow.conn.id": "shop_db"``. The Airflow layer (plan and run
operators, the partition sensor) calls :func:`resolve_db_connection` before
anything else, which fills Kafka Connect's keys from the connection:

* ``connection.url``  -- a SQLAlchemy URL *without* the password, from the
  connection's type, host, port and schema (the database); the connection's
  extra adds URL query parameters (``{"sslmode": "require"}``);
* ``connection.user`` -- the login;
* ``connection.password`` -- the password, a PASSWORD key: plans, XCom, the
  group JSON and logs show ``[hidden]``; Spark tasks get it through the
  environment (see :mod:`airflow_copycat.runtime.submit`), and it is registered
  with Airflow's secrets masker.

Connection types: ``postgres`` (psycopg), ``mysql`` (pymysql, also MariaDB) and
``sqlite`` (the host is the database file's path, as Airflow's SQLite provider
has it). Outside Airflow (``copycat`` CLI) give ``connection.url`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import URL

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import mask_secret

from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException

CONN_ID_KEY = "airflow.conn.id"

_DRIVERS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "sqlite": "sqlite",
}
_URL_KEYS = ("connection.url", "connection.user", "connection.password")
# extra keys of Airflow's own SQL hooks that are not database connect parameters
_NOT_URL_PARAMS = {"cursor", "iam", "redshift", "aws_conn_id", "local_infile", "client", "sql_alchemy_scheme",
                   "sqlalchemy_scheme", "sqlalchemy_query", "log_sql", "enable_log_db_messages"}


def resolve_db_connection(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the flat connector config ``raw`` with ``connection.url/user/password`` taken from
    the Airflow connection named by ``airflow.conn.id``; ``raw`` unchanged (copied) without that key.

    Raises :class:`~airflow_copycat.connect.errors.ConfigException` naming the key when the
    connection does not exist, has an unsupported type, or when ``connection.*`` keys are also
    set (one source of truth). Never puts the password in an error.
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

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as e:  # AirflowNotFoundException, or the secrets backend failing
        raise ConfigException([ConfigProblem(CONN_ID_KEY, conn_id, f"is not a usable Airflow connection: {e}")],
                              context=context) from None
    driver = _DRIVERS.get(str(conn.conn_type or "").lower())
    if driver is None:
        raise ConfigException([ConfigProblem(
            CONN_ID_KEY, conn_id, f"has connection type {conn.conn_type!r}; use one of {sorted(set(_DRIVERS))}")],
            context=context)
    extra = conn.extra_dejson if conn.extra else {}
    query = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in extra.items()
             if k not in _NOT_URL_PARAMS and isinstance(v, (str, int, float, bool))}
    if driver == "sqlite":
        url = URL.create("sqlite", database=conn.host or conn.schema or None, query=query)
    else:
        url = URL.create(driver, host=conn.host or None, port=conn.port or None, database=conn.schema or None,
                         query=query)
    out["connection.url"] = url.render_as_string(hide_password=False)
    if conn.login:
        out["connection.user"] = conn.login
    if conn.password:
        mask_secret(conn.password)
        out["connection.password"] = conn.password
    return out
