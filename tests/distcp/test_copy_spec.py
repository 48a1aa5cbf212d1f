"""A copy job's plan records its typed config (without secrets) once; its tasks and its publish step read it.

As for connectors (``tests/runtime/test_parse_once.py``), counted through real runs in process: the
config is parsed by the plan step only, the secret options never enter the plan, and a plan of an
earlier version (no spec) still runs.
"""

from __future__ import annotations

import json

import pytest

from airflow_copycat.distcp import config as copy_config
from airflow_copycat.runtime import copy_job
from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.spec import CopySpec, spec_of_group

SECRET_OPTIONS = {"auto_mkdir": True, "token_like": "s3cr3t-option-value"}


@pytest.fixture
def job(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    for name in ("a", "b", "c"):
        (src / "t" / name).parent.mkdir(parents=True, exist_ok=True)
        (src / "t" / name).write_text(name * 100)
    return {"name": "sync", "source.url": str(src), "target.url": str(dst), "dataset.pattern": "*",
            "tasks.max": 2, "target.options": json.dumps({"auto_mkdir": True})}, dst


@pytest.fixture
def parses(monkeypatch):
    calls = []
    real = copy_config.parse_copy_config

    def counted(raw):
        calls.append(dict(raw))
        return real(raw)

    monkeypatch.setattr(copy_config, "parse_copy_config", counted)
    return calls


def _secrets(raw, group):
    spec = spec_of_group(group)
    return {k: raw[k] for k in (spec.secret_keys if spec else copy_job.secret_keys(raw)) if k in raw}


def test_the_copy_config_is_parsed_once_per_run_and_its_secrets_stay_out_of_the_plan(job, parses):
    raw, dst = job

    # When the job is planned, its tasks run and it is published
    plan = copy_job.make_copy_plan(raw)
    results = [run_group(g, {}, _secrets(raw, g)) for g in plan["groups"]]
    summary = copy_job.publish_copy(plan, results, raw)

    # Then every file arrived, the config was parsed once (by the plan), and the groups carry its typed
    # values without the secret option
    assert summary["status"] == "ok" and summary["files_copied"] == 3, summary
    assert sorted(p.name for p in (dst / "t").iterdir()) == ["a", "b", "c"]
    assert len(parses) == 1, parses
    spec = spec_of_group(plan["groups"][0])
    assert isinstance(spec, CopySpec) and "target.options" in spec.secret_keys
    assert "target.options" not in spec.values and spec.values["tasks.max"] == 2
    assert '"auto_mkdir"' not in json.dumps(plan)


def test_a_secret_is_typed_as_the_definition_types_it_and_nothing_else_is_read(job):
    raw, _ = job
    spec = CopySpec.of(copy_config.parse_copy_config(raw), copy_job.secret_keys(raw))

    values = spec.values_with({**raw, "target.options": json.dumps(SECRET_OPTIONS), "tasks.max": 99})

    assert values["target.options"] == copy_config.parse_copy_config(
        {**raw, "target.options": json.dumps(SECRET_OPTIONS)})["target.options"]
    assert values["tasks.max"] == 2  # the plan's, not the config's new value: only secrets are read


def test_a_plan_without_a_spec_still_runs_and_publishes(job, parses):
    raw, dst = job
    plan = copy_job.make_copy_plan(raw)
    old = dict(plan, groups=[{k: v for k, v in g.items() if k != "spec"} for g in plan["groups"]])

    results = [run_group(g, {}, _secrets(raw, g)) for g in old["groups"]]
    summary = copy_job.publish_copy(old, results, raw)

    assert summary["status"] == "ok" and summary["files_copied"] == 3, summary
    assert len(parses) == 1 + len([t for g in old["groups"] for t in g["tasks"]]) + 1  # plan, tasks, publish
