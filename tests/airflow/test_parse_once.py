"""Parse once, in real Airflow: through a ``dag.test()`` run of plan, run and finish, the connector
config is validated once (by the plan task), and the run task takes only the secret values of the keys
the plan's spec names from the rendered config (see airflow_copycat/runtime/spec.py)."""

from __future__ import annotations

from tests.airflow.test_operators import file_source, write_lines
from tests.support import parse_counts


def test_a_dag_run_validates_its_connector_config_once(make_dag, run_dag, tmp_path, unique, test_worker_config,
                                                       monkeypatch):
    # Given a DAG copying a file, whose config holds a secret
    log_file = tmp_path / "app.log"
    write_lines(log_file, 0, 5)
    topic, group = f"once-{unique}", f"lines-{unique}"
    dag = make_dag(f"parse_once_{unique}", file_source(unique, **{"api.token": "tok-secret-0123456789"}),
                   params={"input": str(log_file), "topic": topic}, in_process=True, worker_config=test_worker_config)
    counts = parse_counts.install(monkeypatch)

    # When it runs
    result = run_dag(dag)

    # Then it copied the file
    assert result.state == "success", result.states()
    assert result.xcom(f"{group}.finish")["records"] == 5
    # ... validating the config once, in the plan task; nobody parsed the framework keys again
    assert counts.calls["validate"] == 1, counts
    assert counts.calls["framework keys parsed"] == 1 and counts.calls["FrameworkSettings.of"] == 0, counts
    # ... the plan task named the secret keys (to mask them in its rendered fields, and before it planned:
    # the config and the one its Airflow connections resolved); the run task read them from the group's
    # spec, which names the secret key and holds no value
    assert counts.calls["Job.secret_keys"] == 3, counts
    plan = result.xcom(f"{group}.plan", key="plan")
    assert "api.token" in plan["groups"][0]["spec"]["secret_keys"]
    assert "tok-secret-0123456789" not in str(plan)
    assert counts.calls["restore_secrets"] == 1, counts
