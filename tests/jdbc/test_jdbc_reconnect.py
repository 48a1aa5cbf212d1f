"""The database connection dies mid-import (killed from another session: PostgreSQL ``pg_terminate_backend``,
MariaDB ``KILL``), through the real source loop, Kafka offset store and broker.

* With ``errors.retry.timeout`` set, the lost connection is a retriable ``poll()`` failure: the task
  reconnects and the run completes with every row exactly once.
* Without retries the run fails with a message naming the table, and the next run resumes from the
  committed offset: nothing is lost. With offsets flushed after every batch (``offset.flush.interval.ms=0``)
  nothing is repeated either; with a longer flush interval the rows read since the last flush are sent
  again (at-least-once, as in Kafka Connect without exactly-once delivery).
* A bulk snapshot interrupted mid-stream fails the run (resuming it on a new connection would not be
  one consistent snapshot, restarting it would repeat rows within the run); the next run sends the
  whole table.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from tests.support.jdbc_runs import ConnectionKiller, Runs, ts_type
from tests.jdbc.reader_helpers import jdbc_config

T0 = dt.datetime(2024, 1, 1, 12, 0, 0)
MODES = ["incrementing", "timestamp", "timestamp+incrementing"]


@pytest.fixture(params=["postgresql", "mariadb"])
def server(request):
    """(kind, url) of a real database server whose connections can be killed."""
    return request.param, request.getfixturevalue("postgres_url" if request.param == "postgresql" else "mariadb_url")


def _table(engine, name, rows: int, *, width: int = 20) -> sa.Table:
    table = sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                     sa.Column("v", sa.String(width), nullable=False), sa.Column("ts", ts_type(), nullable=False))
    table.create(engine)
    _insert(engine, table, range(1, rows + 1))
    return table


def _insert(engine, table, ids, *, pad: str = ""):
    # three rows share each timestamp: ties straddle the batch boundaries
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": i, "v": f"r{i}{pad}", "ts": T0 + dt.timedelta(seconds=i // 3)}
                                      for i in ids])


@pytest.fixture
def engine_of(server):
    engines, tables = [], []

    def make():
        e = sa.create_engine(server[1])
        engines.append(e)
        return e

    yield make, tables
    for e in engines:
        for t in tables:
            t.drop(e, checkfirst=True)
        e.dispose()


def _config(url, unique, mode, tables, **extra):
    return jdbc_config(url, mode, **{"name": f"jdbc-rc-{unique}", "topic.prefix": f"rc{unique}-", "tasks.max": 1,
                                     "table.whitelist": ",".join(tables), "batch.max.rows": 4, **extra})


@pytest.mark.parametrize("mode", MODES)
def test_connection_killed_mid_import_is_retried_and_every_row_arrives_once(
        server, engine_of, worker_props, kafka_bootstrap, unique, mode):
    kind, url = server
    make, tables = engine_of
    engine = make()
    name = f"rc_{unique}"
    table = _table(engine, name, 20)
    tables.append(table)
    runs = Runs(_config(url, unique, mode, [name], **{"errors.retry.timeout": 30000,
                                                      "errors.retry.delay.max.ms": 500}), worker_props,
                kafka_bootstrap)
    with ConnectionKiller(url, name, at={3, 5}) as killer:  # the 3rd and 5th batch queries die
        [result] = runs.run()
    assert len(killer.killed) == 2
    assert result["retries"] >= 2, result
    got = runs.read(f"rc{unique}-{name}")
    assert sorted(p["id"] for p in got) == list(range(1, 21))
    # the committed offset is right too: new rows only in the next run
    _insert(engine, table, range(21, 24))
    assert sorted(p["id"] for p in runs.run_and_read(f"rc{unique}-{name}")) == [21, 22, 23]


@pytest.mark.parametrize("mode", MODES)
def test_without_retries_the_run_fails_naming_the_table_and_the_next_run_resumes(
        server, engine_of, kafka_bootstrap, unique, mode, worker_props):
    kind, url = server
    make, tables = engine_of
    engine = make()
    name = f"rcf_{unique}"
    table = _table(engine, name, 20)
    tables.append(table)
    props = {**worker_props, "offset.flush.interval.ms": 0}  # offsets committed after every batch
    runs = Runs(_config(url, unique, mode, [name]), props, kafka_bootstrap)
    with ConnectionKiller(url, name, at=4):
        [result] = runs.run(ok=False)
    assert result["status"] == "failed"
    error = result["error"]
    fqn = "test.public." + name if kind == "postgresql" else "test." + name
    assert fqn in error and "connection" in error.lower() and "errors.retry.timeout" in error, error
    first = runs.read(f"rc{unique}-{name}")
    assert first, "the batches before the failure were delivered"
    _insert(engine, table, range(21, 25))
    second = runs.run_and_read(f"rc{unique}-{name}")
    ids = [p["id"] for p in first + second]
    assert sorted(ids) == list(range(1, 25)), "every row exactly once across the failed run and the next"


def test_a_failed_run_still_commits_what_kafka_acknowledged_so_nothing_repeats(
        server, engine_of, kafka_bootstrap, unique, worker_props):
    # No periodic flush before the failure: the offsets of the delivered rows are committed when the
    # task fails (Kafka Connect's final offset commit), once Kafka has acknowledged every record.
    kind, url = server
    make, tables = engine_of
    engine = make()
    name = f"rcl_{unique}"
    tables.append(_table(engine, name, 20))
    props = {**worker_props, "offset.flush.interval.ms": 600000}  # no flush before the end of the run
    runs = Runs(_config(url, unique, "timestamp+incrementing", [name]), props, kafka_bootstrap)
    with ConnectionKiller(url, name, at=4):
        [result] = runs.run(ok=False)
    assert result["status"] == "failed"
    first = runs.read(f"rc{unique}-{name}")
    assert [p["id"] for p in first] == list(range(1, 13))  # 3 batches of 4 delivered, then the connection died
    assert result["partitions"][0]["offset_after"]["incrementing"] == 12
    second = runs.run_and_read(f"rc{unique}-{name}")
    assert [p["id"] for p in second] == list(range(13, 21))  # the rerun went on after id 12: each row once


def test_a_connection_lost_on_one_table_does_not_drop_rows_already_read_from_another(
        server, engine_of, kafka_bootstrap, unique, worker_props):
    # One task, two tables: a poll reads all 3 rows of `a` and then fails on `b`. The retried poll must not
    # lose a's rows (the reader of `a` has already moved past them).
    kind, url = server
    make, tables = engine_of
    engine = make()
    a, b = f"rca_{unique}", f"rcb_{unique}"
    tables += [_table(engine, a, 3), _table(engine, b, 10)]
    runs = Runs(_config(url, unique, "timestamp+incrementing", [a, b], **{"batch.max.rows": 5,
                                                                          "errors.retry.timeout": 30000,
                                                                          "errors.retry.delay.max.ms": 500}),
                worker_props, kafka_bootstrap)
    with ConnectionKiller(url, b, at=1):
        runs.run()
    assert sorted(p["id"] for p in runs.read(f"rc{unique}-{a}")) == [1, 2, 3]
    assert sorted(p["id"] for p in runs.read(f"rc{unique}-{b}")) == list(range(1, 11))


class _BulkKiller(ConnectionKiller):
    """Kills the bulk snapshot's streaming connection when the task, one poll later, queries another table."""

    def __init__(self, url, bulk_table, other_table):
        super().__init__(url, other_table, at=1)
        self.bulk_table, self.stream = bulk_table, None

    def _on_select(self, statement, dbapi_connection):
        text = statement.lstrip().upper()
        if not text.startswith("SELECT"):
            return
        if self.stream is None and self.bulk_table.upper() in text:
            self.stream = dbapi_connection
        elif self.table.upper() in text and self.stream is not None and not self.killed:
            self.kill(self.stream)


def test_bulk_snapshot_interrupted_mid_stream_fails_and_the_next_run_sends_the_whole_table(
        server, engine_of, kafka_bootstrap, unique, worker_props):
    kind, url = server
    make, tables = engine_of
    engine = make()
    big, small = f"rcb0_{unique}", f"rcb1_{unique}"
    # wide rows (24 MB): the server cannot have sent the whole result into the socket buffers before the kill,
    # even to a reader that streams it (COPY on PostgreSQL's batch path pushes as fast as the socket takes)
    big_table = sa.Table(big, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                         sa.Column("v", sa.String(8000), nullable=False))
    big_table.create(engine)
    tables.append(big_table)
    with engine.begin() as conn:
        conn.execute(big_table.insert(), [{"id": i, "v": "x" * 8000} for i in range(1, 3001)])
    tables.append(_table(engine, small, 2))
    runs = Runs(_config(url, unique, "bulk", [big, small], **{"batch.max.rows": 50, "errors.retry.timeout": 30000,
                                                              "errors.retry.delay.max.ms": 500}),
                worker_props, kafka_bootstrap)
    with _BulkKiller(url, big, small) as killer:
        [result] = runs.run(ok=False)
    assert killer.killed
    assert result["status"] == "failed"
    fqn = "test.public." + big if kind == "postgresql" else "test." + big
    assert fqn in result["error"], result["error"]
    partial = [p["id"] for p in runs.read(f"rc{unique}-{big}")]
    assert len(partial) < 3000 and len(set(partial)) == len(partial), "no row twice within the failed run"
    assert [p["id"] for p in runs.run_and_read(f"rc{unique}-{big}")] == list(range(1, 3001))
