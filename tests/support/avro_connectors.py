"""A source of Connect Structs for the Avro tests (importable as tests.support.avro_connectors).

``StructSource`` has one partition and emits records ``start .. start+count-1`` of the
``com.example.Order`` schema, version 1 (``schema.version=1``) or version 2
(``schema.version=2``: version 1 plus an optional ``email`` field at the end). The
values are :func:`order` of their number, so tests can compute what they expect.
"""

from __future__ import annotations

import datetime as dt
import decimal

from airflow_copycat.connect import (ConfigDef, ConfigType, Date, Decimal, Schema, SchemaBuilder, SourceConnector,
                                     SourceRecord, SourceTask, Struct, Time, Timestamp)

CUSTOMER = (SchemaBuilder.struct().name("com.example.Customer")
            .field("name", Schema.STRING).field("vip", Schema.BOOLEAN).build())


def _order_builder() -> SchemaBuilder:
    return (SchemaBuilder.struct().name("com.example.Order")
            .field("id", Schema.INT32)
            .field("qty", Schema.INT8)
            .field("seq", Schema.INT64)
            .field("amount", Decimal.builder(2).parameter("connect.decimal.precision", "10").build())
            .field("price", Schema.FLOAT64)
            .field("ratio", Schema.FLOAT32)
            .field("created", Timestamp.builder().build())
            .field("day", Date.builder().build())
            .field("at", Time.builder().build())
            .field("note", Schema.OPTIONAL_STRING)
            .field("tags", SchemaBuilder.array(Schema.STRING).build())
            .field("attrs", SchemaBuilder.map(Schema.STRING, Schema.INT64).build())
            .field("counts", SchemaBuilder.map(Schema.INT32, Schema.STRING).build())
            .field("customer", CUSTOMER)
            .field("raw", Schema.OPTIONAL_BYTES))


ORDER_V1 = _order_builder().build()
ORDER_V2 = _order_builder().field("email", Schema.OPTIONAL_STRING).build()
BASE = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)


def order(n: int, version: int = 1) -> Struct:
    """Record ``n`` of the given schema version (odd records leave the optional fields null)."""
    schema = ORDER_V1 if version == 1 else ORDER_V2
    values = {
        "id": n, "qty": n % 100, "seq": 10**12 + n, "amount": decimal.Decimal(n) + decimal.Decimal("0.25"),
        "price": n * 1.5, "ratio": 0.5, "created": BASE + dt.timedelta(seconds=n),
        "day": dt.date(2024, 5, 1) + dt.timedelta(days=n), "at": dt.time(12, 0, n % 60),
        "note": None if n % 2 else f"note {n}", "tags": [f"t{n}", "x"], "attrs": {"a": n},
        "counts": {n: "n", -1: "minus"}, "customer": Struct(CUSTOMER, {"name": f"c{n}", "vip": n % 2 == 0}),
        "raw": None if n % 2 else bytes([n % 256]),
    }
    if version == 2:
        values["email"] = None if n % 2 else f"u{n}@example.com"
    return Struct(schema, values)


class StructSource(SourceConnector):
    config_def = (ConfigDef().define("topic", ConfigType.STRING).define("count", ConfigType.INT, 3)
                  .define("start", ConfigType.INT, 0).define("schema.version", ConfigType.INT, 1))

    def partitions(self):
        return [{"orders": "all"}]

    def task_class(self):
        return StructTask


class StructTask(SourceTask):
    def start(self, config):
        self.topic = config["topic"]
        self.version = int(config.get("schema.version", 1))
        self.end = int(config.get("start", 0)) + int(config["count"])
        offset = self.context.offset_storage_reader.offset({"orders": "all"})
        self.next = offset["n"] if offset else int(config.get("start", 0))

    def poll(self):
        if self.next >= self.end:
            return None
        out = []
        while self.next < self.end and len(out) < 50:
            n = self.next
            value = order(n, self.version)
            out.append(SourceRecord(topic=self.topic, kafka_partition=0, key_schema=Schema.STRING, key=str(n),
                                    value_schema=value.schema, value=value,
                                    source_partition={"orders": "all"}, source_offset={"n": n + 1}))
            self.next = n + 1
        return out
