"""The transform chain: Kafka Connect's ``transforms=`` / ``predicates=`` syntax, class names,
predicates and negation, every config problem at once, and errors that name the transform."""

from __future__ import annotations

import sys
import textwrap

import pytest

from airflow_copycat.connect.data import Schema, SchemaBuilder, Struct
from airflow_copycat.connect.errors import ConfigException, ConnectException, DataException
from airflow_copycat.connect.records import SinkRecord, SourceRecord
from airflow_copycat.runtime.transforms import (
    TRANSFORM_ENTRY_POINT_GROUP,
    TransformChain,
    TransformError,
    build_chain,
    check_transforms,
    resolve,
)
from airflow_copycat.transforms.fields import InsertField
from airflow_copycat.transforms.mask import MaskField
from airflow_copycat.transforms.predicates import TopicNameMatches


def record(value=None, topic="orders", **kw):
    return SourceRecord(topic, 0, value=value, **kw)


def test_no_transforms_is_an_empty_false_chain():
    chain = build_chain({"name": "c", "connector.class": "FileStreamSource"})
    assert not chain and len(chain) == 0
    r = record({"a": 1})
    assert chain.apply(r) is r
    assert check_transforms({"transforms": ""}) == []
    chain.close()


def test_transforms_apply_in_the_listed_order():
    # Given a copy of the topic into a field, then a rename of that field
    config = {
        "transforms": "addTopic,rename",
        "transforms.addTopic.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.addTopic.topic.field": "src",
        "transforms.rename.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
        "transforms.rename.renames": "src:source_topic",
    }
    # When a record goes through the chain
    out = build_chain(config).apply(record({"id": 1}))
    # Then the second saw what the first did
    assert out.value == {"id": 1, "source_topic": "orders"}
    # And in the other order the rename finds nothing to rename
    config["transforms"] = "rename,addTopic"
    assert build_chain(config).apply(record({"id": 1})).value == {"id": 1, "src": "orders"}


def test_filter_with_a_predicate_drops_only_matching_records():
    config = {
        "transforms": "dropTombstones",
        "transforms.dropTombstones.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.dropTombstones.predicate": "isTombstone",
        "predicates": "isTombstone",
        "predicates.isTombstone.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
    }
    chain = build_chain(config)
    assert chain.apply(record(None)) is None
    kept = record({"a": 1})
    assert chain.apply(kept) is kept
    # negate=true: keep only tombstones
    negated = build_chain({**config, "transforms.dropTombstones.negate": "true"})
    assert negated.apply(record({"a": 1})) is None
    assert negated.apply(record(None)) is not None


def test_predicate_limits_a_transform_to_matching_topics():
    chain = build_chain({
        "transforms": ["route"],  # typed values, as from JSON or YAML
        "transforms.route.type": "RegexRouter",
        "transforms.route.regex": "db\\.(.*)",
        "transforms.route.replacement": "mirror-$1",
        "transforms.route.predicate": "fromDb",
        "predicates": "fromDb",
        "predicates.fromDb.type": "TopicNameMatches",
        "predicates.fromDb.pattern": "db\\..*",
    })
    assert chain.apply(record(1, topic="db.orders")).topic == "mirror-orders"
    assert chain.apply(record(1, topic="web.clicks")).topic == "web.clicks"


@pytest.mark.parametrize("name", [
    "org.apache.kafka.connect.transforms.MaskField$Value",
    "MaskField$Value",
    "MaskField.Value",
    "airflow_copycat.transforms.fields:MaskField.Value",
    "airflow_copycat.transforms.fields.MaskField.Value",
])
def test_transform_class_names_resolve(name):
    assert resolve(name) is MaskField.Value


def test_predicate_class_names_resolve():
    from airflow_copycat.connect.transforms import Predicate

    for name in ("org.apache.kafka.connect.transforms.predicates.TopicNameMatches", "TopicNameMatches"):
        assert resolve(name, Predicate) is TopicNameMatches


def test_a_name_without_key_or_value_says_which_to_use():
    with pytest.raises(ConnectException, match=r"InsertField\$Key for the record key or .*InsertField\$Value"):
        resolve("org.apache.kafka.connect.transforms.InsertField")


def test_unknown_class_says_what_was_tried():
    with pytest.raises(ConnectException) as e:
        resolve("io.confluent.connect.transforms.ExtractTopic$Value")
    assert "not a built-in" in str(e.value) and TRANSFORM_ENTRY_POINT_GROUP in str(e.value)
    assert "RegexRouter" in str(e.value)


@pytest.fixture
def acme_plugin(tmp_path, monkeypatch):
    """An installed distribution registering a transform and a predicate in our entry-point group."""
    pkg = tmp_path / "acme_smt"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from airflow_copycat.connect.config import ConfigDef, ConfigType
        from airflow_copycat.connect.transforms import Predicate, Transformation

        CLOSED = []

        class Upper(Transformation):
            config_def = ConfigDef().define("field", ConfigType.STRING, doc="the field to upper-case")

            def configure(self, configs):
                self.field = self.config_def.parse(configs)["field"]

            def apply(self, record):
                if record.value.get(self.field) == "boom":
                    raise ValueError("cannot upper-case boom")
                return record.new_record(value={**record.value, self.field: record.value[self.field].upper()})

            def close(self):
                CLOSED.append("Upper")

        class Broken(Transformation):
            def configure(self, configs):
                raise RuntimeError("no licence key")

        class IsEven(Predicate):
            def test(self, record):
                if record.value is None:
                    raise ValueError("no value")
                return record.value.get("n", 0) % 2 == 0

            def close(self):
                CLOSED.append("IsEven")
    """))
    dist = tmp_path / "acme_smt-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-smt\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{TRANSFORM_ENTRY_POINT_GROUP}]\nupper = acme_smt:Upper\nbroken = acme_smt:Broken\nis-even = acme_smt:IsEven\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import acme_smt

    yield acme_smt
    sys.modules.pop("acme_smt", None)


def test_third_party_transforms_and_predicates_by_entry_point(acme_plugin):
    # Given a plugin's transform and predicate, named by entry point and by class path
    config = {
        "transforms": "up",
        "transforms.up.type": "upper",
        "transforms.up.field": "name",
        "transforms.up.predicate": "even",
        "predicates": "even",
        "predicates.even.type": "acme_smt.IsEven",
    }
    chain = build_chain(config)
    # Then it applies where its predicate holds
    assert chain.apply(record({"n": 2, "name": "ada"})).value == {"n": 2, "name": "ADA"}
    assert chain.apply(record({"n": 3, "name": "ada"})).value == {"n": 3, "name": "ada"}
    # And close() closes each transform and predicate once
    chain.close()
    chain.close()
    assert acme_plugin.CLOSED == ["Upper", "IsEven"]


def test_errors_name_the_transform_and_its_class(acme_plugin):
    chain = build_chain({
        "transforms": "up,mask",
        "transforms.up.type": "acme_smt:Upper",
        "transforms.up.field": "name",
        "transforms.up.predicate": "even",
        "transforms.mask.type": "MaskField$Value",
        "transforms.mask.fields": "n",
        "transforms.mask.replacement": "nope",
        "predicates": "even",
        "predicates.even.type": "is-even",
    })
    # a third-party transform raising
    with pytest.raises(TransformError) as e:
        chain.apply(record({"n": 2, "name": "boom"}))
    assert e.value.transform_alias == "up" and e.value.class_name == "acme_smt.Upper"
    assert isinstance(e.value.__cause__, ValueError) and "cannot upper-case boom" in str(e.value)
    # a built-in raising DataException: named by its Kafka Connect class
    with pytest.raises(TransformError) as e:
        chain.apply(record({"n": 1, "name": "x"}))
    assert e.value.transform_alias == "mask"
    assert e.value.class_name == "org.apache.kafka.connect.transforms.MaskField$Value"
    assert isinstance(e.value.__cause__, DataException) and "'n'" in str(e.value)
    # a predicate raising
    with pytest.raises(TransformError, match="predicate 'even' of transform 'up'"):
        chain.apply(record(None))
    assert isinstance(TransformError("x", transform_alias="a", class_name="b"), ConnectException)


def test_every_problem_is_reported_at_once(acme_plugin):
    raw = {
        "name": "orders",
        "transforms": "noType,unknown,badValues,undefinedPredicate,negateAlone,predicateAsTransform,broken,noType",
        "transforms.unknown.type": "io.example.NoSuchTransform",
        "transforms.badValues.type": "org.apache.kafka.connect.transforms.Cast$Value",
        "transforms.badValues.spec": "age:array",
        "transforms.undefinedPredicate.type": "Filter",
        "transforms.undefinedPredicate.predicate": "isTest",
        "transforms.negateAlone.type": "Filter",
        "transforms.negateAlone.negate": "true",
        "transforms.predicateAsTransform.type": "TopicNameMatches",
        "transforms.broken.type": "broken",
        "predicates": "isProd",
        "predicates.isProd.type": "TopicNameMatches",
        "predicates.isProd.pattern": "prod-(",
    }
    problems = check_transforms(raw)
    by_key = {}
    for p in problems:
        by_key.setdefault(p.key, []).append(p.message)
    assert set(by_key) == {
        "transforms", "transforms.noType.type", "transforms.unknown.type", "transforms.badValues.spec",
        "transforms.undefinedPredicate.predicate", "transforms.negateAlone.negate",
        "transforms.predicateAsTransform.type", "transforms.broken.type", "predicates.isProd.pattern",
    }, problems
    assert "lists 'noType' twice" in by_key["transforms"][0]
    assert "is required" in by_key["transforms.noType.type"][0]
    assert "cannot cast to array" in by_key["transforms.badValues.spec"][0]
    assert "not defined" in by_key["transforms.undefinedPredicate.predicate"][0]
    assert "set transforms.negateAlone.predicate" in by_key["transforms.negateAlone.negate"][0]
    assert "it is a predicate" in by_key["transforms.predicateAsTransform.type"][0]
    assert "no licence key" in by_key["transforms.broken.type"][0]
    # build_chain raises them all in one exception naming the connector
    with pytest.raises(ConfigException) as e:
        build_chain(raw)
    assert len(e.value.problems) == len(problems) and "transforms of connector 'orders'" in str(e.value)


def test_bad_negate_value_and_config_values_of_a_predicate():
    problems = check_transforms({
        "transforms": "f",
        "transforms.f.type": "Filter",
        "transforms.f.predicate": "p",
        "transforms.f.negate": "perhaps",
        "predicates": "p",
        "predicates.p.type": "HasHeaderKey",
    })
    assert [(p.key, p.value) for p in problems] == [("transforms.f.negate", "perhaps"), ("predicates.p.name", None)]


def test_transform_keys_reach_the_transform_without_the_prefix():
    chain = build_chain({
        "transforms": "ins",
        "transforms.ins.type": "InsertField$Value",
        "transforms.ins.static.field": "origin",
        "transforms.ins.static.value": "dc1",
        "transforms.other.static.value": "ignored: not listed",
    })
    schema = SchemaBuilder.struct().field("id", Schema.INT64).build()
    out = chain.apply(SinkRecord("t", 0, value_schema=schema, value=Struct(schema, {"id": 1}), kafka_offset=7))
    assert out.value["origin"] == "dc1" and isinstance(out, SinkRecord) and out.kafka_offset == 7
    assert repr(chain) == "TransformChain(ins)"


def test_chain_never_rebuilds_schemas_per_record(monkeypatch):
    # Given a chain of schema-changing transforms and a stream of records of one schema
    chain = build_chain({
        "transforms": "ins,flat,cast,drop",
        "transforms.ins.type": "InsertField$Value",
        "transforms.ins.topic.field": "topic",
        "transforms.flat.type": "Flatten$Value",
        "transforms.cast.type": "Cast$Value",
        "transforms.cast.spec": "a.b:string",
        "transforms.drop.type": "ReplaceField$Value",
        "transforms.drop.exclude": "topic",
    })
    inner = SchemaBuilder.struct().field("b", Schema.INT32).build()
    schema = SchemaBuilder.struct().field("a", inner).build()
    records = [record(Struct(schema, {"a": Struct(inner, {"b": i})}), value_schema=schema) for i in range(200)]
    chain.apply(records[0])
    # When the rest go through
    built = []
    original = SchemaBuilder.build
    monkeypatch.setattr(SchemaBuilder, "build", lambda self: built.append(1) or original(self))
    outs = [chain.apply(r) for r in records[1:]]
    # Then no schema was built, and all share one output schema
    assert built == []
    assert len({id(o.value_schema) for o in outs}) == 1 and outs[-1].value["a.b"] == "199"


def test_a_chain_can_be_made_directly():
    chain = TransformChain()
    assert not chain
    transform = InsertField.Value()
    transform.configure({"topic.field": "t"})
    assert check_transforms({}) == []
