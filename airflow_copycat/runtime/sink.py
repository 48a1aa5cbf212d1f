"""The sink loop: read assigned partitions to their end -> convert -> put -> commit.

A bounded run reads each assigned topic-partition from where the sink says
(``context.offset`` in ``open``, for sinks that keep offsets in the destination),
else from the consumer group's committed offset, else from the earliest offset,
up to the end of the partition as seen during the run (EOF events; the
partition is then paused, so later records wait for the next run). It calls
``pre_commit`` every ``offset.flush.interval.ms`` and once more with
``final=True`` at the end, and mirrors what ``pre_commit`` returned into the
consumer group ``connect-<name>`` so lag tools see the sink's progress.

Records are converted, then transformed (``transforms=...``; a dropped record
is handled, its offset advances), then put. A record that fails conversion or a
transform is handled by ``errors.*`` (fail naming topic, partition and offset,
or count, log and dead-letter the original bytes). Reaching Kafka at start is
retried within ``errors.retry.timeout``; ``put()`` raising
:class:`RetriableException` within ``copycat.put.retry.timeout.ms``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from ..connect.errors import ConnectException, RetriableException
from ..connect.records import SinkRecord
from ..connect.task import SinkTask, SinkTaskContext
from . import plugins
from .errors import ErrorHandler
from .result import TaskStats
from .retry import RetryPolicy, is_retriable
from .transforms import TransformChain, TransformError, build_chain
from .worker import WorkerConfig

log = logging.getLogger("airflow_copycat.sink")

ASSIGNED_PARTITIONS_KEY = "copycat.assigned.partitions"
"""Sink task config key: JSON list of ``[topic, partition]`` the task owns (set by the planner)."""

_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}
_FAILED = object()  # a record the error handler took


def assigned_partitions(config: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [(str(t), int(p)) for t, p in json.loads(config.get(ASSIGNED_PARTITIONS_KEY) or "[]")]


def consumer_group(connector: str) -> str:
    """Kafka Connect's sink group name."""
    return f"connect-{connector}"


def _put(sink_task: SinkTask, batch: list[SinkRecord], retry_timeout: float, name: str, task_id: int) -> int:
    """``put`` the batch; on :class:`RetriableException` give the same batch again after a
    growing back-off, for up to ``retry_timeout`` seconds, then fail. Returns the retries made."""
    deadline, delay, retries = time.monotonic() + retry_timeout, 0.5, 0
    while True:
        try:
            sink_task.put(batch)
            return retries
        except RetriableException as e:
            if time.monotonic() + delay > deadline:
                first = batch[0]
                raise ConnectException(
                    f"put() kept failing for {retry_timeout:.0f}s (copycat.put.retry.timeout.ms), first record "
                    f"at topic {first.topic} partition {first.kafka_partition} offset {first.kafka_offset}: {e}"
                ) from e
            log.warning("connector %s task %s: put() failed (%s); retrying in %.1fs", name, task_id, e, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
            retries += 1


class _Context(SinkTaskContext):
    """Routes records ``put`` refused (:meth:`report_error`) to the error handler, with the
    bytes they had in Kafka (``batch``: the messages of the batch being put)."""

    handler: ErrorHandler
    batch: dict[tuple[str, int, int], Any] = {}

    def report_error(self, record, error):
        msg = self.batch.get((record.topic, record.kafka_partition, record.kafka_offset))
        self.handler.handle("TASK_PUT", error, location=f"topic {record.topic} partition {record.kafka_partition} "
                            f"offset {record.kafka_offset}", key=msg.key() if msg else None,
                            value=msg.value() if msg else None, headers=(msg.headers() or []) if msg else list(record.headers),
                            kafka=(record.topic, record.kafka_partition, record.kafka_offset))


def run_sink_task(task: Mapping[str, Any], worker: WorkerConfig) -> dict:
    """Run one sink task config (``{"task": id, "config": {...}}``) for one bounded run.
    Returns the task result; failures are reported in it, not raised."""
    config = dict(task["config"])
    name = str(config["name"])
    stats = TaskStats(int(task["task"]), name, "sink")
    assigned = assigned_partitions(config)
    consumer: Consumer | None = None
    sink_task: SinkTask | None = None
    chain: TransformChain | None = None
    retry = RetryPolicy.from_config(config)
    put_retries = 0
    opened = False
    try:
        consumer_overrides = {k[len("consumer.override."):]: v for k, v in config.items() if k.startswith("consumer.override.")}
        consumer = Consumer(worker.consumer_config(consumer_group(name), consumer_overrides))
        handler = ErrorHandler(config, stats.task, worker)
        retry.call(handler.prepare, what=f"creating dead-letter topic {handler.dlq_topic}")
        cls = plugins.resolve_connector(str(config["connector.class"]))
        sink_task = cls().task_class()()
        ctx = _Context(config, assigned)
        ctx.handler = handler
        sink_task.initialize(ctx)
        sink_task.start(config)
        sink_task.open(assigned)
        opened = True
        key_conv = plugins.make_converter(config, worker.props, True)
        value_conv = plugins.make_converter(config, worker.props, False)
        chain = build_chain(config)

        start = dict(ctx.take_rewinds())
        if assigned and not getattr(cls, "offsets_in_destination", False):
            # Sinks without their own offsets resume from the consumer group; the others only
            # from the destination, so wiping the destination re-copies the topic.
            tps = [TopicPartition(t, p) for t, p in assigned]
            for tp in retry.call(lambda: consumer.committed(tps, timeout=30),
                                 what=f"reading the committed offsets of group {consumer_group(name)}"):
                if (tp.topic, tp.partition) not in start and tp.offset >= 0:
                    start[(tp.topic, tp.partition)] = tp.offset
        entries = {(t, p): stats.partition([t, p], start.get((t, p))) for t, p in assigned}

        positions: dict[tuple[str, int], int] = {tp: off for tp, off in start.items() if tp in set(assigned)}
        committed: dict[tuple[str, int], int] = {}

        def commit(final: bool):
            handler.flush()  # dead-lettered records are durable before the sink commits past them
            safe = sink_task.pre_commit(dict(positions), final=final)
            safe = {tp: off for tp, off in (safe or {}).items() if committed.get(tp) != off}
            if safe:
                consumer.commit(offsets=[TopicPartition(t, p, off) for (t, p), off in safe.items()], asynchronous=False)
                committed.update(safe)

        def dead_letter(msg, stage: str, error: Exception, class_name: str = "", transform: str = "") -> None:
            """Hand a record that failed on its way out to the error handler (raises unless tolerated)."""
            tp = (msg.topic(), msg.partition())
            where = f" in transform {transform!r} ({class_name})" if transform else ""
            handler.handle(stage, error, location=f"topic {tp[0]} partition {tp[1]} offset {msg.offset()}{where}",
                           key=msg.key(), value=msg.value(), headers=msg.headers() or [],
                           kafka=(tp[0], tp[1], msg.offset()), class_name=class_name)
            stats.errors = handler.count
            positions[tp] = msg.offset() + 1

        def convert_again(msg, stage: str, conv, data, error: Exception):
            """After a conversion failed with ``error``: retry it if retriable (a schema registry
            briefly unreachable); hand what still fails to ``dead_letter`` and return ``_FAILED``."""
            try:
                if not is_retriable(error):
                    raise error
                return retry.call(lambda: conv.to_connect_data(msg.topic(), data, msg.headers() or []), failed=error,
                                  what=stage, where=f"topic {msg.topic()} partition {msg.partition()} offset {msg.offset()}")
            except Exception as final:
                dead_letter(msg, stage, final, type(conv).__name__)
                return _FAILED

        pending = {tp for tp in assigned}
        if assigned:
            consumer.assign([TopicPartition(t, p, start.get((t, p), OFFSET_BEGINNING)) for t, p in assigned])
        max_records = int(config.get("copycat.run.max.records") or -1)
        max_ms = int(config.get("copycat.run.max.ms") or -1)
        stall_timeout = int(config.get("copycat.eof.timeout.ms") or 120000) / 1000.0
        flush_every = worker.offset_flush_interval_ms / 1000.0
        retry_timeout = int(config.get("copycat.put.retry.timeout.ms") or 0) / 1000.0
        started = last_commit = last_progress = time.monotonic()
        seen = 0
        while pending:
            now = time.monotonic()
            if max_ms >= 0 and (now - started) * 1000 >= max_ms or max_records >= 0 and seen >= max_records:
                log.info("connector %s task %s: run budget spent before the end of %s", name, stats.task, sorted(pending))
                break
            if now - last_progress > stall_timeout:
                raise RetriableException(
                    f"no record and no end of partition from {sorted(pending)} for "
                    f"copycat.eof.timeout.ms={int(stall_timeout * 1000)}: is the broker reachable?"
                )
            batch: list[SinkRecord] = []
            raw: dict[tuple[str, int, int], Any] = {}  # the batch's messages, for records put() refuses
            messages = consumer.consume(num_messages=500, timeout=0.1)
            if messages:
                last_progress = time.monotonic()
            for msg in messages:
                tp = (msg.topic(), msg.partition())
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if tp in pending:
                            pending.discard(tp)
                            consumer.pause([TopicPartition(*tp)])
                            positions.setdefault(tp, msg.offset())
                            entry = entries[tp]
                            if entry["offset_before"] is None:
                                entry["offset_before"] = msg.offset()
                        continue
                    if err.retriable():
                        continue
                    raise ConnectException(f"consumer error on {tp[0]}[{tp[1]}]: {err.str()}")
                if tp not in pending:
                    continue
                entry = entries[tp]
                if entry["offset_before"] is None:
                    entry["offset_before"] = msg.offset()
                headers = msg.headers() or []
                try:
                    key = key_conv.to_connect_data(tp[0], msg.key(), headers)
                except Exception as e:  # retried if retriable, else the handler decides
                    key = convert_again(msg, "KEY_CONVERTER", key_conv, msg.key(), e)
                    if key is _FAILED:
                        continue
                try:
                    value = value_conv.to_connect_data(tp[0], msg.value(), headers)
                except Exception as e:
                    value = convert_again(msg, "VALUE_CONVERTER", value_conv, msg.value(), e)
                    if value is _FAILED:
                        continue
                ts_type, ts = msg.timestamp()
                record = SinkRecord(
                    topic=tp[0], kafka_partition=tp[1], key_schema=key.schema, key=key.value,
                    value_schema=value.schema, value=value.value, timestamp=ts if ts_type else None,
                    headers=headers, kafka_offset=msg.offset(), timestamp_type=_TIMESTAMP_TYPES.get(ts_type),
                )
                if chain:
                    try:
                        record = chain.apply(record)
                    except TransformError as e:
                        if not is_retriable(e):
                            dead_letter(msg, "TRANSFORMATION", e.__cause__ or e, e.class_name, e.transform_alias)
                            continue
                        original = record
                        try:
                            record = retry.call(lambda: chain.apply(original), what=f"transform {e.transform_alias}",
                                                where=f"topic {tp[0]} partition {tp[1]} offset {msg.offset()}",
                                                failed=e)
                        except ConnectException as again:
                            dead_letter(msg, "TRANSFORMATION", again, e.class_name, e.transform_alias)
                            continue
                    if record is None:  # dropped by a transform: handled, its offset advances
                        stats.filtered += 1
                        positions[tp] = msg.offset() + 1
                        continue
                batch.append(record)
                raw[(tp[0], tp[1], msg.offset())] = msg
                positions[tp] = msg.offset() + 1
                entry["records"] += 1
                entry["bytes"] += len(msg.value() or b"") + len(msg.key() or b"")
                seen += 1
            if batch:
                ctx.batch = raw
                put_retries += _put(sink_task, batch, retry_timeout, name, stats.task)
                ctx.batch = {}
                stats.errors, stats.dead_lettered = handler.count, handler.dlq_count
            rewinds = ctx.take_rewinds()
            for tp, off in rewinds.items():
                consumer.seek(TopicPartition(tp[0], tp[1], off))
                positions[tp] = off
            if time.monotonic() - last_commit >= flush_every:
                commit(final=False)
                last_commit = time.monotonic()
        commit(final=True)
        for tp, entry in entries.items():
            entry["offset_after"] = committed.get(tp, entry["offset_before"])
            stats.topics[tp[0]] = stats.topics.get(tp[0], 0) + entry["records"]
        stats.errors, stats.dead_lettered = handler.count, handler.dlq_count
    except Exception as e:
        log.exception("connector %s task %s failed", name, stats.task)
        stats.fail(e)
    finally:
        if sink_task is not None:
            try:
                if opened:
                    sink_task.close(assigned)
                sink_task.stop()
            except Exception:
                log.exception("connector %s task %s: close/stop raised", name, stats.task)
        if chain is not None:
            chain.close()
        stats.retries = retry.retries + put_retries
        if consumer is not None:
            consumer.close()
    return stats.to_dict()
