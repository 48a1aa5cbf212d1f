"""The PostgreSQL CDC source's configuration: Debezium's keys as they are, every problem named at once."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.engine import make_url

from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.connectors.postgres_cdc.config import CONFIG_DEF, CdcConfig, validate
from airflow_copycat.connectors.postgres_cdc.filters import split_regexes

BASE = {
    "name": "inventory-cdc",
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.hostname": "db.example",
    "database.port": "5432",
    "database.user": "debezium",
    "database.password": "s3cret-pw",
    "database.dbname": "inventory",
    "topic.prefix": "dbserver1",
    "plugin.name": "pgoutput",
}


def problems(raw) -> dict[str, str]:
    return {p.key: p.message for p in validate(raw)}


def test_a_debezium_config_parses_with_debeziums_defaults():
    config = CdcConfig.parse(BASE)

    assert config.topic_prefix == "dbserver1"
    assert config.database == "inventory"
    assert config["slot.name"] == "debezium"
    assert config["publication.name"] == "dbz_publication"
    assert config["publication.autocreate.mode"] == "all_tables"
    assert config.snapshot_mode == "initial"
    assert config.tombstones_on_delete is True
    assert config.skipped_operations == frozenset({"t"})  # Debezium skips truncates unless told otherwise
    assert config["heartbeat.interval.ms"] == 0
    assert config["decimal.handling.mode"] == "precise"
    assert config["time.precision.mode"] == "adaptive"
    assert config["slot.drop.on.stop"] is False
    assert config["max.batch.size"] == 2048
    assert config["connector.class"] == BASE["connector.class"]  # framework keys pass through


def test_every_bad_key_is_named_in_one_error_and_the_password_never_shows():
    raw = dict(BASE, **{
        "plugin.name": "decoderbufs",
        "snapshot.mode": "sometimes",
        "decimal.handling.mode": "exact",
        "time.precision.mode": "structured",
        "database.port": "not-a-port",
        "table.include.list": "public.orders",
        "table.exclude.list": "public.audit",
        "slot.name": "Bad-Slot",
        "database.server.name": "other",
    })

    with pytest.raises(ConfigException) as e:
        CdcConfig.parse(raw)

    named = {p.key for p in e.value.problems}
    assert named == {"plugin.name", "snapshot.mode", "decimal.handling.mode", "time.precision.mode",
                     "database.port", "table.exclude.list", "slot.name", "database.server.name"}
    text = str(e.value)
    assert "s3cret-pw" not in text and "inventory-cdc" in text
    assert "pgoutput" in e.value.problems[0].message or "pgoutput" in text
    assert "s3cret-pw" not in repr(CdcConfig.parse(BASE)) and "s3cret-pw" not in str(CdcConfig.parse(BASE).values)


def test_the_database_is_required_unless_an_airflow_connection_filled_it():
    raw = {"topic.prefix": "p"}
    assert set(problems(raw)) == {"database.hostname", "database.dbname", "database.user"}

    unresolved = dict(raw, **{"airflow.conn.id": "shop_db"})
    assert "resolved only by the Airflow" in problems(unresolved)["airflow.conn.id"]

    # what resolve_db_connection fills from an Airflow connection of type postgres
    resolved = dict(unresolved, **{"connection.url": "postgresql+psycopg://db.example:6432/shop?sslmode=require",
                                   "connection.user": "cdc", "connection.password": "pw-from-airflow"})
    config = CdcConfig.parse(resolved)
    kwargs = config.connect_kwargs()
    assert kwargs == {"host": "db.example", "port": 6432, "dbname": "shop", "user": "cdc",
                      "password": "pw-from-airflow", "sslmode": "require"}
    assert config.database == "shop"

    both = dict(resolved, **{"database.hostname": "other"})
    assert "name the database one way" in problems(both)["database.hostname"]

    mysql = dict(resolved, **{"connection.url": "mysql+pymysql://h/db"})
    assert "PostgreSQL URL" in problems(mysql)["connection.url"]


def test_topic_prefix_and_the_older_server_name():
    assert "topic.prefix" in problems({k: v for k, v in BASE.items() if k != "topic.prefix"})
    older = {k: v for k, v in BASE.items() if k != "topic.prefix"} | {"database.server.name": "legacy"}
    assert CdcConfig.parse(older).topic_prefix == "legacy"
    same = dict(BASE, **{"database.server.name": "dbserver1"})
    assert CdcConfig.parse(same).topic_prefix == "dbserver1"
    assert "differs from topic.prefix" in problems(dict(BASE, **{"database.server.name": "x"}))["database.server.name"]
    assert "may only hold" in problems(dict(BASE, **{"topic.prefix": "bad prefix!"}))["topic.prefix"]


@pytest.mark.parametrize("plugin", ["decoderbufs", "wal2json"])
def test_only_pgoutput_is_accepted_and_the_problem_says_why(plugin):
    message = problems(dict(BASE, **{"plugin.name": plugin}))["plugin.name"]
    assert "not supported" in message and "plugin.name=pgoutput" in message


@pytest.mark.parametrize("given, mode", [("initial", "initial"), ("INITIAL_ONLY", "initial_only"),
                                         ("no_data", "no_data"), ("when_needed", "when_needed"),
                                         ("never", "no_data"), ("schema_only", "no_data"), ("exported", "initial")])
def test_snapshot_modes_and_debeziums_older_names(given, mode):
    assert CdcConfig.parse(dict(BASE, **{"snapshot.mode": given})).snapshot_mode == mode


def test_snapshot_mode_always_is_refused_with_what_to_use_instead():
    message = problems(dict(BASE, **{"snapshot.mode": "always"}))["snapshot.mode"]
    assert "every run" in message and "when_needed" in message


def test_table_filters_match_debeziums_rules():
    config = CdcConfig.parse(dict(BASE, **{"table.include.list": r"public\.orders,inventory\.cust.*"}))

    assert config.table_included("public", "orders")
    assert config.table_included("PUBLIC", "Orders")  # case-insensitive, as Debezium's patterns
    assert config.table_included("inventory", "customers")
    assert not config.table_included("public", "orders_archive")  # anchored: not a prefix match
    assert not config.table_included("x", "public.orders")
    assert not config.table_included("public", "order")

    excluding = CdcConfig.parse(dict(BASE, **{"table.exclude.list": r"public\.audit_.*"}))
    assert excluding.table_included("public", "orders")
    assert not excluding.table_included("public", "audit_log")
    # system tables are never captured
    assert not excluding.table_included("pg_catalog", "pg_class")
    assert not excluding.table_included("information_schema", "tables")
    assert not excluding.table_included("public", "spatial_ref_sys")
    assert not excluding.table_included("pg_temp_3", "t")


def test_schema_filters_and_the_snapshot_subset():
    config = CdcConfig.parse(dict(BASE, **{"schema.include.list": "sales",
                                          "snapshot.include.collection.list": r"sales\.big"}))
    assert config.table_included("sales", "big") and config.table_included("sales", "small")
    assert not config.table_included("public", "big")
    assert config.snapshot_included("sales", "big")
    assert not config.snapshot_included("sales", "small")  # captured, streamed, but not snapshotted
    excluded = CdcConfig.parse(dict(BASE, **{"schema.exclude.list": "staging"}))
    assert not excluded.table_included("staging", "t") and excluded.table_included("public", "t")


def test_column_filters_use_fully_qualified_column_names():
    config = CdcConfig.parse(dict(BASE, **{"column.exclude.list": r"public\.customers\.(ssn|card_.*)"}))
    assert config.column_included("public", "customers", "email")
    assert not config.column_included("public", "customers", "ssn")
    assert not config.column_included("public", "customers", "card_number")
    assert config.column_included("public", "orders", "ssn")  # another table's ssn stays

    including = CdcConfig.parse(dict(BASE, **{"column.include.list": [r"public\.t\.id", r"public\.t\.name"]}))
    assert including.column_included("public", "t", "id") and not including.column_included("public", "t", "x")


def test_include_and_exclude_together_are_a_problem_for_each_pair():
    raw = dict(BASE, **{"schema.include.list": "a", "schema.exclude.list": "b",
                        "column.include.list": "a.b.c", "column.exclude.list": "a.b.d"})
    assert {"schema.exclude.list", "column.exclude.list"} <= set(problems(raw))


def test_regex_lists_split_like_debeziums_with_escaped_commas():
    assert split_regexes(r"public\.a{1\,3}, public\.b ,, ") == [r"public\.a{1,3}", r"public\.b"]
    config = CdcConfig.parse(dict(BASE, **{"table.include.list": r"public\.a{1\,3}"}))
    assert config.table_included("public", "aaa") and not config.table_included("public", "aaaa")
    assert "invalid regular expression" in problems(dict(BASE, **{"table.include.list": "public.(oops"}))[
        "table.include.list"]


def test_debezium_keys_that_would_change_the_events_are_refused_unless_at_their_default():
    raw = dict(BASE, **{"provide.transaction.metadata": "true", "topic.delimiter": "_",
                        "column.mask.with.12.chars": "public.t.ssn", "snapshot.locking.mode": "none",
                        "snapshot.max.threads": "4", "max.queue.size": "20000"})
    found = problems(raw)
    assert set(found) == {"provide.transaction.metadata", "topic.delimiter", "column.mask.with.12.chars"}
    assert "default" in found["provide.transaction.metadata"]
    assert "not supported" in found["column.mask.with.12.chars"]


def test_skipped_operations_and_tombstones():
    config = CdcConfig.parse(dict(BASE, **{"skipped.operations": "none", "tombstones.on.delete": "false"}))
    assert config.skipped_operations == frozenset() and config.tombstones_on_delete is False
    assert CdcConfig.parse(dict(BASE, **{"skipped.operations": "u,d"})).skipped_operations == {"u", "d"}
    assert "unknown operation" in problems(dict(BASE, **{"skipped.operations": "x"}))["skipped.operations"]


def test_initial_statements_split_as_debezium_does():
    config = CdcConfig.parse(dict(BASE, **{"database.initial.statements": "SET a=1;SELECT ';;'"}))
    assert config.initial_statements() == ["SET a=1", "SELECT ';'"]


def test_every_key_is_documented():
    for row in CONFIG_DEF.describe():
        assert row["doc"], row["name"]
    shown = {row["name"]: row["default"] for row in CONFIG_DEF.describe()}
    assert shown["database.password"] is None and shown["slot.name"] == "debezium"


def test_connect_kwargs_open_a_real_connection(postgres_url):
    url = make_url(postgres_url)
    config = CdcConfig.parse({"database.hostname": url.host, "database.port": url.port or 5432,
                              "database.user": url.username, "database.dbname": url.database,
                              "database.password": url.password or "", "database.sslmode": "disable",
                              "topic.prefix": "t"})

    with psycopg.connect(**config.connect_kwargs()) as conn:
        assert conn.execute("SELECT current_database()").fetchone()[0] == url.database


def test_message_key_columns_as_debezium_reads_them():
    config = CdcConfig.parse(dict(BASE, **{"message.key.columns": r"inventory.customers:pk1, pk2;(.*)\.orders:ref"}))
    assert config.message_key_columns("inventory", "customers", ["pk2", "x", "pk1"]) == ["pk1", "pk2"]
    assert config.message_key_columns("sales", "orders", ["id", "ref"]) == ["ref"]
    assert config.message_key_columns("sales", "items", ["id", "ref"]) is None  # the primary key stays
    assert "is not <schema.table regex>" in problems(dict(BASE, **{"message.key.columns": "public.t"}))[
        "message.key.columns"]
