"""Batches: many rows of one source partition in column form (Apache Arrow), the fast unit.

A record (:class:`~.records.SourceRecord`) is the simple way to write a task; a
batch is the fast one. A source task's ``poll()`` may return, in its list, a
:class:`SourceBatch` in place of records (lists may mix both, in order): the
framework converts and produces its rows without building a Python object per
row, which is what lets a connector run at the speed of a hand-written
pipeline. A batch *means* exactly the records :meth:`SourceBatch.to_records`
returns: every framework step that cannot work on columns (a transform that
only knows records, a converter without a batch encoder, a row whose value
does not fit its schema) falls back to those records, with the same output,
the same errors and the same dead letters.

When to return a batch: when the task already holds its rows as columns (a
database driver that reads into Arrow, a file split into lines in one call),
or reads many thousands of rows per ``poll()``. When records are fine: a few
rows per poll, rows of many shapes, values that are nested Python objects.

What a batch may contain:

* ``data``: a ``pyarrow.Table`` or ``RecordBatch``, any number of rows (0 is
  allowed and moves the offset). With a struct ``value_schema`` its columns are
  the schema's fields, by name, in any order (extra columns are ignored); with a
  primitive ``value_schema`` (a string line, a bytes blob) the value is the
  column named :data:`VALUE_COLUMN`.
* Arrow types that match the field's Connect schema: ``int8``..``int64`` for
  INT8..INT64, ``float32``/``float64``, ``bool``, ``string``/``large_string``,
  ``binary``/``large_binary``, ``decimal128(p, s)`` for Decimal with scale
  ``s``, ``timestamp(unit, tz)`` for Timestamp (an instant; naive means UTC;
  unit ``s``, ``ms`` or ``us``: a record cannot carry nanoseconds), ``date32``
  for Date (years 1 to 9999, as a record's ``datetime.date``), ``time32`` or
  ``time64('us')`` for Time, and ``struct``, ``list``
  and ``map`` for the Connect types of the same names. A null is a ``None``
  field value, exactly as in a record.
* ``key_fields``: the columns whose Struct is the key, in the order of
  ``key_schema``'s fields (usually value fields of the same names; a column may
  carry another name when a transform renamed the value's field), or empty for
  no key. A primitive key is the
  column :data:`KEY_COLUMN` with a primitive ``key_schema``.
* ``source_partition`` / ``source_offset``: the one partition every row came
  from and the offset *after the batch's last row*: the framework commits it
  once every row of the batch (and every row before it) was acknowledged by
  Kafka, dead-lettered or dropped by a transform. ``row_offsets``, when given,
  says the offset after each row (any sequence of ``len(data)`` dicts, or an
  object with ``__len__``/``__getitem__`` computing them lazily); it is used
  only for a row that fails (error messages, dead-letter context) and when the
  framework falls back to records. Without it every row carries
  ``source_offset``.
* ``timestamp`` (epoch ms for every row, or ``None``) and ``headers`` (the same
  ``(name, bytes)`` pairs for every row), as a record's.
* ``tombstones``: the indexes (ascending) of rows whose value is null -- a
  tombstone, a record without value schema or value, as a change stream sends
  after a delete. Their key is the row's as for any row; their value columns
  are ignored (nulls, usually). A batch holding tombstones is transformed record
  by record when the connector has transforms.

A batch must not: mix partitions (return one batch per partition), change
``data`` after it was returned (the framework may read it after the next
``poll()``), or hold rows before the task's committed offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .data import Schema, Struct, Type
from .errors import DataException
from .records import SourceRecord, next_sequence

_MICROS_AT_MOST = ("org.apache.kafka.connect.data.Timestamp", "org.apache.kafka.connect.data.Time")

VALUE_COLUMN = "value"
"""The column holding a primitive (non-struct) value."""
KEY_COLUMN = "key"
"""The column holding a primitive (non-struct) key."""


@dataclass(frozen=True, eq=False)
class SourceBatch:
    """Rows of one source partition on their way into Kafka; see the module docstring."""

    topic: str
    data: Any  # pyarrow.Table | pyarrow.RecordBatch (connect/ does not import pyarrow at module level)
    value_schema: Schema
    source_partition: dict
    source_offset: dict
    key_fields: tuple[str, ...] = ()
    key_schema: Schema | None = None
    row_offsets: Sequence[dict] | None = None
    timestamp: int | None = None
    headers: tuple = ()
    kafka_partition: int | None = None
    tombstones: Sequence[int] = ()
    sequence: int = field(default_factory=next_sequence, compare=False, repr=False)
    """When the task made this batch relative to its records and reported errors (as a record's)."""

    def __post_init__(self):
        if self.value_schema.type is Type.STRUCT:
            missing = [f.name for f in self.value_schema.fields if f.name not in self.data.schema.names]
            if missing:
                raise DataException(f"batch for topic {self.topic}: no column for field(s) {missing}")
        elif VALUE_COLUMN not in self.data.schema.names:
            raise DataException(f"batch for topic {self.topic}: a {self.value_schema.type.value} value needs "
                                f"the column {VALUE_COLUMN!r}")
        if self.value_schema.type is Type.STRUCT:
            fine = [f.name for f in self.value_schema.fields if f.schema.name in _MICROS_AT_MOST
                    and getattr(self.data.schema.field(f.name).type, "unit", None) == "ns"]
            if fine:
                raise DataException(f"batch for topic {self.topic}: field(s) {fine} hold nanoseconds, which a "
                                    f"record cannot carry: cast them to unit 'us'")
        if self.key_fields and (self.key_schema is None or self.key_schema.type is not Type.STRUCT):
            raise DataException(f"batch for topic {self.topic}: key_fields need a struct key_schema")
        if self.tombstones and not (0 <= self.tombstones[0] and self.tombstones[-1] < self.data.num_rows and
                                    all(a < b for a, b in zip(self.tombstones, self.tombstones[1:]))):
            raise DataException(f"batch for topic {self.topic}: tombstones must be ascending row indexes "
                                f"below {self.data.num_rows}")
        if self.row_offsets is not None and len(self.row_offsets) != self.data.num_rows:
            raise DataException(f"batch for topic {self.topic}: {len(self.row_offsets)} row offsets for "
                                f"{self.data.num_rows} rows")

    def __len__(self) -> int:
        return self.data.num_rows

    @property
    def has_key(self) -> bool:
        return bool(self.key_fields) or (self.key_schema is not None and KEY_COLUMN in self.data.schema.names)

    def offset_of(self, row: int) -> dict:
        """The source offset after row ``row`` (``source_offset`` when the batch has no row offsets)."""
        return self.source_offset if self.row_offsets is None else self.row_offsets[row]

    def to_records(self, rows: Sequence[int] | None = None) -> list[SourceRecord]:
        """The records this batch stands for (only ``rows``, by index, when given): the meaning of
        a batch, and the framework's fallback. Values are Connect values (Structs, ``datetime``
        for Timestamp, ``decimal.Decimal`` for Decimal, ...), built as a record's would be."""
        table = self.data
        if rows is not None:
            import pyarrow as pa

            table = table.take(pa.array(rows, type=pa.int64()))
        index = list(range(self.data.num_rows)) if rows is None else list(rows)
        values = column_values(table, self.value_schema)
        if self.key_fields:  # the key's fields by position: a column may carry another name than its field
            keys = table.select(list(self.key_fields)).rename_columns([f.name for f in self.key_schema.fields])
            key_columns = column_values(keys, self.key_schema)
        elif self.has_key:
            key_columns = _values(table.column(KEY_COLUMN), self.key_schema)
        else:
            key_columns = None
        tombstones = set(self.tombstones)
        out = []
        for n, i in enumerate(index):
            tombstone = i in tombstones
            out.append(SourceRecord(
                topic=self.topic, kafka_partition=self.kafka_partition,
                key_schema=self.key_schema if key_columns is not None else None,
                key=None if key_columns is None else key_columns[n],
                value_schema=None if tombstone else self.value_schema, value=None if tombstone else values[n],
                timestamp=self.timestamp,
                headers=self.headers, source_partition=self.source_partition, source_offset=self.offset_of(i)))
        return out


class RowOffsets:
    """A batch's ``row_offsets`` made on demand: ``make(i)`` is the offset after row ``i`` of ``n``
    (``len``, ``[i]`` and iteration, as :class:`SourceBatch` takes them); the framework asks only for a
    failed row's and a fallback's, so the others are never built. A subclass may define ``_make`` as a method
    instead of passing ``make`` (a bound method kept on the object would make it a reference cycle, freed
    only by the garbage collector, with all it holds), and may add rows (``_n``) while it builds its batch,
    never after the batch is returned."""

    def __init__(self, n: int, make: Callable[[int], dict] | None = None):
        self._n = n
        if make is not None:
            self._make = make

    def _make(self, i: int) -> dict:
        raise NotImplementedError("RowOffsets needs make, or a subclass defining _make")

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> dict:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._make(i)

    def __iter__(self):
        return (self._make(i) for i in range(self._n))


def column_values(table, schema: Schema) -> list:
    """The Connect values of ``table``'s rows for ``schema``: Structs of the schema's fields for a
    struct schema, else the values of column :data:`VALUE_COLUMN`."""
    if schema.type is not Type.STRUCT:
        return _values(table.column(VALUE_COLUMN), schema)
    columns = [_values(table.column(f.name), f.schema) for f in schema.fields]
    trusted = Struct._trusted
    return [trusted(schema, list(row)) for row in zip(*columns)] if columns else \
        [trusted(schema, []) for _ in range(table.num_rows)]


def _values(column, schema: Schema) -> list:
    """One Arrow column as Connect values of ``schema`` (None for nulls)."""
    import datetime as dt

    values = column.to_pylist()
    if schema.type is Type.STRUCT:
        import pyarrow as pa

        chunks = column.chunks if hasattr(column, "chunks") else [column]
        table = pa.Table.from_batches([pa.RecordBatch.from_struct_array(c) for c in chunks]) if chunks else None
        if table is None:
            return []
        structs = column_values(table, schema)
        return [None if v is None else s for v, s in zip(values, structs)]
    if schema.type is Type.ARRAY:
        return [None if v is None else [_plain(x, schema.value_schema) for x in v] for v in values]
    if schema.type is Type.MAP:
        return [None if v is None else {_plain(k, schema.key_schema): _plain(x, schema.value_schema) for k, x in v}
                for v in values]
    if schema.name == "org.apache.kafka.connect.data.Timestamp":
        utc = dt.timezone.utc
        return [None if v is None else (v.replace(tzinfo=utc) if v.tzinfo is None else v.astimezone(utc))
                for v in values]
    if schema.type is Type.FLOAT32:
        return values  # already the float32 value as a Python float
    return values


def _plain(v, schema: Schema):
    """A nested value (inside an array or a map) as a Connect value."""
    if v is None:
        return None
    if schema.type is Type.STRUCT:
        return Struct._trusted(schema, [_plain(v.get(f.name), f.schema) for f in schema.fields])
    if schema.type is Type.ARRAY:
        return [_plain(x, schema.value_schema) for x in v]
    if schema.type is Type.MAP:
        return {_plain(k, schema.key_schema): _plain(x, schema.value_schema) for k, x in v}
    if schema.name == "org.apache.kafka.connect.data.Timestamp":
        import datetime as dt

        return v.replace(tzinfo=dt.timezone.utc) if v.tzinfo is None else v.astimezone(dt.timezone.utc)
    return v
