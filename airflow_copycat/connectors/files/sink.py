"""The files sink: Kafka topics to JSON-lines or Parquet files on any fsspec store, exactly once.

Shaped after Confluent's S3 and HDFS sink connectors, so their configs carry
over (keys: :mod:`.config`; formats: :mod:`.formats`; partitioners:
:mod:`.partitioners`). Published files::

    <store.url>/<topics.dir>/<topic>/<encoded partition>/<topic>+<partition>+<startOffset><ext>
    e.g. s3://lake/topics/orders/partition=0/orders+0+0000000000.json

Exactly-once: the committed offset of each topic-partition lives in the
destination, next to the files (``<topics.dir>/_copycat/offsets/``), and moves
only together with the files it covers, through a write-ahead publish log
(:mod:`.publish`). ``open`` recovers it (finishing an interrupted publish
first) and tells the framework to resume there; file names and rotation are
deterministic (:mod:`.writer`), so whatever a crashed run left unpublished is
written again under the same names. The connector declares
``offsets_in_destination``: a framework that honours it starts each partition
from the destination's offset, else from the earliest offset, never from the
consumer group's offsets (so wiping the destination re-copies the topic); the
group's offsets are then only a mirror of ``pre_commit`` for lag monitoring.

Overlapping attempts at one partition (Spark speculation, a lost executor that
still runs, an Airflow zombie and its retry) are fenced (:mod:`.publish`): each
``open`` is a new attempt with its own staging, the attempt that opened last
wins, and an older one fails with a ``fenced`` :class:`ConnectException` at its
next publish without moving the committed offset.

Batch-run contract (:class:`FilesSinkTask`): ``pre_commit(offsets)`` publishes
the batches that closed (``flush.size``, ``rotate.interval.ms``, a schema
change) and returns the committed offsets; ``pre_commit(offsets, final=True)``
closes and publishes everything, ending the run.

Readers: ``_copycat/`` starts with ``_``, which pyarrow.dataset, Spark, Hive
and Trino skip, so reading ``<store.url>/<topics.dir>`` (or a topic under it)
shows only published files. Tombstones fail the task unless
``behavior.on.null.values=ignore`` (then they are counted in ``metrics``).
"""

from __future__ import annotations

import os

from typing import Any, Mapping, Sequence

from ...connect.config import ConfigProblem
from ...connect.connector import SinkConnector
from ...connect.errors import ConnectException
from ...connect.records import SinkRecord
from ...connect.task import SinkTask
from .config import CONFIG_DEF, store_location, validate_config
from .formats import build_format
from .partitioners import build_partitioner
from .publish import PublishStore, TopicPartition
from .writer import TopicPartitionWriter


class FilesSinkConnector(SinkConnector):
    """Plans the files sink: validates the config; every task gets a copy of it and the
    framework assigns the topics' Kafka partitions to the tasks."""

    config_def = CONFIG_DEF
    exactly_once = True
    offsets_in_destination = True

    def validate(self, config: dict[str, Any]) -> list[ConfigProblem]:
        """Cross-key checks (topics, store, partitioner settings); see :func:`.config.validate_config`."""
        return validate_config(config)

    def task_class(self) -> type:
        return FilesSinkTask

    @classmethod
    def asset_uris(cls, config: dict[str, Any], topic: str) -> list[str]:
        """``<store>/<topics.dir>/<topic>`` (local paths as ``file://`` URIs)."""
        try:
            url, _ = store_location(config)
        except ValueError:
            return []
        if "://" not in url:
            url = "file://" + os.path.abspath(url)
        return [f"{url.rstrip('/')}/{config.get('topics.dir') or 'topics'}/{topic}"]


class FilesSinkTask(SinkTask):
    """Writes its assigned topic-partitions to files; see the module docstring.

    ``metrics`` counts ``records_written``, ``files_staged``, ``files_published``,
    ``commits``, ``tombstones_skipped``, ``records_skipped_committed`` (records
    below the committed offset, given again), ``publish_logs_replayed``,
    ``stale_publish_logs_deleted`` (logs of fenced attempts, deleted unapplied) and
    ``stale_staging_files_deleted``.
    """

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.metrics: dict[str, int] = {}
        self._writers: dict[TopicPartition, TopicPartitionWriter] = {}
        self.store: PublishStore | None = None

    def start(self, config: Mapping[str, Any]) -> None:
        """Parse ``config`` (the task config's strings, or an already parsed config) and
        connect to the store. Raises :class:`ConfigException` listing every problem."""
        self.config = FilesSinkConnector.parse_config(dict(config))
        url, options = store_location(self.config)
        self.store = PublishStore.from_url(url, self.config.get("topics.dir") or "", options)
        self.format = build_format(self.config["format.class"], str(self.config["parquet.codec"]).lower(),
                                   str(self.config["s3.compression.type"]).lower(), self.config["s3.compression.level"])
        self.partitioner = build_partitioner(self.config)

    def open(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Open each partition as a new attempt: recover it from the destination (replay a
        leftover publish log, drop stale staging, read the marker) and ask the framework
        to resume at its offset."""
        if self.store is None:
            raise ConnectException("FilesSinkTask.open() called before start(config)")
        rewinds = {}
        for topic, partition in partitions:
            tp = (topic, int(partition))
            rec = self.store.recover(tp)
            self._bump("publish_logs_replayed", 1 if rec.replayed else 0)
            self._bump("stale_publish_logs_deleted", 1 if rec.stale_log_deleted else 0)
            self._bump("stale_staging_files_deleted", rec.stale_deleted)
            self._writers[tp] = TopicPartitionWriter(
                tp, self.store, self.format, self.partitioner,
                flush_size=self.config["flush.size"], rotate_interval_ms=self.config["rotate.interval.ms"],
                pad_width=self.config["filename.offset.zero.pad.width"],
                null_values=str(self.config["behavior.on.null.values"]).lower(),
                committed=rec.offset, metrics=self.metrics)
            if rec.offset is not None:
                rewinds[tp] = rec.offset
        if rewinds:
            self.context.offset(rewinds)

    def put(self, records: Sequence[SinkRecord]) -> None:
        """Buffer ``records``; batches that close are written to staging (not yet published)."""
        for record in records:
            tp = (record.topic, record.kafka_partition)
            writer = self._writers.get(tp)
            if writer is None:
                raise ConnectException(
                    f"files sink got record {record.topic}-{record.kafka_partition}@{record.kafka_offset} for a "
                    f"partition it was not opened for (open: {sorted(self._writers)}); the framework must call "
                    "open() with the task's assignment before put()")
            writer.write(record)

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Nothing: the sink makes data durable in its own units, in :meth:`pre_commit`."""

    def pre_commit(self, offsets: Mapping[tuple[str, int], int], *, final: bool = False) -> dict[tuple[str, int], int]:
        """Publish closed batches (with ``final``: every batch) of each open partition and
        return the committed offsets (next offset to read) of partitions that have one.

        Raises the ``fenced`` :class:`ConnectException` when another attempt opened or
        committed one of the partitions since this task opened it (with ``final``
        also when there was nothing left to publish: the run's result must not
        report an offset the destination has moved past)."""
        committed = {}
        given = {(t, int(p)): int(o) for (t, p), o in offsets.items()}
        for tp, writer in self._writers.items():
            off = writer.publish(final=final, end_offset=given.get(tp))
            if final and self.store is not None:
                self.store.check_fence(tp)
            if off is not None:
                committed[tp] = off
        return committed

    def close(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Drop the writers of ``partitions``; anything unpublished is rewritten by the next owner."""
        for topic, partition in partitions:
            self._writers.pop((topic, int(partition)), None)
            if self.store is not None:
                self.store.forget((topic, int(partition)))

    def stop(self) -> None:
        for tp in list(self._writers):
            if self.store is not None:
                self.store.forget(tp)
        self._writers.clear()

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        """The committed offset of every open partition that has one."""
        return {tp: w.committed for tp, w in self._writers.items() if w.committed is not None}

    def _bump(self, key: str, n: int) -> None:
        self.metrics[key] = self.metrics.get(key, 0) + n
