"""Maintenance: list, reset or delete a connector's committed source offsets from the Airflow UI.

Trigger this DAG with the form ("Trigger DAG" in the UI): pick the connector and the action,
and for a change give the partition (and, to reset, the new offset) as JSON -- copy the
partition from a ``list`` run's log or XCom. ``reset`` moves one partition's offset;
``delete`` writes a tombstone to the offset topic, so the connector's next run starts that
partition from scratch. A change is refused while any DAG that runs the connector has a
queued or running run (backfills included): the map below says which DAGs those are.
Same as the command line ``copycat offsets CONNECTOR --set/--delete``, with the safety check.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_copycat.operators.offsets import CopycatOffsetsOperator

# Connector name -> the DAGs whose runs use (read or commit) its offsets. A change is refused while
# any of them has a queued or running run; a connector missing here cannot be changed. Keep it in
# step with your DAGs when you add a connector.
CONNECTOR_DAGS: dict[str, list[str]] = {
    "app-logs": ["copycat_logs_to_kafka", "copycat_dlq_replay"],  # the replay re-reads app-logs' config
    "app-logs-dlq-replay": ["copycat_dlq_replay"],
    "demo-logs-source": ["copycat_demo"],
    "shop-orders": ["copycat_jdbc_import"],
    "shop-tables": ["copycat_jdbc_discovery"],
}

# [START howto_copycat_offsets]
with DAG(
    dag_id="copycat_offsets",
    schedule=None,  # maintenance: triggered by hand only
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one change at a time
    tags=["copycat", "maintenance"],
    doc_md=__doc__,
    params={
        "connector": Param(
            sorted(CONNECTOR_DAGS)[0], type="string", enum=sorted(CONNECTOR_DAGS), title="Connector",
            description="The connector whose committed source offsets to list or change.",
        ),
        "action": Param(
            "list", type="string", enum=["list", "reset", "delete"], title="Action",
            values_display={"list": "list: show every partition's offset",
                            "reset": "reset: set one partition's offset",
                            "delete": "delete: remove one partition's offset (start it from scratch)"},
            description="list changes nothing. reset and delete are refused while a run of the connector is "
                        "queued or running.",
        ),
        "partition": Param(
            "", type="string", title="Partition (JSON)",
            description='For reset and delete: the source partition as JSON, exactly as list shows it, e.g. '
                        '{"filename": "/var/log/app/a.log"} or {"protocol": "1", "table": "shop.orders"}.',
        ),
        "offset": Param(
            "", type="string", title="New offset (JSON object)",
            description='For reset: the offset to start from, a JSON object, e.g. {"position": 0} for a file, '
                        '{"incrementing": 41} for a table. Leave empty for list and delete.',
        ),
        "force": Param(
            False, type="boolean", title="Force",
            description="Write even if the partition has no committed offset yet (a new file or table). "
                        "Leave off to catch typos in the partition.",
        ),
    },
) as dag:
    CopycatOffsetsOperator(
        task_id="offsets",
        connector="{{ params.connector }}",
        action="{{ params.action }}",
        partition="{{ params.partition }}",
        offset="{{ params.offset }}",
        force="{{ params.force }}",
        connector_dags=CONNECTOR_DAGS,
        kafka_conn_id="kafka_default",
    )
# [END howto_copycat_offsets]
