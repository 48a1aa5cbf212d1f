"""Connector configs: loading every accepted shape, resolving classes, reporting every problem."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from airflow_copycat.connect.errors import ConfigException, ConnectException
from airflow_copycat.connect.secrets import Scrubber
from airflow_copycat.connectors.files import FilesSinkConnector
from airflow_copycat.connectors.filestream import FileStreamSinkConnector, FileStreamSourceConnector
from airflow_copycat.runtime import connector_config, plugins
from airflow_copycat.runtime.plan import validate_only


@pytest.mark.parametrize("name, cls", [
    ("FileStreamSource", FileStreamSourceConnector),
    ("org.apache.kafka.connect.file.FileStreamSourceConnector", FileStreamSourceConnector),
    ("org.apache.kafka.connect.file.FileStreamSinkConnector", FileStreamSinkConnector),
    ("io.confluent.connect.s3.S3SinkConnector", FilesSinkConnector),
    ("io.confluent.connect.hdfs.HdfsSinkConnector", FilesSinkConnector),
    ("FilesSink", FilesSinkConnector),
    ("airflow_copycat.connectors.files:FilesSinkConnector", FilesSinkConnector),
    ("airflow_copycat.connectors.filestream.FileStreamSourceConnector", FileStreamSourceConnector),
])
def test_connector_class_names_resolve(name, cls):
    assert plugins.resolve_connector(name) is cls


def test_unknown_connector_class_says_what_was_tried():
    with pytest.raises(ConnectException) as e:
        plugins.resolve_connector("io.example.NoSuchConnector")
    assert "entry-point group 'airflow_copycat.connectors'" in str(e.value) and "FileStreamSource" in str(e.value)


def test_third_party_plugin_registered_by_entry_point(tmp_path, monkeypatch):
    # Given an installed distribution that registers a connector in our entry-point group
    pkg = tmp_path / "acme_connect"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from airflow_copycat.connect import SourceConnector
        class AcmeSource(SourceConnector):
            pass
    """))
    dist = tmp_path / "acme_connect-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-connect\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[airflow_copycat.connectors]\nacme = acme_connect:AcmeSource\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # Then its entry-point name and its class path both resolve to it
    cls = plugins.resolve_connector("acme")
    assert cls.__name__ == "AcmeSource" and plugins.resolve_connector("acme_connect.AcmeSource") is cls
    sys.modules.pop("acme_connect", None)


def test_every_problem_is_reported_at_once():
    problems = validate_only({
        "name": "bad",
        "connector.class": "FileStreamSource",
        "tasks.max": "zero",
        "errors.tolerance": "some",
        "value.converter": "com.example.NoConverter",
        "batch.size": 0,
    })
    keys = [p.split("=")[0] for p in problems]
    assert set(keys) >= {"tasks.max", "errors.tolerance", "value.converter", "batch.size", "topic"}, problems
    with pytest.raises(ConfigException) as e:
        connector_config.parse({"connector.class": "FileStreamSource"})
    assert "name=(absent): is required" in str(e.value) and "topic=(absent)" in str(e.value)


def test_secret_values_never_appear_in_problems():
    problems = validate_only({"name": "x", "connector.class": "FileStreamSource", "file": "/x",
                              "topic": "t", "tasks.max": "s3cr3t-password-value", "db.password": "hunter2"})
    assert problems and not any("hunter2" in p for p in problems)


def test_loads_kafka_connect_json_properties_and_yaml(tmp_path):
    expected = {"name": "logs", "connector.class": "FileStreamSource", "file": "/var/log/a.log", "topic": "logs"}
    (tmp_path / "c.json").write_text(json.dumps({"name": "logs", "config": {k: v for k, v in expected.items() if k != "name"}}))
    (tmp_path / "c.properties").write_text("# connect-standalone style\nname=logs\nconnector.class=FileStreamSource\n"
                                           "file=/var/log/a.log\ntopic : logs\n")
    (tmp_path / "c.yaml").write_text("name: logs\nconnector.class: FileStreamSource\nfile: /var/log/a.log\ntopic: logs\n")
    for f in ("c.json", "c.properties", "c.yaml"):
        assert connector_config.load_connector_config(str(tmp_path / f)) == expected, f
    assert connector_config.load_connector_config(json.dumps(expected)) == expected


def test_redaction_and_restore():
    raw = {"name": "x", "connection.password": "hunter2", "topic": "t",
           "value.converter.basic.auth.user.info": "sr-user:sr-secret",
           "value.converter.schema.registry.url": "http://sr-user:sr-secret@registry:8081"}
    secrets = connector_config.secret_keys(raw, None)
    hidden = connector_config.redact(raw, secrets)
    assert hidden["connection.password"] == "[hidden]" and hidden["topic"] == "t"
    assert "sr-secret" not in json.dumps(hidden)
    assert connector_config.restore_secrets(hidden, raw) == raw


def test_properties_files_parse_as_java_does(tmp_path):
    from airflow_copycat.runtime.worker import load_properties

    (tmp_path / "w.properties").write_text(
        "# comment\n! also a comment\n"
        "bootstrap.servers=127.0.0.1:9092\n"
        "key.converter : org.apache.kafka.connect.storage.StringConverter\n"
        "client.id copycat\n"
        "path=C:\\\\data\\\\in\n"
        "a\\=b=c\\:d\n"
        "long.value=one, \\\n    two, \\\n    three\n"
        "unicode=caf\\u00e9\n"
        "ends.with.backslash=x\\\\\n"
        "empty=\n"
    )
    assert load_properties(str(tmp_path / "w.properties")) == {
        "bootstrap.servers": "127.0.0.1:9092",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "client.id": "copycat",
        "path": "C:\\data\\in",
        "a=b": "c:d",
        "long.value": "one, two, three",
        "unicode": "café",
        "ends.with.backslash": "x\\",
        "empty": "",
    }


def test_a_validator_quoting_a_secret_does_not_leak_it():
    from airflow_copycat.connect.config import ConfigProblem

    hidden = connector_config.hide_secrets(
        [ConfigProblem("api.token", "hunter2-token", "must start with 'tok-', got 'hunter2-token'")],
        {"api.token": "hunter2-token"}, {"api.token"})
    assert "hunter2" not in str(hidden[0]) and "[hidden]" in str(hidden[0])


def test_url_passwords_are_hidden_and_restored():
    raw = {"name": "x", "store.url": "s3://key:s3cr3t@bucket/path", "topics": "t"}
    secrets = connector_config.secret_keys(raw, None)
    hidden = connector_config.redact(raw, secrets)
    assert hidden["store.url"] == "s3://key:[hidden]@bucket/path"
    assert connector_config.restore_secrets(hidden, raw) == raw


def test_a_url_with_an_empty_password_is_no_secret_and_runs_without_secrets():
    # MariaDB's root with an empty password: nothing to hide, so nothing a runner must put back
    raw = {"name": "x", "connection.url": "mysql+pymysql://root:@127.0.0.1:3306/test"}
    secrets = connector_config.secret_keys(raw, None)
    assert secrets == set()
    hidden = connector_config.redact(raw, secrets)
    assert hidden == raw
    assert connector_config.restore_secrets(hidden, {}) == raw


@pytest.mark.parametrize("url, shown", [
    ("http://svc:p@ss/w0rd@registry:8081", "http://svc:[hidden]@registry:8081"),
    ("http://svc:p@ssw0rd@registry:8081/x", "http://svc:[hidden]@registry:8081/x"),
    ("https://a:pw/one@h1:1,https://b:p@two@h2:2", "https://a:[hidden]@h1:1,https://b:[hidden]@h2:2"),
])
def test_a_url_password_with_a_raw_at_or_slash_is_hidden_whole(url, shown):
    raw = {"name": "x", "value.converter.schema.registry.url": url}
    secrets = connector_config.secret_keys(raw, None)
    hidden = connector_config.redact(raw, secrets)
    assert hidden["value.converter.schema.registry.url"] == shown
    for part in ("w0rd", "ss", "one", "two"):
        assert part not in shown.replace("[hidden]", "")
    assert connector_config.restore_secrets(hidden, raw) == raw


@pytest.mark.parametrize("url, shown", [
    ("postgresql://:EmptyUserPw555@127.0.0.1:5432/test", "postgresql://:[hidden]@127.0.0.1:5432/test"),
    ("postgresql://u:pass word555@h/db", "postgresql://u:[hidden]@h/db"),
    ("postgresql://:two words here@h/db?sslmode=require", "postgresql://:[hidden]@h/db?sslmode=require"),
])
def test_a_url_password_without_a_user_or_with_spaces_is_a_secret(url, shown):
    """The driver's default user (``://:pw@``) and a password holding spaces are URL passwords too:
    the key is secret, the plan shows ``[hidden]``, the run gets the URL back, and a message quoting
    the password on its own loses it."""
    raw = {"name": "x", "connector.class": "JdbcSource", "connection.url": url}
    secrets = connector_config.secret_keys(raw, None)
    assert secrets == {"connection.url"}
    hidden = connector_config.redact(raw, secrets)
    assert hidden["connection.url"] == shown
    assert connector_config.restore_secrets(hidden, raw) == raw
    password = url.split("://:", 1)[-1].split("://u:", 1)[-1].split("@", 1)[0]
    message = Scrubber([url])(f"authentication failed for password '{password}'")
    assert password not in message and "[hidden]" in message


@pytest.mark.parametrize("key", ["connection.password", "sasl.jaas.config", "api.key", "azure.account.key",
                                 "aws.secret.access.key", "sasl.oauthbearer.config", "store.options", "api.credential",
                                 # names Airflow's masker hides, and names ending in "key"
                                 "db.pwd", "ssh.passphrase", "http.authorization", "api.bearer", "sentry.dsn",
                                 "azure.storage.connection.string", "proxy.url", "webhook.url", "s3.sse.customer.key",
                                 "hmac.signing.key", "client.key", "ssl.keystore.key", "encryption.key"])
def test_secret_key_names(key):
    from airflow_copycat.runtime.worker import is_secret_key

    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["ssl.keystore.location", "key.converter", "topic", "tasks.max", "primary.key.fields",
                                 "primary.key.mode", "schema.registry.ssl.key.location", "store.kafka.keys",
                                 "transforms.k.type", "message.key.field"])
def test_ordinary_key_names_are_not_secret(key):
    from airflow_copycat.runtime.worker import is_secret_key

    assert not is_secret_key(key)


def test_a_plan_names_every_problem_at_once_the_kafka_clients_and_converters_too(tmp_path, kafka_bootstrap):
    """Config problems, each override key librdkafka rejects (named with its value), and a worker converter
    that cannot be built: one ConfigException holds them all, not one stage at a time."""
    from airflow_copycat.runtime.plan import make_plan
    from airflow_copycat.runtime.worker import WorkerConfig

    worker = WorkerConfig({"bootstrap.servers": kafka_bootstrap, "value.converter": "no.such.Converter"}, env={})
    config = {"name": "every", "connector.class": "FileStreamSource", "file": str(tmp_path / "x.log"), "topic": "t",
              "tasks.max": 0, "producer.override.acks": "banana", "producer.override.linger.ms": "soon"}
    with pytest.raises(ConfigException) as raised:
        make_plan(config, worker)
    named = sorted(p.key for p in raised.value.problems)
    assert named == ["producer.override.acks", "producer.override.linger.ms", "tasks.max", "value.converter"]
    shown = str(raised.value)
    assert "producer.override.acks='banana': rejected by the Kafka client" in shown
    assert "value.converter='no.such.Converter': cannot be configured" in shown

    # and with a valid config the clients' problems still come together, each key named
    del config["tasks.max"]
    with pytest.raises(ConfigException) as raised:
        make_plan(config, worker)
    assert sorted(p.key for p in raised.value.problems) == ["producer.override.acks", "producer.override.linger.ms",
                                                            "value.converter"]
