"""The job interface (runtime/jobs.py): one object per kind of job, found by kind or by config."""

from __future__ import annotations

import pytest

from airflow_copycat.connect.secrets import HIDDEN, Scrubber
from airflow_copycat.runtime.jobs import CONNECTOR_JOB, COPY_JOB, job_for_config, job_of
from airflow_copycat.runtime.result import describe_group, scrub_errors


def test_each_kind_has_its_job_and_an_unknown_kind_is_named():
    assert job_of("source") is job_of("sink") is CONNECTOR_JOB and job_of("copy") is COPY_JOB
    with pytest.raises(ValueError, match="'mirror'"):
        job_of("mirror")


def test_a_config_says_which_job_it_is():
    assert job_for_config({"name": "c", "source.url": "/a", "target.url": "/b"}) is COPY_JOB
    assert job_for_config({"name": "c", "connector.class": "FileStreamSource", "file": "/a", "topic": "t"}) \
        is CONNECTOR_JOB


def test_the_jobs_differ_where_users_see_it():
    assert (CONNECTOR_JOB.unit, CONNECTOR_JOB.needs_kafka) == ("records", True)
    assert (COPY_JOB.unit, COPY_JOB.needs_kafka) == ("files", False)
    assert COPY_JOB.secret_keys({"encryption.key": "k" * 64, "name": "c"}) == {"encryption.key"}
    assert "connection.password" in CONNECTOR_JOB.secret_keys(
        {"name": "j", "connector.class": "JdbcSource", "connection.password": "pw"})
    copy_group = {"group": 1, "kind": "copy", "tasks": [{"units": 3, "bytes": 2048}, {"units": 2, "bytes": 0}]}
    assert describe_group(copy_group) == "group 1: 2 task(s), 5 work unit(s), 2.0 KB"
    line, failed = COPY_JOB.task_line({"task": 0, "status": "failed", "records": 1, "bytes": 10, "errors": 1,
                                       "duration_s": 0.5, "error": "1 file failed",
                                       "failed_files": [{"origin": "/a/x", "error": "gone"}]})
    assert line.startswith("task 0: failed, 1 file(s) copied") and failed == ["  /a/x: gone"]
    line, failed = CONNECTOR_JOB.task_line({"task": 2, "status": "ok", "records": 5, "bytes": 50, "errors": 0,
                                            "dead_lettered": 0, "duration_s": 1.25, "error": None})
    assert line == ("task 2: ok, 5 records, 50 bytes, 0 tolerated errors (0 dead-lettered), 0 filtered, 1.2s"
                    ) and failed == []


def test_every_error_text_of_a_task_result_is_scrubbed_a_copy_tasks_failed_files_too():
    """A copy task's result carries an error per failed file besides its own (what the run operator
    puts in XCom and the exception); each loses the secrets, nothing else changes."""
    secret = "S3SecretKey888"
    result = {"task": 0, "status": "failed", "error": f"OSError: signature of {secret} rejected",
              "failed_files": [{"origin": "s3://b/a.csv", "dataset": "a", "error": f"403 for key {secret}"}],
              "partitions": [{"partition": {"error": 1}, "records": 2}]}
    scrubbed = scrub_errors(result, Scrubber([secret]))
    assert scrubbed["error"] == f"OSError: signature of {HIDDEN} rejected"
    assert scrubbed["failed_files"] == [{"origin": "s3://b/a.csv", "dataset": "a", "error": f"403 for key {HIDDEN}"}]
    assert scrubbed["partitions"] == result["partitions"] and secret in result["error"]  # a copy
