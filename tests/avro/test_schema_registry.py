"""The registry the Avro tests use behaves as Confluent's does where the converter relies on it.

Runs against the stand-in (tests.support.schema_registry) or, with
SCHEMA_REGISTRY_URL set, a real registry: every assertion is Confluent behaviour.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry.error import SchemaRegistryError


def avro(fields, name="Rec"):
    return RegistrySchema(json.dumps({"type": "record", "name": name, "namespace": "sr.test", "fields": fields}), "AVRO")


V1 = [{"name": "id", "type": "long"}]
V2 = V1 + [{"name": "email", "type": ["null", "string"], "default": None}]
V3 = V1 + [{"name": "age", "type": "int"}]


def test_one_schema_has_one_id_across_subjects_and_registering_it_again_adds_no_version(registry_client, unique):
    a = registry_client.register_schema(f"a-{unique}-value", avro(V1, f"R{unique}"))
    b = registry_client.register_schema(f"b-{unique}-value", avro(V1, f"R{unique}"))
    again = registry_client.register_schema(f"a-{unique}-value", avro(V1, f"R{unique}"))
    assert a == b == again
    assert registry_client.get_versions(f"a-{unique}-value") == [1]
    found = registry_client.lookup_schema(f"a-{unique}-value", avro(V1, f"R{unique}"))
    assert (found.schema_id, found.version) == (a, 1)


def test_backward_is_the_default_and_a_subject_level_overrides_it(registry_client, unique):
    subject = f"levels-{unique}-value"
    registry_client.register_schema(subject, avro(V1))
    assert registry_client.get_compatibility() == "BACKWARD"
    with pytest.raises(SchemaRegistryError) as e:
        registry_client.get_compatibility(subject)  # no subject-level setting yet
    assert e.value.http_status_code == 404 and e.value.error_code == 40408

    registry_client.register_schema(subject, avro(V2))  # optional field with a default: accepted
    with pytest.raises(SchemaRegistryError) as e:
        registry_client.register_schema(subject, avro(V3))  # required field without a default: refused
    assert e.value.http_status_code == 409

    registry_client.set_compatibility(subject, "NONE")
    assert registry_client.get_compatibility(subject) == "NONE"
    registry_client.register_schema(subject, avro(V3))
    assert registry_client.get_versions(subject) == [1, 2, 3]


def test_unknown_ids_and_subjects_are_404_with_confluents_codes(registry_client, unique):
    with pytest.raises(SchemaRegistryError) as e:
        registry_client.get_schema(99_999_999)
    assert (e.value.http_status_code, e.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as e:
        registry_client.get_latest_version(f"nobody-{unique}")
    assert (e.value.http_status_code, e.value.error_code) == (404, 40401)


def level_subject(registry_client, unique, name, level):
    subject = f"{name}-{unique}-value"
    registry_client.register_schema(subject, avro(V1, "Lv"))  # creates the subject at the default level
    registry_client.set_compatibility(subject, level)
    return subject


def refused(registry_client, subject, fields, name="Lv") -> bool:
    try:
        registry_client.register_schema(subject, avro(fields, name))
    except SchemaRegistryError as e:
        assert e.http_status_code == 409
        return True
    return False


WITH_F_STRING = V1 + [{"name": "f", "type": "string"}]
WITH_F_STRING_DEFAULT = V1 + [{"name": "f", "type": "string", "default": ""}]
WITH_F_INT = V1 + [{"name": "f", "type": "int"}]
WITH_F_INT_DEFAULT = V1 + [{"name": "f", "type": "int", "default": 0}]


def test_forward_checks_that_the_latest_schema_reads_the_new_one(registry_client, unique):
    subject = level_subject(registry_client, unique, "fwd", "FORWARD")
    assert not refused(registry_client, subject, V3)  # a required field added: old readers skip it
    # it removed again (and another field added): the latest cannot read data without it
    assert refused(registry_client, subject, V1 + [{"name": "z", "type": "string", "default": ""}])
    assert not refused(registry_client, subject, V3 + [{"name": "b", "type": "int", "default": 1}])


def test_full_checks_both_ways(registry_client, unique):
    subject = f"full-{unique}-value"
    registry_client.register_schema(subject, avro(WITH_F_STRING, "Lv"))
    registry_client.set_compatibility(subject, "FULL")
    assert refused(registry_client, subject, V1)  # f dropped: backward-compatible only (f has no default)
    assert refused(registry_client, subject, WITH_F_STRING + [{"name": "g", "type": "int"}])  # forward only
    assert not refused(registry_client, subject, WITH_F_STRING + [{"name": "g", "type": "int", "default": 0}])


@pytest.mark.parametrize("level, v1, v3", [
    # v2 drops f; v3 brings f back as an int: compatible with v2, not with v1's f (a string)
    ("BACKWARD", WITH_F_STRING, WITH_F_INT_DEFAULT),
    ("FORWARD", WITH_F_STRING_DEFAULT, WITH_F_INT),
    ("FULL", WITH_F_STRING_DEFAULT, WITH_F_INT_DEFAULT),
])
def test_transitive_levels_check_every_version_the_others_only_the_latest(registry_client, unique, level, v1, v3):
    for transitive in (False, True):
        lv = level + ("_TRANSITIVE" if transitive else "")
        subject = f"tr-{lv.lower()}-{unique}-value"
        registry_client.register_schema(subject, avro(v1, "Tr"))
        registry_client.set_compatibility(subject, lv)
        assert not refused(registry_client, subject, V1, "Tr")  # v2: f dropped
        assert refused(registry_client, subject, v3, "Tr") == transitive, lv


def test_a_renamed_record_is_incompatible_and_an_added_enum_symbol_only_backward(registry_client, unique):
    subject = f"names-{unique}-value"
    registry_client.register_schema(subject, avro(V1, "Named"))
    assert refused(registry_client, subject, V1, "Renamed")  # BACKWARD: the record's name must match
    assert not refused(registry_client, subject, V1 + [{"name": "x", "type": "int", "default": 0}], "Named")

    def enum(symbols, **extra):
        return V1 + [{"name": "k", "type": {"type": "enum", "name": "K", "symbols": symbols, **extra}, "default": "A"}]

    for level, added_ok in (("BACKWARD", True), ("FORWARD", False)):
        subject = f"enum-{level.lower()}-{unique}-value"
        registry_client.register_schema(subject, avro(enum(["A", "B"]), "En"))
        registry_client.set_compatibility(subject, level)
        assert refused(registry_client, subject, enum(["A", "B", "C"]), "En") != added_ok, level
    # an enum default lets old readers take a symbol they do not know
    subject = f"enum-default-{unique}-value"
    registry_client.register_schema(subject, avro(enum(["A", "B"], default="A"), "Ed"))
    registry_client.set_compatibility(subject, "FORWARD")
    assert not refused(registry_client, subject, enum(["A", "B", "C"], default="A"), "Ed")


def test_schemas_confluent_treats_as_one_get_one_id(registry_client, unique):
    def register(subject, schema):
        return registry_client.register_schema(f"{subject}-{unique}", RegistrySchema(json.dumps(schema), "AVRO"))

    assert register("s1", "string") == register("s2", {"type": "string"})
    named = register("n1", {"type": "record", "name": f"sr.test.Id{unique}", "fields": [
        {"name": "a", "type": {"type": "string"}}]})
    assert named == register("n2", {"type": "record", "name": f"Id{unique}", "namespace": "sr.test", "fields": [
        {"name": "a", "type": "string"}]})
    # a default, a doc or a property is part of the schema: another id
    with_default = register("n3", {"type": "record", "name": f"Id{unique}", "namespace": "sr.test", "fields": [
        {"name": "a", "type": "string", "default": "x"}]})
    assert with_default != named


def test_a_schema_with_a_name_avro_does_not_allow_is_invalid(registry_client, unique):
    for schema in ({"type": "record", "name": "my-record", "fields": []},
                   {"type": "record", "name": "R", "fields": [{"name": "1st", "type": "int"}]},
                   {"type": "enum", "name": "E", "symbols": ["A-B"]}):
        with pytest.raises(SchemaRegistryError) as e:
            registry_client.register_schema(f"bad-{unique}", RegistrySchema(json.dumps(schema), "AVRO"))
        assert (e.value.http_status_code, e.value.error_code) == (422, 42201)
