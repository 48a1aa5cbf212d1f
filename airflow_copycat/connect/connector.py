"""Connectors: the planners. A connector copies nothing.

The framework creates a connector, calls :meth:`Connector.start` with its
config, asks it for :meth:`Connector.partitions` (discovery) and
:meth:`Connector.task_configs` (at most ``max_tasks`` task configs), then calls
:meth:`Connector.stop`. This happens in the Airflow plan task (or ``copycat
plan``), never on a Spark executor. Task configs are flat dicts of strings that
travel as JSON to wherever the tasks run: they must be everything a task needs.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, ClassVar

from .config import ConfigDef
from .errors import ConfigException
from .config import ConfigProblem

TASK_PARTITIONS_KEY = "task.partitions"
"""Task config key under which :meth:`SourceConnector.task_configs`'s default
implementation passes a task its source partitions (a JSON list)."""

WINDOW_START_KEY = "copycat.window.start"
WINDOW_END_KEY = "copycat.window.end"
"""A *windowed* run (an Airflow backfill run) copies only the data whose event time lies in
``[copycat.window.start, copycat.window.end)``: ISO-8601 timestamps, UTC when they carry no
offset. The framework sets both keys in the task configs of a backfill run (from the run's
data interval) and gives the tasks the window's own offsets, never the live ones; a source
connector says whether it can do this in :meth:`SourceConnector.window_support`."""


def window_bounds(config: dict[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
    """``(start, end)`` as aware UTC datetimes when ``config`` holds a window, ``None`` when it
    holds neither key. Raises ``ValueError`` naming the key when one is missing or unreadable,
    or when ``end`` is not after ``start``."""
    raw = {k: config.get(k) for k in (WINDOW_START_KEY, WINDOW_END_KEY)}
    if all(v in (None, "") for v in raw.values()):
        return None
    bounds = []
    for key, value in raw.items():
        if value in (None, ""):
            raise ValueError(f"{key} is missing: a window needs both {WINDOW_START_KEY} and {WINDOW_END_KEY}")
        if isinstance(value, dt.datetime):
            t = value
        else:
            try:
                t = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{key}={value!r} is not an ISO-8601 timestamp") from None
        bounds.append((t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc))
    if bounds[1] <= bounds[0]:
        raise ValueError(f"{WINDOW_END_KEY} ({bounds[1].isoformat()}) must be after {WINDOW_START_KEY} "
                         f"({bounds[0].isoformat()})")
    return bounds[0], bounds[1]


class Connector:
    """Base of source and sink connectors.

    Subclasses set :attr:`config_def` and :attr:`version`, and implement
    :meth:`start`, :meth:`task_class` and :meth:`task_configs`.
    """

    config_def: ClassVar[ConfigDef] = ConfigDef()
    """The keys this connector understands; the framework validates against it
    (plus its own keys) before :meth:`start` is called."""

    version: ClassVar[str] = "0.1.0"

    exactly_once: ClassVar[bool] = False
    """Whether a source connector can give exactly-once delivery (its offsets
    alone define what was read). Sink connectors: whether writes are idempotent."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    def start(self, config: dict[str, Any]) -> None:
        """Called once, with the config already parsed against :attr:`config_def`
        (typed values, defaults filled in). Open whatever :meth:`partitions` needs."""
        self.config = config

    def validate(self, config: dict[str, Any]) -> list[ConfigProblem]:
        """Cross-key checks beyond what :attr:`config_def` expresses; called with the
        parsed config before :meth:`start`. Return every problem, ``[]`` when valid."""
        return []

    def task_class(self) -> type:
        """The :class:`~airflow_copycat.connect.task.Task` subclass that runs this connector's task configs."""
        raise NotImplementedError

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """At most ``max_tasks`` task configs; each becomes one task (one Spark task)."""
        raise NotImplementedError

    def partitions(self) -> list[dict] | None:
        """The partitions this connector would read or write now, for discovery:
        a sensor compares successive answers and re-plans when they differ.
        ``None`` means the connector cannot tell (no discovery)."""
        return None

    def stop(self) -> None:
        """Release what :meth:`start` opened. Safe to call more than once, or without start."""

    @classmethod
    def check_config(cls, raw: dict[str, Any]) -> tuple[dict[str, Any], list[ConfigProblem]]:
        """(typed values, every problem): the per-key problems of :attr:`config_def` and the
        cross-key problems of :meth:`validate` together. Cross-key checks see the raw
        value of a key that failed its own check, and a key reported once is not
        reported again."""
        values, problems = cls.config_def._parse(raw)
        reported = {p.key for p in problems}
        seen = dict(values, **{k: raw[k] for k in reported if raw.get(k) is not None})
        problems += [p for p in cls().validate(seen) if p.key not in reported]
        return values, problems

    @classmethod
    def parse_config(cls, raw: dict[str, Any], *, name: str | None = None) -> dict[str, Any]:
        """Parse ``raw`` with :attr:`config_def` and :meth:`validate`; raise one
        :class:`ConfigException` listing every problem."""
        values, problems = cls.check_config(raw)
        if problems:
            raise ConfigException(problems, context=f"connector {name!r}" if name else cls.__name__)
        return values


class SourceConnector(Connector):
    """A connector that reads an external system into Kafka.

    The default :meth:`task_configs` spreads :meth:`partitions` over at most
    ``max_tasks`` tasks, keeping each partition on the task it had in the previous
    plan when ``self.previous_assignment`` is set (sticky re-planning); each task
    config is the connector config plus ``task.partitions`` (JSON list). Override
    it when partitions cannot be listed up front.
    """

    previous_assignment: list[list[dict]] | None = None
    """Set by the framework before :meth:`task_configs` when re-planning: the
    partitions each task had in the last plan."""

    reads_kafka: ClassVar[bool] = False
    """A source that reads Kafka itself (the dead-letter replay) sets this; only then does the
    framework hand it and its tasks the worker's Kafka client settings."""

    kafka_client_config: dict[str, Any] | None = None
    """Set by the framework before :meth:`start` when :attr:`reads_kafka`: the worker's Kafka
    client settings (``bootstrap.servers``, security). Holds secrets: never log it or put it
    in task configs."""

    def exactly_once_support(self, config: dict[str, Any]) -> bool | None:
        """Whether this connector's tasks can deliver exactly once with ``config`` (Kafka Connect's
        ``exactlyOnceSupport``). Called at plan time, after :meth:`start`.

        ``True`` promises that a task started from a committed offset emits exactly the
        records after it, the same ones each time, so records and offsets written in one
        Kafka transaction never duplicate or lose data. ``False`` or ``None`` (unknown,
        the default) make ``exactly.once.support=required`` fail at plan time;
        ``requested`` runs transactions anyway.
        """
        return None

    def window_support(self, config: dict[str, Any]) -> str | None:
        """Whether this connector can run a window (see :data:`WINDOW_START_KEY`) with ``config``.
        Called at plan time, after :meth:`start`, only for windowed runs.

        ``None`` means yes: its tasks, given the window keys and the window's own offsets
        (none on a window's first run), read exactly the data whose event time lies in the
        window, the same data each time. Otherwise the reason it cannot (shown to the user as
        a config problem, e.g. "mode bulk has no timestamp column"). The default cannot.
        """
        return f"{type(self).__name__} does not support windowed (backfill) runs"

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        from .assignment import assign  # local: keeps the import graph obvious

        partitions = self.partitions() or []
        groups = assign(partitions, max_tasks, self.previous_assignment)
        base = {k: _as_str(v) for k, v in self.config.items()}
        return [dict(base, **{TASK_PARTITIONS_KEY: json.dumps(g)}) for g in groups]


class SinkConnector(Connector):
    """A connector that writes Kafka topics to an external system.

    Its config names the topics (``topics`` or ``topics.regex``). The framework
    lists their Kafka partitions and assigns them to the task configs this
    connector returns (by default ``max_tasks`` copies of its config), so a sink
    connector never talks to Kafka itself.
    """

    offsets_in_destination: ClassVar[bool] = False
    """True when the sink keeps its committed offsets in the destination (and calls
    context.offset() in open()): the framework then never starts from the consumer
    group's offsets, only from the destination's, else from the earliest offset -- so
    wiping the destination re-copies the topic."""

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        base = {k: _as_str(v) for k, v in self.config.items()}
        return [dict(base) for _ in range(max(1, max_tasks))]

    @classmethod
    def asset_uris(cls, config: dict[str, Any], topic: str) -> list[str]:
        """URIs of the datasets a run writes for ``topic`` (for Airflow Asset events), from the
        raw connector config. ``[]`` lets the framework use ``copycat://<connector>/<topic>``."""
        return []


def _as_str(v: Any) -> str:
    from .config import Password

    if isinstance(v, Password):
        return v.value
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return "" if v is None else str(v)


def task_partitions(config: dict[str, str]) -> list[dict]:
    """The source partitions a task config assigns (see :data:`TASK_PARTITIONS_KEY`)."""
    return json.loads(config.get(TASK_PARTITIONS_KEY) or "[]")
