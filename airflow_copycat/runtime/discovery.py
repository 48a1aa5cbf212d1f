"""Partition discovery: the partitions a connector has *now*, and how they differ from a plan's.

A partition sensor (:mod:`airflow_copycat.sensors.partitions`) calls
:func:`current_partitions` on every poke and :func:`compare` with the partitions
of the connector's last plan; a non-empty :class:`PartitionChange` means "re-plan".
This module imports no airflow, so the sensor (in a worker) and its trigger (in
the triggerer) list partitions exactly as :func:`~.plan.make_plan` does:

* **sources**: ``connector.start(config)``; ``connector.partitions()``;
  ``connector.stop()`` -- tables, files, queries, whatever the connector reads;
* **sinks**: the Kafka topic-partitions of ``topics`` (those that exist) and of
  every topic matching ``topics.regex``, as ``[topic, partition]`` lists (the
  plan's form). A listed topic that does not exist yet is simply absent: its
  creation is an *added* change (the plan itself refuses missing topics).

Partitions are compared by their canonical JSON
(:func:`~airflow_copycat.connect.assignment.canonical`), so a plan read back from
XCom compares equal to a fresh listing. Nothing here commits or reads offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..connect.assignment import canonical
from ..connect.connector import SinkConnector
from ..connect.errors import ConnectException
from . import connector_config
from .kafka import admin_client, matching_partitions, sink_topics
from .worker import WorkerConfig


@dataclass(frozen=True)
class PartitionChange:
    """What differs between a plan's partitions and the current ones. False when nothing does.

    ``added``: partitions present now and not in the plan (in the order the connector lists
    them); ``dropped``: partitions of the plan that are gone (in the plan's order).
    ``baseline_missing``: there was no plan to compare with, so every current partition is
    ``added`` and the change is true even when the connector has no partition at all.
    """

    added: list[Any] = field(default_factory=list)
    dropped: list[Any] = field(default_factory=list)
    baseline_missing: bool = False

    def __bool__(self) -> bool:
        return self.baseline_missing or bool(self.added or self.dropped)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (XCom, trigger events): ``{"added": [...], "dropped": [...], "baseline_missing": b}``."""
        return {"added": list(self.added), "dropped": list(self.dropped), "baseline_missing": self.baseline_missing}


def check_config(raw_config: str | Mapping[str, Any]) -> tuple[dict[str, Any], type]:
    """(parsed config, connector class) of a connector config, validated as the plan validates it;
    raises one :class:`~airflow_copycat.connect.errors.ConfigException` naming every problem
    (secret values hidden). Touches no external system."""
    return connector_config.parse(connector_config.load_connector_config(raw_config))


def current_partitions(raw_config: str | Mapping[str, Any], worker: WorkerConfig) -> list[Any]:
    """The partitions the connector of ``raw_config`` has now (see the module docstring).

    ``raw_config`` must hold real secret values (a database password), never ``[hidden]``.
    ``worker`` is used only for sinks (to list topics) and for sources that read Kafka
    themselves. Raises :class:`ConfigException` for an invalid config, and
    :class:`ConnectException` when the connector cannot tell (its ``partitions()`` returns
    ``None``: nothing can watch it) or the external system cannot be listed.
    """
    values, cls = check_config(raw_config)
    if issubclass(cls, SinkConnector):
        return sink_partitions(values, worker)
    connector = cls()
    if getattr(cls, "reads_kafka", False):
        connector.kafka_client_config = worker.client_config()
    connector.start(values)
    try:
        found = connector.partitions()
    finally:
        connector.stop()
    if found is None:
        raise ConnectException(f"connector {values['name']!r} ({cls.__name__}) cannot list its partitions "
                               "(partitions() returns None): there is nothing to watch")
    return list(found)


def sink_partitions(values: Mapping[str, Any], worker: WorkerConfig) -> list[list[Any]]:
    """``[[topic, partition], ...]`` (sorted) of the existing topics a sink config names or matches."""
    topics, regex = sink_topics(values)
    tps = matching_partitions(admin_client(worker.admin_config()), topics=topics, regex=regex)
    return [list(tp) for tp in tps]


def plan_partitions(plan: Mapping[str, Any] | None) -> list[Any] | None:
    """The partitions of a plan (:func:`~.plan.make_plan`'s ``"partitions"``), ``None`` without a plan."""
    if not plan:
        return None
    return list(plan.get("partitions") or [])


def compare(current: list[Any], baseline: list[Any] | None) -> PartitionChange:
    """How ``current`` differs from ``baseline`` (``None``: no baseline, everything is added)."""
    if baseline is None:
        return PartitionChange(added=list(current), baseline_missing=True)
    before = {canonical(p) for p in baseline}
    now = {canonical(p) for p in current}
    return PartitionChange(added=[p for p in current if canonical(p) not in before],
                           dropped=[p for p in baseline if canonical(p) not in now])
