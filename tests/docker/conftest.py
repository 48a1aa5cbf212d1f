"""Tests of docker/ (the compose stack), run without a Docker engine.

Some of them read connections through Airflow's hooks: when this folder runs alone (no
tests/airflow/conftest.py setting up Airflow first), Airflow gets a throwaway AIRFLOW_HOME, removed
at exit, so it writes nothing into the user's home.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if not os.environ.get("AIRFLOW_HOME"):
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="copycat-docker-tests-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
