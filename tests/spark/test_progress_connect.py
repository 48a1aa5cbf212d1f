"""Progress of groups over Spark Connect (``airflow_copycat.runtime.progress``): copy tasks on the server's
executors report their files and bytes through the status topic when the worker gives Kafka."""

from __future__ import annotations

import time

import pytest

from airflow_copycat.runtime import copy_job
from airflow_copycat.runtime.connector_config import load_connector_config
from airflow_copycat.runtime.progress import GroupProgress, format_bytes
from spark_apps.connect import run_group_over_connect

pytestmark = pytest.mark.slow


def copy_group(tmp_path, name: str) -> dict:
    """One group of two copy tasks over three files in two datasets."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    for dataset, file in [("orders", "a.csv"), ("orders", "b.csv"), ("users", "u.json")]:
        (src / dataset).mkdir(parents=True, exist_ok=True)
        (src / dataset / file).write_text(f"{dataset}/{file}\n" * 300)
    raw = load_connector_config({"name": name, "source.url": str(src), "target.url": str(dst),
                                 "dataset.pattern": "*", "tasks.max": 2, "copycat.groups.max": 1})
    (group,) = copy_job.make_copy_plan(raw)["groups"]
    return group


def test_copy_tasks_on_the_server_report_files_and_bytes_through_kafka(spark_connect, kafka_bootstrap, unique,
                                                                     tmp_path):
    # Given a copy group and a runner whose worker config gives Kafka (and a status topic of this test)
    group = copy_group(tmp_path, f"connect-copy-progress-{unique}")
    props = {"bootstrap.servers": kafka_bootstrap, "status.storage.topic": f"copycat-status-{unique}",
             "status.storage.partitions": 1}
    # When it runs over Spark Connect, watched
    with GroupProgress(group, props, lambda line: None) as progress:
        result = run_group_over_connect(spark_connect.url, group, progress.task_props, spark_progress=progress.spark)
        for _ in range(100):  # until the reader caught up with the tasks' last records
            if "2/2 tasks done, 3 files" in (progress.line() or ""):
                break
            time.sleep(0.1)
    # Then the executors' records reached the runner: both tasks done, with the files and bytes of the result
    assert result["status"] == "ok" and result["records"] == 3
    assert progress.line() == f"group 0 of {group['connector']}: 2/2 tasks done, 3 files, " \
                              f"{format_bytes(result['bytes'])} so far"

