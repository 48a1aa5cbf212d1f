"""List, reset or delete a connector's committed source offsets from an Airflow task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow < 3.1
    from airflow.exceptions import AirflowFailException

from ..connect.errors import ConfigException
from ..hooks.kafka import CopycatKafkaHook
from ..hooks.secrets import MasksRenderedSecrets
from ..runtime import offset_admin
from ..runtime.offsets import offset_store

IN_PROGRESS_STATES = offset_admin.IN_PROGRESS_STATES
"""DAG run states during which a connector's offsets must not change (see :mod:`..runtime.offset_admin`)."""


class CopycatOffsetsOperator(MasksRenderedSecrets, BaseOperator):
    """Lists, resets or deletes committed source offsets of one connector -- the maintenance
    task behind ``dags/copycat_offsets.py`` (Kafka Connect's KIP-875 offsets API, for Airflow).

    * ``list``: logs a table of partition -> offset and returns
      ``{"connector", "store", "offsets": [{"partition", "offset"}]}``.
    * ``reset``: writes ``offset`` (a JSON object) for ``partition``; ``delete``: writes a
      tombstone, so the next run starts that partition from scratch. Both log and return
      ``{"connector", "action", "partition", "before", "after", "store", "partitions"}``,
      after reading the store back to prove it returns the new value.

    Changes are refused (the task fails without retries, nothing written) when the request
    is invalid -- every bad parameter named -- or when any DAG in ``connector_dags[connector]``
    has a queued or running DAG run (manual, scheduled or backfill), asked through the Task
    SDK (``RuntimeTaskInstance.get_dr_count``; the rule itself is
    :func:`~airflow_copycat.runtime.offset_admin.guarded_change`, which the offsets page in the UI
    applies too). A connector missing from ``connector_dags`` cannot be checked, so it is refused
    too. After a change the check runs again: a run that started meanwhile fails this task with
    what was written, so the operator looks. ``connector_dags`` is a template field so that it is
    kept in the serialized DAG, where the offsets page reads it.

    :param connector: the connector name (it keys the offsets). (templated)
    :param action: ``list``, ``reset`` or ``delete``. (templated)
    :param partition: the source partition, JSON text (or a decoded value). (templated)
    :param offset: for ``reset``, the new offset, a JSON object as text (or a dict). (templated)
    :param force: write even if the partition has no committed offset yet. (templated)
    :param connector_dags: connector name -> the DAG ids that run it. (templated)
    :param kafka_conn_id: Kafka connection (its extra may name the offset topic or file).
    :param worker_config: extra worker properties overriding the connection's. (templated)
    """

    template_fields: Sequence[str] = ("connector", "action", "partition", "offset", "force", "worker_config",
                                      "connector_dags")
    ui_color = "#f0e0f0"

    def __init__(
        self,
        *,
        connector: str,
        action: str = "list",
        partition: Any = None,
        offset: Any = None,
        force: bool | str = False,
        connector_dags: Mapping[str, Sequence[str]],
        kafka_conn_id: str = CopycatKafkaHook.default_conn_name,
        worker_config: dict[str, Any] | None = None,
        **kwargs,
    ) -> None:
        kwargs.setdefault("retries", 0)  # a refusal or a bad request does not get better by itself
        super().__init__(**kwargs)
        self.connector = connector
        self.action = action
        self.partition = partition
        self.offset = offset
        self.force = force
        self.connector_dags = {str(k): list(v) for k, v in connector_dags.items()}
        self.kafka_conn_id = kafka_conn_id
        self.worker_config = worker_config

    @cached_property
    def hook(self) -> CopycatKafkaHook:
        return CopycatKafkaHook(self.kafka_conn_id)

    def execute(self, context) -> dict[str, Any]:
        try:
            action, partition, offset = offset_admin.parse_request(self.action, self.partition, self.offset)
        except ConfigException as e:
            raise AirflowFailException(str(e)) from None
        connector = str(self.connector or "").strip()
        if connector not in self.connector_dags:
            raise AirflowFailException(
                f"connector {connector!r} is not in this DAG's connector -> DAGs map (known: "
                f"{', '.join(sorted(self.connector_dags)) or 'none'}); without knowing which DAGs run it, "
                f"its offsets cannot be changed safely. Add it to the map in the DAG file.")
        dags = self.connector_dags[connector]
        store = offset_store(self.hook.worker_config(self.worker_config))
        try:
            if action == "list":
                return self._list(context, store, connector, dags)
            force = str(self.force).strip().lower() in ("true", "1", "yes", "on")
            ti = context["ti"]
            try:
                result = offset_admin.guarded_change(
                    store, connector, dags, action, partition, offset, force=force, retry="trigger this DAG again",
                    count=lambda dag_id, state: ti.get_dr_count(dag_id=dag_id, states=[state]))
            except offset_admin.OffsetChangeRaced as e:
                self._log_change(connector, dags, e.result)
                raise AirflowFailException(str(e)) from None
            except (ConfigException, offset_admin.OffsetChangeRefused) as e:
                raise AirflowFailException(str(e)) from None
        finally:
            store.close()
        self._log_change(connector, dags, result)
        return result

    def _log_change(self, connector: str, dags: list[str], result: dict[str, Any]) -> None:
        self.log.info("%s of connector %s, partition %s in %s:\n  before: %s\n  after:  %s", result["action"],
                      connector, offset_admin.compact_json(result["partition"]), result["store"],
                      offset_admin.compact_json(result["before"]),
                      offset_admin.compact_json(result["after"]) + ("  (no offset: the next run starts this partition "
                                                             "from scratch)" if result["after"] is None else ""))
        self.log.info("Read back from the store: it now returns %s; the next run of %s starts there.",
                      offset_admin.compact_json(result["after"]), ", ".join(dags) or connector)

    def _list(self, context, store, connector: str, dags: list[str]) -> dict[str, Any]:
        rows = offset_admin.list_offsets(store, connector)
        busy = self._runs_in_progress(context, dags)
        if busy:
            self.log.warning("%s: offsets may move while these runs are in progress", offset_admin.describe_runs(busy))
        if rows:
            self.log.info("Committed offsets of connector %s in %s (%d partition(s)):\n%s", connector,
                          store.describe(), len(rows), offset_admin.format_table(rows))
        else:
            self.log.info("Connector %s has no committed offsets in %s: its next run starts every partition "
                          "from scratch", connector, store.describe())
        return {"connector": connector, "store": store.describe(), "offsets": rows}

    def _runs_in_progress(self, context, dags: list[str]) -> dict[str, dict[str, int]]:
        """DAG id -> {state: count} of the queued/running runs of ``dags``, asked of the API server."""
        ti = context["ti"]
        return offset_admin.runs_in_progress(dags, lambda dag_id, state: ti.get_dr_count(dag_id=dag_id, states=[state]))

