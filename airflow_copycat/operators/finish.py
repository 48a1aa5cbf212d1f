"""Finish a connector run: fold the group results into one summary and announce the data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import Asset, AssetAlias, BaseOperator, TriggerRule

from ..hooks.kafka import CopycatKafkaHook
from ..hooks.secrets import MasksRenderedSecrets
from ..runtime import windows
from ..runtime.offsets import offset_store
from ..runtime.result import summarize
from . import lineage, metrics


def asset_alias(connector: str) -> AssetAlias:
    """The asset alias a connector's finish task emits its asset events through."""
    return AssetAlias(name=f"copycat/{connector}")


class CopycatFinishOperator(MasksRenderedSecrets, BaseOperator):
    """Aggregates the results of a run's task groups and records them.

    Returns (XCom) the run summary of :func:`airflow_copycat.runtime.result.summarize`:
    per partition (table, file, topic-partition) the offsets before and after, records and
    bytes; per topic the record counts; the plan id and, for a windowed (backfill) run, the
    window. After a windowed run succeeded, its window's offsets are deleted from the offset
    store (tombstones; ``window.offsets_deleted`` in the summary says how many): only retries
    of the same plan read them, and there are none left (see
    :func:`airflow_copycat.runtime.windows.finished`). Emits one Airflow Asset event per destination that received
    records -- ``kafka://<first bootstrap server>/<topic>`` for sources, the tables, files or
    directories a sink wrote (named by :mod:`.lineage`, as OpenLineage names them) -- through the
    alias ``copycat/<connector>``, with the counts and offset ranges as the event's extra, so DAGs
    scheduled on those assets run when data arrives.

    With the OpenLineage provider installed, the task's OpenLineage events name the datasets the
    run read and wrote, with the same names as the Asset events, their row and byte counts, their
    schemas where known and, for a JDBC source reading whole tables without transforms, the column
    lineage (:meth:`get_openlineage_facets_on_complete`).

    Runs when no upstream task failed and one succeeded (trigger rule
    ``none_failed_min_one_success``; make the plan task a direct upstream too): so
    also when the plan found nothing to copy and the mapped run task was skipped
    for having no groups -- the summary then says 0 records and nothing is announced.

    Sends the run's counts and task durations to Airflow's metrics (:mod:`.metrics`).

    :param plan_task_id: the plan task (its XCom key ``plan``).
    :param run_task_id: the (mapped) run task whose return values are the group results.
    :param connector: the connector name (for the outlet alias).
    :param kafka_conn_id: Kafka connection whose offset store holds a windowed run's offsets.
    :param worker_config: extra worker properties (the plan operator's). (templated)
    """

    template_fields: Sequence[str] = ("worker_config",)
    ui_color = "#d8f0d8"

    def __init__(self, *, plan_task_id: str, run_task_id: str, connector: str,
                 kafka_conn_id: str = CopycatKafkaHook.default_conn_name,
                 worker_config: dict[str, Any] | None = None, **kwargs) -> None:
        kwargs.setdefault("outlets", [asset_alias(connector)])
        kwargs.setdefault("trigger_rule", TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id
        self.run_task_id = run_task_id
        self.connector = connector
        self.kafka_conn_id = kafka_conn_id
        self.worker_config = worker_config

    def execute(self, context) -> dict[str, Any]:
        ti = context["ti"]
        plan = ti.xcom_pull(task_ids=self.plan_task_id, key="plan")
        if not plan:
            raise AirflowException(f"no plan in XCom of task {self.plan_task_id}")
        results = ti.xcom_pull(task_ids=self.run_task_id) or []
        if isinstance(results, dict):
            results = [results]
        summary = summarize(plan, [r for r in results if r])
        self._lineage_run = (plan, summary)  # for get_openlineage_facets_on_complete / _on_failure
        self.log.info("%s connector %s: %s records, %s bytes, %s tolerated errors (%s dead-lettered), "
                      "%s filtered by transforms, %s retries",
                      summary["kind"], summary["connector"], summary["records"], summary["bytes"], summary["errors"],
                      summary["dead_lettered"], summary["filtered"], summary["retries"])
        for p in summary["partitions"]:
            self.log.info("  %s: %s -> %s (%s records)", p["partition"], p["offset_before"], p["offset_after"], p["records"])
        for table, counts in summary.get("tables", {}).items():
            self.log.info("  table %s: %s", table, ", ".join(f"{n} {what}" for what, n in sorted(counts.items())))
        dag_id = getattr(context.get("dag"), "dag_id", None)
        metrics.run_finished(summary, dag_id)
        metrics.tasks_timed(summary["connector"], [t for r in results if r for t in r.get("tasks", [])], dag_id)
        if summary["kind"] == "sink":
            self._report_lag(summary["connector"], dag_id)
        if summary["failures"]:  # a failed window keeps its offsets: a retry of the run task resumes from them
            raise AirflowException("copycat run failed:\n" + "\n".join(summary["failures"]))
        if plan.get("window"):
            summary["window"] = dict(plan["window"], offsets_deleted=self._forget_window(plan))
        self._emit_assets(context, plan, summary)
        return summary

    def _report_lag(self, connector: str, dag_id: str | None) -> None:
        """The sink's consumer lag as a metric; a broker that does not answer costs the metric, never the run."""
        from ..runtime.lag import sink_lag

        try:
            rows = sink_lag(CopycatKafkaHook(self.kafka_conn_id).worker_config(self.worker_config), connector)
        except Exception as e:  # noqa: BLE001 -- a metric
            self.log.warning("consumer lag of %s not known: %s", connector, type(e).__name__)
            return
        metrics.sink_lag(connector, rows, dag_id)
        self.log.info("consumer lag after the run: %s record(s)",
                      sum(r["lag"] for r in rows if r.get("lag") is not None))

    def get_openlineage_facets_on_complete(self, task_instance):
        """The OpenLineage provider's ``OperatorLineage`` of this run: the datasets it read and wrote
        (:func:`.lineage.connector_datasets`), with counts, schemas (read from the database for JDBC
        tables) and column lineage where known. Empty when execute() did not get as far as a summary."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        state = getattr(self, "_lineage_run", None)
        if state is None:
            return OperatorLineage()
        plan, summary = state
        inputs, outputs = lineage.connector_datasets(plan, summary, columns=self._table_columns(plan, summary))
        return lineage.operator_lineage(inputs, outputs)

    def get_openlineage_facets_on_failure(self, task_instance):
        """As on completion: what a failed run moved before it failed (what it committed stays)."""
        return self.get_openlineage_facets_on_complete(task_instance)

    def _table_columns(self, plan: dict, summary: dict) -> dict:
        """The columns of the database tables this run read or wrote (JDBC connectors, CDC), best effort."""
        inputs, outputs = lineage.connector_datasets(plan, summary)
        tables = [d.table for d in inputs + outputs if d.table]
        if not tables:
            return {}
        columns = lineage.table_columns(plan.get("config") or {}, tables)
        self.log.debug("OpenLineage: columns of %d of %d table(s) read", len(columns), len(tables))
        return columns

    def _forget_window(self, plan: dict) -> int:
        """Tombstone the finished window's offsets; how many partitions' offsets were deleted."""
        window = plan["window"]
        store = offset_store(CopycatKafkaHook(self.kafka_conn_id).worker_config(self.worker_config))
        try:
            deleted = windows.finished(store, plan)
        finally:
            store.close()
        self.log.info("Window [%s, %s) done: deleted its offsets (%d partition(s)) under %s",
                      window["start"], window["end"], len(deleted), window["offsets_namespace"])
        return len(deleted)

    def _emit_assets(self, context, plan: dict, summary: dict) -> None:
        alias = asset_alias(self.connector)
        if not any(isinstance(o, AssetAlias) and o.name == alias.name for o in self.outlets):
            return
        events = context["outlet_events"][alias]
        for uri, extra in destinations(plan, summary).items():
            events.add(Asset(uri=uri, name=uri), extra=extra)


def destinations(plan: dict, summary: dict) -> dict[str, dict]:
    """Asset URI -> event extra, for every destination that received records in this run. The URIs
    are those of the OpenLineage output datasets (:func:`.lineage.connector_datasets`); a third-party
    sink naming no datasets (``asset_uris`` empty) announces ``copycat://<connector>/<topic>``, a
    table whose database is not known ``copycat://<connector>/<table>``."""
    out: dict[str, dict] = {}
    _, outputs = lineage.connector_datasets(plan, summary)
    for d in outputs:
        if plan["kind"] == "source":
            extra: dict[str, Any] = {"connector": plan["connector"], "records": d.rows}
            if plan.get("window"):  # a backfill: which interval these records are
                extra["window"] = {k: plan["window"][k] for k in ("start", "end")}
        elif d.table is not None:  # a sink writing tables: one event per table
            extra = {"connector": plan["connector"], "table": d.table, **summary["tables"][d.table]}
        elif d.topic is not None:
            extra = {"connector": plan["connector"], "topic": d.topic, "records": d.rows,
                     "offsets": _offset_ranges(summary, d.topic)}
        else:  # one destination of every topic (a file)
            extra = {"connector": plan["connector"], "records": d.rows}
        out[d.location.uri] = extra
    named = {d.table for d in outputs if d.table}
    for table, counts in (summary.get("tables") or {}).items() if plan["kind"] != "source" else ():
        if table not in named:  # a table of a database whose URL the plan does not show
            out[f"copycat://{plan['connector']}/{table}"] = {"connector": plan["connector"], "table": table, **counts}
    if plan["kind"] != "source" and not outputs and not summary.get("tables"):
        for topic, n in summary["topics"].items():
            if n:
                out[f"copycat://{plan['connector']}/{topic}"] = {
                    "connector": plan["connector"], "topic": topic, "records": n,
                    "offsets": _offset_ranges(summary, topic)}
    return out


def _offset_ranges(summary: dict, topic: str) -> dict[str, list]:
    return {str(p["partition"][1]): [p["offset_before"], p["offset_after"]]
            for p in summary["partitions"] if p["partition"][0] == topic and p["records"]}
