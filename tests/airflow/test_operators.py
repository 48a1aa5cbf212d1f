"""The operators in real Airflow: ``connector_task_group`` DAGs run with ``dag.test()``
against the test broker, results read back from Airflow's metadata DB."""

from __future__ import annotations

import json
import os

from airflow.sdk.log import redact

from airflow_copycat.runtime import submit
from airflow_copycat.runtime.connector_config import HIDDEN
from tests.support.airflow_connectors import fingerprint
from tests.support.progress_lines import Line, final_line, progress_lines

SOURCE = "FileStreamSource"


def write_lines(path, start: int, count: int) -> list[str]:
    lines = [f"line {i} of {os.path.basename(path)}" for i in range(start, start + count)]
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    return lines


def file_source(unique: str, **extra) -> dict:
    """A FileStreamSource config whose file and topic come from the DAG's params."""
    return {"name": f"lines-{unique}", "connector.class": SOURCE, "file": "{{ params.input }}",
            "topic": "{{ params.topic }}", **extra}


def test_file_source_copies_lines_and_each_run_only_the_new_ones(
        make_dag, run_dag, tmp_path, unique, kafka_bootstrap, read_topic, test_worker_config):
    # Given a log file and a DAG copying it into a topic, in process
    log_file = tmp_path / "app.log"
    lines = write_lines(log_file, 0, 5)
    topic = f"lines-{unique}"
    group = f"lines-{unique}"
    dag = make_dag(f"file_source_{unique}", file_source(unique), params={"input": str(log_file), "topic": topic},
                   in_process=True, worker_config=test_worker_config)

    # When it runs
    first = run_dag(dag)

    # Then every task succeeded, the summary counts the lines and says where the file was read from and to
    assert first.state == "success", first.states()
    assert first.states() == {(f"{group}.plan", -1): "success", (f"{group}.run", 0): "success",
                              (f"{group}.finish", -1): "success"}
    summary = first.xcom(f"{group}.finish")
    assert (summary["status"], summary["records"], summary["topics"]) == ("ok", 5, {topic: 5})
    [part] = summary["partitions"]
    assert part["partition"] == {"filename": str(log_file)}
    assert part["offset_before"] is None
    assert part["offset_after"]["position"] == log_file.stat().st_size
    # ... the plan is in XCom, and its groups are what the run task was mapped over
    plan = first.xcom(f"{group}.plan", key="plan")
    assert plan["connector"] == group and plan["kind"] == "source"
    assert plan["partitions"] == [{"filename": str(log_file)}]
    assert first.xcom(f"{group}.plan") == plan["groups"]
    assert [t["partitions"] for g in plan["groups"] for t in g["tasks"]] == [[{"filename": str(log_file)}]]
    assert first.xcom(f"{group}.run", map_index=0)["records"] == 5
    assert read_topic(topic) == lines

    # When lines are appended and the DAG runs again
    more = write_lines(log_file, 5, 3)
    second = run_dag(dag)

    # Then only the new lines move, from where the first run stopped
    assert second.state == "success", second.states()
    summary2 = second.xcom(f"{group}.finish")
    assert summary2["records"] == 3
    [part2] = summary2["partitions"]
    assert part2["offset_before"] == part["offset_after"]
    assert part2["offset_after"]["position"] == log_file.stat().st_size
    assert second.xcom(f"{group}.plan", key="plan")["offsets"] == [
        {"partition": {"filename": str(log_file)}, "offset": part["offset_after"]}]
    assert read_topic(topic) == lines + more


def test_invalid_config_fails_the_plan_with_every_problem_and_runs_nothing(
        make_dag, run_dag, tmp_path, unique, test_worker_config):
    # Given a config with five bad keys, in a DAG whose tasks would be retried twice
    config = {"name": f"bad-{unique}", "connector.class": SOURCE, "file": str(tmp_path / "x.log"),
              "tasks.max": 0, "batch.size": "abc", "encoding": "utf-16", "errors.tolerance": "sometimes"}
    group = f"bad-{unique}"
    dag = make_dag(f"invalid_{unique}", config, default_args={"retries": 2, "retry_delay": 1},
                   worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the plan fails at once, without retries, naming every problem; nothing else runs
    assert result.state == "failed"
    assert result.states() == {(f"{group}.plan", -1): "failed", (f"{group}.run", -1): "upstream_failed",
                               (f"{group}.finish", -1): "upstream_failed"}
    assert result.try_number(f"{group}.plan") == 1
    assert "5 problem(s)" in result.log
    for problem in ("tasks.max=0", "batch.size='abc'", "encoding='utf-16'", "errors.tolerance='sometimes'",
                    "topic=(absent): is required"):
        assert problem in result.log
    assert "Running group" not in result.log and "spark-submit" not in result.log.lower()
    assert [k for _, _, k, _ in result.xcoms()] == []


def test_a_bad_max_tasks_is_named_with_the_configs_problems_and_fails_without_retries(
        make_dag, run_dag, tmp_path, unique, test_worker_config):
    # Given a DAG whose templated max_tasks renders to text, whose config also has a bad key, and which
    # would be retried twice
    group = f"count-{unique}"
    config = {"name": group, "connector.class": SOURCE, "file": str(tmp_path / "x.log"), "topic": "t",
              "tasks.max": 0}
    dag = make_dag(f"count_{unique}", config, params={"n": "abc"}, max_tasks="{{ params.n }}",
                   default_args={"retries": 2, "retry_delay": 1}, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the plan fails once, naming the parameter and the config's problem together
    assert result.states()[(f"{group}.plan", -1)] == "failed"
    assert result.try_number(f"{group}.plan") == 1
    assert "2 problem(s)" in result.log
    assert "max_tasks='abc': must be an integer" in result.log and "tasks.max=0: must be at least 1" in result.log


def test_an_unusable_airflow_connection_is_named_with_the_configs_other_problems(
        make_dag, run_dag, unique, test_worker_config):
    # Given a JDBC source naming a connection that does not exist, with two bad keys of its own, retried twice
    group = f"noconn-{unique}"
    config = {"name": group, "connector.class": "JdbcSource", "airflow.conn.id": f"no_such_{unique}",
              "mode": "nope", "tasks.max": 0, "topic.prefix": "p-", "table.whitelist": "t"}
    dag = make_dag(f"noconn_{unique}", config, default_args={"retries": 2, "retry_delay": 1},
                   worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the plan fails once, naming the connection and the other two problems together
    assert result.states()[(f"{group}.plan", -1)] == "failed"
    assert result.try_number(f"{group}.plan") == 1
    assert "3 problem(s)" in result.log
    for problem in (f"airflow.conn.id='no_such_{unique}': is not a usable Airflow connection",
                    "mode='nope': must be one of", "tasks.max=0: must be at least 1"):
        assert problem in result.log


def test_a_kafka_connection_the_hook_refuses_is_named_with_the_configs_problems(
        make_dag, run_dag, tmp_path, unique, kafka_bootstrap, monkeypatch, test_worker_config):
    # Given a Kafka connection naming a callback that is not allowlisted, and a config with a bad key, retried twice
    conn_id = f"kafka_cb_{unique}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap, "error_cb": "my.mod.cb"}}))
    group = f"cb-{unique}"
    config = {"name": group, "connector.class": SOURCE, "file": str(tmp_path / "x.log"), "topic": "t", "tasks.max": 0}
    dag = make_dag(f"cb_{unique}", config, kafka_conn_id=conn_id, default_args={"retries": 2, "retry_delay": 1},
                   worker_config=test_worker_config)

    # When it runs, Then the plan fails once, naming the connection and the config's problem together
    result = run_dag(dag)
    assert result.states()[(f"{group}.plan", -1)] == "failed"
    assert result.try_number(f"{group}.plan") == 1
    assert f"kafka_conn_id='{conn_id}': is not usable: Refusing to resolve Kafka callback" in result.log
    assert "tasks.max=0: must be at least 1" in result.log


def test_a_config_that_cannot_be_read_fails_the_plan_without_retries(run_dag, unique, kafka_conn):
    # Given a plan operator (used directly) whose connector config is JSON text that is not JSON, retried twice
    import importlib.util
    from pathlib import Path

    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / f"unreadable_{unique}.py"
    path.write_text(f"""
import pendulum
from airflow.sdk import DAG
from airflow_copycat.operators.plan import CopycatPlanOperator

with DAG(dag_id="unreadable_{unique}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    CopycatPlanOperator(task_id="plan", connector_config="{{not json", retries=2, retry_delay=1)
""", encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"unreadable_{unique}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    # When it runs, Then the plan fails once, saying which parameter cannot be read
    result = run_dag(module.dag)
    assert result.states()[("plan", -1)] == "failed"
    assert result.try_number("plan") == 1
    assert "connector_config cannot be read: JSONDecodeError" in result.log


def test_secrets_reach_the_task_but_no_xcom_file_or_log(
        make_dag, run_dag, tmp_path, unique, kafka_bootstrap, read_topic, test_worker_config):
    # Given a connector with a PASSWORD key Airflow does not know by name, and a pass-through
    # key named like a password; the connector logs both (carelessly)
    credential, password = f"cred-{unique}-value", f"s3cr3t-{unique}-value"
    topic = f"cred-{unique}"
    group = f"cred-{unique}"
    config = {"name": group, "connector.class": "tests.support.airflow_connectors:CredentialSource",
              "topic": topic, "api.credential": credential, "connection.password": password}
    dag = make_dag(f"secrets_{unique}", config, in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the task received the real values (it published their fingerprints)
    assert result.state == "success", result.states()
    [received] = [json.loads(v) for v in read_topic(topic)]
    assert received == {"api.credential": fingerprint(credential), "connection.password": fingerprint(password)}
    # ... no XCom holds them: the plan and its groups say [hidden]
    xcoms = result.xcoms()
    assert {(t, k) for t, _, k, _ in xcoms} == {(f"{group}.plan", "plan"), (f"{group}.plan", "return_value"),
                                              (f"{group}.plan", "live_assignment"),
                                              (f"{group}.run", "return_value"), (f"{group}.finish", "return_value"),
                                              (f"{group}.run", "_link_SparkApplicationLink")}  # "" in process
    for _, _, _, value in xcoms:
        assert credential not in json.dumps(value) and password not in json.dumps(value)
    plan = result.xcom(f"{group}.plan", key="plan")
    assert plan["config"]["api.credential"] == plan["config"]["connection.password"] == HIDDEN
    for task in (t for g in plan["groups"] for t in g["tasks"]):
        assert task["config"]["api.credential"] == task["config"]["connection.password"] == HIDDEN
    # ... the group JSON written for spark-submit is made from those groups
    for g in plan["groups"]:
        path = submit.write_json(g, str(tmp_path / f"group-{g['group']}.json"))
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert HIDDEN in text and credential not in text and password not in text
    # ... copycat itself never logged them: only the careless connector did ...
    leaking = [line for line in result.log.splitlines() if credential in line or password in line]
    assert leaking and all("CredentialTask connecting" in line for line in leaking)
    # ... and Airflow's secrets masker, which the task supervisor applies to every line of the
    # task log (dag.test prints unmasked), knows both values: the task log shows ***
    task_log = redact(result.log)
    assert "api.credential=*** connection.password=***" in task_log
    assert credential not in task_log and password not in task_log
    # ... and the rendered config (shown in the UI) hides the key Airflow knows by name
    rendered = result.rendered_fields(f"{group}.run", map_index=0)
    assert password not in json.dumps(rendered)


_DAG_TEST_IN_A_FRESH_PROCESS = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = module.dag.test()
print(json.dumps({"run_id": run.run_id, "state": str(getattr(run.state, "value", run.state))}))
"""


def _rendered_fields(dag_id: str, run_id: str) -> dict[tuple[str, int], str]:
    """``{(task_id, map_index): rendered fields as stored, JSON}`` of every task instance of a run."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(RenderedTaskInstanceFields).filter_by(dag_id=dag_id, run_id=run_id).all()
        return {(r.task_id, r.map_index): json.dumps(r.rendered_fields, default=str) for r in rows}


def test_the_configs_secrets_are_masked_in_the_rendered_fields_airflow_stores_before_execute(
        make_dag, unique, test_worker_config):
    """Airflow stores a task's rendered template fields (the UI's "Rendered Template") before execute()
    runs. Each task runs in a fresh process, as a real worker's do, so no earlier task of the run has
    registered the secrets: the operators must do it when the fields are rendered."""
    import subprocess
    import sys
    from pathlib import Path

    # Given secrets Airflow does not know by name: a PASSWORD key, a URL password (no user name), a
    # schema registry's user info, storage options as JSON text, and a worker property named like a secret
    credential, url_pw, info, option, worker_info = (f"{what}-{unique}-value" for what in
                                                     ("cred", "urlpw", "info", "opt", "winfo"))
    group = f"rendered-{unique}"
    config = {"name": group, "connector.class": "tests.support.airflow_connectors:CredentialSource",
              "topic": f"rendered-{unique}", "api.credential": credential,
              "callback.url": f"https://:{url_pw}@hooks.example/notify",
              "value.converter.basic.auth.user.info": f"sr:{info}",
              "store.options": json.dumps({"region": "eu-west-1", "secret": option})}
    worker_config = {**test_worker_config, "value.converter.basic.auth.user.info": f"w:{worker_info}"}
    dag = make_dag(f"rendered_{unique}", config, in_process=True, worker_config=worker_config)
    dag_file = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / f"rendered_{unique}.py"

    # When the DAG runs in a fresh interpreter
    proc = subprocess.run([sys.executable, "-c", _DAG_TEST_IN_A_FRESH_PROCESS, str(dag_file)], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[2], env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert run["state"] == "success", proc.stdout[-3000:]

    # Then the rendered fields stored for the plan, the (mapped) run and the finish tasks hold no secret
    rendered = _rendered_fields(dag.dag_id, run["run_id"])
    assert {(f"{group}.plan", -1), (f"{group}.run", 0), (f"{group}.finish", -1)} <= set(rendered)
    for task, fields in rendered.items():
        for secret in (credential, url_pw, info, option, worker_info):
            assert secret not in fields, (task, secret)
    assert '"callback.url": "***"' in rendered[(f"{group}.plan", -1)]
    assert "***" in rendered[(f"{group}.run", 0)]


_RENDER_IN_A_FRESH_PROCESS = """
import json, sys
from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields
from airflow_copycat.operators.copy import CopycatCopyPlanOperator, CopycatCopyPublishOperator
from airflow_copycat.operators.finish import CopycatFinishOperator
from airflow_copycat.operators.run import CopycatRunTaskGroupOperator
from airflow_copycat.sensors.partitions import CopycatPartitionSensor
connector, copy, worker = (json.loads(a) for a in sys.argv[1:4])
operators = [
    CopycatRunTaskGroupOperator(task_id="run", group={"group": 0}, connector_config=connector, worker_config=worker),
    CopycatPartitionSensor(task_id="sensor", connector_config=connector, worker_config=worker),
    CopycatFinishOperator(task_id="finish", plan_task_id="p", run_task_id="r", connector="c", worker_config=worker),
    CopycatCopyPlanOperator(task_id="copy_plan", copy_config=copy),
    CopycatCopyPublishOperator(task_id="copy_publish", copy_config=copy, plan_task_id="p", run_task_id="r", name="c"),
]
out = {}
for op in operators:  # what the task runner does before execute(): render, then serialise for storage
    op.render_template_fields({})
    out[op.task_id] = _serialize_rendered_fields(op)
print(json.dumps(out))
"""


def test_every_operator_and_the_sensor_mask_their_configs_secrets_when_rendered(unique):
    """The run, copy plan, copy publish and finish operators and the partition sensor, each alone in a
    fresh interpreter (as in a task process): the fields the task runner would store hold no secret."""
    import subprocess
    import sys
    from pathlib import Path

    secrets = {what: f"{what}-{unique}-value" for what in ("cred", "jaas", "info", "urlpw", "s3", "age", "worker")}
    connector = {"name": "x", "connector.class": "JdbcSource",
                 "connection.url": f"postgresql://:{secrets['urlpw']} x@127.0.0.1:5432/test",
                 "sasl.jaas.config": f'PlainLoginModule required username="u" password="{secrets["jaas"]}";',
                 "value.converter.basic.auth.user.info": f"sr:{secrets['info']}", "api.credential": secrets["cred"]}
    copy = {"name": "c", "source.url": "s3://bucket/in", "target.url": f"sftp://m:{secrets['urlpw']}@host/out",
            "source.options": json.dumps({"key": "AKIAEXAMPLE", "secret": secrets["s3"]}),
            "encryption.identity": f"AGE-SECRET-KEY-{secrets['age']}"}
    worker = {"sasl.jaas.config": f'... password="{secrets["worker"]}";', "bootstrap.servers": "h:9092"}
    proc = subprocess.run([sys.executable, "-c", _RENDER_IN_A_FRESH_PROCESS, json.dumps(connector), json.dumps(copy),
                           json.dumps(worker)], capture_output=True, text=True, timeout=180,
                          cwd=Path(__file__).resolve().parents[2], env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    stored = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(stored) == {"run", "sensor", "finish", "copy_plan", "copy_publish"}
    for task, fields in stored.items():
        text = json.dumps(fields)
        assert "***" in text, task
        for secret in secrets.values():
            assert secret not in text, (task, secret)
    assert stored["copy_plan"]["copy_config"]["source.url"] == "s3://bucket/in"  # no secret: shown
    assert stored["run"]["worker_config"]["bootstrap.servers"] == "h:9092"


def test_a_task_error_quoting_a_secret_reaches_xcom_and_the_exception_scrubbed(
        make_dag, run_dag, unique, test_worker_config):
    # Given a connector whose client fails quoting its PASSWORD key's value, a name Airflow does not mask
    credential = f"cred-{unique}-refused"
    group = f"refused-{unique}"
    config = {"name": group, "connector.class": "tests.support.airflow_connectors:RefusedSource",
              "topic": f"refused-{unique}", "api.credential": credential}
    dag = make_dag(f"refused_{unique}", config, in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the run task fails with the client's error, the secret in it hidden: in XCom failed_result ...
    assert result.states()[(f"{group}.run", 0)] == "failed"
    failed = result.xcom(f"{group}.run", key="failed_result", map_index=0)
    assert failed["tasks"][0]["error"] == f"PermissionError: the API refused credential {HIDDEN} (expired)"
    for _, _, _, value in result.xcoms():
        assert credential not in json.dumps(value)
    # ... and in the exception that failed the task (its text, as the run printed it)
    raised = [line for line in result.log.splitlines() if "task 0 of group 0:" in line]
    assert raised and all(credential not in line and HIDDEN in line for line in raised)


def test_finish_emits_an_asset_event_for_the_topic_through_the_connector_alias(
        make_dag, run_dag, tmp_path, unique, kafka_bootstrap, read_topic, test_worker_config):
    # Given a file source DAG
    log_file = tmp_path / "app.log"
    write_lines(log_file, 0, 7)
    topic = f"assets-{unique}"
    group = f"lines-{unique}"
    dag = make_dag(f"assets_{unique}", file_source(unique), params={"input": str(log_file), "topic": topic},
                   in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the finish task announced the topic, with the record count
    assert result.state == "success", result.states()
    assert result.asset_events() == [{
        "uri": f"kafka://{kafka_bootstrap.split(',')[0]}/{topic}",
        "extra": {"connector": group, "records": 7},
        "task_id": f"{group}.finish",
        "aliases": [f"copycat/{group}"],
    }]


def test_two_groups_run_as_two_mapped_task_instances(
        make_dag, run_dag, tmp_path, unique, kafka_bootstrap, read_topic, test_worker_config):
    # Given two files, two tasks and at most two groups
    for name, n in (("a.log", 4), ("b.log", 6)):
        write_lines(tmp_path / name, 0, n)
    topic = f"mapped-{unique}"
    group = f"lines-{unique}"
    config = file_source(unique, **{"tasks.max": 2, "copycat.groups.max": 2})
    dag = make_dag(f"mapped_{unique}", config, params={"input": str(tmp_path / "*.log"), "topic": topic},
                   in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the run task has map indexes 0 and 1, one task each, and finish adds them up
    assert result.state == "success", result.states()
    assert {k: v for k, v in result.states().items() if k[0] == f"{group}.run"} == {
        (f"{group}.run", 0): "success", (f"{group}.run", 1): "success"}
    by_group = [result.xcom(f"{group}.run", map_index=i) for i in (0, 1)]
    assert [(g["group"], len(g["tasks"])) for g in by_group] == [(0, 1), (1, 1)]
    assert sorted(g["records"] for g in by_group) == [4, 6]
    summary = result.xcom(f"{group}.finish")
    assert (summary["groups"], summary["tasks"], summary["records"]) == (2, 2, 10)
    assert len(read_topic(topic)) == 10


def test_connector_config_and_counts_are_rendered_from_params_and_run_conf(
        make_dag, run_dag, tmp_path, unique, test_worker_config):
    # Given a DAG whose file and task count are templates over its params
    default, chosen = tmp_path / "default.log", tmp_path / "chosen.log"
    write_lines(default, 0, 1)
    write_lines(chosen, 0, 2)
    group = f"lines-{unique}"
    dag = make_dag(f"templated_{unique}", file_source(unique),
                   params={"input": str(default), "topic": f"templated-{unique}", "tasks": 3},
                   in_process=True, worker_config=test_worker_config, max_tasks="{{ params.tasks }}")

    # When it runs with the defaults, then with another file in the run's conf
    by_default = run_dag(dag)
    by_conf = run_dag(dag, run_conf={"input": str(chosen)})

    # Then each plan read the file its run named, and the rendered config shows it
    assert by_default.state == by_conf.state == "success"
    assert by_default.xcom(f"{group}.plan", key="plan")["partitions"] == [{"filename": str(default)}]
    assert by_conf.xcom(f"{group}.plan", key="plan")["partitions"] == [{"filename": str(chosen)}]
    assert by_conf.xcom(f"{group}.finish")["records"] == 2
    rendered = by_conf.rendered_fields(f"{group}.plan")
    assert rendered["connector_config"]["file"] == str(chosen)
    assert rendered["max_tasks"] == "3"


def test_nothing_to_copy_still_finishes_with_an_empty_summary(
        make_dag, run_dag, tmp_path, unique, test_worker_config):
    # Given a glob that matches no file yet
    group = f"lines-{unique}"
    dag = make_dag(f"empty_{unique}", file_source(unique),
                   params={"input": str(tmp_path / "*.log"), "topic": f"empty-{unique}"},
                   in_process=True, worker_config=test_worker_config)

    # When it runs
    result = run_dag(dag)

    # Then the plan has no groups, the run is skipped, and finish records that nothing moved
    assert result.state == "success", result.states()
    assert result.states() == {(f"{group}.plan", -1): "success", (f"{group}.run", -1): "skipped",
                               (f"{group}.finish", -1): "success"}
    summary = result.xcom(f"{group}.finish")
    assert (summary["status"], summary["records"], summary["groups"], summary["partitions"]) == ("ok", 0, 0, [])
    assert result.asset_events() == []


def test_replanning_keeps_files_on_their_task_across_runs(
        make_dag, run_dag, tmp_path, unique, test_worker_config):
    # Given two files over two tasks, planned and run twice
    write_lines(tmp_path / "b.log", 0, 1)
    write_lines(tmp_path / "c.log", 0, 1)
    group = f"lines-{unique}"
    dag = make_dag(f"sticky_{unique}", file_source(unique, **{"tasks.max": 2}),
                   params={"input": str(tmp_path / "*.log"), "topic": f"sticky-{unique}"},
                   in_process=True, worker_config=test_worker_config)
    run_dag(dag)
    second = run_dag(dag)

    # When a file that sorts first appears and the third run re-plans
    write_lines(tmp_path / "a.log", 0, 1)
    third = run_dag(dag)

    # Then the known files stay on the task they had (a fresh round-robin would move them)
    def assignment(result):
        plan = result.xcom(f"{group}.plan", key="plan")
        tasks = sorted((t for g in plan["groups"] for t in g["tasks"]), key=lambda t: t["task"])
        return [sorted(os.path.basename(p["filename"]) for p in t["partitions"]) for t in tasks]

    assert assignment(second) == [["b.log"], ["c.log"]]
    assert assignment(third) in ([["a.log", "b.log"], ["c.log"]], [["b.log"], ["a.log", "c.log"]])
    assert third.xcom(f"{group}.finish")["records"] == 1


def test_the_task_log_shows_progress_while_the_group_runs_in_process(make_dag, run_dag, unique, test_worker_config):
    # Given a source whose two tasks take about a second each, and a worker config asking for progress every 0.3 s
    name = f"progress-{unique}"
    config = {"name": name, "connector.class": "tests.support.connectors:PacedSource", "topic": name,
              "counters": 2, "count": 80, "batch": 10, "pause.ms": 100, "tasks.max": 2}
    dag = make_dag(f"progress_{unique}", config, in_process=True,
                   worker_config=dict(test_worker_config, **{"progress.interval.ms": 300}))
    # When it runs
    result = run_dag(dag)
    # Then the run task's log showed progress while it ran: records growing, tasks done of total
    assert result.state == "success", result.states()
    lines = progress_lines(result.log, 0, name)
    assert len(lines) >= 2, result.log[-5000:]
    counts = [line.count for line in lines]
    assert counts == sorted(counts) and any(0 < c < 160 for c in counts), counts
    assert {line.total for line in lines} == {2} and any(line.done == 1 for line in lines), lines
    # And a last line with what the group moved, as its result says
    run_result = result.xcom(f"{name}.run", map_index=0)
    assert run_result["records"] == 160
    assert final_line(result.log, 0, name) == Line(2, 2, 160)


def test_a_run_task_without_its_spark_connection_runs_on_local_and_changes_no_environment(unique, monkeypatch):
    # Given a run task whose Spark connection is defined nowhere, and one whose connection is Spark Connect
    from airflow_copycat.operators.run import CopycatRunTaskGroupOperator, submit_hook_class

    missing, connect = f"no_spark_{unique}", f"sc_{unique}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{connect.upper()}", '{"conn_type": "spark_connect", "host": "sc.example", "port": 15002}')
    before = dict(os.environ)

    def run_task(conn_id):
        return CopycatRunTaskGroupOperator(task_id=f"run_{conn_id}", group={}, connector_config={}, spark_conn_id=conn_id)

    # When they look up where to run
    # Then the first submits to local[*] (not to the Spark provider's default, yarn) and the second to Spark Connect
    assert run_task(missing)._spark_conn_type() == "spark"
    assert run_task(missing)._spark_master() == ("local[*]", None)
    assert submit_hook_class()(conn_id=missing)._connection["master"] == "local[*]"
    assert run_task(connect)._spark_conn_type() == "spark_connect"
    # And no connection was written into the task process's environment
    assert dict(os.environ) == before
