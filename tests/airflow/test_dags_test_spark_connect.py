"""The run and copy operators with a ``spark_connect`` connection, under ``dag.test()``: each group runs on the
session's local Spark Connect server (``spark_connect`` fixture), from the task process, with no spark-submit."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.log import redact

from tests.support.airflow_connectors import fingerprint
from tests.support.progress_lines import Line, final_line, progress_lines

pytestmark = pytest.mark.slow


@pytest.fixture
def spark_connect_conn(spark_connect, monkeypatch):
    """``spark_connect_test``: a ``spark_connect`` connection to the test server, its token as the password
    (the provider's ``SparkConnectHook`` turns it into ``sc://localhost:PORT/;token=...``)."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_TEST", spark_connect.airflow_connection())
    return "spark_connect_test"


def test_a_spark_connect_connection_runs_the_group_there_and_no_secret_reaches_the_server(
        make_dag, run_dag, spark_connect, spark_connect_conn, unique, read_topic, test_worker_config):
    # Given a connector with two secrets, and a DAG whose run tasks use a spark_connect connection
    credential, password = f"{unique}-credential-value", f"{unique}-s3cr3t-value"
    topic = f"connect-secrets-{unique}"
    config = {"name": f"connect-secrets-{unique}", "connector.class": "tests.support.airflow_connectors:CredentialSource",
              "topic": topic, "api.credential": credential, "connection.password": password}
    dag = make_dag(f"connect_secrets_{unique}", config, worker_config=test_worker_config,
                   spark_conn_id=spark_connect_conn)
    server_log_before = len(spark_connect.log_text())

    # When it runs
    result = run_dag(dag)

    # Then the group ran over Spark Connect, not through spark-submit
    assert result.state == "success", result.states()
    assert f"Over Spark Connect at sc://localhost:{spark_connect.port}/;token=[hidden]" in result.log
    assert "spark-submit" not in result.log.lower()
    # And its Spark task received the real secret values
    [received] = [json.loads(v) for v in read_topic(topic)]
    assert received == {"api.credential": fingerprint(credential), "connection.password": fingerprint(password)}
    # And the group's result says which Spark task ran its one task
    [run_result] = [v for t, _, k, v in result.xcoms() if t.endswith(".run") and k == "return_value"]
    assert [t["spark_task"]["partition"] for t in run_result["tasks"]] == [0]
    # And no secret and no token is in XCom, in the server's event log (jobs, plans, properties), or in the
    # server's log -- except the one line the careless connector logs itself
    secrets = (credential, password, spark_connect.token)
    assert not any(s in json.dumps(result.xcoms(), default=str) for s in secrets)
    assert not any(s in spark_connect.event_log_text() for s in secrets)
    server_log = spark_connect.log_text()[server_log_before:]
    assert "CredentialTask connecting" in server_log
    leaking = [line for line in server_log.splitlines() if any(s in line for s in secrets)]
    assert all("CredentialTask connecting" in line for line in leaking), leaking
    assert spark_connect.token not in server_log
    # And the task log shows neither the token nor (masked) the secrets
    assert spark_connect.token not in result.log
    task_log = redact(result.log)
    assert credential not in task_log and password not in task_log


def test_a_copy_job_with_a_spark_connect_connection(make_copy_dag, run_dag, spark_connect_conn, tmp_path, unique):
    # Given a file tree and a copy DAG whose run tasks use a spark_connect connection
    src, dst = tmp_path / "src", tmp_path / "dst"
    for dataset, name in [("orders", "a.csv"), ("users", "u.json")]:
        (src / dataset).mkdir(parents=True, exist_ok=True)
        (src / dataset / name).write_text(f"{dataset}/{name}\n" * 20)
    config = {"name": f"connect-copy-{unique}", "source.url": str(src), "target.url": str(dst),
              "dataset.pattern": "*", "tasks.max": 2}
    dag = make_copy_dag(f"connect_copy_{unique}", config, spark_conn_id=spark_connect_conn)
    # When it runs
    result = run_dag(dag)
    # Then the files were copied over Spark Connect and both datasets published
    assert result.state == "success", result.log[-5000:]
    assert "Over Spark Connect at" in result.log and "spark-submit" not in result.log.lower()
    summary = result.xcom(f"connect-copy-{unique}.publish")
    assert summary["status"] == "ok" and sorted(summary["published"]) == ["orders", "users"]
    assert (dst / "orders" / "a.csv").read_text() == "orders/a.csv\n" * 20


def test_the_task_log_shows_progress_read_from_the_executors_over_spark_connect(
        make_dag, run_dag, spark_connect_conn, unique, test_worker_config):
    # Given a source of two tasks that take a second or two each on the server's executors, and a worker config
    # asking for progress every 0.5 s on a status topic of this test
    name = f"connect-progress-{unique}"
    config = {"name": name, "connector.class": "tests.support.connectors:PacedSource", "topic": name,
              "counters": 2, "count": 150, "batch": 10, "pause.ms": 100, "tasks.max": 2}
    worker_config = dict(test_worker_config, **{"progress.interval.ms": 500,
                                                "status.storage.topic": f"copycat-status-{unique}"})
    dag = make_dag(f"connect_progress_{unique}", config, worker_config=worker_config, spark_conn_id=spark_connect_conn)
    # When it runs over Spark Connect
    result = run_dag(dag)
    # Then the task log showed the records the executors published while they ran, growing, and tasks done of total
    assert result.state == "success", result.states()
    lines = progress_lines(result.log, 0, name)
    assert len(lines) >= 2, result.log[-5000:]
    counts = [line.count for line in lines]
    assert counts == sorted(counts) and any(0 < c < 300 for c in counts), counts
    assert {line.total for line in lines} == {2} and lines[0].done < 2, lines
    # And a last line with what the group moved, as its result says
    assert result.xcom(f"{name}.run", map_index=0)["records"] == 300
    assert final_line(result.log, 0, name) == Line(2, 2, 300)
