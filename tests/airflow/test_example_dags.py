"""The example DAGs in dags/ parse in Airflow and are wired as their docs say."""

from __future__ import annotations

import datetime as dt

from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_example_dags_parse_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"copycat_demo", "copycat_logs_to_kafka", "copycat_kafka_to_parquet", "copycat_dlq_replay",
            "copycat_distcp_sync", "copycat_distcp_backfill", "copycat_jdbc_import", "copycat_jdbc_discovery",
            "copycat_offsets", "copycat_kafka_to_postgres", "copycat_postgres_cdc",
            "copycat_cdc_to_mariadb"} <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", ["copycat_demo", "copycat_logs_to_kafka", "copycat_kafka_to_parquet",
                                    "copycat_dlq_replay", "copycat_kafka_to_postgres", "copycat_postgres_cdc",
                                    "copycat_cdc_to_mariadb"])
def test_each_connector_is_plan_then_mapped_run_then_finish(dagbag, dag_id):
    dag = dagbag.get_dag(dag_id)
    plans = [t for t in dag.task_ids if t.endswith(".plan")]
    assert plans
    for plan in plans:
        group = plan.rsplit(".", 1)[0]
        run, finish = dag.get_task(f"{group}.run"), dag.get_task(f"{group}.finish")
        assert run.upstream_task_ids == {plan}
        assert finish.upstream_task_ids == {plan, f"{group}.run"}
        assert type(run).__name__ == "MappedOperator"


@pytest.mark.parametrize("dag_id", ["copycat_distcp_sync", "copycat_distcp_backfill"])
def test_each_copy_job_is_plan_then_mapped_run_then_publish(dagbag, dag_id):
    dag = dagbag.get_dag(dag_id)
    (plan,) = [t for t in dag.task_ids if t.endswith(".plan")]
    group = plan.rsplit(".", 1)[0]
    run, publish = dag.get_task(f"{group}.run"), dag.get_task(f"{group}.publish")
    assert run.upstream_task_ids == {plan} and publish.upstream_task_ids == {plan, f"{group}.run"}
    assert type(run).__name__ == "MappedOperator"


def test_the_backfill_copy_takes_its_dates_from_the_data_interval(dagbag):
    plan = dagbag.get_dag("copycat_distcp_backfill").get_task("events-daily.plan")
    assert plan.copy_config["date.range.start"] == "{{ data_interval_start }}"
    assert plan.copy_config["date.range.end"] == "{{ data_interval_end }}"


@pytest.mark.parametrize("dag_id, length", [("copycat_distcp_backfill", dt.timedelta(days=1)),
                                             ("copycat_jdbc_import", dt.timedelta(hours=1))])
def test_backfillable_dags_give_each_run_a_whole_interval(dagbag, dag_id, length):
    # a backfill run copies its data interval: with a cron *trigger* timetable it would be empty
    import pendulum
    from airflow.serialization.encoders import coerce_to_core_timetable

    run_after = pendulum.datetime(2026, 11, 20, 10, 30, tz="UTC")
    timetable = coerce_to_core_timetable(dagbag.get_dag(dag_id).timetable)  # as the scheduler holds it
    interval = timetable.infer_manual_data_interval(run_after=run_after)
    assert interval.end - interval.start == length and interval.end <= run_after


def test_the_parquet_dag_is_scheduled_on_the_alias_the_log_source_emits_through(dagbag):
    from airflow.sdk import AssetAlias

    source_finish = dagbag.get_dag("copycat_logs_to_kafka").get_task("app-logs.finish")
    emitted = {o.name for o in source_finish.outlets if isinstance(o, AssetAlias)}
    schedule = dagbag.get_dag("copycat_kafka_to_parquet").timetable.asset_condition
    assert emitted == {"copycat/app-logs"}
    assert {o.name for o in schedule.objects if isinstance(o, AssetAlias)} == emitted
