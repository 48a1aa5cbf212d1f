"""Object storage named by an Airflow ``aws`` connection (``s3://conn_id@bucket/prefix``), against moto's S3
server on loopback. Needs the amazon provider with s3fs and ``moto[server]``, which are no test dependency
(they pull some fifty packages and pin python-dateutil below 3): the test is skipped without them. Run it
in an environment that has them: ``pip install apache-airflow-providers-amazon s3fs 'moto[server]'``."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.log import redact

pytest.importorskip("airflow.providers.amazon", reason="needs apache-airflow-providers-amazon")
pytest.importorskip("s3fs", reason="needs s3fs")
moto_server = pytest.importorskip("moto.server", reason="needs moto[server]")

from airflow_copycat.hooks.storage import resolve_storage_connections  # noqa: E402
from airflow_copycat.runtime.connector_config import HIDDEN  # noqa: E402


@pytest.fixture
def s3(monkeypatch, unique):
    """A moto S3 server with a bucket, and an Airflow ``aws`` connection to it."""
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    key, secret = "AKIACOPYCATTEST", f"s3-secret-{unique}-value"
    bucket = f"lake-{unique}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                 region_name="us-east-1").create_bucket(Bucket=bucket)
    conn_id = f"aws_{unique}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "aws", "login": key, "password": secret,
        "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}))
    yield {"conn_id": conn_id, "bucket": bucket, "endpoint": endpoint, "key": key, "secret": secret}
    server.stop()


def _s3fs(s3):
    import s3fs

    return s3fs.S3FileSystem(key=s3["key"], secret=s3["secret"], endpoint_url=s3["endpoint"], skip_instance_cache=True)


def test_an_s3_url_naming_an_aws_connection_gets_its_credentials_as_plain_options(s3):
    out = resolve_storage_connections({"name": "x", "store.url": f"s3://{s3['conn_id']}@{s3['bucket']}/lake"})
    assert out["store.url"] == f"s3://{s3['bucket']}/lake"
    options = json.loads(out["store.options"])
    assert (options["key"], options["secret"], options["endpoint_url"]) == (s3["key"], s3["secret"], s3["endpoint"])
    assert options["client_kwargs"] == {"region_name": "us-east-1"} and "session" not in options
    assert redact(s3["secret"]) == "***"


def test_a_copy_job_writes_to_s3_through_an_aws_connection(make_copy_dag, run_dag, s3, tmp_path, unique):
    # Given local files and a copy job whose target names the aws connection (in process: the Spark path of
    # storage options is test_storage_connections.py's, with an sftp connection)
    src = tmp_path / "src"
    (src / "orders").mkdir(parents=True)
    (src / "orders" / "a.csv").write_text("id\n1\n")
    name = f"s3-copy-{unique}"
    config = {"name": name, "source.url": str(src), "target.url": f"s3://{s3['conn_id']}@{s3['bucket']}/mirror",
              "dataset.pattern": "*"}
    result = run_dag(make_copy_dag(f"s3_copy_{unique}", config, in_process=True))

    # Then the file is in the bucket, the groups name the plain URL, the secret is nowhere
    assert result.state == "success", result.log[-4000:]
    assert _s3fs(s3).cat(f"{s3['bucket']}/mirror/orders/a.csv") == b"id\n1\n"
    [group] = result.xcom(f"{name}.plan")
    task = group["tasks"][0]["config"]
    assert task["target.url"] == f"s3://{s3['bucket']}/mirror" and task["target.options"] == HIDDEN
    for _, _, _, value in result.xcoms():
        assert s3["secret"] not in json.dumps(value, default=str)
    assert s3["secret"] not in redact(result.log)
