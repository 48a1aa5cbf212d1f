"""Databases of the change-data-capture tests on the session's logical PostgreSQL (``postgres_cdc_url``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class CdcDatabase:
    """One test database: ``url`` (libpq), ``dbname``, connection keys for the connector, and ``sql``."""

    def __init__(self, server_url: str, dbname: str):
        import psycopg

        self.server_url, self.dbname = server_url, dbname
        info = psycopg.conninfo.conninfo_to_dict(server_url)
        info["dbname"] = dbname
        self.info = info
        self.url = psycopg.conninfo.make_conninfo(**info)
        self._conn = None

    @property
    def conn(self):
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, autocommit=True)
        return self._conn

    def sql(self, statement: str, params=None):
        """Run one statement in its own transaction; the rows when it returns any."""
        cur = self.conn.execute(statement, params)
        return cur.fetchall() if cur.description else None

    def connector_keys(self) -> dict:
        """Debezium's database keys for this database."""
        return {"database.hostname": self.info.get("host", "127.0.0.1"), "database.port": str(self.info.get("port", 5432)),
                "database.user": self.info.get("user", "postgres"), "database.dbname": self.dbname,
                **({"database.password": self.info["password"]} if self.info.get("password") else {})}

    def slot(self, name: str) -> dict | None:
        rows = self.sql("SELECT confirmed_flush_lsn::text, restart_lsn::text, active, "
                        "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                        "FROM pg_replication_slots WHERE slot_name = %s", (name,))
        if not rows:
            return None
        confirmed, restart, active, retained = rows[0]
        return {"confirmed_flush_lsn": confirmed, "restart_lsn": restart, "active": active, "retained": retained}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


@contextlib.contextmanager
def fresh_database(server_url: str, name: str) -> Iterator[CdcDatabase]:
    """A new database ``name`` on the server (slots and publications of one test cannot see another
    test's tables); dropped at the end with the replication slots made in it."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    db = CdcDatabase(server_url, name)
    try:
        yield db
    finally:
        db.close()
        with psycopg.connect(server_url, autocommit=True) as admin:
            for (slot,) in admin.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                                         (name,)).fetchall():
                admin.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                              "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
                admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
