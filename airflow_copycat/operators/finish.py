"""Finish a connector run: fold the group results into one summary and announce the data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import Asset, AssetAlias, BaseOperator, TriggerRule

from ..runtime.result import summarize


def asset_alias(connector: str) -> AssetAlias:
    """The asset alias a connector's finish task emits its asset events through."""
    return AssetAlias(name=f"copycat/{connector}")


class CopycatFinishOperator(BaseOperator):
    """Aggregates the results of a run's task groups and records them.

    Returns (XCom) the run summary of :func:`airflow_copycat.runtime.result.summarize`:
    per partition the offsets before and after, records and bytes; per topic the
    record counts. Emits one Airflow Asset event per destination that received
    records -- ``kafka://<bootstrap>/<topic>`` for sources, the connector's
    ``asset_uris`` for sinks -- through the alias ``copycat/<connector>``, with
    the counts and offset ranges as the event's extra, so DAGs scheduled on those
    assets run when data arrives.

    Runs when no upstream task failed and one succeeded (trigger rule
    ``none_failed_min_one_success``; make the plan task a direct upstream too): so
    also when the plan found nothing to copy and the mapped run task was skipped
    for having no groups -- the summary then says 0 records and nothing is announced.

    :param plan_task_id: the plan task (its XCom key ``plan``).
    :param run_task_id: the (mapped) run task whose return values are the group results.
    :param connector: the connector name (for the outlet alias).
    """

    template_fields: Sequence[str] = ()
    ui_color = "#d8f0d8"

    def __init__(self, *, plan_task_id: str, run_task_id: str, connector: str, **kwargs) -> None:
        kwargs.setdefault("outlets", [asset_alias(connector)])
        kwargs.setdefault("trigger_rule", TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id
        self.run_task_id = run_task_id
        self.connector = connector

    def execute(self, context) -> dict[str, Any]:
        ti = context["ti"]
        plan = ti.xcom_pull(task_ids=self.plan_task_id, key="plan")
        if not plan:
            raise AirflowException(f"no plan in XCom of task {self.plan_task_id}")
        results = ti.xcom_pull(task_ids=self.run_task_id) or []
        if isinstance(results, dict):
            results = [results]
        summary = summarize(plan, [r for r in results if r])
        self.log.info("%s connector %s: %s records, %s bytes, %s tolerated errors (%s dead-lettered), "
                      "%s filtered by transforms, %s retries",
                      summary["kind"], summary["connector"], summary["records"], summary["bytes"], summary["errors"],
                      summary["dead_lettered"], summary["filtered"], summary["retries"])
        for p in summary["partitions"]:
            self.log.info("  %s: %s -> %s (%s records)", p["partition"], p["offset_before"], p["offset_after"], p["records"])
        if summary["failures"]:
            raise AirflowException("copycat run failed:\n" + "\n".join(summary["failures"]))
        self._emit_assets(context, plan, summary)
        return summary

    def _emit_assets(self, context, plan: dict, summary: dict) -> None:
        alias = asset_alias(self.connector)
        if not any(isinstance(o, AssetAlias) and o.name == alias.name for o in self.outlets):
            return
        events = context["outlet_events"][alias]
        for uri, extra in destinations(plan, summary).items():
            events.add(Asset(uri=uri, name=uri), extra=extra)


def destinations(plan: dict, summary: dict) -> dict[str, dict]:
    """Asset URI -> event extra, for every destination that received records in this run."""
    out: dict[str, dict] = {}
    if plan["kind"] == "source":
        bootstrap = str(plan.get("bootstrap_servers") or "kafka").split(",")[0]
        for topic, n in summary["topics"].items():
            if n:
                out[f"kafka://{bootstrap}/{topic}"] = {"connector": plan["connector"], "records": n}
        return out
    from ..runtime import plugins

    cls = plugins.resolve_connector(plan["config"]["connector.class"])
    for topic, n in summary["topics"].items():
        if not n:
            continue
        ranges = {
            str(p["partition"][1]): [p["offset_before"], p["offset_after"]]
            for p in summary["partitions"]
            if p["partition"][0] == topic and p["records"]
        }
        for uri in cls.asset_uris(plan["config"], topic) or [f"copycat://{plan['connector']}/{topic}"]:
            out[uri] = {"connector": plan["connector"], "topic": topic, "records": n, "offsets": ranges}
    return out
