"""The framework's keys of one connector config, parsed once into typed settings.

The source and sink loops, the error handler, the retry policy and the
transactions read ``copycat.run.*``, ``errors.*``, ``transaction.*`` and
``topic.creation.*`` only through :class:`FrameworkSettings`: every key typed and
defaulted as :data:`.connector_config.FRAMEWORK_CONFIG` declares it, so a
default is written once. The planner builds them once from the validated config
(:meth:`FrameworkSettings.from_values`) into the plan's :class:`~.spec.ConnectorSpec`,
which the run step hands to the loops; a task of a group without a spec (a plan of
an earlier version) builds them from its task config with :meth:`FrameworkSettings.of`
(a value of the wrong type still fails there, naming the key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .connector_config import FRAMEWORK_CONFIG


@dataclass(frozen=True)
class FrameworkSettings:
    """Typed framework keys of one connector (see the module docstring)."""

    name: str
    run_max_records: int
    """``copycat.run.max.records``: per-task record budget of one run, -1 for none."""
    run_max_ms: int
    """``copycat.run.max.ms``: per-task time budget of one run in ms, -1 for none."""
    eof_timeout_ms: int
    put_retry_timeout_ms: int
    tolerate_errors: bool
    """``errors.tolerance=all``."""
    retry_timeout_ms: int
    retry_delay_max_ms: int
    log_errors: bool
    log_error_messages: bool
    dlq_topic: str
    dlq_replication_factor: int
    dlq_context_headers: bool
    exactly_once_required: bool
    """``exactly.once.support=required``."""
    transaction_boundary: str
    transaction_interval_ms: int | None
    """``transaction.boundary.interval.ms``; ``None``: the worker's ``offset.flush.interval.ms``."""
    new_topic_partitions: int
    new_topic_replication_factor: int

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> "FrameworkSettings":
        """The settings of a task config (strings, as plans carry them) or of a parsed config; a key
        that is absent or empty takes its declared default."""
        given = {k: config.get(k) for k in FRAMEWORK_CONFIG.keys if config.get(k) not in (None, "")}
        return cls.from_values(FRAMEWORK_CONFIG.parse(given, context=f"connector {config.get('name')!r}"))

    @classmethod
    def from_values(cls, v: Mapping[str, Any]) -> "FrameworkSettings":
        """The settings of values already parsed -- by :data:`FRAMEWORK_CONFIG` or by
        :func:`.connector_config.parse`, which types and defaults every framework key -- without parsing
        them again (the planner builds the run's :class:`~.spec.ConnectorSpec` with it)."""
        return cls(
            name=str(v["name"]),
            run_max_records=v["copycat.run.max.records"],
            run_max_ms=v["copycat.run.max.ms"],
            eof_timeout_ms=v["copycat.eof.timeout.ms"],
            put_retry_timeout_ms=v["copycat.put.retry.timeout.ms"],
            tolerate_errors=str(v["errors.tolerance"]).lower() == "all",
            retry_timeout_ms=v["errors.retry.timeout"],
            retry_delay_max_ms=v["errors.retry.delay.max.ms"],
            log_errors=v["errors.log.enable"],
            log_error_messages=v["errors.log.include.messages"],
            dlq_topic=v["errors.deadletterqueue.topic.name"] or "",
            dlq_replication_factor=v["errors.deadletterqueue.topic.replication.factor"],
            dlq_context_headers=v["errors.deadletterqueue.context.headers.enable"],
            exactly_once_required=str(v["exactly.once.support"]).lower() == "required",
            transaction_boundary=str(v["transaction.boundary"]).lower(),
            transaction_interval_ms=v["transaction.boundary.interval.ms"],
            new_topic_partitions=v["topic.creation.default.partitions"],
            new_topic_replication_factor=v["topic.creation.default.replication.factor"],
        )
