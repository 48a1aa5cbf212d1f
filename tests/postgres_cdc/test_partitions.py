"""What the committed offsets say a run must do with each table (no database: the rules alone)."""

from __future__ import annotations

from airflow_copycat.connectors.postgres_cdc.partitions import (
    DONE, FRESH, RESUME, STREAMED, TABLES_KEY, Captured, floor_of, server_partition, table_partition, table_plan,
    table_state)


def test_partitions_keep_debeziums_server_key_and_add_one_per_table():
    assert server_partition("shop") == {"server": "shop"}
    assert table_partition("shop", "public.orders") == {"server": "shop", "table": "public.orders"}


def test_a_stream_offset_without_our_tables_key_takes_every_table_as_streamed():
    # Debezium's streaming offset (or a completed snapshot's): nothing is read again
    debezium = {"lsn": 10, "lsn_commit": 10, "txId": 5, "ts_usec": 1}
    assert Captured.of(debezium).has("public.anything")
    assert Captured.of({"lsn": 3, "snapshot": True, "last_snapshot_record": True}).has("public.x")
    # an offset committed in the middle of Debezium's (or our older) snapshot: the snapshot starts again
    assert not Captured.of({"lsn": 3, "snapshot": True, "last_snapshot_record": False}).has("public.x")
    assert not Captured.of(None).has("public.x")


def test_the_stream_sends_a_tables_changes_from_its_boundary_on():
    captured = Captured.of({"lsn": 1, "lsn_commit": 100, TABLES_KEY: {"public.a": 0, "public.b": 500}})
    assert captured.wants("public.a", 1) and captured.wants("public.b", 500)
    assert not captured.wants("public.b", 499) and not captured.wants("public.c", 10_000)
    # boundaries the stream passed are written as 0
    assert captured.to_offset(600) == {"public.a": 0, "public.b": 0}
    assert captured.to_offset(400) == {"public.a": 0, "public.b": 500}


def test_each_tables_state_follows_its_offset_and_the_streams_floor():
    none = Captured()
    done = {"snapshot": True, "last_snapshot_record": True, "lsn": 200}
    half = {"snapshot": True, "last_snapshot_record": False, "lsn": 200, "snapshot_after_key": ["17"]}
    assert table_state("public.a", None, none, 0).state == FRESH
    assert table_state("public.a", done, none, 100) == table_state("public.a", done, none, 200)
    assert table_state("public.a", done, none, 100).state == DONE
    assert table_state("public.a", half, none, 100).after_key == ["17"]
    assert table_state("public.a", half, none, 100).state == RESUME
    # a boundary the stream went past (the table left the include list and came back, a slot made anew):
    # the table is read again from its start
    assert table_state("public.a", done, none, 201).state == FRESH
    assert table_state("public.a", half, none, 201).state == FRESH
    # a table the stream sends already is not read
    assert table_state("public.a", None, Captured({"public.a": 0}), 0).state == STREAMED
    plan = table_plan(["public.a", "public.b"], {"public.a": done}, none, 0)
    assert [s.state for s in plan.values()] == [DONE, FRESH]


def test_the_floor_is_the_streams_lsn_commit():
    assert floor_of({"lsn": 5, "lsn_commit": 9}) == 9
    assert floor_of(None) == 0
    assert floor_of({"lsn": 3, "snapshot": True, "last_snapshot_record": False}) == 0
