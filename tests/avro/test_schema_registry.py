"""The registry the Avro tests use behaves as Confluent's does where the converter relies on it.

Runs against the stand-in (airflow_copycat.testing.schema_registry) or, with
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
