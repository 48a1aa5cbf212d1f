"""How :mod:`airflow_copycat.operators.lineage` names datasets: OpenLineage's naming conventions, the
Asset URIs of Airflow's providers, and never a credential."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from airflow_copycat.operators.finish import destinations
from airflow_copycat.operators.lineage import (
    Location,
    connector_datasets,
    copy_datasets,
    database_table,
    file_location,
    from_asset_uri,
    kafka_topic,
)

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(("servers", "namespace"), [
    ("broker1:9092,broker2:9093", "kafka://broker1:9092"),
    (["b1.example.com:9094", "b2:9094"], "kafka://b1.example.com:9094"),
    (" SASL_SSL://secure.example:9096 , PLAINTEXT://other:9092", "kafka://secure.example:9096"),
    ("onlyhost", "kafka://onlyhost:9092"),
    ("[::1]:19092", "kafka://[::1]:19092"),
    (None, "kafka://localhost:9092"),
])
def test_a_topic_is_named_by_the_first_bootstrap_server(servers, namespace):
    assert kafka_topic(servers, "orders") == Location(namespace, "orders", f"{namespace}/orders")


@pytest.mark.parametrize(("url", "table", "expected"), [
    (f"postgresql+psycopg://app:{SECRET}@db.example:5433/shop?sslmode=require&password={SECRET}", "orders",
     Location("postgres://db.example:5433", "shop.public.orders", "postgres://db.example:5433/shop/public/orders")),
    (f"jdbc:postgresql://db.example/shop?user=app&password={SECRET}", "sales.orders",
     Location("postgres://db.example:5432", "shop.sales.orders", "postgres://db.example:5432/shop/sales/orders")),
    ("postgresql://app:[hidden]@10.0.0.5/shop", "shop.audit.log",
     Location("postgres://10.0.0.5:5432", "shop.audit.log", "postgres://10.0.0.5:5432/shop/audit/log")),
    (f"mysql+pymysql://root:{SECRET}@mysql.example:3307/test", "orders",
     Location("mysql://mysql.example:3307", "test.orders", "mysql://mysql.example:3307/test/orders")),
    (f"jdbc:mariadb://maria.example/shop?password={SECRET}", "crm.customers",
     Location("mysql://maria.example:3306", "crm.customers", "mysql://maria.example:3306/crm/customers")),
    ("sqlite:////var/data/shop.db", "orders",
     Location("sqlite:///var/data/shop.db", "orders", "sqlite:///var/data/shop.db/orders")),
    ("sqlite:////var/data/shop.db", "main.orders",
     Location("sqlite:///var/data/shop.db", "orders", "sqlite:///var/data/shop.db/orders")),
])
def test_a_table_is_named_by_host_port_and_database_without_credentials(url, table, expected):
    got = database_table(url, table)
    assert got == expected
    assert SECRET not in repr(got) and "app" not in got.namespace and "root" not in got.namespace


def test_a_relative_sqlite_file_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert database_table("sqlite:///shop.db", "orders").namespace == f"sqlite://{tmp_path}/shop.db"


@pytest.mark.parametrize("url", [None, "", "[hidden]", "sqlite://", "not a url at all"])
def test_no_table_name_without_a_usable_url(url):
    assert database_table(url, "orders") is None


@pytest.mark.parametrize(("url", "expected"), [
    ("/data/out/", Location("file", "/data/out", "file:///data/out")),
    ("file:///data/out", Location("file", "/data/out", "file:///data/out")),
    ("file://fileserver/share/x", Location("file://fileserver", "/share/x", "file://fileserver/share/x")),
    (f"s3://key:{SECRET}@bucket/landing/orders/",
     Location("s3://bucket", "landing/orders", "s3://bucket/landing/orders")),
    ("s3a://bucket/k", Location("s3://bucket", "k", "s3://bucket/k")),
    ("gcs://bucket/k", Location("gs://bucket", "k", "gs://bucket/k")),
    ("hdfs://namenode:8020/data/orders", Location("hdfs://namenode:8020", "/data/orders",
                                                  "hdfs://namenode:8020/data/orders")),
    (f"sftp://me:{SECRET}@host:22/in?password={SECRET}", Location("sftp://host:22", "/in", "sftp://host:22/in")),
])
def test_files_and_directories_are_named_by_filesystem_and_path(url, expected):
    assert file_location(url) == expected


def test_a_relative_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert file_location("out/x") == Location("file", f"{tmp_path}/out/x", f"file://{tmp_path}/out/x")


@pytest.mark.parametrize("loc", [
    kafka_topic("b:1", "t"), database_table("postgresql://h:1/db", "s.t"), database_table("mysql://h/db", "t"),
    database_table("sqlite:////x/y.db", "t"), file_location("/a/b"), file_location("s3://b/k/x"),
    file_location("hdfs://nn:8020/p"),
])
def test_an_asset_uri_names_its_dataset_again(loc):
    assert from_asset_uri(loc.uri) == loc


def test_file_asset_uris_translate_as_the_openlineage_provider_does():
    from airflow.providers.common.io.assets.file import convert_asset_to_openlineage
    from airflow.sdk import Asset

    for loc in (file_location("/data/out"), file_location("file://host/share")):
        ds = convert_asset_to_openlineage(Asset(uri=loc.uri), None)
        assert (ds.namespace, ds.name) == (loc.namespace, loc.name)


def _sink_plan(cls: str, **config) -> dict:
    return {"connector": "export", "kind": "sink", "bootstrap_servers": "k1:9092,k2:9092",
            "config": {"name": "export", "connector.class": cls, **config}}


def _summary(topics: dict, tables: dict | None = None, partitions: list | None = None) -> dict:
    return {"topics": topics, "tables": tables or {}, "partitions": partitions or [], "bytes": 100}


def test_a_jdbc_sink_reads_its_topics_and_writes_its_tables():
    plan = _sink_plan("JdbcSink", **{"connection.url": f"postgresql://app:{SECRET}@pg:5432/dw"})
    summary = _summary({"orders": 3}, {"orders": {"inserted": 2, "updated": 1, "deleted": 4}})
    inputs, outputs = connector_datasets(plan, summary)
    assert [(d.location.namespace, d.location.name, d.rows) for d in inputs] == [("kafka://k1:9092", "orders", 3)]
    assert [(d.location.uri, d.rows) for d in outputs] == [("postgres://pg:5432/dw/public/orders", 3)]
    assert destinations(plan, summary) == {"postgres://pg:5432/dw/public/orders": {
        "connector": "export", "table": "orders", "inserted": 2, "updated": 1, "deleted": 4}}


def test_a_table_of_a_database_the_plan_hides_is_announced_under_the_connector_and_not_in_lineage():
    plan = _sink_plan("JdbcSink", **{"connection.url": "[hidden]"})
    summary = _summary({"orders": 3}, {"orders": {"inserted": 3}})
    assert connector_datasets(plan, summary)[1] == []
    assert destinations(plan, summary) == {"copycat://export/orders": {
        "connector": "export", "table": "orders", "inserted": 3}}


def test_a_files_sink_writes_the_topic_directory_under_its_store(tmp_path):
    plan = _sink_plan("FilesSink", **{"store.url": str(tmp_path), "topics": "orders"})
    summary = _summary({"orders": 5, "empty": 0}, partitions=[
        {"partition": ["orders", 0], "offset_before": 0, "offset_after": 5, "records": 5, "bytes": 70}])
    _, outputs = connector_datasets(plan, summary)
    assert [(d.location.namespace, d.location.name, d.rows, d.bytes) for d in outputs] == [
        ("file", f"{tmp_path}/topics/orders", 5, 70)]
    assert destinations(plan, summary) == {f"file://{tmp_path}/topics/orders": {
        "connector": "export", "topic": "orders", "records": 5, "offsets": {"0": [0, 5]}}}


def test_a_copy_job_names_published_datasets_under_source_and_target():
    plan = {"config": {"source.url": "hdfs://nn:8020/warehouse", "target.url": f"s3://k:{SECRET}@lake/copy"}}
    summary = {"target": "s3://k:[hidden]@lake/copy", "datasets": [
        {"dataset": "orders", "status": "published", "published_files": 2, "published_bytes": 10},
        {"dataset": "broken", "status": "failed"}]}
    inputs, outputs = copy_datasets(plan, summary)
    assert [(d.location.namespace, d.location.name, d.files) for d in inputs] == [
        ("hdfs://nn:8020", "/warehouse/orders", 2)]
    assert [(d.location.uri, d.files, d.bytes) for d in outputs] == [("s3://lake/copy/orders", 2, 10)]


def test_without_openlineage_imported_nothing_of_it_is_loaded():
    # the operators import OpenLineage only inside the methods the OpenLineage listener calls
    code = ("import sys; import airflow_copycat.operators.finish, airflow_copycat.operators.copy, "
            "airflow_copycat.operators.run, airflow_copycat.operators.lineage; "
            "print(sorted(m for m in sys.modules if m.startswith(('openlineage', 'airflow.providers.openlineage.')) "
            "and m != 'airflow.providers.openlineage.get_provider_info'))")  # the providers manager reads that one
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "AIRFLOW__OPENLINEAGE__DISABLED": "True"})
    assert out.stdout.strip().splitlines()[-1] == "[]"
