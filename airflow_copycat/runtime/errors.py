"""Error handling of records in flight: tolerance, error log, dead-letter queue.

Kafka Connect's ``errors.*`` keys, on both sides: with ``errors.tolerance=none``
(the default) a record that fails conversion or a connector's decoding fails the
task with the record's location; with ``all`` it is counted, logged if
``errors.log.enable``, written to ``errors.deadletterqueue.topic.name`` if set
(with ``__connect.errors.*`` headers if ``errors.deadletterqueue.context.headers.enable``),
and skipped. A skipped record's offset still advances: it was handled, not lost.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Mapping

from confluent_kafka import Producer

from ..connect.errors import ConnectException
from .kafka import admin_client, ensure_topic
from .worker import WorkerConfig

log = logging.getLogger("airflow_copycat.errors")

# Kafka Connect's DeadLetterQueueReporter header names.
HEADER_PREFIX = "__connect.errors."
H_TOPIC = HEADER_PREFIX + "topic"
H_PARTITION = HEADER_PREFIX + "partition"
H_OFFSET = HEADER_PREFIX + "offset"
H_CONNECTOR = HEADER_PREFIX + "connector.name"
H_TASK = HEADER_PREFIX + "task.id"
H_STAGE = HEADER_PREFIX + "stage"
H_CLASS = HEADER_PREFIX + "class.name"
H_EXC_CLASS = HEADER_PREFIX + "exception.class.name"
H_EXC_MESSAGE = HEADER_PREFIX + "exception.message"
H_EXC_STACK = HEADER_PREFIX + "exception.stacktrace"
H_SOURCE_PARTITION = HEADER_PREFIX + "source.partition"
H_SOURCE_OFFSET = HEADER_PREFIX + "source.offset"
class RecordFailed(ConnectException):
    """A record failed and ``errors.tolerance`` is ``none``; the message says where."""


class ErrorHandler:
    """Decides what happens to a failed record; counts what it tolerated."""

    def __init__(self, config: Mapping[str, Any], task_id: int, worker: WorkerConfig, producer: Producer | None = None,
                 *, settings=None):
        """``producer``: one the task already has (sources), else the handler makes its own.
        ``settings``: the run's :class:`~.settings.FrameworkSettings` (the loops pass theirs); ``None``:
        parsed from ``config``."""
        from .settings import FrameworkSettings

        s = settings if settings is not None else FrameworkSettings.of(config)
        self.worker = worker
        self.connector = s.name
        self.task_id = task_id
        self.tolerate = s.tolerate_errors
        self.log_enabled = s.log_errors
        self.log_messages = s.log_error_messages
        self.dlq_topic = s.dlq_topic
        self.context_headers = s.dlq_context_headers
        self.dlq_replication_factor = s.dlq_replication_factor
        self._producer: Producer | None = producer
        self._dlq_ready = False
        self.count = 0
        self.dlq_count = 0
        self._dlq_errors: list[str] = []

    def handle(
        self,
        stage: str,
        error: Exception,
        *,
        location: str,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: list | None = None,
        kafka: tuple[str, int, int] | None = None,
        source_partition: Any = None,
        source_offset: Any = None,
        class_name: str = "",
    ) -> None:
        """Raise :class:`RecordFailed` (tolerance none) or record the error and return."""
        if not self.tolerate:
            raise RecordFailed(
                f"connector {self.connector} task {self.task_id}: {stage} failed for the record at {location}: "
                f"{type(error).__name__}: {error}. Fix the data or the config, or set errors.tolerance=all "
                f"(with errors.deadletterqueue.topic.name) to route such records aside."
            ) from error
        self.count += 1
        if self.log_enabled:
            extra = f" key={key!r:.200} value={value!r:.500}" if self.log_messages else ""
            log.warning("connector %s task %s: tolerated %s error at %s: %s%s",
                        self.connector, self.task_id, stage, location, error, extra)
        if not self.dlq_topic:
            return
        hdrs = list(headers or [])
        if self.context_headers:
            import json

            ctx = {
                H_CONNECTOR: self.connector,
                H_TASK: str(self.task_id),
                H_STAGE: stage,
                H_CLASS: class_name,
                H_EXC_CLASS: type(error).__module__ + "." + type(error).__qualname__,
                H_EXC_MESSAGE: str(error),
                H_EXC_STACK: "".join(traceback.format_exception(type(error), error, error.__traceback__)),
            }
            if kafka is not None:
                ctx.update({H_TOPIC: kafka[0], H_PARTITION: str(kafka[1]), H_OFFSET: str(kafka[2])})
            if source_partition is not None:
                ctx[H_SOURCE_PARTITION] = json.dumps(source_partition, separators=(",", ":"))
                ctx[H_SOURCE_OFFSET] = json.dumps(source_offset, separators=(",", ":"))
            hdrs += [(k, v.encode("utf-8")) for k, v in ctx.items()]
        self.prepare()
        if self._producer is None:
            self._producer = Producer(self.worker.producer_config())

        def on_delivery(err, msg):
            if err is not None:
                self._dlq_errors.append(err.str())

        self._producer.produce(self.dlq_topic, key=key, value=value, headers=hdrs, on_delivery=on_delivery)
        self._producer.poll(0)
        self.dlq_count += 1

    def prepare(self) -> None:
        """Create the dead-letter topic if one is configured and missing. Called when a task starts
        (under its retry policy), so a broker blip later does not hit the first dead letter."""
        if self.tolerate and self.dlq_topic and not self._dlq_ready:
            ensure_topic(admin_client(self.worker.admin_config()), self.dlq_topic,
                         partitions=1, replication_factor=self.dlq_replication_factor)
            self._dlq_ready = True

    def flush(self) -> None:
        """Wait until every dead-lettered record is acknowledged; raise if one was not.
        Called before offsets past those records are committed."""
        if self._producer is not None and self.dlq_count:
            left = self._producer.flush(60)
            if left or self._dlq_errors:
                raise ConnectException(
                    f"connector {self.connector}: could not write to dead-letter queue {self.dlq_topic}: "
                    + (self._dlq_errors[0] if self._dlq_errors else f"{left} records not acknowledged")
                )


def replay_config(original: Mapping[str, Any], *, name: str | None = None, replay_topic: str = "") -> dict[str, Any]:
    """The config of a connector that re-ingests ``original``'s dead-letter topic after a fix
    (see :mod:`airflow_copycat.connectors.deadletter.replay`).

    Named ``<name>-dlq-replay``, so it keeps offsets of its own and a rerun replays
    nothing twice. For a source, it carries the original's converters, transforms and
    predicates (fix those in ``original`` first); for a sink, byte-array converters,
    so records go back byte for byte.
    """
    from . import plugins

    dlq = str(original.get("errors.deadletterqueue.topic.name") or "")
    if not dlq:
        raise ConnectException(f"connector {original.get('name')!r} has no errors.deadletterqueue.topic.name: "
                               "there is no dead-letter queue to replay")
    kind = plugins.connector_kind(plugins.resolve_connector(str(original["connector.class"])))
    config: dict[str, Any] = {"name": name or f"{original['name']}-dlq-replay",
                              "connector.class": "DeadLetterReplaySource", "dlq.topic": dlq, "replay.topic": replay_topic}
    if kind == "source":
        config.update({k: v for k, v in original.items()
                       if k.split(".")[0] in ("transforms", "predicates") or k.startswith(("key.converter",
                                                                                           "value.converter"))})
    else:
        config.update({"key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"})
    return config
