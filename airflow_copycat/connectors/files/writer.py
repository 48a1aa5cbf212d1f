"""One Kafka topic-partition's writer: batches of files, deterministic rotation.

Records of a topic-partition go to a *batch*: one open file per encoded
partition (directory) the batch's records fall in, each named after the
offset of its own first record: ``<topic>+<partition>+<startOffset><ext>``
(``filename.offset.zero.pad.width`` digits, as Confluent's sinks). Records
are kept in memory until the batch closes; a batch holds at most
``flush.size`` records. All files of a batch close together (as in
Confluent's S3 sink), which is what gives a topic-partition one committed
offset: every record before it is in a published file, none after it is.

A batch closes

* after the record that makes it hold ``flush.size`` records;
* before a record whose timestamp is >= the batch's first timestamp +
  ``rotate.interval.ms`` (record time: the time-based partitioner's, else
  the Kafka timestamp; -1 disables);
* before a record that a time-based partitioner with ``rotate.interval.ms``
  puts in another directory than the previous record (Confluent's rule,
  which keeps one file open per bucket);
* before a record whose value schema differs from its file's (a file has one
  schema; Confluent's ``schema.compatibility=NONE``);
* at the end of a run (``close_batch`` from ``pre_commit(final=True)``).

None of these depends on the clock or on how records were split into
``put`` calls, so a rerun from a committed offset writes the same files.
Closed files are written to staging at once (bounding memory), and wait
there for :meth:`TopicPartitionWriter.publish`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...connect.errors import DataException
from ...connect.records import SinkRecord
from .formats import RecordFormat
from .partitioners import Partitioner
from .publish import PublishStore, TopicPartition


@dataclass
class OpenFile:
    """The buffered records of one file of the open batch: ``(schema, value)`` rows, and after
    decoded batches (:meth:`TopicPartitionWriter.write_table`) also Arrow tables, in order in
    ``parts`` (``rows`` is then the last part)."""

    start_offset: int
    schema: Any
    rows: list = field(default_factory=list)
    parts: list = field(default_factory=list)  # earlier parts: row lists and Arrow tables, in order
    count: int = 0

    def encode(self, fmt: RecordFormat, topic: str) -> bytes:
        if not self.parts:
            return fmt.encode(topic, self.rows)
        import pyarrow as pa

        from .formats import to_arrow_table

        parts = self.parts + ([self.rows] if self.rows else [])
        tables = [to_arrow_table(p) if isinstance(p, list) else p for p in parts]
        return fmt.encode_table(topic, self.schema, pa.concat_tables(tables))


class TopicPartitionWriter:
    """Writes one topic-partition's records in batches of files, published through ``store``.

    ``committed`` is the offset recovered from the destination (``None`` if never
    committed); records below the writer's position (already committed, or given
    again after a retried ``put``) are skipped.
    """

    def __init__(self, tp: TopicPartition, store: PublishStore, fmt: RecordFormat, partitioner: Partitioner,
                 *, flush_size: int, rotate_interval_ms: int = -1, pad_width: int = 10,
                 null_values: str = "fail", committed: int | None = None, metrics: dict | None = None):
        self.tp = tp
        self.store, self.format, self.partitioner = store, fmt, partitioner
        self.flush_size, self.rotate_interval_ms, self.pad_width = flush_size, rotate_interval_ms, pad_width
        self.null_values = null_values
        self.committed = committed
        self.position = committed  # next offset expected (after the last record seen)
        self.metrics = metrics if metrics is not None else {}
        self._files: dict[str, OpenFile] = {}
        self._count = 0
        self._base_ts: int | None = None
        self._last_encoded: str | None = None
        self.staged: list[str] = []  # relative paths staged, waiting to publish
        self.staged_upto: int | None = None  # offset up to which the staged files hold every record

    def _bump(self, key: str, n: int = 1) -> None:
        self.metrics[key] = self.metrics.get(key, 0) + n

    def file_name(self, start_offset: int) -> str:
        topic, partition = self.tp
        return f"{topic}+{partition}+{start_offset:0{self.pad_width}d}{self.format.extension}"

    # ------------------------------------------------------------ writing
    def write(self, record: SinkRecord) -> None:
        """Add one record (in offset order); may close the batch before or after it."""
        offset = record.kafka_offset
        if offset < 0:
            raise DataException(f"record of {self.tp[0]}-{self.tp[1]} has no Kafka offset ({offset}); "
                                "the files sink names files by offset and needs records read from Kafka")
        if self.position is not None and offset < self.position:
            self._bump("records_skipped_committed")
            return
        self._close_if_full()
        if record.value is None:
            if self.null_values == "fail":
                raise DataException(
                    f"record {self.tp[0]}-{self.tp[1]}@{offset} has a null value (a tombstone); files cannot "
                    "hold it. Set behavior.on.null.values=ignore to skip tombstones, or drop them with a transform")
            self._bump("tombstones_skipped")
            self.position = offset + 1
            return
        encoded = self.partitioner.encode(record)
        ts = self._timestamp(record)
        if self._count and self._should_rotate_before(record, encoded, ts):
            self.close_batch(upto=offset)
        f = self._files.get(encoded)
        if f is None:
            f = self._files[encoded] = OpenFile(offset, record.value_schema)
        f.rows.append((record.value_schema, record.value))
        f.count += 1
        self._count += 1
        if self._base_ts is None:
            self._base_ts = ts
        self._last_encoded = encoded
        self.position = offset + 1
        if self._count >= self.flush_size:
            self.close_batch(upto=offset + 1)

    def write_table(self, schema, table, offsets: list[int], encoded: str) -> None:
        """Add decoded records (in offset order) as :meth:`write` adds them one by one: ``table``
        holds their values as :func:`.formats.to_arrow_table` makes them (value schema
        ``schema``, none null), ``offsets`` their Kafka offsets, ``encoded`` their encoded
        partition. Only for a format with ``encode_table`` and without time-based rotation
        (``rotate.interval.ms`` <= 0), whose files close by count and schema alone."""
        if self.rotate_interval_ms > 0 or not hasattr(self.format, "encode_table"):
            raise DataException("write_table needs a format with encode_table and no rotate.interval.ms")
        start = 0
        if self.position is not None:
            while start < len(offsets) and offsets[start] < self.position:
                start += 1
            if start:
                self._bump("records_skipped_committed", start)
        while start < len(offsets):
            self._close_if_full()
            f = self._files.get(encoded)
            if self._count and f is not None and f.schema is not schema and f.schema != schema:
                self.close_batch(upto=offsets[start])
                f = None
            if f is None:
                f = self._files[encoded] = OpenFile(offsets[start], schema)
            take = min(len(offsets) - start, self.flush_size - self._count)
            if f.rows:
                f.parts.append(f.rows)
                f.rows = []
            f.parts.append(table.slice(start, take))
            f.count += take
            self._count += take
            self._last_encoded = encoded
            start += take
            self.position = offsets[start - 1] + 1
            if self._count >= self.flush_size:
                self.close_batch(upto=self.position)

    def _close_if_full(self) -> None:
        # a flush.size close that failed (retried put) is finished before anything else
        if self._count >= self.flush_size:
            self.close_batch(upto=self.position)

    def _timestamp(self, record: SinkRecord) -> int | None:
        if self.rotate_interval_ms <= 0:
            return None
        ts = self.partitioner.timestamp(record)
        if ts is None:
            raise DataException(f"record {self.tp[0]}-{self.tp[1]}@{record.kafka_offset} has no timestamp, which "
                                "rotate.interval.ms needs (rotation is by record time); set rotate.interval.ms=-1 "
                                "or give records timestamps")
        return int(ts)

    def _should_rotate_before(self, record: SinkRecord, encoded: str, ts: int | None) -> bool:
        f = self._files.get(encoded)
        if f is not None and f.schema is not record.value_schema and f.schema != record.value_schema:
            return True
        if self.rotate_interval_ms > 0:
            if ts - self._base_ts >= self.rotate_interval_ms:
                return True
            if self.partitioner.time_based and encoded != self._last_encoded:
                return True
        return False

    def close_batch(self, upto: int | None = None) -> None:
        """Close the open batch: stage its files; they then hold every record before ``upto``
        (default: the writer's position)."""
        upto = self.position if upto is None else upto
        staged = []
        for encoded, f in self._files.items():
            rel = f"{self.partitioner.path(self.tp[0], encoded)}/{self.file_name(f.start_offset)}"
            self.store.stage(self.tp, rel, f.encode(self.format, self.tp[0]))
            staged.append(rel)
            self._bump("records_written", f.count)
            self._bump("files_staged")
        # only now, so that a failed staging (retried put) leaves the batch as it was
        self.staged.extend(staged)
        self._files.clear()
        self._count = 0
        self._base_ts = None
        self._last_encoded = None
        if upto is not None:
            self.staged_upto = upto

    # ------------------------------------------------------------ publishing
    def publish(self, final: bool = False, end_offset: int | None = None) -> int | None:
        """Publish what is staged and return the committed offset (``None`` if never committed).

        ``final`` (end of a run): first close the open batch and commit up to
        ``max(end_offset, position)`` -- the framework's position may be past the last
        record written (skipped tombstones, records a transform dropped).
        """
        self._close_if_full()
        if final:
            ends = [x for x in (end_offset, self.position) if x is not None]
            self.close_batch(upto=max(ends) if ends else None)
        upto = self.staged_upto
        if upto is None or (not self.staged and upto <= (self.committed or 0)):
            return self.committed
        self.store.publish(self.tp, list(self.staged), upto)
        self._bump("files_published", len(self.staged))
        self._bump("commits")
        self.staged.clear()
        self.committed = upto
        if self.position is None or self.position < upto:
            self.position = upto
        return self.committed

    def buffered(self) -> int:
        """Records in the open batch (not yet staged)."""
        return self._count
