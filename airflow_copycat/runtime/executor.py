"""Running a task group in this process -- what one Spark task does for one task config,
and what ``in_process`` mode does for a whole group."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..connect.secrets import Scrubber, is_secret_key
from . import connector_config
from .collector import task_collection
from .jobs import job_of
from .progress import task_progress
from .result import group_result, scrub_errors
from .spec import ConnectorSpec, CopySpec, spec_of_group


def run_task(task: Mapping[str, Any], kind: str, worker_props: Mapping[str, Any],
             secrets: Mapping[str, Any] | None = None, *, listener: Callable[[dict], None] | None = None,
             spec: ConnectorSpec | CopySpec | Mapping[str, Any] | None = None) -> dict:
    """Run one task of a plan through its job (:func:`.jobs.job_of` ``kind``: source, sink, or copy).
    ``secrets`` (config keys -> values) replace the ``[hidden]`` values the plan carries: the one
    thing this step takes from the rendered config.

    ``spec``: the group's :class:`~.spec.ConnectorSpec` or :class:`~.spec.CopySpec` (or its JSON, as
    ``group["spec"]`` holds it; a Spark task gets it with its task config), whose typed values the
    loops and the copier read instead of parsing the task config again; ``None`` (a plan of an earlier
    version): they derive them from the task config.

    When the runner asked for progress (``worker_props`` carry the run id of
    :class:`~.progress.GroupProgress`), the task publishes its progress while it runs: to
    ``listener`` (the runner is this process), else to the worker's status topic.

    Every error text of the result (a driver's or client's exception, which may quote a secret) is
    passed through a :class:`~airflow_copycat.connect.secrets.Scrubber` of ``secrets``
    (:func:`~.result.scrub_errors`) before the result leaves: to progress, result.json, XCom."""
    task = dict(task)
    task["config"] = connector_config.restore_secrets(task["config"], secrets or {})
    if spec is not None and not isinstance(spec, (ConnectorSpec, CopySpec)):
        spec = spec_of_group({"spec": spec})
    progress = task_progress(task, kind, worker_props, listener)
    result = None
    try:
        with task_collection():  # fewer, cheaper garbage collections while the task's loops run
            ran = job_of(kind).run_task(task, kind, worker_props, progress, spec=spec)
        result = scrub_errors(ran, task_scrubber(secrets, worker_props))
        return result
    finally:
        if progress is not None:
            progress.close(result)


def task_scrubber(secrets: Mapping[str, Any] | None, worker_props: Mapping[str, Any]) -> Scrubber:
    """The :class:`~airflow_copycat.connect.secrets.Scrubber` of a task's error texts: the connector's
    ``secrets`` (key -> value) and the worker properties named like secrets (``sasl.password``...)."""
    return Scrubber([*(secrets or {}).values(), *(v for k, v in worker_props.items() if is_secret_key(str(k)))])


def run_group(group: Mapping[str, Any], worker_props: Mapping[str, Any],
              secrets: Mapping[str, Any] | None = None, *, listener: Callable[[dict], None] | None = None) -> dict:
    """Run every task of ``group`` one after the other in this process; ``listener`` gets the
    tasks' progress records (see :func:`run_task`). The group's spec is read once, for all its tasks."""
    spec = spec_of_group(group)
    results = [run_task(t, group["kind"], worker_props, secrets, listener=listener, spec=spec)
               for t in group["tasks"]]
    return group_result(dict(group), results)
