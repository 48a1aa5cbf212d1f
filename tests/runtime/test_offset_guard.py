"""The rule the maintenance DAG and the offsets page share (offset_admin.guarded_change): offsets change
only while no run of the connector is queued or running. Runs are what the caller's ``count`` reports
(the Task SDK in a task, the metadata DB in the API server; here a table of states, which is all either
hands over); the store is a real file store."""

from __future__ import annotations

import pytest

from airflow_copycat.runtime import offset_admin
from airflow_copycat.runtime.offsets import FileOffsetStore

A = {"filename": "a.log"}


@pytest.fixture
def store(tmp_path):
    s = FileOffsetStore(str(tmp_path / "offsets.json"))
    s.write("app", [(A, {"position": 70})])
    return s


def _runs(dags, *tables):
    """``count`` for ``dags`` answering from ``tables`` in turn, one table per check of all of them (the
    last table stays); a table maps (dag_id, state) to a number of runs."""
    calls = {"n": 0}
    per_check = len(dags) * len(offset_admin.IN_PROGRESS_STATES)

    def count(dag_id: str, state: str) -> int:
        table = tables[min(calls["n"] // per_check, len(tables) - 1)]
        calls["n"] += 1
        return table.get((dag_id, state), 0)

    return count


def test_a_change_with_no_run_in_progress_is_written_and_read_back(store):
    result = offset_admin.guarded_change(store, "app", ["tail", "replay"], "reset", A, {"position": 0},
                                         count=_runs(["tail", "replay"], {}))
    assert (result["before"], result["after"]) == ({"position": 70}, {"position": 0})
    assert store.read("app")[next(iter(store.read("app")))]["offset"] == {"position": 0}


def test_a_queued_or_running_run_of_any_of_its_dags_refuses_the_change_and_writes_nothing(store):
    busy = {("replay", "queued"): 1, ("tail", "running"): 2}
    with pytest.raises(offset_admin.OffsetChangeRefused) as refused:
        offset_admin.guarded_change(store, "app", ["tail", "replay"], "delete", A, count=_runs(["tail", "replay"], busy),
                                    retry="trigger this DAG again")
    assert str(refused.value) == (
        "refusing to change offsets of connector 'app': a run of it is in progress (DAG tail: 2 running; "
        "DAG replay: 1 queued). Nothing was written. Wait until those runs finish (or mark them failed), "
        "then trigger this DAG again.")
    assert refused.value.busy == {"tail": {"running": 2}, "replay": {"queued": 1}}
    assert [e["offset"] for e in store.read("app").values()] == [{"position": 70}]


def test_a_run_that_started_during_the_change_is_reported_with_what_was_written(store):
    with pytest.raises(offset_admin.OffsetChangeRaced) as raced:
        offset_admin.guarded_change(store, "app", ["tail"], "reset", A, {"position": 5},
                                    count=_runs(["tail"], {}, {("tail", "queued"): 1}))
    assert "was written, but a run of it started meanwhile (DAG tail: 1 queued)" in str(raced.value)
    assert raced.value.result["after"] == {"position": 5}
    assert [e["offset"] for e in store.read("app").values()] == [{"position": 5}]
