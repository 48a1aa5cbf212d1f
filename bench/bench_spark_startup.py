"""The fixed cost of Spark: one task group run through spark-submit vs the same group in this process.

Input: a deterministic access log of ``--lines`` lines (default 10k) -- small, so
that the figures are dominated by start-up, not by copying. Kafka: the embedded
broker, or ``KAFKA_BOOTSTRAP``.

* baseline ``inprocess_group_<n>``: FileStreamSource (tasks.max=1, default
  JsonConverter) planned with ``make_plan`` and its group run with
  ``executor.run_group`` in this process.
* ``spark_submit_group_<n>``: the same connector (another name and topic, so
  its offsets start empty too) submitted as the Airflow run operator does it:
  ``spark-submit --master local[2]`` with ``runtime.submit``'s
  ``default_spark_conf`` as ``--conf``, ``package_zip()`` as ``--py-files``,
  ``submit_env()`` as the environment and ``application_path()``
  (spark_apps/task_group.py) with ``--group``/``--result`` JSON files
  (``write_json``); timed from process start to exit.
* ``spark_submit_trivial``: a PySpark script that only starts a SparkSession
  with the same settings, runs a one-element job and stops -- Spark's own
  floor, with no copycat code.

Ratios are ``seconds / baseline seconds``. Verification: both topics hold
exactly ``--lines`` records, and the Spark application's result JSON says
status ok with ``--lines`` records.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    create_topic,
    fail,
    kafka,
    note,
    read_topic,
    report,
    timed,
    uid,
    write_log_file,
)

from airflow_copycat.runtime import submit
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

MASTER = "local[2]"

TRIVIAL_APP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("copycat-bench-trivial").getOrCreate()
assert spark.sparkContext.parallelize([1], 1).map(lambda x: x + 1).collect() == [2]
spark.stop()
"""


def spark_submit(app: str, app_args: list[str], env: dict[str, str], py_files: str | None, log_path: str) -> float:
    cmd = [submit.spark_submit_binary(), "--master", MASTER]
    for k, v in submit.default_spark_conf(MASTER).items():
        cmd += ["--conf", f"{k}={v}"]
    if py_files:
        cmd += ["--py-files", py_files]
    cmd += [app, *app_args]
    with open(log_path, "wb") as log, timed() as t:
        proc = subprocess.run(cmd, check=False, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        with open(log_path, "rb") as f:
            tail = f.read()[-4000:].decode("utf-8", "replace")
        fail(f"spark-submit {os.path.basename(app)} exited {proc.returncode}:\n{tail}")
    return t[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    n, parts = args.lines, args.partitions
    label = f"{n // 1000}k" if n % 1000 == 0 else str(n)

    with tempfile.TemporaryDirectory(prefix="copycat-bench-") as tmp, kafka() as bootstrap:
        path = os.path.join(tmp, "access.log")
        write_log_file(path, n)
        run_id = uid()
        worker_props = {"bootstrap.servers": bootstrap, "offset.storage.topic": f"bench-offsets-{run_id}",
                        "offset.storage.partitions": 1}
        worker = WorkerConfig(worker_props, env={})

        def plan_for(kind: str) -> tuple[dict, str]:
            topic = f"bench-{kind}-{run_id}"
            create_topic(bootstrap, topic, parts)
            config = {"name": f"bench-{kind}-{run_id}", "connector.class": "FileStreamSource", "file": path,
                      "topic": topic, "tasks.max": 1}
            plan = make_plan(config, worker)
            if len(plan["groups"]) != 1:
                fail(f"expected one group, got {len(plan['groups'])}")
            return plan["groups"][0], topic

        def check_topic(topic: str) -> None:
            count = read_topic(bootstrap, topic, parts)
            if count != n:
                fail(f"{topic} holds {count} records, expected {n}")

        # baseline: the group in this process
        group, topic_local = plan_for("inprocess")
        with timed() as t_local:
            result = run_group(group, worker_props)
        if result["status"] != "ok" or result["records"] != n:
            fail(f"in-process group: {json.dumps(result)[:2000]}")
        check_topic(topic_local)
        note(f"in-process run_group: {t_local[0]:.2f} s")

        # the same group through spark-submit, as the run operator submits it
        group, topic_spark = plan_for("spark")
        group_path = submit.write_json(group, os.path.join(tmp, "group.json"))
        result_path = os.path.join(tmp, "result.json")
        env = dict(os.environ)
        env.update(submit.submit_env(worker_props, {}))
        with timed() as t_zip:
            py_files = submit.package_zip(os.path.join(tmp, "zip"))
        note(f"package_zip: {t_zip[0]:.2f} s")
        t_spark = spark_submit(submit.application_path(), ["--group", group_path, "--result", result_path],
                               env, py_files, os.path.join(tmp, "spark-group.log"))
        with open(result_path, encoding="utf-8") as f:
            result = json.load(f)
        if result["status"] != "ok" or result["records"] != n:
            fail(f"spark group result: {json.dumps(result)[:2000]}")
        check_topic(topic_spark)
        note(f"spark-submit group: {t_spark:.2f} s (task time inside Spark: "
             f"{[t.get('duration_s') for t in result['tasks']]})")

        # Spark's floor: a trivial application with the same settings
        trivial = os.path.join(tmp, "trivial.py")
        with open(trivial, "w", encoding="utf-8") as f:
            f.write(TRIVIAL_APP)
        t_trivial = spark_submit(trivial, [], env, None, os.path.join(tmp, "spark-trivial.log"))
        note(f"spark-submit trivial: {t_trivial:.2f} s")

        base = f"inprocess_group_{label}"
        report(base, t_local[0], "s", 1.0, "itself")
        report(f"spark_submit_group_{label}", t_spark, "s", t_spark / t_local[0], base)
        report("spark_submit_trivial", t_trivial, "s", t_trivial / t_local[0], base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
