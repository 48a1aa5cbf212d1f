"""Offset stores: where source offsets live between runs.

The framework, never a task, writes offsets, and only after Kafka acknowledged
every record up to them. Two stores, as in Kafka Connect:

* :class:`KafkaOffsetStore` -- a compacted topic (default ``copycat-offsets``),
  Kafka Connect's distributed-mode format: key = JSON ``[connector, partition]``,
  value = JSON offset, ``null`` value = deleted. Reading takes the whole topic to
  the end of every partition; the last value per key wins (the broker may not
  have compacted yet).
* :class:`FileOffsetStore` -- a local JSON file (``offset.storage.file.filename``),
  for standalone use; safe for concurrent tasks on one machine (a file lock).

Keys are compared by canonical JSON, so ``{"a":1,"b":2}`` and ``{"b":2,"a":1}``
are the same partition.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid
from typing import Any, Sequence

from confluent_kafka import Consumer, Producer, TopicPartition

from ..connect.assignment import canonical
from ..connect.errors import ConnectException, DataException
from ..connect.task import OffsetStorageReader
from ..converters.json_converter import JsonConverter
from .kafka import admin_client, ensure_topic, read_to_end, topic_config, topic_partition_count
from .worker import WorkerConfig

Offsets = dict  # canonical partition -> {"partition": ..., "offset": ...}


def _json_text(value: Any) -> bytes:
    """``value`` as Kafka Connect's workers write offsets: their JsonConverter without schemas, that is
    Jackson's text (upper-case ``\\u00XX`` for control characters, characters beyond U+FFFF as escaped
    surrogate pairs, doubles as Java prints them, ``"NaN"``). A value Kafka Connect cannot hold (an
    integer beyond 64 bits) is written as compact JSON of its digits, as Jackson writes a BigInteger."""
    try:
        return _OFFSET_JSON.from_connect_data("", None, value)
    except DataException:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


_OFFSET_JSON = JsonConverter()
_OFFSET_JSON.configure({"schemas.enable": False}, is_key=False)


def offset_key(connector: str, partition: Any) -> bytes:
    """The offset topic key, byte-identical to Kafka Connect's (``["name",{...}]``, see :func:`_json_text`)."""
    return _json_text([connector, partition])


def murmur2(key: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (a signed 32-bit int), the hash of the Java producer's and
    librdkafka's ``murmur2_random`` partitioners."""
    m, length = 0x5BD1E995, len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end = length & ~3
    for i in range(0, end, 4):
        k = (key[i] | key[i + 1] << 8 | key[i + 2] << 16 | key[i + 3] << 24) * m & 0xFFFFFFFF
        k = (k ^ (k >> 24)) * m & 0xFFFFFFFF
        h = (h * m & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= key[end + 2] << 16
    if rest >= 2:
        h ^= key[end + 1] << 8
    if rest >= 1:
        h = (h ^ key[end]) * m & 0xFFFFFFFF
    h = (h ^ (h >> 13)) * m & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java producer picks for ``key``: ``toPositive(murmur2(key)) % partitions``.
    Transactional writers set it explicitly so offset records land where the store's own
    writer puts them (the last value of a key wins only within one partition)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def offset_value(offset: Any) -> bytes | None:
    """The offset topic value of ``offset``, byte-identical to Kafka Connect's (see :func:`_json_text`);
    ``None`` (a tombstone) for ``None``."""
    return None if offset is None else _json_text(offset)


class OffsetStore:
    """Reads and writes the source offsets of connectors."""

    def read(self, connector: str) -> Offsets:
        """Committed offsets of ``connector``: canonical partition -> ``{"partition", "offset"}``."""
        raise NotImplementedError

    def read_all(self) -> dict[str, Offsets]:
        """Committed offsets of every connector in the store, by connector name."""
        raise NotImplementedError

    def write(self, connector: str, offsets: Sequence[tuple[Any, Any]]) -> None:
        """Durably store ``(partition, offset)`` pairs; an offset of ``None`` deletes the
        partition's offset. Returns only once the store acknowledged all of them."""
        raise NotImplementedError

    def prepare_writes(self) -> None:
        """Called when a run that will write offsets starts, so the first write is not slowed
        by connection set-up. Optional."""

    def describe(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


class KafkaOffsetStore(OffsetStore):
    def __init__(self, worker: WorkerConfig):
        self.worker = worker
        self.topic = worker.offset_topic
        self._producer: Producer | None = None
        self._admin_client = None  # one AdminClient for the store's life: a new one connects first
        self._ensured = False
        self._partitions: int | None = None

    def describe(self) -> str:
        return f"kafka topic {self.topic} at {self.worker.bootstrap_servers}"

    def _admin(self):
        if self._admin_client is None:
            self._admin_client = admin_client(self.worker.admin_config())
        return self._admin_client

    def ensure_topic(self) -> None:
        """Create the offset topic (compacted) if missing; refuse one that is not compacted,
        as Kafka Connect does -- offsets in a deleting topic would expire and the
        connector would silently start over."""
        if self._ensured:
            return
        admin = self._admin()
        created = ensure_topic(
            admin,
            self.topic,
            partitions=int(self.worker.get("offset.storage.partitions")),
            replication_factor=int(self.worker.get("offset.storage.replication.factor")),
            config={"cleanup.policy": "compact"},
        )
        if not created:
            policy = topic_config(admin, self.topic).get("cleanup.policy", "")
            if policy and "compact" not in policy:
                raise ConnectException(
                    f"offset topic {self.topic} has cleanup.policy={policy}; it must be compact, or offsets expire. "
                    f"Run: kafka-configs --alter --entity-type topics --entity-name {self.topic} "
                    f"--add-config cleanup.policy=compact"
                )
        self._ensured = True

    def _writer(self) -> Producer:
        """The store's own producer: the worker's producer settings, but always idempotent,
        acks=all and Java's murmur2 partitioner, so every value of a key lands in the same
        partition in order (last value wins) whatever a connector overrides."""
        if self._producer is None:
            cfg = self.worker.producer_config()
            cfg.update({"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
                        "linger.ms": 0})
            self._producer = Producer(cfg)
        return self._producer

    def prepare_writes(self) -> None:
        self.ensure_topic()
        self._writer()

    def read_all(self) -> dict[str, Offsets]:
        """Reading never creates the topic: a missing offset topic holds no offsets. A topic
        the broker reports with an error (not authorized, leader unavailable) fails the read:
        treating it as empty would restart every source from the beginning."""
        admin = admin_client(self.worker.admin_config())
        n = topic_partition_count(admin, self.topic)
        # read_committed whatever consumer.* says: offsets of aborted transactions must not count
        consumer = Consumer(self.worker.consumer_config(f"copycat-offset-reader-{uuid.uuid4().hex[:8]}",
                                                        {"isolation.level": "read_committed"}))
        out: dict[str, Offsets] = {}
        try:
            tps = [TopicPartition(self.topic, p, 0) for p in range(n)]
            for msg in read_to_end(consumer, tps):
                try:
                    connector, partition = json.loads(msg.key())
                except (TypeError, ValueError):
                    continue  # not an offset record (Kafka Connect writes only these)
                offsets = out.setdefault(connector, {})
                value = msg.value()
                if value is None:
                    offsets.pop(canonical(partition), None)
                else:
                    offsets[canonical(partition)] = {"partition": partition, "offset": json.loads(value)}
        finally:
            consumer.close()
        return out

    def read(self, connector: str) -> Offsets:
        return self.read_all().get(connector, {})

    def write(self, connector: str, offsets: Sequence[tuple[Any, Any]]) -> None:
        if not offsets:
            return
        self.ensure_topic()
        producer = self._writer()
        errors: list[str] = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err.str())

        for partition, offset in offsets:
            producer.produce(self.topic, key=offset_key(connector, partition), value=offset_value(offset),
                             on_delivery=on_delivery)
        left = producer.flush(60)
        if left or errors:
            raise ConnectException(
                f"could not write {len(offsets)} offset(s) of connector {connector!r} to {self.topic}: "
                + (errors[0] if errors else f"{left} not acknowledged within 60s")
            )

    def produce_in(self, producer: Producer, connector: str, offsets: Sequence[tuple[Any, Any]], on_delivery=None) -> None:
        """Produce offset records through ``producer`` -- a task's transactional producer, so
        they commit or abort with its records -- into the partitions this store's own writer
        would choose. The caller commits the transaction."""
        self.ensure_topic()
        if self._partitions is None:
            self._partitions = topic_partition_count(self._admin(), self.topic)
        for partition, offset in offsets:
            key = offset_key(connector, partition)
            producer.produce(self.topic, key=key, value=offset_value(offset),
                             partition=murmur2_partition(key, self._partitions), on_delivery=on_delivery)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None


class FileOffsetStore(OffsetStore):
    def __init__(self, path: str):
        self.path = os.path.abspath(path)

    def describe(self) -> str:
        return f"file {self.path}"

    def _load(self) -> dict[str, Offsets]:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return {}
        out: dict[str, Offsets] = {}
        for entry in doc.get("offsets", []):
            connector, partition = entry["key"]
            out.setdefault(connector, {})[canonical(partition)] = {"partition": partition, "offset": entry["value"]}
        return out

    def read_all(self) -> dict[str, Offsets]:
        with self._lock():
            return self._load()

    def read(self, connector: str) -> Offsets:
        return self.read_all().get(connector, {})

    def write(self, connector: str, offsets: Sequence[tuple[Any, Any]]) -> None:
        if not offsets:
            return
        with self._lock():
            data = self._load()
            mine = data.setdefault(connector, {})
            for partition, offset in offsets:
                if offset is None:
                    mine.pop(canonical(partition), None)
                else:
                    mine[canonical(partition)] = {"partition": partition, "offset": offset}
            doc = {
                "offsets": [
                    {"key": [c, e["partition"]], "value": e["offset"]}
                    for c, entries in sorted(data.items())
                    for _, e in sorted(entries.items())
                ]
            }
            directory = os.path.dirname(self.path) or "."
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".offsets-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def _lock(self):
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        return _FileLock(self.path + ".lock")


class _FileLock:
    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.f = open(self.path, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def offset_store(worker: WorkerConfig) -> OffsetStore:
    """The store the worker config names: the file if ``offset.storage.file.filename`` is set, else the topic."""
    if worker.offset_file:
        return FileOffsetStore(worker.offset_file)
    return KafkaOffsetStore(worker)


class SnapshotOffsetReader(OffsetStorageReader):
    """An :class:`OffsetStorageReader` over offsets read once, at task start."""

    def __init__(self, offsets: Offsets):
        self._offsets = offsets

    def offsets(self, partitions) -> dict[str, dict]:
        out = {}
        for p in partitions:
            entry = self._offsets.get(canonical(p))
            if entry is not None:
                out[canonical(p)] = entry["offset"]
        return out
