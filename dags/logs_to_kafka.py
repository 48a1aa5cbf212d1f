"""Example: tail log files into Kafka every hour, incrementally.

Each run copies only the lines appended since the last run (byte offsets per
file in the ``copycat-offsets`` topic); rotated files are finished before their
successors. Lines that cannot be decoded go to the dead-letter topic
``app-logs-dlq`` (see ``dlq_replay.py`` to re-ingest them after a fix). The
finish task's XCom shows offsets before/after per file and error counts.
The connector config lives in ``connectors/app-logs.json`` (Kafka Connect's
REST format), so the replay DAG reads the very same config.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group

# [START howto_copycat_logs_to_kafka]
with DAG(
    dag_id="copycat_logs_to_kafka",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # runs of one source connector must not overlap
    tags=["copycat", "example"],
) as dag:
    connector_task_group(
        str(Path(__file__).parent / "connectors" / "app-logs.json"),
        kafka_conn_id="kafka_default",
        spark_conn_id="spark_default",
        run_kwargs={"retries": 2},
    )
# [END howto_copycat_logs_to_kafka]
