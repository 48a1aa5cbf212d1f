"""Example: copy date-partitioned directories, one day per run, backfillable (Distcp).

The source holds ``/data/events/<source>/<yyyy>/<mm>/<dd>/...``; each run copies
the days of its data interval (``partition.date.format`` with
``date.range.start`` / ``date.range.end`` from the run's interval), decompressing
``.gz`` files on the way. An Airflow backfill over a range of days (UI, CLI
``airflow backfill create``, or the REST API) copies each day in its own run,
idempotently: a rerun finds the day's files up to date and copies nothing.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_copycat import copy_task_group

# [START howto_copycat_distcp_backfill]
with DAG(
    dag_id="copycat_distcp_backfill",
    # CronDataIntervalTimetable: each run covers [day, next day). A plain "@daily" schedules points in
    # time in Airflow 3 (data_interval_start == data_interval_end), so a run would copy no day at all.
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["copycat", "example", "distcp"],
) as dag:
    copy_task_group(
        {
            "name": "events-daily",
            "source.url": "/data/events",
            "target.url": "/mnt/lake/events",
            "dataset.pattern": "*",  # one dataset per event source
            "partition.date.format": "%Y/%m/%d",
            "date.range.start": "{{ data_interval_start }}",
            "date.range.end": "{{ data_interval_end }}",
            "converters": "decompress",
            "tasks.max": "4",
        },
    )
# [END howto_copycat_distcp_backfill]
