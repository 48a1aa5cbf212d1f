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

Batches: the task takes the framework's batches (``put_batch``). Parquet files of
JsonConverter envelopes (the default partitioner, no ``rotate.interval.ms``, no
transforms) are decoded a partition at a time in columns (:mod:`.json_columns`)
straight into the table the Parquet writer writes; whatever the columns cannot
decode exactly as records goes through ``put`` as records. Both ways write the
same files, byte for byte, and hand the same messages to ``errors.*``.

Readers: ``_copycat/`` starts with ``_``, which pyarrow.dataset, Spark, Hive
and Trino skip, so reading ``<store.url>/<topics.dir>`` (or a topic under it)
shows only published files. Tombstones fail the task unless
``behavior.on.null.values=ignore`` (then they are counted in ``metrics``).
"""

from __future__ import annotations

import os
from itertools import chain
from typing import Any, Mapping, Sequence

from ...connect.config import ConfigProblem
from ...connect.connector import SinkConnector
from ...connect.errors import ConnectException
from ...connect.records import SinkRecord
from ...connect.sink_batch import SinkBatch
from ...connect.task import SinkTask
from .config import CONFIG_DEF, store_location, validate_config
from .formats import ParquetFormat, build_format
from .json_columns import decode_envelopes
from .partitioners import DefaultPartitioner, build_partitioner
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

    def put_batch(self, batch: SinkBatch) -> None:
        """Buffer the batch's messages. When the files are Parquet, the partitioner the default one,
        rotation by count and schema only, and every key decodes, each partition's values are
        decoded in columns (:mod:`.json_columns`) into the table the writer writes; the messages
        of a partition the columns cannot decode exactly as records (and of every partition,
        in any other case) go through :meth:`put` as records, in order: the same files, errors
        and dead letters."""
        decoded, fallback = self._decode(batch)
        if fallback:
            self.put([r for r in map(batch.record, fallback) if r is not None])
        for tp, schema, table, offsets in decoded:
            writer = self._writers.get(tp)
            if writer is None:
                raise ConnectException(
                    f"files sink got records of {tp[0]}-{tp[1]} for a partition it was not opened for (open: "
                    f"{sorted(self._writers)}); the framework must call open() with the task's assignment first")
            writer.write_table(schema, table, offsets, DefaultPartitioner.encode_partition(tp[1]))

    def _decode(self, batch: SinkBatch) -> tuple[list, list[int]]:
        """``([(tp, schema, table, offsets)], rows)``: the partitions of the batch decoded in columns,
        and the rows (in order) that must go as records."""
        everything = ([], list(range(len(batch))))
        if not isinstance(self.format, ParquetFormat) or type(self.partitioner) is not DefaultPartitioner \
                or self.config["rotate.interval.ms"] > 0:
            return everything
        keys = batch.keys
        if keys.count(None) != len(keys):
            for row, key in enumerate(keys):  # a key that fails is the records' to report
                try:
                    batch.key_converter.to_connect_data(batch.topics[row], key, batch.headers[row])
                except Exception:  # noqa: BLE001
                    return everything
        runs: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for topic, partition, start, stop in batch.runs():
            runs.setdefault((topic, partition), []).append((start, stop))
        values, offsets, decoded, fallback = batch.values, batch.offsets, [], []
        for tp, spans in runs.items():
            if spans == [(0, len(batch))]:
                tp_values, tp_offsets = values, offsets
            else:  # the partition's runs joined, by slices (no Python step per message)
                tp_values = list(chain.from_iterable(values[a:b] for a, b in spans))
                tp_offsets = list(chain.from_iterable(offsets[a:b] for a, b in spans))
            columns = decode_envelopes(tp_values, batch.value_converter, tp[0])
            if columns is None:
                fallback += [i for a, b in spans for i in range(a, b)]
            else:
                decoded.append((tp, columns[0], columns[1], tp_offsets))
        return decoded, sorted(fallback)

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
