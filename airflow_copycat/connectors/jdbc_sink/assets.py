"""The Airflow Asset URI of a table the JDBC sink wrote, in the form Airflow's database providers use.

``postgres://host:port/database/schema/table`` (the Postgres provider's form; schema ``public``
unless the table name has one), ``mysql://host:port/database/table``, and for SQLite
``sqlite:///<absolute path of the file>/table``. Built from the connector's ``connection.url``
(host, port and database only: never the user or password); ``None`` when there is none (an
``airflow.conn.id`` not resolved) or it cannot be parsed.
"""

from __future__ import annotations

import os
from typing import Any

from ..jdbc.config import to_sqlalchemy_url


def table_uri(config: dict[str, Any], table: str) -> str | None:
    url = config.get("connection.url")
    if not url or str(url) == "[hidden]":
        return None
    try:
        u = to_sqlalchemy_url(str(url))
    except ValueError:
        return None
    schema, _, name = table.rpartition(".")
    backend = u.get_backend_name()
    if backend == "postgresql":
        return f"postgres://{u.host or 'localhost'}:{u.port or 5432}/{u.database}/{schema or 'public'}/{name}"
    if backend in ("mysql", "mariadb"):
        return f"mysql://{u.host or 'localhost'}:{u.port or 3306}/{schema or u.database}/{name}"
    if backend == "sqlite" and u.database:
        return f"sqlite:///{os.path.abspath(u.database).lstrip('/')}/{table}"
    return None
