"""The pgoutput decoder, on WAL a real PostgreSQL wrote (wal_level=logical), read through a slot.

Each test makes changes with SQL, peeks the slot's pgoutput messages and checks that the decoded
model objects say what the SQL did. A few malformed messages are built by hand: PostgreSQL never
sends them, so there is no other way to see the errors.
"""

from __future__ import annotations

import struct

import pytest

from airflow_copycat.connectors.postgres_cdc.model import (UNCHANGED_TOAST, Begin, Change, Commit, Relation,
                                                          Truncate, parse_lsn)
from airflow_copycat.connectors.postgres_cdc.pgoutput import (LogicalMessage, Origin, PgOutputDecoder,
                                                              PgOutputError, TypeInfo, WireChange)


class Wal:
    """A slot and a publication on ``db``; :meth:`messages` decodes what the slot has since the last call."""

    def __init__(self, db, messages: bool = False):
        self.db = db
        self.messages_option = messages
        db.sql("CREATE PUBLICATION pub FOR ALL TABLES")
        db.sql("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        self.decoder = PgOutputDecoder()

    def messages(self) -> list:
        extra = ", 'messages', 'true'" if self.messages_option else ""
        rows = self.db.sql("SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL, "
                           f"'proto_version', '1', 'publication_names', 'pub'{extra})")
        return [self.decoder.decode(data, parse_lsn(lsn)) for lsn, data in rows]


def changes(messages):
    return [m for m in messages if isinstance(m, (Change, Truncate))]


@pytest.fixture
def wal(cdc_db):
    cdc_db.sql("CREATE TABLE t (id int PRIMARY KEY, name text, qty numeric(10,2), at timestamptz)")
    return Wal(cdc_db)


def test_a_transaction_is_begin_relation_changes_commit_with_its_xid_and_positions(wal):
    wal.db.conn.execute("BEGIN")
    wal.db.conn.execute("INSERT INTO t VALUES (1, 'a', 1.50, '2024-05-01 12:00:00+00')")
    (xid,) = wal.db.conn.execute("SELECT txid_current()").fetchone()
    wal.db.conn.execute("INSERT INTO t VALUES (2, NULL, NULL, NULL)")
    wal.db.conn.execute("COMMIT")

    msgs = wal.messages()

    assert [type(m) for m in msgs] == [Begin, Relation, WireChange, WireChange, Commit]  # a UTF-8 database
    begin, relation, first, second, commit = msgs
    assert begin.xid == xid and first.xid == xid and second.xid == xid
    assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
    assert begin.commit_ts_us == commit.commit_ts_us == first.commit_ts_us
    assert first.lsn < second.lsn < commit.commit_lsn
    assert (relation.schema, relation.table, relation.replica_identity) == ("public", "t", "d")
    assert [(c.name, c.type_oid, c.key) for c in relation.columns] == [
        ("id", 23, True), ("name", 25, False), ("qty", 1700, False), ("at", 1184, False)]
    assert relation.columns[2].type_modifier == (10 << 16 | 2) + 4  # numeric(10,2)
    assert first.op == "c" and first.before is None
    assert first.after[:3] == ("1", "a", "1.50") and first.after[3].startswith("2024-05-01")
    assert second.after == ("2", None, None, None)


def test_updates_carry_the_old_key_only_when_it_changed_and_deletes_carry_it(wal):
    wal.db.sql("INSERT INTO t VALUES (1, 'a', 1, NULL)")
    wal.db.sql("UPDATE t SET name = 'b' WHERE id = 1")
    wal.db.sql("UPDATE t SET id = 5 WHERE id = 1")
    wal.db.sql("DELETE FROM t WHERE id = 5")

    insert, update, key_update, delete = changes(wal.messages())

    assert update.op == "u" and update.before is None and update.after[:2] == ("1", "b")
    assert key_update.before == ("1", None, None, None) and key_update.after[0] == "5"
    assert delete.op == "d" and delete.before == ("5", None, None, None) and delete.after is None


def test_replica_identity_full_gives_whole_before_images(wal):
    wal.db.sql("ALTER TABLE t REPLICA IDENTITY FULL")
    wal.db.sql("INSERT INTO t VALUES (1, 'a', 2.5, NULL)")
    wal.db.sql("UPDATE t SET name = 'b' WHERE id = 1")
    wal.db.sql("DELETE FROM t WHERE id = 1")

    msgs = wal.messages()
    insert, update, delete = changes(msgs)

    assert insert.relation.replica_identity == "f"
    assert update.before == ("1", "a", "2.50", None) and update.after[:2] == ("1", "b")
    assert delete.before == ("1", "b", "2.50", None)


def test_an_unchanged_toasted_value_is_marked_not_sent(wal):
    wal.db.sql("ALTER TABLE t ALTER COLUMN name SET STORAGE EXTERNAL")  # stored out of line, uncompressed
    big = "x" * 100_000
    wal.db.sql("INSERT INTO t VALUES (1, %s, 1, NULL)", (big,))
    wal.db.sql("UPDATE t SET qty = 2 WHERE id = 1")

    insert, update = changes(wal.messages())

    assert insert.after[1] == big
    assert update.after[1] is UNCHANGED_TOAST and update.after[2] == "2.00"


def test_truncate_names_every_table_and_its_options(wal):
    wal.db.sql("CREATE TABLE u (id int PRIMARY KEY)")
    wal.db.sql("CREATE TABLE s (id serial PRIMARY KEY)")
    wal.db.sql("INSERT INTO t VALUES (1, 'a', 1, NULL)")
    wal.db.sql("INSERT INTO u VALUES (1)")
    wal.db.sql("INSERT INTO s DEFAULT VALUES")
    wal.messages()

    wal.db.sql("TRUNCATE t, u")
    wal.db.sql("TRUNCATE s RESTART IDENTITY CASCADE")
    first, second = changes(wal.messages())

    assert isinstance(first, Truncate) and sorted(r.table for r in first.relations) == ["t", "u"]
    assert not first.cascade and not first.restart_identity
    assert [r.table for r in second.relations] == ["s"] and second.cascade and second.restart_identity
    assert first.xid and first.commit_ts_us


def test_a_new_relation_message_follows_add_and_drop_column(wal):
    wal.db.sql("INSERT INTO t VALUES (1, 'a', 1, NULL)")
    wal.db.sql("ALTER TABLE t ADD COLUMN color text DEFAULT 'red'")
    wal.db.sql("INSERT INTO t VALUES (2, 'b', 2, NULL)")
    wal.db.sql("ALTER TABLE t DROP COLUMN qty")
    wal.db.sql("INSERT INTO t VALUES (3, 'c', NULL, 'blue')")

    before, added, dropped = changes(wal.messages())

    assert [c.name for c in before.relation.columns] == ["id", "name", "qty", "at"]
    assert [c.name for c in added.relation.columns] == ["id", "name", "qty", "at", "color"]
    assert added.after == ("2", "b", "2.00", None, "red")
    assert [c.name for c in dropped.relation.columns] == ["id", "name", "at", "color"]
    assert dropped.after == ("3", "c", None, "blue")
    assert wal.decoder.relations[before.relation.oid] == dropped.relation


def test_a_type_message_names_an_enum_before_its_relation(cdc_db):
    cdc_db.sql("CREATE TYPE mood AS ENUM ('sad', 'happy')")
    cdc_db.sql("CREATE TABLE p (id int PRIMARY KEY, m mood)")
    wal = Wal(cdc_db)
    cdc_db.sql("INSERT INTO p VALUES (1, 'happy')")

    msgs = wal.messages()

    types = [m for m in msgs if isinstance(m, TypeInfo)]
    assert [(t.schema, t.name) for t in types] == [("public", "mood")]
    (insert,) = changes(msgs)
    assert insert.relation.columns[1].type_name == "mood" and insert.after == ("1", "happy")


def test_logical_messages_and_replication_origins_decode(cdc_db):
    cdc_db.sql("CREATE TABLE t (id int PRIMARY KEY)")
    wal = Wal(cdc_db, messages=True)
    conn = cdc_db.conn
    conn.execute("SELECT pg_replication_origin_create('upstream')")
    conn.execute("SELECT pg_replication_origin_session_setup('upstream')")
    conn.execute("BEGIN")
    conn.execute("SELECT pg_replication_origin_xact_setup('0/AB', now())")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("SELECT pg_logical_emit_message(true, 'audit', 'hello')")
    conn.execute("COMMIT")
    conn.execute("SELECT pg_replication_origin_session_reset()")

    msgs = wal.messages()

    origin = next(m for m in msgs if isinstance(m, Origin))
    assert origin.name == "upstream" and origin.commit_lsn == 0xAB
    message = next(m for m in msgs if isinstance(m, LogicalMessage))
    assert message.transactional and message.prefix == "audit" and message.content == b"hello"


def test_undecodable_messages_say_what_and_where():
    decoder = PgOutputDecoder()
    with pytest.raises(PgOutputError, match="unknown pgoutput message type b'Z' at LSN 10"):
        decoder.decode(b"Z", 0x10)
    with pytest.raises(PgOutputError, match="relation 77 at LSN 20 before its Relation message"):
        decoder.decode(b"I" + struct.pack(">I", 77) + b"N" + struct.pack(">h", 0), 0x20)
    with pytest.raises(PgOutputError, match="malformed pgoutput B message at LSN 30"):
        decoder.decode(b"B\x00\x01", 0x30)
