"""File -> Kafka: the FileStreamSource connector against a raw confluent-kafka producer.

Input: a deterministic access log of ``--lines`` lines (default 1M, 116-151 bytes
each) in a temp dir. Kafka: the embedded broker, or ``KAFKA_BOOTSTRAP``.

* baseline ``raw_producer``: a plain confluent-kafka program reads the file line
  by line and produces the raw line bytes (no converter, no envelope) with the
  producer settings our runtime uses (``WorkerConfig.producer_config()``:
  idempotent, acks=all, linger.ms=20, murmur2_random), delivery reports for
  failures only and ``poll(0)`` every 1,000 records (``_common.produce_all``),
  then ``flush()``.
* ``file_to_kafka_json``: FileStreamSource, tasks.max=1, planned with
  ``make_plan`` and run in this process with ``executor.run_group`` (the code a
  Spark task runs), default JsonConverter: every value is the Kafka Connect
  envelope ``{"schema":{"type":"string","optional":false},"payload":"<line>"}``
  (~1.4x the bytes of the raw line).
* ``file_to_kafka_string``: the same with
  ``value.converter=org.apache.kafka.connect.storage.StringConverter`` -- the
  same bytes as the baseline, so the gap to it is the framework's cost alone.

Each run writes to a fresh topic with ``--partitions`` partitions (default 4).
Times cover ``run_group`` (producer and admin start-up, offset store, the loop,
the final flush and offset commit); planning is timed separately (stderr).
Verification: every topic holds exactly ``--lines`` records (read to the end by
EOF events), and the raw and string topics hold exactly the file's line bytes.

``--profile`` additionally runs the JSON variant under cProfile (on
``--profile-lines`` lines) and prints the hot spots to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    create_topic,
    delete_topic,
    fail,
    kafka,
    note,
    produce_all,
    profiled,
    read_topic,
    report,
    timed,
    uid,
    write_log_file,
)

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"


def raw_lines(path: str):
    with open(path, "rb") as f:
        for line in f:
            yield line[:-1] if line.endswith(b"\n") else line


def run_connector(path: str, topic: str, worker_props: dict, value_converter: str | None) -> tuple[dict, float]:
    config = {"name": f"bench-src-{topic}", "connector.class": "FileStreamSource", "file": path,
              "topic": topic, "tasks.max": 1}
    if value_converter:
        config["value.converter"] = value_converter
    worker = WorkerConfig(worker_props, env={})
    with timed() as t_plan:
        plan = make_plan(config, worker)
    groups = plan["groups"]
    if len(groups) != 1 or len(groups[0]["tasks"]) != 1:
        fail(f"expected one group with one task, got {groups}")
    with timed() as t_run:
        result = run_group(groups[0], worker_props)
    note(f"{topic}: plan {t_plan[0]:.2f} s, run_group {t_run[0]:.2f} s, status {result['status']}, "
         f"{result['records']} records, {result['bytes']} bytes")
    if result["status"] != "ok":
        fail(f"{topic}: group failed: {json.dumps(result)[:2000]}")
    return result, t_run[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--profile", action="store_true", help="also profile the JSON run with cProfile (stderr)")
    ap.add_argument("--profile-lines", type=int, default=200_000)
    args = ap.parse_args()
    n, parts = args.lines, args.partitions

    with tempfile.TemporaryDirectory(prefix="copycat-bench-") as tmp, kafka() as bootstrap:
        path = os.path.join(tmp, "access.log")
        with timed() as t:
            size, line_bytes = write_log_file(path, n)
        note(f"wrote {n} lines, {size / 1e6:.1f} MB ({line_bytes / n:.0f} B/line) to {path} in {t[0]:.1f} s")
        run_id = uid()
        worker_props = {"bootstrap.servers": bootstrap, "offset.storage.topic": f"bench-offsets-{run_id}",
                        "offset.storage.partitions": 1}
        producer_cfg = WorkerConfig(worker_props, env={}).producer_config()

        def check(topic: str, expect_bytes: int | None) -> None:
            total = [0]

            def add(v):
                total[0] += len(v)

            with timed() as t:
                count = read_topic(bootstrap, topic, parts, add if expect_bytes is not None else None)
            note(f"{topic}: read back {count} records in {t[0]:.1f} s")
            if count != n:
                fail(f"{topic} holds {count} records, expected {n}")
            if expect_bytes is not None and total[0] != expect_bytes:
                fail(f"{topic} holds {total[0]} value bytes, expected the file's {expect_bytes}")
            delete_topic(bootstrap, topic)

        # baseline
        topic_raw = f"bench-raw-{run_id}"
        create_topic(bootstrap, topic_raw, parts)
        with timed() as t_raw:
            produce_all(producer_cfg, topic_raw, raw_lines(path))
        note(f"raw producer: {t_raw[0]:.2f} s")
        check(topic_raw, line_bytes)
        base = n / t_raw[0]

        # ours, JsonConverter (default)
        topic_json = f"bench-json-{run_id}"
        create_topic(bootstrap, topic_json, parts)
        _, t_json = run_connector(path, topic_json, worker_props, None)
        check(topic_json, None)

        # ours, StringConverter
        topic_str = f"bench-string-{run_id}"
        create_topic(bootstrap, topic_str, parts)
        _, t_str = run_connector(path, topic_str, worker_props, STRING_CONVERTER)
        check(topic_str, line_bytes)

        report("raw_producer", base, "msg/s", 1.0, "itself")
        report("file_to_kafka_json", n / t_json, "msg/s", (n / t_json) / base, "raw_producer")
        report("file_to_kafka_string", n / t_str, "msg/s", (n / t_str) / base, "raw_producer")

        if args.profile:
            ppath = os.path.join(tmp, "profile.log")
            write_log_file(ppath, args.profile_lines)
            topic_prof = f"bench-prof-{run_id}"
            create_topic(bootstrap, topic_prof, parts)
            profiled(lambda: run_connector(ppath, topic_prof, worker_props, None),
                     f"the source loop (FileStreamSource -> JsonConverter -> Kafka, {args.profile_lines} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
