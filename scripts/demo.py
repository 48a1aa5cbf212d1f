"""``make demo``: log files -> Kafka -> Parquet, and a database -> Kafka, through Airflow and PySpark, verified.

Starts clean every time: a fresh state directory, the embedded Kafka-protocol
broker and an embedded Spark Connect server (``local[2]``) on 127.0.0.1, a
throwaway Airflow home on SQLite. Runs the ``copycat_demo`` DAG with ``airflow
dags test`` (the connection ``spark_default`` is a ``spark_connect`` one: each
task group runs on that server, no spark-submit), appends lines to the input,
runs it again, and checks after each run that

    lines in the input files == records in Kafka == rows in the Parquet files

and that the second run copied only the appended lines. Then it fills a SQLite shop
database (``scripts/shop_db.py``), runs the hourly import DAG ``copycat_jdbc_import``
(Airflow connection ``shop_db``), adds and updates rows, runs it again, and checks that

    the newest version of every row in Kafka == the table, and each run copied only new or changed rows.

Exits non-zero otherwise.
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
    from airflow_copycat.testing.examples import write_log_lines

    write_log_lines(STATE / "input", start, count, FILES)


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


def finish_summaries(run_id: str, dag_id: str = "copycat_demo") -> dict[str, dict]:
    """The finish tasks' XCom (run summaries) of one DAG run, from the metadata database."""
    con = sqlite3.connect(STATE / "airflow" / "airflow.db")
    rows = con.execute(
        "select task_id, value from xcom where dag_id=? and run_id=? and key='return_value' "
        "and task_id like '%.finish'", (dag_id, run_id)
    ).fetchall()
    con.close()
    out = {}
    for task_id, value in rows:
        doc = json.loads(value) if isinstance(value, (str, bytes)) else value
        out[task_id.split(".")[0]] = json.loads(doc) if isinstance(doc, str) else doc
    return out


def last_run_id(dag_id: str = "copycat_demo") -> str:
    con = sqlite3.connect(STATE / "airflow" / "airflow.db")
    (run_id,) = con.execute("select run_id from dag_run where dag_id=? order by id desc limit 1", (dag_id,)).fetchone()
    con.close()
    return run_id


def run_dag(env: dict, conf: dict, dag_id: str = "copycat_demo") -> None:
    cmd = [str(Path(sys.executable).parent / "airflow"), "dags", "test", dag_id, "-c", json.dumps(conf)]
    started = time.monotonic()
    with open(STATE / "dags-test.log", "a", encoding="utf-8") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        log(f"airflow dags test failed (exit {proc.returncode}); the last lines of {STATE / 'dags-test.log'}:")
        lines = (STATE / "dags-test.log").read_text(encoding="utf-8", errors="replace").splitlines()
        print("\n".join(lines[-60:]))
        raise SystemExit(1)
    log(f"airflow dags test {dag_id}: ok in {time.monotonic() - started:.0f}s")


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


SHOP_TOPICS = {"customers": "shop-customers", "orders": "shop-orders"}


def shop_rows() -> dict[str, set[tuple[int, str]]]:
    """``table -> {(id, updated_at)}``: every row version the shop database holds now."""
    con = sqlite3.connect(STATE / "shop.db")
    try:
        return {t: {(i, str(u)) for i, u in con.execute(f"select id, updated_at from {t}")} for t in SHOP_TOPICS}
    finally:
        con.close()


def kafka_rows(bootstrap: str) -> dict[str, dict[int, list[int]]]:
    """``table -> {id: [updated_at (epoch ms) of each record, in order]}``, read from the shop topics."""
    from confluent_kafka import Consumer, TopicPartition

    from airflow_copycat.runtime.kafka import admin_client, existing_topics, read_to_end

    topics = existing_topics(admin_client({"bootstrap.servers": bootstrap}))
    out: dict[str, dict[int, list[int]]] = {}
    for table, topic in SHOP_TOPICS.items():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-check", "enable.partition.eof": True})
        try:
            msgs = read_to_end(c, [TopicPartition(topic, p, 0) for p in range(topics.get(topic, 0))])
            versions: dict[int, list[int]] = {}
            for m in msgs:  # one id's versions share a key, so a partition: in the order written
                payload = json.loads(m.value())["payload"]
                versions.setdefault(payload["id"], []).append(payload["updated_at"])
            out[table] = versions
        finally:
            c.close()
    return out


def _ms(text: str) -> int:
    import datetime as dt

    t = dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
    return (t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(milliseconds=1)


def verify_import(bootstrap: str, before: dict, run: int) -> bool:
    """The newest version of every row in Kafka is the table's; this run copied exactly the row
    versions the database gained since ``before``."""
    run_id = last_run_id("copycat_jdbc_import")
    summary = finish_summaries(run_id, "copycat_jdbc_import").get("shop-orders")
    now, in_kafka = shop_rows(), kafka_rows(bootstrap)
    log(f"import run {run} ({run_id}):")
    ok = summary is not None
    if summary:
        show(summary)
    for table in SHOP_TOPICS:
        latest = {(i, v[-1]) for i, v in in_kafka[table].items()}
        expected = {(i, _ms(u)) for i, u in now[table]}
        copied = summary["topics"].get(SHOP_TOPICS[table], 0) if summary else -1
        new = len(now[table] - before.get(table, set()))
        log(f"  {table}: {len(now[table])} rows in the database, {len(latest)} in Kafka (newest versions); "
            f"this run copied {copied}, the database gained {new} new or changed rows")
        if latest != expected or copied != new:
            log(f"  MISMATCH in {table}: missing {sorted(expected - latest)[:5]}, extra {sorted(latest - expected)[:5]}")
            ok = False
    log("  verified: Kafka holds the newest version of every row, each run copied only the changes" if ok
        else "  NOT VERIFIED")
    return ok


def demo_import(env: dict, bootstrap: str) -> bool:
    """The hourly database import: two runs over a SQLite shop database, with rows added and updated between."""
    import datetime as dt

    sys.path.insert(0, str(ROOT / "scripts"))
    import shop_db

    engine = shop_db.engine_for(str(STATE / "shop.db"))
    hour = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    try:
        n = shop_db.fill(engine, hour - dt.timedelta(hours=3), 2, 200)
        log(f"shop database {STATE / 'shop.db'}: {n} orders in 2 hours")
        before: dict = {}
        run_dag(env, {}, "copycat_jdbc_import")
        ok = verify_import(bootstrap, before, 1)
        before = shop_rows()
        n = shop_db.fill(engine, hour - dt.timedelta(hours=1), 1, 150)
        _, orders = shop_db.tables()
        shop_db.ship_orders(engine, orders, [1, 2, 3, 4, 5], dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1))
        log(f"added {n} orders and a customer, shipped 5 earlier orders (their updated_at moved)")
        run_dag(env, {}, "copycat_jdbc_import")
        return verify_import(bootstrap, before, 2) and ok
    finally:
        engine.dispose()


def main() -> int:
    shutil.rmtree(STATE, ignore_errors=True)
    (STATE / "input").mkdir(parents=True)
    from airflow_copycat.testing.examples import ExampleServers

    started = time.monotonic()
    servers = ExampleServers(STATE).start()  # the Spark Connect server starts in the background
    broker, spark = servers.broker, servers.spark
    log(f"embedded Kafka-protocol broker on {broker.bootstrap}")
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(STATE / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        **servers.connections(STATE),  # kafka_default, spark_default (spark_connect), shop_db, COPYCAT_DEMO_DIR
    )
    try:
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log(f"Airflow home {STATE / 'airflow'} (SQLite) migrated ({time.monotonic() - started:.0f}s)")
        servers.wait()
        log(f"embedded Spark Connect server on {spark.url} ({time.monotonic() - started:.0f}s)")
        conf = {"input": str(STATE / "input" / "*.log"), "topic": TOPIC, "output": str(STATE / "output")}
        write_lines(0, 1000)
        log(f"wrote {FILES} log files x 1000 lines to {STATE / 'input'}")
        run_dag(env, conf)
        ok = verify(broker.bootstrap, FILES * 1000, 1)
        write_lines(1000, 250)
        log(f"appended 250 lines to each of the {FILES} files")
        run_dag(env, conf)
        ok = verify(broker.bootstrap, FILES * 250, 2) and ok
        ok = demo_import(env, broker.bootstrap) and ok
    finally:
        servers.stop()
    log("DEMO PASSED" if ok else "DEMO FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
