"""Avro end to end on the real broker: a source of Structs -> AvroConverter -> Kafka -> AvroConverter ->
the files sink -> Parquet whose column types are the declared ones, also across a schema change.

Runs the real loops (plan, then ``run_group``) with and without a schema registry.
"""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_copycat.converters.avro.data import AvroData
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig
from tests.support.avro_connectors import ORDER_V1, ORDER_V2, order

SOURCE = "tests.support.avro_connectors:StructSource"
STRING_KEYS = {"key.converter": "org.apache.kafka.connect.storage.StringConverter"}


def _run(config, worker_props):
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    results = [run_group(g, worker_props) for g in plan["groups"]]
    for group in results:
        for task in group["tasks"]:
            assert task["status"] == "ok", task
    return results


def _messages(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "avro-check", "enable.partition.eof": True})
    try:
        return list(read_to_end(c, [TopicPartition(topic, 0, 0)]))
    finally:
        c.close()


@pytest.fixture(params=["registry", "embedded-schema", "single-object"])
def avro_converter(request, schema_registry_url, monkeypatch):
    """The value converter settings of a connector: with the registry, schemas embedded per record, or
    Avro single-object encoding (the schemas given to the converter, as a sink in another process needs)."""
    settings = {"value.converter": "io.confluent.connect.avro.AvroConverter"}
    if request.param == "registry":
        settings["value.converter.schema.registry.url"] = schema_registry_url
    if request.param == "single-object":
        from airflow_copycat.converters.avro import layouts as avro_layouts
        from airflow_copycat.converters.avro import single_object as avro_single_object

        # as in separate processes: what the source's converter wrote is not known to the sink's but by config
        monkeypatch.setattr(avro_layouts, "WRITTEN", avro_single_object.SchemaStore())
        settings["value.converter.embedded.schema.format"] = "single-object"
        settings["value.converter.known.schemas"] = json.dumps(
            [AvroData().from_connect_schema(s) for s in (ORDER_V1, ORDER_V2)])
    return settings


def test_source_loop_writes_confluent_avro_that_confluents_deserializer_reads(worker_props, kafka_bootstrap, unique,
                                                                               schema_registry_url, registry_client):
    # Given a source of Order structs and the Avro converter with the registry
    topic = f"avro-src-{unique}"
    config = {"name": f"avro-src-{unique}", "connector.class": SOURCE, "topic": topic, "count": 4,
              "value.converter": "io.confluent.connect.avro.AvroConverter",
              "value.converter.schema.registry.url": schema_registry_url, **STRING_KEYS}
    # When the source runs
    (result,) = _run(config, worker_props)
    # Then every record in Kafka is magic byte 0 + the subject's schema id + Avro that Confluent's code reads
    assert result["records"] == 4
    schema_id = registry_client.get_latest_version(f"{topic}-value").schema_id
    deserializer = AvroDeserializer(registry_client)
    for n, message in enumerate(_messages(kafka_bootstrap, topic)):
        value = message.value()
        assert value[0] == 0 and struct.unpack(">I", value[1:5])[0] == schema_id
        plain = deserializer(value, SerializationContext(topic, MessageField.VALUE))
        expected = order(n).to_dict()
        assert plain["id"] == n and plain["customer"] == expected["customer"]
        assert plain["amount"] == expected["amount"] and plain["created"] == expected["created"]
        assert message.key() == str(n).encode()


def test_avro_records_land_in_parquet_with_their_declared_types_and_a_new_file_per_schema(
        worker_props, kafka_bootstrap, unique, tmp_path, avro_converter):
    topic = f"avro-pq-{unique}"
    source = {"name": f"avro-pq-src-{unique}", "connector.class": SOURCE, "topic": topic, "count": 3,
              **avro_converter, **STRING_KEYS}
    sink = {"name": f"avro-pq-sink-{unique}", "connector.class": "FilesSink", "topics": topic,
            "store.url": str(tmp_path / "lake"), "format.class": "parquet", "flush.size": 100,
            **avro_converter, **STRING_KEYS}

    # Given three records of schema version 1 copied to Parquet
    _run(source, worker_props)
    _run(sink, worker_props)
    (first,) = sorted((tmp_path / "lake").rglob("*.parquet"))
    table = pq.read_table(first)

    # Then the columns have the types the Connect schema declares, not ones inferred from values
    expected = pa.schema([
        pa.field("id", pa.int32(), nullable=False),
        pa.field("qty", pa.int8(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("amount", pa.decimal128(10, 2), nullable=False),
        pa.field("price", pa.float64(), nullable=False),
        pa.field("ratio", pa.float32(), nullable=False),
        pa.field("created", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("day", pa.date32(), nullable=False),
        pa.field("at", pa.time32("ms"), nullable=False),
        pa.field("note", pa.string(), nullable=True),
        pa.field("tags", pa.list_(pa.field("element", pa.string(), nullable=False)), nullable=False),
        pa.field("attrs", pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False)), nullable=False),
        pa.field("counts", pa.map_(pa.int32(), pa.field("value", pa.string(), nullable=False)), nullable=False),
        pa.field("customer", pa.struct([pa.field("name", pa.string(), nullable=False),
                                        pa.field("vip", pa.bool_(), nullable=False)]), nullable=False),
        pa.field("raw", pa.binary(), nullable=True),
    ])
    assert table.schema.remove_metadata().equals(expected, check_metadata=False), table.schema
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [0, 1, 2]
    assert rows[1]["note"] is None and rows[2]["note"] == "note 2"
    assert rows[2]["amount"] == order(2).get("amount") and rows[2]["created"] == order(2).get("created")
    assert dict(rows[2]["counts"]) == {2: "n", -1: "minus"} and rows[2]["customer"] == {"name": "c2", "vip": True}
    # and the file says its Avro schema, as Confluent's Parquet writer does
    avro_schema = json.loads(pq.read_metadata(first).metadata[b"parquet.avro.schema"])
    assert avro_schema["connect.name"] == "com.example.Order"
    assert AvroData().to_connect_schema(avro_schema).field("amount").schema == ORDER_V1.field("amount").schema

    # When the source's schema gains an optional field and two more records are copied
    _run(dict(source, **{"schema.version": 2, "count": 5}), worker_props)
    _run(sink, worker_props)

    # Then they are in a new file with the new column; the first file is as it was
    files = sorted((tmp_path / "lake").rglob("*.parquet"))
    assert len(files) == 2 and files[0] == first
    second = pq.read_table(files[1])
    assert second.schema.field("email") == pa.field("email", pa.string(), nullable=True)
    assert second.schema.field("qty").type == pa.int8()
    assert [(r["id"], r["email"]) for r in second.to_pylist()] == [(3, None), (4, "u4@example.com")]
    assert "email" not in pq.read_table(first).column_names
