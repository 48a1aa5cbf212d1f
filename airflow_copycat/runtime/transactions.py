"""Exactly-once source delivery: Kafka Connect's KIP-618 design for one bounded run.

A source task runs transactionally when its connector config says
``exactly.once.support=required``, or the worker says
``exactly.once.source.support=enabled`` (then ``requested``, the default, is
enough). Such a task:

1. builds a transactional producer whose ``transactional.id`` is derived from
   the connector and the task (:func:`transactional_id`), and calls
   ``init_transactions()`` *before it reads its offsets*: that fences any
   earlier attempt of the same task still running (a zombie Spark task, an
   Airflow retry while the old application lingers) and aborts its open
   transaction, so the offsets the new attempt reads are final;
2. writes records, dead-lettered records and the offset records (into the
   worker's offset topic, in Kafka Connect's format) in one transaction, and
   commits it at each boundary: after every ``poll()`` batch
   (``transaction.boundary=poll``) or every ``transaction.boundary.interval.ms``
   (``interval``), and at the end of the run;
3. aborts the open transaction when the run fails, so neither its records
   (for ``read_committed`` consumers) nor its offsets count.

A fenced attempt fails with an error saying so; the attempt that fenced it
carries on. When a re-plan has fewer tasks than the previous plan, the planner
fences the task ids that no longer exist (:func:`fence`). Connectors promise that re-reading from a committed offset gives
the same records through :meth:`SourceConnector.exactly_once_support`; with
``required`` a connector that does not fails at plan time (:func:`check`).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from confluent_kafka import KafkaError, KafkaException, Producer

from ..connect.config import ConfigProblem
from ..connect.errors import ConnectException
from .offsets import KafkaOffsetStore, OffsetStore
from .worker import WorkerConfig

log = logging.getLogger("airflow_copycat.transactions")


def exactly_once(config: Mapping[str, Any], worker: WorkerConfig) -> bool:
    """Whether source tasks of ``config`` run transactionally."""
    return str(config.get("exactly.once.support") or "").lower() == "required" or worker.exactly_once_source


def transactional_id(worker: WorkerConfig, connector: str, task: int) -> str:
    """Kafka Connect's ``<group.id>-<connector>-<task>`` (``group.id`` defaults to ``copycat``): every
    attempt of the same task gets the same id, which is what fences the earlier ones.

    A windowed task passes its window's offset namespace as ``connector``
    (``<name>@window/<start>/<end>/<plan id>``, see :mod:`.windows`): a backfill then never
    fences the live run (nor another window or plan), while a retry of the same window task
    still fences its earlier attempts."""
    return f"{worker.get('group.id') or 'copycat'}-{connector}-{task}"


def check(connector, values: Mapping[str, Any], worker: WorkerConfig) -> list[ConfigProblem]:
    """Plan-time problems of running ``connector`` (started with ``values``) exactly once."""
    if not exactly_once(values, worker):
        return []
    problems = []
    required = str(values.get("exactly.once.support") or "").lower() == "required"
    support = connector.exactly_once_support(dict(values)) if required else True
    if support is not True:
        problems.append(ConfigProblem(
            "exactly.once.support", "required",
            f"{type(connector).__name__} does not declare exactly-once support (its exactly_once_support() "
            f"returned {support!r}): re-reading from a committed offset may not "
            "give the same records. Use exactly.once.support=requested, or a connector that supports it."))
    if worker.offset_file:
        problems.append(ConfigProblem(
            "exactly.once.support", values.get("exactly.once.support"),
            f"exactly-once delivery commits offsets in the Kafka transaction, but the worker keeps offsets in the file "
            f"{worker.offset_file}: remove offset.storage.file.filename to use the offset topic"))
    return problems


def fence(producer_config: Mapping[str, Any], worker: WorkerConfig, connector: str, tasks: range) -> None:
    """Fence every attempt of the given task ids still running: ``init_transactions`` under each
    of their transactional ids aborts their open transaction and makes their next write fail.

    Called when a re-plan has fewer tasks than the previous plan: a task id that no longer
    exists is never started again, so nothing else would fence a zombie of it."""
    for task in tasks:
        cfg = dict(producer_config, **{"transactional.id": transactional_id(worker, connector, task)})
        producer = Producer(cfg)
        try:
            producer.init_transactions(60)
        except KafkaException as e:
            raise ConnectException(f"connector {connector}: could not fence earlier attempts of task {task} "
                                   f"(transactional.id {cfg['transactional.id']}): {e}") from e
        finally:
            producer.flush(0)
        log.info("connector %s: fenced transactional.id %s (a task of the previous plan)", connector,
                 cfg["transactional.id"])


class SourceTransaction:
    """A task's transactional producer and the transaction it has open.

    Call :meth:`start` once (fences earlier attempts), then produce through
    :attr:`producer`; :meth:`commit` writes the offsets and commits;
    :meth:`abort` gives up the open transaction. A transaction is always open
    between :meth:`start` and :meth:`close`.
    """

    def __init__(self, producer_config: Mapping[str, Any], tid: str, store: OffsetStore, connector: str, *,
                 interval_ms: int | None = None):
        """``interval_ms``: the longest a transaction stays open (``transaction.boundary=interval``);
        ``transaction.timeout.ms`` is raised above it, or the broker would abort it first."""
        if not isinstance(store, KafkaOffsetStore):
            raise ConnectException(f"connector {connector}: exactly-once delivery needs the Kafka offset store, "
                                   f"not {store.describe()}")
        cfg = dict(producer_config)
        cfg.update({"transactional.id": tid, "enable.idempotence": True, "acks": "all"})
        if interval_ms is not None:
            cfg["transaction.timeout.ms"] = max(int(cfg.get("transaction.timeout.ms") or 60000), interval_ms + 60000)
        self.producer = Producer(cfg)
        self.tid, self.store, self.connector = tid, store, connector
        self._open = False
        self.commits = 0

    def start(self, timeout: float = 60.0) -> None:
        """Register the transactional id, fencing earlier attempts and aborting their open transaction."""
        try:
            self.producer.init_transactions(timeout)
        except KafkaException as e:
            raise self.error("initializing transactions", e) from e
        self._begin()

    def _begin(self) -> None:
        self.producer.begin_transaction()
        self._open = True

    def commit(self, offsets: list[tuple[Any, Any]], timeout: float = 120.0) -> None:
        """Produce ``offsets`` into the offset topic and commit them with every record produced
        since the last commit; then open the next transaction."""
        try:
            if offsets:
                self.store.produce_in(self.producer, self.connector, offsets)
            for attempt in range(5):
                try:
                    self.producer.commit_transaction(timeout)
                    break
                except KafkaException as e:  # librdkafka allows calling commit again after a retriable error
                    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                    if err is None or not err.retriable() or attempt == 4:
                        raise
                    log.warning("transaction %s: commit failed (%s); committing again", self.tid, err.str())
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is not None and err.txn_requires_abort():
                self.abort()
            self._open = False
            raise self.error("committing a transaction", e) from e
        self.commits += 1
        self._begin()

    def abort(self) -> None:
        """Abort the open transaction (its records are never seen by read_committed consumers)."""
        try:
            self.producer.abort_transaction(30)
        except KafkaException as e:  # a fenced or fatal producer cannot abort: the broker does on timeout
            log.warning("transaction %s: abort failed: %s", self.tid, e)
        self._open = False

    def close(self) -> None:
        if self._open:
            self.abort()

    def _failed_transaction(self, e: KafkaException) -> tuple[KafkaException, KafkaError | None]:
        """Why the open transaction refuses records (``produce()`` only says "erroneous state"): the
        transaction's own error, which ``commit_transaction`` returns without committing anything in
        that state (fenced by a newer attempt, or aborted by the broker). ``e`` itself if it says no more.

        Called only for a ``_STATE`` error while a transaction is open (between ``begin`` and ``commit``,
        where ``produce()`` refuses records in no other state): librdkafka then holds an abortable or
        fatal error, and ``commit_transaction`` returns it without committing."""
        try:
            self.producer.commit_transaction(10)
        except KafkaException as cause:
            err = cause.args[0] if cause.args and isinstance(cause.args[0], KafkaError) else None
            if err is not None and err.code() not in (KafkaError._STATE, KafkaError._TIMED_OUT):
                return cause, err
        return e, e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None

    def error(self, what: str, e: KafkaException) -> ConnectException:
        """The error that ends the task after ``e`` while ``what``, saying when it means fencing."""
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if err is not None and err.code() == KafkaError._STATE and self._open:
            e, err = self._failed_transaction(e)
        if err is not None and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
            return ConnectException(
                f"connector {self.connector}: this attempt was fenced while {what}: another attempt of the same task "
                f"started with transactional.id {self.tid}. This attempt's open transaction is aborted and its "
                f"offsets are not committed; the newer attempt carries on.")
        if err is not None and err.code() == KafkaError.INVALID_PRODUCER_EPOCH:
            return ConnectException(
                f"connector {self.connector}: the transaction of {self.tid} was aborted by the broker while {what}: "
                f"another attempt of the task started, or the transaction stayed open longer than "
                f"transaction.timeout.ms. Its records and offsets do not count; the next run redoes them.")
        return ConnectException(f"connector {self.connector}: {what} (transactional.id {self.tid}) failed: {e}")
