"""Running a task group in this process -- what one Spark task does for one task config,
and what ``in_process`` mode does for a whole group."""

from __future__ import annotations

from typing import Any, Mapping

from . import connector_config
from .result import group_result
from .worker import WorkerConfig


def run_task(task: Mapping[str, Any], kind: str, worker_props: Mapping[str, Any],
             secrets: Mapping[str, Any] | None = None) -> dict:
    """Run one task of a plan (``kind``: source, sink, or copy). ``secrets`` (config keys ->
    values) replace the ``[hidden]`` values the plan carries."""
    task = dict(task)
    task["config"] = connector_config.restore_secrets(task["config"], secrets or {})
    if kind == "copy":  # a Distcp job's task: no Kafka
        from .copy_job import run_copy_task

        return run_copy_task(task)
    worker = WorkerConfig(worker_props, env={})
    if kind == "source":  # imported here: a copy job's process needs neither loop (nor pyarrow, Kafka clients)
        from .source import run_source_task

        return run_source_task(task, worker)
    from .sink import run_sink_task

    return run_sink_task(task, worker)


def run_group(group: Mapping[str, Any], worker_props: Mapping[str, Any],
              secrets: Mapping[str, Any] | None = None) -> dict:
    """Run every task of ``group`` one after the other in this process."""
    results = [run_task(t, group["kind"], worker_props, secrets) for t in group["tasks"]]
    return group_result(dict(group), results)
