"""Example: import a database into Kafka every hour, incrementally; backfills import their hour.

Each scheduled run copies the rows of the shop database's ``customers`` and ``orders``
tables that are new or changed since the last run (mode ``timestamp+incrementing`` on
``updated_at`` and ``id``: the offsets in the ``copycat-offsets`` topic say where each
table stands) into the topics ``shop-customers`` and ``shop-orders``. The finish task's
XCom shows, per table, the offsets before and after and the rows copied.

A **backfill** run (the UI's "Backfill" dialog, ``airflow backfill create --dag-id
copycat_jdbc_import --from-date ... --to-date ...``, or ``POST /api/v2/backfills``) imports
the rows whose ``updated_at`` lies in its data interval ``[start, end)`` -- an hour of the
timetable -- with offsets of its own: it never moves the live offsets, and rerunning it (clear
the run) emits the same records again. The timetable is ``CronDataIntervalTimetable`` so each
run *has* an hour-long interval (a plain cron string schedules points in time).

The database is the Airflow connection ``shop_db`` (``"airflow.conn.id"`` in
``connectors/shop-orders.json``; postgres, mysql or sqlite). The embedded default is a
SQLite file that ``scripts/shop_db.py`` creates and fills::

    python scripts/shop_db.py /tmp/copycat-demo/shop.db --hours 24 --per-hour 50
    export AIRFLOW_CONN_SHOP_DB='{"conn_type": "sqlite", "host": "/tmp/copycat-demo/shop.db"}'
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_copycat import connector_task_group

# [START howto_copycat_jdbc_import]
with DAG(
    dag_id="copycat_jdbc_import",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),  # runs cover [hh:00, hh+1:00)
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # live runs of one source connector must not overlap
    tags=["copycat", "example", "jdbc"],
) as dag:
    connector_task_group(
        str(Path(__file__).parent / "connectors" / "shop-orders.json"),
        kafka_conn_id="kafka_default",
        spark_conn_id="spark_default",
        window="backfill",  # backfill runs copy their data interval; scheduled and manual runs are incremental
        run_kwargs={"retries": 2},  # a retry resumes from the offsets the failed attempt committed
    )
# [END howto_copycat_jdbc_import]
