"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import pytest

from tests.support.jdbc_airflow import JdbcAirflow, jdbc_airflow_services


@pytest.fixture(scope="session")
def jdbc_airflow(kafka_bootstrap, postgres_url, spark_connect, tmp_path_factory) -> JdbcAirflow:
    """The real Airflow services (api-server, scheduler, dag-processor, triggerer on 127.0.0.1)
    running the example DAG ``dags/jdbc_import.py`` on the session's Spark Connect server, its
    first live run done; shared by the backfill tests (REST API and browser), stopped at the end
    of the session."""
    with jdbc_airflow_services(tmp_path_factory.mktemp("airflow-e2e"), kafka_bootstrap=kafka_bootstrap,
                               postgres_url=postgres_url,
                               spark_connection=spark_connect.airflow_connection()) as airflow:
        yield airflow
