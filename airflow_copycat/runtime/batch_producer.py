"""The batch step of the source loop: a :class:`~..connect.batch.SourceBatch` encoded in columns and produced.

Called by the source loop (:mod:`.source`) for every batch a task's ``poll()``
returns, on the task's thread. What it guarantees:

* The bytes sent are those the per-record path would send: the transforms run
  on the batch (:mod:`.batch_transforms`), keys and values come from
  :mod:`.batch_encoders`, and every row those cannot encode -- and every row of a
  batch when a transform cannot run on it or a converter has no batch encoder --
  goes through the per-record step (``send_record``) with its record from the
  original batch: same transforms, same errors, same dead letters.
* A batch's tombstone rows (``tombstones``) are produced with their key and a null
  value; a batch holding tombstones goes through transforms as records.
* Rows are produced in batch order; a row Kafka refuses before queuing it (too
  large) is dead-lettered as the per-record path does; a fatal producer error
  raises (the loop commits nothing past the last acknowledged record).
* It never commits and never marks offsets: the loop marks the batch's
  ``source_offset`` after :meth:`BatchProducer.send` returned, and commits it only
  after the producer acknowledged every record before it (``flush``, or the
  transaction's commit).
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from ..connect.batch import SourceBatch
from .batch_encoders import batch_encoder, side_columns
from .batch_transforms import apply_chain


_ENDS_PRODUCER = (KafkaError._STATE, KafkaError._FATAL, KafkaError._FENCED)


def produce(producer, topic: str, kwargs: dict[str, Any], fatal: Callable[[Exception], Exception]):
    """Queue one record, waiting while the producer's queue is full. Returns the exception of a record
    Kafka refused before queuing it (too large, no such partition) for the caller to dead-letter, or
    ``None``; raises ``fatal(e)`` for an error that ends the producer (fenced, or gone)."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return None
        except BufferError:
            producer.poll(0.5)
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            # _STATE: a transactional producer whose transaction failed (fenced, aborted) refuses records
            if err is None or err.fatal() or err.txn_requires_abort() or err.code() in _ENDS_PRODUCER:
                raise fatal(e) from None
            return e


def produce_options(item) -> dict[str, Any]:
    """``produce()``'s keyword arguments for a record's or a batch's Kafka partition, timestamp and
    headers, each only when set (delivery reports go to the producer's own ``on_delivery``)."""
    options: dict[str, Any] = {}
    if item.kafka_partition is not None:
        options["partition"] = item.kafka_partition
    if item.timestamp is not None:
        options["timestamp"] = item.timestamp
    if item.headers:
        options["headers"] = list(item.headers)
    return options


_SLICE_FROM = 1024
"""Values longer than this on average are handed out as slices of the array's buffer, not copies."""


def byte_list(arr) -> list:
    """An Arrow string or binary array as a list of the bytes ``produce()`` takes, ``None`` for a null:
    ``bytes``, or -- for long values (a JsonConverter envelope with its schema, several KB) -- read-only
    ``pyarrow.Buffer`` slices of the array's data, which spare two copies of every value (the producer
    copies each value anyway). Either kind has ``len()`` and the value's bytes."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if arr.null_count == n:
        return [None] * n
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    ends = memoryview(bufs[1]).cast("q" if large else "i")[arr.offset:arr.offset + n + 1]
    if bufs[2] is None or ends[-1] - ends[0] <= _SLICE_FROM * n:
        # bytes objects made by Arrow's own loop (nulls as None): a fifth of the time of slicing in Python
        binary = pa.large_binary() if large else pa.binary()
        return (arr if arr.type == binary else arr.cast(binary)).to_numpy(zero_copy_only=False).tolist()
    offsets, data = ends.tolist(), bufs[2]
    out = [data.slice(a, b - a) for a, b in zip(offsets, offsets[1:])]
    if arr.null_count:
        for i in arr.is_null().to_numpy(zero_copy_only=False).nonzero()[0].tolist():
            out[i] = None
    return out


def _sizes(items: list, start: int, stop: int) -> int:
    return sum(len(x) for x in items[start:stop] if x is not None)


class BatchProducer:
    """Encodes and produces batches for one task (see the module docstring)."""

    def __init__(self, key_converter, value_converter, chain, producer, fatal):
        self.key_encoder = batch_encoder(key_converter)
        self.value_encoder = batch_encoder(value_converter)
        self.columnar = self.key_encoder is not None and self.value_encoder is not None
        self.chain = chain if chain else None
        self.producer, self.fatal = producer, fatal

    def send(self, original: SourceBatch, send_record, dead_letter, ensure_topic) -> tuple[str, int, int, int]:
        """Produce every row of ``original`` after the transforms: in columns where it can, else through
        ``send_record(record)`` with the row's record before transforms (which counts, transforms,
        creates its topic and dead-letters it itself). ``ensure_topic(topic)`` is called for the topic
        the transformed batch goes to before its first row is produced. Returns (that topic, records
        produced here, their key+value bytes, rows a Filter dropped here)."""
        batch = original
        if self.columnar and self.chain is not None and len(original):
            # transforms see a tombstone as a record (a null value); a batch holding one goes record by record
            batch = apply_chain(self.chain, original) if not original.tombstones else None
        if not self.columnar or batch is None or not len(original):
            for record in original.to_records():
                send_record(record)
            return original.topic, 0, 0, 0
        if not len(batch):  # a Filter dropped every row: handled, so the batch's offset advances
            return batch.topic, 0, 0, len(original)
        value = self.value_encoder.encode(batch, *side_columns(batch, False))
        key = self.key_encoder.encode(batch, *side_columns(batch, True)) if value is not None else None
        if value is None or key is None:
            for record in original.to_records():
                send_record(record)
            return original.topic, 0, 0, 0
        ensure_topic(batch.topic)
        values, keys = byte_list(value.data), byte_list(key.data)
        value_slow = set(value.slow)
        for i in batch.tombstones:  # no value: whatever its columns hold (nulls) is not encoded
            values[i] = None
            value_slow.discard(i)
        slow = sorted(value_slow | set(key.slow))
        base = produce_options(batch)
        topic, producer = batch.topic, self.producer
        produced = nbytes = 0
        start = 0
        for stop in slow + [len(batch)]:
            if not base:  # the common case: the tight loop
                for i in range(start, stop):
                    k, v = keys[i], values[i]
                    try:
                        producer.produce(topic, v, k)
                    except (BufferError, KafkaException):
                        refused = produce(producer, topic, dict(base, key=k, value=v), self.fatal)
                        if refused is not None:
                            nbytes -= len(v or b"") + len(k or b"")  # counted below with the others: not sent
                            dead_letter("KAFKA_PRODUCE", refused, original.to_records([i])[0], "Producer")
                            continue
                    produced += 1
                    if not produced % 1000:  # serves delivery reports (the producer reports failures only)
                        producer.poll(0)
                nbytes += _sizes(values, start, stop) + _sizes(keys, start, stop)
            else:
                for i in range(start, stop):
                    k, v = keys[i], values[i]
                    refused = produce(producer, topic, dict(base, key=k, value=v), self.fatal)
                    if refused is not None:
                        dead_letter("KAFKA_PRODUCE", refused, original.to_records([i])[0], "Producer")
                        continue
                    produced += 1
                    nbytes += len(v or b"") + len(k or b"")
                    if not produced % 1000:
                        producer.poll(0)
            if stop < len(batch):  # a row the encoders left: the per-record path, transforms included
                send_record(original.to_records([stop])[0])
            start = stop + 1
        return topic, produced, nbytes, 0
