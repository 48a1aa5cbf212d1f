"""Example: an hourly database import that starts early when tables appear or disappear.

Each run is ``watch_tables`` (a partition sensor) -> plan -> run -> finish:

* ``watch_tables`` compares the database's tables now with the tables of this DAG's
  last plan and succeeds as soon as they differ (a table was created or dropped);
  it waits deferred, in the triggerer, holding no worker slot, looking every
  minute. After 50 minutes without a change it gives up and is *skipped*
  (``soft_fail``: no change is not a failure).
* the import runs either way (the plan's trigger rule is ``none_failed``): every
  table is imported at least once an hour, and a new table within about a minute of
  its creation instead of at the next hour. A table created while an import runs is
  seen by the next run's sensor and imported by that run.
* the plan re-plans stickily: tables keep the task they had, a new table goes to the
  least-loaded task (by estimated rows), a dropped table frees its task, and
  ``tasks.max`` is respected -- so a new table never reshuffles the others, whose
  offsets and transactional producers stay where they were.

Why one DAG and not a watcher DAG triggering an import DAG: the sensor's baseline
is the plan of *this* DAG's plan task (an XCom of an earlier run), and one DAG with
``max_active_runs=1`` guarantees that two imports of one source connector never run
at once (they would share its offsets and fence each other's transactions).

The database comes from the run's params (a SQLite file by default, the embedded
demo database). In production name an Airflow connection instead of a URL:
``"airflow.conn.id": "shop_db"`` (postgres, mysql or sqlite connection types). The
deferred sensor then stores no secret: it hands the trigger the config with secrets
hidden, and the trigger reads the connection itself.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param, TriggerRule

from airflow_copycat import connector_task_group
from airflow_copycat.sensors.partitions import CopycatPartitionSensor

DEMO_DIR = os.environ.get("COPYCAT_DEMO_DIR", "/tmp/copycat-demo")

# [START howto_copycat_jdbc_discovery]
SHOP_DB = {
    "name": "shop-tables",
    "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
    "connection.url": "{{ params.database_url }}",  # or "airflow.conn.id": "shop_db"
    "mode": "incrementing",
    "incrementing.column.name": "id",
    "topic.prefix": "{{ params.topic_prefix }}",
    "tasks.max": 2,
}

with DAG(
    dag_id="copycat_jdbc_discovery",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one import of a source connector at a time
    params={
        "database_url": Param(f"sqlite:///{DEMO_DIR}/shop.db", type="string",
                              description="SQLAlchemy or JDBC URL of the database"),
        "topic_prefix": Param("shop-", type="string", description="each table goes to <prefix><table>"),
    },
    tags=["copycat", "example", "jdbc"],
) as dag:
    watch_tables = CopycatPartitionSensor(
        task_id="watch_tables",
        connector_config=SHOP_DB,
        plan_task_id="shop-tables.plan",
        deferrable=True,
        poke_interval=60,
        timeout=50 * 60,
        soft_fail=True,  # no change within the timeout: skipped, and the import runs anyway
    )
    shop_import = connector_task_group(SHOP_DB, run_kwargs={"retries": 2})
    dag.get_task("shop-tables.plan").trigger_rule = TriggerRule.NONE_FAILED
    watch_tables >> shop_import
# [END howto_copycat_jdbc_discovery]
