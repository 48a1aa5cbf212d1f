"""Example: Kafka topic -> Parquet files, exactly once, whenever new records arrived.

Scheduled on the asset events of the log source: each run reads every partition
from the offsets recorded in the destination to the end, writes
``topics/<topic>/partition=<p>/<topic>+<p>+<startOffset>.parquet`` through a
staging directory and a publish log, so a crash and rerun neither duplicates nor
loses a record.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group
from airflow_copycat.operators.finish import asset_alias

# [START howto_copycat_kafka_to_parquet]
with DAG(
    dag_id="copycat_kafka_to_parquet",
    schedule=[asset_alias("app-logs")],  # runs after copycat_logs_to_kafka moved data
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["copycat", "example"],
) as dag:
    connector_task_group(
        {
            "name": "app-logs-parquet",
            "connector.class": "io.confluent.connect.s3.S3SinkConnector",
            "topics": "app-logs",
            "s3.bucket.name": "my-data-lake",  # -> store.url s3://my-data-lake (needs s3fs)
            "topics.dir": "raw",
            "format.class": "io.confluent.connect.s3.format.parquet.ParquetFormat",
            "partitioner.class": "io.confluent.connect.storage.partitioner.DefaultPartitioner",
            "flush.size": 100000,
            "tasks.max": 4,
        },
    )
# [END howto_copycat_kafka_to_parquet]
