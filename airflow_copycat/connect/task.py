"""Tasks: the copiers. A task copies the partitions its task config names.

Tasks run on Spark executors (or in the Airflow worker with ``in_process``), one
task per Spark task, single-threaded: the framework calls a task's methods from
one thread only. A task never writes offsets itself: the framework owns them.

Lifecycle: ``initialize(context)`` -> ``start(config)`` -> (``poll`` |
``open``/``put``/``flush``/``close``)* -> ``stop()``. A run is bounded: it ends
when a source task is caught up (``poll`` returns ``None``) or a sink task has
seen the end of every assigned partition, or the run's budget is spent.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .errors import ConnectException
from .batch import SourceBatch
from .records import SinkRecord, SourceRecord
from .sink_batch import SinkBatch


class OffsetStorageReader:
    """Read-only view of the committed source offsets of *this* connector.

    Offsets are read once when the task starts: a task sees what was committed
    before its run, never offsets of its own run.
    """

    def offset(self, partition: Mapping[str, Any]) -> dict | None:
        """The last committed offset of ``partition``, or ``None`` if none was ever committed."""
        return self.offsets([partition]).get(_key(partition))

    def offsets(self, partitions: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
        """Committed offsets of several partitions, keyed by the partition's canonical
        JSON (see :func:`airflow_copycat.connect.assignment.canonical`); absent when none."""
        raise NotImplementedError


def _key(partition) -> str:
    from .assignment import canonical

    return canonical(partition)


class SourceTaskContext:
    """What the framework gives a source task: its config and the offset reader."""

    def __init__(self, config: Mapping[str, str], offset_storage_reader: OffsetStorageReader,
                 kafka_client_config: Mapping[str, Any] | None = None):
        self.config = dict(config)
        self.offset_storage_reader = offset_storage_reader
        self.kafka_client_config = dict(kafka_client_config or {})
        """The worker's Kafka client settings (bootstrap, security) for tasks of connectors that
        set ``reads_kafka``; empty otherwise. Holds secrets: never log it."""

    def report_error(
        self,
        error: Exception,
        *,
        source_partition: dict,
        source_offset: dict,
        raw: bytes | None = None,
        location: str = "",
    ) -> None:
        """Hand the framework data the task could not turn into a record (an
        undecodable line, an unparsable row) instead of dropping it silently.

        ``source_partition`` / ``source_offset`` say where the bad data is: the
        offset is the position *after* it, so a framework that tolerates the
        error can commit it and a rerun does not meet the same data again.
        ``raw`` is the data as read (for a dead-letter queue), ``location`` a
        human-readable place such as ``"/var/log/a.log, bytes 120..188"``.

        The default (``errors.tolerance=none``) raises :class:`ConnectException`
        naming the location, which fails the task. A runtime implementing
        ``errors.tolerance=all`` overrides this to log (and dead-letter) the error
        and return; the task then skips the bad data and carries on.
        """
        where = f"{location}: " if location else ""
        raise ConnectException(
            f"{where}{error} (set errors.tolerance=all to log and skip such data instead of failing)"
        ) from error


class SinkTaskContext:
    """What the framework gives a sink task.

    ``assignment`` is the set of ``(topic, partition)`` this task owns. A sink
    that stores its offsets in the destination calls :meth:`offset` from
    ``open()`` to say where reading must start (the framework otherwise starts at
    the consumer group's committed offset, else at the earliest offset).
    """

    def __init__(self, config: Mapping[str, str], assignment: Sequence[tuple[str, int]]):
        self.config = dict(config)
        self.assignment = [tuple(tp) for tp in assignment]
        self._rewinds: dict[tuple[str, int], int] = {}

    def offset(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Ask the framework to (re)start reading each given partition at the given
        Kafka offset: the next record delivered to ``put`` has that offset."""
        for tp, off in offsets.items():
            self._rewinds[(tp[0], int(tp[1]))] = int(off)

    def take_rewinds(self) -> dict[tuple[str, int], int]:
        """Framework side: the rewinds requested since the last call."""
        r, self._rewinds = self._rewinds, {}
        return r

    def report_error(self, record, error: Exception) -> None:
        """Hand the framework a record of the batch given to ``put`` that the destination
        refused (a constraint violated, a value too large) instead of failing the whole
        batch -- Kafka Connect's errant record reporter (KIP-610). Call it from ``put``
        and do not write the record.

        The default (``errors.tolerance=none``) raises :class:`ConnectException` naming
        the record's topic, partition and offset, which fails the task. A runtime
        implementing ``errors.tolerance=all`` overrides this to log and dead-letter the
        record (its original Kafka bytes, stage ``TASK_PUT``) and return; the record's
        offset then counts as handled when the task commits.
        """
        raise ConnectException(
            "topic {} partition {} offset {}: ".format(*record.read_from) + f"{error} "
            "(set errors.tolerance=all to dead-letter such records instead of failing)"
        ) from error


class Task:
    """Base of source and sink tasks."""

    def version(self) -> str:
        return "0.1.0"

    def start(self, config: dict[str, str]) -> None:
        """Called once with the task config (strings, as the connector produced them)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Called once at the end of the run, also after a failure. Release resources;
        must not raise for a task that failed half-way, and may be called twice."""


class SourceTask(Task):
    """Reads records from an external system.

    ``poll()`` returns a list of :class:`SourceRecord` (each with its
    ``source_partition`` and ``source_offset``), ``[]`` when nothing is ready yet
    but more may come soon (the framework calls again), or ``None`` when the
    task is caught up: everything that exists now has been returned, which ends
    a bounded run. A task resumes from
    ``context.offset_storage_reader.offset(partition)`` in ``start``.
    """

    context: SourceTaskContext

    def initialize(self, context: SourceTaskContext) -> None:
        """Called before :meth:`start`."""
        self.context = context

    def poll(self) -> list[SourceRecord | SourceBatch] | None:
        """The next records (see the class docstring). Called in a loop on one thread.

        The list may hold :class:`~airflow_copycat.connect.batch.SourceBatch` items in place of
        records (columnar rows of one partition, the fast path; see :mod:`.batch`), mixed with
        records in any order: the framework keeps that order for offsets.

        Raise :class:`~airflow_copycat.connect.errors.RetriableException` for a failure
        that may pass (a connection dropped) *only if this call returned nothing and
        the task's position is where it was before the call*: the framework calls
        ``poll()`` again after a back-off (within ``errors.retry.timeout``) and expects
        the records from that position. Any other exception fails the task; offsets
        stay at the last record Kafka acknowledged.
        """
        raise NotImplementedError

    def commit(self) -> None:
        """Called after the offsets of every record :meth:`poll` returned so far were committed
        (Kafka acknowledged each record first): during a run at each offset flush, and at its end.
        A task that acknowledges reads upstream (e.g. a queue, a replication slot) does it here, up
        to its last returned record. Not called after a failure: the framework then commits the
        offsets of the records Kafka acknowledged, which may be fewer than were returned; a task
        finds the committed position through its offset reader on its next start."""


class SinkTask(Task):
    """Writes records to an external system.

    The framework calls ``open(partitions)`` once with the task's assignment, then
    ``put(records)`` (or ``put_batch(batch)``, the messages still undecoded, for a task
    that overrides it) with batches in offset order per partition, and
    ``pre_commit(offsets)`` whenever it wants to commit; it commits (to the
    consumer group, for lag tools) only the offsets ``pre_commit`` returns. At the
    end of a bounded run it calls ``pre_commit`` once more with ``final=True``:
    the task must then make everything it was given durable (a batch run has no
    later chance), then ``close(partitions)`` and ``stop()``.
    """

    context: SinkTaskContext

    def initialize(self, context: SinkTaskContext) -> None:
        self.context = context

    def open(self, partitions: Sequence[tuple[str, int]]) -> None:
        """The task now owns these ``(topic, partition)``; recover destination state and
        call ``context.offset`` if the destination knows where to resume."""

    def put(self, records: Sequence[SinkRecord]) -> None:
        """Write (or buffer) ``records``. Raise ``RetriableException`` to have the same
        batch given again after a back-off."""
        raise NotImplementedError

    def put_batch(self, batch: SinkBatch) -> None:
        """Write (or buffer) the messages of one consume round, undecoded, in columns
        (:class:`~airflow_copycat.connect.sink_batch.SinkBatch`: what a batch holds, who owns
        its offsets). The framework calls this instead of :meth:`put` only for a task whose
        class overrides it, and only when the connector has no transforms.

        The default is the batch's meaning, ``self.put(batch.to_records())``; an override
        writes the columns itself where it can do exactly what the records would do, and
        calls ``to_records()`` for the rest. Raise ``RetriableException`` to have the same
        batch given again after a back-off.

        A task may go on writing a batch after this returns (a transaction committing while the
        framework reads the next batch) if it finishes that write before it writes anything of the
        next batch, in :meth:`pre_commit` and in :meth:`stop`; records of it that it reports then
        (``context.report_error``) are dead-lettered with their bytes, as during the call."""
        self.put(batch.to_records())

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Make everything given to ``put`` up to ``offsets`` (next offset per partition) durable."""

    def pre_commit(self, offsets: Mapping[tuple[str, int], int], *, final: bool = False) -> dict[tuple[str, int], int]:
        """Offsets (next offset to read, per partition) that are safe to commit.

        ``offsets`` are the positions after the last record given to ``put``. The
        default flushes and returns them; a sink that writes in its own units
        (files of ``flush.size``) returns only what it has made durable, unless
        ``final`` is set, when it must make everything durable.
        """
        self.flush(offsets)
        return dict(offsets)

    def close(self, partitions: Sequence[tuple[str, int]]) -> None:
        """The task no longer owns these partitions: drop their buffers and writers."""
