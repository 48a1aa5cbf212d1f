"""Distcp in real Airflow: a ``copy_task_group`` DAG run with ``dag.test()``."""

from __future__ import annotations

import gzip

from tests.support.progress_lines import Line, final_line


def test_copy_dag_publishes_datasets_reports_them_and_announces_each(make_copy_dag, run_dag, tmp_path, unique):
    # Given a source tree of two datasets, one date-partitioned, and a DAG copying it in process
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "orders" / "2026" / "11" / "21").mkdir(parents=True)
    (src / "orders" / "2026" / "11" / "21" / "a.csv").write_text("id\n1\n")
    (src / "orders" / "2026" / "11" / "22").mkdir(parents=True)
    (src / "orders" / "2026" / "11" / "22" / "b.csv").write_text("id\n2\n")
    (src / "users").mkdir()
    (src / "users" / "u.json.gz").write_bytes(gzip.compress(b'{"id": 7}\n'))
    config = {"name": f"mirror-{unique}", "source.url": str(src), "target.url": "{{ params.target }}",
              "dataset.pattern": "*", "converters": "decompress", "partition.date.format": "%Y/%m/%d",
              "date.range.start": "{{ params.start }}", "date.range.end": "{{ params.end }}", "tasks.max": 2}
    dag = make_copy_dag(f"copy_{unique}", config, in_process=True,
                        params={"target": str(dst), "start": "2026-11-21", "end": "2026-11-22"})
    # When it runs for the interval [2026-11-21, 2026-11-22)
    result = run_dag(dag)
    # Then only the day in the interval is published (undated files are outside every date range)
    assert result.state == "success", result.log[-3000:]
    published = sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file() and "_copycat" not in p.parts)
    assert published == ["orders/2026/11/21/a.csv"]
    summary = result.xcom(f"mirror-{unique}.publish")
    assert summary["status"] == "ok" and summary["files_copied"] == 1 and summary["published"] == ["orders"]
    # And the publish task announced the published dataset through the job's alias
    events = result.asset_events()
    assert [(e["uri"], e["extra"]["files"], e["aliases"]) for e in events] == [
        (f"file://{dst}/orders", 1, [f"copycat/mirror-{unique}"])]  # as OpenLineage names it (operators/lineage.py)
    assert "dataset orders: published" in result.log
    # And the run task's log ended its progress with what the group copied
    assert final_line(result.log, 0, f"mirror-{unique}", unit="files") == Line(1, 1, 1)

    # When a run covers every date, Then the other day is added and the first one is found up to date
    result = run_dag(dag, run_conf={"start": "2026-01-01", "end": "2027-01-01"})
    assert result.state == "success", result.log[-3000:]
    published = sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file() and "_copycat" not in p.parts)
    assert published == ["orders/2026/11/21/a.csv", "orders/2026/11/22/b.csv"]
    assert result.xcom(f"mirror-{unique}.publish")["files_skipped"] == 1


def test_a_failed_file_fails_the_publish_after_publishing_the_other_datasets(make_copy_dag, run_dag, tmp_path,
                                                                             unique):
    # Given two datasets, one holding a corrupt gzip
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "good").mkdir(parents=True)
    (src / "good" / "g.txt.gz").write_bytes(gzip.compress(b"fine\n"))
    (src / "bad").mkdir()
    (src / "bad" / "b.txt.gz").write_bytes(gzip.compress(b"fine\n")[:-6] + b"garbage")
    (src / "bad" / "ok.txt").write_text("ok\n")
    config = {"name": f"corrupt-{unique}", "source.url": str(src), "target.url": str(dst), "dataset.pattern": "*",
              "converters": "decompress"}
    result = run_dag(make_copy_dag(f"corrupt_{unique}", config, in_process=True))
    # Then the good dataset is published (decompressed), nothing of the bad one is, and the run fails naming the file
    assert result.state == "failed"
    assert (dst / "good" / "g.txt").read_bytes() == b"fine\n"
    assert not (dst / "bad").exists()
    assert str(src / "bad" / "b.txt.gz") in result.log
    # ... and the publish task's summary, what was published and what failed, is in XCom before it failed
    summary = result.xcom(f"corrupt-{unique}.publish", key="failed_summary")
    assert summary["status"] == "failed" and summary["published"] == ["good"] and summary["not_published"] == ["bad"]
    assert any(str(src / "bad" / "b.txt.gz") in f for f in summary["failures"])


def test_a_target_that_is_the_source_is_refused_without_quoting_the_urls_password(make_copy_dag, run_dag, tmp_path,
                                                                                  unique):
    """The overlap problem shows target.url with its password hidden, and the copy job's secrets (which the
    operators register with Airflow's masker) include every key holding a URL with a password."""
    from airflow.sdk.log import redact

    from airflow_copycat.runtime.copy_job import secret_keys
    from tests.support.sftp_server import start_sftp_server

    root = tmp_path / "sftp-root"
    (root / "data").mkdir(parents=True)
    server, stop = start_sftp_server(root)
    try:
        # Given a copy job whose source and target are the same SFTP tree, its password in the URL
        url = f"sftp://{server.username}:{server.password}@{server.host}:{server.port}/data"
        config = {"name": f"self-{unique}", "source.url": url, "target.url": url}
        assert secret_keys(config) == {"source.url", "target.url"}
        # When it runs
        result = run_dag(make_copy_dag(f"self_{unique}", config, in_process=True))
    finally:
        stop()
    # Then the plan is refused naming target.url, whose password shows [hidden] even before Airflow's masking
    assert result.states()[(f"self-{unique}.plan", -1)] == "failed"
    assert f"target.url='sftp://copycat:[hidden]@{server.host}:{server.port}/data': is the source itself" in result.log
    assert server.password not in result.log
    # ... and the URL was registered with the masker
    assert server.password not in redact(f"copy to {url}")


def test_when_planning_fails_the_publish_task_fails_once_without_retries(make_copy_dag, run_dag, tmp_path, unique):
    # Given a copy job with an invalid config, in a DAG whose tasks would be retried twice
    (tmp_path / "src").mkdir()
    config = {"name": f"noplan-{unique}", "source.url": str(tmp_path / "src"), "target.url": str(tmp_path / "dst"),
              "tasks.max": 0}
    dag = make_copy_dag(f"noplan_{unique}", config, in_process=True, default_args={"retries": 2, "retry_delay": 1})
    # When it runs
    result = run_dag(dag)
    # Then the plan fails naming the problem; publish (which runs whatever came before) fails once, saying why
    states = result.states()
    assert result.state == "failed"
    assert states[(f"noplan-{unique}.plan", -1)] == states[(f"noplan-{unique}.publish", -1)] == "failed"
    assert result.try_number(f"noplan-{unique}.publish") == 1
    assert "tasks.max=0" in result.log and "planning failed, nothing to publish" in result.log


def test_a_bad_max_tasks_of_a_copy_is_named_with_the_copy_configs_problems(make_copy_dag, run_dag, tmp_path, unique):
    # Given a copy whose max_tasks renders to text and whose config has a bad key, in a DAG retried twice
    (tmp_path / "src").mkdir()
    config = {"name": f"count-{unique}", "source.url": str(tmp_path / "src"), "target.url": str(tmp_path / "dst"),
              "tasks.max": 0}
    dag = make_copy_dag(f"copycount_{unique}", config, in_process=True, max_tasks="{{ params.n }}", params={"n": "abc"},
                        default_args={"retries": 2, "retry_delay": 1})
    # When it runs, Then the plan fails once, naming both
    result = run_dag(dag)
    assert result.states()[(f"count-{unique}.plan", -1)] == "failed"
    assert result.try_number(f"count-{unique}.plan") == 1
    assert "max_tasks='abc': must be an integer" in result.log and "tasks.max=0: must be at least 1" in result.log
