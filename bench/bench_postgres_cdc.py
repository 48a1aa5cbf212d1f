"""PostgreSQL change data capture -> Kafka: the CDC source against a raw producer of the same bytes,
and the WAL its slot retains after a run that caught up.

Input: a PostgreSQL with ``wal_level=logical`` this benchmark starts itself
(:class:`airflow_copycat.testing.postgres_logical.LogicalPostgres`: ``initdb`` in a temporary
directory, ``fsync=off``; or the server ``COPYCAT_TEST_POSTGRES_CDC_URL`` names), a table
``bench_cdc`` shaped like the JDBC bench's (bigint primary key, timestamptz, text, int,
numeric(12,2), real, a nullable text; ~150 B per row), default replica identity (the primary key).
Each connector variant gets its own slot, created (``snapshot.mode=no_data``, an untimed first
run) before any change is made, so every variant reads exactly the same changes from the WAL.
Then ``--rows`` row changes (default 1,000,000) are made in transactions of ``--tx-rows``
(default 10,000) changes: per transaction 50 % inserts of new rows, 30 % updates and 20 % deletes
of rows the previous transaction inserted (the first transaction updates and deletes its own).
The changes are made untimed, before any connector run.

Figures (Kafka: the embedded broker, or ``KAFKA_BOOTSTRAP``; every topic created with
``--partitions`` partitions, default 1: a table's change stream is one ordered stream, which is
what Debezium's auto-created topics have):

* ``cdc_<variant>``: PostgresCdcSource (``io.debezium.connector.postgresql.PostgresConnector``,
  ``tombstones.on.delete`` at its default ``true``, so each delete is followed by a tombstone:
  ``rows + deletes`` messages), planned with ``make_plan`` and run in this process with
  ``executor.run_group`` (what a Spark task runs); timed: ``run_group`` (read the slot up to the
  position current when the run starts, decode pgoutput, build Debezium envelopes, convert,
  produce, commit offsets, confirm the slot). Figures in row changes/s. Variants:

  - ``json_schemas``: key and value JsonConverter with ``schemas.enable=true`` (Kafka Connect's
    default worker; what Debezium's JSON consumers read);
  - ``json``: ``schemas.enable=false``;
  - ``avro``: the value through the AvroConverter and the stand-in schema registry (key JSON
    without schemas) -- skipped with ``--skip-avro``.

* ``raw_producer_<variant>`` (the baseline of each variant): the connector's topic read back
  untimed into memory (every key and value byte, in order), then timed: a plain confluent-kafka
  program producing exactly those key/value pairs (tombstones included) to a fresh topic with the
  settings a hand-written pipeline would use -- ``WorkerConfig.producer_config()`` (idempotent,
  acks=all, linger.ms=20, murmur2_random), delivery reports for failures only, ``poll(0)`` every
  1,000 records, ``flush`` (``_common.produce_all``). Verified identical to the connector's topic
  (count and order-independent checksum of key+value).

* ``pgoutput_decode_bound_<variant>`` (a bound, not a contender): PostgreSQL decoding the same changes
  of a slot of its own (created with the others, before the changes) through pgoutput, counted in the
  server (``SELECT count(*) FROM pg_logical_slot_peek_binary_changes(...)``, timed), against each
  variant's raw producer: whatever a connector does with the changes, it cannot read them faster than
  the server decodes them, so this ratio bounds the variant's.

* ``cdc_wal_unconfirmed_after_run``: ``pg_current_wal_lsn() - confirmed_flush_lsn`` of the
  ``json_schemas`` variant's slot right after its run (which caught up: it read up to the
  position current when it started and nothing was written since), against the 1 MB target.
  ``cdc_wal_retained_after_run``: ``pg_current_wal_lsn() - restart_lsn`` of the same slot, the
  WAL PostgreSQL actually keeps for it. PostgreSQL moves ``restart_lsn`` only past a
  running-transactions record (logged at checkpoints and every 15 s on a server that writes),
  so right after a run it may lag the confirmation; ``cdc_wal_retained_after_next_run`` is the
  same after a ``CHECKPOINT`` and the next (idle, caught-up) run with ``heartbeat.interval.ms``,
  what the slot keeps between scheduled runs (``cdc_wal_unconfirmed_after_next_run`` likewise). WAL
  written while a run runs (by other sessions, or autovacuum cleaning up after the changes) lies
  beyond that run's bound: it counts in ``cdc_wal_unconfirmed_after_run`` and is confirmed by the
  next run (stderr shows the bound and the table's last autovacuum).

Verification of every run: the task succeeded; the topic holds exactly ``rows + deletes``
messages: ``inserts`` with op ``c``, ``updates`` with op ``u``, ``deletes`` with op ``d`` and
``deletes`` tombstones (JSON decoded per message; Avro decoded with fastavro and the registered
schema); the run's counts per table (the task's ``metrics``) say the same; the raw producer's
topic holds the same records. The default run (1M row changes, three variants) takes about
17 minutes on the shared 2-core machine, most of it the three connector runs (3-5 min each);
``--skip-avro --skip-schemaless`` keeps the JSON-with-schemas run and the WAL figures (~7 min).
``--profile`` runs each connector run under cProfile (top functions on stderr; the figures then
include the profiler's overhead).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psycopg
from _common import create_topic, delete_topic, fail, kafka, note, produce_all, profiled, report, timed, uid
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.kafka import read_to_end
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig
from airflow_copycat.testing.postgres_logical import LogicalPostgres, external_url

DEFAULT_ROWS = 1_000_000
TABLE = "bench_cdc"
TARGET_WAL = 1 << 20  # the target: under 1 MB retained after a run that caught up
JSON = "org.apache.kafka.connect.json.JsonConverter"
AVRO = "io.confluent.connect.avro.AvroConverter"


# ------------------------------------------------------------------ the database


def make_table(conn) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.execute(f"""CREATE TABLE {TABLE} (
        id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, customer text NOT NULL, email text NOT NULL,
        category int NOT NULL, qty int NOT NULL, amount numeric(12,2) NOT NULL, score real NOT NULL,
        status text NOT NULL, note text)""")


def change_plan(rows: int, tx_rows: int) -> tuple[tuple[int, int], list]:
    """``(seed, plan)``: ``seed`` the id range inserted before the slots exist (not captured); ``plan``
    per transaction the id ranges ``(first, last)`` it inserts, updates and deletes (inclusive; empty
    when ``first > last``): half the changes insert new ids, 30 % update and 20 % delete ids the
    previous transaction inserted (the first transaction: the seed rows). Exactly ``rows`` changes."""
    plan, left = [], rows
    prev = seed = (1, (min(tx_rows, rows) + 1) // 2)
    next_id = seed[1] + 1
    while left > 0:
        n = min(tx_rows, left)
        ins = (n + 1) // 2
        upd = (n - ins) * 3 // 5
        dele = n - ins - upd
        inserted = (next_id, next_id + ins - 1)
        next_id += ins
        plan.append((inserted, (prev[0], prev[0] + upd - 1), (prev[0] + upd, prev[0] + upd + dele - 1)))
        prev, left = inserted, left - n
    return seed, plan


def insert_rows(conn, first: int, last: int) -> None:
    conn.execute(
        f"INSERT INTO {TABLE} SELECT g, clock_timestamp(), 'customer_' || (g %% 50000), "
        f"'user' || g || '@example.com', g %% 50, g %% 1000, (g %% 100000) / 100.0, (g %% 97) / 97.0, "
        f"'NEW', CASE WHEN g %% 3 = 0 THEN NULL ELSE 'note \"' || g || '\"' END "
        f"FROM generate_series(%s::bigint, %s::bigint) g", (first, last))


def make_changes(conn, plan) -> dict[str, int]:
    """Run ``plan``, one transaction per entry; returns the counts of each operation."""
    counts = {"c": 0, "u": 0, "d": 0}
    for (i0, i1), (u0, u1), (d0, d1) in plan:
        with conn.transaction():
            insert_rows(conn, i0, i1)
            if u1 >= u0:
                conn.execute(f"UPDATE {TABLE} SET qty = qty + 1, status = 'SHIPPED', updated_at = clock_timestamp() "
                             f"WHERE id BETWEEN %s AND %s", (u0, u1))
            if d1 >= d0:
                conn.execute(f"DELETE FROM {TABLE} WHERE id BETWEEN %s AND %s", (d0, d1))
        counts["c"] += i1 - i0 + 1
        counts["u"] += max(0, u1 - u0 + 1)
        counts["d"] += max(0, d1 - d0 + 1)
    return counts


def slot_lag(conn, slot: str) -> dict[str, int]:
    row = conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, "
        "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, confirmed_flush_lsn::text, restart_lsn::text, "
        "pg_current_wal_lsn()::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        fail(f"replication slot {slot} does not exist after the run")
    return {"unconfirmed": int(row[0]), "retained": int(row[1]), "confirmed_flush_lsn": row[2],
            "restart_lsn": row[3], "current_lsn": row[4]}


# ------------------------------------------------------------------ Kafka read-back


def checksum_add(total: int, k: bytes | None, v: bytes | None) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(len(k or b"").to_bytes(4, "big"))
    h.update(k or b"")
    h.update(b"\x00" if v is None else b"\x01" + v)
    return (total + int.from_bytes(h.digest(), "big")) % (1 << 64)


def read_back(bootstrap: str, topic: str, partitions: int, keep: bool = False):
    """``(count, checksum, pairs)`` of ``topic`` from the beginning to the end of every partition;
    ``pairs`` (every ``(key, value)`` in partition order) only with ``keep``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{uid()}",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    n, total, pairs = 0, 0, []
    try:
        for m in read_to_end(c, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)],
                             timeout_s=900, batch=10000):
            k, v = m.key(), m.value()
            n += 1
            total = checksum_add(total, k, v)
            if keep:
                pairs.append((k, v))
    finally:
        c.close()
    return n, total, pairs


def count_ops(pairs, decode) -> dict[str, int]:
    """Operations of the messages (``tombstone`` for null values); ``decode(value) -> op``."""
    counts: dict[str, int] = {}
    for _, v in pairs:
        op = "tombstone" if v is None else decode(v)
        counts[op] = counts.get(op, 0) + 1
    return counts


def json_op(schemas: bool):
    loads = json.loads
    if schemas:
        return lambda v: loads(v)["payload"]["op"]
    return lambda v: loads(v)["op"]


def avro_op(registry_url: str):
    """Decode Confluent-framed Avro values with fastavro and the schema the registry holds for their id."""
    import io

    import fastavro
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client, parsed = SchemaRegistryClient({"url": registry_url}), {}

    def op(v: bytes) -> str:
        magic, schema_id = struct.unpack(">bI", v[:5])
        if magic != 0:
            fail(f"an Avro value without the Confluent magic byte: {v[:16]!r}")
        schema = parsed.get(schema_id)
        if schema is None:
            schema = parsed[schema_id] = fastavro.parse_schema(json.loads(client.get_schema(schema_id).schema_str))
        return fastavro.schemaless_reader(io.BytesIO(v[5:]), schema)["op"]

    return op


# ------------------------------------------------------------------ the connector


def connector_config(name: str, db: dict, variant: str, registry_url: str | None, **extra) -> dict:
    config = {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": db["host"], "database.port": str(db["port"]), "database.user": db["user"],
        "database.dbname": db["dbname"],
        "topic.prefix": name.replace("-", "_"),
        "slot.name": name.replace("-", "_"),
        "publication.name": "bench_cdc_pub",
        "publication.autocreate.mode": "filtered",
        "table.include.list": f"public\\.{TABLE}",
        "snapshot.mode": "no_data",
        "max.batch.size": 10000,
        "key.converter": JSON, "value.converter": JSON,
        "key.converter.schemas.enable": str(variant == "json_schemas").lower(),
        "value.converter.schemas.enable": str(variant == "json_schemas").lower(),
    }
    if variant == "avro":
        config.update({"value.converter": AVRO, "value.converter.schema.registry.url": registry_url})
        del config["value.converter.schemas.enable"]
    config.update(extra)
    return config


def check_result(what: str, result: dict, expect_records: int | None) -> dict:
    if result["status"] != "ok":
        fail(f"{what}: the run failed: {[t.get('error') for t in result['tasks']]}")
    if expect_records is not None and result["records"] != expect_records:
        fail(f"{what}: the run reported {result['records']} records, expected {expect_records}")
    return result["tasks"][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="row changes (default 1,000,000)")
    ap.add_argument("--tx-rows", type=int, default=10_000, help="row changes per transaction (default 10,000)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--skip-avro", action="store_true")
    ap.add_argument("--skip-schemaless", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="run each connector run under cProfile and print its top functions to stderr (the "
                         "figures then include the profiler's overhead)")
    args = ap.parse_args()
    n, parts = args.rows, args.partitions
    variants = ["json_schemas"] + ([] if args.skip_schemaless else ["json"]) + ([] if args.skip_avro else ["avro"])

    with contextlib.ExitStack() as stack:
        url = external_url()
        if url is None:
            with timed() as t:
                pg = stack.enter_context(LogicalPostgres())
            url = pg.url
            note(f"PostgreSQL with wal_level=logical started in {t[0]:.1f} s at {url}")
        else:
            note(f"using PostgreSQL at {url} (COPYCAT_TEST_POSTGRES_CDC_URL)")
        bootstrap = stack.enter_context(kafka())
        registry_url = None
        if "avro" in variants:
            from tests.support.schema_registry import SchemaRegistryServer

            registry_url = stack.enter_context(SchemaRegistryServer()).url
        run_id = uid()
        dbname = f"bench_cdc_{run_id}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{dbname}"')
        info = psycopg.conninfo.conninfo_to_dict(url)
        db = {"host": info.get("host", "127.0.0.1"), "port": info.get("port", 5432),
              "user": info.get("user", "postgres"), "dbname": dbname}
        conn = psycopg.connect(**db, autocommit=True)
        stack.callback(conn.close)
        make_table(conn)
        seed, changes = change_plan(n, args.tx_rows)
        insert_rows(conn, *seed)  # the rows the first transaction updates and deletes; before any slot
        worker_props = {"bootstrap.servers": bootstrap, "offset.storage.topic": f"bench-offsets-{run_id}",
                        "offset.storage.partitions": 1}
        worker = WorkerConfig(worker_props, env={})

        # ---- one slot per variant, before any change (the first run of each: no snapshot, nothing to read)
        configs = {}
        for variant in variants:
            name = f"bench-cdc-{variant.replace('_', '-')}-{run_id}"
            configs[variant] = config = connector_config(name, db, variant, registry_url)
            topic = f"{config['topic.prefix']}.public.{TABLE}"
            create_topic(bootstrap, topic, parts)
            check_result(f"{variant} (creating the slot)", run_group(make_plan(config, worker)["groups"][0],
                                                                     worker_props), 0)

        # ---- a slot of no connector, for the bound: PostgreSQL's own decoding of the same changes
        bound_slot = f"bench_cdc_bound_{run_id}"
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (bound_slot,))

        # ---- the changes
        with timed() as t:
            expected = make_changes(conn, changes)
        wal = conn.execute("SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) "
                           "FROM pg_replication_slots WHERE slot_name = %s",
                           (configs[variants[0]]["slot.name"],)).fetchone()[0]
        note(f"made {n} row changes {expected} in {t[0]:.1f} s (untimed), {wal} of WAL")
        want = {"c": expected["c"], "u": expected["u"], "d": expected["d"], "tombstone": expected["d"]}
        messages = n + expected["d"]
        producer_cfg = worker.producer_config()
        figures = []

        publication = configs[variants[0]].get("publication.name", "dbz_publication")
        with timed() as t_decode:
            decoded = conn.execute("SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                                   "'proto_version', '1', 'publication_names', %s)",
                                   (bound_slot, publication)).fetchone()[0]
        conn.execute("SELECT pg_drop_replication_slot(%s)", (bound_slot,))
        note(f"PostgreSQL decoded the {n} row changes into {decoded} pgoutput messages in {t_decode[0]:.2f} s, "
             "counted in the server: no reader of this slot can be faster")

        for variant in variants:
            config = configs[variant]
            topic = f"{config['topic.prefix']}.public.{TABLE}"
            plan = make_plan(config, worker)
            with timed() as t_cdc:
                if args.profile:
                    result = profiled(lambda: run_group(plan["groups"][0], worker_props), f"cdc {variant}")
                else:
                    result = run_group(plan["groups"][0], worker_props)
            task = check_result(variant, result, None)
            note(f"cdc {variant}: {t_cdc[0]:.2f} s for {n} row changes ({messages} messages); the run reported "
                 f"{result['records']} records, topics {task['topics']}")
            counts = (task.get("metrics") or {}).get("tables", {}).get(f"public.{TABLE}")
            if counts is not None and counts != {"inserted": want["c"], "updated": want["u"], "deleted": want["d"]}:
                fail(f"{variant}: the run counted {counts}, the database made {expected}")
            if counts is None:
                note(f"{variant}: the task result carries no per-table counts (metrics); the topic is checked instead")
            if variant == "json_schemas":
                lag = slot_lag(conn, config["slot.name"])
                vacuum = conn.execute("SELECT last_autovacuum, last_autoanalyze FROM pg_stat_user_tables "
                                      "WHERE relname = %s", (TABLE,)).fetchone()
                note(f"slot {config['slot.name']} after the run: {lag}; the run's bound "
                     f"{(task.get('metrics') or {}).get('bound_lsn')} (WAL after it was written while the run ran; "
                     f"last autovacuum/autoanalyze of {TABLE}: {vacuum})")

            # verification, and the baseline's payload: the connector's own bytes
            with timed() as t:
                count, total, pairs = read_back(bootstrap, topic, parts, keep=True)
            size = sum(len(k or b"") + len(v or b"") for k, v in pairs)
            note(f"{variant}: read back {count} messages, {size / max(count, 1):.0f} B/message, in {t[0]:.1f} s")
            ops = count_ops(pairs, avro_op(registry_url) if variant == "avro" else json_op(variant == "json_schemas"))
            if count != messages:
                fail(f"{variant}: {topic} holds {count} messages {ops}, expected {messages} ({n} changes + "
                     f"{expected['d']} tombstones)")
            if ops != want:
                fail(f"{variant}: {topic} holds operations {ops}, the database made {want}")
            note(f"{variant}: verified: {ops}")

            delete_topic(bootstrap, topic)  # the broker keeps its topics in memory: one at a time
            raw_topic = f"bench-cdc-raw-{variant}-{run_id}"
            create_topic(bootstrap, raw_topic, parts)
            with timed() as t_raw:
                produce_all(producer_cfg, raw_topic, pairs)
            del pairs
            note(f"raw producer {variant}: {t_raw[0]:.2f} s")
            raw_count, raw_total, _ = read_back(bootstrap, raw_topic, parts)
            if raw_count != count or raw_total != total:
                fail(f"{raw_topic}: {raw_count} messages (expected {count}), checksum match {raw_total == total}")
            delete_topic(bootstrap, raw_topic)
            figures.append((variant, n / t_cdc[0], n / t_raw[0]))

            if variant == "json_schemas":
                # the next scheduled run: nothing new, a checkpoint logged a running-transactions record
                conn.execute("CHECKPOINT")
                again = run_group(make_plan(dict(config, **{"heartbeat.interval.ms": 1000}), worker)["groups"][0],
                                  worker_props)
                check_result(f"{variant} (the next, idle run)", again, None)
                if again["records"] > 1:  # at most the heartbeat
                    fail(f"the idle run after a caught-up run sent {again['records']} records")
                lag_next = slot_lag(conn, config["slot.name"])
                note(f"slot {config['slot.name']} after the next, idle run: {lag_next}")

        for variant, cdc, raw in figures:
            report(f"raw_producer_{variant}", raw, "changes/s", 1.0, "itself")
            report(f"cdc_{variant}", cdc, "changes/s", cdc / raw, f"raw_producer_{variant}")
        for variant, _, raw in figures:  # the bound each variant's ratio has, whatever the connector does
            report(f"pgoutput_decode_bound_{variant}", n / t_decode[0], "changes/s", n / t_decode[0] / raw,
                   f"raw_producer_{variant}")
        if "json_schemas" in variants:
            report("cdc_wal_unconfirmed_after_run", lag["unconfirmed"], "B", lag["unconfirmed"] / TARGET_WAL,
                   "the 1 MB target")
            report("cdc_wal_retained_after_run", lag["retained"], "B", lag["retained"] / TARGET_WAL,
                   "the 1 MB target")
            report("cdc_wal_unconfirmed_after_next_run", lag_next["unconfirmed"], "B",
                   lag_next["unconfirmed"] / TARGET_WAL, "the 1 MB target")
            report("cdc_wal_retained_after_next_run", lag_next["retained"], "B", lag_next["retained"] / TARGET_WAL,
                   "the 1 MB target")

        for variant in variants:  # the slots keep WAL until dropped: leave none behind on an external server
            conn.execute("SELECT pg_drop_replication_slot(%s)", (configs[variant]["slot.name"],))
        conn.close()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
