"""The Java the tests run: ``JAVA_HOME``, else the one ``make setup`` chose (``.copycat/java.env``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def java_home() -> str:
    """``JAVA_HOME`` from the environment, else from ``.copycat/java.env`` (written by ``make setup``);
    fails the test, saying what to run, when there is neither."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    env_file = ROOT / ".copycat" / "java.env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith("export JAVA_HOME="):
                return line.split("=", 1)[1].strip().strip("'\"")
    pytest.fail("Spark needs Java: set JAVA_HOME, or run `make setup` (it writes .copycat/java.env)", pytrace=False)
