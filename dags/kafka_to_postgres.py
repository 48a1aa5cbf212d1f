"""Example: the shop's Kafka topics into a PostgreSQL warehouse, upserted, with deletes, exactly once.

Scheduled on the asset events of the hourly shop import (``copycat_jdbc_import``): each run
reads ``shop-customers`` and ``shop-orders`` from the offsets the warehouse itself holds
(table ``copycat_sink_offsets``, written in the same transaction as the rows) to the end, and
upserts each record into ``customers`` / ``orders`` by its key (the RegexRouter turns the topic
into the table name). A tombstone deletes its row; tables are created from the records' schemas
and gain the columns of new optional fields. A run killed anywhere and rerun neither duplicates
nor skips a row.

The finish task's XCom shows, per table, the rows inserted, updated and deleted
(``summary["tables"]``) and, per Kafka partition, the offsets before and after; it emits one
Asset event per table written (``postgres://host:port/database/public/orders``).

The warehouse is the Airflow connection ``warehouse_db`` (type postgres)::

    export AIRFLOW_CONN_WAREHOUSE_DB='{"conn_type": "postgres", "host": "127.0.0.1", "port": 5432,
                                       "schema": "warehouse", "login": "copycat", "password": "..."}'
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group
from airflow_copycat.operators.finish import asset_alias

# [START howto_copycat_kafka_to_postgres]
with DAG(
    dag_id="copycat_kafka_to_postgres",
    schedule=[asset_alias("shop-orders")],  # after each run of the hourly shop import that moved data
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["copycat", "example", "jdbc"],
) as dag:
    connector_task_group(
        {
            "name": "shop-to-warehouse",
            "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
            "topics": "shop-customers,shop-orders",
            "airflow.conn.id": "warehouse_db",
            "transforms": "table",
            "transforms.table.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.table.regex": "shop-(.*)",
            "transforms.table.replacement": "$1",
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "delete.enabled": "true",
            "auto.create": "true",
            "auto.evolve": "true",
            "tasks.max": 2,
        },
        kafka_conn_id="kafka_default",
        spark_conn_id="spark_default",
    )
# [END howto_copycat_kafka_to_postgres]
