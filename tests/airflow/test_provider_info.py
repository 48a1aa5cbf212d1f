"""The provider as Airflow sees it: metadata, registration, and the conventions of its operators."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from airflow.sdk import DAG, BaseHook, BaseOperator

from airflow_copycat import __version__
from airflow_copycat.get_provider_info import get_provider_info
from airflow_copycat.operators.finish import CopycatFinishOperator
from airflow_copycat.operators.offsets import CopycatOffsetsOperator
from airflow_copycat.operators.plan import CopycatPlanOperator
from airflow_copycat.operators.run import CopycatRunTaskGroupOperator
from airflow_copycat.sensors.partitions import CopycatPartitionSensor

OPERATORS = (CopycatPlanOperator, CopycatRunTaskGroupOperator, CopycatFinishOperator, CopycatOffsetsOperator,
             CopycatPartitionSensor)


def test_provider_info_validates_against_airflows_schema():
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "airflow-copycat"
    assert info["versions"][0] == __version__


def test_airflow_providers_list_shows_the_provider(cli_env):
    out = subprocess.run([str(Path(sys.executable).parent / "airflow"), "providers", "list", "-o", "json"],
                         env=cli_env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    providers = {p["package_name"]: p for p in json.loads(out.stdout[out.stdout.index("["):])}
    assert providers["airflow-copycat"]["version"] == __version__
    assert "apache-airflow-providers-apache-spark" in providers  # one broken provider hides none


def test_airflow_loads_the_offsets_page_plugin_from_the_entry_point_the_provider_info_names(cli_env):
    from importlib.metadata import entry_points

    from airflow.plugins_manager import is_valid_plugin

    (listed,) = get_provider_info()["plugins"]
    (entry,) = [e for e in entry_points(group="airflow.plugins") if e.name == listed["name"]]
    assert entry.value.replace(":", ".") == listed["plugin-class"]
    assert is_valid_plugin(entry.load()) and entry.load().name == listed["name"]
    out = subprocess.run([str(Path(sys.executable).parent / "airflow"), "plugins", "-o", "json"],
                         env=cli_env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    plugins = {p["name"]: p for p in json.loads(out.stdout[out.stdout.index("["):])}
    page = plugins[listed["name"]]
    assert [a["url_prefix"] for a in page["fastapi_apps"]] == ["/copycat"]
    assert [(v["href"], v["category"]) for v in page["external_views"]] == [("/copycat/offsets", "browse")]


def test_every_module_the_provider_lists_imports_and_holds_what_it_says():
    info = get_provider_info()
    for section, base in (("operators", BaseOperator), ("hooks", BaseHook)):
        for entry in info[section]:
            assert entry["integration-name"] in {i["integration-name"] for i in info["integrations"]}
            for name in entry["python-modules"]:
                module = importlib.import_module(name)
                classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
                           if issubclass(c, base) and c.__module__ == name]
                assert classes, f"{name} defines no {base.__name__}"
    for conn in info.get("connection-types", []):
        module, _, cls = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == conn["connection-type"]


def test_the_run_operators_extra_link_is_registered_with_the_providers_manager():
    from airflow.providers_manager import ProvidersManager

    from airflow_copycat.operators.links import SparkApplicationLink

    assert "airflow_copycat.operators.links.SparkApplicationLink" in ProvidersManager().extra_links_class_names
    assert [type(link) for link in CopycatRunTaskGroupOperator.operator_extra_links] == [SparkApplicationLink]


def test_the_kafka_connection_type_is_served_by_the_copycat_hook_unless_the_kafka_provider_is():
    from importlib.metadata import PackageNotFoundError, distribution

    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    try:
        distribution("apache-airflow-providers-apache-kafka")
        owner = ("apache-airflow-providers-apache-kafka", "airflow.providers.apache.kafka.hooks.base.KafkaBaseHook")
    except PackageNotFoundError:
        owner = ("airflow-copycat", "airflow_copycat.hooks.kafka.CopycatKafkaHook")
    hook = ProvidersManagerTaskRuntime().hooks["kafka"]
    assert (hook.package_name, hook.hook_class_name) == owner  # (without the provider: test_hooks.py runs it)


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda o: o.__name__)
def test_operators_take_keyword_arguments_only(operator):
    params = list(inspect.signature(operator.__init__).parameters.values())[1:]
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params), params


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda o: o.__name__)
def test_template_fields_are_attributes_and_documented_as_templated(operator):
    doc = inspect.getdoc(operator)
    for field in operator.template_fields:
        param = doc.split(f":param {field}:", 1)
        assert len(param) == 2, f"{operator.__name__} does not document {field}"
        assert "(templated)" in param[1].split(":param", 1)[0], f"{field} is not marked (templated)"


def test_building_the_operators_touches_no_connection_or_file(tmp_path):
    # Given connections that do not exist and a config file that does not exist yet
    missing = str(tmp_path / "not-yet.json")
    with DAG("conventions", schedule=None) as dag:
        plan = CopycatPlanOperator(task_id="plan", connector_config=missing, kafka_conn_id="no_such_conn")
        run = CopycatRunTaskGroupOperator(task_id="run", group={"group": 0}, connector_config=missing,
                                          kafka_conn_id="no_such_conn", spark_conn_id="no_such_spark")
        finish = CopycatFinishOperator(task_id="finish", plan_task_id="plan", run_task_id="run", connector="c")
    # Then nothing was read: the hooks are built when first used, in execute
    assert set(dag.task_dict) == {"plan", "run", "finish"}
    for op in (plan, run):
        assert "hook" not in vars(op)
        assert op.template_fields and all(hasattr(op, f) for f in op.template_fields)
    assert not os.path.exists(missing)
    assert [o.name for o in finish.outlets] == ["copycat/c"]
