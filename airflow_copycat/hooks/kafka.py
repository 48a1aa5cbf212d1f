"""Kafka connection -> worker config.

Follows the ``kafka`` connection type of Apache Airflow's Kafka provider: the
connection's extra holds the client config (``{"bootstrap.servers":
"broker:9092", "security.protocol": "SASL_SSL", ...}``). The extra may also
hold any Kafka Connect worker key (``offset.storage.topic``,
``value.converter``, ``producer.*``), so a connection doubles as a worker
properties file. If ``bootstrap.servers`` is absent, the connection's host
(and port) is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import mask_secret

from ..runtime.worker import WorkerConfig, is_secret_key


class CopycatKafkaHook(BaseHook):
    """Reads a ``kafka`` connection into a :class:`~airflow_copycat.runtime.worker.WorkerConfig`.

    :param kafka_conn_id: the connection id (default ``kafka_default``).
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Apache Kafka (Copycat)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: host[:port] or ``bootstrap.servers`` in the extra; login and
        password become ``sasl.username`` / ``sasl.password``."""
        return {
            "hidden_fields": ["schema"],
            "relabeling": {"host": "Bootstrap servers", "extra": "Client and worker config (JSON)"},
            "placeholders": {
                "host": "broker-1:9092,broker-2:9092",
                "extra": '{"bootstrap.servers": "broker:9092", "security.protocol": "SASL_SSL", '
                '"sasl.mechanism": "PLAIN", "offset.storage.topic": "copycat-offsets"}',
            },
        }

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    @cached_property
    def _connection(self):
        return self.get_connection(self.kafka_conn_id)

    def worker_props(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Worker properties: the connection's extra, its host as ``bootstrap.servers`` if the
        extra has none, then ``overrides``. May contain secrets: do not log or push to XCom
        (values of keys named like secrets are registered with Airflow's secrets masker)."""
        conn = self._connection
        props: dict[str, Any] = dict(conn.extra_dejson or {})
        if not props.get("bootstrap.servers") and conn.host:
            props["bootstrap.servers"] = conn.host if not conn.port else f"{conn.host}:{conn.port}"
        if conn.login and "sasl.username" not in props:
            props["sasl.username"] = conn.login
        if conn.password and "sasl.password" not in props:
            props["sasl.password"] = conn.password
        props.update(overrides or {})
        for key, value in props.items():
            if is_secret_key(key) and not key.endswith((".location", ".type")) and value not in (None, ""):
                mask_secret(str(value))  # e.g. sasl.jaas.config, which Airflow does not mask by name
        return props

    def worker_config(self, overrides: Mapping[str, Any] | None = None) -> WorkerConfig:
        return WorkerConfig(self.worker_props(overrides))

    def test_connection(self) -> tuple[bool, str]:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient(self.worker_config().admin_config()).list_topics(timeout=10)
            return True, f"connected: {len(md.brokers)} broker(s), {len(md.topics)} topic(s)"
        except Exception as e:
            return False, str(e)
