"""Parse once: the plan step validates a connector config once and records what it learnt as the
groups' spec (runtime/spec.py); the run step reads the spec and only restores secret values. Counted
through a real plan and run in process, against the test broker and a real SQLite table."""

from __future__ import annotations

import json
import os

import pytest

from airflow_copycat.connect import ConfigDef, Schema, SourceConnector, SourceRecord, SourceTask

from airflow_copycat.runtime import windows
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.jobs import CONNECTOR_JOB
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.settings import FrameworkSettings
from airflow_copycat.runtime.spec import SPEC_FORMAT, ConnectorSpec, spec_of_group
from airflow_copycat.runtime.worker import WorkerConfig
from tests.runtime.test_windows import H10, H11, Shop, _config, _window
from tests.support import parse_counts


@pytest.fixture
def sqlite_shop(tmp_path, unique):
    s = Shop(f"sqlite:///{tmp_path}/shop.db", f"p{unique}_")
    yield s
    s.close()


def _file_source(tmp_path, unique, **extra) -> dict:
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(5)), encoding="utf-8")
    return {"name": f"once-{unique}", "connector.class": "FileStreamSource", "file": str(log),
            "topic": f"once-{unique}", **extra}


def test_a_windowed_plan_and_its_run_validate_once_and_read_the_window_once(sqlite_shop, worker_props, unique,
                                                                            monkeypatch):
    # Given orders inside and outside a window, and a windowed JDBC config whose value converter it sets itself
    sqlite_shop.add_orders([H10.replace(minute=5), H11.replace(minute=5)])
    cfg = _window(_config(sqlite_shop, unique, **{"value.converter": "JsonConverter",
                                                  "errors.tolerance": "all", "copycat.run.max.records": 1000}),
                  H10, H11)
    worker = WorkerConfig(worker_props, env={})
    counts = parse_counts.install(monkeypatch)

    # When it is planned and every group runs
    plan = make_plan(cfg, worker)
    planned = dict(counts.calls)
    tasks = [t for g in plan["groups"] for t in run_group(g, worker_props)["tasks"]]

    # Then it ran, and copied the window's order
    assert [t["status"] for t in tasks] == ["ok", "ok"], tasks
    assert sum(t["records"] for t in tasks) == 1
    # ... the config was validated once, its framework keys parsed once, by the plan step
    assert counts.calls["validate"] == 1, counts
    assert counts.calls["framework keys parsed"] == 1, counts
    assert counts.calls["FrameworkSettings.of"] == 0, counts
    # ... the window was read from its ISO text once outside validation, by the planner; the run step
    # read the spec (the JDBC task reads its own window: that is the connector's, not the framework's)
    runtime_reads = {c: n for c, n in counts.callers["window_bounds"].items()
                     if c.startswith("airflow_copycat/runtime/") and "connector_config.py" not in c}
    assert sum(runtime_reads.values()) == 1 and all("runtime/plan.py" in c for c in runtime_reads), counts
    # ... and at plan time each converter was built once (the connector's value converter by validation,
    # the worker's key converter by the client check), at run time once per task and side
    assert planned["make_converter"] == 2, counts
    assert counts.calls["make_converter"] - planned["make_converter"] == 2 * len(tasks), counts
    # ... the plan's groups carry the spec, with the window typed and the settings the run used
    spec = spec_of_group(plan["groups"][0])
    assert spec is not None and spec.window is not None
    assert (spec.window.start, spec.window.end) == (H10, H11)
    assert spec.offsets_name == spec.window.offsets_namespace == plan["window"]["offsets_namespace"]
    assert spec.offsets_name.startswith(f"shop-{unique}{windows.WINDOW_SEPARATOR}")
    assert spec.settings.tolerate_errors and spec.settings.run_max_records == 1000
    assert spec.settings == FrameworkSettings.of(plan["groups"][0]["tasks"][0]["config"])


def test_the_spec_names_secret_keys_but_holds_no_secret_value(tmp_path, worker_props, unique, monkeypatch):
    # Given a config with a secret by name and a URL password
    cfg = _file_source(tmp_path, unique, **{"api.token": "tok-0123456789abcdef",
                                            "note.url": "https://user:pw-9876543210@example.com/x"})
    counts = parse_counts.install(monkeypatch)

    # When it is planned
    plan = make_plan(cfg, WorkerConfig(worker_props, env={}))

    # Then every group carries one spec naming both keys, and no value of either is anywhere in the plan
    docs = [g["spec"] for g in plan["groups"]]
    assert docs and all(d == docs[0] for d in docs) and docs[0]["format"] == SPEC_FORMAT
    assert {"api.token", "note.url"} <= set(docs[0]["secret_keys"])
    text = json.dumps(plan)
    assert "tok-0123456789abcdef" not in text and "pw-9876543210" not in text
    # ... the spec survives JSON (XCom, the group file) as it was made
    spec = ConnectorSpec.from_json(json.loads(json.dumps(docs[0])))
    assert spec == spec_of_group(plan["groups"][0]) and spec.window is None and spec.offsets_name == cfg["name"]
    assert spec.kind == "source" and spec.connector_class.endswith(":FileStreamSourceConnector")
    assert counts.calls["validate"] == 1, counts


def test_a_group_without_a_spec_still_runs_from_its_task_configs(tmp_path, worker_props, unique, monkeypatch):
    # Given a plan whose groups carry no spec (a plan made by the previous version)
    plan = make_plan(_file_source(tmp_path, unique), WorkerConfig(worker_props, env={}))
    old = [{k: v for k, v in g.items() if k != "spec"} for g in plan["groups"]]
    assert all(spec_of_group(g) is None for g in old)
    counts = parse_counts.install(monkeypatch)

    # When its groups run
    tasks = [t for g in old for t in run_group(g, worker_props)["tasks"]]

    # Then they copy the file, the settings coming from the task configs, as before; nothing is validated
    assert [t["status"] for t in tasks] == ["ok"] and tasks[0]["records"] == 5, tasks
    assert counts.calls["FrameworkSettings.of"] >= 1 and counts.calls["validate"] == 0, counts


def test_an_unreadable_spec_is_no_spec():
    assert spec_of_group({"spec": {"format": "copycat.spec/99"}}) is None
    assert spec_of_group({"spec": {"format": SPEC_FORMAT, "name": "x"}}) is None
    assert spec_of_group({"kind": "copy"}) is None


def test_naming_the_secret_keys_of_a_config_validates_nothing(monkeypatch):
    counts = parse_counts.install(monkeypatch)
    # a JDBC source's connection.password is a PASSWORD key of its class, found without validating (the
    # config lacks what the connector requires)
    assert "connection.password" in CONNECTOR_JOB.secret_keys(
        {"name": "j", "connector.class": "JdbcSource", "connection.password": "pw"})
    assert CONNECTOR_JOB.secret_keys({"name": "j", "connector.class": "NoSuchConnector", "db.token": "t"}) == {"db.token"}
    assert counts.calls["validate"] == 0, counts


def test_copycat_run_validates_each_config_once(capsys, tmp_path, kafka_bootstrap, unique, monkeypatch):
    # Given a connector config file and a worker file (the command checks every config before it plans any)
    from airflow_copycat import cli

    for key in [k for k in os.environ if k.startswith("COPYCAT_")]:
        monkeypatch.delenv(key)
    cfg = _file_source(tmp_path, unique)
    config = tmp_path / "once.json"
    config.write_text(json.dumps(cfg), encoding="utf-8")
    worker = tmp_path / "worker.properties"
    worker.write_text(f"bootstrap.servers={kafka_bootstrap}\noffset.storage.topic=copycat-offsets-{unique}\n"
                      "offset.storage.partitions=3\noffset.flush.interval.ms=1000\n", encoding="utf-8")
    counts = parse_counts.install(monkeypatch)

    # When `copycat run` plans and runs it in process
    rc = cli.main(["run", "--worker", str(worker), str(config), "--in-process", "--json"])

    # Then it copied the file, validating the config once: the plan reused the check's values
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["records"] == 5
    assert counts.calls["validate"] == 1 and counts.calls["FrameworkSettings.of"] == 0, counts


class BudgetPerTask(SourceConnector):
    """A connector whose task configs set their own record budget (3), not the connector's."""

    config_def = ConfigDef()

    def task_class(self):
        return _CountingTask

    def partitions(self):
        return [{"p": 0}]

    def task_configs(self, max_tasks):
        return [dict(c, **{"copycat.run.max.records": "3"}) for c in super().task_configs(max_tasks)]


class _CountingTask(SourceTask):
    def start(self, config):
        self.topic, self.n = config["topic"], 0

    def poll(self):
        if self.n >= 10:
            return None
        self.n += 1
        return [SourceRecord(topic=self.topic, value_schema=Schema.INT32, value=self.n, source_partition={"p": 0},
                             source_offset={"i": self.n})]

    def stop(self):
        pass


def test_a_framework_key_a_task_config_changes_is_still_read_from_the_task_config(worker_props, unique, caplog):
    # Given a connector budgeted to 7 records whose task configs set 3
    config = {"name": f"budget-{unique}", "connector.class": f"{__name__}:BudgetPerTask", "topic": f"budget-{unique}",
              "value.converter": "org.apache.kafka.connect.storage.StringConverter",
              "copycat.run.max.records": "7"}

    # When it is planned and run
    with caplog.at_level("WARNING", logger="airflow_copycat.plan"):
        plan = make_plan(config, WorkerConfig(worker_props, env={}))
    spec = spec_of_group(plan["groups"][0])
    (task,) = run_group(plan["groups"][0], worker_props)["tasks"]

    # Then the task keeps its own budget, as it did before plans carried a spec, and the plan says why
    assert spec is not None and spec.settings is None
    assert task["status"] == "ok" and task["records"] == 3, task
    assert "copycat.run.max.records" in caplog.text
