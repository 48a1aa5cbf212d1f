"""Optional parts name their extra when its modules are missing: each case runs in a fresh interpreter
in which the module cannot be imported (``sys.modules[name] = None``, as if it were not installed)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "jdbc": ("psycopg", "from airflow_copycat.connectors.jdbc.source import create_engine\n"
                        "create_engine({'connection.url': 'jdbc:postgresql://127.0.0.1:5432/test'})"),
    "cdc": ("psycopg", "from airflow_copycat.runtime.plugins import resolve_connector\n"
                       "resolve_connector('io.debezium.connector.postgresql.PostgresConnector')"),
    "distcp": ("cryptography", "from airflow_copycat.distcp.aes_stream import _file_key\n"
                               "_file_key(b'k' * 32, b'salt')"),
}


@pytest.mark.parametrize("extra", sorted(CASES))
def test_a_missing_extra_is_named_in_the_error(extra):
    # Given an interpreter without a module of the extra
    module, code = CASES[extra]
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.modules[{module!r}] = None\n{code}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    # When the part that needs it starts, Then it fails saying which module and which extra to install
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("airflow_copycat.extras.MissingExtra:"), proc.stderr[-2000:]
    assert f"'{module}'" in last and f"pip install 'airflow-copycat[{extra}]'" in last, last


def test_every_module_an_extra_covers_is_what_it_installs():
    # the extras the errors name exist in pyproject.toml, with the packages that bring those modules
    from airflow_copycat.extras import EXTRA_OF

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    distribution = {"psycopg": "psycopg", "pymysql": "pymysql", "adbc_driver_postgresql": "adbc-driver-postgresql",
                    "adbc_driver_manager": "adbc-driver-postgresql", "cryptography": "cryptography",
                    "backports": "backports.zstd", "compression": "backports.zstd"}
    for module, extra in EXTRA_OF.items():
        assert any(r.startswith(distribution[module]) for r in extras[extra]), (module, extra, extras[extra])
    assert any(r.startswith("psycopg") for r in extras["cdc"])
