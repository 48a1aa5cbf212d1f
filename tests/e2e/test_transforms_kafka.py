"""Every single message transform and predicate, end to end through the real broker.

Each source-side case is one of Kafka Connect's documented examples (the Apache Kafka
documentation, https://kafka.apache.org/documentation/#connect_transforms, and Confluent's
SMT reference pages, https://docs.confluent.io/kafka-connectors/transforms/current/): the
records a connector emits, the transform config as Kafka Connect properties, and the
records as they must land in Kafka. A ``FixedRecordsSource`` emits the records through the
real source loop (transforms, JsonConverter, producer, offsets); a plain confluent-kafka
consumer reads every topic of the test back, and the bytes are compared with what Kafka
Connect's JsonConverter writes (the ``{"schema", "payload"}`` envelope, so the schema is
checked too, or the bare payload without schemas) and decoded with our JsonConverter.

Each case runs on schema'd data (a Struct, or a schema'd primitive where the example is
one) and on schemaless data (a map), unless Kafka Connect supports only one of them. The
runs of the source cases are started side by side (``source_runs``): each mostly waits on
the broker. Then a few cases through the sink loop, and the failure path (dead letter
queue, ``errors.tolerance=none``).
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_copycat.converters.dead_letters import H_KEY_FORMAT, H_VALUE_FORMAT, decode_source_record
from airflow_copycat.converters.json_converter import JsonConverter
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import admin_client, existing_topics, read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

SOURCE = "tests.support.record_sources:FixedRecordsSource"
JSON_SINK = "tests.support.connectors:JsonFileSink"
KAFKA = "org.apache.kafka.connect.transforms."
PREDICATES = KAFKA + "predicates."


# ------------------------------------------------------------------ Kafka Connect JSON schemas
# As Kafka's JsonConverter writes them (every schema says "optional"; struct fields add "field").


def s(type_: str, optional: bool = False, **extra) -> dict:
    return {"type": type_, "optional": optional, **extra}


def struct(*fields: tuple[str, dict], optional: bool = False, **extra) -> dict:
    return {"type": "struct", "fields": [dict(schema, field=name) for name, schema in fields], "optional": optional,
            **extra}


STRING, OPT_STRING = s("string"), s("string", True)
INT32, OPT_INT32, INT64, FLOAT64 = s("int32"), s("int32", True), s("int64"), s("double")
OPT_TIMESTAMP = s("int64", True, name="org.apache.kafka.connect.data.Timestamp", version=1)
TIMESTAMP = s("int64", name="org.apache.kafka.connect.data.Timestamp", version=1)


# ------------------------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Rec:
    """A record as a connector emits it (given) or as it lands in Kafka (then). Strings may
    hold ``{u}``, the test's unique suffix. ``*_schema`` None: that side is schemaless."""

    topic: str = "orders-{u}"
    value: Any = None
    value_schema: dict | None = None
    key: Any = None
    key_schema: dict | None = None
    headers: tuple = ()
    timestamp: int | None = None

    def schemaless(self) -> "Rec":
        return replace(self, value_schema=None, key_schema=None)


@dataclass(frozen=True)
class Case:
    id: str
    transforms: dict
    given: list[Rec]
    then: list[Rec]
    filtered: int = 0
    variants: tuple = ("schema", "schemaless")
    schemaless_then: list[Rec] | None = None  # where Kafka Connect's schemaless result differs
    xfail: str | None = None


def _one(value, schema=None, **kw):
    return [Rec(value=value, value_schema=schema, **kw)]


AUTHOR = struct(("author", STRING), ("character", STRING))
FLAT_BEFORE = {"content": {"id": 42, "name": {"first": "David", "middle": None, "last": "Wong"}}}
FLAT_SCHEMA = struct(("content", struct(("id", INT32), ("name", struct(
    ("first", STRING), ("middle", OPT_STRING), ("last", STRING))))))
USER = struct(("userId", INT32), ("address", STRING), ("city", STRING), ("state", STRING), ("country", STRING))
USER_VALUE = {"userId": 12, "address": "1942 Wilhelm Boulevard", "city": "Topeka", "state": "KS", "country": "US"}
BOOK = struct(("id", INT32), ("ts", INT64), ("name", STRING), ("book", STRING))
BOOK_VALUE = {"id": 24, "ts": 1626102708861, "name": "John Smith", "book": "Kafka: The Definitive Guide"}
OTHER_KEY = struct(("other_field", STRING), ("id", INT32))
PHONES = struct(("name", STRING), ("SSN", STRING), ("IPAddress", STRING), ("office", STRING), ("mobile", STRING))
ARRIVAL = 1626102708861  # a record timestamp (ms)

SOURCE_CASES = [
    # InsertField -- Confluent: "insert a static field labeled MessageSource"
    Case("InsertField$Value static field",
         {"transforms": "InsertField", "transforms.InsertField.type": KAFKA + "InsertField$Value",
          "transforms.InsertField.static.field": "MessageSource",
          "transforms.InsertField.static.value": "Kafka Connect framework"},
         _one({"author": "Philip K. Dick", "character": "Palmer Eldritch"}, AUTHOR),
         _one({"author": "Philip K. Dick", "character": "Palmer Eldritch", "MessageSource": "Kafka Connect framework"},
              struct(("author", STRING), ("character", STRING), ("MessageSource", OPT_STRING)))),
    # InsertField of record metadata on a source record: Confluent's note -- the partition is not known before
    # the record reaches Kafka, so the field is null (schema'd) / absent (schemaless); topic and timestamp are known
    Case("InsertField$Value metadata on a source record",
         {"transforms": "meta", "transforms.meta.type": KAFKA + "InsertField$Value",
          "transforms.meta.topic.field": "topic", "transforms.meta.partition.field": "partition",
          "transforms.meta.timestamp.field": "ts"},
         _one({"id": 1}, struct(("id", INT32)), timestamp=ARRIVAL),
         _one({"id": 1, "topic": "orders-{u}", "partition": None, "ts": ARRIVAL},
              struct(("id", INT32), ("topic", OPT_STRING), ("partition", OPT_INT32), ("ts", OPT_TIMESTAMP)),
              timestamp=ARRIVAL),
         schemaless_then=_one({"id": 1, "topic": "orders-{u}", "ts": ARRIVAL}, timestamp=ARRIVAL)),
    # InsertField$Key: the same insertion into the key; the value is left alone
    Case("InsertField$Key static field",
         {"transforms": "InsertField", "transforms.InsertField.type": KAFKA + "InsertField$Key",
          "transforms.InsertField.static.field": "MessageSource",
          "transforms.InsertField.static.value": "Kafka Connect framework"},
         [Rec(key={"author": "Philip K. Dick"}, key_schema=struct(("author", STRING)), value="v",
              value_schema=STRING)],
         [Rec(key={"author": "Philip K. Dick", "MessageSource": "Kafka Connect framework"},
              key_schema=struct(("author", STRING), ("MessageSource", OPT_STRING)), value="v", value_schema=STRING)]),
    # HoistField + InsertField -- the Apache Kafka documentation's own example (file source lines)
    Case("HoistField$Value + InsertField$Value (Kafka docs)",
         {"transforms": "MakeMap, InsertSource", "transforms.MakeMap.type": KAFKA + "HoistField$Value",
          "transforms.MakeMap.field": "line", "transforms.InsertSource.type": KAFKA + "InsertField$Value",
          "transforms.InsertSource.static.field": "data_source",
          "transforms.InsertSource.static.value": "test-file-source"},
         [Rec(value="Foo", value_schema=STRING), Rec(value="Bar", value_schema=STRING)],
         [Rec(value={"line": line, "data_source": "test-file-source"},
              value_schema=struct(("line", STRING), ("data_source", OPT_STRING))) for line in ("Foo", "Bar")]),
    # ReplaceField -- Confluent: "Drop a Field", "Rename a Field"
    Case("ReplaceField$Value exclude",
         {"transforms": "ReplaceField", "transforms.ReplaceField.type": KAFKA + "ReplaceField$Value",
          "transforms.ReplaceField.exclude": "c2"},
         _one({"c1": 22, "c2": "foo"}, struct(("c1", INT32), ("c2", STRING))),
         _one({"c1": 22}, struct(("c1", INT32)))),
    Case("ReplaceField$Value renames",
         {"transforms": "RenameField", "transforms.RenameField.type": KAFKA + "ReplaceField$Value",
          "transforms.RenameField.renames": "foo:c1,bar:c2"},
         _one({"foo": 22, "bar": "baz"}, struct(("foo", INT32), ("bar", STRING))),
         _one({"c1": 22, "c2": "baz"}, struct(("c1", INT32), ("c2", STRING)))),
    # the Japanese edition's "drop a field" example uses the deprecated name blacklist; here on the key
    Case("ReplaceField$Key blacklist",
         {"transforms": "ReplaceField", "transforms.ReplaceField.type": KAFKA + "ReplaceField$Key",
          "transforms.ReplaceField.blacklist": "c2"},
         [Rec(key={"c1": 22, "c2": "foo"}, key_schema=struct(("c1", INT32), ("c2", STRING)), value=1,
              value_schema=INT32)],
         [Rec(key={"c1": 22}, key_schema=struct(("c1", INT32)), value=1, value_schema=INT32)]),
    # MaskField -- Confluent: "Mask value", "Replace value" (three aliases)
    Case("MaskField$Value mask",
         {"transforms": "MaskField", "transforms.MaskField.type": KAFKA + "MaskField$Value",
          "transforms.MaskField.fields": "string_field"},
         _one({"integer_field": 22, "string_field": "foo"}, struct(("integer_field", INT32), ("string_field", STRING))),
         _one({"integer_field": 22, "string_field": ""}, struct(("integer_field", INT32), ("string_field", STRING)))),
    Case("MaskField$Value replacement",
         {"transforms": "SSNMask,IPMask,PhoneMask",
          "transforms.SSNMask.type": KAFKA + "MaskField$Value", "transforms.SSNMask.fields": "SSN",
          "transforms.SSNMask.replacement": "***-***-****",
          "transforms.IPMask.type": KAFKA + "MaskField$Value", "transforms.IPMask.fields": "IPAddress",
          "transforms.IPMask.replacement": "xxx.xxx.xxx.xxx",
          "transforms.PhoneMask.type": KAFKA + "MaskField$Value", "transforms.PhoneMask.fields": "office,mobile",
          "transforms.PhoneMask.replacement": "+0-000-000-0000"},
         _one({"name": "Ada", "SSN": "078-05-1120", "IPAddress": "55.121.20.20", "office": "+1-202-555-0100",
               "mobile": "+1-202-555-0199"}, PHONES),
         _one({"name": "Ada", "SSN": "***-***-****", "IPAddress": "xxx.xxx.xxx.xxx", "office": "+0-000-000-0000",
               "mobile": "+0-000-000-0000"}, PHONES)),
    # ValueToKey -- Confluent: "Transform Fields to Message Key", and chained with ExtractField$Key (JDBC c1)
    Case("ValueToKey",
         {"transforms": "ValueToKey", "transforms.ValueToKey.type": KAFKA + "ValueToKey",
          "transforms.ValueToKey.fields": "userId,city,state"},
         _one(USER_VALUE, USER),
         [Rec(key={"userId": 12, "city": "Topeka", "state": "KS"},
              key_schema=struct(("userId", INT32), ("city", STRING), ("state", STRING)),
              value=USER_VALUE, value_schema=USER)]),
    Case("ValueToKey + ExtractField$Key (JDBC key)",
         {"transforms": "createKey,extractInt", "transforms.createKey.type": KAFKA + "ValueToKey",
          "transforms.createKey.fields": "c1", "transforms.extractInt.type": KAFKA + "ExtractField$Key",
          "transforms.extractInt.field": "c1"},
         [Rec(value={"c1": n, "c2": "foo"}, value_schema=struct(("c1", OPT_INT32), ("c2", OPT_STRING))) for n in (1, 2)],
         [Rec(key=n, key_schema=OPT_INT32, value={"c1": n, "c2": "foo"},
              value_schema=struct(("c1", OPT_INT32), ("c2", OPT_STRING))) for n in (1, 2)]),
    # ExtractField -- Confluent: "Extract Field Name" ($Value; older editions show it on the key)
    Case("ExtractField$Value",
         {"transforms": "ExtractField", "transforms.ExtractField.type": KAFKA + "ExtractField$Value",
          "transforms.ExtractField.field": "id"},
         _one({"id": 42, "cost": 4000}, struct(("id", INT32), ("cost", INT32))),
         _one(42, INT32)),
    Case("ExtractField$Key",
         {"transforms": "ExtractField", "transforms.ExtractField.type": KAFKA + "ExtractField$Key",
          "transforms.ExtractField.field": "id"},
         [Rec(key={"id": 42, "cost": 4000}, key_schema=struct(("id", INT32), ("cost", INT32)), value="order",
              value_schema=STRING)],
         [Rec(key=42, key_schema=INT32, value="order", value_schema=STRING)]),
    # HoistField -- Confluent: lines Foo, Bar wrapped as {"line": ...}
    Case("HoistField$Value",
         {"transforms": "HoistField", "transforms.HoistField.type": KAFKA + "HoistField$Value",
          "transforms.HoistField.field": "line"},
         [Rec(value="Foo", value_schema=STRING), Rec(value="Bar", value_schema=STRING)],
         [Rec(value={"line": line}, value_schema=struct(("line", STRING))) for line in ("Foo", "Bar")]),
    # Cast -- Confluent: "Cast Value" and "Cast Comma-Separated Values". The page shows 63521704.02 becoming
    # "63521704.02", but Cast calls Java's Double.toString, which writes doubles from 10^7 up in E notation
    # (CastTest: 1e10 -> "1.0E10"): Kafka Connect writes "6.352170402E7".
    Case("Cast$Value whole value",
         {"transforms": "Cast", "transforms.Cast.type": KAFKA + "Cast$Value", "transforms.Cast.spec": "string"},
         _one(63521704.02, FLOAT64),
         _one("6.352170402E7", STRING)),
    Case("Cast$Value fields",
         {"transforms": "Cast", "transforms.Cast.type": KAFKA + "Cast$Value",
          "transforms.Cast.spec": "ID:string,score:float64"},
         _one({"ID": 46920, "score": 4761}, struct(("ID", INT32), ("score", INT32))),
         _one({"ID": "46920", "score": 4761.0}, struct(("ID", STRING), ("score", FLOAT64)))),
    # TimestampConverter -- Confluent: a Unix epoch (int64) to a yyyy-MM-dd string. The page prints
    # "2014-04-25", a typo: 1556204536000 is 2019-04-25T15:02:16Z.
    Case("TimestampConverter$Value unix to string",
         {"transforms": "TimestampConverter", "transforms.TimestampConverter.type": KAFKA + "TimestampConverter$Value",
          "transforms.TimestampConverter.format": "yyyy-MM-dd", "transforms.TimestampConverter.target.type": "string"},
         _one(1556204536000, INT64),
         _one("2019-04-25", STRING)),
    # a field to a Connect Timestamp: only with a schema (schemaless, the value would be a java.util.Date, which
    # JsonConverter cannot write without one)
    Case("TimestampConverter$Value field to Timestamp",
         {"transforms": "ts", "transforms.ts.type": KAFKA + "TimestampConverter$Value",
          "transforms.ts.field": "event_time", "transforms.ts.target.type": "Timestamp"},
         _one({"event_time": 1556204536000, "id": 7}, struct(("event_time", INT64), ("id", INT32))),
         _one({"event_time": 1556204536000, "id": 7}, struct(("event_time", TIMESTAMP), ("id", INT32))),
         variants=("schema",)),
    # Flatten -- Confluent: "JSON Example" (delimiter .) and the Avro example (delimiter _)
    Case("Flatten$Value",
         {"transforms": "flatten", "transforms.flatten.type": KAFKA + "Flatten$Value",
          "transforms.flatten.delimiter": "."},
         _one(FLAT_BEFORE, FLAT_SCHEMA),
         _one({"content.id": 42, "content.name.first": "David", "content.name.middle": None,
               "content.name.last": "Wong"},
              struct(("content.id", INT32), ("content.name.first", STRING), ("content.name.middle", OPT_STRING),
                     ("content.name.last", STRING)))),
    Case("Flatten$Value underscore",
         {"transforms": "flatten", "transforms.flatten.type": KAFKA + "Flatten$Value",
          "transforms.flatten.delimiter": "_"},
         _one(FLAT_BEFORE, FLAT_SCHEMA),
         _one({"content_id": 42, "content_name_first": "David", "content_name_middle": None,
               "content_name_last": "Wong"},
              struct(("content_id", INT32), ("content_name_first", STRING), ("content_name_middle", OPT_STRING),
                     ("content_name_last", STRING)))),
    # RegexRouter -- Confluent: "Remove a topic prefix", "Add a topic prefix", "Remove a string in the topic name"
    Case("RegexRouter drop prefix",
         {"transforms": "dropPrefix", "transforms.dropPrefix.type": KAFKA + "RegexRouter",
          "transforms.dropPrefix.regex": "soe-(.*)", "transforms.dropPrefix.replacement": "$1"},
         _one({"id": 1}, struct(("id", INT32)), topic="soe-Order-{u}"),
         _one({"id": 1}, struct(("id", INT32)), topic="Order-{u}")),
    Case("RegexRouter add prefix",
         {"transforms": "AddPrefix", "transforms.AddPrefix.type": KAFKA + "RegexRouter",
          "transforms.AddPrefix.regex": ".*", "transforms.AddPrefix.replacement": "acme_$0"},
         _one({"id": 1}, struct(("id", INT32)), topic="Order-{u}"),
         _one({"id": 1}, struct(("id", INT32)), topic="acme_Order-{u}")),
    Case("RegexRouter remove string",
         {"transforms": "RemoveString", "transforms.RemoveString.type": KAFKA + "RegexRouter",
          "transforms.RemoveString.regex": "(.*)Stream_(.*)", "transforms.RemoveString.replacement": "$1$2"},
         _one({"id": 1}, struct(("id", INT32)), topic="Order_Stream_Data-{u}"),
         _one({"id": 1}, struct(("id", INT32)), topic="Order_Data-{u}")),
    # TimestampRouter -- Confluent: foo-${topic}-${timestamp} with YYYYMM (a record of April 2018), and the
    # defaults ${topic}-${timestamp} / yyyyMMdd on TimestampRouterTest's timestamp
    Case("TimestampRouter",
         {"transforms": "TimestampRouter", "transforms.TimestampRouter.type": KAFKA + "TimestampRouter",
          "transforms.TimestampRouter.topic.format": "foo-${topic}-${timestamp}",
          "transforms.TimestampRouter.timestamp.format": "YYYYMM"},
         _one({"id": 1}, struct(("id", INT32)), topic="ordersTopic-{u}", timestamp=1524000000000),
         _one({"id": 1}, struct(("id", INT32)), topic="foo-ordersTopic-{u}-201804", timestamp=1524000000000)),
    Case("TimestampRouter defaults",
         {"transforms": "route", "transforms.route.type": KAFKA + "TimestampRouter"},
         _one({"id": 1}, struct(("id", INT32)), topic="test-{u}", timestamp=1483425001864),
         _one({"id": 1}, struct(("id", INT32)), topic="test-{u}-20170103", timestamp=1483425001864)),
    # SetSchemaMetadata -- Confluent: "Set a schema name and version" (schema'd data only: it sets schema metadata)
    Case("SetSchemaMetadata$Value",
         {"transforms": "SetSchemaMetadata", "transforms.SetSchemaMetadata.type": KAFKA + "SetSchemaMetadata$Value",
          "transforms.SetSchemaMetadata.schema.name": "order-value",
          "transforms.SetSchemaMetadata.schema.version": "2"},
         _one({"id": 1, "total": 12}, struct(("id", INT32), ("total", INT32), name="com.acme.Order", version=1)),
         _one({"id": 1, "total": 12}, struct(("id", INT32), ("total", INT32), name="order-value", version=2)),
         variants=("schema",)),
    Case("SetSchemaMetadata$Key",
         {"transforms": "meta", "transforms.meta.type": KAFKA + "SetSchemaMetadata$Key",
          "transforms.meta.schema.name": "order-key"},
         [Rec(key={"id": 1}, key_schema=struct(("id", INT32)), value=1, value_schema=INT32)],
         [Rec(key={"id": 1}, key_schema=struct(("id", INT32), name="order-key"), value=1, value_schema=INT32)],
         variants=("schema",)),
    # HeaderFrom -- Confluent: move id and ts into headers record_id and event_timestamp (and "copy" keeps them)
    Case("HeaderFrom$Value move",
         {"transforms": "moveFieldsToHeader", "transforms.moveFieldsToHeader.type": KAFKA + "HeaderFrom$Value",
          "transforms.moveFieldsToHeader.fields": "id,ts",
          "transforms.moveFieldsToHeader.headers": "record_id,event_timestamp",
          "transforms.moveFieldsToHeader.operation": "move"},
         _one(BOOK_VALUE, BOOK, headers=(("source", "RedditSource"),)),
         _one({"name": "John Smith", "book": "Kafka: The Definitive Guide"}, struct(("name", STRING), ("book", STRING)),
              headers=(("source", "RedditSource"), ("record_id", "24"), ("event_timestamp", "1626102708861")))),
    Case("HeaderFrom$Value copy",
         {"transforms": "copyFieldsToHeader", "transforms.copyFieldsToHeader.type": KAFKA + "HeaderFrom$Value",
          "transforms.copyFieldsToHeader.fields": "id,ts",
          "transforms.copyFieldsToHeader.headers": "record_id,event_timestamp",
          "transforms.copyFieldsToHeader.operation": "copy"},
         _one(BOOK_VALUE, BOOK, headers=(("source", "RedditSource"),)),
         _one(BOOK_VALUE, BOOK,
              headers=(("source", "RedditSource"), ("record_id", "24"), ("event_timestamp", "1626102708861")))),
    Case("HeaderFrom$Key move",
         {"transforms": "keyToHeader", "transforms.keyToHeader.type": KAFKA + "HeaderFrom$Key",
          "transforms.keyToHeader.fields": "id", "transforms.keyToHeader.headers": "record_id",
          "transforms.keyToHeader.operation": "move"},
         [Rec(key={"id": 24, "region": "eu"}, key_schema=struct(("id", INT32), ("region", STRING)), value="v",
              value_schema=STRING)],
         [Rec(key={"region": "eu"}, key_schema=struct(("region", STRING)), value="v", value_schema=STRING,
              headers=(("record_id", "24"),))]),
    # InsertHeader -- Confluent: header app.id with the literal best-app-ever, after the headers already there
    Case("InsertHeader",
         {"transforms": "insertAppIdHeader", "transforms.insertAppIdHeader.type": KAFKA + "InsertHeader",
          "transforms.insertAppIdHeader.header": "app.id",
          "transforms.insertAppIdHeader.value.literal": "best-app-ever"},
         _one({"id": 1}, struct(("id", INT32)), headers=(("trace", "t-1"),)),
         _one({"id": 1}, struct(("id", INT32)), headers=(("trace", "t-1"), ("app.id", "best-app-ever")))),
    # DropHeaders -- Confluent: drop app.id and txn.id; other headers stay, in order
    Case("DropHeaders",
         {"transforms": "dropAppIdHeader", "transforms.dropAppIdHeader.type": KAFKA + "DropHeaders",
          "transforms.dropAppIdHeader.headers": "app.id,txn.id"},
         _one({"id": 1}, struct(("id", INT32)),
              headers=(("app.id", "best-app-ever"), ("trace", "t-1"), ("txn.id", "42"), ("trace", "t-2"))),
         _one({"id": 1}, struct(("id", INT32)), headers=(("trace", "t-1"), ("trace", "t-2")))),
    # Filter without a predicate drops every record
    Case("Filter",
         {"transforms": "dropAll", "transforms.dropAll.type": KAFKA + "Filter"},
         [Rec(value={"id": n}, value_schema=struct(("id", INT32))) for n in (1, 2)],
         [], filtered=2),
    # Predicates, Example 1 (Kafka docs / Confluent Filter page): drop topic foo entirely; ExtractField$Key on
    # other_field for every topic except bar (negate)
    Case("Filter if TopicNameMatches + ExtractField$Key unless TopicNameMatches (negate)",
         {"transforms": "Filter,Extract", "transforms.Filter.type": KAFKA + "Filter",
          "transforms.Filter.predicate": "IsFoo", "transforms.Extract.type": KAFKA + "ExtractField$Key",
          "transforms.Extract.field": "other_field", "transforms.Extract.predicate": "IsBar",
          "transforms.Extract.negate": "true", "predicates": "IsFoo,IsBar",
          "predicates.IsFoo.type": PREDICATES + "TopicNameMatches", "predicates.IsFoo.pattern": "foo-{u}",
          "predicates.IsBar.type": PREDICATES + "TopicNameMatches", "predicates.IsBar.pattern": "bar-{u}"},
         [Rec(topic=t, key={"other_field": "k-" + t[:3], "id": i}, key_schema=OTHER_KEY, value=i, value_schema=INT32)
          for i, t in enumerate(["bar-{u}", "baz-{u}", "foo-{u}"])],
         [Rec(topic="bar-{u}", key={"other_field": "k-bar", "id": 0}, key_schema=OTHER_KEY, value=0, value_schema=INT32),
          Rec(topic="baz-{u}", key="k-baz", key_schema=STRING, value=1, value_schema=INT32)],
         filtered=1),
    # RecordIsTombstone: drop tombstones (a tombstone has a null value, and here no schema, as Debezium's)
    Case("Filter if RecordIsTombstone",
         {"transforms": "dropTombstones", "transforms.dropTombstones.type": KAFKA + "Filter",
          "transforms.dropTombstones.predicate": "isTombstone", "predicates": "isTombstone",
          "predicates.isTombstone.type": PREDICATES + "RecordIsTombstone"},
         [Rec(key="k1", key_schema=STRING, value={"id": 1}, value_schema=struct(("id", INT32))),
          Rec(key="k1", key_schema=STRING, value=None)],
         [Rec(key="k1", key_schema=STRING, value={"id": 1}, value_schema=struct(("id", INT32)))],
         filtered=1),
    # HasHeaderKey: drop the records that carry a header, or (negate) those that do not
    Case("Filter if HasHeaderKey",
         {"transforms": "dropInternal", "transforms.dropInternal.type": KAFKA + "Filter",
          "transforms.dropInternal.predicate": "isInternal", "predicates": "isInternal",
          "predicates.isInternal.type": PREDICATES + "HasHeaderKey", "predicates.isInternal.name": "internal"},
         [Rec(value={"id": 1}, value_schema=struct(("id", INT32)), headers=(("trace", "t-1"),)),
          Rec(value={"id": 2}, value_schema=struct(("id", INT32)), headers=(("trace", "t-2"), ("internal", None)))],
         [Rec(value={"id": 1}, value_schema=struct(("id", INT32)), headers=(("trace", "t-1"),))],
         filtered=1),
    Case("Filter unless HasHeaderKey (negate)",
         {"transforms": "keepAudited", "transforms.keepAudited.type": KAFKA + "Filter",
          "transforms.keepAudited.predicate": "isAudited", "transforms.keepAudited.negate": "true",
          "predicates": "isAudited", "predicates.isAudited.type": PREDICATES + "HasHeaderKey",
          "predicates.isAudited.name": "audit"},
         [Rec(value={"id": 1}, value_schema=struct(("id", INT32)), headers=(("audit", "yes"),)),
          Rec(value={"id": 2}, value_schema=struct(("id", INT32)))],
         [Rec(value={"id": 1}, value_schema=struct(("id", INT32)), headers=(("audit", "yes"),))],
         filtered=1),
]


def _params():
    out = []
    for case in SOURCE_CASES:
        for variant in case.variants:
            marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
            out.append(pytest.param(case, variant, id=f"{case.id} [{variant}]", marks=marks))
    return out


# ------------------------------------------------------------------------------------- helpers


def _sub(obj: Any, u: str) -> Any:
    """``obj`` with ``{u}`` replaced by the test's unique suffix in every string."""
    if isinstance(obj, str):
        return obj.replace("{u}", u)
    if isinstance(obj, dict):
        return {_sub(k, u): _sub(v, u) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_sub(v, u) for v in obj)
    if isinstance(obj, Rec):
        return Rec(**{f: _sub(getattr(obj, f), u) for f in obj.__dataclass_fields__})
    return obj


def _described(rec: Rec) -> dict:
    """``rec`` as a FixedRecordsSource record description."""
    return {"topic": rec.topic, "key": rec.key, "key_schema": rec.key_schema, "value": rec.value,
            "value_schema": rec.value_schema, "headers": [list(h) for h in rec.headers], "timestamp": rec.timestamp}


def _converters(schemas: bool) -> dict:
    flag = "true" if schemas else "false"
    return {"key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": flag,
            "value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": flag}


def _run(config: dict, worker_props: dict) -> dict:
    """Plan ``config`` and run it once; the one task's result."""
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    (task,) = [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]
    return task


def _source(name: str, records: list[Rec], schemas: bool, **extra) -> dict:
    return {"name": name, "connector.class": SOURCE, "records": json.dumps([_described(r) for r in records]),
            **_converters(schemas), **extra}


def _read(bootstrap: str, topics) -> dict[str, list]:
    """Every message of partition 0 of each topic, from the start to the end, by topic."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 20})
    out: dict[str, list] = {t: [] for t in topics}
    try:
        for msg in read_to_end(c, [TopicPartition(t, 0, 0) for t in out], timeout_s=30):
            out[msg.topic()].append(msg)
    finally:
        c.close()
    return out


def _messages(bootstrap: str, topic: str) -> list:
    return _read(bootstrap, [topic])[topic]


def _topics_of(bootstrap: str, unique: str) -> set[str]:
    """The test's topics (their names carry ``unique``), without the worker's offset topic."""
    names = existing_topics(admin_client({"bootstrap.servers": bootstrap}))
    return {t for t in names if unique in t and not t.startswith("copycat-offsets-")}


def _canon(raw: bytes | str | None) -> Any:
    """Parsed JSON where a float stays distinct from an int (Kafka writes 4761.0, not 4761)."""
    if raw is None:
        return None
    return json.loads(raw, parse_float=lambda text: ("float", float(text)))


def _expected_bytes_json(payload: Any, schema: dict | None, schemas: bool) -> Any:
    """What Kafka Connect's JsonConverter writes for ``payload`` (``None``: a null key or a tombstone)."""
    if payload is None and schema is None:
        return None
    return {"schema": schema, "payload": payload} if schemas else payload


def _check_side(raw: bytes | None, payload: Any, schema: dict | None, schemas: bool, is_key: bool, where: str):
    # Then the bytes are what Kafka Connect's JsonConverter writes ...
    expected = _expected_bytes_json(payload, schema, schemas)
    assert _canon(raw) == _canon(None if expected is None else json.dumps(expected)), where
    # ... and JsonConverter reads them back as the expected Connect schema and value
    conv = JsonConverter()
    conv.configure({"schemas.enable": schemas}, is_key)
    got = conv.to_connect_data("t", raw)
    want = conv.to_connect_data("t", None if expected is None else json.dumps(expected).encode())
    assert (got.schema, got.value) == (want.schema, want.value), where


def _landed(bootstrap: str, unique: str) -> dict[str, list]:
    """Every message of every topic of the test (their names carry ``unique``), by topic."""
    return _read(bootstrap, _topics_of(bootstrap, unique))


def _check_landed(landed: dict[str, list], then: list[Rec], schemas: bool):
    """Every expected record is in its topic, in order, and the test has no other topic."""
    by_topic: dict[str, list[Rec]] = {}
    for rec in then:
        by_topic.setdefault(rec.topic, []).append(rec)
    assert set(landed) == set(by_topic), "the records reached exactly the expected topics"
    for topic, expected in by_topic.items():
        got = landed[topic]
        assert len(got) == len(expected), f"{topic}: {[m.value() for m in got]}"
        for i, (msg, rec) in enumerate(zip(got, expected)):
            where = f"{topic}[{i}]"
            _check_side(msg.key(), rec.key, rec.key_schema, schemas, True, where + " key")
            _check_side(msg.value(), rec.value, rec.value_schema, schemas, False, where + " value")
            assert [(k, v) for k, v in msg.headers() or []] == \
                [(k, None if v is None else v.encode()) for k, v in rec.headers], where + " headers"
            if rec.timestamp is not None:
                assert msg.timestamp()[1] == rec.timestamp, where + " timestamp"


# --------------------------------------------------------------------------------- source side


def _case_run(case: Case, variant: str, bootstrap: str) -> dict:
    """Given ``case``'s records and transform config, run the source once (and once more when the
    case drops records), then read back every topic of the run with a plain consumer."""
    u = uuid.uuid4().hex[:8]
    schemas = variant == "schema"
    worker = {"bootstrap.servers": bootstrap, "offset.storage.topic": f"copycat-offsets-{u}",
              "offset.storage.partitions": 1, "offset.flush.interval.ms": 1000}
    given = [r if schemas else r.schemaless() for r in _sub(case.given, u)]
    then = case.schemaless_then if (not schemas and case.schemaless_then is not None) else case.then
    then = [r if schemas else r.schemaless() for r in _sub(then, u)]
    config = _source(f"smt-{u}", given, schemas, **_sub(case.transforms, u))
    task = _run(config, worker)
    again = _run(config, worker) if case.filtered and task["status"] == "ok" else None
    return {"schemas": schemas, "given": given, "then": then, "task": task, "again": again,
            "landed": _landed(bootstrap, u)}


class _Runs(dict):
    """Futures of :func:`_case_run` by ``(case id, variant)``; one not started yet starts on demand."""

    def __init__(self, pool: ThreadPoolExecutor, bootstrap: str):
        super().__init__()
        self.pool, self.bootstrap = pool, bootstrap

    def start(self, case: Case, variant: str):
        self[case.id, variant] = self.pool.submit(_case_run, case, variant, self.bootstrap)

    def result(self, case: Case, variant: str) -> dict:
        if (case.id, variant) not in self:
            self.start(case, variant)
        return self[case.id, variant].result(timeout=300)


@pytest.fixture(scope="module")
def source_runs(request, kafka_bootstrap):
    """The runs of every selected source case, started together: a run mostly waits on the broker
    (an idempotent producer's first send takes ~0.5 s on the embedded broker), so side by side the
    cases take seconds instead of a minute."""
    me = test_source_transform_lands_the_documented_result_in_kafka.__name__
    with ThreadPoolExecutor(max_workers=16, thread_name_prefix="smt-case") as pool:
        runs = _Runs(pool, kafka_bootstrap)
        for item in request.session.items:
            if getattr(item, "originalname", None) == me and Path(str(item.path)) == Path(__file__):
                runs.start(item.callspec.params["case"], item.callspec.params["variant"])
        yield runs


@pytest.mark.parametrize("case, variant", _params())
def test_source_transform_lands_the_documented_result_in_kafka(case, variant, source_runs):
    # Given a source emitting the documented records with the documented transform config,
    # When it runs through the source loop (see source_runs and _case_run)
    run = source_runs.result(case, variant)
    task = run["task"]
    # Then the run succeeded and counts what it wrote and what the transforms dropped
    assert (task["status"], task["error"]) == ("ok", None)
    assert (task["records"], task["filtered"], task["errors"]) == (len(run["then"]), case.filtered, 0)
    # And Kafka holds exactly the documented result, in the expected topics and no other
    _check_landed(run["landed"], run["then"], run["schemas"])
    # And the source offset moved past every record, the dropped ones too: a rerun emits nothing
    assert task["partitions"][0]["offset_after"] == {"index": len(run["given"])}
    if case.filtered:
        assert (run["again"]["status"], run["again"]["records"], run["again"]["filtered"]) == ("ok", 0, 0)


def test_records_file_and_inline_records_are_the_same_source(tmp_path, worker_props, kafka_bootstrap, unique):
    # Given the same records described in a file instead of inline
    records = [Rec(value={"id": 1}, value_schema=struct(("id", INT32)), headers=(("h", "1"),), timestamp=ARRIVAL)]
    path = tmp_path / "records.json"
    path.write_text(json.dumps([_described(r) for r in _sub(records, unique)]))
    config = _source(f"file-{unique}", [], True)
    del config["records"]
    config["records.file"] = str(path)
    # When it runs twice
    first, second = _run(config, worker_props), _run(config, worker_props)
    # Then the records landed once: the second run resumed after them
    assert (first["records"], second["records"]) == (1, 0)
    _check_landed(_landed(kafka_bootstrap, unique), _sub(records, unique), True)


# ----------------------------------------------------------------------------------- sink side


def _produce(bootstrap: str, topic: str, values: list, *, headers=None, timestamp: int | None = None,
             partitions: int = 1):
    admin = admin_client({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result()
    p = Producer({"bootstrap.servers": bootstrap})
    for i, v in enumerate(values):
        kwargs = {"timestamp": timestamp} if timestamp is not None else {}
        p.produce(topic, value=json.dumps(v).encode(), headers=(headers or {}).get(i, []), **kwargs)
    p.flush(10)


def _sink(name: str, topics: str, out: Path, **extra) -> dict:
    return {"name": name, "connector.class": JSON_SINK, "topics": topics, "dir": str(out), "tasks.max": 1,
            **_converters(False), **extra}


def _rows(out: Path) -> list:
    return [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_sink_insert_field_adds_kafka_coordinates(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given two schemaless records in a topic, produced at a known time
    topic = f"orders-{unique}"
    _produce(kafka_bootstrap, topic, [{"id": 1}, {"id": 2}], timestamp=ARRIVAL)
    # When a sink runs with InsertField$Value inserting the topic, partition, offset and timestamp
    config = _sink(f"sink-insert-{unique}", topic, tmp_path, **{
        "transforms": "InsertField", "transforms.InsertField.type": KAFKA + "InsertField$Value",
        "transforms.InsertField.topic.field": "topic", "transforms.InsertField.partition.field": "partition",
        "transforms.InsertField.offset.field": "offset!", "transforms.InsertField.timestamp.field": "ts"})
    task = _run(config, worker_props)
    # Then the sink received each record with its Kafka coordinates (known on the sink side, unlike a source)
    assert task["status"] == "ok" and task["records"] == 2
    assert _rows(tmp_path) == [
        [topic, 0, n, {"id": n + 1, "topic": topic, "partition": 0, "offset": n, "ts": ARRIVAL}] for n in (0, 1)]


def test_sink_replace_field_renames_and_drops(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given Confluent's rename and drop examples on a topic
    topic = f"orders-{unique}"
    _produce(kafka_bootstrap, topic, [{"foo": 22, "bar": "baz", "c3": "x"}])
    # When a sink runs with ReplaceField$Value
    config = _sink(f"sink-replace-{unique}", topic, tmp_path, **{
        "transforms": "ReplaceField", "transforms.ReplaceField.type": KAFKA + "ReplaceField$Value",
        "transforms.ReplaceField.renames": "foo:c1,bar:c2", "transforms.ReplaceField.exclude": "c3"})
    task = _run(config, worker_props)
    # Then the sink wrote the renamed record without the excluded field
    assert task["status"] == "ok"
    assert _rows(tmp_path) == [[topic, 0, 0, {"c1": 22, "c2": "baz"}]]


def test_sink_replace_field_on_structs_into_files(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a schema'd record (JsonConverter envelope) in a topic
    topic = f"orders-{unique}"
    envelope = {"schema": struct(("foo", INT32), ("bar", STRING)), "payload": {"foo": 22, "bar": "baz"}}
    _produce(kafka_bootstrap, topic, [envelope])
    # When the files sink writes it as JSON with ReplaceField$Value renaming both fields
    store = tmp_path / "store"
    config = {"name": f"files-{unique}", "connector.class": "FilesSink", "topics": topic, "store.url": str(store),
              "format.class": "json", "flush.size": "1", **_converters(True),
              "transforms": "RenameField", "transforms.RenameField.type": KAFKA + "ReplaceField$Value",
              "transforms.RenameField.renames": "foo:c1,bar:c2"}
    task = _run(config, worker_props)
    # Then the published file holds the renamed struct
    assert task["status"] == "ok", task["error"]
    files = [f for f in store.rglob("*.json") if "_copycat" not in f.parts]
    assert [json.loads(line) for f in files for line in f.read_text().splitlines()] == [{"c1": 22, "c2": "baz"}]


def test_sink_filter_with_predicate_skips_records_and_commits_past_them(worker_props, kafka_bootstrap, unique,
                                                                       tmp_path):
    # Given two topics, one of which the sink must ignore
    keep, drop = f"orders-{unique}", f"orders-test-{unique}"
    _produce(kafka_bootstrap, keep, [{"id": 1}])
    _produce(kafka_bootstrap, drop, [{"id": 2}, {"id": 3}])
    # When a sink reads both with Filter applied to the topic matching TopicNameMatches
    config = _sink(f"sink-filter-{unique}", f"{keep},{drop}", tmp_path, **{
        "transforms": "dropTest", "transforms.dropTest.type": KAFKA + "Filter",
        "transforms.dropTest.predicate": "isTest", "predicates": "isTest",
        "predicates.isTest.type": PREDICATES + "TopicNameMatches", "predicates.isTest.pattern": "orders-test-.*"})
    task = _run(config, worker_props)
    # Then only the kept topic's record reached the sink, and the run counts the dropped ones
    assert (task["status"], task["records"], task["filtered"]) == ("ok", 1, 2)
    assert _rows(tmp_path) == [[keep, 0, 0, {"id": 1}]]
    # And the group committed past the dropped records: a rerun reads nothing
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"connect-sink-filter-{unique}"})
    committed = {tp.topic: tp.offset for tp in c.committed([TopicPartition(keep, 0), TopicPartition(drop, 0)],
                                                           timeout=10)}
    c.close()
    assert committed == {keep: 1, drop: 2}
    again = _run(config, worker_props)
    assert (again["records"], again["filtered"]) == (0, 0)


def test_sink_regex_router_renames_the_topic_the_sink_sees(worker_props, kafka_bootstrap, unique, tmp_path):
    # Given a record in topic soe-Order-<u>
    topic = f"soe-Order-{unique}"
    _produce(kafka_bootstrap, topic, [{"id": 1}])
    # When a sink reads it with Confluent's "remove a topic prefix" RegexRouter
    config = _sink(f"sink-route-{unique}", topic, tmp_path, **{
        "transforms": "dropPrefix", "transforms.dropPrefix.type": KAFKA + "RegexRouter",
        "transforms.dropPrefix.regex": "soe-(.*)", "transforms.dropPrefix.replacement": "$1"})
    task = _run(config, worker_props)
    # Then the sink saw the record under the renamed topic, at its offset in the original one
    assert task["status"] == "ok"
    assert _rows(tmp_path) == [[f"Order-{unique}", 0, 0, {"id": 1}]]
    # And the consumer group committed the original topic-partition
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"connect-sink-route-{unique}"})
    (committed,) = c.committed([TopicPartition(topic, 0)], timeout=10)
    c.close()
    assert committed.offset == 1


# -------------------------------------------------------------------------------- failure path

CAST_AGE = {"transforms": "castAge", "transforms.castAge.type": KAFKA + "Cast$Value",
            "transforms.castAge.spec": "age:int32"}
PEOPLE = [Rec(key="k0", value={"name": "Ada", "age": "36"}), Rec(key="k1", value={"name": "Bob", "age": "abc"}),
          Rec(key="k2", value={"name": "Cy", "age": "41"})]


def test_source_transform_failure_is_dead_lettered_with_its_stage_and_class(worker_props, kafka_bootstrap, unique):
    # Given a Cast of age to int32 and a record whose age is "abc", with errors tolerated into a DLQ
    name, dlq = f"cast-{unique}", f"cast-dlq-{unique}"
    config = _source(name, _sub(PEOPLE, unique), False, **CAST_AGE, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true"})
    # When the source runs
    task = _run(config, worker_props)
    # Then the good records went through, cast, and the bad one is counted and dead-lettered
    assert (task["status"], task["records"], task["errors"], task["dead_lettered"]) == ("ok", 2, 1, 1)
    read = _read(kafka_bootstrap, [f"orders-{unique}", dlq])
    assert [json.loads(m.value()) for m in read[f"orders-{unique}"]] == [{"name": "Ada", "age": 36},
                                                                         {"name": "Cy", "age": 41}]
    (dead,) = read[dlq]
    headers = dict(dead.headers())
    assert headers["__connect.errors.stage"] == b"TRANSFORMATION"
    assert headers["__connect.errors.class.name"] == b"org.apache.kafka.connect.transforms.Cast$Value"
    assert headers["__connect.errors.connector.name"] == name.encode()
    assert json.loads(headers["__connect.errors.source.partition"]) == {"records": name}
    assert json.loads(headers["__connect.errors.source.offset"]) == {"index": 2}
    assert b"abc" in headers["__connect.errors.exception.message"]
    # And it holds the record as the connector emitted it, before the transform (for a replay after a fix)
    value = decode_source_record(dead.value(), headers[H_VALUE_FORMAT].decode(), False)
    key = decode_source_record(dead.key(), headers[H_KEY_FORMAT].decode(), True)
    assert (key[1], value[1]) == ("k1", {"name": "Bob", "age": "abc"})
    # And the offset moved past it: a rerun emits nothing
    again = _run(config, worker_props)
    assert (again["records"], again["errors"]) == (0, 0)


@pytest.fixture(scope="module")
def failed_cast(kafka_bootstrap):
    """The Cast of the records above with the default errors.tolerance=none, run once."""
    u = uuid.uuid4().hex[:8]
    worker = {"bootstrap.servers": kafka_bootstrap, "offset.storage.topic": f"copycat-offsets-{u}",
              "offset.storage.partitions": 1}
    name = f"cast-none-{u}"
    task = _run(_source(name, _sub(PEOPLE, u), False, **CAST_AGE), worker)
    return {"name": name, "unique": u, "task": task}


def test_source_transform_failure_without_tolerance_fails_the_task_at_the_record(failed_cast, kafka_bootstrap):
    # Given the same Cast with the default errors.tolerance=none, When the source runs (failed_cast)
    task, name = failed_cast["task"], failed_cast["name"]
    # Then the task failed in the TRANSFORMATION stage, and the error says where the record came from
    assert task["status"] == "failed"
    assert "TRANSFORMATION" in task["error"] and "'abc'" in task["error"]
    assert f'{{"records": "{name}"}} offset {{"index": 2}}' in task["error"]
    # And no record after the failed one reached Kafka
    landed = _messages(kafka_bootstrap, f"orders-{failed_cast['unique']}")
    assert {"name": "Cy", "age": 41} not in [json.loads(m.value()) for m in landed]


def test_source_transform_failure_without_tolerance_names_the_transform(failed_cast):
    # Then the error names the transform: its alias in transforms= and its Kafka Connect class
    error = failed_cast["task"]["error"]
    assert "castAge" in error and "org.apache.kafka.connect.transforms.Cast$Value" in error


def test_sink_transform_failure_is_dead_lettered_with_its_kafka_coordinates(worker_props, kafka_bootstrap, unique,
                                                                           tmp_path):
    # Given a topic with a record whose age is "abc", and a sink casting age to int32 with a DLQ
    topic, dlq = f"people-{unique}", f"people-dlq-{unique}"
    _produce(kafka_bootstrap, topic, [{"age": "36"}, {"age": "abc"}])
    config = _sink(f"sink-cast-{unique}", topic, tmp_path, **CAST_AGE, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true"})
    task = _run(config, worker_props)
    # Then the good record reached the sink and the bad one the DLQ, byte for byte, with where it was in Kafka
    assert (task["status"], task["records"], task["errors"], task["dead_lettered"]) == ("ok", 1, 1, 1)
    assert _rows(tmp_path) == [[topic, 0, 0, {"age": 36}]]
    (dead,) = _messages(kafka_bootstrap, dlq)
    headers = dict(dead.headers())
    assert headers["__connect.errors.stage"] == b"TRANSFORMATION"
    assert headers["__connect.errors.class.name"] == b"org.apache.kafka.connect.transforms.Cast$Value"
    assert (headers["__connect.errors.topic"], headers["__connect.errors.partition"],
            headers["__connect.errors.offset"]) == (topic.encode(), b"0", b"1")
    assert dead.value() == json.dumps({"age": "abc"}).encode()


def test_every_transform_and_predicate_has_a_case():
    # The cases above cover every built-in (a new one needs its documented example here)
    names = " ".join(c.transforms.get(k, "") for c in SOURCE_CASES for k in c.transforms if k.endswith(".type"))
    for cls in ["InsertField", "ReplaceField", "MaskField", "ValueToKey", "ExtractField", "HoistField", "Cast",
                "TimestampConverter", "Flatten", "RegexRouter", "TimestampRouter", "SetSchemaMetadata",
                "HeaderFrom", "InsertHeader", "DropHeaders", "Filter", "predicates.TopicNameMatches",
                "predicates.HasHeaderKey", "predicates.RecordIsTombstone"]:
        assert KAFKA + cls in names, cls

