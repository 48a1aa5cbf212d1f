"""The PostgreSQL CDC source end to end: a real PostgreSQL with wal_level=logical, the real broker,
the real source loop (plan, run, offsets in the Kafka offset topic).

Each test runs the connector the way a DAG run does -- one bounded run after another -- and
asserts what a consumer of the topics and an operator of the database would see: the events,
their order and operations, the committed offsets, and the slot's confirmed position and
retained WAL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_copycat.connectors.postgres_cdc.model import parse_lsn
from airflow_copycat.runtime import plugins

from tests.postgres_cdc.cdc_runs import CdcRuns

HELPER = Path(__file__).with_name("cdc_runs.py")


def config(db, unique, **over) -> dict:
    raw = {
        "name": f"cdc-{unique}",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        **db.connector_keys(),
        "topic.prefix": f"pg{unique}",
        "slot.name": f"slot_{unique}",
        "publication.name": f"pub_{unique}",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    }
    raw.update(over)
    return raw


def ops(messages):
    return [(v or {}).get("op") if v is not None else "tombstone" for _, v in messages]


def after_ids(messages):
    return [v["after"]["id"] for _, v in messages if v and v.get("after")]


@pytest.fixture
def orders(cdc_db):
    cdc_db.sql("CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL, qty int, price numeric(10,2))")
    cdc_db.sql("INSERT INTO orders VALUES (1, 'apple', 3, 1.50), (2, 'pear', 1, 0.99)")
    return cdc_db


def test_the_debezium_class_name_and_the_alias_resolve_to_the_connector():
    from airflow_copycat.connectors.postgres_cdc import PostgresCdcSourceConnector

    assert plugins.resolve_connector("io.debezium.connector.postgresql.PostgresConnector") is PostgresCdcSourceConnector
    assert plugins.resolve_connector("PostgresCdcSource") is PostgresCdcSourceConnector


def test_snapshot_then_inserts_updates_and_deletes_in_commit_order(orders, worker_props, unique):
    # Given a table with two rows and a connector that has never run
    runs = CdcRuns(config(orders, unique), worker_props)
    topic = f"pg{unique}.public.orders"

    # When the first run snapshots
    first = runs.run()
    snapshot = runs.read(topic)

    # Then every row is read once as op r, keyed by the primary key
    assert ops(snapshot) == ["r", "r"]
    assert [k["id"] for k, _ in snapshot] == [1, 2]
    assert snapshot[0][1]["after"] == {"id": 1, "item": "apple", "qty": 3, "price": snapshot[0][1]["after"]["price"]}
    assert [v["source"]["snapshot"] for _, v in snapshot] == ["first", "last"]
    assert first["metrics"]["tables"]["public.orders"]["read"] == 2

    # When rows change and the next run streams
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    orders.sql("UPDATE orders SET qty = 4 WHERE id = 1")
    orders.sql("DELETE FROM orders WHERE id = 2")
    second = runs.run()
    changes = runs.read(topic)

    # Then the changes come in commit order, with a tombstone after the delete
    assert ops(changes) == ["c", "u", "d", "tombstone"]
    assert changes[0][1]["after"]["item"] == "plum"
    assert changes[1][1]["after"]["qty"] == 4
    assert changes[2][1]["before"]["id"] == 2 and changes[2][1]["after"] is None
    assert changes[3][0] == {"id": 2}
    assert second["metrics"]["tables"]["public.orders"] == {"inserted": 1, "updated": 1, "deleted": 1}
    # and a third run with nothing new sends nothing again
    runs.run()
    assert runs.read(topic) == []


def test_a_slot_left_without_a_committed_offset_streams_from_the_snapshots_boundary(
        orders, worker_props, unique):
    # Given the connector's slot, made before any run committed an offset (a first run that died right after
    # making it, or an operator, even before the publication existed), and rows changed since then
    runs = CdcRuns(config(orders, unique), worker_props)
    topic = f"pg{unique}.public.orders"
    orders.sql(f"SELECT pg_create_logical_replication_slot('slot_{unique}', 'pgoutput')")
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    orders.sql("UPDATE orders SET qty = 4 WHERE id = 1")

    # When the first run snapshots and the next one streams
    runs.run()
    runs.run()

    # Then every row came once, as a snapshot read of its current state: no change made before the
    # snapshot came again from the slot
    events = runs.read(topic)
    assert ops(events) == ["r", "r", "r"]
    assert sorted(after_ids(events)) == [1, 2, 3]
    assert {v["after"]["id"]: v["after"]["qty"] for _, v in events}[1] == 4


def test_offsets_have_debeziums_key_and_shape_and_the_slot_is_confirmed_to_them(orders, worker_props, unique):
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data"}), worker_props)
    runs.run()  # creates the slot: nothing to stream yet
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    result = runs.run()

    offset = runs.committed()
    assert set(offset) >= {"lsn", "lsn_commit", "txId", "ts_usec"}
    assert all(isinstance(offset[k], int) for k in ("lsn", "lsn_commit", "txId", "ts_usec"))
    assert result["partitions"][0]["partition"] == {"server": f"pg{unique}"}
    slot = orders.slot(f"slot_{unique}")
    # the run read up to its bound: the slot is confirmed at least to the committed transaction's end
    assert parse_lsn(slot["confirmed_flush_lsn"]) >= offset["lsn_commit"] > offset["lsn"]
    assert result["metrics"]["wal_after"]["confirmed_flush_lsn"] == slot["confirmed_flush_lsn"]


def test_a_transaction_open_when_a_run_starts_comes_whole_in_the_next_run(orders, worker_props, unique):
    import psycopg

    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data"}), worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    # Given a transaction that wrote rows but has not committed when the run starts
    open_tx = psycopg.connect(orders.url)
    open_tx.execute("INSERT INTO orders VALUES (10, 'open-a', 1, 1)")
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    open_tx.execute("INSERT INTO orders VALUES (11, 'open-b', 1, 1)")

    # When a run reads, then the transaction commits, then the next run reads
    runs.run()
    first = after_ids(runs.read(topic))
    open_tx.execute("UPDATE orders SET qty = 2 WHERE id = 3")
    open_tx.commit()
    open_tx.close()
    runs.run()
    second = runs.read(topic)

    # Then the first run had only the committed row, and the second the whole transaction, once
    assert first == [3]
    assert ops(second) == ["c", "c", "u"] and after_ids(second) == [10, 11, 3]
    assert len({v["source"]["txId"] for _, v in second}) == 1


def test_a_run_stopped_inside_a_transaction_continues_after_it_without_repeats(orders, worker_props, unique):
    # Given one transaction of 50 rows and runs that stop after 20 records (copycat.run.max.records)
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data", "max.batch.size": "5",
                                              "tombstones.on.delete": "false"}), worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    orders.sql("INSERT INTO orders SELECT g, 'bulk', g, 1 FROM generate_series(100, 149) g")
    slot_before = orders.slot(f"slot_{unique}")["confirmed_flush_lsn"]

    # When runs with a record budget read it
    seen = []
    for _ in range(4):
        runs.run(**{"copycat.run.max.records": "20"})
        seen += after_ids(runs.read(topic))
        if len(seen) >= 50:
            break

    # Then every row came exactly once, in order, and the slot moved only once the transaction was complete
    assert seen == list(range(100, 150))
    assert orders.slot(f"slot_{unique}")["confirmed_flush_lsn"] != slot_before
    runs.run()
    assert runs.read(topic) == []


def _copy_orders(db, ids) -> None:
    """``COPY`` rows into orders in one transaction: PostgreSQL writes them as multi-insert WAL records,
    and logical decoding gives every row of a record the record's LSN."""
    import psycopg

    with psycopg.connect(db.url) as conn, conn.cursor().copy("COPY orders (id, item, qty, price) FROM STDIN") as copy:
        for i in ids:
            copy.write_row((i, "copy", i, 1))


@pytest.mark.parametrize("batch_size, budget", [(5, 20), (300, 700)])  # records; batches (a poll ends mid-record)
def test_a_run_stopped_inside_a_copy_continues_with_the_next_row_of_the_same_lsn(
        orders, worker_props, unique, batch_size, budget):
    # Given rows COPYed in one transaction (many rows per LSN) and runs that stop after `budget` records
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data", "max.batch.size": str(batch_size),
                                              "tombstones.on.delete": "false"}), worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    _copy_orders(orders, range(100, 100 + 2 * budget + 10))

    # When runs with that budget read it
    seen = []
    for _ in range(4):
        runs.run(**{"copycat.run.max.records": str(budget)})
        seen += after_ids(runs.read(topic))
    runs.run()
    seen += after_ids(runs.read(topic))

    # Then every row came exactly once, in order: an offset inside the record names the row
    assert seen == list(range(100, 100 + 2 * budget + 10))
    assert "copycat_lsn_index" not in runs.committed()  # the last offset: the transaction's end


def test_a_run_killed_inside_a_copy_with_exactly_once_loses_no_row(orders, worker_props, unique):
    # Given 100 rows COPYed in one transaction and a run with exactly-once that polls 7 changes at a time
    raw = config(orders, unique, **{"snapshot.mode": "no_data", "max.batch.size": "7",
                                     "exactly.once.support": "required", "tombstones.on.delete": "false"})
    runs = CdcRuns(raw, worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    _copy_orders(orders, range(100, 200))

    # When the run is SIGKILLed at its third commit (its offsets written in a Kafka transaction, the slot not confirmed)
    child = subprocess.run([sys.executable, str(HELPER), json.dumps(raw), json.dumps(worker_props), "commit-3"],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert child.returncode == -9, child.stdout + child.stderr
    committed = runs.committed()
    runs.run()

    # Then the next run sends the rest: every row once (the run had stopped between rows of one LSN)
    assert after_ids(runs.read(topic)) == list(range(100, 200))
    assert committed["txId"] and "copycat_lsn_index" in committed


def _partitioned(db) -> None:
    db.sql("CREATE TABLE parent (id int, region text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)")
    db.sql("CREATE TABLE parent_eu PARTITION OF parent FOR VALUES IN ('eu')")
    db.sql("CREATE TABLE parent_us PARTITION OF parent FOR VALUES IN ('us')")
    db.sql("INSERT INTO parent VALUES (1, 'eu'), (2, 'us')")


def test_a_publication_via_the_partition_root_fails_the_run_before_reading(cdc_db, worker_props, unique):
    # Given a partitioned table and a publication made as Debezium's publish.via.partition.root=true makes it
    _partitioned(cdc_db)
    cdc_db.sql(f"CREATE PUBLICATION pub_{unique} FOR TABLE parent WITH (publish_via_partition_root = true)")
    runs = CdcRuns(config(cdc_db, unique, **{"publication.autocreate.mode": "disabled",
                                              "tombstones.on.delete": "false"}), worker_props)

    # When a run starts
    failed = runs.run(ok=False)

    # Then it fails naming the publication and the fix, and reads nothing
    assert failed["status"] == "failed" and failed["records"] == 0, failed
    assert f"publication 'pub_{unique}' publishes via the partition root" in failed["error"]
    assert f"ALTER PUBLICATION pub_{unique} SET (publish_via_partition_root = false)" in failed["error"]

    # and once the publication is altered, the partitions' rows and changes come under the partitions' names
    cdc_db.sql(f"ALTER PUBLICATION pub_{unique} SET (publish_via_partition_root = false)")
    runs.run()
    cdc_db.sql("INSERT INTO parent VALUES (3, 'eu')")
    runs.run()
    assert sorted(after_ids(runs.read(f"pg{unique}.public.parent_eu"))) == [1, 3]
    assert after_ids(runs.read(f"pg{unique}.public.parent_us")) == [2]


def test_a_change_published_via_the_partition_root_fails_the_run_and_the_slot_keeps_it(cdc_db, worker_props, unique):
    # Given a snapshotted partitioned table, then a change written while the publication published via the root
    _partitioned(cdc_db)
    cdc_db.sql(f"CREATE PUBLICATION pub_{unique} FOR TABLE parent")
    runs = CdcRuns(config(cdc_db, unique, **{"publication.autocreate.mode": "disabled"}), worker_props)
    runs.run()
    cdc_db.sql("INSERT INTO parent VALUES (3, 'eu')")
    cdc_db.sql("TRUNCATE parent")  # published without the root: the partitions' changes and truncates
    runs.run()
    assert ops(runs.read(f"pg{unique}.public.parent_eu")) == ["r", "c"]  # (truncates: skipped.operations=t)
    cdc_db.sql(f"ALTER PUBLICATION pub_{unique} SET (publish_via_partition_root = true)")
    cdc_db.sql("INSERT INTO parent VALUES (4, 'eu')")
    cdc_db.sql(f"ALTER PUBLICATION pub_{unique} SET (publish_via_partition_root = false)")
    confirmed = cdc_db.slot(f"slot_{unique}")["confirmed_flush_lsn"]

    # When a run reads it
    failed = runs.run(ok=False)

    # Then the run fails naming the table, instead of skipping the change and confirming the slot past it
    assert failed["status"] == "failed", failed
    assert "'public.parent'" in failed["error"] and "partition root" in failed["error"], failed["error"]
    assert cdc_db.slot(f"slot_{unique}")["confirmed_flush_lsn"] == confirmed
    assert runs.read(f"pg{unique}.public.parent_eu") == []


def test_a_publication_dropped_under_unread_changes_fails_the_run_naming_it_and_the_way_out(
        orders, worker_props, unique):
    # Given a change, then the publication dropped (the next run makes it again) and another change
    runs = CdcRuns(config(orders, unique), worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    orders.sql(f"DROP PUBLICATION pub_{unique}")
    orders.sql("INSERT INTO orders VALUES (4, 'fig', 1, 1)")

    # When a run reads the slot
    failed = runs.run(ok=False)

    # Then it fails naming the publication, what happened and what to do -- not a missing slot, which exists
    assert failed["status"] == "failed", failed
    error = failed["error"]
    assert f"publication 'pub_{unique}' did not exist" in error, error
    assert f"replication slot 'slot_{unique}' does not exist" not in error, error
    assert "dropped" in error and f"pg_drop_replication_slot('slot_{unique}')" in error, error
    assert "snapshot.mode=when_needed" in error and "SlotMissing" not in error, error
    assert orders.slot(f"slot_{unique}") is not None

    # and the way out it names works: the slot dropped, when_needed snapshots again from a new slot
    orders.sql(f"SELECT pg_drop_replication_slot('slot_{unique}')")
    runs.run(**{"snapshot.mode": "when_needed"})
    assert {3, 4} <= set(after_ids(runs.read(topic)))


def test_truncate_and_column_changes_show_in_the_events(orders, worker_props, unique):
    orders.sql("CREATE TABLE other (id int PRIMARY KEY)")
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data", "skipped.operations": "none",
                                              "table.include.list": "public.orders"}), worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    orders.sql("ALTER TABLE orders ADD COLUMN color text DEFAULT 'red'")
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00, 'blue')")
    orders.sql("ALTER TABLE orders DROP COLUMN qty")
    orders.sql("INSERT INTO orders VALUES (4, 'fig', 1.00, 'green')")
    orders.sql("TRUNCATE orders, other")

    result = runs.run()
    added, dropped, truncated = runs.read(topic, schemas=True)
    assert runs.read(f"pg{unique}.public.other") == [] and list(result["topics"]) == [topic]

    def row_fields(doc):
        after = next(f for f in doc["schema"]["fields"] if f["field"] == "after")
        return [f["field"] for f in after["fields"]]

    assert added[1]["payload"]["after"]["color"] == "blue" and added[1]["payload"]["after"]["qty"] == 7
    assert row_fields(added[1]) == ["id", "item", "qty", "price", "color"]
    assert row_fields(dropped[1]) == ["id", "item", "price", "color"]
    assert dropped[1]["payload"]["after"]["color"] == "green"
    truncated = (truncated[0], truncated[1]["payload"])
    assert truncated[0] is None and truncated[1]["op"] == "t" and truncated[1]["source"]["table"] == "orders"


def test_a_quiet_table_on_a_busy_server_keeps_the_slot_confirming(orders, worker_props, unique):
    # Given a connector capturing orders only, with heartbeats, and another table that changes a lot
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data", "table.include.list": "public.orders",
                                              "heartbeat.interval.ms": "1000"}), worker_props)
    runs.run()
    orders.sql("CREATE TABLE noise (id int, pad text)")
    orders.sql("INSERT INTO noise SELECT g, repeat('n', 500) FROM generate_series(1, 20000) g")
    orders.sql("CHECKPOINT")
    orders.sql("INSERT INTO noise VALUES (0, 'x')")
    lag = orders.slot(f"slot_{unique}")

    # When runs read
    result = runs.run()
    runs.run()

    # Then the slot is confirmed past the noise (WAL released), and the run said how much it retained
    assert lag["retained"] > 5_000_000
    after = orders.slot(f"slot_{unique}")
    assert after["retained"] < 1_000_000
    assert result["metrics"]["wal_before"]["retained_bytes"] > 5_000_000
    assert result["metrics"]["wal_after"]["unconfirmed_bytes"] < 100_000
    assert runs.read(f"pg{unique}.public.orders") == []
    heartbeats = runs.read(f"__debezium-heartbeat.pg{unique}")
    assert heartbeats and heartbeats[0][0] == {"serverName": f"pg{unique}"} and "ts_ms" in heartbeats[0][1]
    assert runs.committed()["lsn"] >= parse_lsn(lag["confirmed_flush_lsn"])


def test_a_dropped_slot_fails_the_run_naming_it_and_when_needed_snapshots_again(orders, worker_props, unique):
    runs = CdcRuns(config(orders, unique), worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    assert len(runs.read(topic)) == 2
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    runs.run()
    runs.read(topic)

    # When an operator drops the slot
    orders.sql("SELECT pg_drop_replication_slot(%s)", (f"slot_{unique}",))
    failed = runs.run(ok=False)

    # Then the run fails naming the slot and what to do, and creates no slot behind the user's back
    assert failed["status"] == "failed"
    assert f"replication slot 'slot_{unique}'" in failed["error"] and "snapshot.mode=when_needed" in failed["error"]
    assert orders.slot(f"slot_{unique}") is None

    # When the user switches to when_needed, the tables are snapshotted again and streaming goes on
    runs.run(**{"snapshot.mode": "when_needed"})
    again = runs.read(topic)
    assert ops(again) == ["r", "r", "r"] and sorted(after_ids(again)) == [1, 2, 3]
    orders.sql("INSERT INTO orders VALUES (4, 'fig', 1, 1)")
    runs.run(**{"snapshot.mode": "when_needed"})
    assert after_ids(runs.read(topic)) == [4]


def test_killed_between_the_offset_commit_and_the_slot_confirmation_loses_and_repeats_nothing(
        orders, worker_props, unique):
    raw = config(orders, unique, **{"snapshot.mode": "no_data"})
    runs = CdcRuns(raw, worker_props)
    topic = f"pg{unique}.public.orders"
    runs.run()
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    orders.sql("UPDATE orders SET qty = 9 WHERE id = 1")
    confirmed_before = orders.slot(f"slot_{unique}")["confirmed_flush_lsn"]

    # When a run's process is SIGKILLed after the framework committed its offsets, before the slot was confirmed
    child = subprocess.run([sys.executable, str(HELPER), json.dumps(raw), json.dumps(worker_props), "after-offsets"],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert child.returncode == -9, child.stdout + child.stderr
    assert orders.slot(f"slot_{unique}")["confirmed_flush_lsn"] == confirmed_before
    assert ops(runs.read(topic)) == ["c", "u"]
    committed = runs.committed()

    # Then the next run confirms the slot from the committed offset and sends nothing again
    orders.sql("INSERT INTO orders VALUES (4, 'fig', 1, 1)")
    runs.run()
    assert after_ids(runs.read(topic)) == [4]
    assert parse_lsn(orders.slot(f"slot_{unique}")["confirmed_flush_lsn"]) > committed["lsn_commit"]


def test_exactly_once_runs_write_records_and_offsets_in_transactions(orders, worker_props, unique):
    runs = CdcRuns(config(orders, unique, **{"exactly.once.support": "required"}), worker_props)
    topic = f"pg{unique}.public.orders"
    first = runs.run()
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    second = runs.run()

    assert first["transactions"] >= 1 and second["transactions"] >= 1
    assert ops(runs.read(topic)) == ["r", "r", "c"]
    assert runs.committed()["lsn_commit"] <= parse_lsn(orders.slot(f"slot_{unique}")["confirmed_flush_lsn"])


def test_a_failure_after_some_records_confirms_the_slot_only_as_far_as_the_committed_offsets(
        orders, worker_props, unique):
    # Given a transform that fails on every record of the audit table (errors.tolerance=none)
    orders.sql("CREATE TABLE audit (id int PRIMARY KEY, what text)")
    failing = {"transforms": "boom", "transforms.boom.type": "org.apache.kafka.connect.transforms.Cast$Value",
               "transforms.boom.spec": "op:int32", "transforms.boom.predicate": "is-audit",
               "predicates": "is-audit", "predicates.is-audit.type": "TopicNameMatches",
               "predicates.is-audit.pattern": r".*\.audit"}
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data"}), worker_props)
    runs.run()
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    orders.sql("INSERT INTO audit VALUES (1, 'checked')")
    orders.sql("INSERT INTO orders VALUES (4, 'fig', 1, 1)")

    # When a run fails on the audit record, after the first order was sent
    failed = runs.run(ok=False, **failing)
    assert failed["status"] == "failed" and "TRANSFORMATION failed" in failed["error"]
    assert after_ids(runs.read(f"pg{unique}.public.orders")) == [3]

    # Then the slot still has what came after, and a run without the transform sends it, once
    runs.run()
    assert after_ids(runs.read(f"pg{unique}.public.audit")) == [1]
    assert after_ids(runs.read(f"pg{unique}.public.orders")) == [4]


def test_a_long_read_confirms_as_offsets_are_committed_during_the_run(orders, worker_props, unique):
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data", "max.batch.size": "500"}),
                   dict(worker_props, **{"offset.flush.interval.ms": 50}))
    runs.run()
    orders.sql("INSERT INTO orders SELECT g, 'bulk', g, 1 FROM generate_series(100, 20099) g")
    for i in range(300):
        orders.sql("UPDATE orders SET qty = %s WHERE id = 100", (i,))

    result = runs.run()

    assert result["records"] == 20300
    assert result["metrics"]["tables"]["public.orders"] == {"inserted": 20000, "updated": 300}
    assert result["metrics"]["wal_after"]["unconfirmed_bytes"] < 100_000


def test_an_offset_debezium_committed_continues_on_the_same_slot_without_a_snapshot(orders, worker_props, unique):
    from confluent_kafka import Producer

    from airflow_copycat.connectors.postgres_cdc.model import Change, Commit
    from airflow_copycat.connectors.postgres_cdc.pgoutput import PgOutputDecoder
    from airflow_copycat.runtime.offsets import offset_store
    from airflow_copycat.runtime.worker import WorkerConfig

    # Given Debezium's slot and publication, a transaction Debezium streamed, and the offset it committed
    slot, prefix, name = f"slot_{unique}", f"pg{unique}", f"cdc-{unique}"
    orders.sql(f"CREATE PUBLICATION pub_{unique} FOR ALL TABLES")
    orders.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    orders.sql("INSERT INTO orders VALUES (3, 'seen by debezium', 1, 1)")
    decoder = PgOutputDecoder()
    msgs = [decoder.decode(d, parse_lsn(lsn)) for lsn, d in orders.sql(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
        "'publication_names', %s)", (slot, f"pub_{unique}"))]
    change = next(m for m in msgs if isinstance(m, Change))
    commit = next(m for m in msgs if isinstance(m, Commit))
    # Debezium confirms the slot to lsn_commit, the transaction's end (see test_debezium_offsets.py)
    orders.sql("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, f"{commit.end_lsn >> 32:X}/"
                                                                             f"{commit.end_lsn & 0xFFFFFFFF:X}"))
    key = json.dumps([name, {"server": prefix}], separators=(",", ":"))
    value = json.dumps({"transaction_id": None, "lsn_proc": change.lsn, "messageType": "INSERT",
                        "lsn_commit": commit.end_lsn, "lsn": change.lsn, "txId": change.xid,
                        "ts_usec": change.commit_ts_us}, separators=(",", ":"))
    store = offset_store(WorkerConfig(worker_props, env={}))
    store.ensure_topic()
    store.close()
    producer = Producer({"bootstrap.servers": worker_props["bootstrap.servers"], "partitioner": "murmur2_random"})
    producer.produce(worker_props["offset.storage.topic"], key=key.encode(), value=value.encode())
    assert producer.flush(10) == 0
    orders.sql("INSERT INTO orders VALUES (4, 'after the move', 1, 1)")

    # When this connector runs with Debezium's config (snapshot.mode initial, the default)
    runs = CdcRuns(config(orders, unique), worker_props)
    runs.run()

    # Then there is no snapshot and nothing Debezium already sent: only the change after its offset
    messages = runs.read(f"{prefix}.public.orders")
    assert ops(messages) == ["c"] and after_ids(messages) == [4]
    # and the offset stays under Debezium's key
    raw = _offset_topic_keys(worker_props)
    assert raw == {key}


def _offset_topic_keys(worker_props) -> set[str]:
    from confluent_kafka import Consumer, TopicPartition

    from airflow_copycat.runtime.kafka import read_to_end

    topic = worker_props["offset.storage.topic"]
    c = Consumer({"bootstrap.servers": worker_props["bootstrap.servers"], "group.id": "cdc-offsets",
                  "enable.partition.eof": True})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {m.key().decode() for m in read_to_end(c, [TopicPartition(topic, p, 0) for p in parts])}
    finally:
        c.close()


def test_a_snapshot_stopped_half_way_continues_with_the_next_table_and_key(cdc_db, worker_props, unique):
    # Given three tables of 30 rows and runs that stop after 25 records
    for name in ("a", "b", "c"):
        cdc_db.sql(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        cdc_db.sql(f"INSERT INTO {name} SELECT g, 'row ' || g FROM generate_series(1, 30) g")
    runs = CdcRuns(config(cdc_db, unique, **{"snapshot.fetch.size": "10", "max.batch.size": "10"}), worker_props)

    # When runs with a record budget snapshot them, while a row changes
    results = [runs.run(**{"copycat.run.max.records": "25"})]
    cdc_db.sql("INSERT INTO c VALUES (31, 'new')")
    for _ in range(5):
        results.append(runs.run(**{"copycat.run.max.records": "25"}))
        if all((runs.committed(f"public.{t}") or {}).get("last_snapshot_record") for t in "abc"):
            break
    runs.run()

    # Then every row of every table was read, none twice, and the new row at least once
    for name in ("a", "b", "c"):
        messages = runs.read(f"pg{unique}.public.{name}")
        reads = [v["after"]["id"] for _, v in messages if v["op"] == "r"]
        assert len(reads) == len(set(reads)) and set(range(1, 31)) <= set(reads), name
        if name == "c":
            assert 31 in after_ids(messages)
    assert all(runs.committed(f"public.{t}")["last_snapshot_record"] for t in "abc")
    assert runs.committed()["lsn_commit"] > 0


def test_initial_only_snapshots_and_never_streams(orders, worker_props, unique):
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "initial_only"}), worker_props)
    runs.run()
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    runs.run()
    assert ops(runs.read(f"pg{unique}.public.orders")) == ["r", "r"]


def test_slot_drop_on_stop_drops_the_slot_after_each_run_and_loses_the_changes_between_runs(
        orders, worker_props, unique):
    # Debezium's development-only key: each run ends gracefully, so each run drops its slot
    runs = CdcRuns(config(orders, unique, **{"slot.drop.on.stop": "true"}), worker_props)
    runs.run()
    assert orders.slot(f"slot_{unique}") is None
    orders.sql("INSERT INTO orders VALUES (3, 'made while no slot existed', 1, 1)")
    second = runs.run()
    assert second["status"] == "ok" and orders.slot(f"slot_{unique}") is None
    assert after_ids(runs.read(f"pg{unique}.public.orders")) == [1, 2]


def test_the_password_stays_out_of_plans_results_offsets_and_logs(orders, worker_props, unique, caplog):
    secret = f"pw-{unique}-secret"
    runs = CdcRuns(config(orders, unique, **{"database.password": secret}), worker_props)
    caplog.set_level("DEBUG")
    ok = runs.run()
    orders.sql("SELECT pg_drop_replication_slot(%s)", (f"slot_{unique}",))
    failed = runs.run(ok=False)

    assert failed["status"] == "failed"
    seen = json.dumps([runs.plan, ok, failed, runs.committed()]) + caplog.text
    assert secret not in seen


def test_streamed_values_read_as_the_snapshot_reads_them(cdc_db, worker_props, unique):
    # Given a row of many types, snapshotted, then updated in a column that is not compared
    cdc_db.sql("CREATE TABLE kinds (id int PRIMARY KEY, n int, ts timestamptz, t timestamp, d date, f float8, "
               "r real, m numeric(12,3), i interval, b bytea, j jsonb, a int[], u uuid)")
    cdc_db.sql("INSERT INTO kinds VALUES (1, 0, '2024-03-01 10:00:00.123456+02', '2024-03-01 10:00:00.5', "
               "'2024-03-01', 0.1, 1.5, 12.345, '1 day 02:03:04', '\\xdeadbeef', '{\"k\": [1, 2]}', "
               "'{1,2,3}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')")
    runs = CdcRuns(config(cdc_db, unique, **{"decimal.handling.mode": "string"}), worker_props)
    runs.run()
    cdc_db.sql("SET TIME ZONE 'America/New_York'")  # the writer's session settings do not matter
    cdc_db.sql("UPDATE kinds SET n = 1 WHERE id = 1")
    runs.run()

    (_, snapshot), (_, update) = runs.read(f"pg{unique}.public.kinds")

    assert snapshot["op"] == "r" and update["op"] == "u"
    assert {k: v for k, v in update["after"].items() if k != "n"} == \
        {k: v for k, v in snapshot["after"].items() if k != "n"}
    assert snapshot["after"]["ts"] == "2024-03-01T08:00:00.123456Z"


def test_replaying_the_events_gives_the_table_across_runs_with_concurrent_writers(cdc_db, worker_props, unique):
    import random
    import threading

    import psycopg

    # Given a table that writers change all the time, in transactions of several statements
    cdc_db.sql("CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, note text)")
    cdc_db.sql("INSERT INTO acct SELECT g, 100, 'start' FROM generate_series(1, 300) g")
    stop = threading.Event()

    def writer(seed):
        rnd = random.Random(seed)
        with psycopg.connect(cdc_db.url) as conn:
            while not stop.is_set():
                with conn.transaction():
                    for _ in range(rnd.randint(1, 5)):
                        key = rnd.randint(1, 400)
                        action = rnd.random()
                        if action < 0.5:
                            conn.execute("UPDATE acct SET balance = balance + 1, note = %s WHERE id = %s",
                                         (f"w{seed}", key))
                        elif action < 0.8:
                            conn.execute("INSERT INTO acct VALUES (%s, 0, 'new') ON CONFLICT (id) DO NOTHING", (key,))
                        else:
                            conn.execute("DELETE FROM acct WHERE id = %s", (key,))

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(2)]
    for t in threads:
        t.start()
    runs = CdcRuns(config(cdc_db, unique, **{"snapshot.fetch.size": "50"}), worker_props)
    topic = f"pg{unique}.public.acct"
    state: dict[int, dict] = {}

    def replay():
        for key, value in runs.read(topic):
            if value is None:
                continue
            if value["op"] == "d":
                state.pop(key["id"], None)
            else:
                state[key["id"]] = value["after"]

    # When runs (some stopped by a record budget) read while the writers write
    try:
        for budget in ("100", "-1", "250", "-1"):
            runs.run(**{"copycat.run.max.records": budget})
            replay()
    finally:
        stop.set()
        for t in threads:
            t.join()
    runs.run()
    replay()

    # Then the events, replayed in order, give exactly the table
    table = {row[0]: {"id": row[0], "balance": row[1], "note": row[2]}
             for row in cdc_db.sql("SELECT id, balance, note FROM acct")}
    assert state == table


def _run_killing_the_reader(db, runs, **overrides) -> dict:
    """One run during which the backend reading the slot is terminated while it sends the read's rows
    (as a DBA's pg_terminate_backend or a network cut would); returns the run's result."""
    import threading
    import time

    import psycopg

    killed = []

    def kill_the_reader():
        with psycopg.connect(db.url, autocommit=True) as admin:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not killed:
                # the reader's backend waits on the client: it is sending the read's rows, or waits
                # (its cursor open, idle; its last statement the cursor's FETCH) for the next fetch of them
                row = admin.execute("SELECT pid FROM pg_stat_activity WHERE (query LIKE %s OR query LIKE %s) "
                                    "AND pid <> pg_backend_pid() AND (wait_event = 'ClientWrite' OR "
                                    "(state = 'idle' AND query LIKE 'FETCH%%'))",
                                    ("%pg_logical_slot_peek_binary_changes%", "%copycat_slot_read%")).fetchone()
                if row:
                    time.sleep(0.5)  # let some records go out and some offsets be committed first
                    admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                    killed.append(row[0])
                time.sleep(0.01)

    killer = threading.Thread(target=kill_the_reader)
    killer.start()
    try:
        result = runs.run(ok=False, **overrides)
    finally:
        killer.join()
    assert killed, "the reader was never seen sending rows"
    return result


def _bulk_runs(orders, worker_props, unique):
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data", "max.batch.size": "200"}),
                   dict(worker_props, **{"offset.flush.interval.ms": 100}))
    runs.run()
    orders.sql("INSERT INTO orders SELECT g, repeat('x', 300), g, 1 FROM generate_series(100, 30099) g")
    return runs


def test_a_connection_lost_in_the_middle_of_a_read_fails_the_run_and_the_next_run_loses_nothing(
        orders, worker_props, unique):
    runs = _bulk_runs(orders, worker_props, unique)
    first = _run_killing_the_reader(orders, runs)  # errors.retry.timeout=0: no retries
    assert first["status"] == "failed" and first["records"] > 0, first
    runs.run()

    ids = after_ids(runs.read(f"pg{unique}.public.orders"))
    assert set(ids) == set(range(100, 30100))
    assert len(ids) - len(set(ids)) <= first["records"]  # repeats at most what the failed run sent


def test_a_read_outlives_the_servers_idle_session_timeouts(orders, worker_props, unique, monkeypatch):
    # Given a server that ends sessions idle for 500 ms (in a transaction or not), and a commit in the middle
    # of a long read that takes longer than that (a slow flush), without retries
    import time

    from airflow_copycat.connectors.postgres_cdc.source import PostgresCdcSourceTask

    orders.sql(f"ALTER DATABASE {orders.dbname} SET idle_in_transaction_session_timeout = 500")
    orders.sql(f"ALTER DATABASE {orders.dbname} SET idle_session_timeout = 500")
    runs = CdcRuns(config(orders, unique, **{"snapshot.mode": "no_data", "max.batch.size": "200"}),
                   dict(worker_props, **{"offset.flush.interval.ms": 100}))
    runs.run()
    orders.sql("INSERT INTO orders SELECT g, repeat('x', 300), g, 1 FROM generate_series(100, 30099) g")
    slow = []
    commit = PostgresCdcSourceTask.commit

    def slow_commit(self):
        if self._read is not None and not self._read.exhausted and not slow:
            slow.append(1)
            time.sleep(1.5)
        return commit(self)

    monkeypatch.setattr(PostgresCdcSourceTask, "commit", slow_commit)
    # When the run reads the changes
    result = runs.run(ok=False)
    # Then the read's session was not ended: the run succeeds, every change once
    assert slow and result["status"] == "ok", result.get("error")
    assert after_ids(runs.read(f"pg{unique}.public.orders")) == list(range(100, 30100))


def test_with_retries_a_lost_read_resumes_in_the_same_run_after_the_last_change_sent(orders, worker_props, unique):
    runs = _bulk_runs(orders, worker_props, unique)
    result = _run_killing_the_reader(orders, runs, **{"errors.retry.timeout": "60000"})
    assert result["status"] == "ok" and result["retries"] >= 1, result

    ids = after_ids(runs.read(f"pg{unique}.public.orders"))
    assert ids == list(range(100, 30100))  # every row once, in order


def test_snapshot_records_carry_debeziums_position_marks(cdc_db, worker_props, unique):
    for name, rows in (("a", 3), ("b", 1), ("c", 2)):
        cdc_db.sql(f"CREATE TABLE {name} (id int PRIMARY KEY)")
        cdc_db.sql(f"INSERT INTO {name} SELECT generate_series(1, {rows})")
    runs = CdcRuns(config(cdc_db, unique, **{"snapshot.fetch.size": "2"}), worker_props)
    runs.run()
    marks = [v["source"]["snapshot"] for t in "abc" for _, v in runs.read(f"pg{unique}.public.{t}")]
    assert marks == ["first", "true", "last_in_data_collection", "first_in_data_collection",
                     "first_in_data_collection", "last"]
    # each table's own partition says it was read to its end, and the stream sends all three from now on
    assert all(runs.committed(f"public.{t}")["last_snapshot_record"] is True for t in "abc")
    assert set(runs.committed()["copycat_tables"]) == {"public.a", "public.b", "public.c"}


def test_a_filtered_publication_follows_the_include_list(orders, worker_props, unique):
    orders.sql("CREATE TABLE secret (id int PRIMARY KEY, v text)")
    raw = config(orders, unique, **{"publication.autocreate.mode": "filtered", "table.include.list": "public.orders",
                                    "snapshot.mode": "no_data"})
    runs = CdcRuns(raw, worker_props)
    runs.run()
    published = orders.sql("SELECT tablename FROM pg_publication_tables WHERE pubname = %s", (f"pub_{unique}",))
    assert published == [("orders",)]

    orders.sql("INSERT INTO secret VALUES (1, 'never decoded')")
    orders.sql("INSERT INTO orders VALUES (3, 'plum', 7, 2.00)")
    result = runs.run()
    assert list(result["topics"]) == [f"pg{unique}.public.orders"]

    runs.run(**{"table.include.list": "public.orders,public.secret"})
    published = orders.sql("SELECT tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1",
                           (f"pub_{unique}",))
    assert published == [("orders",), ("secret",)]


def test_a_slot_of_another_plugin_or_database_is_refused_by_name(orders, worker_props, unique, postgres_cdc_url):
    orders.sql("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (f"slot_{unique}",))
    failed = CdcRuns(config(orders, unique), worker_props).run(ok=False)
    assert f"replication slot 'slot_{unique}' decodes with plugin 'test_decoding'" in failed["error"]

    import psycopg

    with psycopg.connect(postgres_cdc_url, autocommit=True) as other:  # the server's own database
        other.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"elsewhere_{unique}",))
        try:
            failed = CdcRuns(config(orders, unique, **{"slot.name": f"elsewhere_{unique}"}), worker_props).run(ok=False)
        finally:
            other.execute("SELECT pg_drop_replication_slot(%s)", (f"elsewhere_{unique}",))
    assert f"replication slot 'elsewhere_{unique}' belongs to database" in failed["error"]


def test_a_key_changing_update_whose_create_failed_is_sent_again_whole_by_the_next_run(cdc_db, worker_props, unique):
    # Given a row snapshotted, then its key changed along with a value too large for the producer's limit
    cdc_db.sql("CREATE TABLE t (id int PRIMARY KEY, big text)")
    cdc_db.sql("INSERT INTO t VALUES (1, 'small')")
    runs = CdcRuns(config(cdc_db, unique), worker_props)
    runs.run()
    topic = f"pg{unique}.public.t"
    runs.read(topic)
    cdc_db.sql("UPDATE t SET id = 1001, big = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g) "
               "WHERE id = 1")
    # When a run sends the update's delete (it fits) and fails on its create (it does not)
    failed = runs.run(ok=False, **{"producer.override.message.max.bytes": "4000"})
    assert failed["status"] != "ok"
    # Then the next run (limit lifted) sends the change again: the create of the new key arrives
    runs.run()
    events = [(k["id"], v and v["op"]) for k, v in runs.read(topic)]
    assert (1001, "c") in events, events


def test_an_exactly_once_run_with_nothing_to_send_confirms_the_slot_as_far_as_it_read(cdc_db, worker_props, unique):
    # Given exactly-once runs without heartbeats that capture public.a only, and a busy uncaptured table
    cdc_db.sql("CREATE TABLE a (id int PRIMARY KEY)")
    cdc_db.sql("CREATE TABLE noise (id int)")
    runs = CdcRuns(config(cdc_db, unique, **{"snapshot.mode": "no_data", "table.include.list": "public.a",
                                              "exactly.once.support": "required"}), worker_props)
    runs.run()
    cdc_db.sql("INSERT INTO a VALUES (1)")
    runs.run()
    # When a run reads only changes of the uncaptured table (nothing to send)
    cdc_db.sql("INSERT INTO noise SELECT generate_series(1, 50000)")
    result = runs.run()
    # Then it leaves the slot confirmed to where it read, as a run without transactions does
    assert result["metrics"]["wal_after"]["unconfirmed_bytes"] < 100_000, result["metrics"]["wal_after"]
    assert after_ids(runs.read(f"pg{unique}.public.a")) == [1]
