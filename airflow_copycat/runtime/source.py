"""The source loop: poll -> convert -> produce -> commit offsets, for one bounded run.

Offsets are committed (written to the offset store) only after ``producer.flush()``
returned with every record up to them acknowledged; a delivery failure fails the
task without committing. The run ends when ``poll()`` returns ``None`` (caught
up) or the run's budget (``copycat.run.max.records`` / ``copycat.run.max.ms``)
is spent; offsets are committed every ``offset.flush.interval.ms`` and at the end.

Each record goes through the connector's transforms (``transforms=...``; a
dropped record's offset still advances) and converters. A record that fails
either is handled by ``errors.*`` (fail the task naming the record, or count,
log and dead-letter it). Retriable failures -- reaching Kafka at start, a
``poll()`` raising :class:`RetriableException` -- are retried within
``errors.retry.timeout``. With exactly-once delivery (:mod:`.transactions`) the
records and their offsets are committed in one Kafka transaction instead.

A windowed task config (``copycat.window.start`` / ``copycat.window.end``, an Airflow
backfill run) reads and commits its offsets under the window's namespace
(:func:`.windows.offsets_name`), never the connector's live offsets, and its
transactional id is derived from that namespace, so it never fences the live run.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Mapping

from confluent_kafka import Producer

from ..connect.assignment import canonical
from ..connect.batch import SourceBatch
from ..connect.errors import ConnectException
from ..connect.connector import task_partitions
from ..connect.dead_letters import encode_source_record, raw_data_headers
from ..connect.records import next_sequence
from ..connect.task import SourceTask, SourceTaskContext
from . import plugins
from . import transactions, windows
from .errors import ErrorHandler
from .batch_producer import BatchProducer, produce
from .kafka import admin_client, ensure_topic, existing_topics
from .offsets import OffsetStore, SnapshotOffsetReader, offset_store
from .result import TaskStats
from .retry import RetryPolicy, is_retriable
from .transforms import TransformChain, TransformError, build_chain
from .worker import WorkerConfig

log = logging.getLogger("airflow_copycat.source")

_FAILED = object()  # a record the error handler took


class _Context(SourceTaskContext):
    """Routes a task's bad records to the error handler. A tolerated record's offset is
    committed in the order the task reported it among its records (``skipped``)."""

    def __init__(self, config, reader, handler: ErrorHandler, kafka_client_config):
        super().__init__(config, reader, kafka_client_config)
        self._handler = handler
        self.skipped: list[tuple[int, Any, Any]] = []  # (sequence, partition, offset)

    def report_error(self, error, *, source_partition, source_offset, raw=None, location=""):
        self._handler.handle(
            "TASK_POLL", error, location=location or f"partition {source_partition} offset {source_offset}",
            value=raw, source_partition=source_partition, source_offset=source_offset,
            headers=raw_data_headers(self.config.get("topic")),
        )
        self.skipped.append((next_sequence(), source_partition, source_offset))


def _overrides(config: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}


def _transaction_interval_ms(config: Mapping[str, Any], worker: WorkerConfig) -> int | None:
    """How long a transaction stays open at most between commits (``interval`` boundary), or ``None``."""
    if str(config.get("transaction.boundary") or "poll") != "interval":
        return None
    return int(config.get("transaction.boundary.interval.ms") or worker.offset_flush_interval_ms)


def _reached(stats: TaskStats, limit: int = 400) -> str:
    """Where a task's partitions stand, for errors: ``partition -> offset`` reached so far."""
    text = ", ".join(f"{key} at {json.dumps(e['offset_after'])}" for key, e in stats.partitions.items())
    return "offsets reached: " + (text if len(text) <= limit else text[:limit] + "...")


def run_source_task(task: Mapping[str, Any], worker: WorkerConfig, *, store: OffsetStore | None = None) -> dict:
    """Run one source task config (``{"task": id, "config": {...}}``) for one bounded run.

    Returns the task result (see :mod:`.result`); a failure is reported in the
    result (``status: failed``), never raised, so one task's failure does not hide
    the others' results.
    """
    config = dict(task["config"])
    name = str(config["name"])
    stats = TaskStats(int(task["task"]), name, "source")
    store = store or offset_store(worker)
    producer: Producer | None = None
    source_task: SourceTask | None = None
    txn: transactions.SourceTransaction | None = None
    chain: TransformChain | None = None
    retry = RetryPolicy.from_config(config)
    final_commit: list = []  # commit(), once the loop is set up: a failed run still commits what Kafka acknowledged
    try:
        offsets_name = windows.offsets_name(config)  # the live offsets' name, or the window's own
        if offsets_name != name:
            log.info("connector %s task %s: windowed run, offsets kept under %s", name, stats.task, offsets_name)
        producer_cfg = worker.producer_config(_overrides(config, "producer.override."))
        if transactions.exactly_once(config, worker):
            tid = transactions.transactional_id(worker, offsets_name, stats.task)
            txn = transactions.SourceTransaction(producer_cfg, tid, store, offsets_name,
                                                 interval_ms=_transaction_interval_ms(config, worker))
            producer = txn.producer
            # before reading offsets: fences earlier attempts and aborts their open transaction
            retry.call(txn.start, what=f"registering transactional.id {tid}")
            stats.transactional_id = tid
        else:
            producer = Producer(producer_cfg)
        handler = ErrorHandler(config, stats.task, worker, producer)
        retry.call(handler.prepare, what=f"creating dead-letter topic {handler.dlq_topic}")
        committed = retry.call(lambda: store.read(offsets_name),
                               what=f"reading the offsets of {offsets_name} from {store.describe()}")
        retry.call(store.prepare_writes, what=f"preparing offset writes to {store.describe()}")
        for partition in task_partitions(config):
            stats.partition(partition, committed.get(canonical(partition), {}).get("offset"))
        pending: dict[str, tuple[Any, Any]] = {}
        last: list[Any] = [None, None]  # the last partition object seen and its stats entry

        def mark(partition, offset) -> dict | None:
            """Record ``offset`` as the partition's next committable offset; return its stats entry."""
            if partition is None:
                return None
            if partition is not last[0]:  # tasks usually reuse one partition object per partition
                key = canonical(partition)
                if key not in stats.partitions:
                    stats.partition(partition, committed.get(key, {}).get("offset"))
                last[0], last[1] = partition, (key, stats.partitions[key])
            key, entry = last[1]
            entry["offset_after"] = offset
            pending[key] = (partition, offset)
            return entry

        cls = plugins.resolve_connector(str(config["connector.class"]))
        ctx = _Context(config, SnapshotOffsetReader(committed), handler,
                       worker.client_config() if getattr(cls, "reads_kafka", False) else None)
        source_task = cls().task_class()()
        source_task.initialize(ctx)
        source_task.start(config)
        key_conv = plugins.make_converter(config, worker.props, True)
        value_conv = plugins.make_converter(config, worker.props, False)
        chain = build_chain(config)

        delivery_errors: list[str] = []

        def on_delivery(err, msg):
            if err is not None:
                delivery_errors.append(f"{msg.topic()}: {err.str()}")

        committed_at = [0, 0]  # records produced and dead-lettered when the last transaction committed

        def commit():
            if txn is not None:  # records, dead letters and offsets commit together or not at all
                if delivery_errors:
                    raise ConnectException(f"delivery failed: {delivery_errors[0]}; the transaction is aborted")
                if not pending and committed_at == [produced, handler.dlq_count]:
                    return  # nothing since the last commit: no empty transaction
                txn.commit(list(pending.values()))
                committed_at[:] = [produced, handler.dlq_count]
                pending.clear()
                source_task.commit()
                return
            handler.flush()
            left = producer.flush(120)
            if left or delivery_errors:
                why = f"{left} record(s) not acknowledged" if left else f"delivery failed: {delivery_errors[0]}"
                raise ConnectException(why + "; offsets were not committed past them")
            if pending:
                store.write(offsets_name, list(pending.values()))
                pending.clear()
            source_task.commit()

        final_commit.append(commit)

        def dead_letter(stage: str, error: Exception, record, class_name: str = "", transform: str = "") -> None:
            """Hand a record that failed on its way in to the error handler (raises unless tolerated)."""
            location = f"{json.dumps(record.source_partition)} offset {json.dumps(record.source_offset)}"
            if transform:
                location += f" in transform {transform!r} ({class_name})"
            key, value, ours = encode_source_record(record)
            handler.handle(stage, error, location=location, key=key, value=value, headers=list(record.headers) + ours,
                           source_partition=record.source_partition, source_offset=record.source_offset,
                           class_name=class_name)
            stats.errors = handler.count
            mark(record.source_partition, record.source_offset)

        def convert_again(stage: str, conv, record, original, schema, data, error: Exception):
            """After a conversion of ``record`` failed with ``error``: retry it if retriable (a schema
            registry briefly unreachable); hand what still fails to :func:`dead_letter` (``original``,
            the record before transforms) and return ``_FAILED``."""
            try:
                if not is_retriable(error):
                    raise error
                return retry.call(lambda: conv.from_connect_data(record.topic, schema, data), failed=error,
                                  what=f"{stage} for topic {record.topic}", where=json.dumps(record.source_partition))
            except Exception as final:
                dead_letter(stage, final, original, type(conv).__name__)
                return _FAILED

        def poll():
            try:
                return source_task.poll()
            except Exception as e:
                if not is_retriable(e):
                    raise
                return retry.call(source_task.poll, what=f"poll() of connector {name} task {stats.task}",
                                  where=_reached(stats), failed=e)

        admin = admin_client(worker.admin_config())
        known_topics = retry.call(lambda: existing_topics(admin), what="listing topics")
        new_partitions = int(config.get("topic.creation.default.partitions") or 1)
        new_rf = int(config.get("topic.creation.default.replication.factor") or -1)
        max_records = int(config.get("copycat.run.max.records") or -1)
        max_ms = int(config.get("copycat.run.max.ms") or -1)
        flush_every = worker.offset_flush_interval_ms / 1000.0
        boundary_poll = txn is not None and str(config.get("transaction.boundary") or "poll") == "poll"
        if txn is not None and not boundary_poll and config.get("transaction.boundary.interval.ms"):
            flush_every = int(config["transaction.boundary.interval.ms"]) / 1000.0
        last_commit = started = time.monotonic()
        produced = 0
        topics = stats.topics

        def fatal(e: Exception) -> Exception:
            return txn.error("producing", e) if txn is not None else e

        def send(record) -> None:
            """One record: transform, convert, produce (the per-record path, and every batch's fallback)."""
            nonlocal produced
            original = record  # what the connector made: what a dead letter keeps, for a replay to rebuild
            if chain:
                try:
                    record = chain.apply(record)
                except TransformError as e:
                    if is_retriable(e):
                        try:
                            record = retry.call(lambda: chain.apply(original), what=f"transform {e.transform_alias}",
                                                where=json.dumps(original.source_partition), failed=e)
                        except ConnectException as again:
                            dead_letter("TRANSFORMATION", again, original, e.class_name, e.transform_alias)
                            return
                    else:
                        dead_letter("TRANSFORMATION", e.__cause__ or e, original, e.class_name, e.transform_alias)
                        return
                if record is None:  # dropped by a transform: handled, so its offset advances
                    stats.filtered += 1
                    mark(original.source_partition, original.source_offset)
                    return
            if record.topic not in known_topics:
                ensure_topic(admin, record.topic, partitions=new_partitions, replication_factor=new_rf, known=known_topics)
            try:
                key = key_conv.from_connect_data(record.topic, record.key_schema, record.key)
            except Exception as e:  # conversion failure: retried if retriable, else the handler decides
                key = convert_again("KEY_CONVERTER", key_conv, record, original, record.key_schema, record.key, e)
                if key is _FAILED:
                    return
            try:
                value = value_conv.from_connect_data(record.topic, record.value_schema, record.value)
            except Exception as e:
                value = convert_again("VALUE_CONVERTER", value_conv, record, original, record.value_schema,
                                      record.value, e)
                if value is _FAILED:
                    return
            kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
            if record.kafka_partition is not None:
                kwargs["partition"] = record.kafka_partition
            if record.timestamp is not None:
                kwargs["timestamp"] = record.timestamp
            if record.headers:
                kwargs["headers"] = list(record.headers)
            refused = produce(producer, record.topic, kwargs, fatal)
            if refused is not None:
                dead_letter("KAFKA_PRODUCE", refused, original, "Producer")
                return
            producer.poll(0)
            produced += 1
            entry = mark(record.source_partition, record.source_offset)
            if entry is not None:
                entry["records"] += 1
                entry["bytes"] += len(value or b"") + len(key or b"")
            topics[record.topic] = topics.get(record.topic, 0) + 1

        batch_step = BatchProducer(key_conv, value_conv, chain, producer, on_delivery, fatal)

        def send_batch(item: SourceBatch) -> None:
            """One batch: encoded and produced in columns where it can be, else row by row through send()."""
            nonlocal produced
            if item.topic not in known_topics:
                ensure_topic(admin, item.topic, partitions=new_partitions, replication_factor=new_rf,
                             known=known_topics)
            count, nbytes, filtered = batch_step.send(item, send, dead_letter)
            produced += count
            stats.filtered += filtered
            entry = mark(item.source_partition, item.source_offset)  # after every row was handed over
            if entry is not None:
                entry["records"] += count
                entry["bytes"] += nbytes
            if count:
                topics[item.topic] = topics.get(item.topic, 0) + count

        while True:
            if max_records >= 0 and produced >= max_records:
                log.info("connector %s task %s: record budget of %s reached", name, stats.task, max_records)
                break
            if max_ms >= 0 and (time.monotonic() - started) * 1000 >= max_ms:
                log.info("connector %s task %s: time budget of %s ms reached", name, stats.task, max_ms)
                break
            batch = poll()
            skipped, ctx.skipped = ctx.skipped, []
            if batch is None:
                for _, partition, offset in skipped:
                    mark(partition, offset)
                break
            if not batch and not skipped:
                time.sleep(0.05)
            for item in batch:
                sequence = item.sequence
                while skipped and skipped[0][0] < sequence:  # a tolerated record the task skipped before this one
                    _, partition, offset = skipped.pop(0)
                    mark(partition, offset)
                if isinstance(item, SourceBatch):
                    send_batch(item)
                else:
                    send(item)
            for _, partition, offset in skipped:
                mark(partition, offset)
            stats.errors = handler.count
            stats.dead_lettered = handler.dlq_count
            if (boundary_poll and pending) or time.monotonic() - last_commit >= flush_every:
                commit()
                last_commit = time.monotonic()
        commit()
        stats.errors, stats.dead_lettered = handler.count, handler.dlq_count
    except Exception as e:
        log.exception("connector %s task %s failed", name, stats.task)
        stats.fail(e)
        if final_commit and txn is None:
            # As Kafka Connect's final offset commit: the records Kafka acknowledged before the
            # failure stay done, so the rerun does not send them again (commit() writes nothing
            # unless every record produced so far was acknowledged).
            try:
                final_commit[0]()
            except Exception as again:  # noqa: BLE001 -- the run's own error is the one to report
                log.warning("connector %s task %s: offsets after the failure not committed: %s", name, stats.task,
                            again)
    finally:
        if source_task is not None:
            try:
                source_task.stop()
            except Exception:  # stop() must not hide the run's outcome
                log.exception("connector %s task %s: stop() raised", name, stats.task)
        if chain is not None:
            chain.close()
        if txn is not None:
            txn.close()  # aborts what a failed run left open
            stats.transactions = txn.commits
        elif producer is not None:
            producer.flush(30)
        store.close()
        stats.retries = retry.retries
        stats.duration_s = None
    return stats.to_dict()
