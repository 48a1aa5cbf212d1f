"""CopycatKafkaHook: a ``kafka`` connection read into worker properties."""

from __future__ import annotations

import json

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
