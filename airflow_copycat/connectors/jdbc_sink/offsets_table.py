"""The JDBC sink's Kafka offsets, kept in the target database next to the rows (exactly-once).

One row per (connector, topic, partition) holds the next Kafka offset to write.
The writer moves it in the **same transaction** as the rows it wrote, by a
compare-and-set (:meth:`OffsetsTable.advance`): the row must still hold the
offset this task read when it opened the partition, or last wrote itself.
So a crash between the rows and the offsets cannot happen (one commit), a rerun
resumes exactly after the last committed row, and a second attempt of the same
task (a zombie Spark task, a retried Airflow task) that wrote in between makes
the other's transaction fail, whole, instead of writing the rows twice.

The table is created when missing (``copycat.offsets.table``, default
``copycat_sink_offsets``), also by tasks starting at the same moment. Dropping it re-copies the topics from their start.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import sqlalchemy as sa

from airflow_copycat.connect.errors import ConnectException

from .dialects import Dialect


class Fenced(ConnectException):
    """Another attempt moved the offsets of a partition this task writes."""


class OffsetsTable:
    def __init__(self, engine: sa.Engine, dialect: Dialect, name: str, connector: str):
        self.engine, self.dialect, self.name, self.connector = engine, dialect, name, connector
        d = dialect
        self._t = d.table(name)
        self._cols = [d.ident(c) for c in ("connector", "topic", "kafka_partition", "next_offset")]

    def ensure(self) -> None:
        c, t, p, o = self._cols
        text = "VARCHAR(255)"
        ddl = (f"CREATE TABLE IF NOT EXISTS {self._t} ({c} {text} NOT NULL, {t} {text} NOT NULL, {p} INTEGER NOT NULL, "
               f"{o} BIGINT NOT NULL, PRIMARY KEY ({c}, {t}, {p}))")
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(ddl)
        except sa.exc.DBAPIError:
            # PostgreSQL's IF NOT EXISTS is not safe against a concurrent CREATE: another task of this
            # connector (starting at the same moment on a fresh database) made it first -- fine if it is there
            schema, _, table = self.name.rpartition(".")
            if not self.dialect.quote and self.dialect.name == "postgresql":
                table = table.lower()  # as PostgreSQL folds an unquoted name
            if not sa.inspect(self.engine).has_table(table, schema=schema or None):
                raise

    def read(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The committed next offset of each of ``partitions`` that has one."""
        c, t, p, o = self._cols
        wanted = {(str(topic), int(part)) for topic, part in partitions}
        out = {}
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql(f"SELECT {t}, {p}, {o} FROM {self._t} WHERE {c} = {self.dialect.param}",
                                        (self.connector,)).fetchall()
        for topic, part, off in rows:
            if (topic, int(part)) in wanted:
                out[(topic, int(part))] = int(off)
        return out

    def advance(self, conn: sa.Connection, moves: Mapping[tuple[str, int], tuple[int | None, int]]) -> None:
        """Within the caller's transaction, set each partition's offset from ``expected`` to ``new``
        (``moves``: ``tp -> (expected, new)``; ``expected`` ``None``: no row yet). Raises
        :class:`Fenced` when a partition's row no longer holds ``expected``."""
        c, t, p, o = self._cols
        q = self.dialect.param
        for (topic, part), (expected, new) in sorted(moves.items()):
            if expected == new:
                continue
            if expected is None:
                try:
                    with conn.begin_nested():
                        conn.exec_driver_sql(f"INSERT INTO {self._t} ({c}, {t}, {p}, {o}) VALUES ({q}, {q}, {q}, {q})",
                                             (self.connector, topic, part, new))
                except sa.exc.IntegrityError:
                    raise self._fenced(topic, part, expected) from None
                continue
            n = conn.exec_driver_sql(f"UPDATE {self._t} SET {o} = {q} WHERE {c} = {q} AND {t} = {q} AND {p} = {q} "
                                     f"AND {o} = {q}", (new, self.connector, topic, part, expected)).rowcount
            if n != 1:
                raise self._fenced(topic, part, expected)

    def moves_sql(self, moves: Mapping[tuple[str, int], tuple[int | None, int]], mark: Callable[[int], str]
                  ) -> list[tuple[str, tuple, Fenced]]:
        """:meth:`advance` as PostgreSQL statements for a connection SQLAlchemy does not drive (``mark(i)``: the
        driver's placeholder of parameter ``i``, from 1): ``(sql, parameters, error)`` per partition
        that moves, each returning one row when it moved the offset from ``expected`` to ``new`` (an
        insert when there is no row yet) and none otherwise; the caller raises ``error`` then."""
        c, t, p, o = self._cols
        m = [mark(i) for i in range(1, 6)]
        out = []
        for (topic, part), (expected, new) in sorted(moves.items()):
            if expected == new:
                continue
            if expected is None:
                sql = (f"INSERT INTO {self._t} ({c}, {t}, {p}, {o}) VALUES ({m[0]}, {m[1]}, {m[2]}, {m[3]}) "
                       "ON CONFLICT DO NOTHING RETURNING 1")
                out.append((sql, (self.connector, topic, part, new), self._fenced(topic, part, expected)))
                continue
            sql = (f"UPDATE {self._t} SET {o} = {m[0]} WHERE {c} = {m[1]} AND {t} = {m[2]} AND {p} = {m[3]} "
                   f"AND {o} = {m[4]} RETURNING 1")
            out.append((sql, (new, self.connector, topic, part, expected), self._fenced(topic, part, expected)))
        return out

    def _fenced(self, topic: str, part: int, expected: int | None) -> Fenced:
        return Fenced(f"connector {self.connector}: the offset of {topic}-{part} in {self.name} is no longer "
                      f"{expected if expected is not None else 'unset'}: another attempt of this task wrote it; this "
                      "attempt's transaction is rolled back")
