"""One call for DAG authors: plan -> run task groups (mapped) -> finish."""

from __future__ import annotations

from typing import Any

from airflow.sdk import TaskGroup

from ..hooks.kafka import CopycatKafkaHook
from ..runtime.connector_config import load_connector_config
from .finish import CopycatFinishOperator
from .plan import CopycatPlanOperator
from .run import MAP_INDEX_TEMPLATE, CopycatRunTaskGroupOperator


def connector_task_group(
    connector_config: dict[str, Any] | str,
    *,
    group_id: str | None = None,
    kafka_conn_id: str = CopycatKafkaHook.default_conn_name,
    worker_config: dict[str, Any] | None = None,
    spark_conn_id: str = "spark_default",
    spark_conf: dict[str, Any] | None = None,
    max_tasks: int | None = None,
    max_groups: int | None = None,
    in_process: bool = False,
    run_kwargs: dict[str, Any] | None = None,
    window: str = "backfill",
) -> TaskGroup:
    """A task group that runs one connector once: ``plan`` -> ``run`` (one mapped task
    instance per task group, each one Spark job: through spark-submit with a ``spark``
    connection ``spark_conn_id``, over Spark Connect with a ``spark_connect`` one) -> ``finish``.

    ``connector_config`` is a dict (values may be Jinja templates, e.g.
    ``"{{ params.input }}"``), Kafka Connect's ``{"name": ..., "config": {...}}``,
    or a path to a JSON/YAML/.properties file. ``group_id`` defaults to the
    connector's name. ``run_kwargs`` go to every run task instance (``retries``,
    ``pool``, ``execution_timeout``...). Use it inside a ``with DAG(...)`` block;
    the returned group can be chained with ``>>``.

    ``window`` says which DAG runs copy only their data interval, with the window's own
    offsets, leaving the live offsets alone: ``"backfill"`` (default: backfill runs),
    ``"always"`` or ``"never"`` (see :class:`CopycatPlanOperator`).
    """
    raw = load_connector_config(connector_config) if not isinstance(connector_config, dict) else connector_config
    flat = load_connector_config(raw)
    name = str(flat.get("name") or group_id or "connector")
    with TaskGroup(group_id=group_id or name) as group:
        plan = CopycatPlanOperator(
            task_id="plan", connector_config=raw, kafka_conn_id=kafka_conn_id,
            worker_config=worker_config, max_tasks=max_tasks, max_groups=max_groups, window=window,
        )
        run = CopycatRunTaskGroupOperator.partial(
            map_index_template=MAP_INDEX_TEMPLATE,
            task_id="run", connector_config=raw, kafka_conn_id=kafka_conn_id, worker_config=worker_config,
            spark_conn_id=spark_conn_id, spark_conf=spark_conf, in_process=in_process, **(run_kwargs or {}),
        ).expand(group=plan.output)
        finish = CopycatFinishOperator(
            task_id="finish", plan_task_id=plan.task_id, run_task_id=run.task_id, connector=name,
            kafka_conn_id=kafka_conn_id, worker_config=worker_config,
        )
        plan >> run >> finish
        plan >> finish  # finish also runs when the plan has no groups (the mapped run is skipped)
    return group
