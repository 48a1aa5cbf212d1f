"""Distcp in a DAG: plan the copy -> copy in task groups (mapped, one Spark job each) -> publish."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import Asset, BaseOperator, TaskGroup, TriggerRule

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow < 3.1
    from airflow.exceptions import AirflowFailException

from ..connect.errors import ConfigException
from ..connect.secrets import Scrubber
from ..distcp import config as copy_config
from ..runtime import copy_job
from ..runtime.connector_config import load_connector_config
from . import lineage, metrics
from .finish import asset_alias
from ..hooks.secrets import MasksRenderedSecrets, connector_secrets
from ..hooks.storage import resolve_storage_connections
from .plan import count_params, load_config_or_fail
from .run import MAP_INDEX_TEMPLATE, CopycatRunTaskGroupOperator


class CopycatCopyPlanOperator(MasksRenderedSecrets, BaseOperator):
    """Plans a copy job: replays a leftover publish log, lists the datasets, diffs them
    with the target and packs the work into task groups (see
    :func:`airflow_copycat.runtime.copy_job.make_copy_plan`). The full plan is written
    under the target; XCom key ``plan`` holds its summary and URL, and the return value
    is the list of groups, for a mapped run task.

    :param copy_config: the job's config: a dict or a JSON/YAML/.properties path. (templated: e.g.
        ``"date.range.start": "{{ data_interval_start }}"`` for backfills)
    :param max_tasks: overrides ``tasks.max``. (templated)
    :param max_groups: overrides ``copycat.groups.max``. (templated)
    """

    template_fields: Sequence[str] = ("copy_config", "max_tasks", "max_groups")
    config_fields = ("copy_config",)  # its secrets are masked in the rendered fields
    template_fields_renderers = {"copy_config": "json"}
    ui_color = "#d8e8f8"

    def __init__(self, *, copy_config: dict[str, Any] | str, max_tasks: int | None = None,
                 max_groups: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.copy_config = copy_config
        self.max_tasks = max_tasks
        self.max_groups = max_groups

    def execute(self, context) -> list[dict]:
        raw = load_config_or_fail(self.copy_config, "copy_config")
        connector_secrets(raw)
        try:
            raw = resolve_storage_connections(raw)  # source.url / target.url naming Airflow connections
            connector_secrets(raw)
            counts, problems = count_params(max_tasks=self.max_tasks, max_groups=self.max_groups)
            if problems:  # reported with every problem of the copy config
                try:
                    copy_config.parse_copy_config(raw)
                except ConfigException as e:
                    problems += e.problems
                raise ConfigException(problems, context=f"copy {raw.get('name')!r}")
            plan = copy_job.make_copy_plan(raw, **counts)
        except ConfigException as e:
            raise AirflowFailException(str(e)) from None
        self.log.info("Planned copy %s: %d file(s), %d to copy (%d bytes), %d up to date, %d to delete; "
                      "%d group(s); plan %s", plan["connector"], plan["files"], plan["to_copy"],
                      plan["to_copy_bytes"], plan["skipped"], plan["deletes"], len(plan["groups"]), plan["plan_url"])
        for d in plan["datasets"]:
            self.log.info("  dataset %s: %d file(s), %d to copy, %d up to date, %d to delete", d["dataset"] or "(root)",
                          d["files"], d["to_copy"], d["skipped"], d["deletes"])
        context["ti"].xcom_push(key="plan", value=plan)
        return plan["groups"]


FAILED_SUMMARY_KEY = "failed_summary"
"""XCom key of a failed publish's summary (a successful one's is its return value)."""


class CopycatCopyPublishOperator(MasksRenderedSecrets, BaseOperator):
    """Publishes every dataset whose files all copied, each atomically through its
    write-ahead log, and records the summary (XCom): bytes, files and throughput per
    dataset and per task, what was reused from staging, what failed. Emits an Airflow
    Asset event per published dataset (``<target.url>/<dataset>`` as a URI: ``file:///...`` for a
    local path, credentials dropped; see :mod:`.lineage`) through the alias ``copycat/<name>``;
    with the OpenLineage provider installed, the task's OpenLineage events name the same datasets as
    outputs, ``<source.url>/<dataset>`` as inputs, with their file and byte counts. Fails, after
    publishing the others, when a dataset could not be published (its files stay staged for the
    next run to reuse); the summary is then in XCom key ``failed_summary``. Runs once the run tasks are done, also when one failed (trigger rule
    ``all_done``): what the other groups staged is published; the failed group's datasets are not.

    :param copy_config: the job's config (its secrets open the target). (templated)
    :param plan_task_id: the plan task. :param run_task_id: the mapped run task.
    :param name: the job's name (for the outlet alias).
    """

    template_fields: Sequence[str] = ("copy_config",)
    config_fields = ("copy_config",)  # its secrets are masked in the rendered fields
    ui_color = "#d8f0d8"

    def __init__(self, *, copy_config: dict[str, Any] | str, plan_task_id: str, run_task_id: str, name: str,
                 **kwargs) -> None:
        kwargs.setdefault("outlets", [asset_alias(name)])
        # also after a failed run task: the datasets other groups staged still publish (the run stays failed)
        kwargs.setdefault("trigger_rule", TriggerRule.ALL_DONE)
        super().__init__(**kwargs)
        self.copy_config = copy_config
        self.plan_task_id = plan_task_id
        self.run_task_id = run_task_id
        self.name = name

    def execute(self, context) -> dict[str, Any]:
        ti = context["ti"]
        raw = load_connector_config(self.copy_config)
        connector_secrets(raw)
        raw = resolve_storage_connections(raw)
        hide = Scrubber(connector_secrets(raw).values())
        plan = ti.xcom_pull(task_ids=self.plan_task_id, key="plan")
        if not plan:  # the plan task failed (this task runs after it whatever its state): no retry brings one;
            # failing (not skipping: a skipped last task would make the DAG run a success) without retries
            raise AirflowFailException(f"no plan in XCom of task {self.plan_task_id}: planning failed, nothing to "
                                       "publish")
        results = ti.xcom_pull(task_ids=self.run_task_id) or []
        if isinstance(results, dict):
            results = [results]
        summary = copy_job.publish_copy(plan, [r for r in results if r], raw)
        summary["failures"] = [hide(f) for f in summary["failures"]]  # a filesystem's text may quote a secret
        self._lineage_run = (plan, summary)  # for get_openlineage_facets_on_complete / _on_failure
        for line in copy_job.summary_lines(summary):
            self.log.info("%s", line)
        alias = asset_alias(self.name)
        if any(getattr(o, "name", None) == alias.name for o in self.outlets):
            events = context["outlet_events"][alias]
            deleted = {d["dataset"]: d.get("deleted", 0) for d in summary["datasets"]}
            for d in lineage.copy_datasets(plan, summary)[1]:
                uri = d.location.uri
                events.add(Asset(uri=uri, name=uri), extra={
                    "copy": self.name, "files": d.files or 0, "bytes": d.bytes or 0,
                    "deleted": deleted.get(d.dataset, 0)})
        metrics.copy_finished(summary, getattr(context.get("dag"), "dag_id", None))
        if summary["status"] != "ok":
            ti.xcom_push(key=FAILED_SUMMARY_KEY, value=summary)  # what was published, and what failed
            raise AirflowException("copy failed:\n" + "\n".join(summary["failures"]))
        return summary

    def get_openlineage_facets_on_complete(self, task_instance):
        """The OpenLineage provider's ``OperatorLineage``: per published dataset, its source
        directory as input and its target directory as output (:func:`.lineage.copy_datasets`), with
        the files and bytes published. Empty when execute() failed before publishing."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        state = getattr(self, "_lineage_run", None)
        if state is None:
            return OperatorLineage()
        return lineage.operator_lineage(*lineage.copy_datasets(*state))

    def get_openlineage_facets_on_failure(self, task_instance):
        """As on completion: the datasets that were published before the run failed."""
        return self.get_openlineage_facets_on_complete(task_instance)


def copy_task_group(copy_config: dict[str, Any] | str, *, group_id: str | None = None,
                    spark_conn_id: str = "spark_default", spark_conf: dict[str, Any] | None = None,
                    max_tasks: int | None = None, max_groups: int | None = None, in_process: bool = False,
                    worker_config: dict[str, Any] | None = None, run_kwargs: dict[str, Any] | None = None) -> TaskGroup:
    """A task group that runs one copy job: ``plan`` -> ``run`` (mapped: one task instance
    and one Spark job per task group) -> ``publish``. Values of ``copy_config``
    may be templates (``{{ data_interval_start }}``). ``spark_conn_id`` names a ``spark``
    connection (each group through spark-submit) or a ``spark_connect`` connection (each
    group on that running Spark over Spark Connect), as for
    :class:`~airflow_copycat.operators.run.CopycatRunTaskGroupOperator`. ``worker_config``: worker
    keys of the run tasks -- a copy needs no Kafka, but ``progress.interval.ms`` sets how often the
    task log shows progress, and ``bootstrap.servers`` (with its security keys) lets the copy tasks
    on Spark report their files and bytes through the status topic
    (:mod:`airflow_copycat.runtime.progress`). ``run_kwargs`` go to every run task instance
    (``retries``, ``pool``...). Use inside ``with DAG(...)``."""
    raw = load_connector_config(copy_config) if not isinstance(copy_config, dict) else copy_config
    name = str(load_connector_config(raw).get("name") or group_id or "copy")
    with TaskGroup(group_id=group_id or name) as group:
        plan = CopycatCopyPlanOperator(task_id="plan", copy_config=raw, max_tasks=max_tasks, max_groups=max_groups)
        run = CopycatRunTaskGroupOperator.partial(
            map_index_template=MAP_INDEX_TEMPLATE,
            task_id="run", connector_config=raw, kafka_conn_id=None, worker_config=worker_config,
            spark_conn_id=spark_conn_id, spark_conf=spark_conf, in_process=in_process, **(run_kwargs or {}),
        ).expand(group=plan.output)
        publish = CopycatCopyPublishOperator(task_id="publish", copy_config=raw, plan_task_id=plan.task_id,
                                             run_task_id=run.task_id, name=name)
        plan >> run >> publish
        plan >> publish  # publish also runs when nothing needed copying (deletes, leftover logs)
    return group

