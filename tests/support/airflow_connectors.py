"""Connectors used by the Airflow-layer tests (importable as tests.support.airflow_connectors)."""

from __future__ import annotations

import hashlib
import json
import logging

from airflow_copycat.connect import (
    ConfigDef,
    ConfigType,
    Schema,
    SourceConnector,
    SourceRecord,
    SourceTask,
)

log = logging.getLogger(__name__)


def fingerprint(secret: str | None) -> str | None:
    """What :class:`CredentialSource` publishes instead of a secret it received."""
    return None if secret is None else hashlib.sha256(secret.encode()).hexdigest()


class CredentialSource(SourceConnector):
    """A careless connector with two secrets: ``api.credential`` (a PASSWORD key whose name
    Airflow does not recognise as secret) and whatever ``connection.password`` passes through.

    Its one task publishes one record to ``topic`` whose value is the :func:`fingerprint`
    of each secret it received -- so a test can prove the task got the real values --
    and logs both values at INFO, so a test can prove Airflow's log shows ``***`` instead.
    """

    config_def = (ConfigDef().define("topic", ConfigType.STRING)
                  .define("api.credential", ConfigType.PASSWORD))

    def partitions(self):
        return [{"credential": "check"}]

    def task_class(self):
        return CredentialTask


class CredentialTask(SourceTask):
    def start(self, config):
        self.topic = config["topic"]
        self.secrets = {k: config.get(k) for k in ("api.credential", "connection.password")}
        log.info("CredentialTask connecting with api.credential=%s connection.password=%s",
                 self.secrets["api.credential"], self.secrets["connection.password"])
        self.done = bool(self.context.offset_storage_reader.offset({"credential": "check"}))

    def poll(self):
        if self.done:
            return None
        self.done = True
        value = json.dumps({k: fingerprint(v) for k, v in self.secrets.items()}, sort_keys=True)
        return [SourceRecord(topic=self.topic, key_schema=None, key=None, value_schema=Schema.STRING, value=value,
                             source_partition={"credential": "check"}, source_offset={"done": True})]


class RefusedSource(SourceConnector):
    """A connector whose client library quotes the secret it was refused with: its one task fails in
    ``start`` with an exception whose text holds ``api.credential`` as is (no URL, no ``password=``, so
    only a scrubber told the value can hide it), as a driver's "authentication failed for ..." does."""

    config_def = (ConfigDef().define("topic", ConfigType.STRING)
                  .define("api.credential", ConfigType.PASSWORD))

    def partitions(self):
        return [{"credential": "check"}]

    def task_class(self):
        return RefusedTask


class RefusedTask(SourceTask):
    def start(self, config):
        raise PermissionError(f"the API refused credential {config['api.credential']} (expired)")

    def poll(self):
        return None
