"""Example: keep a copy of a directory tree in sync, every hour (Distcp).

Each dataset (a table directory under ``/data/warehouse``) is published
atomically: a reader of the target never sees half a table. Only files that
changed since the last run (size and modification time) are copied, files
deleted at the source are deleted at the target with their dataset, and a run
interrupted by a failure resumes: its leftover publish log is replayed first,
and files it had already staged are reused, not copied again. The publish
task's XCom holds bytes, files and throughput per dataset and per task, and
each published dataset is announced as an Airflow Asset event.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_copycat import copy_task_group

# [START howto_copycat_distcp_sync]
with DAG(
    dag_id="copycat_distcp_sync",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # runs of one copy job must not overlap
    tags=["copycat", "example", "distcp"],
) as dag:
    copy_task_group(
        {
            "name": "warehouse-mirror",
            "source.url": "/data/warehouse",
            "target.url": "/mnt/mirror/warehouse",
            "dataset.pattern": "*",  # each table directory is a dataset, published atomically
            "update": "true",
            "delete": "true",
            "tasks.max": "8",
        },
        spark_conn_id="spark_default",
        run_kwargs={"retries": 2},
    )
# [END howto_copycat_distcp_sync]
