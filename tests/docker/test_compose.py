"""docker/compose.yaml is a file Docker Compose accepts and a stack that can come up, checked without
a Docker engine: the Compose Specification's JSON schema, pinned images, health checks and start
order, Kafka's advertised address, the Spark services' addresses, and the file paths of the example
DAGs on volumes that Airflow and every Spark executor share. (Connections: test_connections.py;
Dockerfiles: test_images.py.)"""

from __future__ import annotations

import ast
import copy
import importlib.resources
import json
import re
from pathlib import Path

import jsonschema
import pytest

from tests.docker.compose_file import (
    ROOT, command, depends_on, environment, load, mounts, option, raw, spark_confs,
)

AIRFLOW_SERVICES = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
TASK_RUNNER = "airflow-scheduler"  # the LocalExecutor runs tasks (and spark-submit's drivers) here
SPARK_EXECUTOR_HOSTS = ("spark-worker-1", "spark-worker-2", "spark-connect")
EXACT_TAG = re.compile(r"^v?\d+\.\d+(\.\d+)*([-_.][A-Za-z0-9_.-]+)?$")
"""An exact release: at least major.minor (postgres:16.6, apache/kafka:4.0.0, eclipse-temurin:17.0.13_11-jre)."""
PATH_KEYS = ("file", "source.url", "target.url", "store.url")


def compose_schema() -> dict:
    """The Compose Specification's JSON schema as check-jsonschema vendors it (a test dependency)."""
    try:
        files = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    except ModuleNotFoundError:
        pytest.fail("check-jsonschema is not installed: run make setup (pyproject.toml's [test] extra)")
    return json.loads(files.joinpath("compose-spec.json").read_text(encoding="utf-8"))


def schema_errors(doc: dict) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    return load()["services"]


def test_compose_file_is_valid_against_the_compose_specification():
    assert schema_errors(raw()) == []


@pytest.mark.parametrize("breakage", ["misspelt condition", "unknown key", "healthcheck interval as a number"])
def test_the_schema_check_rejects_a_broken_compose_file(breakage):
    doc = copy.deepcopy(raw())
    if breakage == "misspelt condition":
        doc["services"]["airflow-init"]["depends_on"]["airflow-db"]["condition"] = "service_heathy"
    elif breakage == "unknown key":
        doc["services"]["kafka"]["imagee"] = "apache/kafka:4.0.0"
    else:
        doc["services"]["kafka"]["healthcheck"]["interval"] = 10
    assert schema_errors(doc), f"a compose file with a {breakage} passed the schema check"


def test_every_image_is_pinned_to_an_exact_version(services):
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    for name, svc in services.items():
        image = svc.get("image")
        assert image, f"service {name} names no image (give built images a tag too)"
        if "@sha256:" in image:
            continue
        repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        assert tag and tag != "latest", f"service {name}: image {image!r} is not pinned to a version"
        if "build" in svc:
            assert tag == version, f"service {name} builds {image!r}: tag it with the project's version {version}"
        else:
            assert EXACT_TAG.match(tag), f"service {name}: image {image!r} names no exact release"


def one_shot(name: str, services: dict) -> bool:
    """A step others wait for to complete (airflow-init), not a service that runs for good."""
    return any(depends_on(svc).get(name) == "service_completed_successfully" for svc in services.values())


def has_health_check(service: dict) -> bool:
    check = service.get("healthcheck") or {}
    return bool(check.get("test")) and not check.get("disable") and check["test"] != ["NONE"]


def test_published_ports_listen_on_the_docker_hosts_loopback_only(services):
    # the demo's services run with demo passwords, and Spark Connect runs any code it is sent: a port
    # published on every interface would open them to the network
    published = {name: [str(p) for p in s.get("ports") or []] for name, s in services.items() if s.get("ports")}
    assert published, "the stack publishes no port at all"
    wide = {name: [p for p in ports if not p.startswith("127.0.0.1:")] for name, ports in published.items()}
    assert not any(wide.values()), f"ports published beyond 127.0.0.1: {wide}"


def test_every_long_running_service_has_a_health_check(services):
    for name, svc in services.items():
        assert one_shot(name, services) or has_health_check(svc), f"service {name} runs for good but has no health check"


def test_start_order_conditions_can_be_met(services):
    for name, svc in services.items():
        for target, condition in depends_on(svc).items():
            assert target in services, f"service {name} depends on {target}, which the file does not define"
            assert condition != "service_started", f"{name} -> {target}: give a condition, not just start order"
            if condition == "service_healthy":
                assert has_health_check(services[target]), f"{name} waits for {target} to be healthy: it has no check"
            if condition == "service_completed_successfully":
                assert str(services[target].get("restart", "no")) == "no", \
                    f"{name} waits for {target} to complete, but compose would restart it"
    visiting, done = set(), set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in visiting, f"dependency cycle: {' -> '.join(path + (name,))}"
        if name in done:
            return
        visiting.add(name)
        for target in depends_on(services[name]):
            visit(target, path + (name,))
        visiting.discard(name)
        done.add(name)

    for name in services:
        visit(name, ())


def test_the_airflow_init_step_migrates_the_metadata_database_first(services):
    assert command(services["airflow-init"]) == ["db", "migrate"]
    for name in AIRFLOW_SERVICES:
        assert depends_on(services[name]).get("airflow-init") == "service_completed_successfully", name


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` -> {NAME: (host, port)}."""
    out = {}
    for item in value.split(","):
        name, _, hostport = item.partition("://")
        host, _, port = hostport.rpartition(":")
        out[name] = (host, int(port))
    return out


def test_kafka_advertises_the_address_clients_in_the_stack_use(services):
    kafka = environment(services["kafka"])
    advertised = listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])
    bound = listeners(kafka["KAFKA_LISTENERS"])
    internal = kafka["KAFKA_INTER_BROKER_LISTENER_NAME"]
    assert advertised[internal] == ("kafka", bound[internal][1]), \
        "the broker must advertise its service name on the listener the stack's clients use"
    assert "kafka" in services
    assert kafka["KAFKA_CONTROLLER_LISTENER_NAMES"] in bound
    assert set(kafka["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}, "one KRaft node"
    clients = {
        "COPYCAT_BOOTSTRAP_SERVERS": environment(services[TASK_RUNNER])["COPYCAT_BOOTSTRAP_SERVERS"],
        "schema registry": environment(services["schema-registry"])["SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS"]
        .split("://")[-1],
    }
    for who, bootstrap in clients.items():
        assert bootstrap == f"kafka:{bound[internal][1]}", f"{who} uses {bootstrap}"
    # transactions (exactly-once sources) need a transaction log a single broker can hold
    assert kafka["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert kafka["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"


def test_source_postgres_runs_with_logical_wal(services):
    args = command(services["source-postgres"])
    settings = dict(args[i + 1].split("=", 1) for i, a in enumerate(args[:-1]) if a == "-c")
    assert settings.get("wal_level") == "logical", "change data capture (copycat_postgres_cdc) needs it"
    assert int(settings.get("max_replication_slots", 0)) > 0


def test_spark_services_agree_on_the_master_and_probe_what_they_serve(services):
    master_args = command(services["spark-master"])
    master_url = f"spark://{option(master_args, '--host')}:{option(master_args, '--port')}"
    assert option(master_args, "--host") == services["spark-master"].get("hostname") == "spark-master"
    assert services["spark-master"]["healthcheck"]["test"][-1] == master_url.split("://")[1]
    workers = [n for n in services if n.startswith("spark-worker-")]
    assert len(workers) == 2, "a master and two workers"
    for name in workers:
        args = command(services[name])
        assert args[-1] == master_url, f"{name} registers with {args[-1]}"
        assert option(args, "--host") == services[name].get("hostname") == name
        assert services[name]["healthcheck"]["test"][-1] == name, f"{name}'s health check asks for another worker"
    connect_args = command(services["spark-connect"])
    assert option(connect_args, "--master") == master_url
    port = spark_confs(connect_args)["spark.connect.grpc.binding.port"]
    assert services["spark-connect"]["healthcheck"]["test"][-1] == f"spark-connect:{port}"
    assert spark_confs(connect_args)["spark.driver.host"] == "spark-connect"
    assert "spark.cores.max" in spark_confs(connect_args), "an uncapped Connect server takes every core for good"
    assert environment(services[TASK_RUNNER])["COPYCAT_SPARK_MASTER"] == master_url


def test_airflow_components_share_connections_and_keys(services):
    envs = {name: environment(services[name]) for name in AIRFLOW_SERVICES}
    shared = {k: v for k, v in envs[TASK_RUNNER].items()
              if k.startswith(("AIRFLOW_CONN_", "AIRFLOW__API_AUTH__", "AIRFLOW__CORE__FERNET_KEY",
                               "AIRFLOW__DATABASE__"))}
    assert "AIRFLOW__API_AUTH__JWT_SECRET" in shared, "components must share the JWT secret, or tasks cannot log in"
    for name, env in envs.items():
        assert {k: env.get(k) for k in shared} == shared, f"{name} differs from {TASK_RUNNER}"
    python = envs[TASK_RUNNER]["PYSPARK_PYTHON"]
    for name in SPARK_EXECUTOR_HOSTS:
        assert environment(services[name]).get("PYSPARK_PYTHON") == python, \
            f"{name} would run Python workers with another interpreter than the driver's {python}"


def test_example_dags_are_mounted_where_airflow_reads_them(services):
    for name in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        source = mounts(services[name]).get("/opt/airflow/dags")
        assert source, f"{name} does not mount the example DAGs"
        assert (ROOT / "docker" / source).resolve() == ROOT / "dags"


def example_dag_paths() -> set[str]:
    """Absolute local paths the example DAGs and connector files read or write (templated ones aside)."""
    values = []
    for path in (ROOT / "dags").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                values += [(k.value, v.value) for k, v in zip(node.keys, node.values)
                           if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
    for path in (ROOT / "dags" / "connectors").glob("*.json"):
        values += list(json.loads(path.read_text(encoding="utf-8"))["config"].items())
    return {str(v) for k, v in values if k in PATH_KEYS and str(v).startswith("/")}


def shared_mount(path: str, service: dict) -> tuple[str, str] | None:
    """The (mount point, named volume) holding ``path`` in ``service``; the deepest mount wins."""
    hits = [(target, source) for target, source in mounts(service).items()
            if Path(path).is_relative_to(target) and source and not source.startswith((".", "/"))]
    return max(hits, key=lambda hit: len(hit[0])) if hits else None


def test_example_dag_paths_are_on_volumes_airflow_and_spark_share(services):
    paths = example_dag_paths() | {environment(services[TASK_RUNNER])["COPYCAT_DEMO_DIR"]}
    assert {"/data/warehouse", "/var/log/app/*.log"} <= paths  # the scan sees the DAGs' paths
    for path in sorted(paths):
        where = shared_mount(path, services[TASK_RUNNER])
        assert where, f"{path} (example DAGs) is on no shared volume of {TASK_RUNNER}"
        for name in SPARK_EXECUTOR_HOSTS:
            assert shared_mount(path, services[name]) == where, \
                f"{path} is {where} on {TASK_RUNNER} but not the same volume at the same path on {name}"


def test_one_make_target_starts_the_stack_and_one_stops_it():
    makefile = (ROOT / "Makefile").read_text()
    compose = re.search(r"^COMPOSE\s*:=\s*(.+)$", makefile, re.M).group(1).strip()
    assert compose == "docker compose -f docker/compose.yaml"
    assert re.search(r"^compose-up:.*\n\t\$\(COMPOSE\) up -d --build$", makefile, re.M)
    assert re.search(r"^compose-down:.*\n\t\$\(COMPOSE\) down$", makefile, re.M)
