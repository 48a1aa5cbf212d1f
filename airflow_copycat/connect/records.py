"""Records: the unit that moves between connectors, converters, transforms and Kafka.

Records are immutable. ``new_record(**changes)`` returns a copy with some fields
replaced; transforms use it instead of mutating (Kafka Connect's ``newRecord``).

Field meanings follow Kafka Connect's ``ConnectRecord``:

* ``topic`` -- the Kafka topic the record goes to (source) or came from (sink).
* ``kafka_partition`` -- the Kafka partition, or ``None`` to let the producer's
  partitioner choose from the key (source records only).
* ``key_schema`` / ``key``, ``value_schema`` / ``value`` -- the data and, where
  known, its :class:`~airflow_copycat.connect.data.Schema`. ``None`` as a schema
  means schemaless (a dict, list or primitive as is). ``None`` as a value is a
  tombstone.
* ``timestamp`` -- milliseconds since the epoch, or ``None`` (the producer's time).
* ``headers`` -- a tuple of ``(name, bytes-or-None)`` pairs, in order, names may repeat.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

from .data import Schema

Headers = tuple  # tuple[tuple[str, bytes | None], ...]

_SEQUENCE = itertools.count()
_FIELD_NAMES: dict[type, frozenset] = {}


def next_sequence() -> int:
    """A process-wide increasing number: orders source records and reported errors as a task made them."""
    return next(_SEQUENCE)


def _freeze_headers(headers) -> tuple:
    if not headers:
        return ()
    out = []
    for name, value in headers:
        if isinstance(value, str):
            value = value.encode("utf-8")
        out.append((str(name), value))
    return tuple(out)


@dataclass(frozen=True)
class ConnectRecord:
    topic: str
    kafka_partition: int | None = None
    key_schema: Schema | None = None
    key: Any = None
    value_schema: Schema | None = None
    value: Any = None
    timestamp: int | None = None
    headers: Headers = field(default=())

    def __post_init__(self):
        object.__setattr__(self, "headers", _freeze_headers(self.headers))

    def new_record(self, **changes) -> "ConnectRecord":
        """Return a copy of this record with the given fields replaced (a record of the same
        class: a SourceRecord keeps its source partition, offset and sequence)."""
        cls = type(self)
        names = _FIELD_NAMES.get(cls)
        if names is None:
            names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
        if not names.issuperset(changes):
            raise TypeError(f"{cls.__name__} has no field(s) {sorted(set(changes) - names)}")
        if "headers" in changes:
            changes["headers"] = _freeze_headers(changes["headers"])
        # what dataclasses.replace does, without re-running __init__ for every transform of every record
        copy = object.__new__(cls)
        state = copy.__dict__
        state.update(self.__dict__)
        state.update(changes)
        return copy

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or ``None`` if absent."""
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None


@dataclass(frozen=True)
class SourceRecord(ConnectRecord):
    """A record read from an external system, on its way into Kafka.

    ``source_partition`` identifies where it came from (``{"filename": "/var/log/a"}``)
    and ``source_offset`` the position *after* it in that partition
    (``{"position": 1234}``): both are small JSON values of primitives. The
    framework commits ``source_offset`` once this record, and every record of
    the same partition before it, has been acknowledged by Kafka. A task that
    restarts from that offset must emit no record before it.
    """

    source_partition: dict | None = None
    source_offset: dict | None = None
    sequence: int = field(default_factory=next_sequence, compare=False, repr=False)
    """When the task made this record, relative to its other records and reported errors
    (set automatically; the framework uses it to order offsets of skipped records)."""


@dataclass(frozen=True)
class SinkRecord(ConnectRecord):
    """A record read from Kafka, on its way out to an external system.

    ``kafka_offset`` is its offset in ``topic``/``kafka_partition``; the offset a
    sink commits for that partition after writing it is ``kafka_offset + 1``.
    ``timestamp_type`` is ``"CreateTime"``, ``"LogAppendTime"`` or ``None``.

    ``original_topic``, ``original_kafka_partition`` and ``original_kafka_offset`` (Kafka
    Connect's KIP-793) are where the message was read, set by the framework and kept by every
    transform: a transform may change ``topic`` (RegexRouter), and a sink that keeps offsets
    itself must key them by these (``None`` in records not read from Kafka: use
    :attr:`read_from`).
    """

    kafka_offset: int = -1
    timestamp_type: str | None = None
    original_topic: str | None = None
    original_kafka_partition: int | None = None
    original_kafka_offset: int | None = None

    @property
    def read_from(self) -> tuple[str, int, int]:
        """``(topic, partition, offset)`` of the Kafka message this record was read from."""
        if self.original_topic is None:
            return self.topic, self.kafka_partition, self.kafka_offset
        return self.original_topic, self.original_kafka_partition, self.original_kafka_offset
