"""Shared fixtures: one Kafka broker, one Spark session and one Spark Connect server per test session.

Kafka: the embedded Tansu broker on 127.0.0.1, or the cluster named by
``KAFKA_BOOTSTRAP`` (then every Kafka test runs against real Kafka). Tests that
need a Kafka feature Tansu lacks detect it with :func:`broker_is_embedded` and
skip with the reason.

Databases: ``postgres_url`` and ``mariadb_url`` name the real servers that
``make test`` starts (scripts/ensure_databases.sh), or the ones in
``COPYCAT_TEST_POSTGRES_URL`` / ``COPYCAT_TEST_MARIADB_URL``; a server that
does not answer fails the tests that need it, never skips them.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Spark's Python workers must run this interpreter (it has confluent-kafka etc.), however pytest was started.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def pytest_collection_modifyitems(session, config, items):
    """The longest tests first: end-to-end files (Airflow's services, a browser), then the other
    ``slow`` ones, then the rest, each group in its usual order. ``make test`` runs the suite in
    three processes (pytest-xdist, whole files per process, ``--no-loadscope-reorder`` keeping this
    order), so the long files start at once, side by side, while the quick ones fill the gaps;
    run alone, the order changes nothing else (each test sets up what it needs)."""
    def weight(item) -> int:
        if item.nodeid.startswith("tests/e2e/"):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=weight)


@pytest.fixture(scope="session")
def kafka_bootstrap():
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    from airflow_copycat.testing.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap


def broker_is_embedded() -> bool:
    return not os.environ.get("KAFKA_BOOTSTRAP")


@pytest.fixture
def unique():
    """A short unique suffix for topic, connector and group names."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def worker_props(kafka_bootstrap, unique):
    """Worker properties with a per-test offset topic (few partitions: quick to read to the end)."""
    return {
        "bootstrap.servers": kafka_bootstrap,
        "offset.storage.topic": f"copycat-offsets-{unique}",
        "offset.storage.partitions": 3,
        "offset.flush.interval.ms": 1000,
    }


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session."""
    from pyspark.sql import SparkSession

    from airflow_copycat.runtime.submit import default_spark_conf

    builder = SparkSession.builder.master("local[2]").appName("copycat-tests")
    for k, v in default_spark_conf("local[2]").items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """One local Spark Connect server for the whole test session, started on first use and
    stopped at the end (``airflow_copycat.testing.spark_connect``): ``local[2]`` on 127.0.0.1,
    a free port, no UI. It requires a token, which its ``url`` carries. Its Python workers run
    this interpreter with this checkout on ``PYTHONPATH`` (for the test connectors); its log and
    its uncompressed event log are kept for tests to read (``log_text()``, ``event_log_text()``).
    """
    from pathlib import Path

    from airflow_copycat.testing.spark_connect import EmbeddedSparkConnect

    root = Path(__file__).resolve().parent.parent
    state = tmp_path_factory.mktemp("spark-connect")
    server = EmbeddedSparkConnect(token=f"tok-{uuid.uuid4().hex}", log_path=str(state / "server.log"),
                                  event_log_dir=str(state / "events"), env={"PYTHONPATH": str(root)})
    with server:
        yield server


class AbortVisibility:
    """Whether the broker hides aborted transactional records from ``read_committed`` consumers."""

    REASON = ("this broker shows aborted transactional records to read_committed consumers (the embedded Tansu "
              "broker does, FACTS.md); set KAFKA_BOOTSTRAP to a Kafka cluster to run the abort-visibility assertions")

    def __init__(self, hidden: bool):
        self.hidden = hidden

    def skip_unless_hidden(self):
        """Call after a test's other assertions, before those that need aborted records hidden."""
        if not self.hidden:
            pytest.skip(self.REASON)


@pytest.fixture(scope="session")
def abort_visibility(kafka_bootstrap) -> AbortVisibility:
    """Probed, not assumed: one record is produced in a transaction that is aborted, then read
    back with ``isolation.level=read_committed``. Kafka hides it; the embedded Tansu broker
    does not (FACTS.md), so tests skip only their abort-visibility assertions there.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    from airflow_copycat.runtime.kafka import admin_client, read_to_end

    topic = f"copycat-abort-probe-{uuid.uuid4().hex[:8]}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    try:
        seen = [m.value() for m in read_to_end(consumer, [TopicPartition(topic, 0, 0)], timeout_s=30)]
    finally:
        consumer.close()
    assert b"committed" in seen, f"the broker lost a committed transactional record: {seen}"
    return AbortVisibility(b"aborted" not in seen)


DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/test"


def _checked_database_url(env_var: str, default: str, label: str) -> str:
    """The URL from ``env_var`` (or ``default``) after a ``SELECT 1`` through SQLAlchemy; fails the test otherwise.

    SQLAlchemy and the drivers are imported here, not at module import, so the rest of the suite
    collects without them.
    """
    url = os.environ.get(env_var) or default
    hint = (f"`make test` starts the local servers (scripts/ensure_databases.sh): run that script, "
            f"or set {env_var} to a reachable SQLAlchemy URL")
    try:
        import sqlalchemy as sa

        shown = sa.engine.make_url(url).render_as_string(hide_password=True)
        engine = sa.create_engine(url, connect_args={"connect_timeout": 5}, poolclass=sa.pool.NullPool)
    except Exception as e:  # ImportError of a driver, a malformed URL
        pytest.fail(f"{label} test URL from {env_var if os.environ.get(env_var) else 'the default'} is unusable: "
                    f"{type(e).__name__}: {e} (install the test dependencies: uv pip install -e '.[embedded,test]')",
                    pytrace=False)
    error = None
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1")).scalar_one()
    except Exception as e:
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        engine.dispose()
    if error:
        pytest.fail(f"{label} at {shown} is unreachable: {error}. {hint}", pytrace=False)
    return url


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """SQLAlchemy URL of the test PostgreSQL database (``COPYCAT_TEST_POSTGRES_URL`` overrides)."""
    return _checked_database_url("COPYCAT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL, "PostgreSQL")


@pytest.fixture(scope="session")
def mariadb_url() -> str:
    """SQLAlchemy URL of the test MariaDB/MySQL database (``COPYCAT_TEST_MARIADB_URL`` overrides)."""
    return _checked_database_url("COPYCAT_TEST_MARIADB_URL", DEFAULT_MARIADB_URL, "MariaDB")


@pytest.fixture(scope="session")
def postgres_cdc_url():
    """libpq URL of a PostgreSQL with ``wal_level=logical`` for the change-data-capture tests: the
    server ``COPYCAT_TEST_POSTGRES_CDC_URL`` names, else a dedicated cluster this session initialises
    in a temporary directory (:class:`airflow_copycat.testing.postgres_logical.LogicalPostgres`, a
    few seconds) and removes at the end. It never skips: a machine that cannot start one fails the
    tests with the reason."""
    from airflow_copycat.testing.postgres_logical import LogicalPostgres, external_url

    try:
        url = external_url()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    if url:
        yield url
        return
    pg = LogicalPostgres()
    try:
        pg.start()
    except (RuntimeError, OSError) as e:
        pg.stop()
        pytest.fail(f"cannot start a PostgreSQL with wal_level=logical for the CDC tests: {e}", pytrace=False)
    try:
        yield pg.url
    finally:
        pg.stop()
