"""Example: re-ingest a source connector's dead-letter queue after fixing its config.

``copycat_logs_to_kafka`` tolerates bad lines into the topic ``app-logs-dlq``,
with headers saying which file and byte offset each came from. Once the cause
is fixed (a transform, a converter, the ``encoding`` key) in
``connectors/app-logs.json``, trigger this DAG: it rebuilds each dead-lettered
record, passes it through the fixed transforms and converters, and writes it to
the topic it was headed for. The replay keeps offsets of its own (connector
``app-logs-dlq-replay``), so triggering it again replays only what was
dead-lettered since. Records that fail again fail the run, naming their DLQ offset.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_copycat import connector_task_group
from airflow_copycat.runtime.connector_config import load_connector_config
from airflow_copycat.runtime.errors import replay_config

# [START howto_copycat_dlq_replay]
with DAG(
    dag_id="copycat_dlq_replay",
    schedule=None,  # triggered by hand (or by an alert) once the cause is fixed
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["copycat", "example"],
) as dag:
    app_logs = load_connector_config(str(Path(__file__).parent / "connectors" / "app-logs.json"))
    connector_task_group(replay_config(app_logs), kafka_conn_id="kafka_default", spark_conn_id="spark_default")
# [END howto_copycat_dlq_replay]
