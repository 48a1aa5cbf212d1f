"""A connector with secret keys, for the CLI's secret-hiding tests (``tests.cli.secret_connector:SecretSource``).

``api.token`` is a plain STRING key named like a secret whose validator -- as careless
connectors do -- repeats the value in its message: the CLI must still hide it.
"""

from __future__ import annotations

from airflow_copycat.connect import ConfigDef, ConfigType, SourceConnector, SourceTask


def _long_password(key, v):
    if v is not None and len(v.value if hasattr(v, "value") else v) < 12:
        return "must be at least 12 characters"
    return None


def _token_prefix(key, v):
    if v is not None and not str(v).startswith("tok-"):
        return f"must start with 'tok-', got {v!r}"
    return None


class SecretSource(SourceConnector):
    config_def = (ConfigDef()
                  .define("api.password", ConfigType.PASSWORD, validator=_long_password)
                  .define("api.token", ConfigType.STRING, validator=_token_prefix)
                  .define("topic", ConfigType.STRING))

    def partitions(self):
        return []

    def task_class(self):
        return SecretTask


class SecretTask(SourceTask):
    def start(self, config):
        pass

    def poll(self):
        return None
