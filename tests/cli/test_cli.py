"""The ``copycat`` command line: validate, plan, run (in process and via spark-submit), offsets.

Most tests call :func:`airflow_copycat.cli.main` in this process against the real
broker; one runs the installed ``copycat`` script to prove the entry point.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_copycat import cli
from airflow_copycat.runtime.kafka import read_to_end
from tests.support.progress_lines import Line, final_line, progress_lines
from tests.support.java import java_home

ROOT = Path(__file__).resolve().parents[2]
COPYCAT = Path(sys.executable).parent / "copycat"
SECRET_SOURCE = "tests.cli.secret_connector:SecretSource"


@pytest.fixture(autouse=True)
def _no_copycat_env(monkeypatch):
    """COPYCAT_* variables override worker files: keep the caller's out of these tests."""
    for key in list(os.environ):
        if key.startswith("COPYCAT_"):
            monkeypatch.delenv(key)


def run_cli(capsys, *argv):
    """(exit code, stdout, stderr) of ``copycat argv...`` run in this process."""
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def write_worker(path: Path, **props) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


@pytest.fixture
def worker_file(tmp_path, kafka_bootstrap, unique):
    return write_worker(tmp_path / "worker.properties", **{
        "bootstrap.servers": kafka_bootstrap,
        "offset.storage.topic": f"copycat-offsets-{unique}",
        "offset.storage.partitions": 3,
        "offset.flush.interval.ms": 1000,
    })


@pytest.fixture
def lines_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("a1\na2\na3\n")
    return path


@pytest.fixture
def source_config(tmp_path, lines_file, unique):
    """Kafka Connect connector JSON of a FileStreamSource reading ``lines_file``."""
    path = tmp_path / "source.json"
    path.write_text(json.dumps({"name": f"lines-{unique}", "config": {
        "connector.class": "FileStreamSource", "file": str(lines_file), "topic": f"lines-{unique}",
        "tasks.max": "1"}}))
    return path


def topic_values(bootstrap: str, topic: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-check", "enable.partition.eof": True})
    try:
        return [json.loads(m.value())["payload"] for m in read_to_end(c, [TopicPartition(topic, 0, 0)])]
    finally:
        c.close()


def offset_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- help, validate -------------------------------------------------------------------------


def test_the_command_line_imports_no_package_metadata_until_a_plugin_is_looked_up():
    """``importlib.metadata`` (about half of what importing the command line took) is imported only where
    an entry point of a plugin is looked up, not by ``import airflow_copycat.cli``."""
    code = "import sys, airflow_copycat.cli; print('importlib.metadata' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_help_lists_every_command_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("validate", "plan", "run", "offsets"):
        assert any(line.strip().startswith(command + " ") for line in out.splitlines()), (command, out)


def test_validate_names_every_problem_and_exits_1(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "config": {
        "connector.class": "FileStreamSource", "tasks.max": "zero", "errors.tolerance": "sometimes",
        "batch.size": "-3", "copycat.groups.max": "0"}}))
    rc, out, err = run_cli(capsys, "validate", bad)
    assert rc == 1
    for key, value in [("tasks.max", "'zero'"), ("errors.tolerance", "'sometimes'"), ("batch.size", "'-3'"),
                       ("copycat.groups.max", "'0'"), ("topic", "(absent)"), ("file", "(absent)")]:
        assert f"  - {key}={value}: " in out, (key, out)
    assert "6 problem(s)" in out and "Traceback" not in out + err


def test_validate_accepts_properties_connect_json_and_yaml(capsys, tmp_path):
    props = tmp_path / "file-source.properties"  # as connect-standalone takes it
    props.write_text("# Kafka's config/connect-file-source.properties\nname=local-file-source\n"
                     "connector.class=FileStreamSource\ntasks.max=1\nfile=test.txt\ntopic=connect-test\n")
    connect_json = tmp_path / "source.json"
    connect_json.write_text(json.dumps({"name": "json-source", "config": {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "file": "/var/log/app.log", "topic": "logs"}}))
    yaml_file = tmp_path / "sink.yaml"
    yaml_file.write_text("name: yaml-sink\nconnector.class: FileStreamSink\ntopics: logs\nfile: /tmp/out.txt\n")
    # No Kafka anywhere: validate must not need it
    rc, out, err = run_cli(capsys, "validate", props, connect_json, yaml_file)
    assert rc == 0, out + err
    assert f"{props}: valid, source connector 'local-file-source'" in out
    assert f"{connect_json}: valid, source connector 'json-source'" in out
    assert f"{yaml_file}: valid, sink connector 'yaml-sink'" in out


def test_validate_reports_unreadable_configs_and_duplicate_names(capsys, tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"name": "same", "connector.class": "FileStreamSource", "file": "/x", "topic": "t"}))
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x",')
    rc, out, err = run_cli(capsys, "validate", good, tmp_path / "missing.yaml", broken, good)
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{good}: valid")
    assert "missing.yaml' does not exist" in lines[1]
    assert lines[2].startswith(f"{broken}: cannot read the connector config")
    assert "name='same': also the name of the connector in" in out
    assert "Traceback" not in out + err


def test_secret_values_are_never_printed(capsys, tmp_path, worker_file):
    config = tmp_path / "secret.json"
    config.write_text(json.dumps({"name": "secretive", "connector.class": SECRET_SOURCE, "topic": "t",
                                  "api.password": "short-pw", "api.token": "hunter2-token",
                                  "db.password": "db-secret-value"}))
    rc, out, err = run_cli(capsys, "validate", config)
    assert rc == 1
    assert "api.password='[hidden]': must be at least 12 characters" in out
    assert "api.token='[hidden]': must start with 'tok-', got '[hidden]'" in out
    rc, out2, err2 = run_cli(capsys, "--verbose", "plan", "--worker", worker_file, config)
    assert rc == 1 and "api.token='[hidden]'" in err2
    for text in (out, err, out2, err2):
        assert "short-pw" not in text and "hunter2-token" not in text and "db-secret-value" not in text


# --- plan -----------------------------------------------------------------------------------


def test_plan_prints_json_with_groups(capsys, tmp_path, worker_file, unique):
    for i in range(3):
        (tmp_path / f"app{i}.log").write_text(f"line {i}\n")
    config = tmp_path / "logs.yaml"
    config.write_text(f"name: logs-{unique}\nconnector.class: FileStreamSource\nfile: {tmp_path}/*.log\n"
                      f"topic: logs-{unique}\ntasks.max: 3\nsasl.jaas.config: very-secret-jaas\n")
    rc, out, err = run_cli(capsys, "plan", "-w", worker_file, config, "--max-groups", 2)
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["format"] == "copycat.plan/1" and plan["connector"] == f"logs-{unique}" and plan["kind"] == "source"
    assert len(plan["groups"]) == 2
    assert sorted(t["task"] for g in plan["groups"] for t in g["tasks"]) == [0, 1, 2]
    assert sorted(p["filename"] for p in plan["partitions"]) == [str(tmp_path / f"app{i}.log") for i in range(3)]
    assert plan["config"]["sasl.jaas.config"] == "[hidden]" and "very-secret-jaas" not in out
    assert plan["offsets"] == []
    # --max-tasks overrides tasks.max
    rc, out, _ = run_cli(capsys, "plan", "-w", worker_file, config, "--max-tasks", 1)
    assert rc == 0 and [len(g["tasks"]) for g in json.loads(out)["groups"]] == [1]


def test_plan_of_invalid_config_lists_problems_on_stderr(capsys, tmp_path, worker_file):
    config = tmp_path / "bad.properties"
    config.write_text("name=bad\nconnector.class=NoSuchConnector\ntasks.max=-1\n")
    rc, out, err = run_cli(capsys, "plan", "--worker", worker_file, config)
    assert rc == 1 and out == ""
    assert err.startswith("copycat: error: ") and "connector.class='NoSuchConnector'" in err
    assert "tasks.max='-1': must be at least 1" in err and "Traceback" not in err


# --- run and offsets ------------------------------------------------------------------------


def test_run_in_process_copies_lines_then_only_appended_ones(capsys, kafka_bootstrap, worker_file,
                                                             source_config, lines_file, unique):
    topic, name = f"lines-{unique}", f"lines-{unique}"
    partition = {"filename": str(lines_file)}
    # When a FileStreamSource runs once
    rc, out, err = run_cli(capsys, "run", "--worker", worker_file, source_config, "--in-process")
    assert rc == 0, out + err
    # Then every line is in the topic and the summary says what moved
    assert topic_values(kafka_bootstrap, topic) == ["a1", "a2", "a3"]
    assert out.startswith(f"{name} (source): ok, 3 records, ")
    assert f'{json.dumps(partition, separators=(",", ":"))}: null -> {{"position":9,' in out
    # And the committed offset is listed
    rc, out, _ = run_cli(capsys, "offsets", "--worker", worker_file, name)
    assert rc == 0
    [entry] = offset_lines(out)
    assert entry["partition"] == partition and entry["offset"]["position"] == 9
    # When lines are appended, the next run copies only those
    with open(lines_file, "a") as f:
        f.write("a4\na5\n")
    rc, out, err = run_cli(capsys, "run", "--worker", worker_file, source_config, "--in-process", "--json")
    assert rc == 0, out + err
    summary = json.loads(out)
    assert summary["records"] == 2 and summary["status"] == "ok"
    [p] = summary["partitions"]
    assert p["offset_before"]["position"] == 9 and p["offset_after"]["position"] == 15
    assert topic_values(kafka_bootstrap, topic) == ["a1", "a2", "a3", "a4", "a5"]
    # The offsets of every connector are listed when no CONNECTOR is given
    rc, out, _ = run_cli(capsys, "offsets", "--worker", worker_file)
    assert rc == 0 and [e["connector"] for e in offset_lines(out)] == [name]


def test_run_prints_progress_while_the_group_runs(capsys, kafka_bootstrap, tmp_path, unique):
    # Given a source whose two tasks take about a second each, and a worker asking for progress every 0.3 s
    worker = write_worker(tmp_path / "worker.properties", **{
        "bootstrap.servers": kafka_bootstrap, "offset.storage.topic": f"copycat-offsets-{unique}",
        "offset.storage.partitions": 3, "progress.interval.ms": 300})
    name = f"paced-{unique}"
    config = json.dumps({"name": name, "connector.class": "tests.support.connectors:PacedSource",
                         "topic": name, "counters": 2, "count": 80, "batch": 10, "pause.ms": 100, "tasks.max": 2})
    # When it runs in process
    rc, out, err = run_cli(capsys, "run", "-w", worker, config, "--in-process")
    # Then stderr showed its progress while it ran: records growing, tasks done of total
    assert rc == 0, out + err
    lines = progress_lines(err, 0, name)
    assert len(lines) >= 2, err
    counts = [line.count for line in lines]
    assert counts == sorted(counts) and counts[0] < counts[-1], err
    assert {line.total for line in lines} == {2} and lines[0].done < 2 and any(line.done == 1 for line in lines), err
    # And a last line with what the group moved, as the summary says
    assert final_line(err, 0, name) == Line(2, 2, 160)
    assert out.startswith(f"{name} (source): ok, 160 records, ")


def test_offsets_set_rewinds_and_delete_restarts(capsys, kafka_bootstrap, worker_file, source_config,
                                                 lines_file, unique):
    topic, name = f"lines-{unique}", f"lines-{unique}"
    partition = json.dumps({"filename": str(lines_file)})
    assert run_cli(capsys, "run", "-w", worker_file, source_config, "--in-process")[0] == 0
    # --set PARTITION=OFFSET (Kafka Connect's offset shape: position only) rewinds to after "a1\n"
    rc, out, err = run_cli(capsys, "offsets", "-w", worker_file, name, "--set", f'{partition}={{"position": 3}}')
    assert rc == 0, err
    [changed] = offset_lines(out)
    assert changed["offset"] == {"position": 3} and changed["previous"]["position"] == 9
    assert offset_lines(run_cli(capsys, "offsets", "-w", worker_file, name)[1])[0]["offset"] == {"position": 3}
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--in-process")
    assert rc == 0 and ", 2 records, " in out, out + err
    assert topic_values(kafka_bootstrap, topic) == ["a1", "a2", "a3", "a2", "a3"]
    # --delete PARTITION writes a tombstone: nothing is listed, the next run starts at byte 0
    rc, out, err = run_cli(capsys, "offsets", "-w", worker_file, name, "--delete", partition)
    assert rc == 0 and offset_lines(out)[0]["offset"] is None
    rc, out, err = run_cli(capsys, "offsets", "-w", worker_file, name)
    assert rc == 0 and out == "" and "has no committed offsets" in err
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--in-process")
    assert rc == 0 and ", 3 records, " in out, out + err
    assert topic_values(kafka_bootstrap, topic)[5:] == ["a1", "a2", "a3"]
    # The flag form does the same as --set
    rc, _, _ = run_cli(capsys, "offsets", "-w", worker_file, name, "--partition", partition, "--offset", '{"position": 6}')
    assert rc == 0
    assert offset_lines(run_cli(capsys, "offsets", "-w", worker_file, name)[1])[0]["offset"] == {"position": 6}


def test_offsets_in_a_file_store_need_no_kafka(capsys, tmp_path, kafka_bootstrap, source_config, lines_file, unique):
    offsets_file = tmp_path / "connect.offsets"
    with_kafka = write_worker(tmp_path / "standalone.properties", **{
        "bootstrap.servers": kafka_bootstrap, "offset.storage.file.filename": offsets_file})
    rc, out, err = run_cli(capsys, "run", "-w", with_kafka, source_config, "--in-process")
    assert rc == 0, out + err
    # A worker file naming only the file store (no bootstrap.servers at all) lists and changes offsets
    file_only = write_worker(tmp_path / "file-only.properties", **{"offset.storage.file.filename": offsets_file})
    rc, out, err = run_cli(capsys, "offsets", "-w", file_only, source_config)  # CONNECTOR taken from the config
    assert rc == 0, err
    [entry] = offset_lines(out)
    assert entry["partition"] == {"filename": str(lines_file)} and entry["offset"]["position"] == 9
    partition = json.dumps(entry["partition"])
    rc, _, err = run_cli(capsys, "offsets", "-w", file_only, f"lines-{unique}", "--set", f"{partition}={{\"position\":0}}")
    assert rc == 0, err
    stored = json.loads(offsets_file.read_text())["offsets"]
    assert stored == [{"key": [f"lines-{unique}", entry["partition"]], "value": {"position": 0}}]


def test_run_with_a_failing_task_exits_1(capsys, worker_file, unique):
    config = json.dumps({"name": f"fail-{unique}", "connector.class": "tests.support.connectors:CountingSource",
                         "topic": f"fail-{unique}", "counters": 1, "count": 6, "fail.at": 4})
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, config, "--in-process")
    assert rc == 1
    assert f"fail-{unique} (source): FAILED, 3 records" in out  # the batch holding c0-3 failed
    assert "failed: task 0 of group 0: RuntimeError: boom at c0:4" in out and '{"counter":"c0"}: null -> {"n":3}' in out
    assert "Traceback" not in out + err


def test_run_validates_every_config_before_running_any(capsys, worker_file, source_config, unique):
    bad = json.dumps({"name": f"bad-{unique}", "connector.class": "FileStreamSource", "topic": "t"})
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, bad, "--in-process")
    assert rc == 1 and out == "" and "<inline JSON>: invalid configuration" in err
    rc, out, err = run_cli(capsys, "offsets", "-w", worker_file, f"lines-{unique}")
    assert rc == 0 and out == ""  # the valid first connector did not run either


def test_user_errors_are_one_line_without_traceback(capsys, tmp_path, source_config):
    dead = write_worker(tmp_path / "dead.properties", **{"bootstrap.servers": f"127.0.0.1:{closed_port()}"})
    rc, out, err = run_cli(capsys, "offsets", "-w", dead, "--kafka-timeout", "2", "some-connector")
    assert rc == 1 and out == ""
    assert err.startswith("copycat: error: cannot reach Kafka at 127.0.0.1:") and "Traceback" not in err
    rc, _, err = run_cli(capsys, "run", source_config, "--in-process")  # no worker file, no environment
    assert rc == 1 and "bootstrap.servers is not set" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(capsys, "run", "-w", tmp_path / "nope.properties", source_config)
    assert rc == 1 and err.strip() == f"copycat: error: worker properties file '{tmp_path / 'nope.properties'}' does not exist"
    rc, _, err = run_cli(capsys, "offsets", "x", "--set", "not json")
    assert rc == 1 and "expected PARTITION=OFFSET, both JSON" in err
    rc, _, err = run_cli(capsys, "--verbose", "offsets", "-w", dead, "--kafka-timeout", "1", "x")
    assert rc == 1 and "Traceback" in err  # --verbose shows it


@pytest.mark.parametrize("text, expected", [
    ('{"filename":"/x"}={"position":0}', ({"filename": "/x"}, {"position": 0})),
    ('{"filename": "/a=b"} = {"position": 12}', ({"filename": "/a=b"}, {"position": 12})),
    ('{"filename":"/x"}=null', ({"filename": "/x"}, None)),
    ('["t", 0]=17', (["t", 0], 17)),
    ('"s=1"="v=2"', ("s=1", "v=2")),
])
def test_parse_assignment(text, expected):
    assert cli.parse_assignment(text) == expected


def test_parse_assignment_errors():
    for text in ("x=1", '{"a":1}', '{"a":1}=', '{"a":1}={"position":'):
        with pytest.raises(cli.UserError, match="PARTITION=OFFSET"):
            cli.parse_assignment(text)


# --- the installed script, and Spark --------------------------------------------------------


def test_installed_copycat_script_runs_validate(tmp_path):
    assert COPYCAT.exists(), f"{COPYCAT} is missing: pip install -e . installs the console script"
    good = tmp_path / "good.properties"
    good.write_text("name=good\nconnector.class=FileStreamSource\nfile=/x\ntopic=t\n")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "connector.class": "FileStreamSource", "tasks.max": 0}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPYCAT_")}
    proc = subprocess.run([str(COPYCAT), "validate", str(good), str(bad)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert f"{good}: valid" in proc.stdout and "tasks.max=0: must be at least 1" in proc.stdout
    assert proc.stderr == ""


def test_cli_does_not_import_airflow():
    code = ("import sys, airflow_copycat.cli, airflow_copycat.runtime.plan, airflow_copycat.runtime.executor; "
            "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith(('airflow.', 'pyspark'))); "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _java_home(monkeypatch) -> None:
    """JAVA_HOME as `make` sets it (.copycat/java.env), for pytest run by hand."""
    monkeypatch.setenv("JAVA_HOME", java_home())


@pytest.mark.slow
def test_run_with_spark_submit(capsys, monkeypatch, kafka_bootstrap, worker_file, source_config, lines_file, unique):
    _java_home(monkeypatch)
    topic, name = f"lines-{unique}", f"lines-{unique}"
    status = f"copycat-status-{unique}"
    with open(worker_file, "a") as f:  # progress every 0.5 s, on a status topic of this test
        f.write(f"progress.interval.ms=500\nstatus.storage.topic={status}\nstatus.storage.partitions=1\n")
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--master", "local[2]",
                           "--spark-conf", "spark.executor.memory=512m")
    assert rc == 0, out + err
    assert out.startswith(f"{name} (source): ok, 3 records, ") and "spark-submit --master local[2]" in out
    assert topic_values(kafka_bootstrap, topic) == ["a1", "a2", "a3"]
    # Progress showed while the application ran, then its last line; the Spark task published its own
    # progress records to the status topic, from the executor, ending with its result's counts
    assert len(progress_lines(err, 0, name)) >= 2, err
    assert final_line(err, 0, name) == Line(1, 1, 3)
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "cli-check", "enable.partition.eof": True})
    try:
        published = [json.loads(m.value()) for m in read_to_end(c, [TopicPartition(status, 0, 0)])]
    finally:
        c.close()
    assert [(r["state"], r["records"]) for r in published][-1] == ("done", 3)
    assert {r["connector"] for r in published} == {name} and published[0]["state"] == "running"
    # The offsets the Spark task committed are where the next (in-process) run continues
    with open(lines_file, "a") as f:
        f.write("a4\n")
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--in-process")
    assert rc == 0 and ", 1 records, " in out, out + err
    assert topic_values(kafka_bootstrap, topic) == ["a1", "a2", "a3", "a4"]


@pytest.mark.slow
def test_spark_submit_failure_fails_the_run_and_shows_its_output(capsys, monkeypatch, worker_file, source_config):
    _java_home(monkeypatch)
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--master", "no-such-master")
    assert rc == 1
    assert "FAILED, 0 records" in out and "spark-submit exited with code" in out
    assert "its last lines:" in err and "  | " in err  # the tail of spark-submit's output


@pytest.mark.slow
def test_run_with_remote_runs_over_spark_connect(capsys, monkeypatch, spark_connect, kafka_bootstrap, worker_file,
                                                 source_config, lines_file, unique):
    # Given a Spark Connect server whose URL carries a token
    token = spark_connect.token
    # When `copycat run --remote URL` runs the connector
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--remote", spark_connect.url)
    # Then its group ran there, the summary names the server, and the token is never printed
    assert rc == 0, out + err
    assert out.startswith(f"lines-{unique} (source): ok, 3 records, ")
    assert f"Spark Connect sc://localhost:{spark_connect.port}/;token=[hidden]" in out
    assert token not in out + err
    assert topic_values(kafka_bootstrap, f"lines-{unique}") == ["a1", "a2", "a3"]
    # When a line is appended and the next run finds the server in $SPARK_REMOTE
    with open(lines_file, "a") as f:
        f.write("a4\n")
    monkeypatch.setenv("SPARK_REMOTE", spark_connect.url)
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config)
    # Then it continued from the offsets the first run committed
    assert rc == 0 and ", 1 records, " in out and "Spark Connect" in out, out + err
    assert topic_values(kafka_bootstrap, f"lines-{unique}") == ["a1", "a2", "a3", "a4"]


def test_run_with_remote_of_a_closed_port_fails_the_run_naming_the_server(capsys, worker_file, source_config):
    port = closed_port()
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--remote",
                           f"sc://127.0.0.1:{port}/;token=tok-secret-value")
    assert rc == 1
    assert "FAILED, 0 records" in out and f"cannot reach the Spark Connect server at sc://127.0.0.1:{port}" in out
    assert "tok-secret-value" not in out + err


def test_remote_must_be_a_spark_connect_url(capsys, worker_file, source_config):
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, source_config, "--remote", "spark://127.0.0.1:7077")
    assert rc == 1 and "--remote 'spark://127.0.0.1:7077': expected a Spark Connect URL, sc://host:port" in err


@pytest.mark.slow
def test_copy_with_remote_copies_in_spark_tasks_and_publishes(capsys, spark_connect, tmp_path):
    # Given a file tree of two datasets
    src, dst = tmp_path / "src", tmp_path / "dst"
    for dataset, name in [("orders", "a.csv"), ("orders", "b.csv"), ("users", "u.json")]:
        (src / dataset).mkdir(parents=True, exist_ok=True)
        (src / dataset / name).write_text(f"{dataset}/{name}\n" * 50)
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"name": "remote-copy", "source.url": str(src), "target.url": str(dst),
                                  "dataset.pattern": "*", "tasks.max": 2}))
    # When `copycat copy --remote URL` runs it
    rc, out, err = run_cli(capsys, "copy", config, "--remote", spark_connect.url, "--json")
    # Then every file was copied by Spark tasks over Spark Connect and both datasets are published
    assert rc == 0, out + err
    summary = json.loads(out)
    assert summary["files_copied"] == 3 and sorted(summary["published"]) == ["orders", "users"]
    assert summary["mode"] == f"Spark Connect sc://localhost:{spark_connect.port}/;token=[hidden]"
    assert (dst / "users" / "u.json").read_text() == "users/u.json\n" * 50


def test_run_replay_dlq_re_ingests_what_the_connector_dead_lettered(capsys, kafka_bootstrap, worker_file, tmp_path,
                                                                   unique):
    # Given a source that dead-lettered two of its six records
    name = f"mixed-{unique}"
    original = {"name": name, "connector.class": "tests.runtime.test_dead_letter_replay:MixedSource", "topic": name,
                "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{name}-dlq"}
    config = tmp_path / "mixed.json"
    config.write_text(json.dumps(original))
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, config, "--in-process", "--json")
    assert rc == 0, out + err
    assert (json.loads(out)["records"], json.loads(out)["dead_lettered"]) == (4, 2)
    # When its config is fixed (digits in strings become the int32 the schema wants) and its DLQ is replayed
    config.write_text(json.dumps(dict(original, **{"transforms": "toInt", "transforms.toInt.type": "Cast$Value",
                                                   "transforms.toInt.spec": "int32"})))
    rc, out, err = run_cli(capsys, "run", "-w", worker_file, config, "--in-process", "--replay-dlq", "--json")
    # Then the replay connector copied the two records into the connector's topic
    assert rc == 0, out + err
    summary = json.loads(out)
    assert (summary["connector"], summary["records"]) == (f"{name}-dlq-replay", 2)
    assert topic_values(kafka_bootstrap, name) == [0, 1, 3, 5, 2, 4]
