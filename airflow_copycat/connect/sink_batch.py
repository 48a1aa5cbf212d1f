"""Sink batches: the raw messages of one consume round, in column form, on their way to a sink task.

A sink task gets records through ``put(records)``; a task that can work on
columns gets the messages themselves, still undecoded, through
``put_batch(batch)`` (:meth:`~.task.SinkTask.put_batch`). A
:class:`SinkBatch` holds the messages the framework read from Kafka in one
round, as columns: ``topics``, ``partitions``, ``offsets``, ``timestamps``
(with ``timestamp_types``), ``keys`` and ``values`` (the bytes as stored in
Kafka, ``None`` for a null) and ``headers``. A batch *means* exactly the
records :meth:`SinkBatch.to_records` returns: the messages decoded by the
connector's ``key.converter`` / ``value.converter``, in order, each message
that fails to decode handled by ``errors.*`` (the task fails naming where,
or the message is logged, dead-lettered with its original bytes and left
out). A task that cannot do something with columns exactly as the records
would do it (a value it cannot decode, a converter it does not know) calls
``to_records()`` and writes those: the same output, the same errors, the
same dead letters. That is also what the default ``put_batch`` does.

When the framework hands a batch: to a task whose class overrides
``put_batch``, when the connector has no ``transforms`` (a transform works on
records, so such a run gets records through ``put``). A task gets either
batches or records for a whole run, never both.

What a batch holds, and what it may not:

* one or more topic-partitions of the task's assignment, each in offset
  order, its messages' offsets increasing (not necessarily contiguous:
  compaction and transaction markers leave gaps); :meth:`SinkBatch.runs`
  gives the rows of each partition. Never a partition's end-of-partition or
  error event, never a message below the position the task asked for with
  ``context.offset``... unless given again after a retried ``put_batch``
  (as with ``put``, a sink skips what it already wrote).
* at least one message.
* the converters of the task's connector (``key_converter``,
  ``value_converter``), so a task may decode values itself when it knows the
  converter (``isinstance(batch.value_converter, JsonConverter)`` and its
  ``schemas_enable``).

Offsets are the framework's: after ``put_batch`` returns, every message of the
batch counts as handled (written or buffered by the task, or failed and
handled by ``errors.*``), and the next ``pre_commit`` gets positions after
the batch's last message of each partition. A task may keep the batch after
``put_batch`` returns only while it finishes writing it, before it writes
anything of the next batch, in ``pre_commit`` or in ``stop`` (see
``SinkTask.put_batch``); it may raise :class:`~.errors.RetriableException` to
get the same batch again after a back-off, as with ``put``.
"""

from __future__ import annotations

from itertools import compress, islice
from operator import ne
from typing import Any, Callable, Sequence

from .converters import Converter, SchemaAndValue
from .errors import DataException
from .records import SinkRecord

TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}
"""Kafka's timestamp type codes (0: none) as :attr:`SinkRecord.timestamp_type` names them."""

KEY_CONVERTER, VALUE_CONVERTER = "KEY_CONVERTER", "VALUE_CONVERTER"
"""The stages a decoding failure is reported under (Kafka Connect's ``Stage`` names)."""

ConversionFailed = Callable[["SinkBatch", int, str, Converter, Exception], "SchemaAndValue | None"]
"""The framework's handling of a message that failed to decode: ``(batch, row, stage, converter,
error)``; returns the value a retry produced, ``None`` when the message was handled (logged,
dead-lettered) and is to be left out, or raises to fail the task."""

_COLUMNS = ("topics", "partitions", "offsets", "timestamps", "timestamp_types", "keys", "values", "headers")


def _accessor(messages: Sequence[Any], name: str, uniform: bool):
    """The method ``name`` of the messages' class, unbound (one lookup for the whole column),
    when all messages are of one class (``uniform``), else a getter per message."""
    method = getattr(type(messages[0]), name, None) if uniform else None
    return method if method is not None else (lambda m: getattr(m, name)())


def _changes(column: list, n: int) -> list[int]:
    """The rows ``i`` (``0 < i < n``) where ``column[i] != column[i - 1]``, found without a Python
    step per row."""
    return list(compress(range(1, n), map(ne, islice(column, 1, None), column)))


def _fail(batch: "SinkBatch", row: int, stage: str, converter: Converter, error: Exception):
    """Without the framework (a batch built in a test): a message that does not decode fails."""
    raise DataException(f"{stage} failed for the record at topic {batch.topics[row]} partition "
                        f"{batch.partitions[row]} offset {batch.offsets[row]}: {error}") from error


class SinkBatch:
    """The messages of one consume round (see the module docstring).

    Build one from consumer messages (:meth:`from_messages`: any objects with
    confluent-kafka's ``Message`` accessors; columns are read from them on first
    use) or from columns given as keyword arguments (each a sequence with one
    item per message; ``timestamps``, ``timestamp_types`` and ``headers`` may be
    left out). Columns are lists; do not change them.
    """

    def __init__(self, *, key_converter: Converter, value_converter: Converter,
                 on_conversion_error: ConversionFailed | None = None, messages: Sequence[Any] | None = None,
                 **columns: Sequence[Any]):
        unknown = set(columns) - set(_COLUMNS)
        if unknown:
            raise TypeError(f"SinkBatch has no column(s) {sorted(unknown)}")
        self.key_converter = key_converter
        self.value_converter = value_converter
        self._on_error = on_conversion_error or _fail
        self._messages = messages
        self._columns: dict[str, list] = {k: list(v) for k, v in columns.items()}
        if messages is None:
            n = len(self._columns.get("offsets", ()))
            for name in ("topics", "partitions", "offsets", "keys", "values"):
                if len(self._columns.get(name, ())) != n:
                    raise ValueError(f"SinkBatch: column {name!r} needs {n} items")
            self._columns.setdefault("timestamps", [None] * n)
            self._columns.setdefault("timestamp_types", [None] * n)
            self._columns.setdefault("headers", [[] for _ in range(n)])
        self._len = len(messages) if messages is not None else n
        self._records: dict[int, SinkRecord | None] = {}
        self._runs: list[tuple[str, int, int, int]] | None = None
        self._index: dict[tuple[str, int, int], int] | None = None
        self._uniform: bool | None = None  # all messages of one class

    @classmethod
    def from_messages(cls, messages: Sequence[Any], *, key_converter: Converter, value_converter: Converter,
                      on_conversion_error: ConversionFailed | None = None) -> "SinkBatch":
        """A batch of consumer messages (data messages only: no error or end-of-partition events)."""
        return cls(key_converter=key_converter, value_converter=value_converter,
                   on_conversion_error=on_conversion_error, messages=list(messages))

    # ------------------------------------------------------------ columns

    def __len__(self) -> int:
        return self._len

    def _column(self, name: str) -> list:
        col = self._columns.get(name)
        if col is None:
            msgs = self._messages
            if self._uniform is None:
                self._uniform = list(map(type, msgs)).count(type(msgs[0])) == len(msgs)
            if name in ("timestamps", "timestamp_types"):
                stamps = list(map(_accessor(msgs, "timestamp", self._uniform), msgs))
                self._columns["timestamps"] = [ts if kind else None for kind, ts in stamps]
                self._columns["timestamp_types"] = [TIMESTAMP_TYPES.get(kind) for kind, _ in stamps]
                return self._columns[name]
            accessor = {"topics": "topic", "partitions": "partition", "offsets": "offset", "keys": "key",
                        "values": "value", "headers": "headers"}[name]
            col = list(map(_accessor(msgs, accessor, self._uniform), msgs))
            if name == "headers":
                col = [h or [] for h in col]
            self._columns[name] = col
        return col

    @property
    def topics(self) -> list[str]:
        return self._column("topics")

    @property
    def partitions(self) -> list[int]:
        return self._column("partitions")

    @property
    def offsets(self) -> list[int]:
        return self._column("offsets")

    @property
    def timestamps(self) -> list[int | None]:
        """Epoch ms per message, ``None`` where Kafka has none."""
        return self._column("timestamps")

    @property
    def timestamp_types(self) -> list[str | None]:
        """``"CreateTime"``, ``"LogAppendTime"`` or ``None`` per message."""
        return self._column("timestamp_types")

    @property
    def keys(self) -> list[bytes | None]:
        return self._column("keys")

    @property
    def values(self) -> list[bytes | None]:
        return self._column("values")

    @property
    def headers(self) -> list[list[tuple[str, bytes | None]]]:
        """``(name, bytes)`` pairs per message, in order (an empty list for none)."""
        return self._column("headers")

    def runs(self) -> list[tuple[str, int, int, int]]:
        """``(topic, partition, start, stop)``: the rows ``start..stop-1`` are consecutive messages of one
        partition; in row order (a partition may have several runs when partitions interleave)."""
        if self._runs is None:
            topics, partitions, n = self.topics, self.partitions, self._len
            if not n:
                self._runs = []
            else:
                cuts = _changes(partitions, n)
                if topics.count(topics[0]) != n:  # several topics: a change of topic cuts too
                    cuts = sorted(set(cuts).union(_changes(topics, n)))
                bounds = [0, *cuts, n]
                self._runs = [(topics[a], partitions[a], a, b) for a, b in zip(bounds, bounds[1:])]
        return self._runs

    def row(self, topic: str, partition: int, offset: int) -> int | None:
        """The row of the message at ``topic``/``partition``/``offset``, or ``None``."""
        if self._index is None:
            self._index = {(t, p, o): i for i, (t, p, o) in enumerate(zip(self.topics, self.partitions, self.offsets))}
        return self._index.get((topic, partition, offset))

    # ------------------------------------------------------------ records

    def record(self, row: int) -> SinkRecord | None:
        """The record of message ``row``, decoded through the converters; ``None`` when it failed
        to decode and ``errors.*`` handled it (logged, dead-lettered). Decoded once: asking
        again returns the same record and reports no error twice."""
        if row in self._records:
            return self._records[row]
        topic, headers = self.topics[row], self.headers[row]
        key = self._convert(row, KEY_CONVERTER, self.key_converter, self.keys[row])
        value = None if key is None else self._convert(row, VALUE_CONVERTER, self.value_converter, self.values[row])
        record = None
        if value is not None:
            record = SinkRecord(
                topic=topic, kafka_partition=self.partitions[row], key_schema=key.schema, key=key.value,
                value_schema=value.schema, value=value.value, timestamp=self.timestamps[row], headers=headers,
                kafka_offset=self.offsets[row], timestamp_type=self.timestamp_types[row], original_topic=topic,
                original_kafka_partition=self.partitions[row], original_kafka_offset=self.offsets[row])
        self._records[row] = record
        return record

    def _convert(self, row: int, stage: str, converter: Converter, data: bytes | None) -> SchemaAndValue | None:
        try:
            return converter.to_connect_data(self.topics[row], data, self.headers[row])
        except Exception as e:  # the framework retries, dead-letters or fails
            return self._on_error(self, row, stage, converter, e)

    def to_records(self) -> list[SinkRecord]:
        """The records this batch stands for, in order: its meaning, and every task's fallback.
        Messages that failed to decode and were handled by ``errors.*`` are left out."""
        return [r for r in map(self.record, range(self._len)) if r is not None]

    def failed_rows(self) -> list[int]:
        """Rows decoded so far (by :meth:`record` / :meth:`to_records`) that failed and were handled."""
        return [i for i, r in self._records.items() if r is None]
