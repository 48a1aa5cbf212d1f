"""Task groups over Spark Connect: the same DataFrame job as spark-submit, sent from this process to the
session's one local Spark Connect server (``spark_connect`` fixture), records checked in the real broker."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from airflow_copycat.runtime import copy_job
from airflow_copycat.runtime.connector_config import load_connector_config
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.submit import package_zip
from airflow_copycat.runtime.worker import WorkerConfig
from tests.support.log_files import topic_payloads, write_logs
from spark_apps.connect import display_url, remote_session, run_group_over_connect

pytestmark = pytest.mark.slow






def test_each_task_config_is_one_spark_task_over_spark_connect(spark_connect, worker_props, kafka_bootstrap, unique,
                                                               tmp_path):
    # Given 5 log files planned as 5 tasks in one group -- more tasks than the server's 2 cores
    config = {"name": f"connect-{unique}", "connector.class": "FileStreamSource", "file": write_logs(tmp_path, 5, 120),
              "topic": f"connect-{unique}", "tasks.max": 5, "topic.creation.default.partitions": 3}
    (group,) = make_plan(config, WorkerConfig(worker_props, env={}))["groups"]
    assert len(group["tasks"]) == 5
    # When the group runs on the Spark Connect server
    result = run_group_over_connect(spark_connect.url, group, worker_props)
    # Then every task ran as a Spark task of its own, each on its own file
    assert result["status"] == "ok", result
    assert [t["task"] for t in result["tasks"]] == [0, 1, 2, 3, 4]
    assert sorted(t["spark_task"]["partition"] for t in result["tasks"]) == [0, 1, 2, 3, 4]
    assert all(t["records"] == 120 and len(t["partitions"]) == 1 for t in result["tasks"])
    # And Kafka has every line once
    values = topic_payloads(kafka_bootstrap, config["topic"], 3)
    assert sorted(values) == sorted(f"file {f} line {i}" for f in range(5) for i in range(120))

    # When a line is appended and the group runs again
    with open(tmp_path / "app-3.log", "a") as f:
        f.write("file 3 appended\n")
    (group,) = make_plan(config, WorkerConfig(worker_props, env={}))["groups"]
    result = run_group_over_connect(spark_connect.url, group, worker_props)
    # Then it resumed from the offsets the first run committed: only the new line moved
    assert (result["status"], result["records"]) == ("ok", 1), result
    assert len(topic_payloads(kafka_bootstrap, config["topic"], 3)) == 601


def test_a_failed_task_fails_the_group_but_not_its_siblings(spark_connect, worker_props, unique, tmp_path):
    config = {"name": f"connectfail-{unique}", "connector.class": "FileStreamSource", "file": write_logs(tmp_path, 2, 10),
              "topic": f"connectfail-{unique}", "tasks.max": 2}
    (group,) = make_plan(config, WorkerConfig(worker_props, env={}))["groups"]
    bad = Path(group["tasks"][1]["partitions"][0]["filename"])
    bad.write_bytes(b"good line\n\xff\xfe broken\n")
    result = run_group_over_connect(spark_connect.url, group, worker_props)
    assert result["status"] == "failed"
    ok, failed = result["tasks"]
    assert ok["status"] == "ok" and ok["records"] == 10
    assert failed["status"] == "failed" and str(bad) in failed["error"]


def test_the_package_reaches_the_executors_as_a_session_artifact(spark_connect):
    # Given a session opened as task groups open theirs
    with remote_session(spark_connect.url) as spark:
        def where(batches):
            import pyarrow as pa

            import airflow_copycat.runtime.executor as executor

            for _ in batches:
                yield pa.RecordBatch.from_pydict({"file": [executor.__file__]})

        # When an executor imports the runtime
        [row] = spark.range(1).mapInArrow(where, "file string").collect()
    # Then it imported it from the zip this installation built, not from an installed copy
    assert f"/{Path(package_zip()).name}/airflow_copycat/runtime/executor.py" in row["file"]


def test_a_copy_job_over_spark_connect(spark_connect, tmp_path):
    # Given two datasets to copy in two tasks
    src, dst = tmp_path / "src", tmp_path / "dst"
    for dataset, name in [("orders", "a.csv"), ("orders", "b.csv"), ("users", "u.json")]:
        (src / dataset).mkdir(parents=True, exist_ok=True)
        (src / dataset / name).write_text(f"{dataset}/{name}\n" * 100)
    raw = load_connector_config({"name": "connect-copy", "source.url": str(src), "target.url": str(dst),
                                 "dataset.pattern": "*", "tasks.max": 2})
    plan = copy_job.make_copy_plan(raw)
    # When each group runs over Spark Connect and the datasets are published
    results = [run_group_over_connect(spark_connect.url, g, {}) for g in plan["groups"]]
    summary = copy_job.publish_copy(plan, results, raw)
    # Then both datasets are published byte for byte, each task having been a Spark task
    assert summary["status"] == "ok", summary
    assert sorted(summary["published"]) == ["orders", "users"]
    for dataset, name in [("orders", "a.csv"), ("orders", "b.csv"), ("users", "u.json")]:
        assert (dst / dataset / name).read_text() == f"{dataset}/{name}\n" * 100
    assert all("spark_task" in t for r in results for t in r["tasks"])


def test_an_unreachable_server_fails_at_once_naming_it(worker_props):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"sc://127.0.0.1:{port}/;token=tok-never-shown"
    group = {"group": 0, "connector": "nowhere", "kind": "source", "tasks": [{"task": 0}]}
    with pytest.raises(ConnectionError) as e:
        run_group_over_connect(url, group, worker_props)
    assert f"127.0.0.1:{port}" in str(e.value) and "tok-never-shown" not in str(e.value)
    assert display_url(url) == f"sc://127.0.0.1:{port}/;token=[hidden]"


class LongRun:
    """A log of fixed-width lines read by one task that commits often, its records going through a
    transform that runs record by record (InsertHeader), so that a run takes seconds: long enough to
    stop it half-way. ``committed_lines()`` reads how far the committed offset reaches."""

    lines = 400_000
    width = len("line 00000000\n")

    def __init__(self, tmp_path, worker_props, name: str):
        log = tmp_path / "big.log"
        with open(log, "w") as f:
            f.write("".join(f"line {i:08d}\n" for i in range(self.lines)))
        self.name = self.topic = name
        self.props = dict(worker_props, **{"offset.flush.interval.ms": 200})
        config = {"name": name, "connector.class": "FileStreamSource", "file": str(log), "topic": name,
                  "topic.creation.default.partitions": 1, "transforms": "mark",
                  "transforms.mark.type": "org.apache.kafka.connect.transforms.InsertHeader",
                  "transforms.mark.header": "run", "transforms.mark.value.literal": name}
        self.worker = WorkerConfig(self.props, env={})
        (self.group,) = make_plan(config, self.worker)["groups"]

    def committed_lines(self) -> int:
        from airflow_copycat.runtime.offsets import offset_store

        store = offset_store(self.worker)
        try:
            offsets = store.read(self.name)
        finally:
            store.close()
        return max((e["offset"]["position"] for e in offsets.values()), default=0) // self.width

    def start_then_wait_for_a_commit(self, run) -> tuple:
        """Run ``run()`` on a thread until the first offsets are committed; the thread and its outcome
        (``result`` or ``error``)."""
        import threading
        import time

        outcome = {}

        def target():
            try:
                outcome["result"] = run()
            except Exception as e:  # noqa: BLE001 -- what the tests expect
                outcome["error"] = e

        thread = threading.Thread(target=target)
        thread.start()
        deadline = time.monotonic() + 240
        while self.committed_lines() == 0 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert thread.is_alive(), f"the run ended before it could be stopped: {outcome}"
        return thread, outcome

    def rerun_resumes_and_completes(self, kafka_bootstrap, done: int) -> None:
        """The next run (in process) resumes at ``done`` lines, and Kafka then holds every line."""
        from airflow_copycat.runtime.executor import run_group

        result = run_group(self.group, self.props)
        assert result["status"] == "ok", result
        (partition,) = result["tasks"][0]["partitions"]
        assert partition["offset_before"]["position"] == done * self.width
        assert set(topic_payloads(kafka_bootstrap, self.topic, 1)) == {f"line {i:08d}" for i in range(self.lines)}


def test_a_cancelled_group_stops_on_the_server_and_the_next_run_resumes(spark_connect, worker_props,
                                                                        kafka_bootstrap, unique, tmp_path):
    import time

    from spark_apps.connect import Cancel

    # Given a run that takes seconds
    run = LongRun(tmp_path, worker_props, f"cancel-{unique}")

    # When the group runs over Spark Connect and is cancelled once it has committed some offsets
    cancel = Cancel()
    thread, outcome = run.start_then_wait_for_a_commit(
        lambda: run_group_over_connect(spark_connect.url, run.group, run.props, cancel=cancel))
    interrupted = cancel.cancel()
    thread.join(120)

    # Then the job was interrupted: the client got an error, not a result, and nothing writes any more
    assert not thread.is_alive() and "error" in outcome and "result" not in outcome, outcome
    assert interrupted
    count = len(topic_payloads(kafka_bootstrap, run.topic, 1))
    time.sleep(3)
    values = topic_payloads(kafka_bootstrap, run.topic, 1)
    assert len(values) == count < run.lines
    # And every line before the committed offset is in Kafka: no offset passed what Kafka did not acknowledge
    done = run.committed_lines()
    assert 0 < done < run.lines
    assert set(values) >= {f"line {i:08d}" for i in range(done)}

    # When the next run goes on, then it resumed at the committed offset, and Kafka now holds every line
    run.rerun_resumes_and_completes(kafka_bootstrap, done)



def _worker_pids(spark) -> set[int]:
    """The PIDs of the Python workers that run a two-task job in ``spark``'s session."""
    def pid(batches):
        import os

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]})

    return {r["pid"] for r in spark.range(0, 2, 1, numPartitions=2).mapInArrow(pid, "pid long").collect()}


def test_a_later_run_attaches_to_the_session_an_earlier_one_left_and_its_python_workers(spark_connect):
    # Given a first client that ran a job and closed
    with remote_session(spark_connect.url) as spark:
        first_session, first_workers = spark.session_id, _worker_pids(spark)

    # When a second client with the same build and settings runs one
    with remote_session(spark_connect.url) as spark:
        second_session, second_workers = spark.session_id, _worker_pids(spark)

    # Then it ran in the same server-side session, on the Python workers the first one started
    assert second_session == first_session
    assert second_workers & first_workers

    # And other settings get a session of their own
    with remote_session(spark_connect.url, {"spark.sql.session.timeZone": "Asia/Tokyo"}) as spark:
        assert spark.session_id != first_session
        assert spark.conf.get("spark.sql.session.timeZone") == "Asia/Tokyo"


def test_a_shared_session_the_server_closed_is_skipped_and_reuse_off_closes_its_own(spark_connect):
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from spark_apps.connect import _with_param

    # Given the shared session, closed on the server (as when it idled out)
    with remote_session(spark_connect.url) as spark:
        closed = spark.session_id
    RemoteSparkSession.builder.remote(_with_param(spark_connect.url, "session_id", closed)).create().stop()

    # When a client asks for the shared session again
    with remote_session(spark_connect.url) as spark:
        # Then it runs in the next shared session, which later clients find too
        assert spark.session_id != closed
        assert spark.range(3).count() == 3
        following = spark.session_id
    with remote_session(spark_connect.url) as spark:
        assert spark.session_id == following

    # And with reuse off the session is the client's own, closed on the server when it ends
    with remote_session(spark_connect.url, reuse=False) as spark:
        own = spark.session_id
        assert own != following
    with pytest.raises(Exception, match="SESSION_CLOSED"):
        RemoteSparkSession.builder.remote(_with_param(spark_connect.url, "session_id", own)).create().range(1).count()


def test_a_server_stopped_mid_run_fails_the_run_clearly_and_the_rerun_resumes(worker_props, kafka_bootstrap,
                                                                               unique, tmp_path):
    from airflow_copycat.testing.spark_connect import EmbeddedSparkConnect

    # Given a server of its own (this test stops it) and a run on it that takes seconds
    run = LongRun(tmp_path, worker_props, f"gone-{unique}")
    server = EmbeddedSparkConnect(token="tok-never-shown", log_path=str(tmp_path / "connect.log")).start()
    try:
        thread, outcome = run.start_then_wait_for_a_commit(
            lambda: run_group_over_connect(server.url, run.group, run.props))

        # When the server stops (with its executors) while the group runs
        server.stop()
        thread.join(180)
    finally:
        server.stop()

    # Then the run failed, naming the server and what happened, without its token
    assert not thread.is_alive(), "the client still waits for a server that is gone"
    assert "result" not in outcome, outcome
    error = outcome["error"]
    assert isinstance(error, ConnectionError), repr(error)
    assert f"sc://localhost:{server.port}/" in str(error) and "went away" in str(error)
    assert "tok-never-shown" not in str(error)
    # And every line before the committed offset is in Kafka
    done = run.committed_lines()
    assert 0 < done < run.lines
    assert set(topic_payloads(kafka_bootstrap, run.topic, 1)) >= {f"line {i:08d}" for i in range(done)}

    # When the rerun goes on, then it resumed at the committed offset, and Kafka holds every line
    run.rerun_resumes_and_completes(kafka_bootstrap, done)
