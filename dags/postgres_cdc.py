"""Example: every hour, the changes of a PostgreSQL database into Kafka, as Debezium writes them.

Each run reads the replication slot ``shop_cdc`` from where the last run confirmed it up to
the WAL position current when the run starts, and writes every insert, update and delete of
the ``customers`` and ``orders`` tables to the topics ``shop.public.customers`` and
``shop.public.orders`` in Debezium's change-event envelope (``before``, ``after``,
``source``, ``op``; a tombstone after each delete). The first run creates the slot and the
publication and snapshots both tables (``op: r``); later runs stream. Only once the run's
records and its offsets are in Kafka does it confirm the slot, so PostgreSQL keeps no more WAL
than the run left unread. ``max_active_runs=1``: a slot has one reader. A slot has no history
to re-read by interval, so a backfill run of this DAG fails at its plan task, saying why.

The finish task's XCom shows the run: ``tables`` per table the events it sent (``read`` in a
snapshot, ``inserted``, ``updated``, ``deleted``), and under ``partitions`` the one source
partition ``{"server": "shop"}`` with Debezium's offsets before and after the run (``lsn``,
``lsn_commit``, ``txId``, ``ts_usec``). Each run task's XCom adds the slot as the run found and
left it (``metrics.wal_before`` / ``metrics.wal_after``: ``confirmed_flush_lsn``,
``restart_lsn``, ``retained_bytes``). The finish task emits one Asset event per topic that got
records, which schedules ``copycat_cdc_to_mariadb``.

The database is the Airflow connection ``shop_pg`` (type postgres; the server needs
``wal_level=logical`` and the user ``REPLICATION`` plus ``SELECT`` on the tables)::

    export AIRFLOW_CONN_SHOP_PG='{"conn_type": "postgres", "host": "db", "port": 5432,
                                  "schema": "shop", "login": "cdc", "password": "..."}'

Column defaults are part of Debezium's schemas; the JsonConverter's
``replace.null.with.default=false`` keeps a NULL a NULL instead of writing the default.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group

# [START howto_copycat_postgres_cdc]
with DAG(
    dag_id="copycat_postgres_cdc",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one reader per replication slot
    tags=["copycat", "example", "cdc", "postgres"],
) as dag:
    connector_task_group(
        {
            "name": "shop-cdc",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "airflow.conn.id": "shop_pg",
            "topic.prefix": "shop",
            "plugin.name": "pgoutput",
            "slot.name": "shop_cdc",
            "publication.name": "shop_cdc",
            "publication.autocreate.mode": "filtered",
            "table.include.list": "public\\.customers,public\\.orders",
            "snapshot.mode": "initial",
            "time.precision.mode": "connect",  # Kafka Connect's Date/Time/Timestamp: what JDBC sinks map
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.replace.null.with.default": "false",
        },
        kafka_conn_id="kafka_default",
        spark_conn_id="spark_default",
        run_kwargs={"retries": 2},  # a retry resumes from the committed offset; the slot kept the rest
    )
# [END howto_copycat_postgres_cdc]
