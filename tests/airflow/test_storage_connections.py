"""Object storage named through Airflow connections (``scheme://conn_id@...``, as ``ObjectStoragePath`` reads
it): Airflow's filesystem of the connection gives the storage options, which travel like a database password.
Against a real SFTP server on loopback, through Airflow's SFTP provider (no S3 can run here without
installing the amazon provider and a mock server; the mechanism is the same for every scheme)."""

from __future__ import annotations

import json
import os

import pytest
from airflow.sdk.log import redact

from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.hooks.storage import resolve_storage_connections
from airflow_copycat.runtime.connector_config import HIDDEN
from tests.support.sftp_server import start_sftp_server


@pytest.fixture
def sftp(tmp_path, monkeypatch, unique):
    """A running SFTP server whose ``/`` is ``tmp_path/sftp-root``, and an Airflow ``sftp`` connection to it."""
    root = tmp_path / "sftp-root"
    root.mkdir()
    server, stop = start_sftp_server(root)
    conn_id = f"sftp_{unique}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "sftp", "host": server.host, "port": server.port, "login": server.username,
        "password": server.password, "extra": {"no_host_key_check": "true"}}))
    server.conn_id = conn_id
    yield server
    stop()


def test_a_url_naming_a_connection_becomes_a_plain_url_and_the_connections_storage_options(sftp):
    # Given a copy job whose source names the sftp connection, with an option of its own
    raw = {"name": "c", "source.url": f"sftp://{sftp.conn_id}@127.0.0.1/data", "target.url": "/tmp/x",
           "source.options": {"timeout": 30}}

    # When it is resolved
    out = resolve_storage_connections(raw)

    # Then the runtime gets a plain fsspec URL and the options Airflow's filesystem of the connection uses
    assert out["source.url"] == "sftp://127.0.0.1/data" and out["target.url"] == "/tmp/x"
    assert json.loads(out["source.options"]) == {"host": "127.0.0.1", "port": sftp.port, "username": "copycat",
                                                 "password": sftp.password, "known_hosts": None, "timeout": 30}
    assert "target.options" not in out
    # ... and the password is known to the secrets masker
    assert redact(f"pw {sftp.password}") == "pw ***"


def test_urls_without_a_connection_are_left_alone():
    raw = {"store.url": "s3://bucket/prefix", "source.url": "ftp://user:pw@host/dir", "target.url": "/local/dir",
           "x": 1}
    assert resolve_storage_connections(raw) == raw


def test_an_sftp_user_name_stays_fsspecs_and_an_unusable_server_is_named_with_its_key(sftp, monkeypatch, unique):
    # sftp://user@host/... is fsspec's own way to name the user: with no such Airflow connection it stays so
    raw = {"name": "sink", "store.url": f"sftp://nope_{unique}@127.0.0.1/x"}
    assert resolve_storage_connections(raw) == raw
    # a connection whose server refuses the password: the error names the key, not the password
    monkeypatch.setenv(f"AIRFLOW_CONN_{sftp.conn_id.upper()}_BAD", json.dumps({
        "conn_type": "sftp", "host": sftp.host, "port": sftp.port, "login": "copycat", "password": "wrong-pw-5678",
        "extra": {"no_host_key_check": "true"}}))
    with pytest.raises(ConfigException) as bad:
        resolve_storage_connections({"name": "sink", "target.url": f"sftp://{sftp.conn_id}_bad@127.0.0.1/x"})
    assert "target.url" in str(bad.value) and "wrong-pw-5678" not in str(bad.value)


def test_a_connection_whose_provider_fails_quoting_its_private_key_is_named_without_the_key(sftp, monkeypatch,
                                                                                          unique):
    # Given an sftp connection with the provider's private_key extra (PEM text), which asyncssh takes for a file name
    key = f"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE{unique}KeyBody\n-----END OPENSSH PRIVATE KEY-----\n"
    conn_id = f"{sftp.conn_id}_key"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "sftp", "host": sftp.host, "port": sftp.port, "login": sftp.username,
        "password": sftp.password, "extra": {"private_key": key, "no_host_key_check": "true"}}))
    # When a URL naming it is resolved, Then the problem names the key, not the private key (raw or escaped) ...
    with pytest.raises(ConfigException) as bad:
        resolve_storage_connections({"name": "f", "store.url": f"sftp://{conn_id}@{sftp.host}/out"})
    message = str(bad.value)
    assert "store.url" in message and "Airflow could not open the sftp filesystem" in message
    assert f"{unique}KeyBody" not in message
    # ... and the key, as its escaped form reads too, is known to the secrets masker
    assert f"{unique}KeyBody" not in redact(repr(key)) and f"{unique}KeyBody" not in redact(key)


def _no_secret_anywhere(result, secret: str) -> None:
    for _, _, _, value in result.xcoms():
        assert secret not in json.dumps(value, default=str)
    assert secret not in redact(result.log)


def test_a_copy_job_reads_its_source_over_an_airflow_connection_on_spark(
        make_copy_dag, run_dag, sftp, tmp_path, unique, spark_default):
    # Given files on the SFTP server and a copy job whose source.url names the connection, run on Spark
    (sftp.root / "data" / "orders").mkdir(parents=True)
    (sftp.root / "data" / "orders" / "a.csv").write_text("id\n1\n")
    (sftp.root / "data" / "orders" / "b.csv").write_text("id\n2\n")
    dst = tmp_path / "dst"
    name = f"sftp-copy-{unique}"
    config = {"name": name, "source.url": f"sftp://{sftp.conn_id}@127.0.0.1/data", "target.url": str(dst),
              "dataset.pattern": "*"}
    dag = make_copy_dag(f"sftp_copy_{unique}", config, spark_conn_id=spark_default)

    # When it runs
    result = run_dag(dag)

    # Then the files were copied and published
    assert result.state == "success", result.log[-4000:]
    assert sorted(p.name for p in (dst / "orders").iterdir()) == ["a.csv", "b.csv"]
    assert result.xcom(f"{name}.publish")["files_copied"] == 2
    # ... the groups the Spark tasks ran name the plain URL, the options hidden
    [group] = result.xcom(f"{name}.plan")
    task = group["tasks"][0]["config"]
    assert task["source.url"] == "sftp://127.0.0.1/data" and task["source.options"] == HIDDEN
    # ... and the password is in no XCom and masked in the log
    _no_secret_anywhere(result, sftp.password)


def test_a_files_sink_writes_to_a_store_named_by_an_airflow_connection(
        make_dag, run_dag, sftp, unique, kafka_bootstrap, test_worker_config):
    # Given records in a topic and a files sink whose store.url names the connection
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"sftp-lake-{unique}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, json.dumps({"id": i}).encode())
    producer.flush(30)
    name = f"sftp-sink-{unique}"
    config = {"name": name, "connector.class": "FilesSink", "topics": topic,
              "store.url": f"sftp://{sftp.conn_id}@127.0.0.1/lake", "format.class": "json", "flush.size": 100,
              "value.converter": "org.apache.kafka.connect.json.JsonConverter",
              "value.converter.schemas.enable": "false"}
    dag = make_dag(f"sftp_sink_{unique}", config, in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the records are in files on the SFTP server, under the store's root
    assert result.state == "success", result.log[-4000:]
    written = [p for p in (sftp.root / "lake").rglob("*") if p.is_file() and "_copycat" not in p.parts
               and topic in str(p)]
    rows = [json.loads(line) for p in written for line in p.read_text().splitlines() if line.strip()]
    assert sorted(r["id"] for r in rows) == list(range(5)), [str(p) for p in written]
    # ... the plan holds the plain URL and hides the options; the password is nowhere
    plan = result.xcom(f"{name}.plan", key="plan")
    task = plan["groups"][0]["tasks"][0]["config"]
    assert task["store.url"] == "sftp://127.0.0.1/lake" and task["store.options"] == HIDDEN
    _no_secret_anywhere(result, sftp.password)
    assert os.environ.get("COPYCAT_SECRETS_JSON") is None


def test_a_connection_on_a_scheme_no_installed_provider_serves_is_named(monkeypatch, unique):
    # Given an aws connection and an s3 URL naming it, without the amazon provider installed
    from airflow.sdk.io.fs import has_fs

    if has_fs("s3"):
        pytest.skip("a provider serves s3:// here")
    monkeypatch.setenv(f"AIRFLOW_CONN_AWS_{unique.upper()}", json.dumps({"conn_type": "aws", "login": "AKIA"}))
    with pytest.raises(ConfigException, match="no installed Airflow provider serves s3://") as e:
        resolve_storage_connections({"name": "sink", "store.url": f"s3://aws_{unique}@bucket/lake"})
    assert "store.url" in str(e.value)
    # ... while a user name that is no connection stays fsspec's
    raw = {"source.url": f"hdfs://etl_{unique}@namenode:8020/data", "target.url": "/x"}
    assert resolve_storage_connections(raw) == raw
