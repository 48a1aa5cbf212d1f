"""The Airflow connections docker/compose.yaml presets (``AIRFLOW_CONN_*``) are the ones the example
DAGs use, and each one, read by the hook that reads it in production (the provider's Kafka hook and
database resolver, the Spark provider's hooks), names a service of the stack, a port that service
listens on, and for databases a database and login the service creates."""

from __future__ import annotations

import ast
import inspect
import json
import re
from urllib.parse import urlsplit

import pytest

from tests.docker.compose_file import DOCKER_DIR, ROOT, command, environment, exposed_ports, load, mounts, option

TASK_RUNNER = "airflow-scheduler"


def conn_ids_in_dags() -> set[str]:
    """Connection ids the example DAGs name: ``*conn_id=`` arguments and ``"airflow.conn.id"`` values
    (in DAG files and their connector JSON files)."""
    ids = set()
    for path in (ROOT / "dags").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and (node.arg or "").endswith("conn_id"):
                if isinstance(node.value, ast.Constant) and node.value.value:
                    ids.add(node.value.value)
            if isinstance(node, ast.Dict):
                ids |= {v.value for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)
                        and k.value == "airflow.conn.id" and isinstance(v, ast.Constant)}
    for path in (ROOT / "dags" / "connectors").glob("*.json"):
        conn_id = json.loads(path.read_text(encoding="utf-8"))["config"].get("airflow.conn.id")
        ids |= {conn_id} if conn_id else set()
    return ids


def default_conn_ids() -> set[str]:
    """The connection ids the DAG-facing entry points use when a DAG names none."""
    from airflow_copycat import connector_task_group, copy_task_group
    from airflow_copycat.operators.offsets import CopycatOffsetsOperator
    from airflow_copycat.sensors.partitions import CopycatPartitionSensor

    ids = set()
    for entry in (connector_task_group, copy_task_group, CopycatOffsetsOperator.__init__,
                  CopycatPartitionSensor.__init__):
        ids |= {p.default for name, p in inspect.signature(entry).parameters.items()
                if name.endswith("conn_id") and isinstance(p.default, str)}
    return ids


def preset(env: dict[str, str]) -> dict[str, str]:
    """conn id -> value of the ``AIRFLOW_CONN_*`` variables in ``env``."""
    return {k[len("AIRFLOW_CONN_"):].lower(): v for k, v in env.items() if k.startswith("AIRFLOW_CONN_")}


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    return load()["services"]


@pytest.fixture
def connections(services, monkeypatch) -> dict[str, str]:
    """The task runner's connections, set in this process's environment as Airflow reads them."""
    conns = preset(environment(services[TASK_RUNNER]))
    for conn_id, value in conns.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value)
    return conns


def assert_listens(services: dict, host: str, port: int, what: str) -> None:
    assert host in services, f"{what} names host {host!r}, which is no service of docker/compose.yaml"
    assert port in exposed_ports(services[host]), \
        f"{what} names port {port} of {host}, which listens on {sorted(exposed_ports(services[host]))}"


def test_every_connection_id_of_the_example_dags_is_preset(services):
    used = conn_ids_in_dags() | default_conn_ids()
    assert {"kafka_default", "spark_default", "shop_db", "shop_pg", "warehouse_db", "replica_db"} <= used
    for name in ("airflow-scheduler", "airflow-triggerer"):
        missing = used - set(preset(environment(services[name])))
        assert not missing, f"{name} lacks connections the example DAGs use: {sorted(missing)}"


def test_kafka_connection_bootstraps_from_the_broker_service(services, connections):
    from airflow_copycat.hooks.kafka import CopycatKafkaHook

    bootstrap = CopycatKafkaHook("kafka_default").worker_props()["bootstrap.servers"]
    for server in bootstrap.split(","):
        host, _, port = server.rpartition(":")
        assert_listens(services, host, int(port), "kafka_default")
    assert environment(services[TASK_RUNNER])["COPYCAT_BOOTSTRAP_SERVERS"] == bootstrap, \
        "COPYCAT_BOOTSTRAP_SERVERS overrides the connection on the Airflow side: keep them equal"


def test_spark_connections_reach_the_master_and_the_connect_server(services, connections):
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    submit = SparkSubmitHook(conn_id="spark_default")._connection
    master = urlsplit(submit["master"])
    assert master.scheme == "spark", f"spark_default submits to {submit['master']}, not the standalone master"
    assert submit["deploy_mode"] in (None, "client"), "the driver runs on the Airflow worker (client mode)"
    assert_listens(services, master.hostname, master.port, "spark_default")
    assert option(command(services[master.hostname]), "--port") == str(master.port)

    url = urlsplit(SparkConnectHook("spark_connect_default").get_connection_url())
    assert url.scheme == "sc" and url.hostname == "spark-connect", url.geturl()
    assert_listens(services, url.hostname, url.port, "spark_connect_default")
    assert f"spark.connect.grpc.binding.port={url.port}" in command(services["spark-connect"])


def test_spark_default_can_be_switched_to_the_connect_server(monkeypatch):
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk import BaseHook

    services = load({"COPYCAT_SPARK_CONN": "spark-connect://spark-connect:15002"})["services"]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", environment(services[TASK_RUNNER])["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert BaseHook.get_connection("spark_default").conn_type == "spark_connect"
    url = urlsplit(SparkConnectHook("spark_default").get_connection_url())
    assert_listens(services, url.hostname, url.port, "spark_default (Spark Connect)")


def database_logins(service: dict) -> tuple[set[str], set[tuple[str, str]]]:
    """(databases, {(user, password)}) a postgres or mariadb service creates on first start."""
    env = environment(service)
    if "POSTGRES_USER" in env:
        databases, users = {env.get("POSTGRES_DB") or env["POSTGRES_USER"]}, {(env["POSTGRES_USER"],
                                                                                env["POSTGRES_PASSWORD"])}
        for target, source in mounts(service).items():
            if target == "/docker-entrypoint-initdb.d":
                for sql in (DOCKER_DIR / source).resolve().glob("*.sql"):
                    databases |= set(re.findall(r"CREATE DATABASE (\w+)", sql.read_text(), re.I))
        return databases, users
    return {env["MARIADB_DATABASE"]}, {(env["MARIADB_USER"], env["MARIADB_PASSWORD"]),
                                       ("root", env.get("MARIADB_ROOT_PASSWORD", ""))}


@pytest.mark.parametrize("conn_id", ["shop_db", "shop_pg", "warehouse_db", "replica_db"])
def test_database_connections_log_in_to_a_database_the_stack_creates(services, connections, conn_id):
    from sqlalchemy.engine import make_url

    from airflow_copycat.hooks.database import resolve_db_connection

    resolved = resolve_db_connection({"name": "compose", "airflow.conn.id": conn_id})
    url = make_url(resolved["connection.url"])
    port = url.port or {"postgresql": 5432, "mysql": 3306}[url.get_backend_name()]
    assert_listens(services, url.host, port, conn_id)
    databases, logins = database_logins(services[url.host])
    assert url.database in databases, f"{conn_id} uses database {url.database!r}; {url.host} creates {databases}"
    assert (resolved["connection.user"], resolved["connection.password"]) in logins, \
        f"{conn_id} logs in as {resolved['connection.user']!r} with a password {url.host} does not set"


def test_airflow_reaches_its_metadata_database_and_execution_api(services):
    from sqlalchemy.engine import make_url

    env = environment(services[TASK_RUNNER])
    db = make_url(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert_listens(services, db.host, db.port or 5432, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    databases, logins = database_logins(services[db.host])
    assert db.database in databases and (db.username, db.password) in logins
    api = urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert_listens(services, api.hostname, api.port, "AIRFLOW__CORE__EXECUTION_API_SERVER_URL")
    registry = urlsplit(env["SCHEMA_REGISTRY_URL"])
    assert_listens(services, registry.hostname, registry.port, "SCHEMA_REGISTRY_URL")
    assert environment(services["schema-registry"])["SCHEMA_REGISTRY_LISTENERS"].endswith(f":{registry.port}")


def test_example_dags_hold_no_credentials():
    """Secrets reach Airflow only as environment variables and connections: no DAG or connector file
    carries a password key or a URL with credentials."""
    credentials_in_url = re.compile(r"://[^/\s:@{}]+:[^@\s{}]+@")
    for path in (ROOT / "dags").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                assert not {k for k in keys if re.search(r"password|secret", k, re.I)}, f"{path.name}: {keys}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not credentials_in_url.search(node.value), f"{path.name} has a URL with credentials"
    for path in (ROOT / "dags" / "connectors").glob("*.json"):
        config = json.loads(path.read_text(encoding="utf-8"))["config"]
        assert not [k for k in config if re.search(r"password|secret", k, re.I)], path.name
        assert not any(credentials_in_url.search(str(v)) for v in config.values()), path.name
