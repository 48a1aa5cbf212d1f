"""Example: replay the shop's PostgreSQL change events into a MariaDB replica, upserted, with deletes.

Scheduled on the asset events of the hourly change data capture (``copycat_postgres_cdc``):
each run reads the change topics ``shop.public.*`` from the offsets the replica itself holds
(table ``copycat_sink_offsets``, written in the same transaction as the rows) to the end, and
applies them to the tables ``customers`` and ``orders`` through the JDBC sink:

* Debezium's ``ExtractNewRecordState`` turns each change event into the row after the change;
  a delete becomes a record with a null value (``delete.tombstone.handling.mode=tombstone``,
  Debezium's default) and the tombstone after it is dropped;
* the RegexRouter turns the topic ``shop.public.orders`` into the table name ``orders``;
* ``insert.mode=upsert`` with ``pk.mode=record_key`` writes each row by its primary key (the
  event's key), ``delete.enabled`` deletes the row of a null value; tables are created from
  the rows' schemas and gain the columns of new optional fields (``auto.evolve``).

A run killed anywhere and rerun neither duplicates nor skips a change; replaying a change
twice leaves the same row. TRUNCATE is not replayed: the CDC source skips it by default
(``skipped.operations=t``, as Debezium). The finish task's XCom shows per table the rows
inserted, updated and deleted and per Kafka partition the offsets before and after.

The replica is the Airflow connection ``replica_db`` (type mysql, MariaDB or MySQL)::

    export AIRFLOW_CONN_REPLICA_DB='{"conn_type": "mysql", "host": "replica", "port": 3306,
                                     "schema": "shop", "login": "copycat", "password": "..."}'

Column defaults are part of Debezium's schemas: ``replace.null.with.default=false`` on the
converter and the transform keeps a NULL a NULL instead of the column's default.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group
from airflow_copycat.operators.finish import asset_alias

# [START howto_copycat_cdc_to_mariadb]
with DAG(
    dag_id="copycat_cdc_to_mariadb",
    schedule=[asset_alias("shop-cdc")],  # after each run of the change data capture that moved data
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["copycat", "example", "cdc", "jdbc"],
) as dag:
    connector_task_group(
        {
            "name": "shop-cdc-to-mariadb",
            "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
            "topics.regex": "shop\\.public\\..*",
            "airflow.conn.id": "replica_db",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.replace.null.with.default": "false",
            "transforms": "unwrap,table",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.unwrap.replace.null.with.default": "false",
            "transforms.table.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.table.regex": "shop\\.public\\.(.*)",
            "transforms.table.replacement": "$1",
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "delete.enabled": "true",
            "auto.create": "true",
            "auto.evolve": "true",
        },
        kafka_conn_id="kafka_default",
        spark_conn_id="spark_default",
    )
# [END howto_copycat_cdc_to_mariadb]
