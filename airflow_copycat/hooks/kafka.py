"""Kafka connection -> worker config.

Follows the ``kafka`` connection type of Apache Airflow's Kafka provider
(``apache-airflow-providers-apache-kafka``): the connection's extra holds the
client config (``{"bootstrap.servers": "broker:9092", "security.protocol":
"SASL_SSL", ...}``), so a connection made for the provider's operators works
here unchanged. The extra may also hold any Kafka Connect worker key
(``offset.storage.topic``, ``value.converter``, ``producer.*``), so a connection
doubles as a worker properties file. If ``bootstrap.servers`` is absent, the
connection's host (and port) is used; login and password become
``sasl.username`` / ``sasl.password`` unless the extra sets them.

With the Kafka provider installed, :class:`CopycatKafkaHook` *is* one of its
hooks (a ``KafkaBaseHook``): it takes ``kafka_config_id`` as well as
``kafka_conn_id``, ``get_conn`` gives an ``AdminClient``, and the provider's
token callbacks apply to the clients the hook makes itself (Amazon MSK IAM when
the bootstrap servers are MSK's and ``sasl.mechanism`` is ``OAUTHBEARER``).
Without the provider it is a plain Airflow hook doing the same.

Callbacks (``oauth_cb``, ``error_cb``, ``stats_cb``, ``throttle_cb``, ``log_cb``,
``on_commit``) are given as dotted paths in the extra, as the provider has them,
and only those listed in Airflow's ``[apache_kafka] callback_allowlist`` are
accepted (the provider's rule). They stay dotted paths in the worker config --
it travels to Spark tasks as JSON -- and every process that makes a Kafka client
imports them (:func:`~airflow_copycat.runtime.worker.resolve_callback`), Spark
executors too: the callback's module must be installed there.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook, conf

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import mask_secret

from ..runtime.worker import CALLBACK_KEYS, WorkerConfig, is_secret_key

try:  # the Apache Kafka provider, when installed: its hook is our base
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook as _KafkaBase
except ImportError:
    _KafkaBase = None

_CALLBACK_KEYS = (*CALLBACK_KEYS, "on_commit")
_ALLOWLIST = ("apache_kafka", "callback_allowlist")  # the Kafka provider's option


class CopycatKafkaHook(_KafkaBase or BaseHook):  # type: ignore[misc]
    """Reads a ``kafka`` connection into a :class:`~airflow_copycat.runtime.worker.WorkerConfig`.

    :param kafka_conn_id: the connection id (default ``kafka_default``).
    :param kafka_config_id: the Kafka provider's name for the same parameter; give one of the two.
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

    def __init__(self, kafka_conn_id: str | None = None, *, kafka_config_id: str | None = None) -> None:
        if kafka_conn_id and kafka_config_id and kafka_conn_id != kafka_config_id:
            raise ValueError(f"kafka_conn_id={kafka_conn_id!r} and kafka_config_id={kafka_config_id!r} name two "
                             "connections: give one")
        conn_id = kafka_conn_id or kafka_config_id or self.default_conn_name
        if _KafkaBase is not None:
            super().__init__(kafka_config_id=conn_id)
        else:
            super().__init__()
        self.kafka_conn_id = self.kafka_config_id = conn_id

    @cached_property
    def _connection(self):
        return self.get_connection(self.kafka_conn_id)

    def worker_props(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Worker properties: the connection's extra, its host as ``bootstrap.servers`` if the
        extra has none, then ``overrides``. May contain secrets: do not log or push to XCom
        (values of keys named like secrets are registered with Airflow's secrets masker).
        Raises ``ValueError`` for a callback of the extra that the allowlist does not hold."""
        conn = self._connection
        props: dict[str, Any] = dict(conn.extra_dejson or {})
        self._check_callbacks(props)
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

    def _check_callbacks(self, props: Mapping[str, Any]) -> None:
        """The Kafka provider's rule: a callback named in a connection is imported only if its full path
        is in ``[apache_kafka] callback_allowlist`` (a connection editor must not choose code to run)."""
        requested = {k: props[k] for k in _CALLBACK_KEYS if isinstance(props.get(k), str) and props[k]}
        if not requested:
            return
        allowed = {p.strip() for p in (conf.get(*_ALLOWLIST, fallback="") or "").split(",") if p.strip()}
        for key, path in requested.items():
            if path not in allowed:
                raise ValueError(f"Refusing to resolve Kafka callback {key}={path!r} of connection "
                                 f"{self.kafka_conn_id!r}: it is not in the [{_ALLOWLIST[0]}] {_ALLOWLIST[1]} "
                                 f"({', '.join(sorted(allowed)) or 'empty'}).")

    def _build_config(self) -> dict[str, Any]:
        """The admin client config of this connection, callbacks imported, plus the Kafka provider's
        managed token callback (Amazon MSK IAM) when it applies; ``get_conn`` builds its client from it."""
        config = self.worker_config().admin_config()
        add_msk_iam = getattr(self, "_maybe_add_msk_iam_oauth", None)  # Kafka provider >= 1.11
        if add_msk_iam is not None and "oauth_cb" not in config:
            add_msk_iam(config, config.get("bootstrap.servers"))
        return config

    if _KafkaBase is None:

        @cached_property
        def get_conn(self) -> Any:
            """An ``AdminClient`` of this connection (as the Kafka provider's hooks have it)."""
            from confluent_kafka.admin import AdminClient

            return AdminClient(self._build_config())

    def test_connection(self) -> tuple[bool, str]:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient(self._build_config()).list_topics(timeout=10)
            return True, f"connected: {len(md.brokers)} broker(s), {len(md.topics)} topic(s)"
        except Exception as e:
            return False, str(e)
