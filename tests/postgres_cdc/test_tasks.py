"""The PostgreSQL CDC source over several tasks, tables added later, and heartbeats during a run.

Real PostgreSQL (wal_level=logical), the real broker, the real source loop. The consistency checks
replay every table's topic in order (an upsert per create/update/read, a delete per delete) and
compare the result with the table, row by row: what a replica built from the events would hold.
"""

from __future__ import annotations

import random
import threading

import pytest

from airflow_copycat.runtime.discovery import compare, current_partitions, plan_partitions
from airflow_copycat.runtime.worker import WorkerConfig

from tests.postgres_cdc.cdc_runs import CdcRuns
from tests.postgres_cdc.test_source import after_ids, config, ops


def replay(runs: CdcRuns, topic: str, state: dict) -> dict:
    """``state`` (id -> row) after the events ``topic`` got since the last read."""
    for key, value in runs.read(topic):
        if value is None:
            continue
        if value["op"] == "d":
            state.pop(key["id"], None)
        elif value["op"] in ("c", "u", "r"):
            state[key["id"]] = value["after"]
    return state


def table_rows(db, table: str) -> dict:
    return {r[0]: {"id": r[0], "n": r[1], "note": r[2]} for r in db.sql(f"SELECT id, n, note FROM {table}")}


class Writers:
    """Threads that change ``tables`` all the time, in transactions of several statements over
    several tables, until :meth:`stop`: updates, inserts and deletes of keys 1..``keys``, and in
    every transaction one row of a fresh key that no statement touches again (so a change lost at a
    snapshot's boundary shows in the replay instead of being overwritten by a later one)."""

    def __init__(self, db, tables, keys=300, threads=2):
        import psycopg

        self.stopped = threading.Event()
        self.errors: list[BaseException] = []

        def write(seed):
            rnd = random.Random(seed)
            fresh = 100_000 + seed * 1_000_000  # rows inserted once and never touched again: a lost change shows
            try:
                with psycopg.connect(db.url) as conn:
                    while not self.stopped.is_set():
                        try:
                            fresh += 1
                            transaction(conn, rnd, fresh)
                        except psycopg.errors.DeadlockDetected:
                            pass  # two writers met: that transaction rolled back, nothing to capture
            except BaseException as e:  # noqa: BLE001 -- reported by stop()
                self.errors.append(e)

        def transaction(conn, rnd, fresh):
            with conn.transaction():
                conn.execute(f"INSERT INTO {rnd.choice(tables)} VALUES (%s, 0, 'fresh')", (fresh,))
                for _ in range(rnd.randint(1, 4)):
                    table, key, action = rnd.choice(tables), rnd.randint(1, keys), rnd.random()
                    if action < 0.5:
                        conn.execute(f"UPDATE {table} SET n = n + 1, note = %s WHERE id = %s", ("w", key))
                    elif action < 0.8:
                        conn.execute(f"INSERT INTO {table} VALUES (%s, 0, 'new') ON CONFLICT (id) DO NOTHING",
                                     (key,))
                    else:
                        conn.execute(f"DELETE FROM {table} WHERE id = %s", (key,))

        self.threads = [threading.Thread(target=write, args=(s,)) for s in range(threads)]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join()
        assert not self.errors, self.errors


def make_tables(db, names, rows=200):
    for name in names:
        db.sql(f"CREATE TABLE {name} (id int PRIMARY KEY, n int NOT NULL, note text)")
        db.sql(f"INSERT INTO {name} SELECT g, 0, 'start' FROM generate_series(1, {rows}) g")


def test_the_plan_spreads_the_tables_over_tasks_and_puts_the_stream_on_one(cdc_db, worker_props, unique):
    # Given four tables and tasks.max=3
    make_tables(cdc_db, ["a", "b", "c", "d"], rows=1)
    runs = CdcRuns(config(cdc_db, unique), worker_props)

    # When the connector plans
    results = runs.run_tasks(3)

    # Then there are three tasks, one holds the server partition (Debezium's) and every table is on one task
    tasks = [t for g in runs.plan["groups"] for t in g["tasks"]]
    assert len(tasks) == 3
    servers = [p for t in tasks for p in t["partitions"] if "table" not in p]
    tables = sorted(p["table"] for t in tasks for p in t["partitions"] if "table" in p)
    assert servers == [{"server": f"pg{unique}"}]
    assert tables == ["public.a", "public.b", "public.c", "public.d"]
    # and the stream task did not stream while other tasks' tables were being read
    stream = next(r for r in results if r["streams"])
    assert stream["metrics"].get("stream_deferred")


@pytest.mark.slow
@pytest.mark.parametrize("order", ["together", "stream-first", "stream-last"])
def test_a_snapshot_over_three_tasks_with_concurrent_writers_replays_to_the_tables(cdc_db, worker_props, unique,
                                                                                    order):
    # Given three tables that writers change all the time, also in transactions spanning tables
    names = ["a", "b", "c"]
    make_tables(cdc_db, names)
    writers = Writers(cdc_db, names)
    runs = CdcRuns(config(cdc_db, unique, **{"snapshot.fetch.size": "40", "max.batch.size": "100"}), worker_props)
    states = {n: {} for n in names}
    try:
        # When three tasks snapshot (each under its own exported snapshot; the first run stopped half way through
        # each table by a record budget, so the next run resumes each after its last key), then runs stream,
        # some stopped by a budget, the tasks running together or one after the other
        for budget in ("60", "-1", "90"):
            runs.run_tasks(3, order=order, **{"copycat.run.max.records": budget})
            for n in names:
                replay(runs, f"pg{unique}.public.{n}", states[n])
    finally:
        writers.stop()
    runs.run_tasks(3, order=order)

    # Then every table's events, replayed in order, give exactly the table
    for n in names:
        replay(runs, f"pg{unique}.public.{n}", states[n])
        assert states[n] == table_rows(cdc_db, n), n


@pytest.mark.slow
def test_a_table_added_to_the_include_list_later_is_snapshotted_then_streamed(cdc_db, worker_props, unique):
    # Given a connector capturing table a only (a filtered publication), which has streamed for a while
    make_tables(cdc_db, ["a", "b"], rows=50)
    base = config(cdc_db, unique, **{"publication.autocreate.mode": "filtered"})
    runs = CdcRuns(dict(base, **{"table.include.list": r"public\.a"}), worker_props)
    runs.run()
    cdc_db.sql("UPDATE b SET n = 7 WHERE id <= 10")  # changes of b while it is not captured
    cdc_db.sql("INSERT INTO a VALUES (1000, 1, 'a later')")
    runs.run()
    worker = WorkerConfig(worker_props, env={})
    baseline = plan_partitions(runs.plan)

    # When b joins the include list: the partition sensor's discovery sees a new partition
    runs.config = dict(base, **{"table.include.list": r"public\.a,public\.b"})
    change = compare(current_partitions(runs.config, worker), baseline)
    assert [p.get("table") for p in change.added] == ["public.b"] and not change.dropped

    # and writers change both tables while the next runs snapshot b and stream both
    writers = Writers(cdc_db, ["a", "b"], keys=80)
    states = {"a": {}, "b": {}}
    try:
        for _ in range(3):
            runs.run()
            for n in states:
                replay(runs, f"pg{unique}.public.{n}", states[n])
    finally:
        writers.stop()
    runs.run()

    # Then b was read as a snapshot (its rows as of its boundary), then streamed; a kept streaming; a replay of
    # each topic gives the table
    assert replay(runs, f"pg{unique}.public.a", states["a"]) == table_rows(cdc_db, "a")
    assert replay(runs, f"pg{unique}.public.b", states["b"]) == table_rows(cdc_db, "b")
    assert runs.committed("public.b")["last_snapshot_record"] is True
    assert set(runs.committed()["copycat_tables"]) == {"public.a", "public.b"}


@pytest.mark.slow
def test_a_new_table_under_all_tables_over_two_tasks_is_snapshotted_once_and_streamed(cdc_db, worker_props, unique):
    # Given two tasks that have snapshotted and streamed table a
    make_tables(cdc_db, ["a"], rows=30)
    runs = CdcRuns(config(cdc_db, unique), worker_props)
    runs.run_tasks(2)
    runs.run_tasks(2)
    topic_b = f"pg{unique}.public.b"

    # When table b appears, gets rows, and keeps changing while the next runs plan it and read it
    make_tables(cdc_db, ["b"], rows=40)
    writers = Writers(cdc_db, ["a", "b"], keys=60)
    state_b: dict = {}
    try:
        for _ in range(3):
            runs.run_tasks(2)
            replay(runs, topic_b, state_b)
    finally:
        writers.stop()
    runs.run_tasks(2)

    # Then b's topic, replayed, is the table, and b's rows were read once as a snapshot
    assert replay(runs, topic_b, state_b) == table_rows(cdc_db, "b")
    a_state = replay(CdcRuns(runs.config, worker_props), f"pg{unique}.public.a", {})
    assert a_state == table_rows(cdc_db, "a")


def test_heartbeats_come_every_interval_during_a_long_read(cdc_db, worker_props, unique):
    # Given a connector that has snapshotted, and many changes to stream in small polls
    make_tables(cdc_db, ["a"], rows=1)
    runs = CdcRuns(config(cdc_db, unique, **{"heartbeat.interval.ms": "1", "max.batch.size": "50"}), worker_props)
    runs.run()
    runs.read(f"__debezium-heartbeat.pg{unique}")
    for start in range(2, 2002, 5):  # 400 transactions of 5 rows
        cdc_db.sql(f"INSERT INTO a SELECT g, 0, 'x' FROM generate_series({start}, {start + 4}) g")

    # When one run streams them
    runs.run()

    # Then heartbeats came during the read (a poll that ended a transaction after the interval passed), not only
    # at its end, each with Debezium's key
    beats = runs.read(f"__debezium-heartbeat.pg{unique}")
    assert len(beats) > 3
    assert beats[0][0] == {"serverName": f"pg{unique}"} and "ts_ms" in beats[0][1]
    assert sorted(after_ids(runs.read(f"pg{unique}.public.a"))) == list(range(1, 2002))  # the snapshot read 1


def test_one_heartbeat_per_run_when_the_interval_is_longer_than_the_run(cdc_db, worker_props, unique):
    make_tables(cdc_db, ["a"], rows=1)
    runs = CdcRuns(config(cdc_db, unique, **{"heartbeat.interval.ms": "600000"}), worker_props)
    runs.run()
    cdc_db.sql("INSERT INTO a VALUES (2, 0, 'x')")
    runs.run()
    assert len(runs.read(f"__debezium-heartbeat.pg{unique}")) == 2  # one at the end of each run
    assert ops(runs.read(f"pg{unique}.public.a")) == ["r", "c"]


@pytest.mark.parametrize("stop", ["record budget", "failure"])
def test_a_heartbeat_inside_a_transaction_commits_the_last_change_sent_so_a_rerun_repeats_nothing(
        cdc_db, worker_props, unique, stop, abort_visibility):
    # Given exactly-once runs in polls of 2 changes with a heartbeat due at every poll, and a transaction of
    # one row followed by one of 5 rows (the 3rd of them an audit row a transform of the failing run rejects)
    cdc_db.sql("CREATE TABLE t (id int PRIMARY KEY, v text)")
    cdc_db.sql("CREATE TABLE audit (id int PRIMARY KEY, what text)")
    runs = CdcRuns(config(cdc_db, unique, **{"snapshot.mode": "no_data", "exactly.once.support": "required",
                                              "heartbeat.interval.ms": "1", "max.batch.size": "2"}), worker_props)
    topic, beats = f"pg{unique}.public.t", f"__debezium-heartbeat.pg{unique}"
    runs.run()
    runs.read(beats)
    cdc_db.sql("INSERT INTO t VALUES (1, 'small')")
    with cdc_db.conn.transaction():
        cdc_db.sql("INSERT INTO t VALUES (2, 'big')")
        cdc_db.sql("INSERT INTO t VALUES (3, 'big')")
        cdc_db.sql("INSERT INTO audit VALUES (1, 'big')")
        cdc_db.sql("INSERT INTO t VALUES (4, 'big')")
        cdc_db.sql("INSERT INTO t VALUES (5, 'big')")

    # When a run stops right after its first poll -- rows 1 and 2, then a heartbeat, inside the big transaction --
    # by a record budget, or by failing on the audit row of its second poll
    if stop == "record budget":
        runs.run(**{"copycat.run.max.records": "2"})
    else:
        failed = runs.run(ok=False, **{
            "transforms": "boom", "transforms.boom.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.boom.spec": "op:int32", "transforms.boom.predicate": "is-audit",
            "predicates": "is-audit", "predicates.is-audit.type": "TopicNameMatches",
            "predicates.is-audit.pattern": r".*\.audit"})
        assert failed["status"] == "failed" and "TRANSFORMATION failed" in failed["error"], failed
    first = runs.read(topic)
    beat_count = len(runs.read(beats))
    if stop == "failure" and not abort_visibility.hidden:
        # this broker shows what the failed poll's aborted transaction had sent before the failure (row 3 and
        # its heartbeat, when the producer sent them before the abort): the committed ones come first
        assert after_ids(first) in ([1, 2], [1, 2, 3]) and beat_count in (1, 2)
    else:
        assert after_ids(first) == [1, 2] and beat_count == 1

    offset = runs.committed()

    # Then the rerun sends the rest of the big transaction: every change exactly once, none lost
    runs.run()
    assert after_ids(runs.read(topic)) == [3, 4, 5]
    assert after_ids(runs.read(f"pg{unique}.public.audit")) == [1]
    runs.run()
    assert runs.read(topic) == [] and runs.read(f"pg{unique}.public.audit") == []

    # because the heartbeat committed the last change sent (row 2's offset), not the end of the transaction before
    row1, row2 = first[0][1]["source"], first[1][1]["source"]
    assert row2["txId"] != row1["txId"]
    assert (offset["lsn"], offset["txId"]) == (row2["lsn"], row2["txId"])


def test_a_run_that_defers_the_stream_keeps_an_offset_inside_a_transaction(cdc_db, worker_props, unique):
    # Given two tasks polling 5 changes at a time, and a transaction T of 50 single-row inserts, open while a
    # run reads and while another run confirms the slot past T's first inserts (uncaptured WAL after them)
    cdc_db.sql("CREATE TABLE a (id int PRIMARY KEY, n int)")
    runs = CdcRuns(config(cdc_db, unique, **{"max.batch.size": "5", "tombstones.on.delete": "false",
                                              "table.include.list": "public.a,public.x.*"}), worker_props)
    topic = f"pg{unique}.public.a"
    runs.run_tasks(2)
    import psycopg

    with psycopg.connect(cdc_db.url) as tx:
        for i in range(100, 150):
            tx.execute("INSERT INTO a VALUES (%s, 0)", (i,))
        runs.run_tasks(2)
        cdc_db.sql("CREATE TABLE noise (id int)")
        cdc_db.sql("INSERT INTO noise SELECT generate_series(1, 1000)")
        runs.run_tasks(2)
    # and a run that stops inside T once T committed (its offset: T up to its 20th change)
    runs.run_tasks(2, **{"copycat.run.max.records": "20"})
    assert runs.committed()["txId"] is not None

    # When new tables make the next run defer the stream (another task must read them first), then runs go on
    for t in ("x1", "x2", "x3", "x4"):
        cdc_db.sql(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    deferring = runs.run_tasks(2)
    assert any(r["metrics"].get("stream_deferred") for r in deferring)
    for _ in range(3):
        runs.run_tasks(2)

    # Then the stream's offset marker of the deferring run kept T's position: every row of T once
    assert after_ids(runs.read(topic)) == list(range(100, 150))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["initial", "when_needed"])
def test_a_slot_dropped_before_the_stream_committed_an_offset_fails_the_run_or_snapshots_again(
        cdc_db, worker_props, unique, mode):
    # Given four tables read by a first run over two tasks (the stream waits: no stream offset yet)
    for t in ("a", "b", "c", "d"):
        cdc_db.sql(f"CREATE TABLE {t} (id int PRIMARY KEY)")
        cdc_db.sql(f"INSERT INTO {t} VALUES (1)")
    runs = CdcRuns(config(cdc_db, unique, **{"snapshot.mode": mode}), worker_props)
    runs.run_tasks(2, order="stream-first")
    assert runs.committed() is None and runs.committed("public.a") is not None

    # When an operator drops the slot and rows are written before the next run
    cdc_db.sql(f"SELECT pg_drop_replication_slot('slot_{unique}')")
    for t in ("a", "b", "c", "d"):
        cdc_db.sql(f"INSERT INTO {t} VALUES (2)")
    results = runs.run_tasks(2, ok=mode == "when_needed")

    if mode == "initial":
        # Then the run fails naming the slot and the way out, and sends nothing
        errors = [r.get("error") or "" for r in results]
        assert all(r["status"] != "ok" for r in results), errors
        assert all(f"slot_{unique}" in e and "snapshot.mode=when_needed" in e for e in errors), errors
        return
    # Then (when_needed) every table is read again, and later changes stream: no row is missing
    for t in ("a", "b", "c", "d"):
        cdc_db.sql(f"INSERT INTO {t} VALUES (3)")
    for _ in range(2):
        runs.run_tasks(2)
    for t in ("a", "b", "c", "d"):
        assert set(after_ids(runs.read(f"pg{unique}.public.{t}"))) == {1, 2, 3}, t


def test_a_physical_slot_with_the_connectors_slot_name_is_refused_by_name(cdc_db, worker_props, unique):
    cdc_db.sql("CREATE TABLE a (id int PRIMARY KEY)")
    cdc_db.sql(f"SELECT pg_create_physical_replication_slot('slot_{unique}', true)")
    try:
        result = CdcRuns(config(cdc_db, unique), worker_props).run(ok=False)
    finally:
        cdc_db.sql(f"SELECT pg_drop_replication_slot('slot_{unique}')")
    assert result["status"] != "ok"
    assert f"'slot_{unique}' is a physical replication slot" in result["error"], result["error"]
    assert "retriable" not in (result.get("error") or "").lower()


@pytest.mark.slow
@pytest.mark.parametrize("tasks_max", [1, 2])
def test_a_table_in_a_schema_with_a_dot_in_its_name_is_snapshotted_and_streamed(cdc_db, worker_props, unique,
                                                                                 tasks_max):
    # Given a table in schema "my.s" (its partition name "my.s.t" has two dots) and two ordinary tables
    cdc_db.sql('CREATE SCHEMA "my.s"')
    cdc_db.sql('CREATE TABLE "my.s".t (id int PRIMARY KEY)')
    cdc_db.sql('INSERT INTO "my.s".t VALUES (1)')
    for t in ("a", "b"):
        cdc_db.sql(f"CREATE TABLE {t} (id int PRIMARY KEY)")
        cdc_db.sql(f"INSERT INTO {t} VALUES (1)")
    runs = CdcRuns(config(cdc_db, unique), worker_props)
    # When runs go on while rows are inserted
    for i in (2, 3, 4):
        runs.run_tasks(tasks_max)
        for t in ('"my.s".t', "a", "b"):
            cdc_db.sql(f"INSERT INTO {t} VALUES ({i})")
    runs.run_tasks(tasks_max)
    # Then every row of every table arrives: the dotted schema's table is read and streamed
    assert sorted(after_ids(runs.read(f"pg{unique}.my.s.t"))) == [1, 2, 3, 4]
    assert sorted(after_ids(runs.read(f"pg{unique}.public.a"))) == [1, 2, 3, 4]
