"""Progress of a running group (``airflow_copycat.runtime.progress``): tasks publish their counts while they
run -- to the runner in this process, or to the status topic of the real broker -- and the runner's lines
and last line agree with the group result. The lines' timing is covered by the CLI and Airflow tests."""

from __future__ import annotations

import time

from airflow_copycat.runtime import copy_job
from airflow_copycat.runtime.connector_config import load_connector_config
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.progress import GroupProgress, format_bytes
from airflow_copycat.runtime.worker import WorkerConfig


def counting(name: str, **extra) -> dict:
    return {"name": name, "connector.class": "tests.support.connectors:CountingSource", "topic": name,
            "counters": 2, "count": 30, "batch": 10, "tasks.max": 2, **extra}


def test_tasks_in_process_report_to_the_runner_and_the_last_line_is_the_result(worker_props, unique):
    # Given a group of two source tasks, and a runner watching it in this process
    config = counting(f"local-progress-{unique}")
    (group,) = make_plan(config, WorkerConfig(worker_props, env={}))["groups"]
    seen, lines = [], []
    progress = GroupProgress(group, worker_props, lines.append, local=True)

    def record(rec):
        seen.append(rec)
        progress.record(rec)

    # When the group runs with the runner's worker props
    with progress:
        result = run_group(group, progress.task_props, listener=record)
    # Then each task reported itself running, then done with the counts of its result
    for task in result["tasks"]:
        mine = [r for r in seen if r["task"] == task["task"]]
        assert mine[0]["state"] == "running" and mine[-1]["state"] == "done"
        assert (mine[-1]["records"], mine[-1]["bytes"]) == (task["records"], task["bytes"]) == (30, task["bytes"])
        assert {r["run"] for r in mine} == {progress.run_id} and {r["group"] for r in mine} == {0}
        assert all(set(r) == {"run", "connector", "group", "task", "kind", "state", "records", "bytes", "time"}
                   for r in mine)
    # And the current line and the last line say what the group moved
    assert progress.line() == f"group 0 of {config['name']}: 2/2 tasks done, 60 records, " \
                              f"{format_bytes(result['bytes'])} so far"
    assert progress.final_line(result) == f"group 0 of {config['name']}: 2/2 tasks done, 60 records, " \
                                          f"{format_bytes(result['bytes'])} in all"


def test_sink_tasks_report_what_they_put(worker_props, unique, tmp_path):
    # Given a topic of 60 records in 2 partitions, and a sink of two tasks reading it
    source = counting(f"sink-progress-src-{unique}", **{"topic.creation.default.partitions": 2})
    (group,) = make_plan(source, WorkerConfig(worker_props, env={}))["groups"]
    assert run_group(group, worker_props)["records"] == 60
    sink = {"name": f"sink-progress-{unique}", "connector.class": "tests.support.connectors:JsonFileSink",
            "topics": source["topic"], "dir": str(tmp_path / "out"), "tasks.max": 2}
    (group,) = make_plan(sink, WorkerConfig(worker_props, env={}))["groups"]
    seen = []
    progress = GroupProgress(group, worker_props, lambda line: None, local=True)
    # When the sink's group runs in process, watched
    with progress:
        result = run_group(group, progress.task_props, listener=lambda r: (seen.append(r), progress.record(r)))
    # Then each task reported running, then done with what it put
    assert result["status"] == "ok" and result["records"] == 60
    for task in result["tasks"]:
        mine = [r for r in seen if r["task"] == task["task"]]
        assert mine[0]["state"] == "running" and mine[-1]["state"] == "done" and mine[-1]["kind"] == "sink"
        assert (mine[-1]["records"], mine[-1]["bytes"]) == (task["records"], task["bytes"])
    assert progress.final_line(result) == f"group 0 of {sink['name']}: 2/2 tasks done, 60 records, " \
                                          f"{format_bytes(result['bytes'])} in all"


def test_tasks_publish_to_the_status_topic_and_the_runner_reads_only_its_own_run(worker_props, unique):
    # Given a runner that reads the status topic, and an earlier run's records already on it
    config = counting(f"topic-progress-{unique}")
    props = dict(worker_props, **{"status.storage.topic": f"copycat-status-{unique}"})
    (group,) = make_plan(config, WorkerConfig(props, env={}))["groups"]
    with GroupProgress(group, props, lambda line: None) as earlier:
        run_group(group, earlier.task_props)
    config["count"] = 50
    (group,) = make_plan(config, WorkerConfig(props, env={}))["groups"]
    lines: list[str] = []
    # When the group runs again, its tasks publishing to the topic (no listener: as on Spark executors)
    with GroupProgress(group, props, lines.append) as progress:
        result = run_group(group, progress.task_props)
        for _ in range(100):  # until the reader caught up with the last records
            if (progress.line() or "").startswith(f"group 0 of {config['name']}: 2/2 tasks done"):
                break
            time.sleep(0.1)
    # Then the runner saw both tasks done with this run's counts only (20 more records each), nothing of the earlier run
    assert result["records"] == 40
    assert progress.line() == f"group 0 of {config['name']}: 2/2 tasks done, 40 records, " \
                              f"{format_bytes(result['bytes'])} so far"


def test_copy_tasks_report_files_and_bytes(tmp_path):
    # Given a copy job of two datasets in two tasks (no Kafka)
    src, dst = tmp_path / "src", tmp_path / "dst"
    for dataset, name in [("orders", "a.csv"), ("orders", "b.csv"), ("users", "u.json")]:
        (src / dataset).mkdir(parents=True, exist_ok=True)
        (src / dataset / name).write_text(f"{dataset}/{name}\n" * 500)
    raw = load_connector_config({"name": "progress-copy", "source.url": str(src), "target.url": str(dst),
                                 "dataset.pattern": "*", "tasks.max": 2, "copycat.groups.max": 1})
    (group,) = copy_job.make_copy_plan(raw)["groups"]
    seen = []
    progress = GroupProgress(group, {}, lambda line: None, local=True)
    # When it runs in process, watched
    with progress:
        result = run_group(group, progress.task_props, listener=lambda r: (seen.append(r), progress.record(r)))
    # Then every task reported its files and bytes: running first, done last with its result's counts
    assert result["status"] == "ok" and result["records"] == 3
    for task in result["tasks"]:
        mine = [r for r in seen if r["task"] == task["task"]]
        assert mine[0]["state"] == "running" and mine[-1]["state"] == "done" and mine[-1]["kind"] == "copy"
        assert (mine[-1]["records"], mine[-1]["bytes"]) == (task["records"], task["bytes"])
    assert progress.final_line(result) == f"group 0 of progress-copy: 2/2 tasks done, 3 files, " \
                                          f"{format_bytes(result['bytes'])} in all"


def test_without_records_a_line_shows_sparks_tasks_and_says_why():
    # Given a runner that hears only from Spark (a copy job without Kafka, over Spark Connect)
    group = {"group": 1, "connector": "nightly-copy", "kind": "copy", "tasks": [{"task": 0}, {"task": 1}, {"task": 2}]}
    progress = GroupProgress(group, {}, lambda line: None)
    assert progress.line() is None  # nothing heard yet: no line
    # When Spark reports one task done and two running
    progress.spark(1, 3, 2)
    # Then the line says so, and that files are not counted
    assert progress.line() == "group 1 of nightly-copy: 1/3 tasks done, 2 running so far " \
                              "(files are not reported without Kafka)"
