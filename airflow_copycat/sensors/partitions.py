"""Partition discovery as a sensor: fire when a connector's partitions differ from its last plan."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow < 3.1
    from airflow.exceptions import AirflowFailException

from ..connect.connector import SinkConnector
from ..connect.errors import ConfigException
from ..hooks.kafka import CopycatKafkaHook
from ..hooks.secrets import MasksRenderedSecrets, connector_secrets
from ..runtime import connector_config as cc
from ..runtime.discovery import check_config, compare, plan_partitions
from ..runtime.worker import is_secret_key
from ..triggers.partitions import DB_CONN_ID_KEY, CopycatPartitionTrigger, discover, with_db_connection

# what resolve_db_connection fills from the Airflow connection named by airflow.conn.id
_FROM_DB_CONNECTION = {"connection.url", "connection.user", "connection.password"}


class CopycatPartitionSensor(MasksRenderedSecrets, BaseSensorOperator):
    """Waits until a connector's partitions differ from those of its last plan.

    Partitions are what the plan would spread over tasks: for a source, what its
    ``partitions()`` lists now (tables, files, queries); for a sink, the Kafka
    topic-partitions of ``topics`` / ``topics.regex``
    (:mod:`airflow_copycat.runtime.discovery`). The *last plan* is the XCom ``plan`` of
    ``plan_task_id`` in the latest earlier run of this DAG (or this run, if its plan task
    already ran). Without one the sensor fires at once: there is nothing to compare with.

    Returns (XCom ``return_value``) what changed: ``{"added": [...], "dropped": [...],
    "baseline_missing": bool}``. A re-plan that follows is sticky
    (:class:`~airflow_copycat.operators.plan.CopycatPlanOperator`): kept partitions keep
    their task, new ones go to the least-loaded task, dropped ones free theirs.

    Modes: ``mode="poke"`` or ``"reschedule"`` lists partitions in the worker every
    ``poke_interval``; ``deferrable=True`` hands the wait to
    :class:`~airflow_copycat.triggers.partitions.CopycatPartitionTrigger` in the triggerer
    (no worker slot held). The trigger stores no secret: a source whose database password
    is in the connector config itself must name its database with ``airflow.conn.id`` to be
    deferred (the sensor says so at once otherwise); Kafka secrets belong in the Kafka
    connection. ``timeout`` / ``soft_fail`` behave as for every sensor (a timeout with
    ``soft_fail=True`` means "no change": the sensor is skipped).

    An invalid connector config fails the task at once, without retries and even with
    ``soft_fail``, naming every problem (the plan's validation). A failure to list
    partitions (database or Kafka down) fails the task (retried as configured).

    :param connector_config: the connector config, as for the plan operator: a dict,
        Kafka Connect's ``{"name": ..., "config": {...}}``, or a path to a file. (templated)
    :param plan_task_id: the plan task whose last plan is the baseline. Default
        ``"<connector name>.plan"``, the plan task of ``connector_task_group``. (templated)
    :param kafka_conn_id: Kafka connection (its extra is the client/worker config).
    :param worker_config: extra worker properties overriding the connection's. (templated)
    :param deferrable: wait in the triggerer instead of a worker. Default: Airflow's
        ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("connector_config", "plan_task_id", "worker_config")
    config_fields = ("connector_config",)  # their secrets are masked in the rendered fields
    template_fields_renderers = {"connector_config": "json", "worker_config": "json"}
    ui_color = "#e0ecf8"

    def __init__(
        self,
        *,
        connector_config: dict[str, Any] | str,
        plan_task_id: str | None = None,
        kafka_conn_id: str = CopycatKafkaHook.default_conn_name,
        worker_config: dict[str, Any] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.connector_config = connector_config
        self.plan_task_id = plan_task_id
        self.kafka_conn_id = kafka_conn_id
        self.worker_config = worker_config
        self.deferrable = deferrable
        self._config: dict[str, Any] | None = None
        self._baseline: list[Any] | None = None

    def execute(self, context) -> Any:
        unresolved = cc.load_connector_config(self.connector_config)
        connector_secrets(unresolved)  # masked in this task's log, even in an error message
        self._config = unresolved  # discover() fetches the airflow.conn.id connection on every look
        try:
            values, cls = check_config(with_db_connection(unresolved))
        except ConfigException as e:
            raise AirflowFailException(str(e)) from None
        plan_task_id = self.plan_task_id or f"{values['name']}.plan"
        # map_indexes=-1: the one plan XCom of the latest run (else a list of every run's)
        plan = context["ti"].xcom_pull(task_ids=plan_task_id, key="plan", include_prior_dates=True,
                                       map_indexes=-1)
        self._baseline = plan_partitions(plan if isinstance(plan, dict) else None)
        if self._baseline is None:
            change = compare(self._discover(), None)
            self.log.info("No earlier plan of %s: firing with %d partition(s)", plan_task_id, len(change.added))
            return change.to_dict()
        self.log.info("Last plan of %s (%s): %d partition(s)", plan_task_id, plan.get("created_at"),
                      len(self._baseline))
        if not self.deferrable:
            return super().execute(context)
        trigger = CopycatPartitionTrigger(
            connector_config=self._trigger_config(unresolved, cls),
            baseline=self._baseline,
            kafka_conn_id=self.kafka_conn_id,
            worker_config=self._trigger_worker_config(),
            poke_interval=self.poke_interval,
        )
        self.defer(trigger=trigger, method_name="execute_complete", timeout=dt.timedelta(seconds=self.timeout))

    def poke(self, context) -> PokeReturnValue | bool:
        current = self._discover()
        change = compare(current, self._baseline)
        if change:
            self._log_change(change.to_dict())
            return PokeReturnValue(is_done=True, xcom_value=change.to_dict())
        self.log.info("%d partition(s), same as the last plan", len(current))
        return False

    def execute_complete(self, context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resumes the deferred sensor: returns the change, or raises on the trigger's error event."""
        if not event or event.get("status") != "changed":
            raise AirflowException(f"partition discovery failed: {(event or {}).get('message', event)}")
        change = {k: event[k] for k in ("added", "dropped", "baseline_missing")}
        self._log_change(change)
        return change

    def _discover(self) -> list[Any]:
        return discover(self._config, self.kafka_conn_id, self.worker_config)

    def _log_change(self, change: dict[str, Any]) -> None:
        self.log.info("Partitions changed: %d added, %d dropped", len(change["added"]), len(change["dropped"]))
        for p in change["added"]:
            self.log.info("  added: %s", p)
        for p in change["dropped"]:
            self.log.info("  dropped: %s", p)

    def _trigger_config(self, unresolved: dict[str, Any], cls: type) -> dict[str, Any]:
        """The connector config the trigger may store: every secret ``[hidden]``. Fails when a source
        would need one that the trigger cannot fetch from a connection."""
        redacted = cc.redact(unresolved, cc.secret_keys(unresolved, cls))
        hidden = sorted(k for k, v in redacted.items() if isinstance(v, str) and cc.HIDDEN in v)
        if unresolved.get(DB_CONN_ID_KEY):
            hidden = [k for k in hidden if k not in _FROM_DB_CONNECTION]
        if hidden and not issubclass(cls, SinkConnector):
            raise AirflowFailException(
                f"deferrable=True: the trigger would need the secret value(s) of {', '.join(hidden)}, and trigger "
                f"arguments are stored in Airflow's metadata database. Name the database with "
                f"'{DB_CONN_ID_KEY}' (an Airflow connection the trigger reads itself), or use mode='reschedule'.")
        return redacted

    def _trigger_worker_config(self) -> dict[str, Any]:
        overrides = dict(self.worker_config or {})
        secret = sorted(k for k, v in overrides.items() if is_secret_key(k) and v not in (None, ""))
        if secret:
            raise AirflowFailException(
                f"deferrable=True: worker_config holds secret key(s) {', '.join(secret)}, which would be stored "
                f"in Airflow's metadata database with the trigger: put them in the Kafka connection "
                f"{self.kafka_conn_id!r} instead.")
        return overrides
