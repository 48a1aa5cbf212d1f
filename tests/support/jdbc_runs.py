"""Helpers for JDBC tests that run the real source loop (importable as ``tests.support.jdbc_runs``).

* :class:`Runs` plans a JDBC connector config and runs each of its tasks with
  :func:`airflow_copycat.runtime.source.run_source_task` (Kafka offset store, real broker),
  one bounded run per :meth:`Runs.run` call, and reads what each run added to a topic.
* :class:`ConnectionKiller` kills, from another connection, the database connection that is
  about to run the N-th ``SELECT`` naming a table (PostgreSQL ``pg_terminate_backend``,
  MariaDB ``KILL``): the statement then fails on a dead connection exactly as when the
  server restarts or a DBA kills the session mid-import.
* :func:`db_clock` is the database's clock as a naive UTC datetime (what the tests write into
  naive timestamp columns, ``db.timezone=UTC``).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any

import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition
from sqlalchemy.dialects import mysql

from airflow_copycat.connectors.jdbc.arrow_reader import QUERY_LISTENERS
from airflow_copycat.connectors.jdbc.source import db_now
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.source import run_source_task
from airflow_copycat.runtime.worker import WorkerConfig


def db_clock(engine: sa.Engine) -> dt.datetime:
    """The database's current time, naive UTC."""
    with engine.connect() as conn:
        return db_now(conn).replace(tzinfo=None)


def ts_type():
    """A naive timestamp column type with microseconds on every dialect (MariaDB's DATETIME has none by default)."""
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


class Runs:
    """Bounded runs of one JDBC source config through the real source loop, and what they wrote."""

    def __init__(self, config: dict, worker_props: dict, bootstrap: str):
        self.config, self.worker_props, self.bootstrap = config, worker_props, bootstrap
        self._positions: dict[str, int] = {}
        self.counts: dict[str, list[int]] = {}  # topic -> records each run produced to it

    def run(self, *, ok: bool = True, **overrides) -> list[dict]:
        """One run of every task of a fresh plan; returns the task results. ``ok``: assert none failed."""
        config = {**self.config, **overrides}
        worker = WorkerConfig(self.worker_props, env={})
        plan = make_plan(config, worker)
        results = [run_source_task(t, worker) for g in plan["groups"] for t in g["tasks"]]
        for topic in {t for r in results for t in r["topics"]} | set(self.counts):
            runs_before = len(next(iter(self.counts.values()))) if self.counts else 0
            self.counts.setdefault(topic, [0] * runs_before).append(sum(r["topics"].get(topic, 0) for r in results))
        if ok:
            for r in results:
                assert r["status"] != "failed", r.get("error")
        return results

    def read(self, topic: str) -> list[dict]:
        """The payloads written to ``topic`` (partition 0) since the last ``read`` of it."""
        start = self._positions.get(topic, 0)
        if not sum(self.counts.get(topic, [])):  # no run wrote to it: it may not even exist
            return []
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "jdbc-check", "enable.partition.eof": True,
                      "isolation.level": "read_committed"})
        try:
            msgs = list(read_to_end(c, [TopicPartition(topic, 0, start)]))
        finally:
            c.close()
        if msgs:
            self._positions[topic] = msgs[-1].offset() + 1
        return [json.loads(m.value())["payload"] for m in msgs]

    def per_run(self, topic: str) -> list[list[dict]]:
        """What each run so far wrote to ``topic`` (read once, split by the runs' record counts)."""
        payloads, out = self.read(topic), []
        for n in self.counts.get(topic, []):
            out.append(payloads[:n])
            payloads = payloads[n:]
        assert not payloads, "records no run reported"
        return out

    def run_and_read(self, topic: str, **overrides) -> list[dict]:
        self.run(**overrides)
        return self.read(topic)


class ConnectionKiller:
    """While active (a context manager), kills the connection that is about to send the ``at``-th
    (1-based; a set for several) ``SELECT`` whose text names ``table``, from a separate connection,
    and waits until the server has closed it. Counts every engine of the process (the connector
    makes its own), so only the connector may run such SELECTs while it is active."""

    def __init__(self, url: str, table: str, at: int | set[int]):
        self.table, self.at = table, {at} if isinstance(at, int) else set(at)
        self.admin = sa.create_engine(url, poolclass=sa.pool.NullPool)
        self.kind = self.admin.dialect.name
        self.seen = 0
        self.killed: list[Any] = []
        self._lock = threading.Lock()

    def _hook(self, conn, cursor, statement, parameters, context, executemany):
        self._on_select(statement, conn.connection.dbapi_connection)

    def _adbc_hook(self, statement, connection) -> None:
        """The same for the queries the batch path sends through ADBC (PostgreSQL)."""
        self._on_select(statement, connection)

    def _on_select(self, statement, dbapi_connection) -> None:
        text = statement.lstrip().upper()
        if not text.startswith("SELECT") or self.table.upper() not in text:
            return
        with self._lock:
            self.seen += 1
            n = self.seen
        if n in self.at:
            self.kill(dbapi_connection)

    def kill(self, dbapi_connection) -> None:
        with self.admin.connect() as admin:
            if self.kind == "postgresql":
                pid = getattr(dbapi_connection, "backend_pid", None)  # an ADBC connection of the batch path
                if pid is None:
                    pid = dbapi_connection.info.backend_pid
                ok = admin.execute(sa.text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid}).scalar_one()
                assert ok, f"backend {pid} did not terminate"
            elif self.kind in ("mysql", "mariadb"):
                pid = int(dbapi_connection.thread_id())
                admin.execute(sa.text(f"KILL {pid}"))
                deadline = time.monotonic() + 10
                while admin.execute(sa.text("SELECT COUNT(*) FROM information_schema.processlist WHERE id = :id"),
                                    {"id": pid}).scalar_one():
                    assert time.monotonic() < deadline, f"connection {pid} still alive after KILL"
                    time.sleep(0.01)
            else:
                raise AssertionError(f"cannot kill {self.kind} connections")
        self.killed.append(pid)

    def __enter__(self) -> "ConnectionKiller":
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", self._hook)
        QUERY_LISTENERS.append(self._adbc_hook)
        return self

    def __exit__(self, *exc) -> None:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", self._hook)
        QUERY_LISTENERS.remove(self._adbc_hook)
        self.admin.dispose()
