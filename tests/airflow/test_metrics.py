"""Runs report what they moved to Airflow's metrics: a real ``dag.test()`` run with Airflow's StatsD
backend turned on (``[metrics] statsd_on``, as a deployment sets it) sends its metrics over UDP to a
listener of this test, which reads them as a StatsD server would."""

from __future__ import annotations

import os
import socket

import pytest

from tests.airflow.test_operators import file_source, write_lines


@pytest.fixture
def statsd(monkeypatch):
    """A UDP socket Airflow's StatsD backend sends to; Airflow's metrics set up from ``[metrics]`` as its
    task runner does at start, and set back to none after the test."""
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.5)
    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sock.getsockname()[1]),
                       "STATSD_PREFIX": "airflow"}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=get_stats_factory(), export_legacy_names=True)

    def received() -> list[str]:
        lines = []
        while True:
            try:
                data = sock.recv(65536)
            except socket.timeout:
                return lines
            lines += data.decode().splitlines()

    yield received
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

    stats.initialize(factory=NoStatsLogger, export_legacy_names=True)
    sock.close()


def test_a_run_sends_its_counts_and_durations_to_statsd(make_dag, run_dag, tmp_path, unique, test_worker_config,
                                                       statsd):
    # Given a DAG copying a 7-line file into a topic, and Airflow's StatsD backend on
    log_file = tmp_path / "app.log"
    lines = write_lines(log_file, 0, 7)
    connector = f"lines-{unique}"
    dag = make_dag(f"metrics_{unique}", file_source(unique), params={"input": str(log_file), "topic": connector},
                   in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then StatsD received the run's counts under the connector's name, and the group's and task's durations
    assert result.state == "success", result.states()
    sent = statsd()
    counters = {line.split(":")[0]: int(line.split(":")[1].split("|")[0]) for line in sent if line.endswith("|c")}
    name = f"airflow.copycat.{connector}"
    assert counters[f"{name}.records"] == len(lines)
    summary = result.xcom(f"{connector}.finish")
    assert counters[f"{name}.bytes"] == summary["bytes"] > os.path.getsize(log_file)  # Kafka's bytes, in JSON
    assert counters[f"{name}.errors"] == counters[f"{name}.dead_lettered"] == counters[f"{name}.retries"] == 0
    assert counters[f"{name}.group_records"] == len(lines)
    timers = {line.split(":")[0] for line in sent if line.endswith("|ms")}
    assert {f"{name}.group_duration", f"{name}.task_duration"} <= timers, sent


def test_a_copy_job_sends_its_file_counts_to_statsd(make_copy_dag, run_dag, tmp_path, unique, statsd):
    # Given a tree of three files and a DAG copying it, and Airflow's StatsD backend on
    src, dst = tmp_path / "src", tmp_path / "dst"
    for name in ("a", "b", "c"):
        (src / "data").mkdir(parents=True, exist_ok=True)
        (src / "data" / f"{name}.csv").write_text(f"id\n{name}\n")
    name = f"mirror-{unique}"
    dag = make_copy_dag(f"copy_metrics_{unique}", {"name": name, "source.url": str(src), "target.url": str(dst),
                                                   "dataset.pattern": "*"}, in_process=True)

    # When it runs
    result = run_dag(dag)

    # Then StatsD received the files and bytes copied, as the publish task's summary says
    assert result.state == "success", result.log[-3000:]
    sent = statsd()
    counters = {line.split(":")[0]: int(line.split(":")[1].split("|")[0]) for line in sent if line.endswith("|c")}
    summary = result.xcom(f"{name}.publish")
    assert counters[f"airflow.copycat.{name}.files_copied"] == summary["files_copied"] == 3
    assert counters[f"airflow.copycat.{name}.bytes_copied"] == summary["bytes_copied"] > 0
    assert counters[f"airflow.copycat.{name}.group_records"] == 3


def test_a_sink_run_sends_the_consumer_lag_it_leaves(make_dag, run_dag, tmp_path, unique, test_worker_config,
                                                   kafka_conn, statsd):
    # Given a topic holding 5 lines (copied by a source DAG) and a DAG writing that topic to a file
    from confluent_kafka import Producer

    from airflow_copycat.runtime.lag import sink_lag
    from airflow_copycat.runtime.worker import WorkerConfig

    log_file, out_file, topic = tmp_path / "app.log", tmp_path / "out.txt", f"lag-{unique}"
    write_lines(log_file, 0, 5)
    fill = make_dag(f"metrics_fill_{unique}", file_source(unique), params={"input": str(log_file), "topic": topic},
                    in_process=True, worker_config=test_worker_config)
    assert run_dag(fill).state == "success"
    connector = f"out-{unique}"
    sink = make_dag(f"metrics_sink_{unique}", {"name": connector, "connector.class": "FileStreamSink",
                                               "topics": topic, "file": str(out_file)},
                    in_process=True, worker_config=test_worker_config)
    statsd()  # what the fill sent

    # When the sink runs to the end of the topic
    result = run_dag(sink)

    # Then StatsD received the lag it left, none, as a gauge, and the finish task logged it
    assert result.state == "success", result.states()
    assert len(out_file.read_text().splitlines()) == 5
    gauges = {line.split(":")[0]: float(line.split(":")[1].split("|")[0]) for line in statsd() if line.endswith("|g")}
    assert gauges[f"airflow.copycat.{connector}.lag"] == 0, gauges
    # and the same reading counts what arrives after the run: what the next run will copy
    producer = Producer({"bootstrap.servers": kafka_conn})
    for i in range(3):
        producer.produce(topic, f"late {i}".encode())
    assert producer.flush(30) == 0
    worker = WorkerConfig({"bootstrap.servers": kafka_conn, **test_worker_config}, env={})
    assert sum(r["lag"] for r in sink_lag(worker, connector)) == 3
