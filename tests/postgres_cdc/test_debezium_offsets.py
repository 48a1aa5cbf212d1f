"""Offsets Debezium wrote and offsets this connector wrote resume the same way.

What Debezium's PostgreSQL connector puts in ``lsn_commit``: ``PostgresStreamingChangeEventSource``
calls ``commitMessage(partition, offsetContext, lsn)`` on a COMMIT with ``lsn =
stream.lastReceivedLsn()``; pgjdbc's logical replication stream sets that to the XLogData
message's start position, which the walsender sets to ``ctx->write_location`` -- for a commit,
``txn->end_lsn`` (PostgreSQL's ``commit_cb_wrapper``: "points to the end of the record"). So
Debezium's ``lsn_commit`` is the *end* of the last committed transaction, as ours. Inside a
transaction Debezium's offsets keep the previous transaction's ``lsn_commit`` with the change's
``lsn``/``lsn_proc`` and ``txId``; after a COMMIT (a heartbeat's offset) all three positions are
that end. These tests resume from each shape, and from ours, on slots made at the same point.
"""

from __future__ import annotations

import json

import pytest

from airflow_copycat.connectors.postgres_cdc.model import Begin, Change, Commit, parse_lsn
from airflow_copycat.connectors.postgres_cdc.pgoutput import PgOutputDecoder

from tests.postgres_cdc.cdc_runs import CdcRuns
from tests.postgres_cdc.test_source import after_ids, config


def _write_offset(worker_props, name: str, prefix: str, offset: dict) -> None:
    from confluent_kafka import Producer

    from airflow_copycat.runtime.offsets import offset_store
    from airflow_copycat.runtime.worker import WorkerConfig

    store = offset_store(WorkerConfig(worker_props, env={}))
    store.ensure_topic()
    store.close()
    key = json.dumps([name, {"server": prefix}], separators=(",", ":"))
    producer = Producer({"bootstrap.servers": worker_props["bootstrap.servers"], "partitioner": "murmur2_random"})
    producer.produce(worker_props["offset.storage.topic"], key=key.encode(),
                     value=json.dumps(offset, separators=(",", ":")).encode())
    assert producer.flush(10) == 0


def _transactions(db, slot: str, publication: str) -> list[dict]:
    """The transactions a slot holds: xid, commit time, end LSN and its changes' LSNs."""
    decoder, out = PgOutputDecoder(), []
    for lsn, data in db.sql("SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                            "'proto_version', '1', 'publication_names', %s)", (slot, publication)):
        message = decoder.decode(data, parse_lsn(lsn))
        if isinstance(message, Begin):
            out.append({"xid": message.xid, "ts": message.commit_ts_us, "changes": [], "final": message.final_lsn})
        elif isinstance(message, Change):
            out[-1]["changes"].append(message.lsn)
        elif isinstance(message, Commit):
            out[-1].update(end=message.end_lsn, commit=message.commit_lsn, message_lsn=parse_lsn(lsn))
    return out


@pytest.fixture
def history(cdc_db, worker_props, unique):
    """Our connector (no snapshot) and three more slots made at the same point; then transaction 1 (row 3),
    transaction 2 (rows 4 and 5) and transaction 3 (row 6). Our connector streamed up to transaction 2's last
    change (a record budget of 3) and committed its offset."""
    cdc_db.sql("CREATE TABLE t (id int PRIMARY KEY, v text)")
    ours = CdcRuns(config(cdc_db, unique, **{"snapshot.mode": "no_data", "max.batch.size": "1"}), worker_props)
    ours.run()  # makes the slot and the publication
    for i in range(3):
        cdc_db.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"slot_{unique}_{i}",))
    cdc_db.sql("INSERT INTO t VALUES (3, 'tx1')")
    with cdc_db.conn.transaction():
        cdc_db.sql("INSERT INTO t VALUES (4, 'tx2')")
        cdc_db.sql("INSERT INTO t VALUES (5, 'tx2')")
    ours.run(**{"copycat.run.max.records": "3"})
    cdc_db.sql("INSERT INTO t VALUES (6, 'tx3')")
    txs = _transactions(cdc_db, f"slot_{unique}_0", f"pub_{unique}")
    return ours, txs


def test_the_commit_message_position_is_the_transactions_end_and_ours_writes_it(history):
    # What Debezium's lsn_commit reads: the position a COMMIT message comes at is the transaction's end LSN
    ours, txs = history
    tx1, tx2, _ = txs
    assert all(tx["message_lsn"] == tx["end"] > tx["commit"] for tx in txs)
    # and ours, after transaction 2's last change, holds that same end in lsn_commit
    offset = ours.committed()
    assert (offset["lsn_commit"], offset["lsn"], offset["txId"]) == (tx2["end"], tx2["changes"][-1], tx2["xid"])


@pytest.mark.parametrize("i, expected", [(0, [6]), (1, [6]), (2, [5, 6])],
                         ids=["after transaction 2's last change", "after transaction 2's commit (a heartbeat)",
                              "after transaction 2's first change"])
def test_a_debezium_offset_resumes_as_ours_does(history, cdc_db, worker_props, unique, i, expected):
    ours, (tx1, tx2, _) = history
    # Given Debezium's offset of that point, committed for a connector on a slot made with ours
    offset = {
        0: {"lsn": tx2["changes"][-1], "lsn_proc": tx2["changes"][-1], "lsn_commit": tx1["end"],
            "txId": tx2["xid"], "ts_usec": tx2["ts"], "messageType": "INSERT", "transaction_id": None},
        1: {"lsn": tx2["end"], "lsn_proc": tx2["end"], "lsn_commit": tx2["end"], "txId": tx2["xid"],
            "ts_usec": tx2["ts"]},
        2: {"lsn": tx2["changes"][0], "lsn_proc": tx2["changes"][0], "lsn_commit": tx1["end"],
            "txId": tx2["xid"], "ts_usec": tx2["ts"], "messageType": "INSERT", "transaction_id": None},
    }[i]
    name, prefix = f"dbz-{unique}-{i}", f"dbz{unique}{i}"
    _write_offset(worker_props, name, prefix, offset)
    theirs = CdcRuns(config(cdc_db, unique, **{"name": name, "topic.prefix": prefix, "slot.name": f"slot_{unique}_{i}",
                                               "snapshot.mode": "initial"}), worker_props)

    # When it runs, and ours runs
    theirs.run()
    ours.read(f"pg{unique}.public.t")
    ours.run()

    # Then each sends the changes after its offset, nothing before: Debezium's offset after transaction 2 and
    # ours resume identically
    assert after_ids(theirs.read(f"{prefix}.public.t")) == expected
    assert after_ids(ours.read(f"pg{unique}.public.t")) == [6]
