"""What copycat runs moved, in Airflow's metrics: StatsD, Datadog or OpenTelemetry, whichever the
deployment's ``[metrics]`` section turns on (nothing is sent when none is).

Names follow Airflow's own (``dag.<dag_id>.<task_id>.duration``): dotted, the connector in the
name so that backends without tags (plain StatsD) keep connectors apart, and the same values as
tags (``connector``, ``dag_id``, and ``kind`` or ``group``) for backends that take them. Airflow's
``[metrics] statsd_prefix`` (default ``airflow``) comes first. Characters other than letters,
digits, ``_``, ``.`` and ``-`` in a connector name become ``_``.

The finish task, once per connector run (counters, incremented by the run's totals):

* ``copycat.<connector>.records`` -- records written (a copy job: files copied)
* ``copycat.<connector>.bytes``
* ``copycat.<connector>.errors`` -- errors tolerated (``errors.tolerance=all``)
* ``copycat.<connector>.dead_lettered``
* ``copycat.<connector>.filtered`` -- records dropped by transforms
* ``copycat.<connector>.retries``
* ``copycat.<connector>.failed_tasks`` -- tasks that failed (emitted before the run fails)

and a timer ``copycat.<connector>.task_duration`` per task (its ``duration_s``). After a sink run, a
gauge ``copycat.<connector>.lag``: the records its consumer group ``connect-<connector>`` is behind the end
of its topic-partitions when the run finished (what the next run will copy; records produced during the
run and a run that stopped at its budget show here), not sent when the end cannot be found in time.

The publish task of a copy job (Distcp), once per run: counters ``copycat.<name>.files_copied``,
``.bytes_copied``, ``.files_reused``, ``.files_skipped``, ``.deleted``, ``.failed_tasks``, and the
``task_duration`` timers.

The run task, once per task group: a timer ``copycat.<connector>.group_duration`` (from the
start of the group to its result, Spark's start-up included) and a counter
``copycat.<connector>.group_records``.

Sending a metric never fails a task: a metric backend that cannot send drops it (Airflow's
``Safe*Logger``).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")

RUN_COUNTERS = ("records", "bytes", "errors", "dead_lettered", "filtered", "retries")


def _stats():
    """Airflow's metrics facade (its module moved in Airflow 3.x: common.compat finds it)."""
    try:
        from airflow.providers.common.compat.sdk import Stats
    except ImportError:  # common.compat older than the Stats shim
        from airflow.stats import Stats
    return Stats


def _name(connector: str, metric: str) -> str:
    return f"copycat.{_UNSAFE.sub('_', connector)}.{metric}"


def run_finished(summary: dict[str, Any], dag_id: str | None) -> None:
    """The finish task's metrics of one connector run (``summary``: :func:`~..runtime.result.summarize`)."""
    stats, connector = _stats(), summary["connector"]
    tags = {"connector": connector, "dag_id": dag_id or "", "kind": summary.get("kind", "")}
    for metric in RUN_COUNTERS:
        stats.incr(_name(connector, metric), int(summary.get(metric) or 0), tags=tags)
    failed = sum(1 for line in summary.get("failures") or [])
    if failed:
        stats.incr(_name(connector, "failed_tasks"), failed, tags=tags)


COPY_COUNTERS = ("files_copied", "bytes_copied", "files_reused", "files_skipped", "deleted")


def copy_finished(summary: dict[str, Any], dag_id: str | None) -> None:
    """The publish task's metrics of one copy run (``summary``: ``copy_job.publish_copy``)."""
    stats, name = _stats(), summary["connector"]
    tags = {"connector": name, "dag_id": dag_id or "", "kind": "copy"}
    for metric in COPY_COUNTERS:
        stats.incr(_name(name, metric), int(summary.get(metric) or 0), tags=tags)
    if summary.get("failures"):
        stats.incr(_name(name, "failed_tasks"), len(summary["failures"]), tags=tags)
    tasks_timed(name, [{"task": t["task"], "duration_s": t.get("seconds")} for t in summary.get("tasks") or []],
                dag_id)


def sink_lag(connector: str, rows: list[dict[str, Any]], dag_id: str | None) -> None:
    """The ``lag`` gauge after a sink run (``rows``: :func:`airflow_copycat.runtime.lag.sink_lag`'s); not sent
    when no partition's lag is known."""
    known = [r["lag"] for r in rows if r.get("lag") is not None]
    if known:
        _stats().gauge(_name(connector, "lag"), sum(known), tags={"connector": connector, "dag_id": dag_id or ""})


def tasks_timed(connector: str, tasks: list[dict], dag_id: str | None) -> None:
    """A timer per task result that says how long it ran (``duration_s``)."""
    stats = _stats()
    for task in tasks:
        if task.get("duration_s") is not None:
            stats.timing(_name(connector, "task_duration"), dt.timedelta(seconds=float(task["duration_s"])),
                         tags={"connector": connector, "dag_id": dag_id or "", "task": str(task.get("task"))})


def group_finished(result: dict[str, Any], seconds: float, dag_id: str | None) -> None:
    """The run task's metrics of one task group (``result``: its group result)."""
    stats, connector = _stats(), result["connector"]
    tags = {"connector": connector, "dag_id": dag_id or "", "group": str(result.get("group"))}
    stats.timing(_name(connector, "group_duration"), dt.timedelta(seconds=seconds), tags=tags)
    stats.incr(_name(connector, "group_records"), int(result.get("records") or 0), tags=tags)
