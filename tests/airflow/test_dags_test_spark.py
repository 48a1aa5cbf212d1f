"""End to end through spark-submit: the example DAG under ``airflow dags test`` (the real CLI),
and the run operator's Spark path with a secret, under ``dag.test()``."""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from airflow.sdk.log import redact

from airflow_copycat.runtime.connector_config import HIDDEN
from tests.support.airflow_connectors import fingerprint
from tests.support.java import java_home

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SPARK_CONN = json.dumps({"conn_type": "spark", "host": "local[2]"})


def spark_env() -> dict[str, str]:
    """What spark-submit from the pyspark wheel needs (FACTS.md): Java, the venv's bin first on
    PATH (find-spark-home runs python3 from PATH), executors on this interpreter."""
    return {"JAVA_HOME": java_home(), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable}


def write_logs(directory: Path, files: int, lines: int) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for f in range(files):
        rows = [f"2026-11-22T00:00:00Z host{f} GET /item/{i} status=200" for i in range(lines)]
        (directory / f"app-{f}.log").write_text("".join(r + "\n" for r in rows), encoding="utf-8")
        written += rows
    return written


def parquet_values(root: Path) -> list[str]:
    import pyarrow.dataset as ds

    return ds.dataset(str(root), format="parquet", partitioning="hive").to_table(columns=["value"]).column(
        "value").to_pylist()


def finish_summaries(db: Path, dag_id: str) -> tuple[str, dict[str, dict]]:
    """The last run's state and its finish tasks' summaries, by task group, from the metadata DB."""
    con = sqlite3.connect(db)
    try:
        run_id, state = con.execute(
            "select run_id, state from dag_run where dag_id=? order by id desc limit 1", (dag_id,)).fetchone()
        rows = con.execute("select task_id, value from xcom where dag_id=? and run_id=? and key='return_value' "
                           "and task_id like '%.finish'", (dag_id, run_id)).fetchall()
    finally:
        con.close()
    summaries = {}
    for task_id, value in rows:
        while isinstance(value, (str, bytes)):
            value = json.loads(value)
        summaries[task_id.split(".")[0]] = value
    return state, summaries


def test_copycat_demo_with_airflow_dags_test(tmp_path, unique, kafka_bootstrap, read_topic, cli_env):
    # Given log files, and the example DAG pointed at them, a new topic and an output directory
    lines = write_logs(tmp_path / "input", files=3, lines=200)
    topic, output = f"demo-{unique}", tmp_path / "output"
    env = dict(cli_env, **spark_env(), AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
               AIRFLOW_CONN_SPARK_DEFAULT=SPARK_CONN, COPYCAT_DEMO_DIR=str(tmp_path),
               AIRFLOW_CONN_KAFKA_DEFAULT=json.dumps({"conn_type": "kafka", "extra": {
                   "bootstrap.servers": kafka_bootstrap, "offset.storage.topic": f"copycat-offsets-{unique}",
                   "offset.storage.partitions": 3}}))
    conf = {"input": str(tmp_path / "input" / "*.log"), "topic": topic, "output": str(output)}

    # When `airflow dags test copycat_demo -c ...` runs it (each group through spark-submit, local[2])
    log_path = tmp_path / "dags-test.log"
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.run([str(VENV_BIN / "airflow"), "dags", "test", "copycat_demo", "-c", json.dumps(conf)],
                              env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False)
    log = log_path.read_text(encoding="utf-8", errors="replace")

    # Then the run succeeded on Spark, and lines == records in Kafka == rows in Parquet
    assert proc.returncode == 0, log[-8000:]
    assert "spark-submit" in log.lower() and "in process" not in log
    state, summaries = finish_summaries(Path(env["AIRFLOW_HOME"]) / "airflow.db", "copycat_demo")
    assert state == "success", log[-8000:]
    assert {k: (s["status"], s["records"]) for k, s in summaries.items()} == {
        "demo-logs-source": ("ok", 600), "demo-logs-sink": ("ok", 600)}
    assert sorted(read_topic(topic)) == sorted(lines)
    assert sorted(parquet_values(output / "topics" / topic)) == sorted(lines)


def test_spark_tasks_get_secrets_from_the_environment_never_from_the_group_file(
        make_dag, run_dag, tmp_path, unique, read_topic, test_worker_config, monkeypatch):
    # Given a connector with secrets, run on Spark (not in process), keeping its work directory;
    # executors import the test connector from this checkout
    for key, value in dict(spark_env(), AIRFLOW_CONN_SPARK_DEFAULT=SPARK_CONN,
                           PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))).items():
        monkeypatch.setenv(key, value)
    credential, password = f"{unique}-credential-value", f"{unique}-s3cr3t-value"
    topic = f"spark-secrets-{unique}"
    group = f"spark-secrets-{unique}"
    config = {"name": group, "connector.class": "tests.support.airflow_connectors:CredentialSource",
              "topic": topic, "api.credential": credential, "connection.password": password}
    work = tmp_path / "work"
    dag = make_dag(f"spark_secrets_{unique}", config, worker_config=test_worker_config,
                   run_kwargs={"work_dir": str(work)})

    # When it runs
    result = run_dag(dag)

    # Then the Spark task received the real values ...
    assert result.state == "success", result.states()
    assert "spark-submit" in result.log.lower() and "in process" not in result.log
    [received] = [json.loads(v) for v in read_topic(topic)]
    assert received == {"api.credential": fingerprint(credential), "connection.password": fingerprint(password)}
    # ... while the group file spark-submit read holds [hidden]
    [group_file] = glob.glob(str(work / "copycat-*" / "group.json"))
    text = Path(group_file).read_text(encoding="utf-8")
    assert HIDDEN in text and credential not in text and password not in text
    assert json.loads(Path(group_file).with_name("result.json").read_text())["status"] == "ok"
    # ... and only the careless connector logged them, which the task log masks
    leaking = [line for line in result.log.splitlines() if credential in line or password in line]
    assert all("CredentialTask connecting" in line for line in leaking), leaking
    task_log = redact(result.log)
    assert credential not in task_log and password not in task_log
