"""Plan a connector: validate its config, list partitions, make task configs and groups."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow < 3.1
    from airflow.exceptions import AirflowFailException

from ..connect.errors import ConfigException
from ..hooks.database import resolve_db_connection
from ..hooks.kafka import CopycatKafkaHook
from ..runtime.connector_config import load_connector_config
from ..runtime.plan import make_plan
from .masking import connector_secrets


class CopycatPlanOperator(BaseOperator):
    """Turns a connector config into a plan (see :mod:`airflow_copycat.runtime.plan`).

    Pushes the whole plan to XCom under key ``plan`` and returns its list of task
    groups, so ``CopycatRunTaskGroupOperator.partial(...).expand(group=plan.output)``
    maps one task instance per group. An invalid config fails this task at once,
    without retries, listing every problem; nothing is submitted to Spark.
    Re-planning is sticky: the previous run's plan keeps partitions on their tasks.

    :param connector_config: the connector config: a dict, Kafka Connect's
        ``{"name": ..., "config": {...}}``, or a path to a JSON/YAML/.properties file. (templated)
    :param kafka_conn_id: Kafka connection (its extra is the client/worker config).
    :param worker_config: extra worker properties overriding the connection's. (templated)
    :param max_tasks: overrides ``tasks.max``. (templated)
    :param max_groups: overrides ``copycat.groups.max``. (templated)
    """

    template_fields: Sequence[str] = ("connector_config", "worker_config", "max_tasks", "max_groups")
    template_fields_renderers = {"connector_config": "json", "worker_config": "json"}
    ui_color = "#d8e8f8"

    def __init__(
        self,
        *,
        connector_config: dict[str, Any] | str,
        kafka_conn_id: str = CopycatKafkaHook.default_conn_name,
        worker_config: dict[str, Any] | None = None,
        max_tasks: int | None = None,
        max_groups: int | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.connector_config = connector_config
        self.kafka_conn_id = kafka_conn_id
        self.worker_config = worker_config
        self.max_tasks = max_tasks
        self.max_groups = max_groups

    @cached_property
    def hook(self) -> CopycatKafkaHook:
        return CopycatKafkaHook(self.kafka_conn_id)

    def execute(self, context) -> list[dict]:
        ti = context["ti"]
        try:
            raw = resolve_db_connection(load_connector_config(self.connector_config))
        except ConfigException as e:
            raise AirflowFailException(str(e)) from None
        connector_secrets(raw)  # masked in this task's log, even in an error message
        # The latest plan of an earlier run. map_indexes=-1 asks for one XCom: without it,
        # include_prior_dates returns a list of every earlier run's plan.
        previous = ti.xcom_pull(task_ids=self.task_id, key="plan", include_prior_dates=True, map_indexes=-1)
        worker = self.hook.worker_config(self.worker_config)
        try:
            plan = make_plan(
                raw,
                worker,
                max_tasks=_optional_int(self.max_tasks),
                max_groups=_optional_int(self.max_groups),
                previous=previous if isinstance(previous, dict) else None,
            )
        except ConfigException as e:
            raise AirflowFailException(str(e)) from None
        tasks = sum(len(g["tasks"]) for g in plan["groups"])
        self.log.info(
            "Planned %s connector %s: %d partition(s), %d task(s) in %d group(s)",
            plan["kind"], plan["connector"], len(plan["partitions"]), tasks, len(plan["groups"]),
        )
        for o in plan["offsets"]:
            self.log.info("  offset at plan time: %s -> %s", o["partition"], o["offset"])
        ti.xcom_push(key="plan", value=plan)
        return plan["groups"]


def _optional_int(value: Any) -> int | None:
    """A templated count: rendered templates are strings; ``None`` or ``""`` means not set."""
    return None if value in (None, "") else int(value)
