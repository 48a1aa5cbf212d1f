"""AvroConverter: Confluent's wire format with a registry, schema-embedded Avro without one.

Independent readers check the bytes: confluent-kafka's own AvroDeserializer and
registry client for the Confluent format, a hand-written parser of the documented
framing plus fastavro for the registry-less formats, fastavro's container reader
for ``embedded.schema.format=container``.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import struct

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_copycat.connect import (
    ConfigException,
    ConnectException,
    DataException,
    RetriableException,
    Schema,
    SchemaBuilder,
    Struct,
)
from airflow_copycat.converters.avro.converter import AvroConverter
from airflow_copycat.runtime.plugins import make_converter, resolve_converter
from tests.support.avro_connectors import ORDER_V1, ORDER_V2, order
from tests.support.schema_registry import SchemaRegistryServer

USER = (SchemaBuilder.struct().name("com.example.User")
        .field("id", Schema.INT64).field("name", Schema.STRING).build())
USER_V2 = (SchemaBuilder.struct().name("com.example.User")
           .field("id", Schema.INT64).field("name", Schema.STRING).field("email", Schema.OPTIONAL_STRING).build())
USER_V3 = (SchemaBuilder.struct().name("com.example.User")
           .field("id", Schema.INT64).field("name", Schema.STRING).field("age", Schema.INT32).build())


def converter(is_key=False, **configs) -> AvroConverter:
    c = AvroConverter()
    c.configure({k.replace("_", "."): v for k, v in configs.items()}, is_key)
    return c


def registry_converter(url, is_key=False, **configs) -> AvroConverter:
    return converter(is_key, schema_registry_url=url, **configs)


def parse_framed(data: bytes):
    """The framing as the module docstring defines it, read without any of our code."""
    assert data[:2] == b"\xc3\x53"
    pos, shift, n = 2, 0, 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    length = (n >> 1) ^ -(n & 1)
    schema = json.loads(data[pos:pos + length].decode("utf-8"))
    value = fastavro.schemaless_reader(io.BytesIO(data[pos + length:]), fastavro.parse_schema(schema))
    return schema, value


# ---------------------------------------------------------------- the converter is found by Kafka Connect's names

@pytest.mark.parametrize("name", ["avro", "AvroConverter", "io.confluent.connect.avro.AvroConverter"])
def test_kafka_connect_names_resolve_to_the_avro_converter(name):
    assert resolve_converter(name) is AvroConverter


def test_prefixed_keys_configure_it_from_a_connector_config(schema_registry_url):
    c = make_converter({"value.converter": "io.confluent.connect.avro.AvroConverter",
                        "value.converter.schema.registry.url": schema_registry_url}, {}, False)
    assert isinstance(c, AvroConverter) and c._registry is not None


# ---------------------------------------------------------------- with a registry: Confluent's wire format

def test_bytes_are_magic_byte_schema_id_and_avro_that_confluents_deserializer_reads(schema_registry_url,
                                                                                       registry_client, unique):
    topic = f"orders-{unique}"
    c = registry_converter(schema_registry_url)
    data = c.from_connect_data(topic, ORDER_V1, order(2))

    # magic byte 0, then the id the registry has for the subject <topic>-value
    registered = registry_client.get_latest_version(f"{topic}-value")
    assert data[0] == 0 and struct.unpack(">I", data[1:5])[0] == registered.schema_id
    assert json.loads(registered.schema.schema_str)["connect.name"] == "com.example.Order"
    # confluent-kafka's deserializer reads it
    plain = AvroDeserializer(registry_client)(data, SerializationContext(topic, MessageField.VALUE))
    assert plain["id"] == 2 and plain["customer"] == {"name": "c2", "vip": True}
    assert plain["counts"] == [{"key": 2, "value": "n"}, {"key": -1, "value": "minus"}]
    # and the converter reads it back to the same Struct (the schema gains the registry's version)
    back = c.to_connect_data(topic, data)
    assert back.value.to_dict() == order(2).to_dict()
    assert back.schema.version == registered.version and back.schema.name == "com.example.Order"


def test_records_written_by_confluents_serializer_read_into_connect(schema_registry_url, registry_client, unique):
    topic = f"foreign-{unique}"
    schema_str = json.dumps({"type": "record", "name": "Reading", "namespace": "iot", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "value", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})
    serializer = AvroSerializer(registry_client, schema_str)
    data = serializer({"sensor": "s1", "value": 21.5, "at": 1_700_000_000_000},
                      SerializationContext(topic, MessageField.VALUE))

    back = registry_converter(schema_registry_url).to_connect_data(topic, data)
    assert back.schema.name == "iot.Reading" and back.schema.field("at").schema.name.endswith("Timestamp")
    assert back.value.get("sensor") == "s1" and back.value.get("value") == 21.5
    assert back.value.get("at").timestamp() == 1_700_000_000


def test_keys_use_the_key_subject_and_strategies_name_subjects_by_record(schema_registry_url, registry_client, unique):
    topic = f"strat-{unique}"
    registry_converter(schema_registry_url, is_key=True).from_connect_data(topic, Schema.STRING, "k1")
    assert registry_client.get_latest_version(f"{topic}-key").schema.schema_str == '"string"'

    record_name = SchemaBuilder.struct().name(f"com.example.R{unique}").field("a", Schema.INT32).build()
    registry_converter(schema_registry_url, value_subject_name_strategy="RecordNameStrategy").from_connect_data(
        topic, record_name, Struct(record_name, {"a": 1}))
    registry_converter(schema_registry_url,
                       value_subject_name_strategy="io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
                       ).from_connect_data(topic, record_name, Struct(record_name, {"a": 1}))
    subjects = registry_client.get_subjects()
    assert f"com.example.R{unique}" in subjects and f"{topic}-com.example.R{unique}" in subjects
    with pytest.raises(DataException, match="needs a named Avro type"):
        registry_converter(schema_registry_url, value_subject_name_strategy="RecordNameStrategy").from_connect_data(
            topic, Schema.STRING, "plain")


def test_without_auto_register_a_schema_must_already_be_registered(schema_registry_url, registry_client, unique):
    topic = f"noauto-{unique}"
    c = registry_converter(schema_registry_url, auto_register_schemas="false")
    with pytest.raises(DataException, match=f"not registered for subject '{topic}-value'.*auto.register.schemas"):
        c.from_connect_data(topic, USER, Struct(USER, {"id": 1, "name": "a"}))
    schema_id = registry_client.register_schema(
        f"{topic}-value", RegistrySchema(AvroConverter()._data.writer(USER).schema_json, "AVRO"))
    data = c.from_connect_data(topic, USER, Struct(USER, {"id": 1, "name": "a"}))
    assert struct.unpack(">I", data[1:5])[0] == schema_id


# ---------------------------------------------------------------- evolution with a registry

def test_adding_an_optional_field_is_accepted_and_reads_both_ways(schema_registry_url, registry_client, unique):
    topic = f"evolve-{unique}"
    writer = registry_converter(schema_registry_url)
    old = writer.from_connect_data(topic, USER, Struct(USER, {"id": 1, "name": "old"}))
    new = writer.from_connect_data(topic, USER_V2, Struct(USER_V2, {"id": 2, "name": "new", "email": "n@x"}))
    # the registry (BACKWARD by default) accepted version 2
    assert registry_client.get_versions(f"{topic}-value") == [1, 2]
    assert old[1:5] != new[1:5]

    # old data read with the latest schema: the new field is null
    latest = registry_converter(schema_registry_url, use_latest_version="true")
    back = latest.to_connect_data(topic, old)
    assert back.value.get("email") is None and back.schema.field("email") is not None
    # new data read with the old schema: the new field is skipped
    v1_json = AvroConverter()._data.writer(USER).schema_json
    as_old = registry_converter(schema_registry_url, reader_schema=v1_json).to_connect_data(topic, new)
    assert as_old.value.to_dict() == {"id": 2, "name": "new"}
    # writing with use.latest.version puts the latest id on records of the old schema
    projected = latest.from_connect_data(topic, USER, Struct(USER, {"id": 3, "name": "p"}))
    assert projected[1:5] == new[1:5]
    assert registry_converter(schema_registry_url).to_connect_data(topic, projected).value.get("email") is None


def test_an_incompatible_change_is_rejected_naming_the_subject(schema_registry_url, registry_client, unique):
    topic = f"incompat-{unique}"
    writer = registry_converter(schema_registry_url)
    writer.from_connect_data(topic, USER, Struct(USER, {"id": 1, "name": "a"}))

    with pytest.raises(DataException) as e:
        writer.from_connect_data(topic, USER_V3, Struct(USER_V3, {"id": 2, "name": "b", "age": 3}))
    message = str(e.value)
    assert f"subject '{topic}-value'" in message and "incompatible" in message and "BACKWARD" in message
    assert "default" in message  # says what to do
    # the registry's own compatibility endpoint agrees (also on a real registry)
    data = AvroConverter()._data
    assert registry_client.test_compatibility(f"{topic}-value", RegistrySchema(data.writer(USER_V2).schema_json, "AVRO"))
    assert not registry_client.test_compatibility(f"{topic}-value",
                                                  RegistrySchema(data.writer(USER_V3).schema_json, "AVRO"))


# ---------------------------------------------------------------- without a registry: the schema in every record

def test_framed_records_carry_their_schema_as_documented_and_round_trip():
    c = converter()
    data = c.from_connect_data("t", ORDER_V2, order(4, 2))
    schema, plain = parse_framed(data)  # an independent reader of the documented layout
    assert schema["connect.name"] == "com.example.Order"
    assert plain["email"] == "u4@example.com" and plain["amount"].as_tuple().exponent == -2
    back = converter().to_connect_data("t", data)  # a fresh converter: nothing but the bytes
    assert back.value == order(4, 2) and back.schema == ORDER_V2


def test_container_records_are_avro_files_any_avro_library_reads():
    c = converter(embedded_schema_format="container")
    data = c.from_connect_data("t", ORDER_V1, order(3))
    assert data == c.from_connect_data("t", ORDER_V1, order(3))  # deterministic bytes
    (plain,) = list(fastavro.reader(io.BytesIO(data)))
    assert plain["id"] == 3 and plain["customer"]["name"] == "c3"
    assert converter().to_connect_data("t", data).value == order(3)


def test_registryless_evolution_reads_old_with_new_and_new_with_old():
    w = converter()
    old, new = w.from_connect_data("t", USER, Struct(USER, {"id": 1, "name": "a"})), \
        w.from_connect_data("t", USER_V2, Struct(USER_V2, {"id": 2, "name": "b", "email": "e"}))
    data = AvroConverter()._data
    as_new = converter(reader_schema=data.writer(USER_V2).schema_json)
    assert as_new.to_connect_data("t", old).value == Struct(USER_V2, {"id": 1, "name": "a"})
    as_old = converter(reader_schema=data.writer(USER).schema_json)
    assert as_old.to_connect_data("t", new).value == Struct(USER, {"id": 2, "name": "b"})


def test_one_converter_reads_every_layout_but_confluents_needs_a_registry(schema_registry_url, unique):
    framed = converter().from_connect_data("t", USER, Struct(USER, {"id": 1, "name": "a"}))
    confluent = registry_converter(schema_registry_url).from_connect_data(f"mix-{unique}", USER,
                                                                           Struct(USER, {"id": 1, "name": "a"}))
    assert registry_converter(schema_registry_url).to_connect_data("t", framed).value.get("name") == "a"
    with pytest.raises(DataException, match="Confluent wire format .*set the converter's schema.registry.url"):
        converter().to_connect_data(f"mix-{unique}", confluent)


# ---------------------------------------------------------------- tombstones and bad bytes

def test_tombstones_are_none_both_ways():
    c = converter()
    assert c.from_connect_data("t", USER, None) is None
    assert c.to_connect_data("t", None) == (None, None) and c.to_connect_data("t", b"") == (None, None)


@pytest.mark.parametrize("data, problem", [
    (b'{"id": 1}', "look like JSON"),
    (b"hello world", "look like text"),
    (b"\x00\x00\x01", "too short for the Confluent wire format"),
    (b"\xc3\x01" + bytes(8), "single-object encoding"),
    (b"\xc3\x53\x80", "truncated"),
    (b"\xc3\x53\x10" + b'"int"', "truncated"),
    (b"\xc3\x53\x0a" + b'"int"' + b"\x80\x80", "not Avro of the writer schema"),
    (b"\xc3\x53\x0a" + b'"int"' + b"\x02\x02", r"byte\(s\) left"),
    (b"\xc3\x53\x0c" + b'"nope"', "unknown type 'nope'"),
    (b"\xff\xfe", "first byte is neither"),
])
def test_bad_bytes_raise_data_exception_naming_topic_and_problem(data, problem):
    with pytest.raises(DataException, match=problem) as e:
        converter().to_connect_data("my-topic", data)
    assert "topic my-topic" in str(e.value)


def test_an_unknown_schema_id_is_a_data_exception(schema_registry_url):
    with pytest.raises(DataException, match="schema id 987654 is not in the schema registry"):
        registry_converter(schema_registry_url).to_connect_data("t", b"\x00" + struct.pack(">I", 987654) + b"\x02")


def test_a_value_that_does_not_fit_its_schema_names_the_field():
    bad = Struct(USER, {"id": 1})
    with pytest.raises(DataException, match="topic t: .*field 'name'"):
        converter().from_connect_data("t", USER, bad)


# ---------------------------------------------------------------- configuration, credentials, outages

def test_bad_settings_are_reported_together_without_secrets():
    with pytest.raises(ConfigException) as e:
        converter(schema_registry_url="ftp://bob:hunter22@registry", auto_register_schemas="maybe",
                  value_subject_name_strategy="ByMood", basic_auth_credentials_source="USER_INFO",
                  basic_auth_user_info="no-colon-secret", embedded_schema_format="zip", reader_schema="{not json")
    message = str(e.value)
    for key in ("schema.registry.url", "auto.register.schemas", "value.subject.name.strategy",
                "basic.auth.user.info", "embedded.schema.format", "reader.schema"):
        assert key in message
    assert "hunter22" not in message and "no-colon-secret" not in message


def test_configure_contacts_no_registry():
    # a plan validates converters on a machine that may not reach the registry
    converter(schema_registry_url="http://127.0.0.1:9")


def test_user_info_credentials_reach_the_registry_and_a_refusal_hides_them(unique, caplog):
    caplog.set_level(logging.DEBUG)
    with SchemaRegistryServer(users={"svc": "s3cret-pw"}) as registry:
        ok = registry_converter(registry.url, basic_auth_credentials_source="USER_INFO",
                                basic_auth_user_info="svc:s3cret-pw")
        data = ok.from_connect_data("auth", USER, Struct(USER, {"id": 1, "name": "a"}))
        assert ok.to_connect_data("auth", data).value.get("name") == "a"
        in_url = registry.url.replace("http://", "http://svc:s3cret-pw@")
        assert registry_converter(in_url).to_connect_data("auth", data).value.get("id") == 1

        wrong_url = registry.url.replace("http://", "http://svc:wrong-pw-123@")
        for bad in (registry_converter(registry.url, basic_auth_credentials_source="USER_INFO",
                                       basic_auth_user_info="svc:wrong-pw-123"), registry_converter(wrong_url)):
            with pytest.raises(ConnectException, match="refused the credentials") as e:
                bad.from_connect_data(f"auth-{unique}", USER, Struct(USER, {"id": 1, "name": "a"}))
            assert "wrong-pw-123" not in str(e.value) and "s3cret" not in str(e.value)
    assert "s3cret" not in caplog.text and "wrong-pw" not in caplog.text
    assert "has the Avro schema as id" in caplog.text  # registrations are logged, with the URL only


def test_an_unreachable_registry_is_retriable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = registry_converter(f"http://user:pw-abc@127.0.0.1:{port}", max_retries=0)
    with pytest.raises(RetriableException, match="unreachable") as e:
        c.from_connect_data("t", USER, Struct(USER, {"id": 1, "name": "a"}))
    assert "pw-abc" not in str(e.value)


def test_schema_registry_client_is_confluents(schema_registry_url):
    # the converter talks to the registry through confluent-kafka's client, nothing of its own
    c = registry_converter(schema_registry_url)
    c.from_connect_data("client-check", Schema.STRING, "x")
    assert isinstance(c._registry.client, SchemaRegistryClient)


def test_a_password_with_a_raw_at_or_slash_is_refused_without_showing_it_and_encoded_it_works(caplog):
    caplog.set_level(logging.DEBUG)
    with SchemaRegistryServer(users={"svc": "p@ss/w0rd"}) as registry:
        for raw in ("svc:p@ss/w0rd", "svc:p@ssw0rd", "s@vc:pw/x", "svc:pw?x#y"):
            with pytest.raises(ConfigException, match="percent-encode") as e:
                registry_converter(registry.url.replace("http://", f"http://{raw}@"))
            message = str(e.value)
            assert registry.url in message  # the URL is shown without its user info
            for secret in ("p@ss", "ss/w0rd", "ssw0rd", "pw/x", "pw?x"):
                assert secret not in message
        c = registry_converter(registry.url.replace("http://", "http://svc:p%40ss%2Fw0rd@"))
        assert c._registry.shown == registry.url
        data = c.from_connect_data("pw", Schema.STRING, "x")
        assert c.to_connect_data("pw", data).value == "x"
    assert "w0rd" not in caplog.text and "p%40ss" not in caplog.text


def test_fixed_decimals_and_unions_confluent_wrote_are_written_back_as_the_same_avro(schema_registry_url,
                                                                                     registry_client, unique):
    import decimal

    schema = {"type": "record", "name": f"Ev{unique}", "namespace": "org.acme", "fields": [
        {"name": "h", "type": {"type": "fixed", "name": "Md5", "size": 4}},
        {"name": "amt", "type": {"type": "fixed", "name": "Amt", "size": 8, "logicalType": "decimal",
                                 "precision": 18, "scale": 4}},
        {"name": "n", "type": ["int", "long"]},
        {"name": "f", "type": ["float", "double"]},
        {"name": "e", "type": ["null", "string", {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}]},
    ]}
    record = {"h": b"0123", "amt": decimal.Decimal("-1.2345"), "n": ("long", 5), "f": ("double", 0.1), "e": ("org.acme.Kind", "B")}
    ctx = SerializationContext("in", MessageField.VALUE)
    serializer = AvroSerializer(registry_client, json.dumps(schema),
                                conf={"subject.name.strategy": lambda _ctx, name: name})
    data = serializer(record, ctx)
    c = registry_converter(schema_registry_url, value_subject_name_strategy="RecordNameStrategy")
    read = c.to_connect_data("in", data)
    assert read.value.get("n").get("long") == 5 and read.value.get("e").get("Kind") == "B"

    # written back under the same subject: accepted there (the same Avro types), the same Avro bytes
    copy = c.from_connect_data("out", read.schema, read.value)
    subject = f"org.acme.Ev{unique}"
    assert registry_client.get_versions(subject) == [1, 2]
    assert copy[5:] == data[5:]
    plain = AvroDeserializer(registry_client)(copy, SerializationContext("out", MessageField.VALUE))
    original = AvroDeserializer(registry_client)(data, ctx)
    assert plain == original
    assert plain["amt"] == decimal.Decimal("-1.2345") and plain["h"] == b"0123"


def test_scrub_invalid_names_is_a_converter_setting():
    schema = SchemaBuilder.struct().name("com.ex.my-record").field("my-field", Schema.INT32).build()
    with pytest.raises(DataException, match="'com.ex.my-record' is not a valid Avro name"):
        converter().from_connect_data("t", schema, Struct(schema, {"my-field": 1}))
    data = converter(scrub_invalid_names="true").from_connect_data("t", schema, Struct(schema, {"my-field": 1}))
    written, value = parse_framed(data)
    assert (written["name"], written["fields"][0]["name"], value) == ("my_record", "my_field", {"my_field": 1})


def test_a_reader_schema_without_a_connect_form_is_refused_at_configure():
    recursive = json.dumps({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"], "default": None}]})
    with pytest.raises(ConfigException, match="reader.schema.*refers to itself"):
        converter(reader_schema=recursive)
    with pytest.raises(ConfigException, match="reader.schema.*my-field"):
        converter(reader_schema=json.dumps({"type": "record", "name": "R", "fields": [
            {"name": "my-field", "type": "int"}]}))


def test_caches_are_bounded_by_schemas_cache_size(schema_registry_url, unique):
    schemas = [SchemaBuilder.struct().name(f"c.S{i}").field("a", Schema.INT32).build() for i in range(5)]
    for c in (converter(schemas_cache_size="2"),
              registry_converter(schema_registry_url, schemas_cache_size="2",
                                 value_subject_name_strategy="TopicRecordNameStrategy")):
        for s in schemas:
            c.to_connect_data(f"cache-{unique}", c.from_connect_data(f"cache-{unique}", s, Struct(s, {"a": 1})))
        if c._registry is None:
            assert len(c._headers._d) <= 2
        else:
            assert len(c._registry._ids._d) <= 2 and len(c._registry._schemas._d) <= 2
        assert len(c._readers._d) <= 2 and len(c._data._writers._d) <= 2


def test_a_null_in_a_required_boolean_is_refused_not_written_as_false():
    # a Struct made without validation (as a batch's records are) may hold a None anywhere: fastavro would
    # write a boolean's None as false, silently; every other type it refuses itself
    from airflow_copycat.connect import Schema, SchemaBuilder, Struct

    inner = SchemaBuilder.struct().name("Inner").field("ok", Schema.BOOLEAN).build()
    schema = SchemaBuilder.struct().name("Row").field("id", Schema.INT32).field("ok", Schema.BOOLEAN) \
        .field("inner", inner).build()
    conv = converter()
    good = Struct._trusted(schema, [1, True, Struct._trusted(inner, [False])])
    assert conv.to_connect_data("t", conv.from_connect_data("t", schema, good)).value == good
    for bad in (Struct._trusted(schema, [1, None, Struct._trusted(inner, [False])]),
                Struct._trusted(schema, [1, True, Struct._trusted(inner, [None])])):
        with pytest.raises(DataException, match="null for a required boolean"):
            conv.from_connect_data("t", schema, bad)
