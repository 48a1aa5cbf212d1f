"""``make demo``: log files -> Kafka -> Parquet through Airflow and PySpark, twice, verified.

Starts clean every time: a fresh state directory, the embedded Kafka-protocol
broker on 127.0.0.1, a throwaway Airflow home on SQLite. Runs the
``copycat_demo`` DAG with ``airflow dags test`` (each connector's task groups
go through spark-submit, master ``local[2]``), appends lines to the input, runs
it again, and checks after each run that

    lines in the input files == records in Kafka == rows in the Parquet files

and that the second run copied only the appended lines. Exits non-zero otherwise.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".copycat" / "demo"
TOPIC = "demo-logs"
FILES = 3


def log(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def write_lines(start: int, count: int) -> None:
    """Append ``count`` lines per input file, numbered from ``start``."""
    for f in range(FILES):
        with open(STATE / "input" / f"app-{f}.log", "a", encoding="utf-8") as out:
            for i in range(start, start + count):
                out.write(f"2026-11-22T00:00:00Z host{f} GET /item/{i} status=200 bytes={100 + i}\n")


def count_input_lines() -> int:
    return sum(Path(p).read_text(encoding="utf-8").count("\n") for p in glob.glob(str(STATE / "input" / "*.log")))


def count_kafka_records(bootstrap: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    from airflow_copycat.runtime.kafka import admin_client, existing_topics, read_to_end

    n = existing_topics(admin_client({"bootstrap.servers": bootstrap})).get(TOPIC, 0)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-check", "enable.partition.eof": True})
    try:
        return sum(1 for _ in read_to_end(c, [TopicPartition(TOPIC, p, 0) for p in range(n)]))
    finally:
        c.close()


def count_output_rows() -> tuple[int, list[str]]:
    import pyarrow.dataset as ds

    root = STATE / "output" / "topics" / TOPIC
    files = sorted(str(p.relative_to(STATE / "output")) for p in root.rglob("*.parquet"))
    if not files:
        return 0, []
    return ds.dataset(str(root), format="parquet", partitioning="hive").count_rows(), files


def finish_summaries(run_id: str) -> dict[str, dict]:
    """The finish tasks' XCom (run summaries) of one DAG run, from the metadata database."""
    con = sqlite3.connect(STATE / "airflow" / "airflow.db")
    rows = con.execute(
        "select task_id, value from xcom where dag_id='copycat_demo' and run_id=? and key='return_value' "
        "and task_id like '%.finish'", (run_id,)
    ).fetchall()
    con.close()
    out = {}
    for task_id, value in rows:
        doc = json.loads(value) if isinstance(value, (str, bytes)) else value
        out[task_id.split(".")[0]] = json.loads(doc) if isinstance(doc, str) else doc
    return out


def last_run_id() -> str:
    con = sqlite3.connect(STATE / "airflow" / "airflow.db")
    (run_id,) = con.execute("select run_id from dag_run where dag_id='copycat_demo' order by id desc limit 1").fetchone()
    con.close()
    return run_id


def run_dag(env: dict, conf: dict) -> None:
    cmd = [str(Path(sys.executable).parent / "airflow"), "dags", "test", "copycat_demo", "-c", json.dumps(conf)]
    started = time.monotonic()
    with open(STATE / "dags-test.log", "a", encoding="utf-8") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        log(f"airflow dags test failed (exit {proc.returncode}); the last lines of {STATE / 'dags-test.log'}:")
        lines = (STATE / "dags-test.log").read_text(encoding="utf-8", errors="replace").splitlines()
        print("\n".join(lines[-60:]))
        raise SystemExit(1)
    log(f"airflow dags test copycat_demo: ok in {time.monotonic() - started:.0f}s")


def _offset(o) -> str:
    """Offsets as a person reads them: the byte position of a file offset, a Kafka offset as is."""
    return f"position {o['position']}" if isinstance(o, dict) and "position" in o else json.dumps(o)


def show(summary: dict) -> None:
    log(f"  {summary['kind']} {summary['connector']}: {summary['records']} records, {summary['bytes']} bytes")
    for p in summary["partitions"]:
        log(f"    {json.dumps(p['partition'])}: {_offset(p['offset_before'])} -> "
            f"{_offset(p['offset_after'])} ({p['records']} records)")


def verify(bootstrap: str, expect_source: int, run: int) -> bool:
    run_id = last_run_id()
    summaries = finish_summaries(run_id)
    lines, records = count_input_lines(), count_kafka_records(bootstrap)
    rows, files = count_output_rows()
    log(f"run {run} ({run_id}):")
    for key in ("demo-logs-source", "demo-logs-sink"):
        if key in summaries:
            show(summaries[key])
    log(f"  input lines: {lines}   records in Kafka topic {TOPIC}: {records}   rows in Parquet: {rows}")
    log(f"  output: {STATE / 'output'} ({len(files)} files, e.g. {files[-1] if files else '-'})")
    ok = lines == records == rows
    moved = {k: s["records"] for k, s in summaries.items()}
    if moved.get("demo-logs-source") != expect_source or moved.get("demo-logs-sink") != expect_source:
        log(f"  MISMATCH: expected this run to copy {expect_source} records in each step, got {moved}")
        ok = False
    log("  verified: lines == records == rows" if ok else "  NOT VERIFIED")
    return ok


def main() -> int:
    shutil.rmtree(STATE, ignore_errors=True)
    (STATE / "input").mkdir(parents=True)
    from airflow_copycat.testing.broker import EmbeddedBroker

    broker = EmbeddedBroker(log_path=str(STATE / "broker.log")).start()
    log(f"embedded Kafka-protocol broker on {broker.bootstrap}")
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(STATE / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        AIRFLOW_CONN_KAFKA_DEFAULT=json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": broker.bootstrap}}),
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        COPYCAT_DEMO_DIR=str(STATE),
    )
    try:
        started = time.monotonic()
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log(f"Airflow home {STATE / 'airflow'} (SQLite) migrated in {time.monotonic() - started:.0f}s")
        conf = {"input": str(STATE / "input" / "*.log"), "topic": TOPIC, "output": str(STATE / "output")}
        write_lines(0, 1000)
        log(f"wrote {FILES} log files x 1000 lines to {STATE / 'input'}")
        run_dag(env, conf)
        ok = verify(broker.bootstrap, FILES * 1000, 1)
        write_lines(1000, 250)
        log(f"appended 250 lines to each of the {FILES} files")
        run_dag(env, conf)
        ok = verify(broker.bootstrap, FILES * 250, 2) and ok
    finally:
        broker.stop()
    log("DEMO PASSED" if ok else "DEMO FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
