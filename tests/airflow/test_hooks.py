"""CopycatKafkaHook: a ``kafka`` connection read into worker properties."""

from __future__ import annotations

import json

import pytest

from airflow.sdk.log import redact

from airflow_copycat.hooks.kafka import CopycatKafkaHook


def test_worker_props_come_from_the_connection_then_the_overrides(monkeypatch):
    # Given a connection with host, port, login, password and client keys in its extra
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="jaas-pw-1234";'
    monkeypatch.setenv("AIRFLOW_CONN_COPYCAT_HOOK_TEST", json.dumps({
        "conn_type": "kafka", "host": "broker-1", "port": 9093, "login": "svc", "password": "pw-9876543",
        "extra": {"security.protocol": "SASL_SSL", "sasl.jaas.config": jaas, "offset.storage.topic": "offs"}}))

    # When the hook reads it, with one override
    props = CopycatKafkaHook("copycat_hook_test").worker_props({"offset.storage.topic": "mine"})

    # Then host:port is the bootstrap, login/password the SASL credentials, the override wins
    assert props == {"bootstrap.servers": "broker-1:9093", "sasl.username": "svc", "sasl.password": "pw-9876543",
                     "security.protocol": "SASL_SSL", "sasl.jaas.config": jaas, "offset.storage.topic": "mine"}
    # ... and the secrets are known to Airflow's masker, which hides them in task logs
    assert redact(f"password pw-9876543 and {jaas}") == "password *** and ***"


def test_bootstrap_servers_in_the_extra_win_over_the_host(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_COPYCAT_HOOK_TEST2", json.dumps({
        "conn_type": "kafka", "host": "ignored", "extra": {"bootstrap.servers": "a:9092,b:9092"}}))
    assert CopycatKafkaHook("copycat_hook_test2").worker_config().bootstrap_servers == "a:9092,b:9092"


def test_test_connection_reaches_the_broker(kafka_conn):
    ok, message = CopycatKafkaHook().test_connection()
    assert ok, message
    assert message.startswith("connected: ") and "broker(s)" in message


# -- connections made for Airflow's Kafka provider (apache-airflow-providers-apache-kafka) --------------

def test_the_hook_is_the_kafka_providers_hook_and_takes_its_kafka_config_id(monkeypatch, kafka_bootstrap):
    # Given a connection as the Kafka provider's docs show it: conn_type kafka, the client config as extra
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROVIDER_STYLE", json.dumps({
        "conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap, "group.id": "my-group",
                                        "security.protocol": "PLAINTEXT"}}))

    # When the hook is made with the provider's parameter name
    hook = CopycatKafkaHook(kafka_config_id="kafka_provider_style")

    # Then it is one of the provider's hooks, reaches the broker, and gives the provider's get_conn
    assert isinstance(hook, KafkaBaseHook)
    assert hook.kafka_conn_id == hook.kafka_config_id == "kafka_provider_style"
    ok, message = hook.test_connection()
    assert ok, message
    assert hook.get_conn.list_topics(timeout=10).brokers
    assert hook.worker_config().bootstrap_servers == kafka_bootstrap
    # ... and two different ids are refused
    with pytest.raises(ValueError, match="give one"):
        CopycatKafkaHook("a", kafka_config_id="b")


def test_a_kafka_provider_connection_drives_a_copycat_dag(
        make_dag, run_dag, monkeypatch, kafka_bootstrap, tmp_path, unique, read_topic, test_worker_config):
    # Given a Kafka provider connection (extra only, nothing of ours in it) and a DAG that names it
    conn_id = f"provider_kafka_{unique}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap, "group.id": "airflow-consumers"}}))
    log_file = tmp_path / "in.log"
    log_file.write_text("one\ntwo\nthree\n", encoding="utf-8")
    topic = f"provider-conn-{unique}"
    config = {"name": topic, "connector.class": "FileStreamSource", "file": str(log_file), "topic": topic}
    dag = make_dag(f"provider_conn_{unique}", config, kafka_conn_id=conn_id, in_process=True,
                   worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then plan, run and finish used that connection: the lines are in the topic, the offsets committed
    assert result.state == "success", result.states()
    assert read_topic(topic) == ["one", "two", "three"]
    assert result.xcom(f"{topic}.finish")["records"] == 3


def test_an_oauth_cb_dotted_path_is_checked_against_the_allowlist_and_handed_to_the_client(
        monkeypatch, kafka_bootstrap):
    from tests.support import kafka_callbacks

    # Given a connection whose extra names a token callback by dotted path, as the Kafka provider has it
    path = "tests.support.kafka_callbacks.oauth_token"
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_OAUTH", json.dumps({
        "conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                        "sasl.mechanism": "OAUTHBEARER",
                                        "sasl.oauthbearer.config": "scope=copycat", "oauth_cb": path}}))

    # When the provider's allowlist does not hold it, Then the hook refuses it, as the provider does
    monkeypatch.delenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", raising=False)
    with pytest.raises(ValueError, match="callback_allowlist"):
        CopycatKafkaHook("kafka_oauth").worker_props()

    # When it does
    monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", f"other.module.cb, {path}")
    hook = CopycatKafkaHook("kafka_oauth")
    props = hook.worker_props()

    # Then the worker config keeps the dotted path (it travels to Spark tasks as JSON) ...
    assert props["oauth_cb"] == path and json.loads(json.dumps(props)) == props
    # ... every client config gets the callable itself ...
    worker = hook.worker_config()
    for config in (worker.admin_config(), worker.producer_config(), worker.consumer_config("g")):
        assert config["oauth_cb"] is kafka_callbacks.oauth_token
    # ... and librdkafka calls it for a token when the hook's client starts (this broker has no SASL:
    # the token is asked for before any connection)
    kafka_callbacks.CALLS.clear()
    hook.get_conn
    assert kafka_callbacks.CALLS == ["scope=copycat"]


def test_a_callback_that_cannot_be_imported_is_named():
    from airflow_copycat.runtime.worker import WorkerConfig

    with pytest.raises(ValueError, match="oauth_cb='no_such_module.cb' cannot be imported"):
        WorkerConfig({"bootstrap.servers": "b:9092", "oauth_cb": "no_such_module.cb"}).admin_config()


_WITHOUT_KAFKA_PROVIDER = '''
import importlib.abc, json, os, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "airflow.providers.apache.kafka.hooks" or name.startswith("airflow.providers.apache.kafka.hooks."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Block())
# ... and its distribution unseen by provider discovery and by our provider info
import importlib.metadata as metadata
KAFKA_PROVIDER = "apache-airflow-providers-apache-kafka"
_distribution = metadata.distribution

def distribution(name):
    if name == KAFKA_PROVIDER:
        raise metadata.PackageNotFoundError(name)
    return _distribution(name)

metadata.distribution = distribution
import airflow.sdk._shared.providers_discovery.providers_discovery as discovery
_entry_points = discovery.entry_points_with_dist
discovery.entry_points_with_dist = lambda group: [
    (ep, dist) for ep, dist in _entry_points(group) if dist.metadata["Name"] != KAFKA_PROVIDER]

from airflow.sdk import BaseHook
from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime
from airflow_copycat.hooks.kafka import CopycatKafkaHook

info = ProvidersManagerTaskRuntime().hooks["kafka"]
assert (info.package_name, info.hook_class_name) == ("airflow-copycat", "airflow_copycat.hooks.kafka.CopycatKafkaHook"), info
assert type(BaseHook.get_connection("kafka_no_provider").get_hook()) is CopycatKafkaHook

hook = CopycatKafkaHook(kafka_config_id="kafka_no_provider")
assert CopycatKafkaHook.__mro__[1] is BaseHook, CopycatKafkaHook.__mro__
ok, message = hook.test_connection()
print(json.dumps({"ok": ok, "message": message, "bootstrap": hook.worker_config().bootstrap_servers,
                  "brokers": len(hook.get_conn.list_topics(timeout=10).brokers),
                  "provider_loaded": any(m.startswith("airflow.providers.apache.kafka.hooks") for m in sys.modules)}))
'''


def test_the_hook_works_without_the_kafka_provider(kafka_bootstrap, airflow_db):
    # Given an interpreter in which the hooks of Airflow's Kafka provider cannot be imported (as if it were not
    # installed; its provider info may still load), and a kafka connection with host and port
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "AIRFLOW_CONN_KAFKA_NO_PROVIDER": json.dumps(
        {"conn_type": "kafka", "host": kafka_bootstrap.split(":")[0], "port": int(kafka_bootstrap.split(":")[1])})}

    # When the hook reads the connection and tests it
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_KAFKA_PROVIDER], capture_output=True, text=True,
                          timeout=180, cwd=Path(__file__).resolve().parents[2], env=env)

    # Then it serves the kafka connection type, is a plain Airflow hook, and still reaches the broker
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"], out["message"]
    assert out["bootstrap"] == kafka_bootstrap and out["brokers"] >= 1 and not out["provider_loaded"]
