"""PySpark application: run one task group of a copycat plan.

Submitted by the run operator (through the Spark provider's ``SparkSubmitHook``)
or by ``copycat run --master``::

    spark-submit [--py-files airflow_copycat.zip] spark_apps/task_group.py \
        --group group.json --result result.json

``group.json`` is one group of a plan (its task configs carry no secrets).
The worker config and the secret connector values come in the environment
variables ``COPYCAT_WORKER_JSON`` and ``COPYCAT_SECRETS_JSON``, so they are never
written to disk; the driver passes them to executors inside the task closure.
Each task config becomes one Spark task (one partition of an RDD); each runs the
runtime's source or sink loop and returns its result. The driver writes the
group result JSON to ``--result`` (a local path or any fsspec URL) and exits
non-zero if a task failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from airflow_copycat.runtime.submit import SECRETS_ENV, WORKER_ENV


def run_group_on_spark(spark, group: dict, worker_props: dict, secrets: dict | None = None) -> dict:
    """Run ``group``'s tasks as Spark tasks, one per task config; return the group result."""
    from airflow_copycat.runtime.result import group_result

    kind = group["kind"]
    tasks = list(group["tasks"])
    secrets = dict(secrets or {})
    if not tasks:
        return group_result(group, [])

    def run(task):
        import logging

        from airflow_copycat.runtime.executor import run_task

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return json.dumps(run_task(task, kind, worker_props, secrets))

    sc = spark.sparkContext
    sc.setJobDescription(f"copycat {group['connector']} group {group['group']}: {len(tasks)} task(s)")
    results = sc.parallelize(tasks, len(tasks)).map(run).collect()
    return group_result(group, sorted((json.loads(r) for r in results), key=lambda r: r["task"]))


def _write(path: str, doc: dict) -> None:
    text = json.dumps(doc, indent=1, default=str)
    if "://" in path:
        import fsspec

        with fsspec.open(path, "w") as f:
            f.write(text)
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _read(path: str) -> dict:
    if "://" in path:
        import fsspec

        with fsspec.open(path, "r") as f:
            return json.load(f)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", required=True, help="path or URL of the task group JSON")
    parser.add_argument("--result", required=True, help="path or URL to write the group result JSON to")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    group = _read(args.group)
    worker_props = json.loads(os.environ.get(WORKER_ENV) or "{}")
    secrets = json.loads(os.environ.get(SECRETS_ENV) or "{}")
    spark = SparkSession.builder.appName(f"copycat-{group['connector']}-group-{group['group']}").getOrCreate()
    try:
        result = run_group_on_spark(spark, group, worker_props, secrets)
    finally:
        spark.stop()
    _write(args.result, result)
    print(f"copycat group {group['group']} of {group['connector']}: {result['status']}, "
          f"{result['records']} records, {result['bytes']} bytes")
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
