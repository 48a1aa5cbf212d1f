"""Transforms on batches against the same transforms on the batch's records: for generated rows and
chains, the transformed batch's records equal what the chain makes of each record, and the stages
that cannot run on columns hand the batch back (None) instead of guessing."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_copycat.connect import Schema, SourceBatch
from airflow_copycat.runtime.batch_transforms import apply_chain
from airflow_copycat.runtime.transforms import TransformError, build_chain
from tests.support.batch_sources import KEY_SCHEMA, VALUE_SCHEMA, generate

T = "org.apache.kafka.connect.transforms."
STAGES = {
    "insert_static": {"type": T + "InsertField$Value", "static.field": "origin", "static.value": "dc1"},
    "insert_topic_ts": {"type": T + "InsertField$Value", "topic.field": "src_topic!", "timestamp.field": "ts"},
    "insert_partition": {"type": T + "InsertField$Value", "partition.field": "kp"},
    "drop_score": {"type": T + "ReplaceField$Value", "exclude": "score"},
    "keep_and_rename": {"type": T + "ReplaceField$Value", "include": "id,customer,amount", "renames": "id:order_id"},
    "rename_customer": {"type": T + "ReplaceField$Value", "renames": "customer:who"},
    "route": {"type": T + "RegexRouter", "regex": "(.*)-t", "replacement": "routed-$1"},
    "route_ts": {"type": T + "TimestampRouter", "topic.format": "${topic}_${timestamp}", "timestamp.format": "yyyy"},
    "filter_other": {"type": T + "Filter", "predicate": "other"},
    "filter_unless_other": {"type": T + "Filter", "predicate": "other", "negate": "true"},
}
PREDICATES = {"predicates": "other", "predicates.other.type": "TopicNameMatches", "predicates.other.pattern": "x.*"}


def _config(aliases):
    config = {"name": "c", "connector.class": "x", "transforms": ",".join(aliases), **PREDICATES}
    for alias in aliases:
        config.update({f"transforms.{alias}.{k}": v for k, v in STAGES[alias].items()})
    return config


def _struct_batch(n, seed, timestamp=None, partition=None):
    return SourceBatch("orders-t", generate(n, seed, 0), VALUE_SCHEMA, {"p": 1}, {"row": n}, key_fields=("id",),
                       key_schema=KEY_SCHEMA, timestamp=timestamp, kafka_partition=partition)


def _expected(chain, batch):
    out = [chain.apply(r) for r in batch.to_records()]
    return [r for r in out if r is not None]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(aliases=st.lists(st.sampled_from(sorted(STAGES)), min_size=1, max_size=4, unique=True),
       n=st.integers(1, 30), seed=st.integers(0, 1000),
       timestamp=st.one_of(st.none(), st.integers(0, 4_000_000_000_000)), partition=st.one_of(st.none(), st.integers(0, 3)))
def test_a_chain_on_a_batch_gives_what_it_gives_each_record(aliases, n, seed, timestamp, partition):
    chain = build_chain(_config(aliases))
    batch = _struct_batch(n, seed, timestamp, partition)
    out = apply_chain(chain, batch)
    try:
        expected = _expected(chain, batch)
    except TransformError:  # the record path fails: the batch must have been handed back, not guessed at
        assert out is None
        return
    assert out is not None, f"{aliases} should run in columns"
    assert repr(out.to_records()) == repr(expected)  # repr: NaN scores compare equal


def test_the_three_import_transforms_on_lines_run_in_columns():
    # Given lines (a string value) and Hoist -> Insert -> Rename, as the transforms benchmark runs them
    config = {"name": "c", "connector.class": "x", "transforms": "hoist,insert,rename",
              "transforms.hoist.type": T + "HoistField$Value", "transforms.hoist.field": "line",
              "transforms.insert.type": T + "InsertField$Value", "transforms.insert.static.field": "source",
              "transforms.insert.static.value": "bench",
              "transforms.rename.type": T + "ReplaceField$Value", "transforms.rename.renames": "line:message"}
    chain = build_chain(config)
    lines = pa.table({"value": pa.array(["a", "b \"q\"", "", "ünï"])})
    batch = SourceBatch("logs", lines, Schema.STRING, {"f": "a.log"}, {"position": 30})
    # When the chain runs on the batch
    out = apply_chain(chain, batch)
    # Then it ran in columns and made what the record path makes
    assert out is not None and repr(out.to_records()) == repr(_expected(chain, batch))
    assert [f.name for f in out.value_schema.fields] == ["message", "source"]


@pytest.mark.parametrize("stage", [
    {"type": T + "MaskField$Value", "fields": "customer"},
    {"type": T + "ValueToKey", "fields": "id"},
    {"type": T + "HoistField$Value", "field": "wrapped"},  # of a struct: a nested column
    {"type": T + "ReplaceField$Key", "renames": "id:k"},
])
def test_stages_without_a_column_form_hand_the_batch_back(stage):
    chain = build_chain({"name": "c", "connector.class": "x", "transforms": "s",
                         **{f"transforms.s.{k}": v for k, v in stage.items()}})
    assert apply_chain(chain, _struct_batch(5, 1)) is None


def test_insert_field_on_a_schema_with_defaults_goes_row_by_row():
    # replace.null.with.default makes the record transform write a null field's default: columns would keep the null
    from airflow_copycat.connect import SchemaBuilder as B

    schema = B.struct().field("id", Schema.INT64).field("name", B.string().optional().default_value("dflt").build()).build()
    batch = SourceBatch("t", pa.table({"id": pa.array([1, 2], pa.int64()), "name": pa.array(["a", None])}), schema,
                        {"p": 1}, {"o": 2})
    chain = build_chain(_config(["insert_static"]))
    assert apply_chain(chain, batch) is None


def test_a_value_field_named_like_the_key_column_goes_row_by_row():
    batch = SourceBatch("t", pa.table({"value": pa.array(["a"]), "key": pa.array(["k"])}), Schema.STRING, {"p": 1},
                        {"o": 1}, key_schema=Schema.STRING)
    chain = build_chain({"name": "c", "connector.class": "x", "transforms": "h",
                         "transforms.h.type": T + "HoistField$Value", "transforms.h.field": "key"})
    assert apply_chain(chain, batch) is None
    assert repr(_expected(chain, batch)[0].value) == "Struct{key='a'}"


def test_a_batch_refuses_nanosecond_times_it_could_not_turn_into_records():
    from airflow_copycat.connect import DataException
    from airflow_copycat.connect import SchemaBuilder as B
    from airflow_copycat.connect.data import Timestamp

    schema = B.struct().field("ts", Timestamp.builder().build()).build()
    with pytest.raises(DataException, match="nanoseconds"):
        SourceBatch("t", pa.table({"ts": pa.array([1], pa.timestamp("ns"))}), schema, {"p": 1}, {"o": 1})
