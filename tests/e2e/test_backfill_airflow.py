"""A backfill of the example DAG ``copycat_jdbc_import``, created through Airflow's REST API
and run by the real scheduler (LocalExecutor, Spark ``local[2]``): each backfill run imports
exactly the rows whose ``updated_at`` lies in its hour, once, and the live offsets of the
connector stay where the live run left them."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from airflow_copycat.runtime.windows import is_window_namespace
from tests.support.jdbc_airflow import CONNECTOR, DAG_ID, TOPICS, records_since, topic_positions

pytestmark = pytest.mark.slow

FINISH_TASK = f"{CONNECTOR}.finish"


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_backfill_through_rest_api_imports_its_hours_once_and_leaves_live_offsets(jdbc_airflow):
    airflow, s = jdbc_airflow, jdbc_airflow.services
    with s.logs_on_failure():
        s.wait_for_backfills_completed(DAG_ID)  # Airflow allows one active backfill per DAG
        live_before = airflow.offsets()
        assert CONNECTOR in live_before, f"the live run left no offsets: {sorted(live_before)}"
        positions = topic_positions(airflow.bootstrap)
        hours = [airflow.hour(i) for i in (1, 2, 3)]
        expected = {h: airflow.rows_between(h, h + dt.timedelta(hours=1)) for h in hours}
        assert all(expected[h]["orders"] for h in hours), expected

        backfill = s.api("POST", "/backfills", json={
            "dag_id": DAG_ID, "from_date": _iso(hours[0]), "to_date": _iso(hours[-1]), "max_active_runs": 1})
        assert backfill["dag_id"] == DAG_ID

        starts = {_iso(h) for h in hours}
        runs = s.wait_for_runs(DAG_ID, lambda r: r["run_type"] == "backfill" and r["data_interval_start"] in starts,
                               len(hours), timeout=900)
        assert {r["data_interval_start"]: r["state"] for r in runs} == {h: "success" for h in starts}
        for r in runs:  # each run covers one hour of the timetable
            assert _parse(r["data_interval_end"]) - _parse(r["data_interval_start"]) == dt.timedelta(hours=1)
        assert s.api("GET", f"/backfills/{backfill['id']}")["dag_id"] == DAG_ID

        # Kafka: exactly the rows of the three hours arrived, each once
        arrived = records_since(airflow.bootstrap, positions)
        for table, topic in TOPICS.items():
            ids = [v["id"] for v in arrived[topic]]
            want = set().union(*(expected[h][table] for h in hours))
            assert sorted(ids) == sorted(want), f"{topic}: got {sorted(ids)}, want {sorted(want)}"

        # the live offsets were neither moved nor rewritten; the windows' own offsets were deleted
        after = airflow.offsets()
        assert after[CONNECTOR] == live_before[CONNECTOR]
        assert not [name for name in after if is_window_namespace(name)], sorted(after)

        # the finish task's XCom names each run's window and what it copied per table
        for r in runs:
            start = _parse(r["data_interval_start"])
            summary = s.xcom(DAG_ID, r["dag_run_id"], FINISH_TASK)
            assert summary["status"] == "ok", summary
            assert (_parse(summary["window"]["start"]), _parse(summary["window"]["end"])) == (
                start, start + dt.timedelta(hours=1)), summary["window"]
            want = expected[start]
            assert summary["topics"] == {TOPICS[t]: len(want[t]) for t in TOPICS if want[t]}, summary["topics"]
            per_table = {p["partition"]["table"]: p["records"] for p in summary["partitions"]}
            assert per_table == {t: len(want[t]) for t in TOPICS}, summary["partitions"]

        # a rerun of a backfill run (cleared, as from the UI) reads its hour again: the same records
        rerun = runs[1]
        hour = _parse(rerun["data_interval_start"])
        positions = topic_positions(airflow.bootstrap)
        s.api("POST", f"/dags/{DAG_ID}/clearTaskInstances", json={
            "dry_run": False, "dag_run_id": rerun["dag_run_id"], "only_failed": False, "reset_dag_runs": True})
        again = s.wait_for_runs(DAG_ID, lambda r: r["dag_run_id"] == rerun["dag_run_id"], 1, timeout=600)
        assert again[0]["state"] == "success", again
        rerun_records = records_since(airflow.bootstrap, positions)
        for table, topic in TOPICS.items():
            first = [v for v in arrived[topic] if v["id"] in expected[hour][table]]
            assert first, f"no {table} rows in {hour}"
            assert sorted(map(_canonical, rerun_records[topic])) == sorted(map(_canonical, first)), topic
        assert airflow.offsets()[CONNECTOR] == live_before[CONNECTOR]


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)
