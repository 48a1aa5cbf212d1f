"""The trigger of a deferred :class:`~airflow_copycat.sensors.partitions.CopycatPartitionSensor`.

Secrets: a trigger's arguments are written to Airflow's metadata database (the
``trigger`` table) and shown to whoever can read it, so this trigger never holds a
secret. Its ``connector_config`` is the connector config with every secret value
replaced by ``[hidden]`` (the plan's redaction); its ``worker_config`` holds no
secret key. When it polls, in the triggerer, it fetches the secrets itself from
Airflow connections, each time (a rotated password is picked up):

* the Kafka client config (for sinks, and for sources that read Kafka) from the
  Kafka connection ``kafka_conn_id``, as the operators do;
* the database of a connector config with ``airflow.conn.id`` from that Airflow
  connection (``connection.url`` / ``connection.user`` / ``connection.password``,
  :func:`airflow_copycat.hooks.database.resolve_db_connection`).

A source connector whose secret lives only in the connector config itself
(``connection.password``, a password inside ``connection.url``) cannot be
deferred: the sensor refuses at once and says to use ``airflow.conn.id`` or
``mode="reschedule"``. Sinks list topics through the Kafka connection only, so
their connector secrets are not needed here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..connect.secrets import Scrubber, is_secret_key
from ..hooks.database import CONN_ID_KEY, resolve_db_connection
from ..runtime.discovery import compare, current_partitions
from ..runtime.worker import WorkerConfig

DB_CONN_ID_KEY = CONN_ID_KEY
"""Connector config key naming the Airflow connection of a database (see the module docstring)."""


class CopycatPartitionTrigger(BaseTrigger):
    """Polls a connector's partitions every ``poke_interval`` seconds until they differ from ``baseline``.

    Yields exactly one :class:`TriggerEvent`, then ends:

    * ``{"status": "changed", "added": [...], "dropped": [...], "baseline_missing": bool}``
      when the partitions differ from ``baseline`` (``None``: no baseline, fires at once);
    * ``{"status": "error", "message": "..."}`` when listing them fails (config, database or
      Kafka unreachable); the message never holds a secret value.

    The listing runs in a thread (``asyncio.to_thread``), so a slow database never blocks the
    triggerer's event loop. Timeouts are the sensor's (``defer(timeout=...)``).

    :param connector_config: the flat connector config, secret values ``[hidden]``.
    :param baseline: the partitions of the last plan (JSON values), or ``None``.
    :param kafka_conn_id: Kafka connection the worker config is read from.
    :param worker_config: extra worker properties, without secret keys.
    :param poke_interval: seconds between two listings.
    """

    def __init__(
        self,
        connector_config: dict[str, Any],
        baseline: list[Any] | None,
        kafka_conn_id: str = "kafka_default",
        worker_config: dict[str, Any] | None = None,
        poke_interval: float = 60.0,
    ) -> None:
        super().__init__()
        self.connector_config = dict(connector_config)
        self.baseline = None if baseline is None else list(baseline)
        self.kafka_conn_id = kafka_conn_id
        self.worker_config = dict(worker_config or {})
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "connector_config": self.connector_config,
                "baseline": self.baseline,
                "kafka_conn_id": self.kafka_conn_id,
                "worker_config": self.worker_config,
                "poke_interval": self.poke_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                current = await asyncio.to_thread(
                    discover, self.connector_config, self.kafka_conn_id, self.worker_config)
            except Exception as e:  # noqa: BLE001 -- every failure ends the wait, as one event
                yield TriggerEvent({"status": "error", "message": str(e)})
                return
            change = compare(current, self.baseline)
            if change:
                yield TriggerEvent({"status": "changed", **change.to_dict()})
                return
            self.log.info("%d partition(s), same as the last plan; next look in %ss", len(current),
                          self.poke_interval)
            await asyncio.sleep(self.poke_interval)


class DiscoveryError(Exception):
    """Listing partitions failed; the message names the cause, with every secret value hidden."""


def discover(config: Mapping[str, Any], kafka_conn_id: str, worker_config: Mapping[str, Any] | None) -> list[Any]:
    """The connector's current partitions (blocking; Airflow layer, worker or triggerer).

    ``config`` is a flat connector config, rendered; its database comes from the Airflow
    connection ``airflow.conn.id`` when that key is set. Raises :class:`DiscoveryError`
    (secrets hidden in its message) on any failure.
    """
    from ..hooks.kafka import CopycatKafkaHook
    from ..hooks.secrets import connector_secrets

    hide = Scrubber()
    try:
        raw = with_db_connection(config)
        for value in connector_secrets(raw).values():
            hide.add(value)
        props = CopycatKafkaHook(kafka_conn_id).worker_props(worker_config)
        for key, value in props.items():
            if is_secret_key(key):
                hide.add(value)
        return current_partitions(raw, WorkerConfig(props))
    except Exception as e:  # noqa: BLE001
        raise DiscoveryError(hide(f"{type(e).__name__}: {e}")) from None


def with_db_connection(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with its database filled from the Airflow connection ``airflow.conn.id``, if set."""
    return resolve_db_connection(config)

