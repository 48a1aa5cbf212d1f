"""The source loop: poll -> transform -> convert -> produce -> commit offsets, for one bounded run.

:func:`run_source_task` runs one task config as a :class:`SourceRun`, whose
steps are named for what they do:

* ``start`` -- the producer (transactional for exactly-once), the error handler,
  the committed offsets, the connector's task, converters and transforms;
* ``poll`` -- the task's next records and batches (retried when retriable);
* ``send`` -- one record through transforms, converters and the producer (the
  per-record path); ``send_batch`` -- one :class:`~..connect.batch.SourceBatch`
  in columns (:mod:`.batch_producer`), whose rows fall back to ``send``. Both run
  on the run's sending thread (:mod:`.sender`), in the task's order, while the
  task's thread polls for more; the task's own methods stay on the task's thread;
* ``mark`` -- an offset becomes committable once everything before it was handed
  to the producer, dead-lettered or dropped by a transform;
* ``commit`` -- offsets are written to the offset store only after
  ``producer.flush()`` returned with every record up to them acknowledged (with
  exactly-once, in the same Kafka transaction as the records); a delivery
  failure fails the task without committing.

The run ends when ``poll()`` returns ``None`` (caught up) or the run's budget
(``copycat.run.max.records`` / ``copycat.run.max.ms``) is spent; offsets are
committed every ``offset.flush.interval.ms`` (or per poll / per
``transaction.boundary.interval.ms`` with exactly-once) and at the end. Framework
keys are read once, typed, through :class:`.settings.FrameworkSettings`.

A record that fails a transform or a converter is handled by ``errors.*`` (fail
the task naming the record, or count, log and dead-letter it -- the record as
the connector made it, before transforms). Retriable failures -- reaching Kafka
at start, a ``poll()`` raising :class:`RetriableException`, a schema registry
briefly away -- are retried within ``errors.retry.timeout``.

A windowed task config (``copycat.window.start`` / ``copycat.window.end``, an Airflow
backfill run) reads and commits its offsets under the window's namespace
(:func:`.windows.offsets_name`), never the connector's live offsets, and its
transactional id is derived from that namespace, so it never fences the live run.
"""

from __future__ import annotations

import json
import logging
import time
from functools import partial
from typing import Any

from confluent_kafka import Producer

from ..connect.assignment import canonical
from ..connect.batch import SourceBatch
from ..connect.connector import task_partitions
from ..connect.errors import ConnectException
from ..connect.records import next_sequence
from ..connect.task import SourceTask, SourceTaskContext
from ..converters.dead_letters import encode_source_record, raw_data_headers
from . import plugins, transactions, windows
from .batch_producer import BatchProducer, produce, produce_options
from .errors import ErrorHandler
from .kafka import admin_client, ensure_topic, existing_topics
from .offsets import OffsetStore, SnapshotOffsetReader, offset_store
from .progress import TaskProgress
from .result import TaskStats
from .retry import RetryPolicy, is_retriable
from .sender import Sender
from .settings import FrameworkSettings
from .spec import ConnectorSpec
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


def run_source_task(task: dict, worker: WorkerConfig, *, store: OffsetStore | None = None,
                    progress: TaskProgress | None = None, spec: ConnectorSpec | None = None) -> dict:
    """Run one source task config (``{"task": id, "config": {...}}``) for one bounded run.
    ``spec``: its group's :class:`~.spec.ConnectorSpec`, whose settings and offsets' name the run
    uses; ``None``: both are derived from the task config.

    Returns the task result (see :mod:`.result`); a failure is reported in the
    result (``status: failed``), never raised, so one task's failure does not hide
    the others' results. ``progress``: watches the run's counts once it has started.
    """
    return SourceRun(task, worker, store, progress, spec).run()


class SourceRun:
    """One bounded run of one source task; see the module docstring for its steps."""

    def __init__(self, task: dict, worker: WorkerConfig, store: OffsetStore | None = None,
                 progress: TaskProgress | None = None, spec: ConnectorSpec | None = None):
        self.config = dict(task["config"])
        self.progress = progress
        self.spec = spec
        self.settings = spec.settings if spec is not None and spec.settings is not None else \
            FrameworkSettings.of(self.config)
        self.name = self.settings.name
        self.worker = worker
        self.stats = TaskStats(int(task["task"]), self.name, "source")
        self.store = store or offset_store(worker)
        self.retry = RetryPolicy(self.settings.retry_timeout_ms, self.settings.retry_delay_max_ms)
        self.producer: Producer | None = None
        self.txn: transactions.SourceTransaction | None = None
        self.task: SourceTask | None = None
        self.chain: TransformChain | None = None
        self.sender: Sender | None = None
        self.admin = None  # an AdminClient, made by ensure_topic() when one is needed
        self._holding = False  # rows of a batch without row offsets are being sent: mark() records no offset
        self.started = False  # start() completed: commit() may run
        self.pending: dict[str, tuple[Any, Any]] = {}  # canonical partition -> (partition, next offset)
        self.produced = 0
        self.delivery_errors: list[str] = []
        self._committed_at = (0, 0)  # records produced and dead-lettered at the last transaction's commit
        self._last: tuple[Any, Any] = (None, None)  # the last partition object marked, and its stats entry

    # ---------------------------------------------------------------- the run

    def run(self) -> dict:
        stats = self.stats
        try:
            self.start()
            if self.progress is not None:
                self.progress.watch(stats.progress)
            self.loop()
            self.commit()
            stats.errors, stats.dead_lettered = self.handler.count, self.handler.dlq_count
        except Exception as e:
            log.exception("connector %s task %s failed", self.name, stats.task)
            stats.fail(e)
            if self.started and self.txn is None:
                # As Kafka Connect's final offset commit: the records Kafka acknowledged before the
                # failure stay done, so the rerun does not send them again (commit() writes nothing
                # unless every record produced so far was acknowledged).
                try:
                    self.commit(after_failure=True)
                except Exception as again:  # noqa: BLE001 -- the run's own error is the one to report
                    log.warning("connector %s task %s: offsets after the failure not committed: %s", self.name,
                                stats.task, again)
        finally:
            self.close()
        return stats.to_dict()

    def start(self) -> None:
        """Producer, error handler, committed offsets, the task, converters and transforms."""
        config, worker, stats, retry, store, s = self.config, self.worker, self.stats, self.retry, self.store, \
            self.settings
        # the live offsets' name, or the window's own
        self.offsets_name = self.spec.offsets_name if self.spec is not None else windows.offsets_name(config)
        if self.offsets_name != self.name:
            log.info("connector %s task %s: windowed run, offsets kept under %s", self.name, stats.task,
                     self.offsets_name)
        overrides = {k[len("producer.override."):]: v for k, v in config.items() if k.startswith("producer.override.")}
        # delivery reports for failures only: the run learns of success from flush() / the transaction's commit
        producer_cfg = worker.producer_config({"delivery.report.only.error": True, **overrides})
        producer_cfg["on_delivery"] = self.on_delivery  # the producer's own: no callback object per record
        if s.exactly_once_required or worker.exactly_once_source:  # transactions.exactly_once, typed
            tid = transactions.transactional_id(worker, self.offsets_name, stats.task)
            interval = None if s.transaction_boundary != "interval" else \
                (s.transaction_interval_ms or worker.offset_flush_interval_ms)
            self.txn = transactions.SourceTransaction(producer_cfg, tid, store, self.offsets_name,
                                                      interval_ms=interval)
            self.producer = self.txn.producer
            # before reading offsets: fences earlier attempts and aborts their open transaction
            retry.call(self.txn.start, what=f"registering transactional.id {tid}")
            stats.transactional_id = tid
        else:
            self.producer = Producer(producer_cfg)
        self.handler = ErrorHandler(config, stats.task, worker, self.producer, settings=s)
        retry.call(self.handler.prepare, what=f"creating dead-letter topic {self.handler.dlq_topic}")
        self.committed = retry.call(lambda: store.read(self.offsets_name),
                                    what=f"reading the offsets of {self.offsets_name} from {store.describe()}")
        retry.call(store.prepare_writes, what=f"preparing offset writes to {store.describe()}")
        for partition in task_partitions(config):
            stats.partition(partition, self.committed.get(canonical(partition), {}).get("offset"))
        cls = plugins.resolve_connector(str(config["connector.class"]))
        self.context = _Context(config, SnapshotOffsetReader(self.committed), self.handler,
                                worker.client_config() if getattr(cls, "reads_kafka", False) else None)
        self.task = cls().task_class()()
        self.task.initialize(self.context)
        self.task.start(config)
        self.key_converter = plugins.make_converter(config, worker.props, True)
        self.value_converter = plugins.make_converter(config, worker.props, False)
        self.chain = build_chain(config)
        self.batches = BatchProducer(self.key_converter, self.value_converter, self.chain, self.producer,
                                     self.fatal)
        # the producer's metadata: it is connected already, a new admin client would connect first
        self.known_topics = retry.call(lambda: existing_topics(self.producer), what="listing topics")
        self.sender = Sender(f"copycat-send-{self.name}-{stats.task}")
        self.started = True

    def loop(self) -> None:
        """Poll and send until the task is caught up or the run's budget is spent, committing on the way."""
        s, stats, handler = self.settings, self.stats, self.handler
        flush_every = self.worker.offset_flush_interval_ms / 1000.0
        commit_every_poll = self.txn is not None and s.transaction_boundary == "poll"
        if self.txn is not None and not commit_every_poll and s.transaction_interval_ms:
            flush_every = s.transaction_interval_ms / 1000.0
        last_commit = started = time.monotonic()
        while True:
            if s.run_max_records >= 0:
                self.sender.drain()  # a record budget counts what was sent: poll no further ahead
            if 0 <= s.run_max_records <= self.produced:
                log.info("connector %s task %s: record budget of %s reached", self.name, stats.task,
                         s.run_max_records)
                break
            if s.run_max_ms >= 0 and (time.monotonic() - started) * 1000 >= s.run_max_ms:
                log.info("connector %s task %s: time budget of %s ms reached", self.name, stats.task, s.run_max_ms)
                break
            items = self.poll()
            skipped, self.context.skipped = self.context.skipped, []
            submit = self.sender.submit  # sent on the sending thread, in this order, while the task polls on
            if items is None:
                for _, partition, offset in skipped:
                    submit(partial(self.mark, partition, offset))
                break
            if not items and not skipped:
                time.sleep(0.05)
            records: list = []  # consecutive records go as one step: a hand-over between threads per
            # record costs more than most records' conversion (each waits for the other thread's turn)
            for item in items:
                while skipped and skipped[0][0] < item.sequence:  # a tolerated record the task skipped before it
                    records = self._submit_records(records)
                    _, partition, offset = skipped.pop(0)
                    submit(partial(self.mark, partition, offset))
                if isinstance(item, SourceBatch):
                    records = self._submit_records(records)
                    submit(partial(self.send_batch, item))
                else:
                    records.append(item)
            self._submit_records(records)
            for _, partition, offset in skipped:
                submit(partial(self.mark, partition, offset))
            stats.errors, stats.dead_lettered = handler.count, handler.dlq_count
            if commit_every_poll:
                self.sender.drain()
            if (commit_every_poll and self.pending) or time.monotonic() - last_commit >= flush_every:
                self.commit()
                last_commit = time.monotonic()

    def close(self) -> None:
        stats = self.stats
        if self.sender is not None:
            self.sender.close()
        if self.task is not None:
            try:
                self.task.stop()
            except Exception:  # stop() must not hide the run's outcome
                log.exception("connector %s task %s: stop() raised", self.name, stats.task)
        if self.chain is not None:
            self.chain.close()
        if self.txn is not None:
            self.txn.close()  # aborts what a failed run left open
            stats.transactions = self.txn.commits
        elif self.producer is not None:
            self.producer.flush(30)
        self.store.close()
        stats.retries = self.retry.retries
        stats.metrics = dict(getattr(self.task, "metrics", None) or {})  # what the task counted (as a sink's)
        stats.duration_s = None

    def _submit_records(self, records: list) -> list:
        """Hand ``records`` (in the task's order) to the sending thread as one step; returns a new empty
        list for the next run of records."""
        if records:
            self.sender.submit(partial(self.send_all, records))
            return []
        return records

    # ---------------------------------------------------------------- the steps

    def poll(self):
        try:
            return self.task.poll()
        except Exception as e:
            if not is_retriable(e):
                raise
            return self.retry.call(self.task.poll, what=f"poll() of connector {self.name} task {self.stats.task}",
                                   where=_reached(self.stats), failed=e)

    def send_all(self, records: list) -> None:
        """:meth:`send` of each record, in order (a failure stops there: the later ones are not sent)."""
        send = self.send
        for record in records:
            send(record)

    def send(self, record) -> None:
        """One record: transform, convert, produce (the per-record path, and every batch's fallback)."""
        original = record  # what the connector made: what a dead letter keeps, for a replay to rebuild
        chain = self.chain
        if chain:
            try:
                record = chain.apply(record)
            except TransformError as e:
                if not is_retriable(e):
                    self.dead_letter("TRANSFORMATION", e.__cause__ or e, original, e.class_name, e.transform_alias)
                    return
                try:
                    record = self.retry.call(lambda: chain.apply(original), what=f"transform {e.transform_alias}",
                                             where=json.dumps(original.source_partition), failed=e)
                except ConnectException as again:
                    self.dead_letter("TRANSFORMATION", again, original, e.class_name, e.transform_alias)
                    return
            if record is None:  # dropped by a transform: handled, so its offset advances
                self.stats.filtered += 1
                self.mark(original.source_partition, original.source_offset)
                return
        topic = record.topic
        if topic not in self.known_topics:
            self.ensure_topic(topic)
        key = self.convert("KEY_CONVERTER", self.key_converter, record, original, record.key_schema, record.key)
        if key is _FAILED:
            return
        value = self.convert("VALUE_CONVERTER", self.value_converter, record, original, record.value_schema,
                             record.value)
        if value is _FAILED:
            return
        kwargs = dict(produce_options(record), key=key, value=value)
        refused = produce(self.producer, topic, kwargs, self.fatal)
        if refused is not None:
            self.dead_letter("KAFKA_PRODUCE", refused, original, "Producer")
            return
        self.produced += 1
        if self.produced % 1000 == 0:  # serves delivery reports (failures only)
            self.producer.poll(0)
        entry = self.mark(record.source_partition, record.source_offset)
        if entry is not None:
            entry["records"] += 1
            entry["bytes"] += len(value or b"") + len(key or b"")
        topics = self.stats.topics
        topics[topic] = topics.get(topic, 0) + 1

    def send_batch(self, batch: SourceBatch) -> None:
        """One batch: transformed, encoded and produced in columns where it can be, else row by row
        through :meth:`send`; its offset is marked once every row was handed over. A batch without
        ``row_offsets`` gives each of its records the batch's offset: while its rows go, no offset of it
        is marked, so a failure half-way commits nothing past the batch before."""
        self._holding = batch.row_offsets is None
        try:
            topic, count, nbytes, filtered = self.batches.send(batch, self.send, self.dead_letter, self.ensure_topic)
        finally:
            self._holding = False
        self.produced += count
        self.stats.filtered += filtered
        entry = self.mark(batch.source_partition, batch.source_offset)
        if entry is not None:
            entry["records"] += count
            entry["bytes"] += nbytes
        if count:
            topics = self.stats.topics
            topics[topic] = topics.get(topic, 0) + count

    def convert(self, stage: str, converter, record, original, schema, data):
        """Key or value bytes of ``record``; a failure is retried if retriable (a schema registry briefly
        unreachable), and what still fails goes to :meth:`dead_letter` (``original``, the record before
        transforms) and gives ``_FAILED``."""
        try:
            return converter.from_connect_data(record.topic, schema, data)
        except Exception as error:  # noqa: BLE001 -- retried if retriable, else the handler decides
            try:
                if not is_retriable(error):
                    raise
                return self.retry.call(lambda: converter.from_connect_data(record.topic, schema, data),
                                       failed=error, what=f"{stage} for topic {record.topic}",
                                       where=json.dumps(record.source_partition))
            except Exception as final:
                self.dead_letter(stage, final, original, type(converter).__name__)
                return _FAILED

    def dead_letter(self, stage: str, error: Exception, record, class_name: str = "", transform: str = "") -> None:
        """Hand a record that failed on its way in to the error handler (raises unless tolerated)."""
        location = f"{json.dumps(record.source_partition)} offset {json.dumps(record.source_offset)}"
        if transform:
            location += f" in transform {transform!r} ({class_name})"
        key, value, ours = encode_source_record(record)
        self.handler.handle(stage, error, location=location, key=key, value=value,
                            headers=list(record.headers) + ours, source_partition=record.source_partition,
                            source_offset=record.source_offset, class_name=class_name)
        self.stats.errors = self.handler.count
        self.mark(record.source_partition, record.source_offset)

    def ensure_topic(self, topic: str) -> None:
        if topic in self.known_topics:
            return
        if self.admin is None:  # made when a record first goes to a topic that does not exist yet
            self.admin = admin_client(self.worker.admin_config())
        ensure_topic(self.admin, topic, partitions=self.settings.new_topic_partitions,
                     replication_factor=self.settings.new_topic_replication_factor, known=self.known_topics)

    def mark(self, partition, offset) -> dict | None:
        """Record ``offset`` as the partition's next committable offset; return its stats entry."""
        if partition is None:
            return None
        if partition is not self._last[0]:  # tasks usually reuse one partition object per partition
            key = canonical(partition)
            if key not in self.stats.partitions:
                self.stats.partition(partition, self.committed.get(key, {}).get("offset"))
            self._last = (partition, (key, self.stats.partitions[key]))
        key, entry = self._last[1]
        if not self._holding:
            entry["offset_after"] = offset
            self.pending[key] = (partition, offset)
        return entry

    def commit(self, *, after_failure: bool = False) -> None:
        """Commit the marked offsets once every record before them is acknowledged (see the module docstring);
        ``after_failure``: the run failed, commit what was sent before the failure."""
        self.sender.drain(raise_error=not after_failure)
        if self.txn is not None:  # records, dead letters and offsets commit together or not at all
            if self.delivery_errors:
                raise ConnectException(f"delivery failed: {self.delivery_errors[0]}; the transaction is aborted")
            now = (self.produced, self.handler.dlq_count)
            if not self.pending and self._committed_at == now:
                return  # nothing since the last commit: no empty transaction
            self.txn.commit(list(self.pending.values()))
            self._committed_at = now
            self.pending.clear()
            if not after_failure:  # after a failure only part of what poll() returned is committed
                self.task.commit()
            return
        self.handler.flush()
        left = self.producer.flush(120)
        if left or self.delivery_errors:
            why = f"{left} record(s) not acknowledged" if left else f"delivery failed: {self.delivery_errors[0]}"
            raise ConnectException(why + "; offsets were not committed past them")
        if self.pending:
            self.store.write(self.offsets_name, list(self.pending.values()))
            self.pending.clear()
        if not after_failure:  # after a failure only part of what poll() returned is committed
            self.task.commit()

    # ---------------------------------------------------------------- producer callbacks

    def on_delivery(self, err, msg) -> None:
        if err is not None:
            self.delivery_errors.append(f"{msg.topic()}: {err.str()}")

    def fatal(self, e: Exception) -> Exception:
        """The error a fatal producer error ends the run with (the transaction's, with exactly-once)."""
        return self.txn.error("producing", e) if self.txn is not None else e


def _reached(stats: TaskStats, limit: int = 400) -> str:
    """Where a task's partitions stand, for errors: ``partition -> offset`` reached so far."""
    text = ", ".join(f"{key} at {json.dumps(e['offset_after'])}" for key, e in list(stats.partitions.items()))
    return "offsets reached: " + (text if len(text) <= limit else text[:limit] + "...")
