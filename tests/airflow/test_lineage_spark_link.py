"""The run task's extra link "Spark application", in real ``dag.test()`` runs: Airflow 3 resolves a
task's extra links when the task ends and keeps each one in XCom (``_link_<class name>``), which the
UI and the REST API then show."""

from __future__ import annotations

import json

import pytest

from airflow_copycat.operators.links import SPARK_APPLICATION_KEY, application_url
from tests.airflow.test_operators import file_source, write_lines

pytestmark = pytest.mark.slow

LINK_XCOM = "_link_SparkApplicationLink"


def test_a_spark_connect_run_links_to_the_servers_application(make_dag, run_dag, spark_default, spark_connect,
                                                              monkeypatch, tmp_path, unique, test_worker_config):
    # Given the Spark Connect connection names a history server URL template
    conn = json.loads(spark_connect.airflow_connection())
    conn["extra"] = {"spark_ui_url": "https://spark-history.example.com/history/{app_id}/jobs/"}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(conn))
    write_lines(tmp_path / "app.log", 0, 3)
    connector = f"lines-{unique}"
    dag = make_dag(f"link_{unique}", file_source(unique), params={"input": str(tmp_path / "app.log"),
                                                                  "topic": connector},
                   worker_config=test_worker_config)

    # When the DAG runs its group over Spark Connect
    result = run_dag(dag)

    # Then the run task's link is the history server page of the server's application
    assert result.state == "success", result.states()
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    spark = RemoteSparkSession.builder.remote(spark_connect.url).create()
    try:
        app_id = spark.conf.get("spark.app.id")
    finally:
        spark.stop()
    app = result.xcom(f"{connector}.run", key=SPARK_APPLICATION_KEY, map_index=0)
    assert app == {"app_id": app_id, "cluster": "spark_connect",
                   "url": f"https://spark-history.example.com/history/{app_id}/jobs/"}
    assert result.xcom(f"{connector}.run", key=LINK_XCOM, map_index=0) == app["url"]
    # And the token of the connection is in neither
    assert not spark_connect.token or spark_connect.token not in json.dumps(app)


def test_an_in_process_run_has_no_application_and_an_empty_link(make_dag, run_dag, tmp_path, unique,
                                                                 test_worker_config):
    # Given a DAG that runs its group in the Airflow worker
    write_lines(tmp_path / "app.log", 0, 2)
    connector = f"lines-{unique}"
    dag = make_dag(f"link_local_{unique}", file_source(unique), params={"input": str(tmp_path / "app.log"),
                                                                        "topic": connector},
                   in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then there is no Spark application to link to: the link is empty
    assert result.state == "success", result.states()
    assert result.xcom(f"{connector}.run", key=LINK_XCOM, map_index=0) == ""
    assert not [x for x in result.xcoms() if x[2] == SPARK_APPLICATION_KEY]


@pytest.mark.parametrize(("app_id", "template", "pod", "default", "url"), [
    ("application_1_0002", "http://rm:8088/cluster/app/{app_id}", None, None,
     "http://rm:8088/cluster/app/application_1_0002"),
    (None, "http://history/history/{app_id}/jobs/", None, "http://ui:4040/jobs/", None),
    ("spark-1", "https://k8s.example/pods/{driver_pod}", "job-driver", None, "https://k8s.example/pods/job-driver"),
    ("local-1", None, None, "http://host:4040/jobs/", "http://host:4040/jobs/"),
    ("app-1", "http://master:8080/", None, None, "http://master:8080/"),
])
def test_the_url_fills_the_connections_template_and_never_guesses_a_missing_id(app_id, template, pod, default, url):
    assert application_url(app_id, template, driver_pod=pod, default=default) == url
