"""The PySpark application: a task group's task configs run as Spark tasks."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from airflow_copycat.runtime import submit
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig
from tests.support.log_files import topic_payloads, write_logs
from spark_apps.task_group import run_group_on_spark






def test_each_task_config_is_one_spark_task(spark, worker_props, kafka_bootstrap, unique, tmp_path):
    # Given 3 log files planned as 3 tasks in one group
    config = {"name": f"spark-{unique}", "connector.class": "FileStreamSource", "file": write_logs(tmp_path, 3, 200),
              "topic": f"spark-{unique}", "tasks.max": 3, "topic.creation.default.partitions": 3}
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    (group,) = plan["groups"]
    assert len(group["tasks"]) == 3
    # When the group runs on Spark
    result = run_group_on_spark(spark, group, worker_props)
    # Then each task reports its own file and all 600 lines reached Kafka
    assert result["status"] == "ok", result
    assert [t["task"] for t in result["tasks"]] == [0, 1, 2]
    assert sorted(t["spark_task"]["partition"] for t in result["tasks"]) == [0, 1, 2]
    assert all(t["records"] == 200 and len(t["partitions"]) == 1 for t in result["tasks"])
    values = topic_payloads(kafka_bootstrap, config["topic"], 3)
    assert sorted(values) == sorted(f"file {f} line {i}" for f in range(3) for i in range(200))


def test_a_failed_task_fails_the_group_but_not_its_siblings(spark, worker_props, unique, tmp_path):
    config = {"name": f"sparkfail-{unique}", "connector.class": "FileStreamSource", "file": write_logs(tmp_path, 2, 10),
              "topic": f"sparkfail-{unique}", "tasks.max": 2}
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    (group,) = plan["groups"]
    # The second task's file holds bytes that are not UTF-8 (errors.tolerance=none: the task fails)
    bad = Path(group["tasks"][1]["partitions"][0]["filename"])
    bad.write_bytes(b"good line\n\xff\xfe broken\n")
    result = run_group_on_spark(spark, group, worker_props)
    assert result["status"] == "failed"
    ok, failed = result["tasks"]
    assert ok["status"] == "ok" and ok["records"] == 10
    assert failed["status"] == "failed" and str(bad) in failed["error"]


def _wait_for(url_check, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if url_check():
            return True
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory):
    """A Spark standalone master and one worker, started from the pyspark wheel on 127.0.0.1."""
    from airflow_copycat.testing.broker import free_port

    spark_home = Path(__import__("importlib.util").util.find_spec("pyspark").submodule_search_locations[0])
    logs = tmp_path_factory.mktemp("spark-standalone")
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
               SPARK_LOG_DIR=str(logs), SPARK_WORKER_DIR=str(logs / "work"))
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    spark_class = str(spark_home / "bin" / "spark-class")
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())],
                              env=env, stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT)]
    master_log = logs / "master.log"
    try:
        assert _wait_for(lambda: "I have been elected leader" in master_log.read_text()), master_log.read_text()[-2000:]
        procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
                                       "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
                                       "--webui-port", str(free_port())],
                                      env=env, stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT))
        assert _wait_for(lambda: "Registering worker" in master_log.read_text()), master_log.read_text()[-2000:]
        yield master_url
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.mark.slow
def test_spark_submit_to_a_standalone_master(standalone_master, worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a plan of 2 tasks
    logs = tmp_path / "logs"
    logs.mkdir()
    config = {"name": f"standalone-{unique}", "connector.class": "FileStreamSource", "file": write_logs(logs, 2, 100),
              "topic": f"standalone-{unique}", "tasks.max": 2, "topic.creation.default.partitions": 2}
    (group,) = make_plan(config, WorkerConfig(worker_props, env={}))["groups"]
    group_path = submit.write_json(group, str(tmp_path / "group.json"))
    result_path = str(tmp_path / "result.json")
    # When spark-submit sends the application to the standalone master (executors on its worker)
    cmd = submit.spark_submit_command(standalone_master, group_path, result_path, name="copycat-standalone-test")
    env = dict(os.environ, **submit.submit_env(worker_props, {}))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Then the group result says both tasks copied their file, and Kafka has every line
    result = json.loads(Path(result_path).read_text())
    assert result["status"] == "ok" and result["records"] == 200
    assert len(topic_payloads(kafka_bootstrap, config["topic"], 2)) == 200
    # And no secret or worker config was written next to the group file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["group.json", "logs", "result.json"]
