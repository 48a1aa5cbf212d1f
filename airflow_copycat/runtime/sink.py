"""The sink loop: read assigned partitions to their end -> convert -> put -> commit.

A bounded run reads each assigned topic-partition from where the sink says
(``context.offset`` in ``open``, for sinks that keep offsets in the destination),
else from the consumer group's committed offset, else from the earliest offset,
up to the end of the partition as seen during the run (EOF events; the
partition is then paused, so later records wait for the next run). It calls
``pre_commit`` every ``offset.flush.interval.ms`` and once more with
``final=True`` at the end, and mirrors what ``pre_commit`` returned into the
consumer group ``connect-<name>`` so lag tools see the sink's progress.

One round of :class:`SinkRun`'s loop: **consume** up to 500 messages (10,000 for a task
that takes batches); **take**
the data messages of partitions not yet at their end (end-of-partition events
pause a partition) as a :class:`~..connect.sink_batch.SinkBatch`; **deliver**
it: to a task that overrides ``put_batch`` (and a connector without
transforms) as it is, else **convert** each message to a record, **transform**
it (``transforms=...``; a dropped record is handled, its offset advances) and
**put** the records; then apply the task's rewinds and **commit** when the
flush interval has passed. A message that fails conversion or a transform is
handled by ``errors.*`` (fail naming topic, partition and offset, or count,
log and dead-letter the original bytes). Reaching Kafka at start is retried
within ``errors.retry.timeout``; ``put()`` / ``put_batch()`` raising
:class:`RetriableException` within ``copycat.put.retry.timeout.ms``. Framework
keys are read once, typed and with their declared defaults, through
:class:`.settings.FrameworkSettings`.
"""

from __future__ import annotations

import json
import logging
import time
from functools import partial
from operator import is_, methodcaller
from typing import Any, Mapping

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ..connect.errors import ConnectException, RetriableException
from ..connect.records import SinkRecord
from ..connect.sink_batch import SinkBatch
from ..connect.task import SinkTask, SinkTaskContext
from . import plugins
from .errors import ErrorHandler
from .progress import TaskProgress
from .result import TaskStats
from .retry import RetryPolicy, is_retriable
from .settings import FrameworkSettings
from .spec import ConnectorSpec
from .transforms import TransformChain, TransformError, build_chain
from .worker import WorkerConfig

log = logging.getLogger("airflow_copycat.sink")

ASSIGNED_PARTITIONS_KEY = "copycat.assigned.partitions"
"""Sink task config key: JSON list of ``[topic, partition]`` the task owns (set by the planner)."""

CONSUME_BATCH = 500
"""Most messages one round consumes (and one ``put`` gets) for a task that takes records."""
CONSUME_BATCH_COLUMNS = 10_000
"""Most messages one round consumes for a task that takes batches: columns pay off on many rows."""

_ERROR, _IS_NONE = methodcaller("error"), partial(is_, None)


def assigned_partitions(config: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [(str(t), int(p)) for t, p in json.loads(config.get(ASSIGNED_PARTITIONS_KEY) or "[]")]


def consumer_group(connector: str) -> str:
    """Kafka Connect's sink group name."""
    return f"connect-{connector}"


def takes_batches(task: SinkTask) -> bool:
    """Whether ``task``'s class overrides :meth:`SinkTask.put_batch` (it then gets batches)."""
    return type(task).put_batch is not SinkTask.put_batch


class _Context(SinkTaskContext):
    """Routes records ``put`` refused (:meth:`report_error`) to the error handler, with the
    bytes they had in Kafka (``batch``: the batch being put; ``previous``: the one put before, which
    a task writing in the background may report from while the next is put). With ``durable`` (a sink that
    keeps its offsets in the destination and may commit them inside ``put``), the dead letter
    is acknowledged by Kafka before ``report_error`` returns, so no offset passes a record
    that is neither written nor dead-lettered."""

    handler: ErrorHandler
    batch: SinkBatch | None = None
    previous: SinkBatch | None = None
    durable: bool = False

    def report_error(self, record, error):
        topic, partition, offset = record.read_from
        batch, row = None, None
        for batch in (self.batch, self.previous):
            row = batch.row(topic, partition, offset) if batch is not None else None
            if row is not None:
                break
        self.handler.handle("TASK_PUT", error, location=f"topic {topic} partition {partition} offset {offset}",
                            key=batch.keys[row] if row is not None else None,
                            value=batch.values[row] if row is not None else None,
                            headers=batch.headers[row] if row is not None else list(record.headers),
                            kafka=(topic, partition, offset))
        if self.durable:
            self.handler.flush()


class SinkRun:
    """One bounded run of one sink task config (``{"task": id, "config": {...}}``); see the module
    docstring. :meth:`run` returns the task result; failures are reported in it, not raised."""

    def __init__(self, task: Mapping[str, Any], worker: WorkerConfig, progress: TaskProgress | None = None,
                 spec: ConnectorSpec | None = None):
        """``spec``: the group's :class:`~.spec.ConnectorSpec`, whose typed settings the run uses;
        ``None``: they are parsed from the task config."""
        self.worker = worker
        self.progress = progress
        self.config = dict(task["config"])
        self.settings = spec.settings if spec is not None and spec.settings is not None else \
            FrameworkSettings.of(self.config)
        self.name = self.settings.name
        self.stats = TaskStats(int(task["task"]), self.name, "sink")
        self.assigned = assigned_partitions(self.config)
        self.retry = RetryPolicy(self.settings.retry_timeout_ms, self.settings.retry_delay_max_ms)
        self.put_retry_s = self.settings.put_retry_timeout_ms / 1000.0
        self.max_records = self.settings.run_max_records
        self.max_ms = self.settings.run_max_ms
        self.stall_s = self.settings.eof_timeout_ms / 1000.0
        self.consumer: Consumer | None = None
        self.task: SinkTask | None = None
        self.chain: TransformChain | None = None
        self.opened = False
        self.put_retries = 0
        self.positions: dict[tuple[str, int], int] = {}  # next offset per partition, as handled so far
        self.committed: dict[tuple[str, int], int] = {}
        self.pending: set[tuple[str, int]] = set()  # partitions not yet at their end
        self.seen = 0  # records put

    def run(self) -> dict:
        try:
            self.start()
            if self.progress is not None:
                self.progress.watch(self.stats.progress)
            self.loop()
            self.finish()
        except Exception as e:
            log.exception("connector %s task %s failed", self.name, self.stats.task)
            self.stats.fail(e)
        finally:
            self.close()
        return self.stats.to_dict()

    # ------------------------------------------------------------ start and end

    def start(self) -> None:
        """Consumer, error handler, the task (initialize, start, open), converters, transforms,
        then where each partition starts, and the assignment."""
        config, name = self.config, self.name
        overrides = {k[len("consumer.override."):]: v for k, v in config.items() if k.startswith("consumer.override.")}
        self.consumer = Consumer(self.worker.consumer_config(consumer_group(name), overrides))
        self.handler = ErrorHandler(config, self.stats.task, self.worker, settings=self.settings)
        self.retry.call(self.handler.prepare, what=f"creating dead-letter topic {self.handler.dlq_topic}")
        cls = plugins.resolve_connector(str(config["connector.class"]))
        self.task = cls().task_class()()
        self.ctx = _Context(config, self.assigned)
        self.ctx.handler = self.handler
        self.ctx.durable = bool(getattr(cls, "offsets_in_destination", False))
        self.task.initialize(self.ctx)
        self.task.start(config)
        self.task.open(self.assigned)
        self.opened = True
        self.key_converter = plugins.make_converter(config, self.worker.props, True)
        self.value_converter = plugins.make_converter(config, self.worker.props, False)
        self.chain = build_chain(config)
        self.batches = takes_batches(self.task) and not self.chain

        start = dict(self.ctx.take_rewinds())
        if self.assigned and not getattr(cls, "offsets_in_destination", False):
            # Sinks without their own offsets resume from the consumer group; the others only
            # from the destination, so wiping the destination re-copies the topic.
            tps = [TopicPartition(t, p) for t, p in self.assigned]
            for tp in self.retry.call(lambda: self.consumer.committed(tps, timeout=30),
                                      what=f"reading the committed offsets of group {consumer_group(name)}"):
                if (tp.topic, tp.partition) not in start and tp.offset >= 0:
                    start[(tp.topic, tp.partition)] = tp.offset
        self.entries = {(t, p): self.stats.partition([t, p], start.get((t, p))) for t, p in self.assigned}
        self.positions = {tp: off for tp, off in start.items() if tp in set(self.assigned)}
        self.pending = set(self.assigned)
        if self.assigned:
            # a partition without a position starts at offset 0, not OFFSET_BEGINNING: no list-offsets query to
            # the broker (the embedded one once answered 96 for partition 0 of a new topic, in a test under load:
            # 96 records never reached the sink); a log that starts later is out of range at 0, and the consumer's
            # auto.offset.reset=earliest then takes its first offset
            self.consumer.assign([TopicPartition(t, p, start.get((t, p), 0)) for t, p in self.assigned])

    def finish(self) -> None:
        """The final commit, and what the run moved."""
        self.commit(final=True)
        for tp, entry in self.entries.items():
            entry["offset_after"] = self.committed.get(tp, entry["offset_before"])
            self.stats.topics[tp[0]] = self.stats.topics.get(tp[0], 0) + entry["records"]
        self.stats.errors, self.stats.dead_lettered = self.handler.count, self.handler.dlq_count

    def close(self) -> None:
        """Close and stop the task (also after a failure), the transforms and the consumer."""
        if self.task is not None:
            try:
                if self.opened:
                    self.task.close(self.assigned)
                self.task.stop()
            except Exception:
                log.exception("connector %s task %s: close/stop raised", self.name, self.stats.task)
        if self.chain is not None:
            self.chain.close()
        self.stats.retries = self.retry.retries + self.put_retries
        self.stats.metrics = dict(getattr(self.task, "metrics", None) or {})
        if self.consumer is not None:
            self.consumer.close()

    # ------------------------------------------------------------ the loop

    def loop(self) -> None:
        """Rounds of consume -> take -> deliver -> rewinds -> commit, until every partition is at
        its end or the run's budget is spent."""
        flush_every = self.worker.offset_flush_interval_ms / 1000.0
        round_size = CONSUME_BATCH_COLUMNS if self.batches else CONSUME_BATCH
        started = last_commit = last_progress = time.monotonic()
        while self.pending:
            now = time.monotonic()
            if self.max_ms >= 0 and (now - started) * 1000 >= self.max_ms \
                    or self.max_records >= 0 and self.seen >= self.max_records:
                log.info("connector %s task %s: run budget spent before the end of %s", self.name, self.stats.task,
                         sorted(self.pending))
                break
            if now - last_progress > self.stall_s:
                raise RetriableException(
                    f"no record and no end of partition from {sorted(self.pending)} for "
                    f"copycat.eof.timeout.ms={int(self.stall_s * 1000)}: is the broker reachable?")
            messages = self.consumer.consume(num_messages=round_size, timeout=0.1)
            if messages:
                last_progress = time.monotonic()
                batch = self.take(messages)
                if batch is not None:
                    self.deliver(batch)
            for tp, off in self.ctx.take_rewinds().items():
                self.consumer.seek(TopicPartition(tp[0], tp[1], off))
                self.positions[tp] = off
            if time.monotonic() - last_commit >= flush_every:
                self.commit(final=False)
                last_commit = time.monotonic()

    def take(self, messages: list) -> SinkBatch | None:
        """The data messages of one round as a batch (``None`` if there are none): end-of-partition
        events pause their partition, messages of a partition already at its end are left out,
        retriable consumer errors are skipped and others fail the run."""
        clean = all(map(_IS_NONE, map(_ERROR, messages)))  # no Python step per message
        batch = self._batch(messages) if clean else None
        if batch is None or len(self.pending) < len(self.assigned) \
                and not self.pending.issuperset((t, p) for t, p, _, _ in batch.runs()):
            data = []
            for msg in messages:
                tp = (msg.topic(), msg.partition())
                err = msg.error()
                if err is None:
                    if tp in self.pending:
                        data.append(msg)
                        entry = self.entries[tp]
                        if entry["offset_before"] is None:  # before its end of partition, in this round
                            entry["offset_before"] = msg.offset()
                elif err.code() == KafkaError._PARTITION_EOF:
                    self.end_of_partition(tp, msg.offset())
                elif not err.retriable():
                    raise ConnectException(f"consumer error on {tp[0]}[{tp[1]}]: {err.str()}")
            if not data:
                return None
            batch = self._batch(data)
        for topic, partition, start, _ in batch.runs():
            entry = self.entries[(topic, partition)]
            if entry["offset_before"] is None:
                entry["offset_before"] = batch.offsets[start]
        return batch

    def _batch(self, messages: list) -> SinkBatch:
        return SinkBatch.from_messages(messages, key_converter=self.key_converter,
                                       value_converter=self.value_converter, on_conversion_error=self.conversion_failed)

    def end_of_partition(self, tp: tuple[str, int], offset: int) -> None:
        if tp in self.pending:
            self.pending.discard(tp)
            self.consumer.pause([TopicPartition(*tp)])
            self.positions.setdefault(tp, offset)
            entry = self.entries[tp]
            if entry["offset_before"] is None:
                entry["offset_before"] = offset

    def deliver(self, batch: SinkBatch) -> None:
        """Hand the batch to the task (as it is, or as records), then move the positions past it
        and count what was put."""
        if self.batches:
            self.put(batch, batch)
            written = set(range(len(batch))).difference(batch.failed_rows()) if batch.failed_rows() else range(len(batch))
        else:
            records, written = self.convert_and_transform(batch)
            if records:
                self.put(records, batch)
        offsets, keys, values = batch.offsets, batch.keys, batch.values
        everything = len(written) == len(batch)
        for topic, partition, start, stop in batch.runs():
            tp = (topic, partition)
            self.positions[tp] = offsets[stop - 1] + 1
            entry = self.entries[tp]
            if everything:  # the common case, without a Python step per message
                count = stop - start
                size = sum(map(len, filter(None, values[start:stop]))) + sum(map(len, filter(None, keys[start:stop])))
            else:
                rows = [i for i in range(start, stop) if i in written]
                count = len(rows)
                size = sum(len(values[i] or b"") + len(keys[i] or b"") for i in rows)
            entry["records"] += count
            entry["bytes"] += size
            self.seen += count
        self.stats.errors, self.stats.dead_lettered = self.handler.count, self.handler.dlq_count

    def convert_and_transform(self, batch: SinkBatch) -> tuple[list[SinkRecord], set[int]]:
        """Each message's record, through the transforms, in order: the records to put and the
        rows they came from (a message that failed or was dropped has none)."""
        records, rows = [], set()
        for i in range(len(batch)):
            record = batch.record(i)
            if record is not None and self.chain:
                record = self.transform(batch, i, record)
            if record is not None:
                records.append(record)
                rows.add(i)
        return records, rows

    def transform(self, batch: SinkBatch, row: int, record: SinkRecord) -> SinkRecord | None:
        """The record through the chain; ``None`` when a transform dropped it (counted) or it failed
        and was handled. A retriable failure is retried within ``errors.retry.timeout``."""
        try:
            out = self.chain.apply(record)
        except TransformError as e:
            if not is_retriable(e):
                self.dead_letter(batch, row, "TRANSFORMATION", e.__cause__ or e, e.class_name, e.transform_alias)
                return None
            try:
                out = self.retry.call(lambda: self.chain.apply(record), what=f"transform {e.transform_alias}",
                                      where=self.where(batch, row), failed=e)
            except ConnectException as again:
                self.dead_letter(batch, row, "TRANSFORMATION", again, e.class_name, e.transform_alias)
                return None
        if out is None:
            self.stats.filtered += 1
        return out

    def conversion_failed(self, batch: SinkBatch, row: int, stage: str, converter, error: Exception):
        """A message failed to convert (the batch's hook): retry it if retriable (a schema registry
        briefly unreachable); hand what still fails to :meth:`dead_letter` and return ``None``."""
        data = batch.keys[row] if stage == "KEY_CONVERTER" else batch.values[row]
        try:
            if not is_retriable(error):
                raise error
            return self.retry.call(lambda: converter.to_connect_data(batch.topics[row], data, batch.headers[row]),
                                   failed=error, what=stage, where=self.where(batch, row))
        except Exception as final:
            self.dead_letter(batch, row, stage, final, type(converter).__name__)
            return None

    @staticmethod
    def where(batch: SinkBatch, row: int) -> str:
        return f"topic {batch.topics[row]} partition {batch.partitions[row]} offset {batch.offsets[row]}"

    def dead_letter(self, batch: SinkBatch, row: int, stage: str, error: Exception, class_name: str = "",
                    transform: str = "") -> None:
        """Hand a message that failed on its way out to the error handler (raises unless tolerated)."""
        where = f" in transform {transform!r} ({class_name})" if transform else ""
        topic, partition, offset = batch.topics[row], batch.partitions[row], batch.offsets[row]
        self.handler.handle(stage, error, location=f"{self.where(batch, row)}{where}", key=batch.keys[row],
                            value=batch.values[row], headers=batch.headers[row], kafka=(topic, partition, offset),
                            class_name=class_name)
        self.stats.errors = self.handler.count

    def put(self, payload: list[SinkRecord] | SinkBatch, batch: SinkBatch) -> None:
        """``put`` the records (or ``put_batch`` the batch); on :class:`RetriableException` give the
        same again after a growing back-off, for up to ``copycat.put.retry.timeout.ms``, then fail."""
        call = self.task.put_batch if isinstance(payload, SinkBatch) else self.task.put
        deadline, delay = time.monotonic() + self.put_retry_s, 0.5
        self.ctx.batch = batch
        try:
            while True:
                try:
                    call(payload)
                    return
                except RetriableException as e:
                    if time.monotonic() + delay > deadline:
                        first = self.where(batch, 0) if payload is batch else \
                            f"topic {payload[0].topic} partition {payload[0].kafka_partition} offset {payload[0].kafka_offset}"
                        raise ConnectException(
                            f"put() kept failing for {self.put_retry_s:.0f}s (copycat.put.retry.timeout.ms), first "
                            f"record at {first}: {e}") from e
                    log.warning("connector %s task %s: put() failed (%s); retrying in %.1fs", self.name,
                                self.stats.task, e, delay)
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)
                    self.put_retries += 1
        finally:
            self.ctx.batch, self.ctx.previous = None, batch

    def commit(self, final: bool) -> None:
        """``pre_commit`` the positions; mirror what it returned into the consumer group."""
        self.handler.flush()  # dead-lettered records are durable before the sink commits past them
        safe = self.task.pre_commit(dict(self.positions), final=final)
        safe = {tp: off for tp, off in (safe or {}).items() if self.committed.get(tp) != off}
        if safe:
            self.consumer.commit(offsets=[TopicPartition(t, p, off) for (t, p), off in safe.items()],
                                 asynchronous=False)
            self.committed.update(safe)


def run_sink_task(task: Mapping[str, Any], worker: WorkerConfig, *, progress: TaskProgress | None = None,
                  spec: ConnectorSpec | None = None) -> dict:
    """Run one sink task config (``{"task": id, "config": {...}}``) for one bounded run.
    Returns the task result; failures are reported in it, not raised. ``progress``: watches
    the run's counts once it has started; ``spec``: see :class:`SinkRun`."""
    return SinkRun(task, worker, progress, spec).run()
