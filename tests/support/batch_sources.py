"""A source connector that emits the same generated rows either as records or as batches (importable as
``tests.support.batch_sources``), for differential tests of the batch path against the record path.

Config: ``topic``, ``rows`` (how many), ``batch.rows`` (rows per poll), ``emit`` (``batches`` or
``records``: the records are the batches' ``to_records()``), ``seed``, ``bad.every`` (every k-th
row has a null in the required field ``qty``: a row the JsonConverter refuses; 0 = none),
``row.offsets`` (false: batches carry only the offset after their last row), ``tombstone.every`` (every
k-th row is a tombstone: its key, a null value; 0 = none). One
source partition ``{"rows": <name>}``; the offset after row ``i`` is ``{"row": i + 1}``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random

import pyarrow as pa

from airflow_copycat.connect import ConfigDef, ConfigType, Schema, SchemaBuilder, SourceBatch, SourceConnector
from airflow_copycat.connect import SourceTask
from airflow_copycat.connect.data import Decimal, Timestamp

VALUE_SCHEMA = (SchemaBuilder.struct().name("gen.Order")
                .field("id", Schema.INT64)
                .field("customer", Schema.OPTIONAL_STRING)
                .field("qty", Schema.INT32)
                .field("amount", Decimal.builder(2).optional().build())
                .field("score", Schema.OPTIONAL_FLOAT32)
                .field("updated_at", Timestamp.builder().build())
                .build())
KEY_SCHEMA = SchemaBuilder.struct().field("id", Schema.INT64).build()
_NAMES = ["ana", 'bo "the" bear', "zoë", "line\nbreak", "emoji 😀", "tab\there", "ctl\x01"]


def generate(n: int, seed: int, bad_every: int) -> pa.Table:
    rnd = random.Random(seed)
    epoch = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "id": pa.array(range(1, n + 1), pa.int64()),
        "customer": pa.array([None if rnd.random() < 0.1 else rnd.choice(_NAMES) for _ in range(n)]),
        "qty": pa.array([None if bad_every and (i + 1) % bad_every == 0 else rnd.randint(-5, 500) for i in range(n)],
                        pa.int32()),
        "amount": pa.array([None if rnd.random() < 0.1 else decimal.Decimal(rnd.randint(-10**9, 10**9)).scaleb(-2)
                            for _ in range(n)], pa.decimal128(12, 2)),
        "score": pa.array([rnd.choice([None, 0.1, 1e-5, 3.5e9, rnd.random(), float("nan")]) for _ in range(n)],
                          pa.float32()),
        "updated_at": pa.array([epoch + dt.timedelta(microseconds=rnd.randint(-10**15, 10**15)) for _ in range(n)],
                               pa.timestamp("us", tz="UTC")),
    })


class _RowOffsets:
    def __init__(self, start: int, n: int):
        self.start, self.n = start, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"row": self.start + i + 1}


class GeneratedRowsSource(SourceConnector):
    config_def = (ConfigDef().define("topic", ConfigType.STRING, "").define("rows", ConfigType.INT, 100)
                  .define("batch.rows", ConfigType.INT, 40).define("emit", ConfigType.STRING, "batches")
                  .define("seed", ConfigType.INT, 1).define("bad.every", ConfigType.INT, 0)
                  .define("row.offsets", ConfigType.BOOLEAN, True).define("tombstone.every", ConfigType.INT, 0))

    def partitions(self):
        return [{"rows": str(self.config["name"])}]

    def exactly_once_support(self, config):
        return True

    def task_class(self):
        return GeneratedRowsTask


class GeneratedRowsTask(SourceTask):
    def start(self, config):
        values = GeneratedRowsSource.config_def.parse(config)
        self.partition = {"rows": str(config["name"])}
        self.topic, self.size, self.emit = values["topic"], values["batch.rows"], values["emit"]
        self.row_offsets, self.tombstone_every = values["row.offsets"], values["tombstone.every"]
        self.table = generate(values["rows"], values["seed"], values["bad.every"])
        offset = self.context.offset_storage_reader.offset(self.partition)
        self.next = int(offset["row"]) if offset else 0

    def poll(self):
        if self.next >= self.table.num_rows:
            return None
        n = min(self.size, self.table.num_rows - self.next)
        batch = SourceBatch(self.topic, self.table.slice(self.next, n), VALUE_SCHEMA, self.partition,
                            {"row": self.next + n}, key_fields=("id",), key_schema=KEY_SCHEMA,
                            row_offsets=_RowOffsets(self.next, n) if self.row_offsets else None,
                            tombstones=tuple(i for i in range(n) if self.tombstone_every
                                             and (self.next + i + 1) % self.tombstone_every == 0))
        self.next += n
        return [batch] if self.emit == "batches" else batch.to_records()
