"""OpenLineage of real runs: ``dag.test()`` runs with the OpenLineage provider's listener on, its events
written by OpenLineage's own file transport (``[openlineage] transport``, as a deployment sets it) and
read back. Each finish / publish task's COMPLETE event names the datasets the run read and wrote as
OpenLineage names them, with counts, schemas and column lineage, and the Asset events of the same run
carry the URIs that Airflow translates into those same datasets."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3

import pytest
import sqlalchemy as sa

from airflow_copycat.operators import lineage

pytestmark = pytest.mark.slow

FAKE_PASSWORD = "not-a-real-pw-4711"
"""Put into every connection of these tests (the test PostgreSQL trusts local users and ignores it):
it must appear in no OpenLineage event."""


@pytest.fixture
def openlineage_events(tmp_path, monkeypatch):
    """Turns OpenLineage on for this test: a file transport writing every event as a JSON line, emitted
    in a thread of the task process (``execute_in_thread``: no fork of this pytest process), and the
    provider's listener registered with the task SDK's listener manager (Airflow registers it from the
    provider's plugin when a process starts with OpenLineage configured; this process started without).
    Returns a function reading the events written so far."""
    from airflow.providers.openlineage import conf
    from airflow.providers.openlineage.plugins.listener import OpenLineageListener
    from airflow.sdk.listener import get_listener_manager

    path = tmp_path / "openlineage.jsonl"
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT",
                       json.dumps({"type": "file", "log_file_path": str(path), "append": True}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "copycat-tests")
    caches = [f for f in vars(conf).values() if callable(getattr(f, "cache_clear", None))]
    for f in caches:
        f.cache_clear()
    manager = get_listener_manager()  # when made now, it has just registered the provider's listener itself
    if not any(isinstance(p, OpenLineageListener) for p in manager.pm.get_plugins()):
        manager.add_listener(OpenLineageListener())

    def events() -> list[dict]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    events.text = lambda: path.read_text(encoding="utf-8") if path.exists() else ""
    yield events
    for plugin in manager.pm.get_plugins():
        if isinstance(plugin, OpenLineageListener):
            manager.pm.unregister(plugin)
    monkeypatch.undo()
    for f in caches:
        f.cache_clear()


def complete_event(events: list[dict], dag_id: str, task_id: str) -> dict:
    """The COMPLETE event of task ``task_id`` of DAG ``dag_id`` (job name ``<dag_id>.<task_id>``)."""
    found = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{dag_id}.{task_id}"]
    assert len(found) == 1, [(e["eventType"], e["job"]["name"]) for e in events]
    return found[0]


def names(datasets: list[dict]) -> set[tuple[str, str]]:
    return {(d["namespace"], d["name"]) for d in datasets}


def as_openlineage(uri: str) -> tuple[str, str]:
    """How the OpenLineage provider names the dataset of an Asset URI: the scheme's converter of an
    installed provider (here common.io's ``file``), else the provider forms of :mod:`lineage`."""
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    from airflow.sdk import Asset

    translated = translate_airflow_asset(Asset(uri=uri), None)
    if translated is not None:
        return translated.namespace, translated.name
    loc = lineage.from_asset_uri(uri)
    return loc.namespace, loc.name


def test_jdbc_import_into_kafka_then_export_into_sqlite_name_the_same_topic(
        make_dag, run_dag, spark_default, postgres_url, unique, test_worker_config, tmp_path, monkeypatch,
        openlineage_events, kafka_bootstrap):
    # Given a PostgreSQL table of 5 rows, reached through an Airflow connection that has a password
    url = sa.engine.make_url(postgres_url)
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_SHOP", json.dumps(
        {"conn_type": "postgres", "host": url.host, "port": url.port or 5432, "schema": url.database,
         "login": url.username, "password": FAKE_PASSWORD}))
    table = f"lineage_orders_{unique}"
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{table}" (id integer PRIMARY KEY, item text, qty integer)'))
        conn.execute(sa.text(f'INSERT INTO "{table}" SELECT i, \'item \' || i, i * 2 FROM generate_series(1, 5) i'))
    topic = f"lin-{unique}-{table}"
    try:
        source = make_dag(f"lineage_import_{unique}", {
            "name": f"import-{unique}", "connector.class": "JdbcSource", "airflow.conn.id": "lineage_shop",
            "mode": "incrementing", "incrementing.column.name": "id", "table.whitelist": table,
            "topic.prefix": f"lin-{unique}-"}, worker_config=test_worker_config)

        # When the import runs
        imported = run_dag(source)

        # Then its finish task's COMPLETE event reads the table and writes the topic, with 5 rows each
        assert imported.state == "success", imported.states()
        event = complete_event(openlineage_events(), source.dag_id, f"import-{unique}.finish")
        pg = (f"postgres://{url.host}:{url.port or 5432}", f"{url.database}.public.{table}")
        kafka = (f"kafka://{kafka_bootstrap.split(',')[0]}", topic)
        assert names(event["inputs"]) == {pg} and names(event["outputs"]) == {kafka}
        [table_in], [topic_out] = event["inputs"], event["outputs"]
        assert table_in["inputFacets"]["inputStatistics"]["rowCount"] == 5
        summary = imported.xcom(f"import-{unique}.finish")
        assert topic_out["outputFacets"]["outputStatistics"]["rowCount"] == 5
        assert topic_out["outputFacets"]["outputStatistics"]["size"] == summary["bytes"] > 0
        # And the table's schema, read from PostgreSQL, is the topic's, column for column
        fields = [(f["name"], f["type"]) for f in table_in["facets"]["schema"]["fields"]]
        assert fields == [("id", "INTEGER"), ("item", "TEXT"), ("qty", "INTEGER")]
        assert [(f["name"], f["type"]) for f in topic_out["facets"]["schema"]["fields"]] == fields
        lineage_of = topic_out["facets"]["columnLineage"]["fields"]
        assert {name: [(i["namespace"], i["name"], i["field"]) for i in f["inputFields"]]
                for name, f in lineage_of.items()} == {c: [(*pg, c)] for c, _ in fields}
        # And the Asset event names the same topic
        assert [as_openlineage(e["uri"]) for e in imported.asset_events()] == [kafka]

        # Given a DAG exporting that topic into a SQLite table
        db = tmp_path / "warehouse.db"
        sink = make_dag(f"lineage_export_{unique}", {
            "name": f"export-{unique}", "connector.class": "JdbcSink", "connection.url": f"sqlite:///{db}",
            "topics": topic, "insert.mode": "insert", "pk.mode": "none", "auto.create": "true",
            "table.name.format": "orders"}, worker_config=test_worker_config)

        # When it runs
        exported = run_dag(sink)

        # Then its COMPLETE event reads the topic the import wrote and writes the SQLite table, 5 rows
        assert exported.state == "success", exported.states()
        event = complete_event(openlineage_events(), sink.dag_id, f"export-{unique}.finish")
        sqlite_table = (f"sqlite://{db}", "orders")
        assert names(event["inputs"]) == {kafka} and names(event["outputs"]) == {sqlite_table}
        assert event["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 5
        [table_out] = event["outputs"]
        assert table_out["outputFacets"]["outputStatistics"]["rowCount"] == 5
        with sqlite3.connect(db) as conn:
            columns = [row[1] for row in conn.execute("PRAGMA table_info(orders)")]
        assert [f["name"] for f in table_out["facets"]["schema"]["fields"]] == columns
        assert set(columns) >= {"id", "item", "qty"}
        # And the Asset event is that table
        assert [as_openlineage(e["uri"]) for e in exported.asset_events()] == [sqlite_table]
        # And no event carries the password of the connection
        assert FAKE_PASSWORD not in openlineage_events.text()
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
        engine.dispose()


def test_file_into_kafka_then_kafka_into_files(make_dag, run_dag, unique, test_worker_config, tmp_path,
                                               openlineage_events, kafka_bootstrap):
    # Given a file of 4 lines, imported into a topic in process
    log_file = tmp_path / "app.log"
    log_file.write_text("".join(f"line {i}\n" for i in range(4)), encoding="utf-8")
    topic = f"lines-{unique}"
    source = make_dag(f"lineage_lines_{unique}", {
        "name": f"lines-{unique}", "connector.class": "FileStreamSource", "file": str(log_file), "topic": topic},
        in_process=True, worker_config=test_worker_config)
    out = tmp_path / "lake"
    sink = make_dag(f"lineage_lake_{unique}", {
        "name": f"lake-{unique}", "connector.class": "FilesSink", "topics": topic, "store.url": str(out),
        "format.class": "json", "flush.size": 100}, in_process=True, worker_config=test_worker_config)

    # When both run
    imported, exported = run_dag(source), run_dag(sink)

    # Then the import reads the file and writes the topic
    assert imported.state == "success", imported.states()
    assert exported.state == "success", exported.log[-3000:]
    kafka = (f"kafka://{kafka_bootstrap.split(',')[0]}", topic)
    event = complete_event(openlineage_events(), source.dag_id, f"lines-{unique}.finish")
    assert names(event["inputs"]) == {("file", str(log_file))} and names(event["outputs"]) == {kafka}
    assert event["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 4
    assert event["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 4
    # And the export reads the topic and writes the topic's directory under the store, as its Asset event says
    event = complete_event(openlineage_events(), sink.dag_id, f"lake-{unique}.finish")
    directory = ("file", f"{out}/topics/{topic}")
    assert names(event["inputs"]) == {kafka} and names(event["outputs"]) == {directory}
    assert event["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 4
    assert [as_openlineage(e["uri"]) for e in exported.asset_events()] == [directory]
    assert [as_openlineage(e["uri"]) for e in imported.asset_events()] == [kafka]


def test_copy_job_reads_source_datasets_and_writes_target_datasets(make_copy_dag, run_dag, tmp_path, unique,
                                                                   openlineage_events):
    # Given two datasets of 2 and 1 files, copied in process
    src, dst = tmp_path / "src", tmp_path / "dst"
    for name, files in (("orders", ("a.csv", "b.csv")), ("users", ("u.csv",))):
        (src / name).mkdir(parents=True)
        for f in files:
            (src / name / f).write_text(f"id\n{f}\n")
    name = f"mirror-{unique}"
    dag = make_copy_dag(f"lineage_copy_{unique}", {"name": name, "source.url": str(src), "target.url": str(dst),
                                                   "dataset.pattern": "*"}, in_process=True)

    # When it runs
    result = run_dag(dag)

    # Then the publish task's COMPLETE event reads each source dataset and writes each target dataset
    assert result.state == "success", result.log[-3000:]
    event = complete_event(openlineage_events(), dag.dag_id, f"{name}.publish")
    assert names(event["inputs"]) == {("file", f"{src}/orders"), ("file", f"{src}/users")}
    assert names(event["outputs"]) == {("file", f"{dst}/orders"), ("file", f"{dst}/users")}
    stats = {d["name"]: d["outputFacets"]["outputStatistics"] for d in event["outputs"]}
    assert stats[f"{dst}/orders"]["fileCount"] == 2 and stats[f"{dst}/users"]["fileCount"] == 1
    assert stats[f"{dst}/orders"]["size"] == sum(os.path.getsize(p) for p in (dst / "orders").glob("*.csv"))
    # And the Asset events are the same datasets, as Airflow translates them (common.io's file converter)
    assert {as_openlineage(e["uri"]) for e in result.asset_events()} == names(event["outputs"])
    assert {e["uri"] for e in result.asset_events()} == {f"file://{dst}/orders", f"file://{dst}/users"}


def test_a_failed_copy_reports_the_datasets_it_published_before_failing(make_copy_dag, run_dag, tmp_path, unique,
                                                                       openlineage_events):
    # Given two datasets, one holding a corrupt gzip
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "good").mkdir(parents=True)
    (src / "good" / "g.txt.gz").write_bytes(gzip.compress(b"fine\n"))
    (src / "bad").mkdir()
    (src / "bad" / "b.txt.gz").write_bytes(gzip.compress(b"fine\n")[:-6] + b"garbage")
    name = f"corrupt-{unique}"
    dag = make_copy_dag(f"lineage_corrupt_{unique}", {"name": name, "source.url": str(src), "target.url": str(dst),
                                                      "dataset.pattern": "*", "converters": "decompress"},
                        in_process=True)

    # When it runs and its publish task fails
    result = run_dag(dag)

    # Then the publish task's FAIL event names the dataset that was published, and only that one
    assert result.state == "failed"
    [event] = [e for e in openlineage_events()
               if e["eventType"] == "FAIL" and e["job"]["name"] == f"{dag.dag_id}.{name}.publish"]
    assert names(event["inputs"]) == {("file", f"{src}/good")}
    assert names(event["outputs"]) == {("file", f"{dst}/good")}
    assert event["outputs"][0]["outputFacets"]["outputStatistics"]["size"] == len(b"fine\n")
