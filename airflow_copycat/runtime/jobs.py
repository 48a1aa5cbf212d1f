"""The two kinds of job the runtime runs, behind one interface: plan, run one task, describe its results.

A *connector job* is Kafka Connect's model: a source or sink connector whose tasks copy records
between an external system and Kafka, with offsets. A *copy job* is Gobblin's Distcp: datasets of
files copied between filesystems and published whole, with no Kafka. Both are planned into groups
of tasks (one Spark task each), run by the same executor, Spark applications and operators, and
summed up by a finish step.

Everything that handles a config, a plan, a group or a task asks for its job here --
:func:`job_of` by a plan's or group's ``kind``, :func:`job_for_config` by a config -- and calls
the job; nothing else branches on ``kind`` or on the shape of a config. The finish steps differ
in Airflow (the finish operator for connectors, the copy operator's publish task for copies), so
they stay with the operators that own them.

Contract of :class:`Job`, for both kinds:

* :meth:`Job.plan` is called where Airflow (or the ``copycat`` command) runs, never on executors;
  it validates the config (one ``ConfigException`` naming every bad key) and returns a plan
  whose groups carry ``kind``.
* :meth:`Job.run_task` is called once per task config, on a Spark executor or in process; it
  returns the task's result dict and never raises for a failed task (the result says so). Who
  owns the offsets: a connector job's tasks commit them (sources to the offset store after Kafka
  acknowledged, sinks where the sink keeps them); a copy job's tasks only stage files, and the
  publish step commits.
* :meth:`Job.secret_keys` names the keys of a config whose values are secrets (hidden in plans and
  XCom, restored for the run), without validating the config. A connector plan also records them in
  its :class:`~.spec.ConnectorSpec` (``group["spec"]``), which the run step reads instead.
* :meth:`Job.run_task` of a connector job takes the group's spec (``None``: a plan without one), so the
  loops read the typed settings and the offsets' name the plan step derived, once.
"""

from __future__ import annotations

from typing import Any, Mapping


class Job:
    """One kind of job (see the module docstring). Stateless: one instance per kind."""

    kinds: tuple[str, ...] = ()
    unit = "records"
    """What its task results count in ``records``: records, or files for a copy job."""
    needs_kafka = True
    """Whether its tasks need the Kafka connection (its worker config)."""

    def plan(self, raw: Mapping[str, Any], **options) -> dict[str, Any]:
        raise NotImplementedError

    def run_task(self, task: Mapping[str, Any], kind: str, worker_props: Mapping[str, Any],
                 progress=None, spec=None) -> dict[str, Any]:
        """Run one task (its secrets already restored); ``progress``: its reporter, or ``None``;
        ``spec``: the group's :class:`~.spec.ConnectorSpec` (a copy job's: :class:`~.spec.CopySpec`), or
        ``None`` (a plan without one)."""
        raise NotImplementedError

    def secret_keys(self, raw: Mapping[str, Any]) -> set[str]:
        raise NotImplementedError

    def describe_tasks(self, group: Mapping[str, Any]) -> str | None:
        """What a group's tasks work on, in a few words for a label; ``None``: name its partitions."""
        return None

    def task_line(self, result: Mapping[str, Any]) -> tuple[str, list[str]]:
        """One task result as a log line, and the lines of its failed items (logged as errors)."""
        raise NotImplementedError


class ConnectorJob(Job):
    """A source or sink connector (Kafka Connect's model)."""

    kinds = ("source", "sink")

    def plan(self, raw, **options):
        from .plan import make_plan

        return make_plan(raw, **options)

    def run_task(self, task, kind, worker_props, progress=None, spec=None):
        from .worker import WorkerConfig

        worker = WorkerConfig(worker_props, env={})
        if kind == "source":  # imported here: a copy job's process needs neither loop (nor pyarrow, Kafka clients)
            from .source import run_source_task

            return run_source_task(task, worker, progress=progress, spec=spec)
        from .sink import run_sink_task

        return run_sink_task(task, worker, progress=progress, spec=spec)

    def secret_keys(self, raw):
        """The keys named like secrets, holding a URL password, or declared ``PASSWORD`` by the connector
        class -- which is only resolved, not validated: the plan validates the config, once."""
        from . import connector_config, plugins

        try:
            cls = plugins.resolve_connector(str(raw["connector.class"])) if raw.get("connector.class") else None
        except Exception:  # noqa: BLE001 -- an unknown class is reported by the plan, with every other problem
            cls = None
        return connector_config.secret_keys(raw, cls)

    def task_line(self, t):
        line = (f"task {t['task']}: {t['status']}, {t['records']} records, {t['bytes']} bytes, {t['errors']} tolerated "
                f"errors ({t['dead_lettered']} dead-lettered), {t.get('filtered', 0)} filtered, "
                f"{t['duration_s']:.1f}s" + (f" -- {t['error']}" if t["error"] else ""))
        return line, []


class CopyJob(Job):
    """A Distcp copy job: files, no Kafka; its publish step commits."""

    kinds = ("copy",)
    unit = "files"
    needs_kafka = False

    def plan(self, raw, **options):
        from .copy_job import make_copy_plan

        return make_copy_plan(raw, **options)

    def run_task(self, task, kind, worker_props, progress=None, spec=None):
        from .copy_job import run_copy_task
        from .spec import CopySpec

        return run_copy_task(task, progress=progress, spec=spec if isinstance(spec, CopySpec) else None)

    def secret_keys(self, raw):
        from .copy_job import secret_keys

        return secret_keys(raw)

    def describe_tasks(self, group):
        from .result import size_text

        tasks = group.get("tasks") or []
        units, size = sum(int(t.get("units") or 0) for t in tasks), sum(int(t.get("bytes") or 0) for t in tasks)
        return f"{len(tasks)} task(s), {units} work unit(s), {size_text(size)}"

    def task_line(self, t):
        line = (f"task {t['task']}: {t['status']}, {t['records']} file(s) copied, {t['bytes']} bytes, "
                f"{t.get('reused', 0)} reused from staging, {t['errors']} failed, {t['duration_s']:.1f}s"
                + (f", {t['mib_per_s']} MiB/s" if t.get("mib_per_s") else "") + (f" -- {t['error']}" if t["error"] else ""))
        return line, [f"  {f['origin']}: {f['error']}" for f in t.get("failed_files", [])]


CONNECTOR_JOB, COPY_JOB = ConnectorJob(), CopyJob()
_BY_KIND = {kind: job for job in (CONNECTOR_JOB, COPY_JOB) for kind in job.kinds}


def job_of(kind: str) -> Job:
    """The job of a plan's or group's ``kind`` (source, sink or copy)."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"unknown kind of job {kind!r}: expected one of {sorted(_BY_KIND)}") from None


def job_for_config(raw: Mapping[str, Any]) -> Job:
    """The job a flat config describes: a copy job when it has a copy job's keys, else a connector."""
    from .copy_job import is_copy_config

    return COPY_JOB if is_copy_config(raw) else CONNECTOR_JOB

