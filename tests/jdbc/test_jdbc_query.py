"""Custom query mode (``query``) on SQLite, PostgreSQL and MariaDB: Confluent's partition and topic,
the query wrapped as a derived table (its own WHERE and JOIN work), every mode, schemas from the
query's result columns."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest
import sqlalchemy as sa

from airflow_copycat.connect import ConfigException
from airflow_copycat.connect.data import Decimal, Timestamp, Type
from airflow_copycat.connect import SourceBatch
from airflow_copycat.connect.task import OffsetStorageReader, SourceTaskContext
from airflow_copycat.connectors.jdbc import JdbcSourceConnector, JdbcSourceTask

from .reader_helpers import jdbc_config, payloads, run, task_configs

T0 = dt.datetime(2024, 3, 1, 8, 0, 0)


def _tables(db, unique):
    md = sa.MetaData()
    customers = db.create(sa.Table(f"cust_{unique}", md, sa.Column("id", sa.Integer, primary_key=True,
                                                                   autoincrement=False),
                                   sa.Column("name", sa.String(40), nullable=False)))
    orders = db.create(sa.Table(f"ord_{unique}", md,
                                sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                                sa.Column("customer_id", sa.Integer, nullable=False),
                                sa.Column("amount", sa.Numeric(10, 2), nullable=False),
                                sa.Column("ts", sa.DateTime, nullable=False)))
    db.insert(customers, [{"id": 1, "name": "ada"}, {"id": 2, "name": "bob"}])
    return customers, orders


def _order(i, amount="9.50", customer=1):
    return {"id": i, "customer_id": customer, "amount": decimal.Decimal(amount), "ts": T0 + dt.timedelta(seconds=i)}


def _query(customers, orders):
    # its own JOIN and WHERE (and a string literal with a colon and a percent sign: passed verbatim)
    return (f"SELECT o.id, o.ts, o.amount, c.name AS customer, 'a:b%' AS tag FROM {orders.name} o "
            f"JOIN {customers.name} c ON c.id = o.customer_id WHERE o.amount > 0")


def _config(db, unique, mode, query, **extra):
    return jdbc_config(db.url, mode, **{"name": f"jq-{unique}", "query": query, "topic.prefix": f"q{unique}",
                                        "tasks.max": 3, "batch.max.rows": 2, **extra})


@pytest.mark.parametrize("mode", ["bulk", "incrementing", "timestamp", "timestamp+incrementing"])
def test_query_mode_reads_the_query_result_across_runs(db, worker_props, kafka_bootstrap, unique, mode):
    customers, orders = _tables(db, unique)
    db.insert(orders, [_order(1), _order(2, customer=2), _order(3, amount="-1.00"), _order(4)])
    config = _config(db, unique, mode, _query(customers, orders))
    assert run(config, worker_props) == 3  # id 3 fails the query's own WHERE
    db.insert(orders, [_order(5, customer=2), _order(6, amount="0.00")])
    second = run(config, worker_props)
    got = payloads(kafka_bootstrap, f"q{unique}")  # the topic is topic.prefix exactly
    if mode == "bulk":
        assert second == 4
        assert sorted(p["id"] for p in got) == [1, 1, 2, 2, 4, 4, 5]
    else:
        assert second == 1
        assert sorted(p["id"] for p in got) == [1, 2, 4, 5]
    by_id = {p["id"]: p for p in got}
    assert by_id[5]["customer"] == "bob" and by_id[1]["tag"] == "a:b%"
    assert run(config, worker_props) == (4 if mode == "bulk" else 0)


class _NoOffsets(OffsetStorageReader):
    def offsets(self, partitions):
        return {}



def _poll(task):
    """One ``poll()`` as records: a batch stands for its ``to_records()`` (connect/batch.py)."""
    items = task.poll()
    if items is None:
        return None
    return [r for item in items for r in (item.to_records() if isinstance(item, SourceBatch) else [item])]

def _task(config):
    [task_config] = task_configs(config)
    task = JdbcSourceTask()
    task.initialize(SourceTaskContext(task_config, _NoOffsets()))
    task.start(task_config)
    return task_config, task


def test_query_partition_topic_key_and_schema(db, unique):
    customers, orders = _tables(db, unique)
    db.insert(orders, [_order(1, amount="12.34")])
    config = _config(db, unique, "timestamp+incrementing", _query(customers, orders))
    task_config, task = _task(config)
    try:
        [record] = _poll(task)
        assert task.poll() is None
    finally:
        task.stop()
    assert json.loads(task_config["task.partitions"]) == [{"query": "query"}]  # as Confluent's JdbcSourceTask
    assert record.source_partition == {"query": "query"}
    assert record.topic == f"q{unique}"
    assert record.key is None and record.key_schema is None
    assert record.source_offset == {"timestamp": Timestamp.from_logical(T0.replace(tzinfo=dt.timezone.utc)
                                                                        + dt.timedelta(seconds=1)),
                                    "timestamp_nanos": 0, "incrementing": 1}
    fields = {f.name: f.schema for f in record.value_schema.fields}
    assert list(fields) == ["id", "ts", "amount", "customer", "tag"]
    assert fields["id"].type in (Type.INT32, Type.INT64)
    assert fields["ts"].name == Timestamp.LOGICAL_NAME
    assert fields["amount"].name == Decimal.LOGICAL_NAME and Decimal.scale(fields["amount"]) == 2
    assert fields["customer"].type is Type.STRING
    assert record.value.get("amount") == decimal.Decimal("12.34")
    assert record.value.get("ts") == (T0 + dt.timedelta(seconds=1)).replace(tzinfo=dt.timezone.utc)
    connector = JdbcSourceConnector()
    connector.start(JdbcSourceConnector.parse_config(config))
    try:
        assert connector.partitions() == [{"query": "query"}]
    finally:
        connector.stop()


def test_query_columns_must_exist_in_its_result(db, unique):
    customers, orders = _tables(db, unique)
    query = f"SELECT o.id AS order_id, o.ts FROM {orders.name} o"
    with pytest.raises(Exception) as e:
        _task(_config(db, unique, "timestamp+incrementing", query))
    text = str(e.value)
    assert "query" in text and "'id'" in text and "incrementing.column.name" in text and "order_id" in text


def test_query_with_a_table_list_is_a_config_error_naming_both_keys():
    with pytest.raises(ConfigException) as e:
        JdbcSourceConnector.parse_config({"connection.url": "sqlite:///x.db", "mode": "bulk", "topic.prefix": "p",
                                          "query": "SELECT 1 AS a", "table.whitelist": "t1,t2"})
    text = str(e.value)
    assert "query" in text and "table.whitelist" in text
    JdbcSourceConnector.parse_config({"connection.url": "sqlite:///x.db", "mode": "bulk", "topic.prefix": "p",
                                      "query": "SELECT 1 AS a"})  # alone it is fine


def test_a_query_that_does_not_run_fails_clearly(db, unique):
    with pytest.raises(Exception) as e:
        _task(_config(db, unique, "bulk", f"SELECT nope FROM missing_{unique}"))
    assert "query" in str(e.value) and f"missing_{unique}" in str(e.value)
