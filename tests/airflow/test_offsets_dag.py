"""The maintenance DAG dags/copycat_offsets.py under real Airflow (dag.test()), the real broker and the real
metadata DB: list, reset and delete offsets from its Params form, and its refusal while a run of the
connector's DAG is queued or running (a real DagRun row, backfill runs included)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import uuid
from pathlib import Path

import pendulum
import pytest


from .conftest import DAGS_FOLDER

pytestmark = pytest.mark.slow

REPO_DAGS = Path(__file__).resolve().parents[2] / "dags"
A = {"filename": "/var/log/app/a.log"}
B = {"filename": "/var/log/app/b.log"}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"copycat_test_dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


@pytest.fixture
def dag():
    """The real maintenance DAG file, and the real log-tailing DAG it guards, in the dags folder."""
    shutil.copy(REPO_DAGS / "copycat_offsets.py", DAGS_FOLDER / "copycat_offsets.py")
    shutil.copy(REPO_DAGS / "logs_to_kafka.py", DAGS_FOLDER / "logs_to_kafka.py")
    (DAGS_FOLDER / "connectors").mkdir(exist_ok=True)
    shutil.copy(REPO_DAGS / "connectors" / "app-logs.json", DAGS_FOLDER / "connectors" / "app-logs.json")
    return _load(DAGS_FOLDER / "copycat_offsets.py")


def _conf(action, partition="", offset="", force=False):
    """The whole form, as the UI sends it (dag.test() would otherwise keep an earlier run's values)."""
    return {"connector": "app-logs", "action": action, "force": force,
            "partition": partition if isinstance(partition, str) else json.dumps(partition),
            "offset": offset if isinstance(offset, str) else json.dumps(offset)}


def _offsets(store) -> dict:
    return {json.dumps(e["partition"], sort_keys=True): e["offset"] for e in store.read("app-logs").values()}


def test_the_form_offers_the_connectors_and_actions(dag):
    params = dag.params
    assert dag.schedule is None  # manual only
    assert set(params.get_param("connector").schema["enum"]) >= {"app-logs", "shop-orders"}
    assert params.get_param("action").schema["enum"] == ["list", "reset", "delete"]
    assert params["action"] == "list" and params["force"] is False


def test_list_reset_and_delete_from_the_form(dag, store, run_dag, secret):
    store.write("app-logs", [(A, {"position": 700}), (B, {"position": 90})])

    # list: a table in the log, the offsets in XCom
    listed = run_dag(dag, run_conf=_conf("list"))
    assert listed.state == "success"
    value = listed.xcom("offsets")
    assert value["connector"] == "app-logs"
    assert value["offsets"] == [{"partition": A, "offset": {"position": 700}}, {"partition": B, "offset": {"position": 90}}]
    assert '{"filename":"/var/log/app/a.log"} | {"position":700}' in listed.log

    # reset A: before/after in XCom and log, and the store now returns the new value
    reset = run_dag(dag, run_conf=_conf("reset", A, {"position": 3}))
    assert reset.state == "success"
    result = reset.xcom("offsets")
    assert (result["action"], result["partition"], result["before"], result["after"]) == (
        "reset", A, {"position": 700}, {"position": 3})
    assert 'before: {"position":700}' in reset.log and 'after:  {"position":3}' in reset.log
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 3},
                               json.dumps(B, sort_keys=True): {"position": 90}}

    # delete B: a tombstone; the store no longer returns it
    deleted = run_dag(dag, run_conf=_conf("delete", B))
    assert deleted.state == "success"
    assert (deleted.xcom("offsets")["before"], deleted.xcom("offsets")["after"]) == ({"position": 90}, None)
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 3}}

    for run in (listed, reset, deleted):  # the connection's password is nowhere
        assert secret not in run.log
        assert secret not in json.dumps(run.xcoms())


@pytest.mark.parametrize("conf, named", [
    (_conf("reset", "{filename: a.log}", {"position": 0}), "partition='{filename: a.log}': not valid JSON"),
    (_conf("reset", A, "[0]"), "offset='[0]': must be a JSON object"),
    (_conf("delete", {"filename": "/var/log/app/typo.log"}), "has no committed offset for connector 'app-logs'"),
])
def test_a_bad_request_fails_naming_the_param_and_changes_nothing(dag, store, run_dag, conf, named):
    store.write("app-logs", [(A, {"position": 700})])
    run = run_dag(dag, run_conf=conf)
    assert run.state == "failed"
    assert named in run.log
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 700}}


def test_force_writes_an_offset_for_a_partition_without_one(dag, store, run_dag):
    store.write("app-logs", [(A, {"position": 700})])
    run = run_dag(dag, run_conf=_conf("reset", B, {"position": 10}, force=True))
    assert run.state == "success"
    assert _offsets(store)[json.dumps(B, sort_keys=True)] == {"position": 10}


@pytest.fixture
def blocking_run():
    """``blocking_run(dag_id, run_type, state)``: a real DagRun of ``dag_id`` in the metadata DB (the DAG
    synced from the dags folder, as the DAG processor does); deleted afterwards."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dagrun import DagRun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    created = []

    def make(dag_id: str, run_type: str, state: str) -> str:
        manager = DagBundlesManager()
        manager.sync_bundles_to_db()
        for bundle in manager.get_all_dag_bundles():
            if not bundle.is_initialized:
                bundle.initialize()
            sync_bag_to_db(BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name),
                           bundle.name, bundle.version)
        now = pendulum.now("UTC")
        run_id = f"{run_type}__blocking_{uuid.uuid4().hex[:8]}"
        with create_session() as session:
            sdag = SerializedDagModel.get_dag(dag_id, session=session)
            assert sdag is not None, f"{dag_id} was not synced to the metadata DB"
            sdag.create_dagrun(run_id=run_id, logical_date=now, data_interval=(now.subtract(hours=1), now),
                               run_after=now, run_type=DagRunType(run_type), state=state,
                               triggered_by=DagRunTriggeredByType.TEST, session=session)
        created.append((dag_id, run_id))
        return run_id

    yield make
    with create_session() as session:
        for dag_id, run_id in created:
            session.query(DagRun).filter_by(dag_id=dag_id, run_id=run_id).delete()


def _set_state(dag_id: str, run_id: str, state: str) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(DagRun).filter_by(dag_id=dag_id, run_id=run_id).one().state = state


@pytest.mark.parametrize("run_type, state", [("manual", "running"), ("scheduled", "queued"),
                                             ("backfill", "running")])
def test_a_change_is_refused_while_a_run_of_the_connector_is_in_progress(dag, store, run_dag, blocking_run,
                                                                          run_type, state):
    store.write("app-logs", [(A, {"position": 700}), (B, {"position": 90})])
    # Given a run of the DAG that tails app-logs, queued or running
    run_id = blocking_run("copycat_logs_to_kafka", run_type, state)

    # When the operator resets or deletes a partition, the run fails and nothing is written
    for conf in (_conf("reset", A, {"position": 0}), _conf("delete", B)):
        refused = run_dag(dag, run_conf=conf)
        assert refused.state == "failed"
        assert "refusing to change offsets of connector 'app-logs'" in refused.log
        assert f"DAG copycat_logs_to_kafka: 1 {state}" in refused.log
        assert "Nothing was written" in refused.log
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 700},
                               json.dumps(B, sort_keys=True): {"position": 90}}
    # Listing is still allowed (it reads only), with a warning
    listed = run_dag(dag, run_conf=_conf("list"))
    assert listed.state == "success" and "offsets may move while these runs are in progress" in listed.log

    # When that run has finished, the same change goes through
    _set_state("copycat_logs_to_kafka", run_id, "success")
    assert run_dag(dag, run_conf=_conf("reset", A, {"position": 0})).state == "success"
    assert _offsets(store)[json.dumps(A, sort_keys=True)] == {"position": 0}


def test_the_next_run_of_the_connector_starts_from_the_offset_reset_in_the_form(dag, store, run_dag, make_dag,
                                                                                 read_topic, tmp_path, unique):
    # Given a DAG tailing a file as connector app-logs, which copied five lines
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(5)))
    topic = f"app-logs-{unique}"
    tail = make_dag(f"tail_{unique}", {"name": "app-logs", "connector.class": "FileStreamSource", "file": str(log),
                                       "topic": topic}, in_process=True)
    assert run_dag(tail).state == "success"
    # When the operator lists the offsets and resets the file's position to the start of line 3
    (row,) = run_dag(dag, run_conf=_conf("list")).xcom("offsets")["offsets"]
    assert row["offset"]["position"] == 35
    reset = run_dag(dag, run_conf=_conf("reset", row["partition"], {**row["offset"], "position": 21}))
    assert reset.state == "success"
    # Then the next run of the connector copies lines 3 and 4 again
    assert run_dag(tail).state == "success"
    assert read_topic(topic) == [f"line {i}" for i in range(5)] + ["line 3", "line 4"]
