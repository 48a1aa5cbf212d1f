"""PySpark application: run one task group of a copycat plan.

Submitted by the run operator (through the Spark provider's ``SparkSubmitHook``)
or by ``copycat run --master``::

    spark-submit [--py-files airflow_copycat.zip] spark_apps/task_group.py \
        --group group.json --result result.json

``group.json`` is one group of a plan (its task configs carry no secrets).
The worker config and the secret connector values come in the environment
variables ``COPYCAT_WORKER_JSON`` and ``COPYCAT_SECRETS_JSON``, so they are never
written to disk. The driver writes the group result JSON to ``--result`` (a local
path or any fsspec URL) and exits non-zero if a task failed.

:func:`run_group_on_spark` is the one code path that runs a group on Spark: here
under spark-submit, and over Spark Connect (:mod:`spark_apps.connect`), where
RDDs and ``sparkContext`` do not exist. It is a DataFrame job:

* ``spark.range(n, numPartitions=n)``: one row per task config, and exactly one
  row in each of the ``n`` partitions (a range splits ``n`` rows into ``n``
  slices of one), so each task config is one Spark task and no partition is
  empty. No shuffle follows, so nothing regroups the rows.
* The task configs (which carry ``[hidden]`` in place of secrets) join each row
  as a binary literal of the plan, picked by the row's index.
* ``mapInArrow`` runs :func:`airflow_copycat.runtime.executor.run_task` for each
  row and yields the task's result JSON, which the driver collects. Each result
  gains ``spark_task``: the Spark partition and attempt that ran it.

Secrets (and the worker config, which may hold Kafka credentials) travel only
inside the Python function ``mapInArrow`` runs: cloudpickle serialises it with
them, the driver (or, over Spark Connect, the client, through its gRPC channel)
sends it to the executors, which unpickle it in memory. They are never in a
DataFrame column, a literal of the plan, a job description or tag, a log line
or a file. The function holds only them, far below the 1 MB beyond which
pyspark would broadcast a function through a temporary file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import Callable

from airflow_copycat.runtime.json_files import read_json, write_json
from airflow_copycat.runtime.submit import SECRETS_ENV, WORKER_ENV


def run_group_on_spark(spark, group: dict, worker_props: dict, secrets: dict | None = None,
                       spark_progress: Callable[[int, int, int], None] | None = None) -> dict:
    """Run ``group``'s tasks on ``spark`` (a classic or a Spark Connect session), one Spark
    task per task config, and return the group result (tasks in task order).

    ``spark_progress(done, total, running)``: Spark's view of the job's tasks while it runs,
    from the Spark Connect progress handler, or from the status tracker of a classic session
    (polled every second); called from another thread. The tasks' own progress (records, bytes)
    travels apart from Spark (:mod:`airflow_copycat.runtime.progress`).

    A task that fails reports ``status: failed`` in its result; the others still run.
    Raises if the Spark job itself fails (a Python worker crashed, the server went away)
    or returns other tasks than the group's (which the one-row-per-partition layout rules out).
    """
    from airflow_copycat.runtime.result import group_result

    kind = group["kind"]
    spec = group.get("spec")  # the plan's typed view of the config (no secrets), or None
    tasks = list(group["tasks"])
    secrets = dict(secrets or {})
    worker_props = dict(worker_props or {})
    if not tasks:
        return group_result(group, [])

    def run_tasks(batches):
        # Runs on an executor, unpickled from this closure: it may use only its arguments, the
        # closure's values (kind, spec, worker_props, secrets) and imports -- not this module's globals.
        import logging

        import pyarrow as pa
        from pyspark import TaskContext

        from airflow_copycat.runtime.executor import run_task

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        ctx = TaskContext.get()
        for batch in batches:
            for raw in batch.column("task").to_pylist():
                result = run_task(json.loads(raw), kind, worker_props, secrets, spec=spec)
                result["spark_task"] = {"partition": ctx.partitionId(), "attempt": ctx.attemptNumber()}
                yield pa.RecordBatch.from_pydict({"result": [json.dumps(result, default=str)]})

    n = len(tasks)
    configs = ", ".join(f"X'{json.dumps(t, default=str).encode().hex()}'" for t in tasks)
    frame = spark.range(0, n, 1, numPartitions=n).selectExpr(f"element_at(array({configs}), CAST(id AS INT) + 1) AS task")
    tag = _job_tag(group)
    spark.addTag(tag)
    description = f"copycat {group['connector']} group {group['group']}: {n} task(s)"
    if not _is_connect(spark):
        spark.sparkContext.setJobGroup(tag, description)  # the status tracker finds the job by its group
    stop_watching = _watch_spark(spark, tag, spark_progress) if spark_progress is not None else None
    try:
        rows = frame.mapInArrow(run_tasks, "result string").collect()
    finally:
        if stop_watching is not None:
            stop_watching()
        spark.removeTag(tag)
    results = sorted((json.loads(r["result"]) for r in rows), key=lambda r: r["task"])
    ran, planned = [r["task"] for r in results], sorted(t["task"] for t in tasks)
    if ran != planned:
        raise RuntimeError(f"group {group['group']} of {group['connector']}: Spark returned results of tasks {ran}, "
                           f"the group has tasks {planned}")
    return group_result(group, results)


def _watch_spark(spark, tag: str, report: Callable[[int, int, int], None]) -> Callable[[], None]:
    """Feed ``report(done, total, running)`` from Spark while the group's job runs; returns
    the function that stops it. Spark Connect: a progress handler of the session (the server
    sends progress every couple of seconds). Classic: a thread polling the status tracker
    for the stages of the job group ``tag``."""
    if _is_connect(spark):
        from pyspark.sql.connect.shell.progress import ProgressHandler

        class _Handler(ProgressHandler):
            def __call__(self, stages, inflight_tasks, operation_id, done):
                stages = list(stages or [])
                if stages:
                    report(sum(s.num_completed_tasks for s in stages), sum(s.num_tasks for s in stages),
                           int(inflight_tasks or 0))

        handler = _Handler()
        spark.registerProgressHandler(handler)
        return lambda: spark.removeProgressHandler(handler)

    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            try:
                stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(tag)
                          for s in (getattr(tracker.getJobInfo(j), "stageIds", None) or [])]
                stages = [s for s in stages if s is not None]
                if stages:
                    report(sum(s.numCompletedTasks for s in stages), sum(s.numTasks for s in stages),
                           sum(s.numActiveTasks for s in stages))
            except Exception:  # noqa: BLE001 -- a status read while the context stops: progress only
                pass

    thread = threading.Thread(target=poll, daemon=True, name=f"copycat-spark-progress-{tag}")
    thread.start()

    def stop_polling() -> None:
        stop.set()
        thread.join(5)

    return stop_polling


def _job_tag(group: dict) -> str:
    """The tag of the group's Spark jobs (``copycat-<connector>-group-<n>``): Spark tags allow no commas."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"copycat-{group['connector']}-group-{group['group']}")


def _is_connect(spark) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextlib.contextmanager
def _driver_progress(group: dict, worker_props: dict):
    """The driver's own progress lines (Spark's tasks done of total, prefixed ``copycat progress:``,
    on stdout, which the Spark provider copies into the task log), when the runner asked for
    progress and the tasks have no Kafka to report their records to -- a copy job without a
    worker config. With Kafka, the runner logs the tasks' records and counts itself."""
    from airflow_copycat.runtime import progress as runtime_progress

    if not worker_props.get(runtime_progress.RUN_KEY) or worker_props.get("bootstrap.servers"):
        yield None
        return

    def say(line: str) -> None:
        print(runtime_progress.SPARK_LINE_PREFIX + line, flush=True)

    with runtime_progress.GroupProgress(group, worker_props, say, kafka=False) as progress:
        yield progress


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", required=True, help="path or URL of the task group JSON")
    parser.add_argument("--result", required=True, help="path or URL to write the group result JSON to")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    group = read_json(args.group)
    if group is None:
        raise SystemExit(f"no task group JSON at {args.group}")
    worker_props = json.loads(os.environ.get(WORKER_ENV) or "{}")
    secrets = json.loads(os.environ.get(SECRETS_ENV) or "{}")
    spark = SparkSession.builder.appName(f"copycat-{group['connector']}-group-{group['group']}").getOrCreate()
    try:
        with _driver_progress(group, worker_props) as progress:
            result = run_group_on_spark(spark, group, worker_props, secrets,
                                        spark_progress=progress.spark if progress is not None else None)
    finally:
        spark.stop()
    write_json(result, args.result)
    print(f"copycat group {group['group']} of {group['connector']}: {result['status']}, "
          f"{result['records']} records, {result['bytes']} bytes")
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
