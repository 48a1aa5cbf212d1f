"""Transforms and Avro: what a chain of 3 SMTs and the AvroConverter cost, against the same pipeline without them.

Input: the deterministic access log of ``--lines`` lines (default 300k) used by
bench_file_to_kafka. Kafka: the embedded broker, or ``KAFKA_BOOTSTRAP``. Every
pipeline is FileStreamSource -> Kafka, tasks.max=1, planned with ``make_plan`` and
run in this process with ``executor.run_group`` (the code a Spark task runs):

* ``source_json`` (baseline of the transforms): no transforms, JsonConverter; each
  value is the envelope of a string.
* ``source_json_3_transforms``: the same with ``HoistField$Value`` (line -> struct
  ``{line}``), ``InsertField$Value`` (a static ``source`` field) and
  ``ReplaceField$Value`` (rename ``line`` to ``message``); each value is the
  envelope of a 2-field struct. Ratio against ``source_json``.
* ``source_avro_3_transforms``: the same chain with the AvroConverter, no registry
  (schema embedded per record, the ``framed`` layout). Ratio against
  ``source_json_3_transforms``: the same records, converter swapped.
* ``source_avro_registry_3_transforms``: the same with ``schema.registry.url`` set
  (Confluent wire format), against the stand-in registry of
  ``tests.support.schema_registry`` (or ``SCHEMA_REGISTRY_URL``).
* ``sink_parquet_json`` / ``sink_parquet_avro``: FilesSink (Parquet) reading the
  JSON and the registry-less Avro topics back; Avro's ratio is against JSON.

Verification: every topic holds ``--lines`` records; a sample of values decodes
to the expected struct; every Parquet output holds ``--lines`` rows.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import create_topic, delete_topic, fail, kafka, note, read_topic, report, timed, uid, write_log_file

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

CHAIN = {
    "transforms": "hoist,insert,rename",
    "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
    "transforms.hoist.field": "line",
    "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
    "transforms.insert.static.field": "source",
    "transforms.insert.static.value": "bench",
    "transforms.rename.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "transforms.rename.renames": "line:message",
}
AVRO = "io.confluent.connect.avro.AvroConverter"


def run(config: dict, worker_props: dict) -> float:
    plan = make_plan(config, WorkerConfig(worker_props, env={}))
    (group,) = plan["groups"]
    with timed() as t:
        result = run_group(group, worker_props)
    if result["status"] != "ok":
        fail(f"{config['name']}: {json.dumps(result)[:2000]}")
    note(f"{config['name']}: {result['records']} records, {result['bytes']} bytes in {t[0]:.2f} s")
    return t[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    n, parts = args.lines, args.partitions
    from airflow_copycat.converters.avro.converter import AvroConverter
    from airflow_copycat.converters.json_converter import JsonConverter
    from tests.support.schema_registry import SchemaRegistryServer

    with tempfile.TemporaryDirectory(prefix="copycat-bench-") as tmp, kafka() as bootstrap, \
            SchemaRegistryServer() as standin:
        registry = os.environ.get("SCHEMA_REGISTRY_URL") or standin.url
        path = os.path.join(tmp, "access.log")
        size, _ = write_log_file(path, n)
        first_line = open(path, encoding="utf-8").readline().rstrip("\n")
        note(f"wrote {n} lines, {size / 1e6:.1f} MB; registry {registry}")
        run_id = uid()
        worker_props = {"bootstrap.servers": bootstrap, "offset.storage.topic": f"bench-offsets-{run_id}",
                        "offset.storage.partitions": 1}
        variants = {
            "source_json": {},
            "source_json_3_transforms": CHAIN,
            "source_avro_3_transforms": dict(CHAIN, **{"value.converter": AVRO}),
            "source_avro_registry_3_transforms": dict(CHAIN, **{"value.converter": AVRO,
                                                                "value.converter.schema.registry.url": registry}),
        }
        seconds, topics = {}, {}
        for name, extra in variants.items():
            topic = topics[name] = f"bench-{name.replace('_', '-')}-{run_id}"
            create_topic(bootstrap, topic, parts)
            config = {"name": topic, "connector.class": "FileStreamSource", "file": path, "topic": topic,
                      "tasks.max": 1, **extra}
            seconds[name] = run(config, worker_props)
            sample: list[bytes] = []
            count = read_topic(bootstrap, topic, parts, lambda v: sample.append(v) if len(sample) < 1 else None)
            if count != n:
                fail(f"{topic} holds {count} records, expected {n}")
            if extra:  # the chain's output: a struct {message, source}
                conv = AvroConverter() if "value.converter" in extra else JsonConverter()
                conv.configure({k[len("value.converter."):]: v for k, v in extra.items()
                                if k.startswith("value.converter.")}, False)
                value = conv.to_connect_data(topic, sample[0]).value
                if value.get("source") != "bench" or not value.get("message"):
                    fail(f"{topic}: unexpected value {value}")
        note(f"first line: {first_line[:60]}...")

        # Kafka -> Parquet, JSON and registry-less Avro topics
        for name, source in (("sink_parquet_json", "source_json_3_transforms"),
                             ("sink_parquet_avro", "source_avro_3_transforms")):
            out = os.path.join(tmp, name)
            config = {"name": f"{name}-{run_id}", "connector.class": "FilesSink", "topics": topics[source],
                      "store.url": out, "format.class": "parquet", "flush.size": 100000, "tasks.max": 1,
                      "value.converter": variants[source].get("value.converter", "json")}
            seconds[name] = run(config, worker_props)
            import pyarrow.parquet as pq

            rows = sum(pq.ParquetFile(f).metadata.num_rows
                       for f in glob.glob(os.path.join(out, "topics", "**", "*.parquet"), recursive=True))
            if rows != n:
                fail(f"{name}: {rows} Parquet rows, expected {n}")
        for topic in topics.values():
            delete_topic(bootstrap, topic)

    rate = {k: n / v for k, v in seconds.items()}
    report("source_json", rate["source_json"], "msg/s", 1.0, "itself")
    report("source_json_3_transforms", rate["source_json_3_transforms"], "msg/s",
           rate["source_json_3_transforms"] / rate["source_json"], "source_json")
    for name in ("source_avro_3_transforms", "source_avro_registry_3_transforms"):
        report(name, rate[name], "msg/s", rate[name] / rate["source_json_3_transforms"], "source_json_3_transforms")
    report("sink_parquet_json", rate["sink_parquet_json"], "msg/s", 1.0, "itself")
    report("sink_parquet_avro", rate["sink_parquet_avro"], "msg/s",
           rate["sink_parquet_avro"] / rate["sink_parquet_json"], "sink_parquet_json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
