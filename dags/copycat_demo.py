"""The demo: log files -> Kafka -> Parquet, run by ``make demo``.

Each run copies the new lines of the log files into a Kafka topic
(FileStreamSource; offsets in the ``copycat-offsets`` topic), then the new
records of that topic into Parquet files (FilesSink; exactly-once, offsets kept
in the destination). Paths come from the run's params, so the same DAG serves
any directory: ``airflow dags test copycat_demo -c '{"input": "/logs/*.log", ...}'``.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_copycat import connector_task_group

DEMO_DIR = os.environ.get("COPYCAT_DEMO_DIR", "/tmp/copycat-demo")

# [START howto_copycat_demo]
with DAG(
    dag_id="copycat_demo",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "input": Param(f"{DEMO_DIR}/input/*.log", type="string", description="glob of the log files"),
        "topic": Param("demo-logs", type="string"),
        "output": Param(f"{DEMO_DIR}/output", type="string", description="where the Parquet files go"),
    },
    tags=["copycat", "example"],
) as dag:
    logs_to_kafka = connector_task_group({
        "name": "demo-logs-source",
        "connector.class": "FileStreamSource",
        "file": "{{ params.input }}",
        "topic": "{{ params.topic }}",
        "tasks.max": 2,
        "topic.creation.default.partitions": 2,
    })
    kafka_to_parquet = connector_task_group({
        "name": "demo-logs-sink",
        "connector.class": "io.confluent.connect.s3.S3SinkConnector",  # resolves to FilesSink
        "topics": "{{ params.topic }}",
        "store.url": "{{ params.output }}",
        "format.class": "parquet",
        "flush.size": 1000,
        "tasks.max": 2,
    })
    logs_to_kafka >> kafka_to_parquet
# [END howto_copycat_demo]
